"""What Optuna is told about a finished trial.

For `steps_to_target` a trial that reached the target is told the step; one that did not
gets horizon × (1 + min(excess, 1)) with excess = (best eval loss − target) / target, and
a diverged one horizon × 2, so the sampler learns to avoid them. For the loss objectives a
diverged trial is told its initial eval loss (no progress). The true state stays in the
trial's user attributes and in trial.json; analysis treats such trials as censored.
"""

from __future__ import annotations

import math
from typing import Any

from stepscale.rundir import DIVERGED

OBJECTIVES = ("steps_to_target", "final_eval_loss", "min_eval_loss")


def objective_value(kind: str, status: dict[str, Any], initial_loss: float | None) -> float:
    """The value to tell Optuna for a complete or diverged trial."""
    state = status["state"]
    horizon = float(status["horizon_steps"])
    if kind == "steps_to_target":
        if state == DIVERGED:
            return 2.0 * horizon
        if status.get("steps_to_target") is not None:
            return float(status["steps_to_target"])
        target = float(status["target_loss"])
        best = status.get("best_eval_loss")
        excess = (
            1.0 if best is None or not math.isfinite(best) else max(0.0, (best - target) / target)
        )
        return horizon * (1.0 + min(excess, 1.0))
    if state == DIVERGED:
        return float(initial_loss) if initial_loss is not None else 1e30
    key = "final_eval_loss" if kind == "final_eval_loss" else "best_eval_loss"
    value = status.get(key)
    if value is None or not math.isfinite(value):
        return float(initial_loss) if initial_loss is not None else 1e30
    return float(value)


OBJECTIVE_UNITS = {
    "steps_to_target": "steps",
    "final_eval_loss": "eval loss",
    "min_eval_loss": "eval loss",
}


def outcome_attrs(kind: str, state: str, status: dict[str, Any] | None) -> dict[str, Any]:
    """User attributes that say what a told value is, so a dashboard can tell a measurement
    from a penalty: ``reached`` (the target, for steps_to_target), ``censored`` (the value
    is a penalty or a stand-in, not a measurement), ``diverged``, ``objective_unit`` and
    ``intermediate_unit`` (what the reported values by step are)."""
    diverged = state == DIVERGED
    attrs: dict[str, Any] = {
        "diverged": diverged,
        "objective_unit": OBJECTIVE_UNITS.get(kind, kind),
        "intermediate_unit": "eval loss",
    }
    if status is None:  # pruned or failed: no value told
        attrs["censored"] = True
        if kind == "steps_to_target":
            attrs["reached"] = False
        return attrs
    if kind == "steps_to_target":
        reached = not diverged and status.get("steps_to_target") is not None
        attrs |= {"reached": reached, "censored": not reached}
    else:
        key = "final_eval_loss" if kind == "final_eval_loss" else "best_eval_loss"
        value = status.get(key)
        finite = value is not None and math.isfinite(value)
        attrs["censored"] = diverged or not finite
    return attrs
