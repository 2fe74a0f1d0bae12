"""Array helpers every fit shares: checked float arrays, batch sizes as JSON writes them,
percentile intervals."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike


def batch_json(b: float | None) -> int | float | None:
    """A batch size for JSON: an int when integral (64, not 64.0)."""
    if b is None or not math.isfinite(b):
        return None
    return int(b) if float(b).is_integer() and abs(b) < 2**53 else float(b)


def floats(values: ArrayLike, name: str) -> np.ndarray:
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


def positive_batches(batch: np.ndarray, name: str = "batch") -> None:
    bad = ~(np.isfinite(batch) & (batch > 0))
    if bad.any():
        raise ValueError(f"{name} sizes must be finite and positive; got {batch[bad][:5].tolist()}")


def softplus(z: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, z)


def percentile_ci(samples: np.ndarray, confidence: float) -> tuple[float, float]:
    samples = samples[np.isfinite(samples)]
    if samples.size == 0:
        return (math.nan, math.nan)
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(samples, [tail, 1.0 - tail])
    return (float(lo), float(hi))
