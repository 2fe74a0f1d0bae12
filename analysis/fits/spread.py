"""How much steps to target vary over seeds (confirm runs), and the gradient noise scale
measured along training (McCandlish et al. 2018's B_simple) summarised per batch size."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from stepscale.analysis.fits.arrays import floats, positive_batches
from stepscale.analysis.fits.records import OMIT, Record, as_json, columns_to_rows, rows_to_record

# ------------------------------------------------------------------------ small helpers


@dataclass(frozen=True)
class SeedSpread(Record):
    """Steps to target across confirm seeds, per batch size (statistics over reached runs)."""

    batch_sizes: tuple[float, ...] = field(metadata=as_json("batch", batch=True))
    n: tuple[int, ...]
    n_reached: tuple[int, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    min: tuple[float, ...]
    max: tuple[float, ...]
    # each seed's steps per batch size (NaN: not reached), for tests between studies
    # (analysis.claims): the interpolated crossings where the analysis has them
    values: tuple[tuple[float, ...], ...] = field(default=(), metadata=OMIT)

    def _json(self, fields: dict[str, Any]) -> dict[str, Any]:
        """One entry per batch size."""
        return {"batch_sizes": columns_to_rows(fields)}


def spread_over_seeds(
    batch: ArrayLike, steps: ArrayLike, tested: ArrayLike | None = None
) -> SeedSpread:
    """Mean, std (ddof=1), min and max of steps to target over seeds, per batch size.

    One entry per run; NaN/inf steps = not reached (counted in ``n`` but not in the
    statistics, which are NaN when no run reached the target). ``values`` keeps each
    run's ``tested`` (default: ``steps``; e.g. the interpolated crossings) per batch size.
    """
    b = floats(batch, "batch")
    s = floats(steps, "steps")
    kept = s if tested is None else np.asarray(tested, dtype=float)
    if b.shape != s.shape:
        raise ValueError(f"batch and steps differ in length: {b.size} vs {s.size}")
    positive_batches(b)
    out: list[dict[str, Any]] = []
    for size in np.unique(b):
        rows = s[b == size]
        ok = rows[np.isfinite(rows)]
        out.append(
            {
                "batch_sizes": float(size),
                "n": int(rows.size),
                "n_reached": int(ok.size),
                "mean": float(ok.mean()) if ok.size else math.nan,
                "std": float(ok.std(ddof=1)) if ok.size >= 2 else math.nan,
                "min": float(ok.min()) if ok.size else math.nan,
                "max": float(ok.max()) if ok.size else math.nan,
                "values": tuple(
                    float(v) if math.isfinite(v) else math.nan for v in kept[b == size]
                ),
            }
        )
    return rows_to_record(SeedSpread, out)


@dataclass(frozen=True)
class NoiseScaleSummary(Record):
    """Summary of the gradient noise scale B_simple over the late part of training."""

    median: float
    q25: float
    q75: float
    n: int
    from_step: float


def noise_scale_summary(
    steps: ArrayLike, b_simple: ArrayLike, *, from_fraction: float = 0.5
) -> NoiseScaleSummary:
    """Median (and quartiles) of B_simple over steps ≥ first + from_fraction·(last − first).

    The default summarises the second half of training, where the noise scale has
    settled. Non-finite values are skipped; with none left the statistics are NaN.
    """
    st = floats(steps, "steps")
    bs = floats(b_simple, "b_simple")
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
