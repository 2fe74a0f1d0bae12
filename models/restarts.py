"""Training through loss spikes: the restart policy of ``train.on_spike`` (PaLM's
deterministic restart and replay; docs/science.md).

When the loss-spike detector (models/spikes.py) flags step s, or the training loss of step s
is not finite, a trial under ``policy: restart`` goes back to the newest checkpoint at step
c ≤ s − R (``rewind_steps``; the oldest kept when none is that old), skips the next K
(``skip_batches``) batches of the data stream from there, runs ``scaled_steps`` steps with
the LR × ``lr_scale`` and the clip × ``clip_scale``, and goes on. The (M + 1)-th trigger
(``max_restarts`` = M) ends the trial as diverged.

The data stream stays a pure function of the step: after restarts that skipped ``skipped``
batches in all, the update of step u (0-based) trains on batch ``u + skipped`` of the
stream (the batch of `DataSource.host_batch` / the device sampler's key at that index), so
a rerun skips the same batches, whatever the wall clock or the process's history.

The checkpoints are the ring: the trainer writes one every ``train.checkpoint_every``
steps (and at step 0) and keeps the newest `checkpoints_to_keep` of them, enough that one
at least R steps before any step the next chunk can flag is always on disk. A restart
deletes the checkpoints past c and rewrites c with the restart's record (`Restarts`), so a
trial killed at any point afterwards resumes from c or a later checkpoint of the new path
and ends as one never killed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from stepscale.models.checks import choice, int_at_least
from stepscale.models.config import TrainConfig
from stepscale.models.errors import ConfigError
from stepscale.rundir import SPIKE_RESTART

POLICIES = ("off", "restart")
RESTART_EVENT = SPIKE_RESTART  # events.jsonl: one per restart
NON_FINITE = "non_finite_loss"  # what triggered a restart, beside models/spikes.py's LOSS_SPIKE


def enabled(t: TrainConfig) -> bool:
    """Whether the run restarts on spikes."""
    return t.on_spike.policy == "restart"


def check(t: TrainConfig) -> None:
    """ConfigError naming the key for an unusable ``train.on_spike``; a policy needs
    checkpoints to go back to (``train.checkpoint_every`` > 0) and a checkpoint to resume
    from (``train.resume``)."""
    p = t.on_spike
    choice("train.on_spike.policy", p.policy, POLICIES)
    int_at_least("train.on_spike.rewind_steps", p.rewind_steps, 1)
    int_at_least("train.on_spike.skip_batches", p.skip_batches, 0)
    int_at_least("train.on_spike.max_restarts", p.max_restarts, 0)
    int_at_least("train.on_spike.scaled_steps", p.scaled_steps, 0)
    for name in ("lr_scale", "clip_scale"):
        value = getattr(p, name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"train.on_spike.{name}", f"must be a number, got {value!r}")
        if not math.isfinite(value) or value <= 0:
            raise ConfigError(f"train.on_spike.{name}", f"must be a finite number > 0, got {value}")
    if not enabled(t):
        return
    if not t.checkpoint_every:
        raise ConfigError(
            "train.checkpoint_every",
            "train.on_spike.policy=restart goes back to a checkpoint: set "
            "train.checkpoint_every > 0 (at most train.on_spike.rewind_steps, so a restart "
            "does not go back further than it must)",
        )
    if not t.resume:
        raise ConfigError(
            "train.resume",
            "train.on_spike.policy=restart resumes from the run's own checkpoints: keep "
            "train.resume=true",
        )


def checkpoints_to_keep(t: TrainConfig) -> int:
    """How many checkpoints the run keeps: ``train.keep_checkpoints``, or under a policy as
    many as it takes to hold one at least R steps before any step the next chunk can flag
    (after a save at step n a spike can be flagged from step n + 1 on, so the newest
    checkpoint ≤ n + 1 − R must stay: ⌈(R − 1) / C⌉ + 1 of them, plus step 0's)."""
    if not enabled(t):
        return t.keep_checkpoints
    c, r = t.checkpoint_every, t.on_spike.rewind_steps
    return max(t.keep_checkpoints, -(-(r - 1) // c) + 2)


def restart_point(saved: list[int], spike_step: int, rewind: int) -> int | None:
    """The checkpoint to go back to: the newest of ``saved`` at least ``rewind`` steps
    before ``spike_step``, else the oldest before it (None: no checkpoint before it)."""
    before = [s for s in saved if s < spike_step]
    if not before:
        return None
    far_enough = [s for s in before if s <= spike_step - rewind]
    return max(far_enough) if far_enough else min(before)


@dataclass
class Restarts:
    """The restart record a run carries in every checkpoint: what a restart must not forget
    when it goes back (so it is not taken from the checkpoint it goes back to)."""

    count: int = 0  # restarts done
    skipped: int = 0  # batches skipped in all: step u trains on batch u + skipped
    scaled_until: int = 0  # LR / clip scaled for the steps before this one
    steps_redone: int = 0  # steps trained on paths a restart abandoned
    examples_redone: int = 0  # their examples
    log: list[dict[str, Any]] = field(default_factory=list)  # one entry per restart

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form (kept in checkpoints)."""
        return dict(self.__dict__)

    @classmethod
    def of(cls, saved: dict[str, Any] | None) -> Restarts:
        """From `to_json` (nothing: no restart yet)."""
        return cls(**saved) if saved else cls()

    def add(
        self, trigger: tuple[int, str, float], back: int, skip: int, redone: int
    ) -> dict[str, Any]:
        """Count a restart: ``trigger`` (spike step, why, loss) sent the run back to step
        ``back`` with ``skip`` batches skipped, abandoning ``redone`` steps; returns the
        restart's log entry (its event's fields)."""
        spike, why, value = trigger
        self.count += 1
        self.skipped += skip
        self.steps_redone += redone
        entry = {
            "restart": self.count,
            "spike_step": spike,
            "trigger": why,
            "value": value if math.isfinite(value) else None,
            "from_step": back,
            "batches_skipped": skip,
            "skipped_total": self.skipped,
            "steps_redone": redone,
        }
        self.log.append(entry)
        return entry

    def status(self) -> dict[str, Any]:
        """The status.json keys (docs/run-dir.md)."""
        return {
            "spike_restarts": self.count,
            "batches_skipped": self.skipped,
            "steps_redone": self.steps_redone,
            "restarts": self.log[:100],
        }
