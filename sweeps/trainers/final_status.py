"""A trainer's final status, completed from the eval losses it reported.

A trainer only has to return ``state`` and ``steps_done`` and report ``eval_loss`` at the
steps it evaluated (`stepscale.trainer`). Whatever else the orchestrator and the analysis
need — the horizon, the target, steps to target (first evaluation below it, and the
log-linear crossing between evaluations), best and final eval loss, divergence — is
computed here from ``metrics.jsonl`` whenever the status does not give it. Keys the
trainer gave are never changed, but for one: a ``complete`` trial whose eval loss became
non-finite, or ended finite but above its first evaluation (no progress), is ``diverged``,
as the built-in trainer says of its own runs, so the sampler is told so.
"""

from __future__ import annotations

import math
from typing import Any

from stepscale.rundir import COMPLETE, DIVERGED, interpolated_crossing

ABOVE_START = "final eval loss above the first evaluation"


def eval_losses(records: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """(step, eval loss) of every evaluation, in step order; a null loss (how JSON writes
    a non-finite one) becomes NaN."""
    out = []
    for rec in records:
        if "eval_loss" in rec:
            loss = rec["eval_loss"]
            out.append((int(rec["step"]), float("nan") if loss is None else float(loss)))
    return sorted(out, key=lambda e: e[0])


def crossing(evals: list[tuple[int, float]], target: float) -> tuple[int | None, float | None]:
    """(first evaluated step whose loss is below ``target``, the interpolated crossing)."""
    previous: tuple[int, float] | None = None
    for step, loss in evals:
        if not math.isfinite(loss):
            return None, None
        if loss < target:
            if previous is None:
                return step, float(step)
            return step, interpolated_crossing(previous[0], previous[1], step, loss, target)
        previous = (step, loss)
    return None, None


def complete_status(
    status: dict[str, Any],
    records: list[dict[str, Any]],
    horizon_steps: int,
    target_loss: float | None,
) -> dict[str, Any]:
    """``status`` with the keys it lacks computed from ``records`` (metrics.jsonl)."""
    out = dict(status)
    evals = eval_losses(records)
    finite = [(s, v) for s, v in evals if math.isfinite(v)]
    out.setdefault("horizon_steps", horizon_steps)
    out.setdefault("target_loss", target_loss)
    if "diverged_step" not in out:
        bad = next((s for s, v in evals if not math.isfinite(v)), None)
        out["diverged_step"] = bad
        if bad is not None and out.get("state") == COMPLETE:
            out["state"] = DIVERGED
            out.setdefault("reason", f"non-finite eval loss at step {bad}")
    out.setdefault("best_eval_loss", min((v for _, v in finite), default=None))
    out.setdefault("final_eval_loss", finite[-1][1] if finite else None)
    final = out.get("final_eval_loss")
    if out.get("state") == COMPLETE and len(finite) > 1 and final is not None:
        first, last_step = finite[0][1], finite[-1][0]
        if math.isfinite(final) and final > first:
            out["state"] = DIVERGED
            out.setdefault("reason", ABOVE_START)
            if out.get("diverged_step") is None:
                out["diverged_step"] = last_step
    if target_loss is not None and "steps_to_target" not in out:
        out["steps_to_target"], interp = crossing(evals, target_loss)
        out.setdefault("steps_to_target_interp", interp)
    return out
