"""A power law y = c·Π x_i^a_i across the rungs of a ladder, fitted by least squares of
log y on log x, with bootstrap intervals of its exponents (cases resampled; widened to the t interval
of the least-squares coefficient where that is wider) and
prediction intervals that widen with the extrapolation.

The prediction interval at x₀ is the classical one of ordinary least squares in log
space, exp(ŷ₀ ± t_{dof}·s·√(1 + x₀ᵀ(XᵀX)⁻¹x₀)): the term x₀ᵀ(XᵀX)⁻¹x₀ grows with the
squared distance of log x₀ from the fitted rungs, so a target 100× past the largest rung
gets a wider interval than one inside the ladder. With as many rungs as coefficients the
fit has no residual degrees of freedom and states no interval (NaN).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stepscale.analysis.fits.arrays import percentile_ci
from stepscale.analysis.fits.records import OMIT, Record
from stepscale.analysis.fits.student_t import t_quantile, t_sf

__all__ = ["PowerLaw", "Prediction", "fit_power_law", "power_law_from_dict"]


@dataclass(frozen=True)
class Prediction(Record):
    """A law's value at a target, with its prediction interval (NaN: none)."""

    value: float
    lo: float
    hi: float

    def contains(self, x: float) -> bool:
        """Whether ``x`` lies within the interval (False when there is none)."""
        return bool(math.isfinite(self.lo) and self.lo <= x <= self.hi)


@dataclass(frozen=True)
class PowerLaw(Record):
    """y = coefficient · Π regressor^exponent, fitted on ``n`` rungs."""

    name: str
    regressors: tuple[str, ...]
    coefficient: float
    exponents: Mapping[str, float]
    # per exponent: the bootstrap percentile interval or the t interval, the wider
    ci: Mapping[str, tuple[float, float]]
    se: Mapping[str, float]  # OLS standard error per exponent
    n: int
    dof: int
    residual_std: float  # of log y
    confidence: float
    # (XᵀX)⁻¹ of the log design (intercept first): the prediction interval's shape
    xtx_inv: tuple[tuple[float, ...], ...] = field(metadata=OMIT)

    def _json(self, fields: dict[str, Any]) -> dict[str, Any]:
        return fields | {"xtx_inv": [list(r) for r in self.xtx_inv]}

    def predict(self, **values: float) -> Prediction:
        """The law at the regressor values given (keyword per regressor), with its
        prediction interval at the law's confidence."""
        x0 = np.array([1.0, *(math.log(float(values[r])) for r in self.regressors)])
        beta = np.array([math.log(self.coefficient), *(self.exponents[r] for r in self.regressors)])
        mid = float(x0 @ beta)
        if self.dof <= 0 or not math.isfinite(self.residual_std):
            return Prediction(math.exp(mid), math.nan, math.nan)

        lev = float(x0 @ np.asarray(self.xtx_inv) @ x0)
        t = t_quantile(0.5 + self.confidence / 2, self.dof)
        half = t * self.residual_std * math.sqrt(1.0 + lev)
        return Prediction(math.exp(mid), math.exp(mid - half), math.exp(mid + half))

    def exponent_p_greater(self, name: str, than: float = 0.0) -> float:
        """One-sided p-value of "exponent of ``name`` > ``than``" (t-test on the OLS
        coefficient, ``dof`` degrees of freedom); NaN without residual freedom."""
        se = self.se.get(name, math.nan)
        if self.dof <= 0 or not (math.isfinite(se) and se > 0):
            return math.nan

        return t_sf((self.exponents[name] - than) / se, self.dof)


def fit_power_law(
    name: str,
    y: Sequence[float] | np.ndarray,
    xs: Mapping[str, Sequence[float] | np.ndarray],
    *,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> PowerLaw:
    """Fit y = c·Π x^a by least squares in logs over the rows of ``y`` and ``xs``
    (regressor name → values). Every value must be positive and finite; a regressor that
    takes a single value, or fewer rows than coefficients, is a `ValueError` naming it.
    Exponent intervals: percentiles of a case bootstrap (``n_boot`` replicates from
    ``seed``; a replicate in which a regressor takes a single value is dropped), widened
    to the OLS t interval where that is wider; NaN with ``n_boot`` 0 or no residual
    degrees of freedom."""
    regs = tuple(xs)
    yv = np.asarray(y, dtype=float)
    cols = [np.asarray(xs[r], dtype=float) for r in regs]
    for label, v in [(name, yv), *zip(regs, cols, strict=True)]:
        if v.shape != yv.shape:
            raise ValueError(f"law {name!r}: column {label!r} differs in length")
        bad = ~(np.isfinite(v) & (v > 0))
        if bad.any():
            raise ValueError(
                f"law {name!r}: {label!r} must be positive and finite to take logs; got "
                f"{v[bad][:3].tolist()}"
            )
    n, p = yv.size, len(regs) + 1
    x = np.column_stack([np.ones(n), *[np.log(c) for c in cols]])
    for r, c in zip(regs, x[:, 1:].T, strict=True):
        if np.ptp(c) == 0:
            raise ValueError(
                f"law {name!r}: {r} takes a single value ({math.exp(c[0]):g}) on the rungs; "
                "the ladder did not vary it"
            )
    if n < p or np.linalg.matrix_rank(x) < p:
        raise ValueError(
            f"law {name!r} in {list(regs)}: {n} rungs are too few for {p} coefficients"
        )

    ly = np.log(yv)
    beta, *_ = np.linalg.lstsq(x, ly, rcond=None)
    resid = ly - x @ beta
    dof = n - p
    s = float(np.sqrt((resid**2).sum() / dof)) if dof > 0 else math.nan
    xtx_inv = np.linalg.inv(x.T @ x)
    se = {r: float(s * math.sqrt(xtx_inv[i + 1, i + 1])) for i, r in enumerate(regs)}
    rng = np.random.default_rng(seed)
    samples = np.empty((0, p))
    if n_boot > 0 and dof > 0:
        idx = rng.integers(0, n, size=(n_boot, n))
        xb, yb = x[idx], ly[idx]
        xtx = np.einsum("bni,bnj->bij", xb, xb)
        xty = np.einsum("bni,bn->bi", xb, yb)
        ok = np.linalg.cond(xtx) < 1e10
        if ok.any():
            samples = np.linalg.solve(xtx[ok], xty[ok][..., None])[..., 0]
    # The case bootstrap under-covers on a handful of rungs (a ladder has 4 to 12): the
    # interval is the wider of its percentiles and the t interval of the OLS coefficient.
    t = t_quantile(0.5 + confidence / 2, dof) if dof > 0 else math.nan
    ci = {}
    for i, r in enumerate(regs):
        lo, hi = percentile_ci(samples[:, i + 1], confidence)
        b, half = float(beta[i + 1]), t * se[r]
        ci[r] = (min(lo, b - half), max(hi, b + half)) if math.isfinite(lo) else (lo, hi)
    return PowerLaw(
        name=name,
        regressors=regs,
        coefficient=math.exp(float(beta[0])),
        exponents={r: float(beta[i + 1]) for i, r in enumerate(regs)},
        ci=ci,
        se=se,
        n=n,
        dof=dof,
        residual_std=s,
        confidence=confidence,
        xtx_inv=tuple(tuple(float(v) for v in row) for row in xtx_inv),
    )


def power_law_from_dict(d: Mapping[str, Any]) -> PowerLaw:
    """A `PowerLaw` from its JSON dict (``to_dict()``); `ValueError` naming what is missing
    or malformed."""
    try:
        regs = tuple(str(r) for r in d["regressors"])
        law = PowerLaw(
            name=str(d["name"]),
            regressors=regs,
            coefficient=float(d["coefficient"]),
            exponents={r: float(d["exponents"][r]) for r in regs},
            ci={r: _pair(d.get("ci", {}).get(r)) for r in regs},
            se={r: _num(d.get("se", {}).get(r)) for r in regs},
            n=int(d["n"]),
            dof=int(d["dof"]),
            residual_std=_num(d.get("residual_std")),
            confidence=float(d.get("confidence", 0.95)),
            xtx_inv=tuple(tuple(float(v) for v in row) for row in d["xtx_inv"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            f"malformed law {d.get('name', '?')!r}: {type(exc).__name__}: {exc}"
        ) from None
    if len(law.xtx_inv) != len(regs) + 1 or not (law.coefficient > 0):
        raise ValueError(f"malformed law {law.name!r}: xtx_inv or coefficient does not fit")
    return law


def _num(v: Any) -> float:
    return math.nan if v is None else float(v)


def _pair(v: Any) -> tuple[float, float]:
    if v is None:
        return (math.nan, math.nan)
    return (_num(v[0]), _num(v[1]))
