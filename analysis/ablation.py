"""Ablations: variants of a categorical scientific axis (e.g. the optimizer) compared at
each batch size, each tuned with its own trials.

Per batch size and variant: the best objective of the tuned trials with a bootstrap
interval (trials resampled with replacement, best recomputed — a minimum's bootstrap is
narrow, so read the interval as a lower bound on the uncertainty), the bootstrap
probability that one variant's best beats another's, and a warning when the variants
did not get the same tuning budget (number of finished tune trials). Best-so-far curves
show the best objective after n trials, with a bootstrap band of the best of n trials
drawn at random. Lower objectives are better; diverged or failed trials (NaN) count
towards the budget but never as best.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from stepscale.analysis.claims import DEFAULT_LEVEL, Claim, claim
from stepscale.analysis.fits.arrays import batch_json
from stepscale.analysis.fits.records import BATCH, Record

__all__ = [
    "AblationRow",
    "AblationTable",
    "BestSoFar",
    "VariantBest",
    "ablation_table",
    "best_so_far",
    "confirm_claims",
]


@dataclass(frozen=True)
class VariantBest(Record):
    """One variant at one batch size."""

    variant: str
    n_trials: int
    best: float
    ci: tuple[float, float]
    best_trial: str


@dataclass(frozen=True)
class AblationRow(Record):
    """All variants at one batch size (NaN when the study has no batch axis).

    ``p_beats`` holds (a, b, P(best of a < best of b)) for every ordered pair a before b.
    """

    batch: float = field(metadata=BATCH)
    variants: tuple[VariantBest, ...]
    p_beats: tuple[tuple[str, str, float], ...]
    equal_budget: bool
    warning: str | None
    # claims tested on the confirm seeds: the variant with the best tuned objective against
    # each other one (`confirm_claims`)
    claims: tuple[Claim, ...] = ()

    def _json(self, fields: dict[str, Any]) -> dict[str, Any]:
        """The pairs as rows (a, b, p)."""
        return fields | {"p_beats": [{"a": a, "b": b, "p": p} for a, b, p in self.p_beats]}


@dataclass(frozen=True)
class AblationTable(Record):
    """Variants of ``axis`` compared at every batch size."""

    axis: str
    rows: tuple[AblationRow, ...]
    confidence: float
    n_boot: int
    seed: int

    @property
    def warnings(self) -> tuple[str, ...]:
        """The budget warnings of all rows."""
        return tuple(r.warning for r in self.rows if r.warning)

    def _json(self, fields: dict[str, Any]) -> dict[str, Any]:
        """With the budget warnings of all rows."""
        return fields | {"warnings": self.warnings}


def _boot_min(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Minimum of each bootstrap resample (inf when a resample holds only NaN)."""
    v = np.where(np.isfinite(values), values, np.inf)
    if v.size == 0:
        return np.full(n_boot, np.inf)
    return v[rng.integers(0, v.size, size=(n_boot, v.size))].min(axis=1)


def ablation_table(
    variant: ArrayLike,
    batch: ArrayLike,
    objective: ArrayLike,
    trial: Sequence[str],
    *,
    axis: str = "variant",
    n_boot: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> AblationTable:
    """Compare the variants at each batch size from one row per finished tune trial.

    ``objective`` is NaN for trials without a usable value (diverged, failed). Variants
    and batch sizes are sorted; each (batch, variant) cell draws its bootstrap from
    ``seed`` and its position, so results do not depend on other cells.
    """
    var = np.asarray(variant, dtype=str)
    b = np.asarray(batch, dtype=float)
    obj = np.asarray(objective, dtype=float)
    ids = np.asarray(list(trial), dtype=str)
    if not var.shape == b.shape == obj.shape == ids.shape:
        raise ValueError("variant, batch, objective and trial differ in length")
    names = sorted(set(var.tolist()))
    sizes = sorted(set(b[np.isfinite(b)].tolist())) or [math.nan]
    tail = (1 - confidence) / 2
    rows = []
    for bi, size in enumerate(sizes):
        at = np.isnan(b) if math.isnan(size) else b == size
        bests: list[VariantBest] = []
        boots: dict[str, np.ndarray] = {}
        for vi, name in enumerate(names):
            m = at & (var == name)
            vals = obj[m]
            rng = np.random.default_rng([seed, bi, vi])
            boot = _boot_min(vals, n_boot, rng)
            boots[name] = boot
            fin = np.isfinite(vals)
            best = float(vals[fin].min()) if fin.any() else math.nan
            best_id = str(ids[m][fin][np.argmin(vals[fin])]) if fin.any() else ""
            finite_boot = boot[np.isfinite(boot)]
            ci = (
                tuple(float(q) for q in np.quantile(finite_boot, [tail, 1 - tail]))
                if finite_boot.size
                else (math.nan, math.nan)
            )
            bests.append(VariantBest(name, int(m.sum()), best, ci, best_id))  # type: ignore[arg-type]
        pairs = []
        for i, a in enumerate(names):
            for c in names[i + 1 :]:
                p = float(np.mean(boots[a] < boots[c]) + 0.5 * np.mean(boots[a] == boots[c]))
                pairs.append((a, c, p))
        counts = {v.variant: v.n_trials for v in bests}
        equal = len(set(counts.values())) <= 1
        warning = None
        if not equal:
            where = "" if math.isnan(size) else f"batch size {batch_json(size)}: "
            warning = (
                f"{where}the variants did not get the same tuning budget ("
                + ", ".join(f"{k}: {n} trials" for k, n in counts.items())
                + "); their best objectives are not compared at equal effort"
            )
        rows.append(AblationRow(size, tuple(bests), tuple(pairs), equal, warning))
    return AblationTable(axis, tuple(rows), confidence, n_boot, seed)


def confirm_claims(
    table: AblationTable,
    variant: ArrayLike,
    batch: ArrayLike,
    objective: ArrayLike,
    *,
    what: str = "steps",
    unit: str = "steps",
    level: float = DEFAULT_LEVEL,
) -> AblationTable:
    """``table`` with each row's claims: at every batch size, the variant whose tuned best
    is lowest (chosen on the tune trials, so the claim is fixed before the confirm seeds
    it is tested on) against every other variant, "fewer ``what``" by a one-sided Welch
    test over the confirm seeds (one row per confirm trial; NaN: never reached / unusable)."""
    var = np.asarray(variant, dtype=str)
    b = np.asarray(batch, dtype=float)
    obj = np.asarray(objective, dtype=float)
    rows = []
    for row in table.rows:
        at = np.isnan(b) if math.isnan(row.batch) else b == row.batch
        ranked = sorted((v for v in row.variants if math.isfinite(v.best)), key=lambda v: v.best)
        found: list[Claim] = []
        if ranked and at.any():
            lead = ranked[0].variant
            seeds = {v.variant: obj[at & (var == v.variant)].tolist() for v in row.variants}
            for other in (v.variant for v in row.variants if v.variant != lead):
                if seeds[lead] or seeds[other]:
                    found.append(claim(lead, seeds[lead], other, seeds[other], what, unit, level))
        rows.append(replace(row, claims=tuple(found)))
    return replace(table, rows=tuple(rows))


@dataclass(frozen=True)
class BestSoFar:
    """Best objective after n trials (in trial order) and the bootstrap band of the best
    of n trials drawn at random with replacement."""

    n: np.ndarray
    best: np.ndarray
    lo: np.ndarray
    median: np.ndarray
    hi: np.ndarray


def best_so_far(
    objective: ArrayLike, *, n_boot: int = 500, seed: int = 0, confidence: float = 0.95
) -> BestSoFar:
    """Running minimum of ``objective`` (in trial order; NaN never counts as best) and
    percentile bands of the best of n trials drawn with replacement (a draw of only
    unusable trials counts as the worst usable objective)."""
    v = np.asarray(objective, dtype=float)
    w = np.where(np.isfinite(v), v, np.inf)
    n = np.arange(1, v.size + 1)
    if v.size == 0:
        empty = np.empty(0)
        return BestSoFar(n, empty, empty, empty, empty)
    best = np.minimum.accumulate(w)
    rng = np.random.default_rng(seed)
    # For the band, a draw of only unusable trials counts as the worst usable objective,
    # so the band exists from n = 1 whenever any trial is usable.
    fin = np.isfinite(v)
    capped = np.where(fin, v, v[fin].max()) if fin.any() else w
    draws = np.minimum.accumulate(capped[rng.integers(0, v.size, size=(n_boot, v.size))], axis=1)
    tail = (1 - confidence) / 2
    with np.errstate(invalid="ignore"):
        lo, med, hi = np.quantile(draws, [tail, 0.5, 1 - tail], axis=0)

    def fin(a: np.ndarray) -> np.ndarray:
        return np.where(np.isfinite(a), a, np.nan)

    return BestSoFar(n, fin(best), fin(lo), fin(med), fin(hi))
