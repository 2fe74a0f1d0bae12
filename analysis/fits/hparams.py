"""Optimal-hyperparameter power laws (DeepSeek 2024; StepFun 2025).

Runs are grouped into cells (distinct values of the scaling variables); within a cell
the runs whose loss is strictly within a relative band of the cell's best are "near
optimal". A law h = c·Π x^a is fitted by least squares of log h on log x over all kept
runs of all cells, with bootstrap intervals from resampling the kept runs. (The case
bootstrap is vectorised here rather than scipy.stats.bootstrap: a resample that holds a
single value of a regressor is dropped, where scipy's interval would become NaN; see
tests/test_fits.py.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stepscale.analysis.fits.arrays import floats, percentile_ci
from stepscale.analysis.fits.records import OMIT, Record

__all__ = ["HparamLaw", "HparamLaws", "fit_hparam_laws"]

Rows = Mapping[str, Any] | Sequence[Mapping[str, Any]] | Any

# Bootstrap replicates are solved in chunks to bound memory: at most this many floats
# (replicates × kept runs × terms) at once.
_CHUNK_FLOATS = 4_000_000


@dataclass(frozen=True)
class HparamLaw(Record):
    """h = coefficient · Π regressor^exponent, with percentile bootstrap intervals."""

    # in the order of its JSON (``sweep fit hparams``), where the law is keyed by ``hparam``
    hparam: str = field(metadata=OMIT)
    coefficient: float
    exponents: Mapping[str, float]
    ci: Mapping[str, tuple[float, float]]
    coefficient_ci: tuple[float, float]
    regressors: tuple[str, ...]
    n_runs: int
    residual_std: float

    def predict(self, **values: Any) -> np.ndarray:
        """The law at given regressor values (keyword per regressor)."""
        out = np.asarray(self.coefficient, dtype=float)
        for name in self.regressors:
            out = out * np.power(floats(values[name], name), self.exponents[name])
        return out


@dataclass(frozen=True)
class HparamLaws(Record):
    """All laws fitted on the same near-optimal runs."""

    band: float
    n_cells: int
    n_runs: int
    n_kept: int
    laws: Mapping[str, HparamLaw]
    confidence: float
    n_boot: int
    seed: int


def _columns(rows: Rows, names: Sequence[str]) -> dict[str, np.ndarray]:
    """Float columns from a column mapping, an object with ``.columns``, or row mappings."""
    cols = rows if isinstance(rows, Mapping) else getattr(rows, "columns", None)
    if isinstance(cols, Mapping):
        missing = [n for n in names if n not in cols]
        if missing:
            raise ValueError(
                f"column {missing[0]!r} not found; available columns: {sorted(map(str, cols))}"
            )
        out = {n: floats(cols[n], n) for n in names}
    else:
        seq = list(rows)
        out = {}
        for n in names:
            try:
                out[n] = floats([row[n] for row in seq], n)
            except KeyError:
                avail = sorted(seq[0]) if seq else []
                raise ValueError(f"column {n!r} not found; available columns: {avail}") from None
    lengths = {v.size for v in out.values()}
    if len(lengths) > 1:
        raise ValueError(f"columns differ in length: { {k: v.size for k, v in out.items()} }")
    return out


def _near_optimal(loss: np.ndarray, cell: np.ndarray, band: float) -> np.ndarray:
    """Mask of runs strictly within ``band`` (relative) of their cell's best loss."""
    keep = np.zeros(loss.size, dtype=bool)
    finite = np.isfinite(loss)
    for c in np.unique(cell):
        m = (cell == c) & finite
        if not m.any():
            continue
        best = loss[m].min()
        # |best| keeps the band meaningful for a negative objective.
        keep |= m & ((loss < best + abs(best) * band) | (loss == best))
    return keep


def _fit_law(
    hparam: str,
    regs: Sequence[str],
    cols: Mapping[str, np.ndarray],
    keep: np.ndarray,
    n_boot: int,
    rng: np.random.Generator,
    confidence: float,
) -> HparamLaw:
    h = cols[hparam][keep]
    xs = [cols[r][keep] for r in regs]
    for name, v in [(hparam, h), *zip(regs, xs, strict=True)]:
        bad = ~(np.isfinite(v) & (v > 0))
        if bad.any():
            raise ValueError(
                f"law for {hparam!r}: column {name!r} must be positive and finite in the "
                f"near-optimal runs to take logs; got {v[bad][:3].tolist()}"
            )
    n, p = h.size, len(regs) + 1
    x = np.column_stack([np.ones(n), *[np.log(v) for v in xs]])
    y = np.log(h)
    for name, col in zip(regs, x[:, 1:].T, strict=True):
        if np.ptp(col) == 0:
            raise ValueError(
                f"law for {hparam!r}: regressor {name!r} takes a single value "
                f"({math.exp(col[0]):g}) among the near-optimal runs; it cannot be fitted"
            )
    if n <= p or np.linalg.matrix_rank(x) < p:
        raise ValueError(
            f"law for {hparam!r} on {list(regs)}: {n} near-optimal runs are too few or "
            f"collinear for {p} coefficients"
        )
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ beta
    boot: list[np.ndarray] = []
    chunk = max(1, _CHUNK_FLOATS // (n * p))
    for start in range(0, n_boot, chunk):
        m = min(chunk, n_boot - start)
        idx = rng.integers(0, n, size=(m, n))
        xb, yb = x[idx], y[idx]
        xtx = np.einsum("bni,bnj->bij", xb, xb)
        xty = np.einsum("bni,bn->bi", xb, yb)
        # A resample can miss all but one value of a regressor; drop those replicates.
        ok = np.linalg.cond(xtx) < 1e10
        if ok.any():
            boot.append(np.linalg.solve(xtx[ok], xty[ok][..., None])[..., 0])
    samples = np.concatenate(boot) if boot else np.empty((0, p))
    ci = {r: percentile_ci(samples[:, i + 1], confidence) for i, r in enumerate(regs)}
    c_lo, c_hi = percentile_ci(samples[:, 0], confidence)
    return HparamLaw(
        hparam=hparam,
        regressors=tuple(regs),
        coefficient=math.exp(beta[0]),
        exponents={r: float(beta[i + 1]) for i, r in enumerate(regs)},
        ci=ci,
        coefficient_ci=(math.exp(c_lo), math.exp(c_hi))
        if math.isfinite(c_lo)
        else (math.nan, math.nan),
        n_runs=n,
        residual_std=float(np.sqrt((resid**2).sum() / (n - p))),
    )


def fit_hparam_laws(
    rows: Rows,
    loss_col: str,
    hparams: Sequence[str],
    by: Sequence[str],
    laws: Mapping[str, Sequence[str]] | None = None,
    band: float = 0.0025,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> HparamLaws:
    """Fit h = c·Π x^a for each hyperparameter h from the near-optimal runs of each cell.

    ``rows``: a mapping column → values, an object with such a ``.columns`` mapping, or a
    sequence of row mappings. Cells are the distinct values of the ``by`` columns; a run
    is kept when its loss is strictly below best·(1 + band) of its cell (the best run is
    always kept; runs with non-finite loss never). Each law regresses log h on the logs
    of ``by``, unless ``laws`` gives its own regressors (h → [x, y]). Exponent intervals
    are percentiles of a bootstrap over the kept runs (``n_boot`` replicates, ``seed``).
    """
    hparams = list(hparams)
    by = list(by)
    laws = dict(laws or {})
    if not hparams:
        raise ValueError("no hyperparameters to fit")
    if not by:
        raise ValueError("no 'by' columns to form cells")
    unknown = [h for h in laws if h not in hparams]
    if unknown:
        raise ValueError(f"laws name {unknown} which are not among the hyperparameters {hparams}")
    for h, regs in laws.items():
        if not regs:
            raise ValueError(f"law for {h!r} names no regressors")
    if not (band >= 0 and math.isfinite(band)):
        raise ValueError(f"band must be a non-negative number, got {band!r}")
    if n_boot < 0:
        raise ValueError(f"n_boot must be >= 0, got {n_boot}")
    needed = list(dict.fromkeys([loss_col, *hparams, *by, *(r for v in laws.values() for r in v)]))
    cols = _columns(rows, needed)
    keys = np.column_stack([cols[c] for c in by])
    if not np.isfinite(keys).all():
        bad = [c for c in by if not np.isfinite(cols[c]).all()]
        raise ValueError(f"'by' columns {bad} have missing or non-finite values")
    n_runs = keys.shape[0]
    if n_runs == 0:
        raise ValueError("the table has no rows")
    _, cell = np.unique(keys, axis=0, return_inverse=True)
    cell = cell.reshape(-1)
    loss = cols[loss_col]
    keep = _near_optimal(loss, cell, band)
    n_cells = int(np.unique(cell[np.isfinite(loss)]).size)
    if n_cells == 0:
        raise ValueError(f"no run has a finite {loss_col!r}")
    # Each law draws its own replicates from ``seed``, so adding a hyperparameter does
    # not change the intervals of the others.
    fitted = {
        h: _fit_law(h, laws.get(h, by), cols, keep, n_boot, np.random.default_rng(seed), confidence)
        for h in hparams
    }
    return HparamLaws(
        band=float(band),
        n_cells=n_cells,
        n_runs=n_runs,
        n_kept=int(keep.sum()),
        laws=fitted,
        confidence=confidence,
        n_boot=n_boot,
        seed=seed,
    )
