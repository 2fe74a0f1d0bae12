"""Text of a script's output in, checked records out (docs/trainers.md, section 2b).

- Text is split into lines at ``\\n``; of a line only what follows its last ``\\r`` is read
  (what a terminal keeps: a progress bar's redraws are overwritten, never read), and
  terminal colour codes are removed. A line is read up to `MAX_LINE` characters (the text
  after its last ``\\r``); the rest is skipped and counted, so an endless line cannot grow
  memory.
- The format gives the line's fields (names mapped); ``values`` expressions add metrics
  computed from them (``eval_loss: log(ppl)``).
- The step: a ``step`` field (default), or ``step_every`` (the n-th line with values is
  step n × N), or a ``step`` expression of captured fields and the trial's settings. With an
  expression, a line is a step line when it gives the expression's **counter** — its last
  name that is not a trial setting (``batch`` in ``epoch * steps_per_epoch + batch``); its
  other names come from that line, else the trial's settings, else the last earlier line
  that gave them (``Epoch 3/10`` on a line of its own). The expression's names are counters,
  not metrics.
- A value printed without a step belongs to the last step line (``unstepped: last``, the
  default) or to the next one (``unstepped: next``: an eval printed at the top of iteration
  N, before ``step N: …``). Values printed before the first step line are at step 0 on a run
  that starts from scratch — once a step line has come: an output that never prints a step
  records nothing (and more than `MAX_HELD` value lines without a step fail the attempt);
  on a resumed run their step is unknown and they are not recorded (counted: `unplaced`).
  With ``next``, values after the last step line are not recorded either.
- Every record passes `StepChecker` (`UnreliableStep` names the offending lines).
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Mapping
from typing import Any

from stepscale.sweeps.trainers.expr import ExprError, Node, evaluate, parse
from stepscale.sweeps.trainers.expr import names as expr_names
from stepscale.sweeps.trainers.line_formats import (
    FORMATS,
    KEPT_LINES,
    STEP,
    CsvRows,
    Fields,
    LineConflict,
    MetricsSpec,
)
from stepscale.sweeps.trainers.step_checks import StepChecker, UnreliableStep

MAX_LINE = 65536  # characters of one line that are read (after its last carriage return)
MAX_HELD = 256  # values held for a step line that has not come yet
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def numeric_settings(settings: Mapping[str, Any] | None) -> dict[str, float]:
    """The numbers among a trial's settings (dotted keys), for expressions."""
    out: dict[str, float] = {}
    for key, value in (settings or {}).items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = float(value)
    return out


def step_counter(text: str, settings: Mapping[str, float]) -> str | None:
    """The counter of a step expression: its last name (in the text) that is not a trial
    setting (None when every name is a setting)."""
    node_names = expr_names(parse(text, dotted=True))
    ordered = [n for n in _NAME.findall(text) if n in node_names and n not in settings]
    return ordered[-1] if ordered else None


class RecordStream:
    """Text in (`feed`, `close`), records out, each checked. Keeps the last lines for a
    failure message and counts the records it gave."""

    def __init__(
        self,
        spec: MetricsSpec,
        settings: Mapping[str, Any] | None = None,
        resumed: bool = False,
    ) -> None:
        self.spec = spec
        self.settings = numeric_settings(settings)
        self.resumed = resumed
        self.step_node: Node | None = parse(spec.step, dotted=True) if spec.step else None
        self.step_names = expr_names(self.step_node) if self.step_node else set()
        self.counter = step_counter(spec.step, self.settings) if spec.step else STEP
        if spec.step and self.counter is None:
            raise UnreliableStep(
                f"trainer.metrics.step {spec.step!r} names only trial settings: it must read "
                "a counter the script prints",
                [],
            )
        self.format: Any = None  # a file format's source gives fields itself (`place`)
        if spec.format == CsvRows.name:
            self.format = CsvRows(spec, None if spec.step_every else self.counter)
        elif spec.format in FORMATS:
            self.format = FORMATS[spec.format](spec)
        self.values = {k: parse(v, dotted=True) for k, v in spec.values.items()}
        max_steps = self.settings.get("max_steps")
        self.checker = StepChecker(int(max_steps) if max_steps is not None else None)
        self.context: dict[str, float] = {}
        self.step: int | None = None
        self.counted = 0  # value lines seen (step_every)
        self.pending: list[tuple[Fields, int, str]] = []  # unstepped: next
        self.partial = ""
        self.skipping = False  # inside a line longer than MAX_LINE
        self.records = 0
        self.lines = 0
        self.lineno = 0
        self.cut_lines = 0
        self.unplaced = 0
        self.last_lines: deque[str] = deque(maxlen=KEPT_LINES)
        self.finished = False

    # ----------------------------------------------------------------- text → lines

    def feed(self, text: str) -> list[dict[str, Any]]:
        """Records of the lines ``text`` completes (a partial last line waits for the rest)."""
        out: list[dict[str, Any]] = []
        start = 0
        while True:
            end = text.find("\n", start)
            if end < 0:
                self._grow(text[start:])
                return out
            self._grow(text[start:end])
            line, self.partial, self.skipping = self.partial, "", False
            out += self.line(line)
            start = end + 1

    def _grow(self, piece: str) -> None:
        """Add ``piece`` to the line being printed, keeping at most `MAX_LINE` characters of
        what a terminal would show (the text after the last carriage return)."""
        if self.skipping:
            cr = piece.rfind("\r")
            if cr < 0:
                return  # the rest of a line too long to read
            self.skipping, self.partial, piece = False, "", piece[cr + 1 :]
        self.partial += piece
        if len(self.partial) > MAX_LINE:
            cr = self.partial.rfind("\r", 0, len(self.partial) - 1)
            if cr >= 0:
                self.partial = self.partial[cr + 1 :]  # redraws a terminal overwrote
            if len(self.partial) > MAX_LINE:
                self.partial, self.skipping = self.partial[:MAX_LINE], True
                self.cut_lines += 1

    def close(self) -> list[dict[str, Any]]:
        """Records of the last line when the output ended without a newline; then the
        checks that need the whole output."""
        if self.finished:
            return []
        rest, self.partial, self.skipping = self.partial, "", False
        out = self.line(rest) if rest.strip() else []
        self.unplaced += len(self.pending)
        self.pending = []
        self.finished = True
        self.checker.finish()
        return out

    # ----------------------------------------------------------------- line → records

    def line(self, raw: str) -> list[dict[str, Any]]:
        """The records of one line (none, one, or the held values a step line places)."""
        self.lineno += 1
        shown = _ANSI.sub("", raw.rstrip("\r").rpartition("\r")[2])
        if not shown.strip():
            return []
        self.lines += 1
        self.last_lines.append(shown)
        try:
            fields = self.format.fields(shown)
        except LineConflict as exc:
            raise UnreliableStep(str(exc), [(self.lineno, shown)]) from None
        return self.place(fields, self.lineno, shown) if fields else []

    def place(self, fields: Fields, lineno: int, shown: str) -> list[dict[str, Any]]:
        """The records of one line's (or one event's) ``fields``, checked."""
        self.lineno = lineno
        self._transform(fields, shown)
        step = self._step_of(fields, shown)
        here = (lineno, shown)
        out: list[tuple[dict[str, Any], int, str]] = []
        if step is not None:
            at = step if self.spec.unstepped == "next" else 0  # held before the first step
            for held, n, text in self.pending:
                out.append(({STEP: at, **held}, n, text))
            self.pending = []
            self.step = step
            if fields:
                out.append(({STEP: step, **fields}, *here))
        elif fields:
            if self.spec.unstepped == "next" or (self.step is None and not self.resumed):
                self._hold(fields, here)
            elif self.step is not None:
                out.append(({STEP: self.step, **fields}, *here))
            else:
                self.unplaced += 1
        for record, n, text in out:
            self.checker.check(record, n, text)
        self.records += len(out)
        return [r for r, _, _ in out]

    def _hold(self, fields: Fields, here: tuple[int, str]) -> None:
        """Keep a value without a step for the next step line (at most `MAX_HELD`)."""
        self.pending.append((fields, *here))
        if len(self.pending) > MAX_HELD:
            first = self.pending[0]
            raise UnreliableStep(
                f"{len(self.pending)} lines gave values and none a step: this reading finds no "
                "step in the output; derive one (trainer.metrics.step, e.g. 'epoch * "
                "steps_per_epoch + batch') or count one (trainer.metrics.step_every)",
                [(first[1], first[2]), here],
            )

    def _transform(self, fields: Fields, shown: str) -> None:
        """Add the ``values`` metrics whose names this line gives (non-finite in → nan)."""
        for metric, node in self.values.items():
            wanted = expr_names(node)
            env = {**self.settings, **fields}
            if not wanted <= set(env):
                continue
            if not all(math.isfinite(env[n]) for n in wanted):
                fields[metric] = math.nan
                continue
            try:
                fields[metric] = evaluate(node, env)
            except ExprError as exc:
                raise UnreliableStep(
                    f"trainer.metrics.values.{metric} {self.spec.values[metric]!r}: {exc}",
                    [(self.lineno, shown)],
                ) from None

    def _step_of(self, fields: Fields, shown: str) -> int | None:
        """The step this line gives (its step names removed from ``fields``), or None."""
        if self.spec.step_every is not None:
            fields.pop(STEP, None)
            if not fields:
                return None
            self.counted += 1
            return self.counted * self.spec.step_every
        if self.step_node is None:
            if STEP not in fields:
                return None
            return self._whole(fields.pop(STEP), f"the {STEP} field", shown)
        given = {n: fields.pop(n) for n in self.step_names if n in fields}
        is_step_line = self.counter in given
        self.context.update(given)
        if not is_step_line:
            return None
        env = {**self.context, **self.settings, **given}
        missing = sorted(self.step_names - set(env))
        if missing:
            raise UnreliableStep(
                f"trainer.metrics.step {self.spec.step!r}: {', '.join(missing)} is neither on "
                "this step line, nor a trial setting, nor printed earlier",
                [(self.lineno, shown)],
            )
        try:
            value = evaluate(self.step_node, env)
        except ExprError as exc:
            raise UnreliableStep(
                f"trainer.metrics.step {self.spec.step!r}: {exc}", [(self.lineno, shown)]
            ) from None
        return self._whole(value, f"trainer.metrics.step {self.spec.step!r}", shown)

    def _whole(self, value: float, what: str, shown: str) -> int | None:
        if math.isnan(value):
            return None
        nearest = round(value) if math.isfinite(value) else -1
        if nearest < 0 or abs(value - nearest) > 1e-6 * max(1.0, abs(value)):
            raise UnreliableStep(
                f"{what} gives {value:g}, not a whole number ≥ 0: a step printed rounded or "
                "derived from a rounded number cannot be placed",
                [(self.lineno, shown)],
            )
        return int(nearest)

    def no_record_message(self, where: str) -> str:
        """Why an attempt whose output gave no record failed: the reading and the last lines."""
        shown = "\n".join(f"    {line[:200]}" for line in self.last_lines) or "    (no output)"
        why = ""
        if self.unplaced:
            why = (
                f" ({self.unplaced} value lines had no step: the output printed no step line "
                "after them — derive the step, trainer.metrics.step, or count it, step_every)"
            )
        return (
            f"trainer.metrics: no line of the trainer's {where} gave a record with "
            f"{self.spec.describe()} ({self.lines} lines read){why}; its last lines:\n{shown}"
        )

    def notes(self) -> list[str]:
        """What the reader skipped, for the summary."""
        out = []
        if self.cut_lines:
            out.append(f"{self.cut_lines} lines longer than {MAX_LINE} characters were cut")
        if self.unplaced:
            out.append(f"{self.unplaced} value lines had no step and were not recorded")
        return out


def parse_text(
    spec: MetricsSpec, text: str, settings: Mapping[str, Any] | None = None, resumed: bool = False
) -> tuple[list[dict[str, Any]], RecordStream]:
    """Every record a whole log gives (checked: `UnreliableStep`), and the stream."""
    stream = RecordStream(spec, settings, resumed)
    return stream.feed(text) + stream.close(), stream


__all__ = ["MAX_LINE", "RecordStream", "numeric_settings", "parse_text"]
