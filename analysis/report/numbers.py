"""How the report writes numbers: significant digits, intervals, integers, batch sizes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np


def is_finite(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and math.isfinite(float(x))


def num(x: Any, digits: int = 4) -> str:
    return f"{float(x):.{digits}g}" if is_finite(x) else "—"


def integer(x: Any) -> str:
    return f"{float(x):,.0f}" if is_finite(x) else "—"


def interval(ci: Sequence[float], digits: int = 4) -> str:
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
