"""The training seed's part of B_crit's uncertainty (docs/report.md, "Settled across seeds").

A study trains every trial from one training seed: one initialization and one data order,
shared by all its trials. The S(B) fit's own interval (a residual bootstrap of one seed's
fit) cannot see what another seed would do, and neither can the scatter of the trials: a
seed moves every trial of a batch size together, and the batch sizes together (measured on
the demo: over 5 seeds B_crit moved with sd 0.19 in log, while the trials' scatter about
each batch size's LR curve implied 0.08).

So the seed's part is measured at other seeds. The study's confirm seeds
(``budget.confirm_seeds``: each batch size's best settings trained again at seed + 1, + 2, …,
never pruned) give, per confirm seed, steps to target at every batch size of the fit, as a
study at that seed with the same settings would have measured them; S(B) is refitted per
seed. Over the n seeds (the study's and its confirm seeds) s is the sd of log B_crit, and the
seed's interval, where another seed's B_crit falls, is B_crit·exp(± t·s·√(1 + 1/n)), t
Student's quantile on n − 1 degrees of freedom (few seeds give a wide interval, not a falsely
narrow one). What it leaves out: another seed's tuner would also propose other learning rates
(near the optimum steps to target is flat in the LR, so that part is small).

The first screen's interval joins it to the fit's own: in log space, each side's half-widths
add in quadrature. ``share`` is the seed's part of that joint interval's log-variance. The
answer is *settled across seeds* when the seed alone moves B_crit by at most a factor
:data:`SEED_SETTLED` either way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from stepscale.analysis.fits.records import Record
from stepscale.analysis.fits.steps import StepsFit, fit_steps
from stepscale.analysis.fits.student_t import t_quantile

__all__ = ["SEED_SETTLED", "SeedPart", "joint_interval", "seed_bcrits", "seed_part"]

SEED_SETTLED = 1.25  # settled: the seed alone moves B_crit by at most ×/÷ this (95%)


@dataclass(frozen=True)
class SeedPart(Record):
    """The training seed's part of B_crit's interval, from confirm seeds."""

    seeds: tuple[int, ...]  # the study's seed, then each confirm seed whose S(B) was fitted
    b_crits: tuple[float, ...]  # B_crit at each of them
    sd_log_bcrit: float  # s: the sd of log B_crit over the seeds
    df: int  # n − 1
    ci: tuple[float, float]  # where another seed's B_crit falls (95%), around this one's
    joint_ci: tuple[float, float]  # the fit's interval and the seed's, joined
    share: float  # the seed's part of the joint interval's log-variance (0–1)
    skipped: tuple[int, ...] = ()  # confirm seeds that did not reach the target everywhere

    @property
    def factor(self) -> float:
        """How far another seed may move B_crit either way (95%): ×/÷ this."""
        lo, hi = self.ci
        return math.sqrt(hi / lo)

    @property
    def settled(self) -> bool:
        """The seed alone moves B_crit by at most a factor :data:`SEED_SETTLED` either way."""
        return self.factor <= SEED_SETTLED

    def text(self) -> str:
        """E.g. "seed's part ×/÷ 1.2 over 3 seeds"."""
        return f"seed's part ×/÷ {self.factor:.2f} over {len(self.seeds)} seeds"


def joint_interval(
    value: float, a: tuple[float, float], b: tuple[float, float]
) -> tuple[float, float]:
    """Two intervals of one positive value joined: per side, log half-widths in quadrature."""
    lo = math.hypot(math.log(value / a[0]), math.log(value / b[0]))
    hi = math.hypot(math.log(a[1] / value), math.log(b[1] / value))
    return value * math.exp(-lo), value * math.exp(hi)


def seed_bcrits(
    fit: StepsFit, batch: ArrayLike, seed: ArrayLike, steps: ArrayLike
) -> tuple[dict[int, float], list[int]]:
    """B_crit refitted at each confirm seed (one entry per confirm run: batch size, seed,
    steps to the fit's target, NaN if not reached) on the fit's batch sizes, and the seeds
    left out (a batch size without a run that reached the target, or no fit)."""
    b, sd, s = (np.asarray(v, dtype=float) for v in (batch, seed, steps))
    out: dict[int, float] = {}
    skipped: list[int] = []
    for k in sorted({int(v) for v in sd[np.isfinite(sd)]}):
        per_b = []
        for size in fit.batch_sizes:
            runs = s[(sd == k) & (b == size)]
            runs = runs[np.isfinite(runs) & (runs > 0)]
            per_b.append(float(runs.min()) if runs.size else math.nan)
        if not all(math.isfinite(v) for v in per_b):
            skipped.append(k)
            continue
        try:
            refit = fit_steps(
                fit.batch_sizes,
                per_b,
                overhead=fit.overhead,
                reference_batch=fit.reference_batch,
                n_boot=0,
                monotone=False,
            )
        except ValueError:
            skipped.append(k)
            continue
        if math.isfinite(refit.b_crit) and refit.b_crit > 0:
            out[k] = float(refit.b_crit)
        else:
            skipped.append(k)
    return out, skipped


def seed_part(
    fit: StepsFit, study_seed: int, batch: ArrayLike, seed: ArrayLike, steps: ArrayLike
) -> SeedPart | None:
    """The seed's part of ``fit``'s B_crit interval from the confirm runs (one entry each:
    batch size, seed, steps to the fit's target); None without a confirm seed whose S(B)
    could be fitted, or when the fit has no interval."""
    if not (math.isfinite(fit.b_crit) and fit.b_crit > 0):
        return None
    lo_fit, hi_fit = fit.b_crit_ci
    if not (math.isfinite(lo_fit) and math.isfinite(hi_fit) and 0 < lo_fit <= hi_fit):
        return None
    others, skipped = seed_bcrits(fit, batch, seed, steps)
    others.pop(study_seed, None)
    if not others:
        return None
    seeds = (study_seed, *others)
    values = (float(fit.b_crit), *others.values())
    n = len(values)
    sd = float(np.std(np.log(values), ddof=1))
    t = t_quantile(0.5 + fit.confidence / 2, n - 1)
    half = t * sd * math.sqrt(1 + 1 / n)
    ci = (fit.b_crit * math.exp(-half), fit.b_crit * math.exp(half))
    joint = joint_interval(fit.b_crit, (lo_fit, hi_fit), ci)
    fit_var = math.log(hi_fit / lo_fit) ** 2
    seed_var = math.log(ci[1] / ci[0]) ** 2
    share = seed_var / (fit_var + seed_var) if fit_var + seed_var > 0 else 0.0
    return SeedPart(seeds, values, sd, n - 1, ci, joint, share, tuple(skipped))
