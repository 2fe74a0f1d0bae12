"""The training seed's part of B_crit's uncertainty (docs/report.md, "Settled across seeds").

A study's S(B) fit rests on one training seed, and its own interval (a residual bootstrap of
the fit) says nothing of what another seed would give. Run again at another seed, every
trial's steps to target move by the seed's noise, and each batch size's steps to result, the
fewest steps of its trials, moves with them. This module estimates that from the study's own
trials, with no extra run:

- **σ, the seed's noise in log steps at fixed settings**: at each batch size, a quadratic in
  log LR is fitted to log steps to target of the trials that reached it, in the window of
  trials around the best one (half the trials in LR order, at least 5, as η* is found:
  `analysis.fits.lr`); σ² pools the residuals' sum of squares over their degrees of freedom
  Σ (k_B − 3). What the quadratic does not fit counts as noise, so σ errs large.
- **Each batch size's share**: its steps to result is the minimum over its trials, so its
  sd is that of the minimum of the window's fitted values each moved by N(0, σ²) (a fixed
  Monte Carlo draw: the same study gives the same number).
- **Through the fit** by the delta method: g_B = ∂ log B_crit / ∂ log S(B) by refitting with
  each S(B) moved by a small step, sd(log B_crit) = ‖g ∘ sd_B‖, and the seed's interval
  B_crit·exp(± t·sd) with t Student's quantile on σ's degrees of freedom.

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
from scipy import stats

from stepscale.analysis.fits.records import Record
from stepscale.analysis.fits.steps import StepsFit, fit_steps

__all__ = ["SEED_SETTLED", "SeedPart", "joint_interval", "scatter_sigma", "seed_part"]

SEED_SETTLED = 1.25  # settled: the seed alone moves B_crit by at most ×/÷ this (95%)
_STEP = 0.02  # the move of log S(B) for the derivative
_DRAWS = 4000  # Monte Carlo draws of each batch size's minimum
_MIN_WINDOW = 5  # trials around the best in the quadratic (as analysis.fits.lr)


@dataclass(frozen=True)
class SeedPart(Record):
    """The training seed's part of B_crit's interval."""

    sigma: float  # sd of log steps to target at fixed settings, from the trials' scatter
    df: int  # its degrees of freedom
    sd_log_bcrit: float  # the seed's sd of log B_crit (delta method)
    ci: tuple[float, float]  # B_crit's interval from the seed alone
    joint_ci: tuple[float, float]  # the fit's interval and the seed's, joined
    share: float  # the seed's part of the joint interval's log-variance (0–1)

    @property
    def factor(self) -> float:
        """How far the seed alone moves B_crit either way (95%): ×/÷ this."""
        lo, hi = self.ci
        return math.sqrt(hi / lo)

    @property
    def settled(self) -> bool:
        """The seed alone moves B_crit by at most a factor :data:`SEED_SETTLED` either way."""
        return self.factor <= SEED_SETTLED

    def text(self) -> str:
        """E.g. "seed's part ×/÷ 1.2" (how far the training seed alone moves B_crit)."""
        return f"seed's part ×/÷ {self.factor:.2f}"


def _window(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The trials in LR order around the best one: half of them, at least 5."""
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    n = x.size
    k = min(n, max(_MIN_WINDOW, math.ceil(n / 2)))
    j = int(np.argmin(y))
    start = min(max(j - k // 2, 0), n - k)
    return x[start : start + k], y[start : start + k]


def scatter_sigma(
    batch: ArrayLike, lr: ArrayLike, steps: ArrayLike, batch_sizes: ArrayLike
) -> tuple[float, int, dict[float, np.ndarray]]:
    """(σ, its degrees of freedom, per batch size the fitted log steps of its window) from
    the trials (one entry each: batch size, LR, steps to target, NaN if not reached) at
    ``batch_sizes``; σ is NaN when no batch size has 4 trials at 4 LRs that reached it."""
    b, lr_a, s = (np.asarray(v, dtype=float) for v in (batch, lr, steps))
    ss, df = 0.0, 0
    fitted: dict[float, np.ndarray] = {}
    for size in np.asarray(batch_sizes, dtype=float):
        ok = (b == size) & np.isfinite(s) & (s > 0) & np.isfinite(lr_a) & (lr_a > 0)
        if not ok.any():
            continue
        x, y = _window(np.log(lr_a[ok]), np.log(s[ok]))
        if np.unique(x).size >= 4:
            coef = np.polyfit(x, y, 2)
            pred = np.polyval(coef, x)
            ss += float(((y - pred) ** 2).sum())
            df += x.size - 3
            fitted[float(size)] = pred
        else:  # too few to fit a curve: the trials as they are
            fitted[float(size)] = y
    return (math.sqrt(ss / df) if df else math.nan), df, fitted


def _min_sd(values: np.ndarray, sigma: float) -> float:
    """sd of min_i (values_i + N(0, σ²)), from a fixed draw."""
    rng = np.random.default_rng(0)
    draws = values[None, :] + sigma * rng.standard_normal((_DRAWS, values.size))
    return float(draws.min(axis=1).std())


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


def seed_part(fit: StepsFit, batch: ArrayLike, lr: ArrayLike, steps: ArrayLike) -> SeedPart | None:
    """The seed's part of ``fit``'s B_crit interval, from the scatter of the trials the fit
    rests on (one entry per tune trial: batch size, LR, steps to the fit's target, NaN if not
    reached); None when that scatter cannot be measured or the fit has no interval."""
    if not (math.isfinite(fit.b_crit) and fit.b_crit > 0):
        return None
    lo_fit, hi_fit = fit.b_crit_ci
    if not (math.isfinite(lo_fit) and math.isfinite(hi_fit) and 0 < lo_fit <= hi_fit):
        return None
    sigma, df, fitted = scatter_sigma(batch, lr, steps, fit.batch_sizes)
    if not math.isfinite(sigma) or df < 1:
        return None
    base = np.log(np.asarray(fit.steps, dtype=float))
    centre = math.log(fit.b_crit)
    terms = []
    for i, size in enumerate(fit.batch_sizes):
        moved = base.copy()
        moved[i] += _STEP
        try:
            grad = (_log_bcrit(fit, moved) - centre) / _STEP
        except ValueError:
            return None
        values = fitted.get(float(size))
        sd_b = _min_sd(values, sigma) if values is not None else sigma
        terms.append(grad * sd_b)
    sd = float(np.linalg.norm(terms))
    t = float(stats.t.ppf(0.5 + fit.confidence / 2, df))
    ci = (fit.b_crit * math.exp(-t * sd), fit.b_crit * math.exp(t * sd))
    joint = joint_interval(fit.b_crit, (lo_fit, hi_fit), ci)
    fit_var = math.log(hi_fit / lo_fit) ** 2
    seed_var = math.log(ci[1] / ci[0]) ** 2
    share = seed_var / (fit_var + seed_var) if fit_var + seed_var > 0 else 0.0
    return SeedPart(sigma, df, sd, ci, joint, share)
