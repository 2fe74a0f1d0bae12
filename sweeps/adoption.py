"""Trials RUNNING in Optuna that no job of this orchestrator runs: left by a dead
orchestrator, or run by another live one. Finished ones are told from their status.json,
dead ones re-run from their checkpoints, live ones (another orchestrator's, or a job that
outlived its orchestrator) are waited for; a SLURM job whose orchestrator died (e.g. a
detached orchestrator requeued at its time limit) is taken over while it is still queued
or running. This module finds them and reads their state; the scheduler acts.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from stepscale.files import read_json
from stepscale.rundir import STATUS_JSON, STOPPED, TRAINER_FINAL_STATES, TRIAL_JSON, trial_dir
from stepscale.sweeps.launchers import JobHandle, Launcher
from stepscale.sweeps.space import Point


@dataclass(frozen=True)
class Orphan:
    """A RUNNING trial without a job of ours, with what its folder says."""

    point: Point
    trial: FrozenTrial
    folder: Path
    status: dict[str, Any] | None  # the trainer's status.json
    record: dict[str, Any]  # trial.json ({"attempts": 0} if none)

    @property
    def finished(self) -> bool:
        """Its job wrote a final status: only telling Optuna is left."""
        return self.status is not None and self.status.get("state") in TRAINER_FINAL_STATES


def orphans(
    points: Sequence[Point],
    trials_of: Callable[[Point], list[FrozenTrial]],
    ours: Container[int],
    run_dir: Path,
) -> Iterator[Orphan]:
    """The RUNNING trials of ``points`` whose Optuna trial id is not in ``ours``."""
    for point in points:
        for trial in trials_of(point):
            if trial.state != TrialState.RUNNING or trial._trial_id in ours:
                continue
            folder = trial_dir(run_dir, point.label, trial.number)
            status = read_json(folder / STATUS_JSON, lenient=True)
            record = read_json(folder / TRIAL_JSON, lenient=True) or {"attempts": 0}
            yield Orphan(point, trial, folder, status, record)


def resume_attempt(record: dict[str, Any]) -> int:
    """The attempt number of a dead trial's next job: the same one if it was stopped on
    request (`sweep stop`, Ctrl-C), which is not a failed attempt; else the next."""
    attempts = int(record.get("attempts", 0))
    again = record.get("state") == STOPPED and attempts > 0
    return attempts if again else attempts + 1


def live_job(launcher: Launcher, folder: Path, record: dict[str, Any]) -> JobHandle | None:
    """A handle on the SLURM job of a trial whose orchestrator died, if that job is still
    queued or running (so it is neither waited on blindly nor run twice)."""
    job_id = record.get("job_id")
    if launcher.cfg.name != "slurm" or not job_id or "trial" not in record:
        return None
    files = record.get("job_files")
    return launcher.attach(folder, str(job_id), Path(files) if files else None)
