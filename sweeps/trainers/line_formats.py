"""Metrics read from a training script's own output (``trainer.metrics``): the registered
line formats and the stream that turns printed text into records.

A format reads one line and gives its fields (``step`` and numeric metrics) or nothing.
The formats are plug-ins registered by name (`line_format`): ``kv_colon`` (``key: value``
pairs), ``kv_equals`` (``key=value`` pairs), ``json`` (one JSON object per line), ``csv``
(a header row, then rows) and ``regex`` (named groups). `RecordStream` applies the rules
every format shares (docs/trainers.md, "An existing script, unmodified"):

- text is split into lines at ``\\n``; of a line, only what follows its last ``\\r`` is read
  (what a terminal keeps: a progress bar's redraws are overwritten, never read);
- names are mapped first (``names: {val_loss: eval_loss, iter: step}``);
- a line that gives ``step`` sets the current step; a line that gives metrics without a
  step belongs to the last step seen (a step printed on another line than its losses);
  metrics before any step are ignored;
- ``nan``/``inf`` are read as non-finite numbers (a diverged trial); a line that matches
  nothing, or gives no number, is ignored.

Imports nothing of Hydra or the analysis: it runs inside a trial's job.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from stepscale.errors import UsageError
from stepscale.sweeps.trainers.patterns import PatternError, compile_pattern

JSONL = "jsonl"  # the default source: the script appends stepscale's records itself
STREAMS = ("stdout", "stderr")  # sources the job reads from the program's pipes
STEP, EVAL_LOSS = "step", "eval_loss"
NUMBER = r"[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf(?:inity)?)"
KEPT_LINES = 10  # the last lines of output a failure message quotes

Fields = dict[str, float]


def number(text: str) -> float | None:
    """``text`` as a number (``nan``, ``inf``, ``-inf`` too, any case), or None."""
    try:
        return float(text.strip())
    except ValueError:
        return None


@dataclass(frozen=True)
class MetricsSpec:
    """Where a command trainer's metrics come from and how its lines read (picklable)."""

    source: str = JSONL  # jsonl | stdout | stderr | a file the script writes (relative to its cwd)
    format: str = JSONL  # a registered line format (FORMATS), or jsonl for the jsonl source
    patterns: tuple[str, ...] = ()  # regex: one or more patterns with named groups
    names: dict[str, str] = field(default_factory=dict)  # the script's name → stepscale's

    @property
    def parsed(self) -> bool:
        """Does the job parse the script's output (and write metrics.jsonl itself)?"""
        return self.source != JSONL

    def describe(self) -> str:
        """The format as a failure message quotes it."""
        if self.format == "regex":
            return "regex " + " | ".join(repr(p) for p in self.patterns)
        return self.format


class LineFormat:
    """One line format: `fields` of a line (after names are mapped), or None."""

    name: ClassVar[str]

    def __init__(self, spec: MetricsSpec) -> None:
        self.names = spec.names

    @classmethod
    def check(cls, spec: MetricsSpec) -> None:
        """Refuse a spec this format cannot read (`UsageError` naming the key)."""
        if spec.patterns:
            raise UsageError(
                f"trainer.metrics.pattern: only the regex format takes a pattern, not {cls.name}"
            )

    def fields(self, line: str) -> Fields | None:
        """The numeric fields of ``line`` by (mapped) name; None when it gives none."""
        raise NotImplementedError

    def _named(self, pairs: list[tuple[str, str]]) -> Fields | None:
        out = {}
        for key, text in pairs:
            value = number(text)
            if value is not None:
                out[self.names.get(key, key)] = value
        return out or None


FORMATS: dict[str, type[LineFormat]] = {}


def line_format(cls: type[LineFormat]) -> type[LineFormat]:
    """Class decorator: register a line format under its ``name``."""
    FORMATS[cls.name] = cls
    return cls


@line_format
class KeyColon(LineFormat):
    """``key: value`` pairs anywhere in a line (``step: 100  loss: 2.31``), as Guild AI reads
    output scalars; a key is a word (letters, digits, ``_ . / -``), not starting with a digit
    nor right after a colon (``WARNING:tensorflow: 5 calls`` is no pair)."""

    name = "kv_colon"
    PAIR = re.compile(rf"(?<![\w./:-])([A-Za-z_][\w./-]*)\s*:\s*({NUMBER})(?![\w.])", re.I)

    def fields(self, line: str) -> Fields | None:
        return self._named(self.PAIR.findall(line))


@line_format
class KeyEquals(LineFormat):
    """``key=value`` pairs anywhere in a line (``step=100 loss=2.31``)."""

    name = "kv_equals"
    PAIR = re.compile(rf"(?<![\w./-])([A-Za-z_][\w./-]*)=({NUMBER})(?![\w.])", re.I)

    def fields(self, line: str) -> Fields | None:
        return self._named(self.PAIR.findall(line))


@line_format
class JsonLine(LineFormat):
    """One JSON object per line (from the line's first ``{``); numbers are metrics, ``null``
    is a non-finite value, other values are ignored."""

    name = "json"

    def fields(self, line: str) -> Fields | None:
        start = line.find("{")
        if start < 0:
            return None
        try:
            obj = json.loads(line[start:])
        except ValueError:
            return None
        if not isinstance(obj, dict):
            return None
        pairs = []
        for key, value in obj.items():
            if value is None:
                pairs.append((str(key), "nan"))
            elif isinstance(value, int | float | str) and not isinstance(value, bool):
                pairs.append((str(key), str(value)))
        return self._named(pairs)


@line_format
class CsvRows(LineFormat):
    """A header row, then rows (``step,train_loss,val_loss`` / ``100,2.3,``): the header is the
    first line whose columns (mapped) include ``step``; a row has as many columns as the
    header; empty cells are skipped, a repeated header is ignored."""

    name = "csv"

    def __init__(self, spec: MetricsSpec) -> None:
        super().__init__(spec)
        self.header: list[str] | None = None

    def fields(self, line: str) -> Fields | None:
        cells = [c.strip() for c in next(csv.reader([line]), [])]
        if self.header is None:
            named = [self.names.get(c, c) for c in cells]
            if STEP in named and all(number(c) is None for c in cells if c):
                self.header = named
            return None
        if len(cells) != len(self.header):
            return None
        return self._named([(k, c) for k, c in zip(self.header, cells, strict=True) if c])

    def _named(self, pairs: list[tuple[str, str]]) -> Fields | None:
        out = {k: v for k, text in pairs if (v := number(text)) is not None}
        return out or None


@line_format
class RegexLines(LineFormat):
    """Regular expressions with named groups, tried in order; the first that matches a line
    gives its fields: ``step`` and every other group that matched a number. Some pattern
    must have a ``step`` group and some an eval loss (after ``names``); a pattern without
    ``step`` gives metrics of the last step seen."""

    name = "regex"

    def __init__(self, spec: MetricsSpec) -> None:
        super().__init__(spec)
        self.compiled = [compile_pattern(p) for p in spec.patterns]

    @classmethod
    def check(cls, spec: MetricsSpec) -> None:
        if not spec.patterns:
            raise UsageError(
                "trainer.metrics.pattern: the regex format needs a pattern with named groups, "
                r"e.g. 'step (?P<step>\d+): .*val loss (?P<val_loss>\S+)'"
            )
        groups: set[str] = set()
        for p in spec.patterns:
            try:
                compiled = compile_pattern(p)
            except PatternError as exc:
                raise UsageError(
                    f"trainer.metrics.pattern: {p!r} does not compile: {exc}"
                ) from None
            groups |= {spec.names.get(g, g) for g in compiled.groupindex}
        if STEP not in groups:
            raise UsageError(
                f"trainer.metrics.pattern: {' | '.join(repr(p) for p in spec.patterns)} has no "
                "named group 'step', (?P<step>\\d+): a pattern must say which step the numbers "
                "belong to (a pattern without one gives metrics of the last step seen)"
            )
        if EVAL_LOSS not in groups:
            raise UsageError(
                f"trainer.metrics.pattern: no pattern gives the eval loss (groups "
                f"{sorted(groups)}): name a group eval_loss, or map yours with "
                "trainer.metrics.names, e.g. {val_loss: eval_loss}"
            )

    def fields(self, line: str) -> Fields | None:
        for compiled in self.compiled:
            match = compiled.search(line)
            if match is not None:
                return self._named([(k, v) for k, v in match.groupdict().items() if v is not None])
        return None


class RecordStream:
    """Text of a script's output in, records out (the rules of the module docstring).
    Keeps the last lines for a failure message and counts the records it gave."""

    def __init__(self, spec: MetricsSpec) -> None:
        self.spec = spec
        self.format = FORMATS[spec.format](spec)
        self.step: int | None = None
        self.partial = ""
        self.records = 0
        self.lines = 0
        self.last_lines: deque[str] = deque(maxlen=KEPT_LINES)

    def feed(self, text: str) -> list[dict[str, Any]]:
        """Records of the lines ``text`` completes (a partial last line waits for the rest)."""
        *lines, self.partial = (self.partial + text).split("\n")
        return [r for line in lines if (r := self.line(line)) is not None]

    def close(self) -> list[dict[str, Any]]:
        """Records of the last line when the output ended without a newline."""
        rest, self.partial = self.partial, ""
        return [r for r in [self.line(rest)] if r is not None] if rest.strip() else []

    def line(self, raw: str) -> dict[str, Any] | None:
        """The record of one line, or None (a step alone only moves the current step)."""
        shown = raw.rstrip("\r").rpartition("\r")[2]  # what a terminal keeps of the line
        if not shown.strip():
            return None
        self.lines += 1
        self.last_lines.append(shown)
        fields = self.format.fields(shown)
        if not fields:
            return None
        if STEP in fields:
            step = fields.pop(STEP)
            if not math.isfinite(step) or step < 0 or step != int(step):
                return None
            self.step = int(step)
        if self.step is None or not fields:
            return None
        self.records += 1
        return {STEP: self.step, **fields}

    def no_record_message(self, where: str) -> str:
        """Why an attempt whose output gave no record failed: the format and the last lines."""
        shown = "\n".join(f"    {line[:200]}" for line in self.last_lines) or "    (no output)"
        return (
            f"trainer.metrics: no line of the trainer's {where} gave a record with format "
            f"{self.spec.describe()} ({self.lines} lines read); its last lines:\n{shown}"
        )


def read_metrics(value: Any) -> MetricsSpec:
    """The `MetricsSpec` of ``trainer.metrics`` (None: the jsonl default; a string: a source
    in the jsonl format); mistakes → `UsageError` naming the key."""
    if value is None or value == JSONL:
        return MetricsSpec()
    if isinstance(value, str):
        value = {"source": value}
    if not isinstance(value, Mapping):
        raise UsageError(
            f"trainer.metrics: expected a mapping (source, format, pattern, names), got {value!r}"
        )
    unknown = sorted(set(value) - {"source", "format", "pattern", "names"})
    if unknown:
        raise UsageError(
            f"trainer.metrics: unknown key(s) {', '.join(unknown)}; it has source, format, pattern, names"
        )
    source = str(value.get("source") or JSONL)
    fmt = value.get("format")
    if source == JSONL:
        if fmt not in (None, JSONL) or value.get("pattern") or value.get("names"):
            raise UsageError(
                "trainer.metrics.source: jsonl (the script appends stepscale's records to "
                "metrics.jsonl) takes no format, pattern or names; say where the script prints "
                "its metrics: source: stdout, stderr or a file it writes"
            )
        return MetricsSpec()
    if fmt is None:
        raise UsageError(
            f"trainer.metrics.format: say how the lines of {source} read: one of {', '.join(FORMATS)}"
        )
    if fmt not in FORMATS:
        raise UsageError(
            f"trainer.metrics.format: unknown line format {fmt!r}; choose one of {', '.join(FORMATS)}"
        )
    pattern = value.get("pattern") or ()
    patterns = (pattern,) if isinstance(pattern, str) else tuple(pattern)
    if not all(isinstance(p, str) for p in patterns):
        raise UsageError(
            f"trainer.metrics.pattern: expected a string or a list of strings, got {pattern!r}"
        )
    names = value.get("names") or {}
    if not isinstance(names, Mapping) or not all(isinstance(v, str) for v in names.values()):
        raise UsageError(
            f"trainer.metrics.names: expected a mapping of names, e.g. {{val_loss: eval_loss}}, got {names!r}"
        )
    spec = MetricsSpec(source, str(fmt), patterns, {str(k): v for k, v in names.items()})
    FORMATS[spec.format].check(spec)
    return spec


def parse_text(spec: MetricsSpec, text: str) -> tuple[list[dict[str, Any]], RecordStream]:
    """Every record a whole log gives, and the stream (its counts and last lines)."""
    stream = RecordStream(spec)
    return stream.feed(text) + stream.close(), stream


__all__ = ["FORMATS", "MetricsSpec", "RecordStream", "line_format", "parse_text", "read_metrics"]
