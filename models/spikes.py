"""Loss and gradient-norm spikes, found in the per-step values of a run.

The rule (``train.spike_window`` = w, ``train.spike_factor`` = f): the value of step s is a
spike when at least w finite values precede it and it exceeds f × the median of the w
values before it (spikes among them included, so a lasting jump stops counting once it
fills half the window). A *spike* is a run of consecutive flagged steps; it is counted
once, at its first step. A non-finite value is never a spike (the run diverged: its state
says so) and does not enter the window.

Steps are counted as in ``metrics.jsonl``: the training loss of update u (0-based), computed
on the parameters before it, belongs to step u + 1. The detector keeps only the last w
values and whether the last step was flagged, so it is saved with a checkpoint and a
resumed run finds the same spikes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class SpikeDetector:
    """Finds spikes in one series (the loss, or the gradient norm) chunk by chunk."""

    window: int
    factor: float
    history: list[float] = field(default_factory=list)
    flagged: bool = False  # whether the step before the next one was flagged

    def scan(
        self, first_step: int, values: np.ndarray | list[float]
    ) -> list[tuple[int, float, float]]:
        """Feed the values of steps ``first_step``, ``first_step + 1``, …; returns
        (step, value, median of the window it was compared with) of every spike that
        begins among them."""
        found = []
        if self.window <= 0:
            return found
        for i, raw in enumerate(values):
            value = float(raw)
            if not math.isfinite(value):
                self.flagged = False
                continue
            full = len(self.history) >= self.window
            median = float(np.median(self.history[-self.window :])) if full else math.nan
            hit = full and value > self.factor * median
            if hit and not self.flagged:
                found.append((first_step + i, value, median))
            self.flagged = hit
            self.history.append(value)
            del self.history[: -self.window]
        return found

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form (kept in checkpoints)."""
        return {"history": list(self.history), "flagged": self.flagged}

    def load(self, saved: dict[str, Any] | None) -> None:
        """Take up the state of `to_json` (nothing: a fresh window)."""
        if saved:
            self.history = [float(v) for v in saved.get("history", [])][-self.window :]
            self.flagged = bool(saved.get("flagged", False))


def find_spikes(
    values: np.ndarray | list[float], window: int, factor: float, first_step: int = 1
) -> list[int]:
    """The first step of every spike of a whole series (values of steps ``first_step``,
    ``first_step + 1``, …) under the rule of this module."""
    return [step for step, _, _ in SpikeDetector(window, factor).scan(first_step, values)]
