"""How the report writes numbers: significant digits, intervals, integers, batch sizes.

Measured and fitted numbers get 3 significant figures (:func:`num`, the one helper,
:func:`stepscale.analysis.headline.sig`); counts of steps and trials are exact integers;
batch sizes are labels, written in full."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from stepscale.analysis.headline import sig


def is_finite(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and math.isfinite(float(x))


def num(x: Any, digits: int = 3) -> str:
    """``x`` with ``digits`` significant figures, "—" when not a finite number."""
    return sig(x, digits) if is_finite(x) else "—"


def integer(x: Any) -> str:
    return f"{float(x):,.0f}" if is_finite(x) else "—"


def interval(ci: Sequence[float], digits: int = 3) -> str:
    return f"[{num(ci[0], digits)}, {num(ci[1], digits)}]" if all(is_finite(c) for c in ci) else "—"


def csv_num(x: Any) -> str:
    if isinstance(x, str):
        return x
    if not is_finite(x):
        return ""
    f = float(x)
    return str(int(f)) if f.is_integer() and abs(f) < 2**53 else repr(f)


def batch_text(x: float) -> str:
    return num(x, 8)
