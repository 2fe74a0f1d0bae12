"""The training seed's part of B_crit's uncertainty (docs/report.md, "Settled across seeds").

A study's S(B) fit rests on one training seed. Its confirm seeds (``budget.confirm_seeds``:
each batch size's best settings trained again at other seeds, never pruned) measure how
far the seed moves the steps to target at fixed settings: σ, the pooled standard
deviation of log steps over the confirm seeds at each batch size (degrees of freedom
Σ (n_B − 1)). The seed's interval of B_crit propagates σ through the fit by the delta
method: g_i = ∂ log B_crit / ∂ log S(B_i) by refitting with each S(B_i) moved by a small
step, sd(log B_crit) = σ·‖g‖, and the interval B_crit·exp(± t·sd) with t Student's
quantile on σ's degrees of freedom (few confirm seeds give a wide interval, not a
falsely narrow one).

The first screen's interval joins it to the fit's own (a residual bootstrap at one seed):
in log space, each side's half-widths add in quadrature. ``share`` is the seed's part of
that joint interval's log-variance. The answer is *settled across seeds* when the seed
alone moves B_crit by at most a factor :data:`SEED_SETTLED` either way (its interval is
B_crit ×/÷ at most 1.25).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from stepscale.analysis.fits.records import Record
from stepscale.analysis.fits.spread import SeedSpread
from stepscale.analysis.fits.steps import StepsFit, fit_steps

__all__ = ["SEED_SETTLED", "SeedPart", "joint_interval", "seed_part", "seed_sigma"]

SEED_SETTLED = 1.25  # settled: the seed alone moves B_crit by at most ×/÷ this (95%)
_STEP = 0.02  # the move of log S(B_i) for the derivative


@dataclass(frozen=True)
class SeedPart(Record):
    """The training seed's part of B_crit's interval."""

    sigma: float  # pooled sd of log steps to target over confirm seeds, per batch size
    df: int  # its degrees of freedom
    seeds: int  # confirm seeds at the batch size with the most
    sd_log_bcrit: float  # σ·‖∂ log B_crit / ∂ log S‖
    ci: tuple[float, float]  # B_crit's interval from the seed alone
    joint_ci: tuple[float, float]  # the fit's interval and the seed's, joined
    share: float  # the seed's part of the joint interval's log-variance (0–1)

    @property
    def settled(self) -> bool:
        """The seed alone moves B_crit by at most a factor :data:`SEED_SETTLED` either way."""
        lo, hi = self.ci
        return math.sqrt(hi / lo) <= SEED_SETTLED

    def text(self) -> str:
        """E.g. "the training seed's part ×/÷ 1.2 (σ 0.08 over 2 confirm seeds)"."""
        lo, hi = self.ci
        factor = math.sqrt(hi / lo)
        return (
            f"of which the training seed's ×/÷ {factor:.2f} (σ {self.sigma:.2g} of log steps "
            f"over {self.seeds} confirm seed{'s' if self.seeds != 1 else ''} per batch size)"
        )


def seed_sigma(spread: SeedSpread) -> tuple[float, int, int]:
    """(σ, its degrees of freedom, most seeds at one batch size) from the confirm seeds;
    σ is NaN with no batch size of two reached seeds."""
    ss, df, most = 0.0, 0, 0
    for values in spread.values:
        v = np.log([x for x in values if math.isfinite(x) and x > 0])
        most = max(most, len(values))
        if v.size >= 2:
            ss += float(((v - v.mean()) ** 2).sum())
            df += v.size - 1
    return (math.sqrt(ss / df) if df else math.nan), df, most


def joint_interval(
    value: float, a: tuple[float, float], b: tuple[float, float]
) -> tuple[float, float]:
    """Two intervals of one positive value joined: per side, log half-widths in quadrature."""
    lo = math.hypot(math.log(value / a[0]), math.log(value / b[0]))
    hi = math.hypot(math.log(a[1] / value), math.log(b[1] / value))
    return value * math.exp(-lo), value * math.exp(hi)


def _log_bcrit(fit: StepsFit, log_steps: np.ndarray) -> float:
    moved = fit_steps(
        fit.batch_sizes,
        np.exp(log_steps),
        overhead=fit.overhead,
        reference_batch=fit.reference_batch,
        n_boot=0,
        monotone=False,
    )
    return math.log(moved.b_crit)


def seed_part(fit: StepsFit, spread: SeedSpread | None) -> SeedPart | None:
    """The seed's part of ``fit``'s B_crit interval from the confirm seeds' ``spread``;
    None without confirm seeds at two or more runs of one batch size."""
    if spread is None or not (math.isfinite(fit.b_crit) and fit.b_crit > 0):
        return None
    sigma, df, most = seed_sigma(spread)
    lo_fit, hi_fit = fit.b_crit_ci
    if not (math.isfinite(sigma) and math.isfinite(lo_fit) and math.isfinite(hi_fit)):
        return None
    base = np.log(np.asarray(fit.steps, dtype=float))
    centre = math.log(fit.b_crit)
    grad = []
    for i in range(base.size):
        moved = base.copy()
        moved[i] += _STEP
        try:
            grad.append((_log_bcrit(fit, moved) - centre) / _STEP)
        except ValueError:
            return None
    sd = sigma * float(np.linalg.norm(grad))
    t = float(stats.t.ppf(0.5 + fit.confidence / 2, df))
    ci = (fit.b_crit * math.exp(-t * sd), fit.b_crit * math.exp(t * sd))
    joint = joint_interval(fit.b_crit, (lo_fit, hi_fit), ci)
    fit_var = math.log(hi_fit / lo_fit) ** 2
    seed_var = math.log(ci[1] / ci[0]) ** 2
    share = seed_var / (fit_var + seed_var) if fit_var + seed_var > 0 else 0.0
    return SeedPart(sigma, df, most, sd, ci, joint, share)
