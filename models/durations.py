"""One helper turns every horizon or interval into an integer number of optimizer steps.

A duration may be given as steps, tokens, examples or a fraction of the horizon; the
rest of the code sees steps only (tokens and examples are derived and reported beside
steps). Rounding is upward, so a budget in tokens is never undershot.
"""

from __future__ import annotations

import math

from stepscale.models.errors import ConfigError


def to_steps(
    field: str,
    *,
    steps: int | None = None,
    tokens: int | None = None,
    examples: int | None = None,
    fraction: float | None = None,
    examples_per_step: int,
    tokens_per_step: int,
    horizon: int | None = None,
    allow_zero: bool = True,
) -> int | None:
    """Return the number of optimizer steps a duration amounts to, or None if none is given.

    Exactly one of ``steps``, ``tokens``, ``examples`` or ``fraction`` (of ``horizon``) may be
    set; ``field`` is the config key stem named in error messages (e.g. ``train.max``).
    """
    given = {
        "steps": steps,
        "tokens": tokens,
        "examples": examples,
        "frac": fraction,
    }
    set_keys = [k for k, v in given.items() if v is not None]
    if not set_keys:
        return None
    if len(set_keys) > 1:
        names = ", ".join(f"{field}_{k}" for k in set_keys)
        raise ConfigError(f"{field}_{set_keys[0]}", f"give only one of {names}")
    unit = set_keys[0]
    value = given[unit]
    key = f"{field}_{unit}"
    if value < 0 or (value == 0 and not allow_zero):
        bound = "≥ 0" if allow_zero else "> 0"
        raise ConfigError(key, f"must be {bound}, got {value}")
    if unit == "steps":
        if int(value) != value:
            raise ConfigError(key, f"must be a whole number of steps, got {value}")
        return int(value)
    if unit == "tokens":
        return math.ceil(value / tokens_per_step)
    if unit == "examples":
        return math.ceil(value / examples_per_step)
    if horizon is None:
        raise ConfigError(key, "a fraction needs a horizon in steps")
    if value > 1:
        raise ConfigError(key, f"a fraction of the horizon must lie in [0, 1], got {value}")
    return math.ceil(value * horizon)
