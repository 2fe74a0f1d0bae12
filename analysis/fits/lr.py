"""Optimal learning rate per batch size and its scaling law.

Per batch size, η*(B) is the LR minimising the objective, smoothed over the tuned trials
by a local quadratic in log LR. Across batch sizes, η*(B) = c·B^α is fitted below B_crit
and α compared with the linear (α = 1, SGD) and square-root (α = 0.5, Adam) rules and
with no dependence (α = 0, Adam above its noise scale); the saturating form
ε_opt(B) = ε_max / (1 + B_noise/B) (McCandlish et al. 2018) is fitted on all batch sizes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import least_squares
from scipy.special import expit

from stepscale.analysis.fits.arrays import batch_json, floats, positive_batches, softplus
from stepscale.analysis.fits.records import BATCH, Record, as_json, columns_to_rows, rows_to_record
from stepscale.analysis.fits.student_t import t_quantile

__all__ = [
    "LRLaw",
    "OptimalLR",
    "RuleComparison",
    "SaturatingFit",
    "fit_lr_law",
    "optimal_lr",
]

Bounds = tuple[float, float]

# An optimum within this fraction of the log-width of the search bounds from a bound is
# "at the edge": the true optimum may lie outside.
_EDGE_TOLERANCE = 0.05


@dataclass(frozen=True)
class OptimalLR(Record):
    """η*(B) per batch size (ascending).

    ``method`` is ``"quadratic"`` when the local quadratic in log LR gave a minimum inside
    the trials it was fitted to, else ``"best"`` (the best trial's LR). ``at_edge`` flags
    a best trial at the smallest or largest LR tried (diverged trials count as tried),
    or an optimum within 5% of the log-width of the given search bounds from a bound.
    """

    batch_sizes: tuple[float, ...] = field(metadata=as_json("batch", batch=True))
    lr_opt: tuple[float, ...]
    objective_opt: tuple[float, ...]
    best_lr: tuple[float, ...]
    best_objective: tuple[float, ...]
    at_edge: tuple[bool, ...]
    method: tuple[str, ...]
    n_trials: tuple[int, ...]

    def _json(self, fields: dict[str, Any]) -> dict[str, Any]:
        """One entry per batch size."""
        return {"batch_sizes": columns_to_rows(fields)}


def _local_quadratic(
    x: np.ndarray, f: np.ndarray, n_near: int | None
) -> tuple[float, float] | None:
    """Vertex (log LR, objective) of a weighted quadratic around the best trial, or None."""
    order = np.argsort(x, kind="stable")
    x, f = x[order], f[order]
    j = int(np.argmin(f))
    n = x.size
    k = min(n, n_near if n_near is not None else max(5, math.ceil(n / 2)))
    # A window of k trials in LR order centred on the best one (shifted at the ends):
    # unlike the k nearest in log LR, it brackets the best trial even across a gap
    # in the sampled LRs.
    start = min(max(j - k // 2, 0), n - k)
    xu, fu = x[start : start + k], f[start : start + k]
    du = np.abs(xu - x[j])
    if np.unique(xu).size < 3:
        return None
    # Tricube weights on the distance from the best trial, bandwidth 1.5× the farthest
    # used trial, so the fit is local but every used trial still counts.
    w = (1.0 - (du / (1.5 * du.max())) ** 3) ** 3
    a2, a1, a0 = np.polyfit(xu, fu, 2, w=np.sqrt(w))
    if not a2 > 0:
        return None
    v = -a1 / (2 * a2)
    if not xu.min() <= v <= xu.max():
        return None
    return float(v), float(a0 + a1 * v + a2 * v * v)


def optimal_lr(
    lr: ArrayLike,
    objective: ArrayLike,
    batch: ArrayLike,
    *,
    bounds: Bounds | Mapping[float, Bounds] | None = None,
    n_near: int | None = None,
) -> OptimalLR:
    """The objective-minimising LR per batch size, smoothed over the tuned trials.

    One entry per trial. Per batch size a quadratic in log LR is fitted (weighted by
    distance from the best trial) to a window of ``n_near`` consecutive trials in LR order
    centred on the best one (default: half the trials, at least 5); its minimum is η*
    when the parabola is convex and its vertex lies within the window, else η* is the
    best trial's LR. Trials with a non-finite objective
    (diverged) are not fitted but count towards the tried range. ``bounds`` are the
    search bounds (one pair, or per batch size) used for the ``at_edge`` flag.
    """
    lr_a = floats(lr, "lr")
    obj = floats(objective, "objective")
    b = floats(batch, "batch")
    if not lr_a.shape == obj.shape == b.shape:
        raise ValueError(
            f"lr, objective and batch differ in length: {lr_a.size}, {obj.size}, {b.size}"
        )
    positive_batches(b)
    if not (np.isfinite(lr_a) & (lr_a > 0)).all():
        raise ValueError("learning rates must be finite and positive")
    if n_near is not None and n_near < 3:
        raise ValueError(f"n_near must be at least 3, got {n_near}")

    rows: list[dict[str, Any]] = []
    for size in np.unique(b):
        at = b == size
        x_all = np.log(lr_a[at])
        fin = np.isfinite(obj[at])
        if not fin.any():
            raise ValueError(f"batch size {batch_json(size)}: no trial has a finite objective")
        x, f = x_all[fin], obj[at][fin]
        i_best = int(np.argmin(f))
        quad = _local_quadratic(x, f, n_near)
        lo, hi = float(x_all.min()), float(x_all.max())
        edge = bool(x[i_best] <= lo or x[i_best] >= hi)
        if quad is None:
            v, fv, method = float(x[i_best]), float(f[i_best]), "best"
        else:
            (v, fv), method = quad, "quadratic"
        bnd = bounds.get(float(size)) if isinstance(bounds, Mapping) else bounds
        if bnd is not None:
            blo, bhi = math.log(bnd[0]), math.log(bnd[1])
            tol = _EDGE_TOLERANCE * (bhi - blo)
            edge = edge or v - blo <= tol or bhi - v <= tol
        rows.append(
            {
                "batch_sizes": float(size),
                "lr_opt": math.exp(v),
                "objective_opt": fv,
                "best_lr": float(math.exp(x[i_best])),
                "best_objective": float(f[i_best]),
                "at_edge": edge,
                "method": method,
                "n_trials": int(at.sum()),
            }
        )
    return rows_to_record(OptimalLR, rows)


@dataclass(frozen=True)
class RuleComparison(Record):
    """How a fitted exponent α compares with a scaling rule's α."""

    name: str
    alpha: float
    inside_ci: bool
    distance: float  # fitted α − rule α
    z: float  # distance in standard errors


@dataclass(frozen=True)
class SaturatingFit(Record):
    """Fit of ε_opt(B) = ε_max / (1 + B_noise/B) in log space."""

    eps_max: float
    b_noise: float
    residuals: tuple[float, ...]
    n_points: int
    identified: bool  # False when B_noise ran to a bound (no saturation visible)

    def predict(self, batch: ArrayLike) -> np.ndarray:
        """ε_opt at the given batch sizes."""
        return self.eps_max / (1.0 + self.b_noise / floats(batch, "batch"))


@dataclass(frozen=True)
class LRLaw(Record):
    """η*(B) = c·B^α fitted on batch sizes ≤ ``b_max``, rule comparisons, saturating form.

    ``alpha_ci`` is a t-interval (NaN with two points); ``closest_rule`` names the rule
    nearest the fitted α.
    """

    c: float
    alpha: float
    alpha_ci: tuple[float, float]
    alpha_stderr: float
    b_max: float | None = field(metadata=BATCH)
    batch_sizes: tuple[float, ...] = field(metadata=BATCH)
    lr_opt: tuple[float, ...]
    residuals: tuple[float, ...]
    n_points: int
    rules: tuple[RuleComparison, ...]
    closest_rule: str
    saturating: SaturatingFit | None

    def predict(self, batch: ArrayLike) -> np.ndarray:
        """c·B^α at the given batch sizes."""
        return self.c * np.power(floats(batch, "batch"), self.alpha)

    def _json(self, fields: dict[str, Any]) -> dict[str, Any]:
        """The rule comparisons by name."""
        return fields | {"rules": {r.name: r for r in self.rules}}


def _fit_saturating(x: np.ndarray, y: np.ndarray) -> SaturatingFit:
    """log ε = log ε_max − softplus(log B_noise − log B), by least squares."""
    margin = math.log(1e6)
    lo, hi = float(x.min() - margin), float(x.max() + margin)

    def fun(p: np.ndarray) -> np.ndarray:
        return y - p[0] + softplus(p[1] - x)

    def jac(p: np.ndarray) -> np.ndarray:
        return np.column_stack([-np.ones_like(x), expit(p[1] - x)])

    grid = np.linspace(lo, hi, 241)
    z = y[None, :] + softplus(grid[:, None] - x[None, :])
    sse = ((z - z.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
    b0 = float(np.clip(grid[np.argmin(sse)], lo + 1e-9, hi - 1e-9))
    a0 = float(np.mean(y + softplus(b0 - x)))
    sol = least_squares(
        fun,
        np.array([a0, b0]),
        jac=jac,
        bounds=([-np.inf, lo], [np.inf, hi]),
        xtol=1e-12,
        ftol=1e-12,
        gtol=1e-12,
    )
    a, bn = float(sol.x[0]), float(sol.x[1])
    return SaturatingFit(
        eps_max=math.exp(a),
        b_noise=math.exp(bn),
        residuals=tuple(float(v) for v in fun(sol.x)),
        n_points=int(x.size),
        identified=bool(lo + 1e-6 < bn < hi - 1e-6),
    )


def fit_lr_law(
    batch: ArrayLike,
    lr_opt: ArrayLike,
    b_max: float | None = None,
    *,
    confidence: float = 0.95,
    rules: Mapping[str, float] | None = None,
) -> LRLaw:
    """Fit η*(B) = c·B^α on batch sizes ≤ ``b_max`` (e.g. B_crit) by least squares in logs.

    α gets a t-interval; it is compared with the linear rule (α = 1), the square-root
    rule (α = 0.5) and a constant η* (α = 0), or with ``rules`` (name → α). The
    saturating form ε_opt(B) = ε_max / (1 + B_noise/B) is fitted on all batch sizes (None with fewer than
    3). Needs at least 2 distinct batch sizes ≤ ``b_max``.
    """
    b = floats(batch, "batch")
    lr_a = floats(lr_opt, "lr_opt")
    if b.shape != lr_a.shape:
        raise ValueError(f"batch and lr_opt differ in length: {b.size} vs {lr_a.size}")
    positive_batches(b)
    ok = np.isfinite(lr_a) & (lr_a > 0)
    b, lr_a = b[ok], lr_a[ok]
    sel = np.ones(b.size, bool) if b_max is None else b <= b_max
    xb, yb = np.log(b[sel]), np.log(lr_a[sel])
    if np.unique(xb).size < 2:
        raise ValueError(
            f"fitting η*(B) = c·B^α needs at least 2 distinct batch sizes"
            f"{'' if b_max is None else f' <= {b_max:g}'} with a positive optimal LR; "
            f"got {b[sel].tolist()}"
        )
    alpha, logc = np.polyfit(xb, yb, 1)
    resid = yb - (logc + alpha * xb)
    n = xb.size
    if n > 2:
        se = math.sqrt((resid**2).sum() / (n - 2) / ((xb - xb.mean()) ** 2).sum())
        q = t_quantile(0.5 + confidence / 2, n - 2)
        ci = (float(alpha - q * se), float(alpha + q * se))
    else:
        se, ci = math.nan, (math.nan, math.nan)
    # "constant": η* not moving with B, as for Adam above its noise scale.
    named = dict(rules) if rules is not None else {"linear": 1.0, "sqrt": 0.5, "constant": 0.0}
    comps = tuple(
        RuleComparison(
            name=name,
            alpha=float(ra),
            inside_ci=bool(ci[0] <= ra <= ci[1]),
            distance=float(alpha - ra),
            z=float((alpha - ra) / se) if se > 0 else math.nan,
        )
        for name, ra in named.items()
    )
    closest = min(comps, key=lambda r: abs(r.distance)).name if comps else ""
    x_all, y_all = np.log(b), np.log(lr_a)
    sat = _fit_saturating(x_all, y_all) if np.unique(x_all).size >= 3 else None
    return LRLaw(
        c=math.exp(logc),
        alpha=float(alpha),
        alpha_ci=ci,
        alpha_stderr=se,
        b_max=None if b_max is None else float(b_max),
        batch_sizes=tuple(float(v) for v in b[sel]),
        lr_opt=tuple(float(v) for v in lr_a[sel]),
        residuals=tuple(float(v) for v in resid),
        n_points=n,
        rules=comps,
        closest_rule=closest,
        saturating=sat,
    )
