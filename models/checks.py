"""The trainer's guards of config values: each raises `ConfigError` naming the key at fault
(``field``, a dotted key such as ``data.global_batch``) and saying what is allowed.

One home for the checks the data sources, the networks, the planner, the batch ramp and the
multi-process setup share; a check used by one module only stays in that module.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from numbers import Integral, Real

from stepscale.models.errors import ConfigError


def is_int(value: object) -> bool:
    """Whether ``value`` is an integer (a bool is not)."""
    return isinstance(value, Integral) and not isinstance(value, bool)


def is_real(value: object) -> bool:
    """Whether ``value`` is a finite real number (a bool is not)."""
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)


def int_at_least(field: str, value: object, low: int) -> None:
    """ConfigError on ``field`` unless ``value`` is an integer >= ``low``."""
    if not is_int(value) or value < low:  # type: ignore[operator]
        raise ConfigError(field, f"must be an integer >= {low}, got {value!r}")


def positive_int(field: str, value: object) -> None:
    """ConfigError on ``field`` unless ``value`` is a positive integer."""
    int_at_least(field, value, 1)


def positive_float(field: str, value: object) -> None:
    """ConfigError on ``field`` unless ``value`` is a finite number > 0."""
    if not is_real(value) or value <= 0:  # type: ignore[operator]
        raise ConfigError(field, f"must be a finite number > 0, got {value!r}")


def positive(field: str, value: float | None, what: str = "must be positive") -> None:
    """ConfigError on ``field`` (saying ``what``) unless ``value`` is a number > 0 (None,
    a size nobody gave, is not)."""
    if value is None or value <= 0:
        raise ConfigError(field, f"{what}, got {value!r}")


def finite_above_zero(field: str, value: float | None, *, allow_zero: bool = False) -> None:
    """ConfigError on ``field`` unless ``value`` is unset (None) or a finite number > 0
    (>= 0 with ``allow_zero``)."""
    if value is None:
        return
    if not math.isfinite(value):
        raise ConfigError(field, f"must be a finite number, got {value}")
    if value < 0 or (value == 0 and not allow_zero):
        bound = "≥ 0" if allow_zero else "> 0"
        raise ConfigError(field, f"must be {bound}, got {value}")


def in_unit_interval(field: str, value: float) -> None:
    """ConfigError on ``field`` unless 0 <= ``value`` < 1 (NaN is not)."""
    if not 0.0 <= value < 1.0:
        raise ConfigError(field, f"must lie in [0, 1), got {value}")


def choice(field: str, value: object, allowed: Iterable[str]) -> None:
    """ConfigError on ``field`` unless ``value`` is one of ``allowed`` (listed in the
    message)."""
    allowed = tuple(allowed)
    if value not in allowed:
        raise ConfigError(field, f"unknown value {value!r}; choose one of {', '.join(allowed)}")
