"""A user's regular expressions, run so that none can hang a trial (docs/trainers.md, "When a
script misbehaves").

Every pattern a user writes (``trainer.metrics.pattern``) is compiled here, once:

- with RE2 (the ``google-re2`` package), a linear-time engine, whenever the pattern is in
  its syntax — most are: named groups, classes, repetition. Its time per line grows with
  the line's length, never exponentially, whatever the pattern;
- else (a backreference, a lookaround: what RE2 refuses) with the ``regex`` package, whose
  matcher stops after `LINE_TIMEOUT_S` on one line: the search then raises `PatternTimeout`,
  naming the pattern and the line, and the trial's attempt fails with that message.

RE2's ``\\d``, ``\\w`` and ``\\s`` are ASCII classes (Python's are Unicode): the numbers a
training script prints are ASCII.
"""

from __future__ import annotations

import re
from typing import Any

import re2
import regex

from stepscale.errors import UsageError

LINE_TIMEOUT_S = 1.0  # the longest one line may take a pattern RE2 cannot run
RE2, BACKTRACKING = "re2", "regex"  # the engines, as `BoundedPattern.engine` names them


class PatternTimeout(Exception):
    """A pattern took longer than `LINE_TIMEOUT_S` on one line (catastrophic backtracking)."""

    def __init__(self, pattern: str, line: str, limit_s: float = LINE_TIMEOUT_S) -> None:
        self.pattern = pattern
        self.line = line
        super().__init__(
            f"trainer.metrics.pattern {pattern!r} took more than {limit_s:g} s on one line of "
            f"{len(line)} characters and was stopped (catastrophic backtracking: nested "
            f"repetition or a backreference on a long line): {line[:200]!r}"
            f"{' …' if len(line) > 200 else ''}. Rewrite it in RE2's syntax (no "
            "backreferences or lookarounds), which runs in linear time"
        )


class PatternError(UsageError, ValueError):
    """A pattern that does not compile (the message says why, as Python's `re` does); bad
    input, so ``sweep run`` exits 2 with it."""


def _re2_options() -> Any:
    options = re2.Options()
    options.log_errors = False  # RE2 would print every pattern it refuses on stderr
    return options


_OPTIONS = _re2_options()
_UNANCHORED = getattr(getattr(re2, "_Anchor", None), "UNANCHORED", None)


class BoundedPattern:
    """A compiled pattern whose `search` cannot hang: ``pattern``, ``engine`` (`RE2` or
    `BACKTRACKING`), ``groupindex`` (group name → number) and `search`."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        try:
            re.compile(pattern)  # Python's syntax is the documented one: its errors are
        except re.error as exc:  # the ones a user is shown
            raise PatternError(str(exc)) from None
        try:
            # RE2 on UTF-8 bytes: its Python binding maps byte offsets back to characters
            # on str input, which doubles its time per line; only the groups' text is used
            self._compiled: Any = re2.compile(pattern.encode(), _OPTIONS)
            self.engine = RE2
        except re2.error:
            try:
                self._compiled = regex.compile(pattern)
            except regex.error as exc:
                raise PatternError(str(exc)) from None
            self.engine = BACKTRACKING
        self.groupindex: dict[str, int] = {
            k.decode() if isinstance(k, bytes) else k: v
            for k, v in self._compiled.groupindex.items()
        }
        # The binding's own matcher, which gives the groups' byte spans: a third of the time
        # of its `search` per matching line (its match object is pure Python); its public
        # `search` if a later version of the binding has no such thing.
        self._spans = getattr(getattr(self._compiled, "_regexp", None), "Match", None)
        if _UNANCHORED is None:
            self._spans = None

    def search(self, line: str) -> Any:
        """The first match in ``line`` (an object with ``groupdict()`` and ``group(name)``,
        of str), or None; `PatternTimeout` when a backtracking pattern takes too long."""
        if self.engine == RE2:
            text = line.encode("utf-8", errors="replace")
            if self._spans is None:
                match = self._compiled.search(text)
                return None if match is None else Re2Match(match.groupdict())
            spans = self._spans(_UNANCHORED, text, 0, len(text))
            if spans[0][0] < 0:
                return None
            return Re2Match(
                {
                    name: None if spans[i][0] < 0 else text[spans[i][0] : spans[i][1]]
                    for name, i in self.groupindex.items()
                }
            )
        try:
            return self._compiled.search(line, timeout=LINE_TIMEOUT_S)
        except TimeoutError:
            raise PatternTimeout(self.pattern, line) from None

    def __repr__(self) -> str:
        return f"BoundedPattern({self.pattern!r}, engine={self.engine})"


class Re2Match:
    """A match of RE2 on a line's bytes, with its groups as text (as `re.Match` gives them)."""

    def __init__(self, groups: dict[Any, bytes | None]) -> None:
        self.groups = {
            (k.decode() if isinstance(k, bytes) else k): None
            if v is None
            else v.decode("utf-8", errors="replace")
            for k, v in groups.items()
        }

    def groupdict(self) -> dict[str, str | None]:
        """Named groups → the text each matched (None: did not take part)."""
        return dict(self.groups)

    def group(self, name: str) -> str | None:
        """The text group ``name`` matched."""
        return self.groups[name]


def compile_pattern(pattern: str, key: str = "trainer.metrics.pattern") -> BoundedPattern:
    """``pattern`` compiled with a bound on its time per line (the module docstring); every
    pattern the reader applies comes from here. `PatternError` (a `UsageError`) naming
    ``key`` when it does not compile."""
    try:
        return BoundedPattern(pattern)
    except PatternError as exc:
        raise PatternError(f"{key}: {pattern!r} does not compile: {exc}") from None


__all__ = ["LINE_TIMEOUT_S", "BoundedPattern", "PatternError", "PatternTimeout", "compile_pattern"]
