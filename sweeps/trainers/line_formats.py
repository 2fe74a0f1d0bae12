"""Metrics read from a training script's own output (``trainer.metrics``): the settings
(`MetricsSpec`, `read_metrics`) and the registered line formats.

A format reads one line and gives its fields (numbers by name, ``step`` among them when the
line has one) or nothing. The formats are plug-ins registered by name (`line_format`):
``kv_colon`` (``key: value`` pairs), ``kv_equals`` (``key=value`` pairs), ``kv_pipes``
(``| key: value |`` segments whose keys may hold spaces, Megatron-LM's and llm.c's lines),
``json`` (one JSON object, or a Python literal dict, per line), ``csv`` (a header row, then
rows) and ``regex`` (named groups only). Any format also takes ``pattern``: every pattern is
applied to every line and its named groups are merged with the format's own pairs. Two
more formats are files rather than lines, read by their own sources
(`sweeps.trainers.structured_sources`): ``tensorboard`` (event files) and
``json_document`` (a JSON document rewritten in place, such as a trainer's state file).

How lines become records (steps, values before a step, the checks) is
`sweeps.trainers.record_stream`. Imports nothing of Hydra or the analysis: it runs inside a
trial's job.
"""

from __future__ import annotations

import ast
import csv
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from stepscale.errors import UsageError
from stepscale.sweeps.trainers.expr import ExprError, parse
from stepscale.sweeps.trainers.patterns import compile_pattern

JSONL = "jsonl"  # the default source: the script appends stepscale's records itself
STREAMS = ("stdout", "stderr", "output")  # sources the job reads from the program's pipes
TENSORBOARD, JSON_DOCUMENT = "tensorboard", "json_document"
FILE_FORMATS = (TENSORBOARD, JSON_DOCUMENT)  # whole files, not lines
STEP, EVAL_LOSS = "step", "eval_loss"
UNSTEPPED = ("last", "next")
# A number as printed: thousands separators read whole (13,352 is 13352), nan/inf too.
NUMBER = (
    r"[-+]?(?:\d{1,3}(?:,\d{3})+(?:\.\d*)?(?:[eE][-+]?\d+)?|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?"
    r"|\.\d+(?:[eE][-+]?\d+)?|nan|inf(?:inity)?)"
)
_THOUSANDS = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d*)?(?:[eE][-+]?\d+)?")
KEPT_LINES = 10  # the last lines of output a failure message quotes
KEYS = ("preset", "source", "format", "pattern", "names", "step", "step_every", "unstepped")
KEYS += ("values", "records")

Fields = dict[str, float]


def number(text: str) -> float | None:
    """``text`` as a number (``nan``, ``inf``, ``-inf`` too, any case; ``13,352`` is
    13352), or None."""
    text = text.strip()
    if _THOUSANDS.fullmatch(text):
        text = text.replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class MetricsSpec:
    """Where a command trainer's metrics come from and how they read (picklable)."""

    source: str = JSONL  # jsonl | stdout | stderr | output | a file or folder the script writes
    format: str = JSONL  # a registered line format (FORMATS), a FILE_FORMATS one, or jsonl
    patterns: tuple[str, ...] = ()  # regex, or extra groups for any line format
    names: dict[str, str] = field(default_factory=dict)  # the script's name → stepscale's
    step: str | None = None  # the step as an expression of captured fields and settings
    step_every: int | None = None  # no step printed: the n-th value line is step n × this
    unstepped: str = "last"  # a value printed without a step: the last or the next step line
    values: dict[str, str] = field(default_factory=dict)  # metric → expression (log(ppl))
    records: str | None = None  # json_document: the key of the list of records
    preset: str | None = None  # the preset this block came from (for messages)

    @property
    def parsed(self) -> bool:
        """Does the job read the script's output (and write metrics.jsonl itself)?"""
        return self.source != JSONL

    def describe(self) -> str:
        """The reading as a failure message quotes it."""
        text = f"preset {self.preset} (format {self.format})" if self.preset else self.format
        if self.patterns:
            joined = " | ".join(repr(p) for p in self.patterns)
            text += f" {joined}" if self.format == "regex" else f" with pattern {joined}"
        return text

    def outputs(self) -> set[str]:
        """The metric names this spec can give that are known before reading (the groups
        of its patterns and the targets of its names and values, mapped)."""
        out = set(self.names.values()) | set(self.values)
        for p in self.patterns:
            out |= {self.names.get(g, g) for g in compile_pattern(p).groupindex}
        return out


class LineConflict(ValueError):
    """One line that gives two different values for one name (two patterns disagree)."""


class LineFormat:
    """One line format: `fields` of a line (names mapped), or None."""

    name: ClassVar[str]

    def __init__(self, spec: MetricsSpec) -> None:
        self.names = spec.names
        self.compiled = [compile_pattern(p) for p in spec.patterns]

    @classmethod
    def check(cls, spec: MetricsSpec) -> None:
        """Refuse a spec this format cannot read (`UsageError` naming the key)."""
        for p in spec.patterns:
            compile_pattern(p)

    def pairs(self, line: str) -> list[tuple[str, str]]:
        """The (name, text) pairs the format itself reads in ``line``."""
        raise NotImplementedError

    def fields(self, line: str) -> Fields | None:
        """The numeric fields of ``line`` by (mapped) name: the format's pairs, then every
        pattern's groups, merged; None when it gives none. Two different values for one
        name on one line → `LineConflict`."""
        out: Fields = {}
        for key, text in self.pairs(line):
            value = number(text)
            if value is not None:
                out.setdefault(self.names.get(key, key), value)
        for compiled in self.compiled:
            match = compiled.search(line)
            if match is None:
                continue
            for key, text in match.groupdict().items():
                value = None if text is None else number(text)
                if value is None:
                    continue
                name = self.names.get(key, key)
                if name in out and not _same(out[name], value):
                    raise LineConflict(
                        f"two values for {name!r} on one line ({out[name]:g} and {value:g})"
                    )
                out[name] = value
        return out or None


def _same(a: float, b: float) -> bool:
    return a == b or (a != a and b != b)


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

    def pairs(self, line: str) -> list[tuple[str, str]]:
        return self.PAIR.findall(line)


@line_format
class KeyEquals(LineFormat):
    """``key=value`` pairs anywhere in a line (``step=100 loss=2.31``, ``loss = 2.3, step =
    100`` with spaces around ``=``)."""

    name = "kv_equals"
    PAIR = re.compile(rf"(?<![\w./-])([A-Za-z_][\w./-]*) ?= ?({NUMBER})(?![\w.])", re.I)

    def pairs(self, line: str) -> list[tuple[str, str]]:
        return self.PAIR.findall(line)


@line_format
class KeyPipes(LineFormat):
    """Segments between ``|`` or ``;``: ``key: value`` or ``key value`` where the key is words
    (spaces become ``_``: ``lm loss: 2.3E+00`` is ``lm_loss``), the value a number,
    optionally followed by ``/ total`` (``iteration 100/ 1000`` is ``iteration`` 100)."""

    name = "kv_pipes"
    SEGMENT = re.compile(
        rf"(?<![\w.])([A-Za-z][\w.()/-]*(?: [A-Za-z(][\w.()/-]*)*?)\s*:?\s+({NUMBER})"
        r"(?:\s*/\s*\d+)?(?:\s+[A-Za-z%/][\w %/]*)?\s*$",
        re.I,
    )

    def pairs(self, line: str) -> list[tuple[str, str]]:
        out = []
        for segment in re.split(r"[|;]", line):
            match = self.SEGMENT.search(segment)
            if match is not None:
                out.append((match.group(1).replace(" ", "_"), match.group(2)))
        return out


_QUOTED_OR_SPECIAL = re.compile(
    r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")"""  # a string: kept as it is
    r"|(?:np|numpy|torch)\.\w+\(([^()]*)\)|tensor\(([^()]*)\)"  # np.float64(2.3), tensor(2.3)
    r"|(?<![\w.])([-+]?(?:nan|inf|NaN|Infinity|-Infinity))(?![\w.])"  # nan, inf: quoted
)


def _python_literal(text: str) -> Any:
    """A Python literal dict's text (``{'loss': 2.3, 'lr': np.float64(1e-3), 'x': nan}``)
    read with `ast.literal_eval` after ``nan``/``inf`` are quoted and numpy/torch scalar
    wrappers unwrapped — never evaluated as code. None when it is not a literal."""

    def one(m: re.Match[str]) -> str:
        if m.group(1) is not None:
            return m.group(1)
        inner = m.group(2) if m.group(2) is not None else m.group(3)
        if inner is not None:
            return inner
        return repr(m.group(4))

    try:
        return ast.literal_eval(_QUOTED_OR_SPECIAL.sub(one, text))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


@line_format
class JsonLine(LineFormat):
    """One JSON object per line (from the line's first ``{``), or a Python literal dict
    (``{'loss': 2.3, 'epoch': 0.5}``, ``nan``/``inf`` too, what ``print(dict)`` gives);
    numbers and numeric strings are metrics, ``null``/``None`` is non-finite, other values
    are ignored."""

    name = "json"

    def pairs(self, line: str) -> list[tuple[str, str]]:
        start = line.find("{")
        if start < 0:
            return []
        text = line[start:].rstrip()
        try:
            obj = json.loads(text)
        except ValueError:
            obj = _python_literal(text)
        if not isinstance(obj, dict):
            return []
        pairs = []
        for key, value in obj.items():
            if value is None:
                pairs.append((str(key), "nan"))
            elif isinstance(value, int | float | str) and not isinstance(value, bool):
                pairs.append((str(key), str(value)))
        return pairs


@line_format
class CsvRows(LineFormat):
    """A header row, then rows (``step,train_loss,val_loss`` / ``100,2.3,``): the header is the
    first line whose cells are all names and (mapped) include the step column (``step``, or
    the counter of a ``step`` expression; any header with ``step_every``); a row has as many
    cells as the header; empty cells are skipped, a repeated header is ignored. A quoted
    cell ``"13,352"`` is 13352."""

    name = "csv"

    def __init__(self, spec: MetricsSpec, header_needs: str | None = STEP) -> None:
        super().__init__(spec)
        self.header: list[str] | None = None
        self.header_needs = header_needs

    def fields(self, line: str) -> Fields | None:
        cells = [c.strip() for c in next(csv.reader([line]), [])]
        if self.header is None:
            named = [self.names.get(c, c) for c in cells]
            needed = self.header_needs is None or self.header_needs in named
            if cells and needed and all(number(c) is None for c in cells if c):
                self.header = named
            return None
        if len(cells) != len(self.header):
            return None
        out = {
            k: v for k, c in zip(self.header, cells, strict=True) if (v := number(c)) is not None
        }
        return out or None


@line_format
class RegexLines(LineFormat):
    """Regular expressions with named groups only: every pattern is applied to every line
    and the groups that matched a number are merged (two patterns on one line give two
    metrics)."""

    name = "regex"

    @classmethod
    def check(cls, spec: MetricsSpec) -> None:
        if not spec.patterns:
            raise UsageError(
                "trainer.metrics.pattern: the regex format needs a pattern with named groups, "
                r"e.g. 'step (?P<step>\d+): .*val loss (?P<val_loss>\S+)'"
            )
        super().check(spec)
        groups: set[str] = set()
        for p in spec.patterns:
            groups |= {spec.names.get(g, g) for g in compile_pattern(p).groupindex}
        if STEP not in groups and spec.step is None and spec.step_every is None:
            raise UsageError(
                f"trainer.metrics.pattern: {' | '.join(repr(p) for p in spec.patterns)} has no "
                "named group 'step', (?P<step>\\d+): a pattern must say which step the numbers "
                "belong to (or derive it: trainer.metrics.step, trainer.metrics.step_every)"
            )
        if EVAL_LOSS not in groups | set(spec.values):
            raise UsageError(
                f"trainer.metrics.pattern: no pattern gives the eval loss (groups "
                f"{sorted(groups)}): name a group eval_loss, or map yours with "
                "trainer.metrics.names, e.g. {val_loss: eval_loss}"
            )

    def pairs(self, line: str) -> list[tuple[str, str]]:
        return []


def read_metrics(value: Any) -> MetricsSpec:
    """The `MetricsSpec` of ``trainer.metrics`` (None: the jsonl default; a string: a source
    in the jsonl format; ``preset: NAME`` with keys beside it overriding the preset's);
    mistakes → `UsageError` naming the key."""
    if value is None or value == JSONL:
        return MetricsSpec()
    if isinstance(value, str):
        value = {"source": value}
    if not isinstance(value, Mapping):
        raise UsageError(f"trainer.metrics: expected a mapping ({', '.join(KEYS)}), got {value!r}")
    unknown = sorted(set(value) - set(KEYS))
    if unknown:
        raise UsageError(
            f"trainer.metrics: unknown key(s) {', '.join(unknown)}; it has {', '.join(KEYS)}"
        )
    preset = value.get("preset")
    if preset is not None:
        from stepscale.sweeps.trainers.presets import preset_block

        value = {**preset_block(preset), **{k: v for k, v in value.items() if k != "preset"}}
    source = str(value.get("source") or JSONL)
    fmt = value.get("format")
    if source == JSONL:
        if fmt not in (None, JSONL) or any(value.get(k) for k in KEYS[2:]):
            raise UsageError(
                "trainer.metrics.source: jsonl (the script appends stepscale's records to "
                "metrics.jsonl) takes no format, pattern, names, step or values; say where the "
                "script prints its metrics: source: stdout, stderr, output or a file it writes"
            )
        return MetricsSpec()
    known = [*FORMATS, *FILE_FORMATS]
    if fmt is None:
        raise UsageError(
            f"trainer.metrics.format: say how {source} reads: one of {', '.join(known)} "
            "(or give a preset: trainer.metrics.preset)"
        )
    if fmt not in known:
        raise UsageError(
            f"trainer.metrics.format: unknown format {fmt!r}; choose one of {', '.join(known)}"
        )
    if fmt in FILE_FORMATS and source in STREAMS:
        raise UsageError(
            f"trainer.metrics.source: the {fmt} format reads files the script writes, not its "
            f"{source}: give the file (json_document) or folder (tensorboard), e.g. "
            "'{trial_dir}/out'"
        )
    pattern = value.get("pattern") or ()
    patterns = (pattern,) if isinstance(pattern, str) else tuple(pattern)
    if not all(isinstance(p, str) for p in patterns):
        raise UsageError(
            f"trainer.metrics.pattern: expected a string or a list of strings, got {pattern!r}"
        )
    names = _mapping(value, "names", "{val_loss: eval_loss}")
    values = _mapping(value, "values", '{eval_loss: "log(ppl)"}')
    for metric, text in values.items():
        _expression(f"trainer.metrics.values.{metric}", text)
    step = value.get("step")
    if step is not None:
        if not isinstance(step, str):
            raise UsageError(
                f"trainer.metrics.step: expected an expression such as "
                f"'epoch * steps_per_epoch + batch', got {step!r}"
            )
        _expression("trainer.metrics.step", step)
    every = value.get("step_every")
    if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
        raise UsageError(f"trainer.metrics.step_every: expected a whole number ≥ 1, got {every!r}")
    if every is not None and step is not None:
        raise UsageError("trainer.metrics.step_every: give step or step_every, not both")
    unstepped = value.get("unstepped", "last")
    if unstepped not in UNSTEPPED:
        raise UsageError(
            f"trainer.metrics.unstepped: expected last or next (which step line a value "
            f"printed without a step belongs to), got {unstepped!r}"
        )
    records = value.get("records")
    if records is not None and (fmt != JSON_DOCUMENT or not isinstance(records, str)):
        raise UsageError(
            "trainer.metrics.records: the key of a json_document's list of records "
            f"(e.g. log_history), for format json_document only; got {records!r}"
        )
    spec = MetricsSpec(
        source,
        str(fmt),
        patterns,
        names,
        step,
        every,
        str(unstepped),
        values,
        records,
        str(preset) if preset is not None else None,
    )
    if fmt in FORMATS:
        FORMATS[spec.format].check(spec)
    return spec


def _mapping(value: Mapping[str, Any], key: str, example: str) -> dict[str, str]:
    got = value.get(key) or {}
    if not isinstance(got, Mapping) or not all(isinstance(v, str) for v in got.values()):
        raise UsageError(f"trainer.metrics.{key}: expected a mapping, e.g. {example}, got {got!r}")
    return {str(k): v for k, v in got.items()}


def _expression(key: str, text: str) -> None:
    try:
        parse(text, dotted=True)
    except ExprError as exc:
        raise UsageError(f"{key}: {text!r}: {exc}") from None


__all__ = [
    "FILE_FORMATS",
    "FORMATS",
    "LineConflict",
    "LineFormat",
    "MetricsSpec",
    "line_format",
    "number",
    "read_metrics",
]
