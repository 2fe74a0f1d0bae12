"""What `sweep branch` is asked to do (light: the command line builds it at every start of
`sweep`; `stepscale.sweeps.run.branches` does the work)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_FACTORS = (2.0, 4.0, 8.0, 16.0)
DEFAULT_TOLERANCE = 0.5


@dataclass(frozen=True)
class BranchRequest:
    """What the command line asked for (None: the default)."""

    trial: str | None = None
    steps: tuple[int, ...] | None = None
    factors: tuple[float, ...] = DEFAULT_FACTORS
    window_examples: float | None = None
    window_tokens: float | None = None
    lr_rule: str | None = None
    lr_multipliers: tuple[float, ...] = (1.0,)
    tolerance: float = DEFAULT_TOLERANCE
