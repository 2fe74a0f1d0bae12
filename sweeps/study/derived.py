"""Derived parameters: trainer values computed at every trial from the study's other
parameters (scientific, nuisance, fixed, and derived ones listed earlier) by the safe
grammar of `stepscale.sweeps.study.expr` — e.g. Adam's β2 from its half-life in tokens,
``0.5 ** (batch_size * seq_len / t2)`` (docs/science.md).

Everything is checked before anything runs (`build_derived`, `check_derived`): the
syntax, the names, the path, and the value at every point of the grid (and every batch
size an adaptive axis may add) at the low end, middle and high end of every nuisance
range and every categorical choice — a division by zero, a log of a number ≤ 0, or a
value outside the entry's ``low``/``high`` there is a `UsageError` naming the entry and
the point.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from stepscale.errors import UsageError
from stepscale.sweeps.study.expr import ExprError, Node, evaluate, names, parse
from stepscale.sweeps.study.schema import StudyConfig


class SearchSpace(Protocol):
    """What this module reads of `stepscale.sweeps.study.space.SearchSpace` (which imports this
    module, so it is not imported here)."""

    points: tuple[Any, ...]
    candidates: tuple[Any, ...]
    nuisance: dict[str, tuple[Any, ...]]
    fixed: dict[str, tuple[str, Any]]
    derived: tuple[Derived, ...]


TYPES = ("float", "int")
MAX_CHECKS = 4096  # points × nuisance combinations checked before a study runs


@dataclass(frozen=True)
class Derived:
    """A parsed ``derived.<name>`` entry."""

    name: str
    path: str | None  # None: a named value no trainer key receives
    expr: str
    node: Node
    low: float | None = None
    high: float | None = None
    type: str = "float"


def build_derived(
    cfg: StudyConfig, known: Collection[str] | None, taken: Mapping[str, str]
) -> tuple[Derived, ...]:
    """The study's ``derived`` entries parsed and checked for syntax, names (earlier
    parameters only), type, bounds and path (a trainer key no other parameter sets;
    ``taken``: path → the parameter that sets it). `UsageError` names the entry."""
    out: list[Derived] = []
    params = [*cfg.scientific, *cfg.nuisance, *cfg.fixed]
    seen = dict(taken)
    for alias, d in cfg.derived.items():
        key = f"derived.{alias}"
        if alias in params:
            raise UsageError(f"{key}: the name {alias!r} is already a study parameter")
        if d.path is not None and known is not None and d.path not in known:
            close = sorted(p for p in known if p.split(".")[-1] == d.path.split(".")[-1])
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise UsageError(f"{key}.path: unknown trainer key {d.path!r}{hint}")
        if d.path is not None and d.path in seen:
            raise UsageError(f"{key}.path: {d.path} is already set by {seen[d.path]}")
        if d.path is not None:
            seen[d.path] = key
        if d.type not in TYPES:
            raise UsageError(f"{key}.type: unknown {d.type!r}; choose one of {', '.join(TYPES)}")
        if d.low is not None and d.high is not None and d.low > d.high:
            raise UsageError(f"{key}: needs low ≤ high, got low={d.low}, high={d.high}")
        try:
            node = parse(d.expr)
        except ExprError as exc:
            raise UsageError(f"{key}.expr {d.expr!r}: {exc}") from None
        available = [*params, *(e.name for e in out)]
        unknown = sorted(names(node) - set(available))
        if unknown:
            later = [n for n in unknown if n in cfg.derived]
            why = (
                f"{', '.join(later)} is derived later (list it before {alias})"
                if later
                else f"the names are the study's parameters: {', '.join(available) or 'none'}"
            )
            raise UsageError(f"{key}.expr {d.expr!r}: unknown name {unknown[0]!r}; {why}")
        out.append(Derived(alias, d.path, d.expr, node, d.low, d.high, d.type))
    return tuple(out)


def derived_values(
    derived: Sequence[Derived], values: Mapping[str, Any], where: str = ""
) -> dict[str, float | int]:
    """name → value of every derived entry, given the other parameters' ``values``
    (alias → value); `UsageError` naming the entry (and ``where``) if one has no value
    or leaves its range."""
    env: dict[str, Any] = dict(values)
    out: dict[str, float | int] = {}
    at = f" at {where}" if where else ""
    for d in derived:
        key = f"derived.{d.name}"
        numbers: dict[str, float] = {}
        for n in names(d.node):
            v = env[n]
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise UsageError(f"{key}.expr {d.expr!r}: {n} is {v!r}{at}, not a number") from None
            numbers[n] = float(v)
        try:
            value: float | int = evaluate(d.node, numbers)
        except ExprError as exc:
            raise UsageError(f"{key}.expr {d.expr!r}{at}: {exc}") from None
        if d.type == "int":
            value = round(value)
        if (d.low is not None and value < d.low) or (d.high is not None and value > d.high):
            raise UsageError(
                f"{key}: {d.expr} = {value:.6g}{at}, outside its declared range "
                f"[{_show(d.low)}, {_show(d.high)}]"
            )
        env[d.name] = out[d.name] = value
    return out


def _show(x: float | None) -> str:
    return "−∞" if x is None else f"{x:g}"


def _probe(n: Any) -> list[Any]:
    """Values of a nuisance parameter (a `stepscale.sweeps.study.space.Nuisance`) checked before
    a study runs: its choices, or the ends and middle of its range (geometric middle on a
    log scale)."""
    if n.type == "categorical":
        return list(n.choices)
    lo, hi = n.low, n.high
    if n.scale == "log":
        mid = math.sqrt(lo * hi)
    elif n.scale == "reverse_log":
        mid = 1.0 - math.sqrt((1.0 - lo) * (1.0 - hi))
    else:
        mid = (lo + hi) / 2
    if n.type == "int":
        return sorted({int(lo), round(mid), int(hi)})
    return [float(lo), mid, float(hi)]


def check_derived(space: SearchSpace) -> None:
    """Evaluate every derived entry of ``space`` (a `SearchSpace`) at every point and
    candidate point, at the ends and middle of each nuisance range (only the ends when
    that would be more than `MAX_CHECKS` evaluations); `UsageError` names the first
    entry that fails and where."""
    if not space.derived:
        return
    fixed = {a: v for a, (_, v) in space.fixed.items()}
    for point in (*space.points, *space.candidates):
        nuisance = space.nuisance[point.label]
        probes = [_probe(n) for n in nuisance]
        if math.prod(len(p) for p in probes) * len(space.points) > MAX_CHECKS:
            probes = [
                p if n.type == "categorical" else [p[0], p[-1]]
                for n, p in zip(nuisance, probes, strict=True)
            ]
        for combo in itertools.product(*probes):
            sampled = dict(zip((n.name for n in nuisance), combo, strict=True))
            where = ", ".join(
                f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in sampled.items()
            )
            derived_values(
                space.derived,
                {**point.values, **sampled, **fixed},
                f"point {point.label}" + (f" ({where})" if where else ""),
            )


def derived_at(
    space: SearchSpace, values: Mapping[str, Any], nuisance: Mapping[str, Any]
) -> dict[str, float | int]:
    """name → value of the derived entries of ``space`` for one trial (its point's
    ``values`` and its ``nuisance`` trainer values)."""
    if not space.derived:
        return {}
    fixed = {a: v for a, (_, v) in space.fixed.items()}
    return derived_values(space.derived, {**values, **nuisance, **fixed})
