"""Steps to result and the S(B) fit.

Shallue et al. 2019 (steps to result: per batch size, the fewest steps any tuned trial
needed), McCandlish et al. 2018 (S(B) = S_min (1 + B_crit/B), E = B·S = E_min (1 + B/B_crit)),
Zhang et al. 2024 (overhead-based critical batch size) and Kaplan et al. 2020
(B_crit(L) = B*/L^(1/α_B)).

Every fit is a pure function of arrays and returns a frozen dataclass whose ``to_dict()``
holds JSON-ready values (non-finite floats become ``None``).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats
from scipy.optimize import least_squares
from scipy.special import expit

from stepscale.rundir import interpolated_crossing

__all__ = [
    "BcritAtTargets",
    "BcritVsTarget",
    "CurveSteps",
    "NoiseScaleSummary",
    "SeedSpread",
    "StepsFit",
    "StepsToResult",
    "bcrit_at_targets",
    "first_crossing",
    "fit_bcrit_vs_target",
    "fit_steps",
    "noise_scale_summary",
    "spread_over_seeds",
    "steps_at_target",
    "steps_to_result",
    "target_problems",
]

# B_crit may lie outside the measured batch sizes, but not by more than this factor on
# either side: beyond it S(B) is flat (or ∝ 1/B) over the data and B_crit is unidentified.
_BCRIT_MARGIN = math.log(1e6)


# --------------------------------------------------------------------------- helpers


def _jsonable(value: Any) -> Any:
    """Recursively turn a value into JSON-ready Python: non-finite floats → None."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        return f if math.isfinite(f) else None
    return value


def _batch_json(b: float | None) -> int | float | None:
    """A batch size for JSON: an int when integral (64, not 64.0)."""
    if b is None or not math.isfinite(b):
        return None
    return int(b) if float(b).is_integer() and abs(b) < 2**53 else float(b)


def _floats(values: ArrayLike, name: str) -> np.ndarray:
    """A 1-D float array (None → nan) or a ValueError naming the argument."""
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numbers: {exc}") from None
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    return arr


def _positive_batches(batch: np.ndarray, name: str = "batch") -> None:
    bad = ~(np.isfinite(batch) & (batch > 0))
    if bad.any():
        raise ValueError(f"{name} sizes must be finite and positive; got {batch[bad][:5].tolist()}")


def _softplus(z: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, z)


def _percentile_ci(samples: np.ndarray, confidence: float) -> tuple[float, float]:
    samples = samples[np.isfinite(samples)]
    if samples.size == 0:
        return (math.nan, math.nan)
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(samples, [tail, 1.0 - tail])
    return (float(lo), float(hi))


# ------------------------------------------------------------------- steps to result


@dataclass(frozen=True)
class StepsToResult:
    """Steps to result per batch size (ascending), and the batch sizes that never got there.

    ``censored_at[i]`` is the largest horizon any trial of ``not_reached[i]`` ran to
    (``None`` when no horizon was given): the target was not reached within it.
    """

    batch_sizes: tuple[float, ...]
    steps: tuple[float, ...]
    n_rows: tuple[int, ...]
    not_reached: tuple[float, ...]
    censored_at: tuple[float | None, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "batch_sizes": [_batch_json(b) for b in self.batch_sizes],
            "steps": _jsonable(self.steps),
            "n_rows": list(self.n_rows),
            "not_reached": [_batch_json(b) for b in self.not_reached],
            "censored_at": _jsonable(self.censored_at),
        }


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
    b = _floats(batch, "batch")
    s = _floats(steps, "steps")
    if b.shape != s.shape:
        raise ValueError(f"batch and steps differ in length: {b.size} vs {s.size}")
    h = None if horizon is None else _floats(horizon, "horizon")
    if h is not None and h.shape != b.shape:
        raise ValueError(f"batch and horizon differ in length: {b.size} vs {h.size}")
    _positive_batches(b)
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
class StepsFit:
    """Fit of S(B) = S_min (1 + B_crit/B) in log space, with residual-bootstrap intervals.

    ``residuals`` are log(S) − log(S_fit) at ``batch_sizes`` (those used in the fit).
    ``cbs`` is the overhead-based critical batch size (1+r)·B0 + r·B_crit with
    r = ``overhead`` and B0 = ``reference_batch``. Perfect scaling holds for
    B ≤ ``perfect_scaling_max_batch`` (= r·B_crit, E ≤ (1+r)·E_min), maximal data
    parallelism for B ≥ ``max_parallelism_min_batch`` (= B_crit/r, S ≤ (1+r)·S_min).
    """

    s_min: float
    e_min: float
    b_crit: float
    s_min_ci: tuple[float, float]
    e_min_ci: tuple[float, float]
    b_crit_ci: tuple[float, float]
    cbs: float
    cbs_ci: tuple[float, float]
    overhead: float
    reference_batch: float
    perfect_scaling_max_batch: float
    max_parallelism_min_batch: float
    batch_sizes: tuple[float, ...]
    steps: tuple[float, ...]
    fitted_steps: tuple[float, ...]
    residuals: tuple[float, ...]
    residual_std: float
    n_points: int
    not_reached: tuple[float, ...]
    censored_at: tuple[float | None, ...]
    confidence: float
    n_boot: int
    seed: int
    warnings: tuple[str, ...]

    def predict(self, batch: ArrayLike) -> np.ndarray:
        """S(B) of the fitted model at the given batch sizes."""
        b = _floats(batch, "batch")
        return self.s_min * (1.0 + self.b_crit / b)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the keys of ``sweep fit steps`` plus extras)."""
        return {
            "s_min": _jsonable(self.s_min),
            "e_min": _jsonable(self.e_min),
            "b_crit": _jsonable(self.b_crit),
            "b_crit_ci": _jsonable(self.b_crit_ci),
            "s_min_ci": _jsonable(self.s_min_ci),
            "e_min_ci": _jsonable(self.e_min_ci),
            "cbs": _jsonable(self.cbs),
            "cbs_ci": _jsonable(self.cbs_ci),
            "overhead": _jsonable(self.overhead),
            "reference_batch": _batch_json(self.reference_batch),
            "regions": {
                "perfect_scaling_max_batch": _jsonable(self.perfect_scaling_max_batch),
                "max_parallelism_min_batch": _jsonable(self.max_parallelism_min_batch),
            },
            "n_points": self.n_points,
            "not_reached": [_batch_json(b) for b in self.not_reached],
            "censored_at": _jsonable(self.censored_at),
            "batch_sizes": [_batch_json(b) for b in self.batch_sizes],
            "steps": _jsonable(self.steps),
            "fitted_steps": _jsonable(self.fitted_steps),
            "residuals": _jsonable(self.residuals),
            "residual_std": _jsonable(self.residual_std),
            "confidence": self.confidence,
            "n_boot": self.n_boot,
            "seed": self.seed,
            "warnings": list(self.warnings),
        }


def _profile_sse(x: np.ndarray, y: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sum of squares of log S − (a + softplus(b − log B)) with a profiled out, per b."""
    z = y[None, :] - _softplus(b[:, None] - x[None, :])
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
        z = y - _softplus(bv[:, None] - x[None, :])
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
    a = (y - _softplus(b[:, None] - x[None, :])).mean(axis=1)
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
    a0 = float(np.mean(y - _softplus(b0 - x)))

    def fun(p: np.ndarray) -> np.ndarray:
        return y - p[0] - _softplus(p[1] - x)

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
    batch size) defaults to the smallest batch size used in the fit. Raises ValueError
    with fewer than 3 usable batch sizes.
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
    if len(used) < 3:
        raise ValueError(
            f"fitting S(B) needs at least 3 batch sizes that reached the target; got "
            f"{len(used)} ({[_batch_json(b) for b, _ in used]}), not reached: "
            f"{[_batch_json(b) for b in sorted(censored)]}"
        )
    bsz = np.array([u[0] for u in used])
    s = np.array([u[1] for u in used])
    if (s <= 0).any():
        raise ValueError(
            f"steps must be positive to fit in log space; batch sizes "
            f"{[_batch_json(b) for b in bsz[s <= 0]]} have 0 steps"
        )
    x, y = np.log(bsz), np.log(s)
    lo, hi = float(x.min() - _BCRIT_MARGIN), float(x.max() + _BCRIT_MARGIN)
    a_hat, b_hat = _fit_log_model(x, y, lo, hi)
    fitted = a_hat + _softplus(b_hat - x)
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
        s_ci = tuple(math.exp(v) for v in _percentile_ci(a_boot, confidence))
        b_ci = tuple(math.exp(v) for v in _percentile_ci(b_boot, confidence))
        e_ci = tuple(math.exp(v) for v in _percentile_ci(a_boot + b_boot, confidence))
    else:
        s_ci = b_ci = e_ci = (math.nan, math.nan)

    s_min, b_crit = math.exp(a_hat), math.exp(b_hat)
    b0 = float(bsz.min()) if reference_batch is None else float(reference_batch)
    r = float(overhead)
    cbs = (1 + r) * b0 + r * b_crit

    warnings: list[str] = []
    if b_hat <= lo + 1e-6 or b_hat >= hi - 1e-6:
        warnings.append(
            f"B_crit is not identified by the data: the fit hit its bound {b_crit:.4g} "
            f"(S(B) is {'flat' if b_hat <= lo + 1e-6 else 'proportional to 1/B'} over "
            f"the measured batch sizes)"
        )
    elif not bsz.min() <= b_crit <= bsz.max():
        warnings.append(
            f"B_crit = {b_crit:.4g} lies outside the measured batch sizes "
            f"[{_batch_json(bsz.min())}, {_batch_json(bsz.max())}]; it is an extrapolation"
        )
    nr_sorted = sorted(censored)
    for nb in nr_sorted:
        bound = censored[nb]
        pred = s_min * (1 + b_crit / nb)
        if bound is not None and pred < bound:
            warnings.append(
                f"batch size {_batch_json(nb)} did not reach the target within {bound:.6g} "
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
    )


# ------------------------------------------------------------ B_crit vs target (Kaplan)


@dataclass(frozen=True)
class BcritVsTarget:
    """Fit of B_crit(L) = B*/L^(1/α_B) in log space (Kaplan et al. 2020).

    ``slope`` is d log B_crit / d log L = −1/α_B, with a t-interval ``slope_ci``
    (NaN with only two targets).
    """

    b_star: float
    alpha_b: float
    slope: float
    slope_ci: tuple[float, float]
    targets: tuple[float, ...]
    b_crits: tuple[float, ...]
    residuals: tuple[float, ...]
    n_points: int

    def predict(self, target: ArrayLike) -> np.ndarray:
        """B_crit at the given targets."""
        return self.b_star * np.power(_floats(target, "target"), self.slope)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return _jsonable(
            {
                "b_star": self.b_star,
                "alpha_b": self.alpha_b,
                "slope": self.slope,
                "slope_ci": self.slope_ci,
                "targets": self.targets,
                "b_crits": self.b_crits,
                "residuals": self.residuals,
                "n_points": self.n_points,
            }
        )


def fit_bcrit_vs_target(
    targets: ArrayLike, b_crits: ArrayLike, *, confidence: float = 0.95
) -> BcritVsTarget:
    """Fit B_crit(L) = B*/L^(1/α_B) by least squares of log B_crit on log L.

    Needs at least two distinct positive targets with finite positive B_crit; non-finite
    entries are skipped.
    """
    t = _floats(targets, "targets")
    bc = _floats(b_crits, "b_crits")
    if t.shape != bc.shape:
        raise ValueError(f"targets and b_crits differ in length: {t.size} vs {bc.size}")
    ok = np.isfinite(t) & np.isfinite(bc) & (t > 0) & (bc > 0)
    t, bc = t[ok], bc[ok]
    if np.unique(t).size < 2:
        raise ValueError(
            f"fitting B_crit(L) needs at least 2 distinct positive targets with a finite "
            f"B_crit; got {t.tolist()}"
        )
    lx, ly = np.log(t), np.log(bc)
    slope, intercept = np.polyfit(lx, ly, 1)
    resid = ly - (intercept + slope * lx)
    n = lx.size
    if n > 2:
        se = math.sqrt((resid**2).sum() / (n - 2) / ((lx - lx.mean()) ** 2).sum())
        q = stats.t.ppf(0.5 + confidence / 2, n - 2)
        ci = (float(slope - q * se), float(slope + q * se))
    else:
        ci = (math.nan, math.nan)
    return BcritVsTarget(
        b_star=math.exp(intercept),
        alpha_b=-1.0 / slope if slope != 0 else math.inf,
        slope=float(slope),
        slope_ci=ci,
        targets=tuple(float(v) for v in t),
        b_crits=tuple(float(v) for v in bc),
        residuals=tuple(float(v) for v in resid),
        n_points=n,
    )


# ----------------------------------------------------- steps to target from stored curves


def first_crossing(steps: ArrayLike, loss: ArrayLike, target: float) -> tuple[float, float]:
    """First evaluated step with loss strictly below ``target``, and the interpolated one.

    The interpolated crossing treats log(loss) as linear in step between the previous
    evaluation and the first one below target (`stepscale.rundir.interpolated_crossing`,
    the trainer's formula); with no previous evaluation it is the crossing step itself. Non-finite
    losses are skipped. Returns (nan, nan) when the target is never reached.
    """
    st = _floats(steps, "steps")
    lo = _floats(loss, "loss")
    if st.shape != lo.shape:
        raise ValueError(f"steps and loss differ in length: {st.size} vs {lo.size}")
    keep = np.isfinite(st) & np.isfinite(lo)
    st, lo = st[keep], lo[keep]
    order = np.argsort(st, kind="stable")
    st, lo = st[order], lo[order]
    below = np.flatnonzero(lo < target)
    if below.size == 0:
        return (math.nan, math.nan)
    i = int(below[0])
    s1 = float(st[i])
    if i == 0:
        return (s1, s1)
    return (s1, interpolated_crossing(float(st[i - 1]), float(lo[i - 1]), s1, float(lo[i]), target))


@dataclass(frozen=True)
class CurveSteps:
    """Steps to a target recomputed per trial from stored eval-loss curves.

    ``steps`` is the first evaluated step strictly below target, ``steps_interp`` the
    log-linear interpolated crossing (both NaN if not reached); ``horizon`` is the last
    evaluated step of each trial (a trial that did not reach the target is censored there).
    """

    target: float
    trials: tuple[Hashable, ...]
    batch: tuple[float, ...]
    steps: tuple[float, ...]
    steps_interp: tuple[float, ...]
    horizon: tuple[float, ...]

    def result(self, interpolated: bool = False) -> StepsToResult:
        """Steps to result per batch size from these trials."""
        s = self.steps_interp if interpolated else self.steps
        return steps_to_result(self.batch, s, self.horizon)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "target": _jsonable(self.target),
            "trials": [str(t) for t in self.trials],
            "batch": [_batch_json(b) for b in self.batch],
            "steps": _jsonable(self.steps),
            "steps_interp": _jsonable(self.steps_interp),
            "horizon": _jsonable(self.horizon),
        }


def steps_at_target(
    curves: Mapping[Hashable, tuple[ArrayLike, ArrayLike]],
    batch: Mapping[Hashable, float],
    target: float,
) -> CurveSteps:
    """Recompute each trial's steps to ``target`` from its eval-loss curve.

    ``curves`` maps trial → (steps, eval losses); ``batch`` maps trial → batch size.
    Trials are reported in sorted order (by their string form).
    """
    missing = [t for t in curves if t not in batch]
    if missing:
        raise ValueError(f"no batch size given for trials {[str(t) for t in missing][:5]}")
    trials = sorted(curves, key=str)
    out_s, out_i, out_h, out_b = [], [], [], []
    for trial in trials:
        st, lo = curves[trial]
        first, interp = first_crossing(st, lo, target)
        stf = _floats(st, "steps")
        fin = stf[np.isfinite(stf)]
        out_s.append(first)
        out_i.append(interp)
        out_h.append(float(fin.max()) if fin.size else math.nan)
        out_b.append(float(batch[trial]))
    return CurveSteps(
        target=float(target),
        trials=tuple(trials),
        batch=tuple(out_b),
        steps=tuple(out_s),
        steps_interp=tuple(out_i),
        horizon=tuple(out_h),
    )


@dataclass(frozen=True)
class BcritAtTargets:
    """S(B) fits redone at several targets from stored curves, and B_crit(L) across them.

    ``fits`` maps each target to its fit; ``skipped`` maps targets that could not be
    fitted to the reason. ``flagged`` maps fitted targets whose S(B) fit is not
    well-posed (see :func:`target_problems`) to the reason: they stay in ``fits`` but are
    left out of ``law``, which is fitted on the well-posed targets only and is None with
    fewer than ``min_law_targets`` of them (``law_note`` says why).
    """

    fits: Mapping[float, StepsFit]
    skipped: Mapping[float, str]
    law: BcritVsTarget | None
    flagged: Mapping[float, str] = field(default_factory=dict)
    law_note: str | None = None

    @property
    def well_posed(self) -> tuple[float, ...]:
        """The fitted targets whose fit is well-posed, ascending."""
        return tuple(t for t in self.fits if t not in self.flagged)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "fits": [
                {
                    "target": _jsonable(t),
                    "well_posed": t not in self.flagged,
                    "problem": self.flagged.get(t),
                    **f.to_dict(),
                }
                for t, f in self.fits.items()
            ],
            "skipped": [{"target": _jsonable(t), "reason": r} for t, r in self.skipped.items()],
            "law": None if self.law is None else self.law.to_dict(),
            "law_note": self.law_note,
        }


def _last_loss(curve: tuple[ArrayLike, ArrayLike]) -> float:
    st, lo = _floats(curve[0], "steps"), _floats(curve[1], "loss")
    ok = np.isfinite(st) & np.isfinite(lo)
    return float(lo[ok][np.argmax(st[ok])]) if ok.any() else math.nan


def _cut_problem(
    curves: Mapping[Hashable, tuple[ArrayLike, ArrayLike]],
    cut_at: Mapping[Hashable, float],
    target: float,
) -> str | None:
    """Why steps to ``target`` are unknown for trials whose curves were cut, or None.

    A trial stopped on reaching loss c (``cut_at[trial] = c``) has no evaluation after
    the first one below c; for a harder target L < c its steps to L are unknown (not
    censored) unless that last evaluation is already below L.
    """
    unknown = [
        c
        for t, c in cut_at.items()
        if t in curves and math.isfinite(c) and target < c and not _last_loss(curves[t]) < target
    ]
    if not unknown:
        return None
    levels = ", ".join(f"{c:g}" for c in sorted(set(unknown)))
    return (
        f"harder than the loss {levels} at which {len(unknown)} trial(s) were stopped "
        f"(stop_at_target): their eval-loss curves end there, so their steps to {target:g} "
        f"are unknown, not censored"
    )


def _evals_to_result(
    curves: Mapping[Hashable, tuple[ArrayLike, ArrayLike]],
    cs: CurveSteps,
    batch_size: float,
) -> float:
    """At one batch size, how many evaluation intervals the steps to result span:
    s / (s − previous evaluated step) of its fastest trial (largest over ties)."""
    rows = [i for i, b in enumerate(cs.batch) if b == batch_size and math.isfinite(cs.steps[i])]
    if not rows:
        return math.nan
    best = min(cs.steps[i] for i in rows)
    out = math.nan
    for i in rows:
        s = cs.steps[i]
        if s != best:
            continue
        st = _floats(curves[cs.trials[i]][0], "steps")
        lo = _floats(curves[cs.trials[i]][1], "loss")
        before = st[np.isfinite(st) & np.isfinite(lo) & (st < s)]
        prev = float(before.max()) if before.size else 0.0
        k = s / (s - prev) if s > prev else math.nan
        out = k if not math.isfinite(out) else max(out, k)
    return out


def target_problems(
    curves: Mapping[Hashable, tuple[ArrayLike, ArrayLike]],
    cs: CurveSteps,
    fit: StepsFit,
    *,
    cut_at: Mapping[Hashable, float] | None = None,
    min_evals: int = 3,
    max_ci_ratio: float = 10.0,
) -> tuple[str, ...]:
    """Why the S(B) fit at ``cs.target`` is not well-posed (empty when it is).

    - curves cut at an easier loss (``cut_at``, trial → loss it was stopped at): steps to
      this harder target are unknown for those trials;
    - fewer than 3 batch sizes reach the target after ``min_evals`` evaluation intervals
      or more: steps measured at the first evaluations are quantised by the evaluation
      interval (reached at the 1st evaluation: anywhere between 0 and that step), so
      they cannot resolve S(B);
    - B_crit at the bound of the fit (S(B) flat, or ∝ 1/B, over the batch sizes);
    - a bootstrap interval of B_crit spanning more than a factor ``max_ci_ratio``.
    """
    out: list[str] = []
    if cut_at:
        cut = _cut_problem(curves, cut_at, cs.target)
        if cut is not None:
            out.append(cut)
    evals = [_evals_to_result(curves, cs, b) for b in fit.batch_sizes]
    resolved = sum(1 for k in evals if k >= min_evals - 1e-9)
    if resolved < 3:
        early = [
            _batch_json(b)
            for b, k in zip(fit.batch_sizes, evals, strict=True)
            if not k >= min_evals - 1e-9
        ]
        out.append(
            f"reached within the first {min_evals - 1} evaluations at {len(early)} of "
            f"{len(evals)} batch sizes ({early}; at most {max(fit.steps):g} steps): the "
            f"evaluation interval does not resolve S(B) (needs 3 batch sizes reaching it "
            f"at evaluation {min_evals} or later)"
        )
    x = np.log(np.asarray(fit.batch_sizes))
    lb = math.log(fit.b_crit)
    if lb <= x.min() - _BCRIT_MARGIN + 1e-6 or lb >= x.max() + _BCRIT_MARGIN - 1e-6:
        flat = lb <= x.min() - _BCRIT_MARGIN + 1e-6
        out.append(
            f"B_crit is not identified: the fit hit its bound {fit.b_crit:.3g} (S(B) is "
            f"{'flat' if flat else 'proportional to 1/B'} over the batch sizes)"
        )
    else:
        lo, hi = fit.b_crit_ci
        if math.isfinite(lo) and math.isfinite(hi) and lo > 0 and hi / lo > max_ci_ratio:
            out.append(
                f"B_crit = {fit.b_crit:.4g} is poorly determined: its {fit.confidence:.0%} "
                f"interval [{lo:.3g}, {hi:.3g}] spans a factor {hi / lo:.3g} "
                f"(more than {max_ci_ratio:g})"
            )
    return tuple(out)


def bcrit_at_targets(
    curves: Mapping[Hashable, tuple[ArrayLike, ArrayLike]],
    batch: Mapping[Hashable, float],
    targets: Sequence[float],
    *,
    interpolated: bool = False,
    cut_at: Mapping[Hashable, float] | None = None,
    min_evals: int = 3,
    max_ci_ratio: float = 10.0,
    min_law_targets: int = 3,
    **fit_kwargs: Any,
) -> BcritAtTargets:
    """Fit S(B) at each target from stored curves, then B_crit(L) (Kaplan et al. 2020).

    ``fit_kwargs`` go to :func:`fit_steps`. A target with too few batch sizes reaching
    it is recorded in ``skipped`` rather than failing the whole call. A fitted target
    whose fit is not well-posed (:func:`target_problems`, with ``cut_at``,
    ``min_evals`` and ``max_ci_ratio``) is recorded in ``flagged`` and left out of the
    law, which needs ``min_law_targets`` well-posed targets (3: with 2 the line through
    them has no residual and no interval).
    """
    fits: dict[float, StepsFit] = {}
    skipped: dict[float, str] = {}
    flagged: dict[float, str] = {}
    for target in sorted(float(t) for t in targets):
        cs = steps_at_target(curves, batch, target)
        res = cs.result(interpolated)
        try:
            fit = fit_steps(
                res.batch_sizes,
                res.steps,
                not_reached=dict(zip(res.not_reached, res.censored_at, strict=True)),
                **fit_kwargs,
            )
        except ValueError as exc:
            cut = _cut_problem(curves, cut_at, target) if cut_at else None
            skipped[target] = str(exc) if cut is None else f"{cut}; {exc}"
            continue
        fits[target] = fit
        problems = target_problems(
            curves, cs, fit, cut_at=cut_at, min_evals=min_evals, max_ci_ratio=max_ci_ratio
        )
        if problems:
            flagged[target] = "; ".join(problems)
    good = [t for t in fits if t not in flagged]
    law = None
    note = None
    if len(good) >= max(min_law_targets, 2):
        law = fit_bcrit_vs_target(good, [fits[t].b_crit for t in good])
    elif fits:
        have = ", ".join(f"{t:g}" for t in good) or "none"
        note = (
            f"B_crit(L) not fitted: it needs at least {max(min_law_targets, 2)} targets with "
            f"a well-posed S(B) fit; {len(good)} here ({have})"
        )
    return BcritAtTargets(fits=fits, skipped=skipped, law=law, flagged=flagged, law_note=note)


# ------------------------------------------------------------------------ small helpers


@dataclass(frozen=True)
class SeedSpread:
    """Steps to target across confirm seeds, per batch size (statistics over reached runs)."""

    batch_sizes: tuple[float, ...]
    n: tuple[int, ...]
    n_reached: tuple[int, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    min: tuple[float, ...]
    max: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: one entry per batch size."""
        return {
            "batch_sizes": [
                {
                    "batch": _batch_json(b),
                    "n": n,
                    "n_reached": nr,
                    "mean": _jsonable(mu),
                    "std": _jsonable(sd),
                    "min": _jsonable(lo),
                    "max": _jsonable(hi),
                }
                for b, n, nr, mu, sd, lo, hi in zip(
                    self.batch_sizes,
                    self.n,
                    self.n_reached,
                    self.mean,
                    self.std,
                    self.min,
                    self.max,
                    strict=True,
                )
            ]
        }


def spread_over_seeds(batch: ArrayLike, steps: ArrayLike) -> SeedSpread:
    """Mean, std (ddof=1), min and max of steps to target over seeds, per batch size.

    One entry per run; NaN/inf steps = not reached (counted in ``n`` but not in the
    statistics, which are NaN when no run reached the target).
    """
    b = _floats(batch, "batch")
    s = _floats(steps, "steps")
    if b.shape != s.shape:
        raise ValueError(f"batch and steps differ in length: {b.size} vs {s.size}")
    _positive_batches(b)
    sizes = np.unique(b)
    cols: dict[str, list[Any]] = {k: [] for k in ("n", "nr", "mean", "std", "min", "max")}
    for size in sizes:
        rows = s[b == size]
        ok = rows[np.isfinite(rows)]
        cols["n"].append(int(rows.size))
        cols["nr"].append(int(ok.size))
        cols["mean"].append(float(ok.mean()) if ok.size else math.nan)
        cols["std"].append(float(ok.std(ddof=1)) if ok.size >= 2 else math.nan)
        cols["min"].append(float(ok.min()) if ok.size else math.nan)
        cols["max"].append(float(ok.max()) if ok.size else math.nan)
    return SeedSpread(
        batch_sizes=tuple(float(v) for v in sizes),
        n=tuple(cols["n"]),
        n_reached=tuple(cols["nr"]),
        mean=tuple(cols["mean"]),
        std=tuple(cols["std"]),
        min=tuple(cols["min"]),
        max=tuple(cols["max"]),
    )


@dataclass(frozen=True)
class NoiseScaleSummary:
    """Summary of the gradient noise scale B_simple over the late part of training."""

    median: float
    q25: float
    q75: float
    n: int
    from_step: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return _jsonable(
            {
                "median": self.median,
                "q25": self.q25,
                "q75": self.q75,
                "n": self.n,
                "from_step": self.from_step,
            }
        )


def noise_scale_summary(
    steps: ArrayLike, b_simple: ArrayLike, *, from_fraction: float = 0.5
) -> NoiseScaleSummary:
    """Median (and quartiles) of B_simple over steps ≥ first + from_fraction·(last − first).

    The default summarises the second half of training, where the noise scale has
    settled. Non-finite values are skipped; with none left the statistics are NaN.
    """
    st = _floats(steps, "steps")
    bs = _floats(b_simple, "b_simple")
    if st.shape != bs.shape:
        raise ValueError(f"steps and b_simple differ in length: {st.size} vs {bs.size}")
    if not 0 <= from_fraction <= 1:
        raise ValueError(f"from_fraction must be in [0, 1], got {from_fraction}")
    fin = np.isfinite(st)
    if not fin.any():
        return NoiseScaleSummary(math.nan, math.nan, math.nan, 0, math.nan)
    start = float(st[fin].min() + from_fraction * (st[fin].max() - st[fin].min()))
    vals = bs[fin & (st >= start) & np.isfinite(bs)]
    if vals.size == 0:
        return NoiseScaleSummary(math.nan, math.nan, math.nan, 0, start)
    q25, med, q75 = np.quantile(vals, [0.25, 0.5, 0.75])
    return NoiseScaleSummary(float(med), float(q25), float(q75), int(vals.size), start)
