"""A command trainer's spike restarts (``train.on_spike.policy: restart``), applied by the
trial's job to the training losses its program reports (docs/trainers.md, "Restarts before
a loss spike"; docs/science.md for the rule).

The rule is the built-in trainer's (`stepscale.models.restarts`, reached through
`sweeps.trainers.builtin`): when the training loss of a record is a spike under
``train.spike_window``/``train.spike_factor`` (the window counts the records that carry a
loss, at the program's own logging cadence) or is not finite, the job ends the program,
goes back to its newest checkpoint c at least R (``rewind_steps``) steps before the spike —
the program keeps one every ``trainer.checkpoint_every`` steps, step 0 being a fresh start —
drops the records after c, and runs it again with ``trainer.restart_args`` filled:
``{restart_step}`` = c and ``{batches_skipped}`` = K (``skip_batches``) × the restarts so far.
The (M + 1)-th trigger (``max_restarts`` = M) ends the trial as diverged.

The program must make the data stream a function of the step and the skip (step u trains on
batch u + skipped), resume exactly from its checkpoint of step c, and forget its checkpoints
after c. The job keeps the restart record in ``spike_restarts.json`` in the trial folder,
written before the records are cut, so a job killed mid-restart finishes the cut when the
trial resumes and goes on as one never killed; its spike detector is rebuilt from the kept
records (the same losses, in the same order, give the same state).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from stepscale.files import read_json, write_json_atomic
from stepscale.rundir import LOSS_SPIKE, SPIKE_RESTARTS_JSON
from stepscale.sweeps.trainers.builtin import spike_rule

SpikeDetector, Restarts, restart_point, NON_FINITE = spike_rule()


class CommandRestarts:
    """The restart policy of one command trainer's trial (``settings``: `TrialSpec.on_spike`)."""

    def __init__(self, settings: dict[str, Any], folder: Path) -> None:
        self.rewind = int(settings["rewind_steps"])
        self.skip = int(settings["skip_batches"])
        self.max_restarts = int(settings["max_restarts"])
        self.every = int(settings["checkpoint_every"])
        self.window, self.factor = int(settings["window"]), float(settings["factor"])
        self.path = folder / SPIKE_RESTARTS_JSON
        saved = read_json(self.path, lenient=True) or {}
        self.pending: int | None = saved.pop("pending_rewind", None)
        self.done = Restarts.of(saved)
        self.detector = SpikeDetector(self.window, self.factor)
        self.scanned = 0  # the last step whose loss the detector has seen

    def placeholders(self) -> dict[str, int]:
        """``{restart_step}`` (the checkpoint the last restart went back to; 0 before any)
        and ``{batches_skipped}`` (in all)."""
        last = self.done.log[-1]["from_step"] if self.done.log else 0
        return {"restart_step": int(last), "batches_skipped": int(self.done.skipped)}

    def prime(self, records: list[dict[str, Any]]) -> None:
        """Start the detector afresh and feed it the kept records' losses, in order."""
        self.detector = SpikeDetector(self.window, self.factor)
        self.scanned = 0
        for record in records:
            self.check(record)

    def check(self, record: dict[str, Any]) -> tuple[int, str, float] | None:
        """The trigger a record is, if it is one: (step, why, loss) for a loss spike
        (`LOSS_SPIKE`) or a loss that is not finite (`NON_FINITE`). A step seen before
        (a record read again) is not looked at twice."""
        step, loss = int(record.get("step", 0)), record.get("loss")
        if step <= self.scanned or isinstance(loss, bool) or not isinstance(loss, int | float):
            return None
        self.scanned = step
        loss = float(loss)
        if not math.isfinite(loss):
            return step, NON_FINITE, loss
        return (step, LOSS_SPIKE, loss) if self.detector.scan(step, [loss]) else None

    def back_to(self, spike_step: int) -> int | None:
        """The checkpoint step to go back to for a trigger at ``spike_step``; None when the
        restarts are used up (the trial then ends as diverged)."""
        if self.done.count >= self.max_restarts:
            return None
        saved = list(range(0, spike_step, self.every))  # step 0: the program's fresh start
        point = restart_point(saved, spike_step, self.rewind)
        return 0 if point is None else point

    def begin(self, trigger: tuple[int, str, float], back: int, reached: int) -> dict[str, Any]:
        """Count a restart to ``back`` for ``trigger`` (the program had reached step
        ``reached``) and keep the record, the restart pending until the program runs on
        (`restarted`); returns the restart's entry (its event's fields)."""
        entry = self.done.add(trigger, back, self.skip, max(0, reached - back))
        self.pending = back
        self._write()
        return entry

    def restarted(self) -> None:
        """The restarted program gave a record past the restart's step: it runs on the new
        path (its checkpoints after the step are gone), and a later resume is an ordinary
        one; until then a resumed job restarts it again."""
        self.pending = None
        self._write()

    def status(self, steps_done: int) -> dict[str, Any]:
        """The status.json keys of the restarts (docs/run-dir.md), beside the program's."""
        return {**self.done.status(), "steps_spent": steps_done + self.done.steps_redone}

    def _write(self) -> None:
        record = self.done.to_json()
        if self.pending is not None:
            record["pending_rewind"] = self.pending
        write_json_atomic(self.path, record)
