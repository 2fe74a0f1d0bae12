"""The search space of a study: scientific grid × nuisance space × fixed values.

Built from the composed config and validated before anything launches. Each point of
the grid has its own nuisance distributions (ranges may depend on a categorical
scientific value). `reverse_log` parameters (β2, momentum: log of 1 − x) are sampled by
Optuna as ``1 − x`` on a log scale under the name ``<alias>__1m`` and mapped back.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import Any

import optuna.distributions as od

from stepscale.errors import UsageError
from stepscale.sweeps.study.adaptive_axis import candidates, check_adaptive, initial_values
from stepscale.sweeps.study.derived import Derived, build_derived, check_derived
from stepscale.sweeps.study.schema import QUANTITIES, NuisanceParam, StudyConfig
from stepscale.sweeps.trainers.builtin_keys import TRAINER_PATHS

SCALES = ("linear", "log", "reverse_log")
TYPES = ("float", "int", "categorical")
_LABEL_OK = re.compile(r"[^A-Za-z0-9_.=,-]")


@dataclass(frozen=True)
class Point:
    """One combination of scientific values."""

    index: int
    label: str
    values: dict[str, Any]


@dataclass(frozen=True)
class Nuisance:
    """A nuisance parameter with its range resolved for one point."""

    name: str
    path: str
    type: str
    scale: str
    low: float | None = None
    high: float | None = None
    choices: tuple[Any, ...] | None = None
    step: float | None = None

    @property
    def optuna_name(self) -> str:
        """Name of the sampled variable (``1 − x`` for reverse_log)."""
        return f"{self.name}__1m" if self.scale == "reverse_log" else self.name

    def distribution(self) -> od.BaseDistribution:
        """The Optuna distribution of the sampled variable."""
        if self.type == "categorical":
            return od.CategoricalDistribution(list(self.choices or ()))
        if self.scale == "reverse_log":
            return od.FloatDistribution(1.0 - self.high, 1.0 - self.low, log=True)
        log = self.scale == "log"
        if self.type == "int":
            return od.IntDistribution(
                int(self.low), int(self.high), log=log, step=int(self.step or 1)
            )
        return od.FloatDistribution(self.low, self.high, log=log, step=None if log else self.step)

    def value(self, sampled: Any) -> Any:
        """The trainer value of a sampled variable."""
        if self.scale == "reverse_log":
            return 1.0 - float(sampled)
        return sampled


def point_label(values: dict[str, Any]) -> str:
    """``alias=value`` joined by ``,`` in scientific order, unsafe characters as ``_``."""
    return _LABEL_OK.sub("_", ",".join(f"{k}={_fmt(v)}" for k, v in values.items()))


def _fmt(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value)) if abs(value) < 1e15 else repr(value)
    return str(value)


def _check_path(kind: str, alias: str, path: str, known: Collection[str] | None) -> None:
    if known is not None and path not in known:
        close = sorted(p for p in known if p.split(".")[-1] == path.split(".")[-1])
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UsageError(f"{kind}.{alias}.path: unknown trainer key {path!r}{hint}")


def _resolve_nuisance(alias: str, p: NuisanceParam, point: dict[str, Any]) -> Nuisance:
    low, high, choices = p.low, p.high, p.choices
    if p.by is not None:
        override = p.ranges.get(str(point[p.by]))
        if override is not None:
            low = override.low if override.low is not None else low
            high = override.high if override.high is not None else high
            choices = override.choices if override.choices is not None else choices
    key = f"nuisance.{alias}"
    if p.type == "categorical":
        if not choices:
            raise UsageError(f"{key}.choices: a categorical parameter needs at least one choice")
        return Nuisance(alias, p.path, p.type, "linear", choices=tuple(choices))
    if low is None or high is None:
        raise UsageError(f"{key}: a {p.type} parameter needs low and high")
    if not (math.isfinite(low) and math.isfinite(high)) or low >= high:
        raise UsageError(f"{key}: needs low < high, got low={low}, high={high}")
    if p.scale == "log" and low <= 0:
        raise UsageError(f"{key}: log scale needs low > 0, got {low}")
    if p.scale == "reverse_log" and not (low >= 0 and high < 1):
        raise UsageError(
            f"{key}: reverse_log (log of 1 − x) needs 0 ≤ low < high < 1, got [{low}, {high}]"
        )
    if p.type == "int":
        if int(low) != low or int(high) != high or (p.step is not None and int(p.step) != p.step):
            raise UsageError(
                f"{key}: an int parameter needs whole bounds and step, got [{low}, {high}]"
            )
        if p.scale == "reverse_log":
            raise UsageError(f"{key}: reverse_log applies to floats only")
    if p.step is not None and p.step <= 0:
        raise UsageError(f"{key}.step: must be > 0, got {p.step}")
    if p.step is not None and p.step > high - low:
        # Optuna would silently collapse the range to its low end (only a library warning).
        raise UsageError(
            f"{key}.step: {p.step} is larger than the range [{low}, {high}], which would "
            f"leave the single value {low}; use a step ≤ {high - low:.6g} (or fix the parameter "
            f"with fixed.{alias})"
        )
    if p.step is not None and p.scale == "log" and p.type == "float":
        raise UsageError(f"{key}.step: Optuna cannot combine a step with a log scale for floats")
    return Nuisance(alias, p.path, p.type, p.scale, low=float(low), high=float(high), step=p.step)


@dataclass(frozen=True)
class SearchSpace:
    """The validated space of a study."""

    points: tuple[Point, ...]
    nuisance: dict[str, tuple[Nuisance, ...]]  # point label -> its nuisance parameters
    fixed: dict[str, tuple[str, Any]]  # alias -> (path, value)
    scientific_paths: dict[str, str]
    # Adaptive batch sizes: the points the study may still add (sweeps.run.adaptive), disjoint
    # from ``points``; their nuisance ranges are in ``nuisance`` too.
    candidates: tuple[Point, ...] = ()
    # Values computed from the others at every trial (sweeps.study.derived), in order.
    derived: tuple[Derived, ...] = ()

    def with_point(self, label: str) -> SearchSpace:
        """This space with the candidate ``label`` made a point (points stay in grid order)."""
        point = next(p for p in self.candidates if p.label == label)
        points = tuple(sorted((*self.points, point), key=lambda p: p.index))
        rest = tuple(p for p in self.candidates if p.label != label)
        return replace(self, points=points, candidates=rest)

    def distributions(self, label: str) -> dict[str, od.BaseDistribution]:
        """Optuna distributions of one point."""
        return {n.optuna_name: n.distribution() for n in self.nuisance[label]}

    def trainer_values(self, label: str, sampled: dict[str, Any]) -> dict[str, Any]:
        """alias -> trainer value of the nuisance parameters sampled at a point."""
        return {n.name: n.value(sampled[n.optuna_name]) for n in self.nuisance[label]}

    def paths(self, label: str) -> dict[str, str]:
        """alias -> trainer path of the nuisance parameters of a point."""
        return {n.name: n.path for n in self.nuisance[label]}


def build_space(cfg: StudyConfig, known: Collection[str] | None = TRAINER_PATHS) -> SearchSpace:
    """Validate the study's parameters and enumerate its points. ``known``: the keys of the
    trainer's config a parameter may set (default: the built-in trainer's; None: any)."""
    if not cfg.scientific:
        raise UsageError("scientific: a study needs at least one scientific axis (e.g. batch_size)")
    check_adaptive(cfg)
    seen_paths: dict[str, str] = {}
    for kind, params in (
        ("scientific", cfg.scientific),
        ("nuisance", cfg.nuisance),
        ("fixed", cfg.fixed),
    ):
        for alias, p in params.items():
            _check_path(kind, alias, p.path, known)
            if p.quantity is not None and p.quantity not in QUANTITIES:
                raise UsageError(
                    f"{kind}.{alias}.quantity: unknown {p.quantity!r}; choose one of "
                    f"{', '.join(QUANTITIES)}"
                )
            if p.path in seen_paths:
                raise UsageError(
                    f"{kind}.{alias}.path: {p.path} is already set by {seen_paths[p.path]}"
                )
            seen_paths[p.path] = f"{kind}.{alias}"
    for alias, p in cfg.scientific.items():
        if not p.values and not p.adaptive.enabled:
            raise UsageError(f"scientific.{alias}.values: give at least one value")
        if len(set(map(repr, p.values))) != len(p.values):
            raise UsageError(f"scientific.{alias}.values: values repeat: {list(p.values)}")
    for alias, p in cfg.nuisance.items():
        if p.type not in TYPES:
            raise UsageError(
                f"nuisance.{alias}.type: unknown {p.type!r}; choose one of {', '.join(TYPES)}"
            )
        if p.scale not in SCALES:
            raise UsageError(
                f"nuisance.{alias}.scale: unknown {p.scale!r}; choose one of {', '.join(SCALES)}"
            )
        if p.by is not None and p.by not in cfg.scientific:
            raise UsageError(f"nuisance.{alias}.by: {p.by!r} is not a scientific axis")
    aliases = list(cfg.scientific)
    points = []
    later: list[Point] = []
    adaptive = next((p.adaptive for p in cfg.scientific.values() if p.adaptive.enabled), None)
    if adaptive is not None:  # the only axis (check_adaptive); index = place in the grid
        start = initial_values(adaptive)
        for i, v in enumerate(candidates(adaptive)):
            values = {aliases[0]: v}
            (points if v in start else later).append(Point(i, point_label(values), values))
    for i, combo in enumerate(itertools.product(*(cfg.scientific[a].values for a in aliases))):
        values = dict(zip(aliases, combo, strict=True))
        points.append(Point(i, point_label(values), values))
    if len({p.label for p in points}) != len(points):
        raise UsageError(
            "scientific: two points get the same label; make the values distinct as text"
        )
    nuisance = {
        p.label: tuple(_resolve_nuisance(a, n, p.values) for a, n in cfg.nuisance.items())
        for p in (*points, *later)
    }
    fixed = {a: (f.path, f.value) for a, f in cfg.fixed.items()}
    space = SearchSpace(
        tuple(points),
        nuisance,
        fixed,
        {a: s.path for a, s in cfg.scientific.items()},
        candidates=tuple(later),
        derived=build_derived(cfg, known, seen_paths),
    )
    check_derived(space)  # every point, nuisance ends and middles: before anything runs
    return space
