"""Adaptive batch sizes: which batch size to measure next so that the critical batch size
is pinned with the fewest points.

S(B) = S_min (1 + B_crit/B) is fitted in log space as log S = a + softplus(b − log B)
(a = log S_min, b = log B_crit; :func:`analysis.fits.steps.fit_steps`). Linearised at the
current fit, a batch size B contributes the row J(B) = [1, σ(b − log B)] (σ the logistic
function) to the Jacobian, and the variance of b̂ is proportional to [(JᵀJ)⁻¹]_bb (equal
noise in log S at every batch size). Once the fit rests on the batch sizes it needs around
B_crit (rule 3), the next batch size is the candidate not measured yet that narrows that
variance most per example a run there costs (E(B) = B·S(B) = E_min (1 + B/B_crit) grows
with B); ties go to the smaller batch size.

Rules in order (:func:`next_batch`):

1. ``max_points`` batch sizes measured, or no candidate left → stop;
2. S(B) cannot be fitted (fewer than 3 batch sizes reached the target) or B_crit is not
   identified (the fit ran to its bound: S(B) flat or ∝ 1/B over the batch sizes) → the
   candidate nearest the middle (in log B) of the widest gap between measured batch sizes;
3. the fit does not yet rest on the batch sizes it needs around the current B_crit estimate
   while a candidate can supply them (:func:`cover_choice`) → that candidate: one within a
   factor ``COVER`` (2) below the estimate and one above it (an estimate resting only on
   batch sizes far from it leans wherever the hyperbola is least true of the data), then two
   at or beyond that factor on each side (each asymptote of S(B) pinned by two
   measurements, so that one point's luck in tuning does not tilt the curve);
4. the bootstrap interval of B_crit spans at most a factor ``ci_ratio`` with at least
   ``min_points_to_stop`` (5) batch sizes fitted → stop (with fewer, the residuals have
   too few degrees of freedom for the interval to be trusted: it is narrow by luck);
5. else the candidate that narrows log B_crit most per example it costs: the drop in the
   linearised variance divided by the examples a run to the target takes there,
   B·Ŝ(B) = S_min (B + B_crit) (a batch size far above B_crit costs many examples and
   teaches little more than a cheaper one).

Every function is pure; the orchestrator (``stepscale.sweeps.run.adaptive``) and the replay
(:mod:`stepscale.analysis.replay`) both call :func:`next_batch`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import expit

from stepscale.analysis.fits.arrays import batch_json, floats
from stepscale.analysis.fits.records import BATCH, Record
from stepscale.analysis.fits.steps import BCRIT_MARGIN, fit_steps

__all__ = ["COVER", "NextBatch", "bcrit_variance", "cover_choice", "initial_batches", "next_batch"]

# With fewer fitted batch sizes the residuals have too few degrees of freedom: a bootstrap
# interval can be narrow by luck (replays of the demo stopped at 4 points 13% off).
MIN_POINTS_TO_STOP = 5
# Rule 3: a batch size within this factor of the B_crit estimate, on each side, before the
# rule may stop (issue: estimates leaned low when 16 and 64 around B_crit ≈ 21 went unmeasured).
COVER = 2.0


@dataclass(frozen=True)
class NextBatch(Record):
    """The decision after the batch sizes measured so far.

    ``batch`` is the batch size to add (None: stop); ``reason`` says why in one sentence.
    ``b_crit``/``b_crit_ci`` are the current fit's (NaN when S(B) could not be fitted) and
    ``scores`` the linearised variance of log B_crit (relative to the noise in log S) after
    adding each candidate (empty when rule 5 did not apply), ``costs`` the examples a run to
    the target takes at each candidate by the current fit, B·Ŝ(B).
    """

    batch: float | None = field(metadata=BATCH)
    reason: str
    rule: str  # max_points | exhausted | gap | cover | interval | variance
    measured: tuple[float, ...] = field(metadata=BATCH)
    b_crit: float
    b_crit_ci: tuple[float, float]
    s_min: float
    variance: float  # of log B_crit now (relative), NaN without a fit
    scores: Mapping[float, float] = field(default_factory=dict)
    costs: Mapping[float, float] = field(default_factory=dict)

    def _json(self, fields: dict[str, Any]) -> dict[str, Any]:
        """The scores as rows (batch, variance, examples)."""
        scores = [
            {"batch": batch_json(b), "variance": v, "examples": self.costs.get(b)}
            for b, v in self.scores.items()
        ]
        fields.pop("costs", None)
        return fields | {"scores": scores}


def initial_batches(candidates: Sequence[float], n: int) -> tuple[float, ...]:
    """``n`` of the (ascending) candidates spread evenly in log B: both ends and the
    candidates nearest the points between them (by index, as candidates are a log grid)."""
    c = sorted(float(x) for x in candidates)
    if n >= len(c):
        return tuple(c)
    if n == 1:
        return (c[0],)
    idx = sorted({round(i * (len(c) - 1) / (n - 1)) for i in range(n)})
    return tuple(c[i] for i in idx)


def bcrit_variance(batch_sizes: ArrayLike, b_crit: float) -> float:
    """[(JᵀJ)⁻¹]_bb for the rows J(B) = [1, σ(log B_crit − log B)]: the variance of
    log B_crit of the S(B) fit per unit variance of log S (inf when not identified)."""
    x = np.log(floats(batch_sizes, "batch_sizes"))
    s = expit(math.log(b_crit) - x)
    ss = float(((s - s.mean()) ** 2).sum())
    return 1.0 / ss if ss > 1e-300 else math.inf


def _gap_choice(measured: Sequence[float], left: Sequence[float]) -> float:
    """The candidate nearest the middle (log B) of the widest gap between measured sizes
    (beyond the ends when every candidate lies outside them)."""
    xs = sorted(math.log(b) for b in measured)
    best: tuple[float, float] | None = None  # (−gap width, distance) for the min
    choice = left[0]
    for b in left:
        x = math.log(b)
        below = [v for v in xs if v < x]
        above = [v for v in xs if v > x]
        if below and above:
            lo, hi = below[-1], above[0]
            key = (-(hi - lo), abs(x - (lo + hi) / 2))
        else:
            key = (math.inf, abs(x - (xs[0] if not below else xs[-1])))
        if best is None or key < best:
            best, choice = key, b
    return choice


def cover_choice(
    fitted: Sequence[float], left: Sequence[float], b_crit: float, factor: float = COVER
) -> float | None:
    """The candidate (of ``left``) to measure so that the fit rests on the batch sizes it
    needs around ``b_crit``, or None when it does (or no candidate can help):

    - one within ``factor`` of ``b_crit`` below it and one above it (a batch size equal to it
      covers both sides): of two open sides, the candidate nearer ``b_crit`` in log B (ties:
      the smaller);
    - two at or beyond ``factor`` on each side, where S(B) is near its asymptotes (∝ 1/B
      below, S_min above): each asymptote then rests on two measurements, not on one whose
      luck in tuning tilts the whole curve. Below: the largest candidate there; above: the
      smallest (the cheapest).
    """
    lo, hi = b_crit / factor, b_crit * factor
    near = []
    if not any(lo <= b <= b_crit for b in fitted):
        near += [c for c in left if lo <= c <= b_crit]
    if not any(b_crit <= b <= hi for b in fitted):
        near += [c for c in left if b_crit <= c <= hi]
    if near:
        return min(near, key=lambda c: (abs(math.log(c / b_crit)), c))
    below = [c for c in left if c <= lo]
    if sum(1 for b in fitted if b <= lo) < 2 and below:
        return max(below)
    above = [c for c in left if c >= hi]
    if sum(1 for b in fitted if b >= hi) < 2 and above:
        return min(above)
    return None


def next_batch(
    batch_sizes: ArrayLike,
    steps: ArrayLike,
    candidates: Sequence[float],
    *,
    max_points: int,
    ci_ratio: float = 2.0,
    not_reached: Sequence[float] = (),
    min_points_to_stop: int = MIN_POINTS_TO_STOP,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> NextBatch:
    """Which batch size to measure next (None: stop); see the module docstring.

    ``batch_sizes``/``steps`` are the steps to result of the batch sizes measured so far
    (one row per batch size, or per trial: reduced to the minimum); ``not_reached`` the
    measured batch sizes where no trial reached the target. ``candidates`` are the batch
    sizes the study may run (measured ones are skipped).
    """
    b = floats(batch_sizes, "batch_sizes")
    s = floats(steps, "steps")
    measured = tuple(sorted({*b.tolist(), *(float(v) for v in not_reached)}))
    left = sorted(float(c) for c in candidates if float(c) not in measured)
    try:
        fit = fit_steps(
            b,
            s,
            not_reached=list(not_reached),
            n_boot=n_boot,
            seed=seed,
            confidence=confidence,
        )
    except ValueError as exc:
        fit, why = None, str(exc)
    else:
        x = np.log(np.asarray(fit.batch_sizes))
        bound = (x.min() - BCRIT_MARGIN + 1e-6, x.max() + BCRIT_MARGIN - 1e-6)
        if not bound[0] < math.log(fit.b_crit) < bound[1]:
            why = (
                f"B_crit is not identified yet: S(B) is "
                f"{'flat' if math.log(fit.b_crit) <= bound[0] else 'proportional to 1/B'} "
                f"over the batch sizes measured"
            )
        else:
            why = ""
    now = {
        "b_crit": fit.b_crit if fit else math.nan,
        "b_crit_ci": fit.b_crit_ci if fit else (math.nan, math.nan),
        "s_min": fit.s_min if fit else math.nan,
        "variance": bcrit_variance(fit.batch_sizes, fit.b_crit) if fit else math.nan,
    }
    if len(measured) >= max_points:
        reason = f"{len(measured)} batch sizes measured: max_points = {max_points} reached"
        return NextBatch(None, reason, "max_points", measured, **now)
    if not left:
        reason = "every candidate batch size has been measured"
        return NextBatch(None, reason, "exhausted", measured, **now)
    if fit is None or why:
        pick = _gap_choice(measured, left)
        reason = (
            f"{why if fit is not None else f'S(B) cannot be fitted yet ({why})'}; "
            f"{batch_json(pick)} is the candidate nearest the middle of the widest gap in "
            f"log B between the batch sizes measured"
        )
        return NextBatch(pick, reason, "gap", measured, **now)
    lo, hi = fit.b_crit_ci
    ratio = hi / lo if lo > 0 and math.isfinite(lo) and math.isfinite(hi) else math.inf
    interval = f"B_crit = {fit.b_crit:.4g} [{lo:.4g}, {hi:.4g}]"
    cover = cover_choice(fit.batch_sizes, left, fit.b_crit)
    if cover is not None:
        side = "below" if cover < fit.b_crit else "above"
        if fit.b_crit / COVER <= cover <= fit.b_crit * COVER:
            why = (
                f"no batch size fitted within a factor {COVER:g} {side} it; "
                f"{batch_json(cover)} is the candidate there nearest the estimate"
            )
        else:
            why = (
                f"fewer than 2 batch sizes fitted beyond a factor {COVER:g} {side} it (the "
                f"{'1/B' if side == 'below' else 'S_min'} asymptote rests on one); "
                f"{batch_json(cover)} is the {'largest' if side == 'below' else 'cheapest'} "
                f"candidate there"
            )
        return NextBatch(
            cover,
            f"{interval}: {why}",
            "cover",
            measured,
            **now,
        )
    if ratio <= ci_ratio and fit.n_points >= min_points_to_stop:
        return NextBatch(
            None,
            f"{interval} spans a factor {ratio:.3g} ≤ {ci_ratio:g} with {fit.n_points} batch "
            f"sizes fitted, within a factor {COVER:g} of it on both sides: B_crit is pinned",
            "interval",
            measured,
            **now,
        )
    scores = {c: bcrit_variance([*fit.batch_sizes, c], fit.b_crit) for c in left}
    # Examples to the target at c by the current fit: B·S(B) = S_min (B + B_crit).
    costs = {c: fit.s_min * (c + fit.b_crit) for c in left}
    gain = {c: (now["variance"] - v) / costs[c] for c, v in scores.items()}
    best = max(gain.values())
    # Ties (within rounding) go to the smaller batch size.
    pick = min(c for c, g in gain.items() if g >= best * (1 - 1e-9))
    span = "unbounded" if not math.isfinite(ratio) else f"a factor {ratio:.3g}"
    why = (
        f"{interval} spans {span} (> {ci_ratio:g})"
        if ratio > ci_ratio
        else f"{interval}, but {fit.n_points} batch sizes fitted are too few to stop "
        f"(at least {min_points_to_stop})"
    )
    return NextBatch(
        pick,
        f"{why}; adding {batch_json(pick)} shrinks the linearised variance of log B_crit "
        f"most per example ({now['variance']:.3g} → {scores[pick]:.3g} per unit variance of "
        f"log S, for {costs[pick]:.3g} examples a run)",
        "variance",
        measured,
        **now,
        scores=scores,
        costs=costs,
    )
