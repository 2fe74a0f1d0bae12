"""Trials that cannot learn end early (docs/science.md, "Trials that cannot learn").

The rule (``budget.no_progress_by`` = f, ``budget.no_progress_min`` = m; it needs a target
loss): at a trial's first evaluation at step ≥ f × its horizon, and at each one after,
its *progress* is (L0 − best) / (L0 − target), L0 its step-0 eval loss and best its lowest
eval loss so far. A trial whose progress is below m, and whose current eval loss is within
m × (L0 − target) of L0 (stuck at its start, not rising), stops there: it is pruned, its
status.json says ``"ended_by": "no_progress"`` (with the step and the progress) and its
events.jsonl has a ``no_progress`` event. It did not diverge; the report's verdict counts
it. A trial whose loss rises above that band is left to the divergence rule (a run that
ends above its initial loss is diverged: `sweeps.trainers.final_status`), and one that
starts at or below the target, or without a step-0 evaluation, is never stopped by it.

The default (f = 0.1, m = 0.05: 5% of the way after a tenth of the horizon) never fires
on the demo's trials at any LR of its range (each had come ≥ 40% of the way by then) and
ends a study whose LR is 1e-8 after a tenth of its steps.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepscale.rundir import EVENTS_JSONL, NO_PROGRESS


@dataclass
class NoProgressRule:
    """The rule for one trial: ``fraction`` of ``horizon`` steps, ``least`` progress."""

    fraction: float
    least: float
    horizon: int
    target: float
    initial: float = math.nan
    best: float = math.inf
    last: float = math.nan
    ended: dict[str, Any] = field(default_factory=dict)  # set when the rule stopped it

    def seen(self, step: int, loss: float) -> None:
        """An evaluation (in step order, resumed jobs from their records)."""
        if step == 0:
            self.initial = float(loss)
        self.last = float(loss)
        if loss == loss:
            self.best = min(self.best, float(loss))

    def progress(self) -> float:
        """How far the trial has come from its step-0 loss to the target (NaN: unknown)."""
        gap = self.initial - self.target
        if not (math.isfinite(gap) and gap > 0 and math.isfinite(self.best)):
            return math.nan
        return (self.initial - self.best) / gap

    def stops(self, step: int) -> bool:
        """Whether the trial stops at this evaluation (call after :meth:`seen`)."""
        if step < self.fraction * self.horizon:
            return False
        p = self.progress()
        if not (math.isfinite(p) and p < self.least):
            return False
        if not self.last <= self.initial + self.least * (self.initial - self.target):
            return False  # rising (or not finite): the divergence rule's, not this one's
        self.ended = {
            "ended_by": NO_PROGRESS,
            "ended_by_step": int(step),
            "progress_at_end": round(p, 4),
        }
        return True


def earlier_stop(folder: Path) -> dict[str, Any]:
    """The rule's record from an earlier job of the trial (its ``no_progress`` event in
    events.jsonl), or {}: a job killed after the rule stopped its trial resumes at that step
    and ends pruned at once, and the status must still say why."""
    try:
        lines = (folder / EVENTS_JSONL).read_text().splitlines()
    except OSError:
        return {}
    for line in reversed(lines):
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == NO_PROGRESS:
            return {
                k: event[k] for k in ("ended_by", "ended_by_step", "progress_at_end") if k in event
            }
    return {}
