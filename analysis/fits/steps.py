"""Steps to result and the S(B) fit.

Shallue et al. 2019 (steps to result: per batch size, the fewest steps any tuned trial
needed), McCandlish et al. 2018 (S(B) = S_min (1 + B_crit/B), E = B·S = E_min (1 + B/B_crit)),
Zhang et al. 2024 (overhead-based critical batch size).

Every fit is a pure function of arrays and returns a frozen dataclass whose ``to_dict()``
holds JSON-ready values (non-finite floats become ``None``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import least_squares
from scipy.special import expit

from stepscale.analysis.fits.arrays import (
    batch_json,
    floats,
    percentile_ci,
    positive_batches,
    softplus,
)
from stepscale.analysis.fits.records import BATCH, Record, as_json

# B_crit may lie outside the measured batch sizes, but not by more than this factor on
# either side: beyond it S(B) is flat (or ∝ 1/B) over the data and B_crit is unidentified.
BCRIT_MARGIN = math.log(1e6)
# Tuned well, a larger batch never needs more steps than a smaller one (S(B) falls towards
# S_min). A batch size that needed more than this factor times the steps of a smaller one
# was not tuned well enough to count: it is left out of the fit (``under_tuned``). The
# margin is what one evaluation interval and a few trials' luck explain (on the demo one
# evaluation is 10% of S at every batch size); beyond it, one such point — typically the
# largest batch size, the most sensitive to the LR and the most expensive to tune — tilts
# the whole curve (the fast demo's 256 at 28 and 42 steps against 20 at 128: B_crit −20%
# and −40%).
UNDER_TUNED_FACTOR = 1.25


# ------------------------------------------------------------------- steps to result


@dataclass(frozen=True)
class StepsToResult(Record):
    """Steps to result per batch size (ascending), and the batch sizes that never got there.

    ``censored_at[i]`` is the largest horizon any trial of ``not_reached[i]`` ran to
    (``None`` when no horizon was given): the target was not reached within it.
    """

    batch_sizes: tuple[float, ...] = field(metadata=BATCH)
    steps: tuple[float, ...]
    n_rows: tuple[int, ...]
    not_reached: tuple[float, ...] = field(metadata=BATCH)
    censored_at: tuple[float | None, ...]


def steps_to_result(
    batch: ArrayLike, steps: ArrayLike, horizon: ArrayLike | None = None
) -> StepsToResult:
    """Reduce trial rows to the steps to result of each batch size (Shallue et al. 2019).

    ``batch``, ``steps`` (and ``horizon``) hold one entry per trial; several trials per
    batch size are allowed. A row whose steps is NaN, ±inf or None did not reach the
    target (right-censored at its horizon when given). Per batch size the result is the
    minimum over the rows that reached it; a batch size with no such row is listed in
    ``not_reached`` with the largest horizon its trials ran to, never dropped.
    """
    b = floats(batch, "batch")
    s = floats(steps, "steps")
    if b.shape != s.shape:
        raise ValueError(f"batch and steps differ in length: {b.size} vs {s.size}")
    h = None if horizon is None else floats(horizon, "horizon")
    if h is not None and h.shape != b.shape:
        raise ValueError(f"batch and horizon differ in length: {b.size} vs {h.size}")
    positive_batches(b)
    reached = np.isfinite(s)
    if (s[reached] < 0).any():
        raise ValueError(f"steps must be non-negative; got {s[reached & (s < 0)][:5].tolist()}")

    sizes, inverse = np.unique(b, return_inverse=True)
    out_b: list[float] = []
    out_s: list[float] = []
    out_n: list[int] = []
    nr_b: list[float] = []
    nr_h: list[float | None] = []
    for i, size in enumerate(sizes):
        rows = inverse == i
        ok = rows & reached
        if ok.any():
            out_b.append(float(size))
            out_s.append(float(s[ok].min()))
            out_n.append(int(rows.sum()))
        else:
            nr_b.append(float(size))
            bound = None
            if h is not None:
                hs = h[rows][np.isfinite(h[rows])]
                bound = float(hs.max()) if hs.size else None
            nr_h.append(bound)
    return StepsToResult(tuple(out_b), tuple(out_s), tuple(out_n), tuple(nr_b), tuple(nr_h))


# ----------------------------------------------------------------------- the S(B) fit


@dataclass(frozen=True)
class StepsFit(Record):
    """Fit of S(B) = S_min (1 + B_crit/B) in log space, with residual-bootstrap intervals.

    ``residuals`` are log(S) − log(S_fit) at ``batch_sizes`` (those used in the fit).
    ``under_tuned`` are batch sizes that reached the target but were left out: they needed
    more than ``UNDER_TUNED_FACTOR`` times the steps of a smaller batch size.
    ``cbs`` is the overhead-based critical batch size (1+r)·B0 + r·B_crit with
    r = ``overhead`` and B0 = ``reference_batch``. Perfect scaling holds for
    B ≤ ``perfect_scaling_max_batch`` (= r·B_crit, E ≤ (1+r)·E_min), maximal data
    parallelism for B ≥ ``max_parallelism_min_batch`` (= B_crit/r, S ≤ (1+r)·S_min).
    """

    # in the order of its JSON (the keys of ``sweep fit steps``)
    s_min: float
    e_min: float
    b_crit: float
    b_crit_ci: tuple[float, float]
    s_min_ci: tuple[float, float]
    e_min_ci: tuple[float, float]
    cbs: float
    cbs_ci: tuple[float, float]
    overhead: float
    reference_batch: float = field(metadata=BATCH)
    perfect_scaling_max_batch: float = field(
        metadata=as_json("regions", "perfect_scaling_max_batch")
    )
    max_parallelism_min_batch: float = field(
        metadata=as_json("regions", "max_parallelism_min_batch")
    )
    n_points: int
    not_reached: tuple[float, ...] = field(metadata=BATCH)
    censored_at: tuple[float | None, ...]
    batch_sizes: tuple[float, ...] = field(metadata=BATCH)
    steps: tuple[float, ...]
    fitted_steps: tuple[float, ...]
    residuals: tuple[float, ...]
    residual_std: float
    confidence: float
    n_boot: int
    seed: int
    warnings: tuple[str, ...]
    # batch sizes left out: more than UNDER_TUNED_FACTOR × the steps of a smaller one
    under_tuned: tuple[float, ...] = field(default=(), metadata=BATCH)

    def predict(self, batch: ArrayLike) -> np.ndarray:
        """S(B) of the fitted model at the given batch sizes."""
        b = floats(batch, "batch")
        return self.s_min * (1.0 + self.b_crit / b)


def _profile_sse(x: np.ndarray, y: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sum of squares of log S − (a + softplus(b − log B)) with a profiled out, per b."""
    z = y[None, :] - softplus(b[:, None] - x[None, :])
    z = z - z.mean(axis=1, keepdims=True)
    return (z * z).sum(axis=1)


def _profile_refit(
    x: np.ndarray, y: np.ndarray, b_start: float, lo: float, hi: float, iters: int = 60
) -> tuple[np.ndarray, np.ndarray]:
    """Refit many datasets ``y`` (rows) at once: Gauss-Newton on the profiled b.

    For fixed b = log B_crit the best a = log S_min is the mean of log S − softplus(b − x),
    so each dataset is a 1-D problem; a damped Gauss-Newton step with a small line search
    converges in a handful of iterations, vectorised over all bootstrap replicates.
    """
    m = y.shape[0]
    b = np.full(m, b_start)

    def residuals(bv: np.ndarray) -> np.ndarray:
        z = y - softplus(bv[:, None] - x[None, :])
        return z - z.mean(axis=1, keepdims=True)

    r = residuals(b)
    cur = (r * r).sum(axis=1)
    damping = np.array([1.0, 0.5, 0.25, 0.1, 0.02])
    for _ in range(iters):
        sig = expit(b[:, None] - x[None, :])
        c = sig - sig.mean(axis=1, keepdims=True)
        den = (c * c).sum(axis=1)
        num = (c * r).sum(axis=1)
        step = np.where(den > 1e-300, num / np.where(den > 1e-300, den, 1.0), 0.0)
        step = np.clip(step, -2.0, 2.0)
        cands = np.clip(b[None, :] + damping[:, None] * step[None, :], lo, hi)  # (k, m)
        vals = np.stack([(residuals(cb) ** 2).sum(axis=1) for cb in cands])
        k = np.argmin(vals, axis=0)
        best = vals[k, np.arange(m)]
        improve = best < cur
        new_b = np.where(improve, cands[k, np.arange(m)], b)
        moved = np.abs(new_b - b).max()
        b, cur = new_b, np.where(improve, best, cur)
        r = residuals(b)
        if moved < 1e-10:
            break
    a = (y - softplus(b[:, None] - x[None, :])).mean(axis=1)
    return a, b


def _fit_log_model(x: np.ndarray, y: np.ndarray, lo: float, hi: float) -> tuple[float, float]:
    """Least squares of log S on a + softplus(b − log B); returns (a, b) = logs of S_min, B_crit."""
    candidates = list(np.linspace(lo, hi, 241))
    # Initial guess from the linear form 1/S = 1/S_min − B_crit·(1/E), E = B·S.
    s, bsz = np.exp(y), np.exp(x)
    inv_e = 1.0 / (bsz * s)
    if np.ptp(inv_e) > 0:
        scale = float(inv_e.max())
        design = np.column_stack([inv_e / scale, np.ones_like(inv_e)])
        (slope, intercept), *_ = np.linalg.lstsq(design, 1.0 / s, rcond=None)
        slope /= scale
        if intercept > 0 and slope < 0:
            candidates.append(float(np.clip(math.log(-slope), lo, hi)))
    cand = np.asarray(candidates)
    b0 = float(cand[np.argmin(_profile_sse(x, y, cand))])
    b0 = min(max(b0, lo + 1e-9), hi - 1e-9)
    a0 = float(np.mean(y - softplus(b0 - x)))

    def fun(p: np.ndarray) -> np.ndarray:
        return y - p[0] - softplus(p[1] - x)

    def jac(p: np.ndarray) -> np.ndarray:
        return np.column_stack([-np.ones_like(x), -expit(p[1] - x)])

    sol = least_squares(
        fun,
        np.array([a0, b0]),
        jac=jac,
        bounds=([-np.inf, lo], [np.inf, hi]),
        method="trf",
        xtol=1e-12,
        ftol=1e-12,
        gtol=1e-12,
    )
    return float(sol.x[0]), float(sol.x[1])


def fit_steps(
    batch_sizes: ArrayLike,
    steps: ArrayLike,
    *,
    overhead: float = 0.2,
    reference_batch: float | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    not_reached: Iterable[float] | Mapping[float, float | None] = (),
    monotone: bool = True,
) -> StepsFit:
    """Fit S(B) = S_min (1 + B_crit/B) to steps to result (McCandlish et al. 2018).

    Least squares of log S on log S_min + log(1 + B_crit/B), parametrised by log S_min and
    log B_crit (scipy ``least_squares``, started from the linear form
    1/S = 1/S_min − B_crit·(1/E)). Intervals come from a residual bootstrap of that fit
    (leverage-adjusted residuals resampled onto the fitted curve, refitted, percentile
    intervals), not from resampling trials. Rows with NaN/inf steps, and the batch sizes
    in ``not_reached`` (a list, or a mapping batch → censoring horizon), are censored:
    excluded from the fit and listed in ``not_reached``. Several rows per batch size are
    reduced to their minimum. ``reference_batch`` (B0 of the overhead-based critical
    batch size) defaults to the smallest batch size used in the fit. With ``monotone``
    (the default) a batch size that needed more than ``UNDER_TUNED_FACTOR`` times the
    steps of a smaller one is left out as under-tuned (``under_tuned``, and a warning).
    Raises ValueError with fewer than 3 usable batch sizes.
    """
    if not (overhead > 0 and math.isfinite(overhead)):
        raise ValueError(f"overhead must be a positive number, got {overhead!r}")
    if reference_batch is not None and not (math.isfinite(reference_batch) and reference_batch > 0):
        raise ValueError(f"reference_batch must be a positive number, got {reference_batch!r}")
    if n_boot < 0:
        raise ValueError(f"n_boot must be >= 0, got {n_boot}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")

    reduced = steps_to_result(batch_sizes, steps)
    censored: dict[float, float | None] = dict(
        zip(reduced.not_reached, reduced.censored_at, strict=True)
    )
    extra = dict(not_reached) if isinstance(not_reached, Mapping) else dict.fromkeys(not_reached)
    for nb, bound in extra.items():
        nbf = float(nb)
        prev = censored.get(nbf)
        censored[nbf] = bound if prev is None else (prev if bound is None else max(prev, bound))
    used = [
        (bb, ss)
        for bb, ss in zip(reduced.batch_sizes, reduced.steps, strict=True)
        if bb not in censored
    ]
    under: list[tuple[float, float, float, float]] = []  # (batch, steps, smaller, its steps)
    if monotone:
        kept: list[tuple[float, float]] = []
        for bb, ss in sorted(used):
            best = min(kept, key=lambda u: u[1]) if kept else None
            if best is not None and ss > UNDER_TUNED_FACTOR * best[1]:
                under.append((bb, ss, *best))
            else:
                kept.append((bb, ss))
        used = kept
    if len(used) < 3:
        left_out = "".join(
            f"; left out as under-tuned: {batch_json(bb)} (needed {ss:.6g} steps, more than "
            f"{UNDER_TUNED_FACTOR:g}× the {sb:.6g} of the smaller {batch_json(b_small)})"
            for bb, ss, b_small, sb in under
        )
        raise ValueError(
            f"fitting S(B) needs at least 3 batch sizes that reached the target; got "
            f"{len(used)} ({[batch_json(b) for b, _ in used]}), not reached: "
            f"{[batch_json(b) for b in sorted(censored)]}{left_out}"
        )
    bsz = np.array([u[0] for u in used])
    s = np.array([u[1] for u in used])
    if (s <= 0).any():
        raise ValueError(
            f"steps must be positive to fit in log space; batch sizes "
            f"{[batch_json(b) for b in bsz[s <= 0]]} have 0 steps"
        )
    x, y = np.log(bsz), np.log(s)
    lo, hi = float(x.min() - BCRIT_MARGIN), float(x.max() + BCRIT_MARGIN)
    a_hat, b_hat = _fit_log_model(x, y, lo, hi)
    fitted = a_hat + softplus(b_hat - x)
    resid = y - fitted
    n = x.size

    if n_boot > 0:
        jac = np.column_stack([np.ones(n), expit(b_hat - x)])
        hat = jac @ np.linalg.pinv(jac.T @ jac) @ jac.T
        lev = np.clip(np.diag(hat), 0.0, 1.0)
        # Fitted residuals are shrunk towards zero (most at high-leverage points);
        # rescale by 1/sqrt(1 - h) so the bootstrap noise matches the true noise.
        mod = np.where(lev < 1 - 1e-9, resid / np.sqrt(np.maximum(1 - lev, 1e-12)), 0.0)
        mod = mod - mod.mean()
        rng = np.random.default_rng(seed)
        y_boot = fitted[None, :] + mod[rng.integers(0, n, size=(n_boot, n))]
        a_boot, b_boot = _profile_refit(x, y_boot, b_hat, lo, hi)
        s_ci = tuple(math.exp(v) for v in percentile_ci(a_boot, confidence))
        b_ci = tuple(math.exp(v) for v in percentile_ci(b_boot, confidence))
        e_ci = tuple(math.exp(v) for v in percentile_ci(a_boot + b_boot, confidence))
    else:
        s_ci = b_ci = e_ci = (math.nan, math.nan)

    s_min, b_crit = math.exp(a_hat), math.exp(b_hat)
    b0 = float(bsz.min()) if reference_batch is None else float(reference_batch)
    r = float(overhead)
    cbs = (1 + r) * b0 + r * b_crit

    warnings: list[str] = [
        f"batch size {batch_json(bb)} needed {ss:.6g} steps, more than {UNDER_TUNED_FACTOR:g}× "
        f"the {sb:.6g} of the smaller {batch_json(b_small)}: under-tuned (a larger batch never "
        f"needs more steps when tuned well), left out of the fit"
        for bb, ss, b_small, sb in under
    ]
    if b_hat <= lo + 1e-6 or b_hat >= hi - 1e-6:
        warnings.append(
            f"B_crit is not identified by the data: the fit hit its bound {b_crit:.4g} "
            f"(S(B) is {'flat' if b_hat <= lo + 1e-6 else 'proportional to 1/B'} over "
            f"the measured batch sizes)"
        )
    elif not bsz.min() <= b_crit <= bsz.max():
        warnings.append(
            f"B_crit = {b_crit:.4g} lies outside the measured batch sizes "
            f"[{batch_json(bsz.min())}, {batch_json(bsz.max())}]; it is an extrapolation"
        )
    nr_sorted = sorted(censored)
    for nb in nr_sorted:
        bound = censored[nb]
        pred = s_min * (1 + b_crit / nb)
        if bound is not None and pred < bound:
            warnings.append(
                f"batch size {batch_json(nb)} did not reach the target within {bound:.6g} "
                f"steps, but the fit predicts {pred:.6g}"
            )

    return StepsFit(
        s_min=s_min,
        e_min=s_min * b_crit,
        b_crit=b_crit,
        s_min_ci=(float(s_ci[0]), float(s_ci[1])),
        e_min_ci=(float(e_ci[0]), float(e_ci[1])),
        b_crit_ci=(float(b_ci[0]), float(b_ci[1])),
        cbs=cbs,
        cbs_ci=((1 + r) * b0 + r * b_ci[0], (1 + r) * b0 + r * b_ci[1]),
        overhead=r,
        reference_batch=b0,
        perfect_scaling_max_batch=r * b_crit,
        max_parallelism_min_batch=b_crit / r,
        batch_sizes=tuple(float(v) for v in bsz),
        steps=tuple(float(v) for v in s),
        fitted_steps=tuple(float(v) for v in np.exp(fitted)),
        residuals=tuple(float(v) for v in resid),
        residual_std=float(np.sqrt((resid**2).sum() / (n - 2))) if n > 2 else math.nan,
        n_points=n,
        not_reached=tuple(nr_sorted),
        censored_at=tuple(censored[nb] for nb in nr_sorted),
        confidence=confidence,
        n_boot=n_boot,
        seed=seed,
        warnings=tuple(warnings),
        under_tuned=tuple(u[0] for u in under),
    )
