"""Batch-size ramp-up: the global batch of every step, from ``data.rampup``.

Two ways to give a ramp (never both):

- MaxText's (and Megatron's) rule, in global batch: ``start``, ``increment`` and ``samples``.
  The batch begins at ``start`` and grows by ``increment`` up to ``data.global_batch`` in
  n = (global_batch − start) / increment stages of equal *samples*: stage i (batch
  b_i = start + i·increment) lasts until it has consumed at least samples / n examples,
  i.e. ceil(samples / (n·b_i)) steps, counted afresh in every stage (MaxText's
  ``RampupBatchManager``). Then the batch is ``data.global_batch`` to the end.
- ``schedule``: a custom ramp as ``[[step, batch], …]``: the batch in force from that step
  on; the first entry is at step 0 and the last entry's batch is ``data.global_batch``.

Steps stay the unit: a stage is a range of optimizer steps, and the examples a run has seen
are the exact sum of its steps' batches. ``lr_coupling`` scales the learning rate of a
stage by (b / global_batch)^p, p = 0 (``none``), ½ (``sqrt``) or 1 (``linear``), so the
schedule's LR is the final batch's.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from stepscale.models.checks import choice, is_int
from stepscale.models.config import DataConfig
from stepscale.models.errors import ConfigError

COUPLINGS = {"none": 0.0, "sqrt": 0.5, "linear": 1.0}


@dataclass(frozen=True)
class BatchStage:
    """A range of steps at one global batch: updates ``start``, ``start + 1``, … (0-based)
    until the next stage's ``start``."""

    start: int
    batch: int


@dataclass(frozen=True)
class BatchSchedule:
    """The global batch of every step of a run (one stage when there is no ramp)."""

    stages: tuple[BatchStage, ...]

    @property
    def final(self) -> int:
        """The batch of the last stage (``data.global_batch``)."""
        return self.stages[-1].batch

    @property
    def ramped(self) -> bool:
        """Whether the batch changes during the run."""
        return len(self.stages) > 1

    @property
    def rampup_steps(self) -> int:
        """The first step at the final batch (0 without a ramp)."""
        return self.stages[-1].start

    def stage_index(self, step: int) -> int:
        """Index of the stage of update ``step`` (0-based)."""
        return bisect.bisect_right([s.start for s in self.stages], step) - 1

    def batch_at(self, step: int) -> int:
        """The global batch of update ``step`` (0-based)."""
        return self.stages[self.stage_index(step)].batch

    def next_change(self, step: int) -> int | None:
        """The first step after ``step`` at which the batch changes (None: never)."""
        i = self.stage_index(step)
        return self.stages[i + 1].start if i + 1 < len(self.stages) else None

    def examples_before(self, step: int) -> int:
        """Examples consumed by updates 0 … ``step`` − 1."""
        total = 0
        for i, stage in enumerate(self.stages):
            end = self.stages[i + 1].start if i + 1 < len(self.stages) else step
            total += max(0, min(end, step) - stage.start) * stage.batch
        return total

    def steps_for_examples(self, examples: float) -> int:
        """The fewest steps whose examples reach ``examples`` (rounded up, never short)."""
        if examples <= 0:
            return 0
        done = 0
        for i, stage in enumerate(self.stages):
            end = self.stages[i + 1].start if i + 1 < len(self.stages) else None
            length = None if end is None else end - stage.start
            if length is None or done + length * stage.batch >= examples:
                return stage.start + math.ceil((examples - done) / stage.batch)
            done += length * stage.batch
        raise AssertionError("unreachable: the last stage is open-ended")

    def as_list(self) -> list[list[int]]:
        """``[[step, batch], …]`` (for status.json)."""
        return [[s.start, s.batch] for s in self.stages]


def lr_scale(coupling: str, batch: int, final: int) -> float:
    """The learning-rate factor of a stage at ``batch``: (batch / final)^p."""
    return float((batch / final) ** COUPLINGS[coupling])


def batch_schedule(data: DataConfig) -> BatchSchedule:
    """The validated batch schedule of ``data`` (``data.rampup``); ConfigError names the
    key at fault."""
    r = data.rampup
    final = data.global_batch
    choice("data.rampup.lr_coupling", r.lr_coupling, COUPLINGS)
    if not is_int(r.samples) or r.samples < 0:
        raise ConfigError(
            "data.rampup.samples", f"must be an integer ≥ 0 (0 = no ramp), got {r.samples!r}"
        )
    schedule = list(r.schedule or [])
    if schedule and r.samples:
        raise ConfigError(
            "data.rampup.schedule",
            "give either a custom schedule or MaxText's start/increment/samples, not both "
            "(set data.rampup.samples=0 to use the schedule)",
        )
    if schedule:
        return BatchSchedule(_custom_stages(schedule, final))
    if r.samples == 0:
        return BatchSchedule((BatchStage(0, final),))
    return BatchSchedule(_maxtext_stages(r.start, r.increment, r.samples, final))


def _maxtext_stages(
    start: int | None, increment: int | None, samples: int, final: int
) -> tuple[BatchStage, ...]:
    if not is_int(start) or start <= 0:
        raise ConfigError(
            "data.rampup.start",
            f"a ramp (data.rampup.samples > 0) needs a batch > 0, got {start!r}",
        )
    if start >= final:
        raise ConfigError(
            "data.rampup.start",
            f"{start} must be below data.global_batch = {final} (the batch the ramp leads to)",
        )
    if not is_int(increment) or increment <= 0:
        raise ConfigError(
            "data.rampup.increment",
            f"a ramp (data.rampup.samples > 0) needs an increment > 0, got {increment!r}",
        )
    if (final - start) % increment:
        raise ConfigError(
            "data.rampup.increment",
            f"data.global_batch − data.rampup.start = {final - start} is not a multiple of "
            f"the increment {increment}",
        )
    n = (final - start) // increment
    stages, step = [], 0
    for i in range(n):
        batch = start + i * increment
        stages.append(BatchStage(step, batch))
        step += -(-samples // (n * batch))  # ceil(samples / n / batch), in integers
    stages.append(BatchStage(step, final))
    return tuple(stages)


def _custom_stages(schedule: list[object], final: int) -> tuple[BatchStage, ...]:
    stages: list[BatchStage] = []
    for i, entry in enumerate(schedule):
        if not isinstance(entry, (list, tuple)) or len(entry) != 2 or not all(map(is_int, entry)):
            raise ConfigError(
                "data.rampup.schedule",
                f"entry {i} is {entry!r}; each entry is [step, batch] (two integers)",
            )
        step, batch = int(entry[0]), int(entry[1])
        if batch <= 0:
            raise ConfigError("data.rampup.schedule", f"entry {i}: batch must be > 0, got {batch}")
        if not stages and step != 0:
            raise ConfigError("data.rampup.schedule", f"the first entry is at step {step}, not 0")
        if stages and step <= stages[-1].start:
            raise ConfigError(
                "data.rampup.schedule",
                f"entry {i}: steps must increase, got {step} after {stages[-1].start}",
            )
        if stages and batch == stages[-1].batch:
            raise ConfigError(
                "data.rampup.schedule", f"entry {i}: the batch {batch} repeats the entry before"
            )
        stages.append(BatchStage(step, batch))
    if stages[-1].batch != final:
        raise ConfigError(
            "data.rampup.schedule",
            f"the last entry's batch {stages[-1].batch} must be data.global_batch = {final} "
            "(the batch the ramp leads to)",
        )
    return tuple(stages)
