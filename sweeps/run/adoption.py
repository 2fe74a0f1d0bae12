"""Trials RUNNING in Optuna that no job of this orchestrator runs: left by a dead
orchestrator, or run by another live one. Finished ones are told from their status.json,
dead ones re-run from their checkpoints, live ones (another orchestrator's, or a job that
outlived its orchestrator) are waited for; a job that outlives its orchestrator (SLURM's;
e.g. a detached orchestrator requeued at its time limit) is taken over while it is still
queued or running. This module finds them and reads their state; the scheduler acts.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Container, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optuna.trial import FrozenTrial, TrialState
from submitit.core.utils import JobPaths

from stepscale.files import read_json
from stepscale.rundir import (
    LOGS_DIR,
    STATUS_JSON,
    STOPPED,
    TRAINER_FINAL_STATES,
    TRIAL_JSON,
    trial_dir,
)
from stepscale.sweeps.launch.launchers import Launcher, TrialHandle
from stepscale.sweeps.run.outcomes import exception_line
from stepscale.sweeps.study.space import Point


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


def dead_job_error(folder: Path, record: dict[str, Any]) -> str | None:
    """Why the last job of a dead trial failed, if it failed on its own (its result file
    holds an error); None when it was interrupted from outside: stopped on request
    (`sweep stop`, Ctrl-C) or killed with its orchestrator, leaving no result. Only a
    failure uses up one of the trial's retries."""
    job_id = record.get("job_id")
    if record.get("state") == STOPPED or not job_id:
        return None
    files = Path(record["job_files"]) if record.get("job_files") else folder / LOGS_DIR
    paths = JobPaths(files, job_id=str(job_id), task_id=0)
    try:
        with open(paths.result_pickle, "rb") as f:
            outcome, trace = pickle.load(f)
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError):
        return None  # no result: the job was killed (with its orchestrator, or alone)
    if outcome == "success" and isinstance(trace, list) and "job_index" in record:
        index = int(record["job_index"])  # a job that ran a queue of trials: this one's
        outcome, trace = trace[index] if index < len(trace) else ("success", None)
    if outcome != "error":
        return None
    return f"{exception_line(str(trace))} (traceback and output: {paths.stderr})"


def live_job(launcher: Launcher, folder: Path, record: dict[str, Any]) -> TrialHandle | None:
    """A handle on the job of a trial whose orchestrator died, if that job outlives its
    orchestrator and is still queued or running (so it is neither waited on blindly nor run
    twice); one trial of it when it runs a queue of trials (``job_index``)."""
    job_id = record.get("job_id")
    if not launcher.jobs_outlive_orchestrator or not job_id or "trial" not in record:
        return None
    files = record.get("job_files")
    index = int(record["job_index"]) if "job_index" in record else None
    return launcher.attach(folder, str(job_id), Path(files) if files else None, index)
