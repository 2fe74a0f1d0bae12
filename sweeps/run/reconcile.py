"""The storage is the truth: trial folders are brought in line with it.

The orchestrator tells Optuna how a trial ended first and writes the trial's folder after
(``trial.json``, checkpoints dropped, heartbeats let go). When something stops it in
between — a full disk, a kill — Optuna has the trial as finished while its folder still
says running. Every orchestrator start (and end) repairs such folders from Optuna's record:
the true state and value into ``trial.json`` (and ``status.json``, when it still says
running), and the leftovers removed: heartbeats, temporary files, checkpoints (unless kept).
So `sweep status`, which reads only the folders, agrees with the orchestrator.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from stepscale.files import read_json, write_json_atomic
from stepscale.rundir import (
    CHECKPOINTS_DIR,
    COMPLETE,
    FAILED,
    FINAL_STATES,
    JOB_HEARTBEAT,
    ORCH_HEARTBEAT,
    PRUNED,
    STATUS_JSON,
    TRIAL_JSON,
    trial_dir,
)
from stepscale.sweeps.study.space import Point
from stepscale.sweeps.study.trials import write_trial_json

_OPTUNA_FINAL = {TrialState.COMPLETE: COMPLETE, TrialState.PRUNED: PRUNED, TrialState.FAIL: FAILED}


def true_state(trial: FrozenTrial) -> str | None:
    """A finished trial's state as stepscale names it (a diverged trial is COMPLETE in
    Optuna, its true state a user attribute); None while it runs."""
    if trial.state not in _OPTUNA_FINAL:
        return None
    told = trial.user_attrs.get("state")
    return told if told in FINAL_STATES else _OPTUNA_FINAL[trial.state]


def reconcile(
    points: Sequence[Point],
    trials_of: Callable[[Point], list[FrozenTrial]],
    run_dir: Path,
    record_of: Callable[[Point, FrozenTrial, dict[str, Any]], dict[str, Any]],
    keep_checkpoints: bool,
) -> int:
    """Bring the folder of every trial Optuna has as finished in line with it; returns how
    many folders needed it. ``record_of`` gives a trial.json record for a trial (the one on
    disk, or a new one when there is none)."""
    repaired = 0
    for point in points:
        for trial in trials_of(point):
            state = true_state(trial)
            if state is None:
                continue
            folder = trial_dir(run_dir, point.label, trial.number)
            if not folder.is_dir():
                continue  # never run here (e.g. a trial told by another tool)
            repaired += _repair(folder, point, trial, state, record_of, keep_checkpoints)
    return repaired


def _repair(
    folder: Path,
    point: Point,
    trial: FrozenTrial,
    state: str,
    record_of: Callable[[Point, FrozenTrial, dict[str, Any]], dict[str, Any]],
    keep_checkpoints: bool,
) -> bool:
    changed = False
    record = read_json(folder / TRIAL_JSON, lenient=True)
    record = record if isinstance(record, dict) else {}  # a damaged record is rewritten
    if record.get("state") != state:
        record = dict(record_of(point, trial, record))
        ended = trial.datetime_complete
        record.update(
            state=state,
            objective=trial.value,
            ended=ended.strftime("%Y-%m-%dT%H:%M:%SZ") if ended else record.get("ended"),
        )
        if state == FAILED and not record.get("error"):
            record["error"] = (
                "the trial failed (as the study's storage records); its last job's output "
                "is in logs/"
            )
        write_trial_json(folder, record)
        changed = True
    status = read_json(folder / STATUS_JSON, lenient=True)
    if isinstance(status, dict) and status.get("state") not in FINAL_STATES:
        write_json_atomic(folder / STATUS_JSON, {**status, "state": state})
        changed = True
    leftovers = [folder / JOB_HEARTBEAT, folder / ORCH_HEARTBEAT, *_temporary_files(folder)]
    if not keep_checkpoints:
        leftovers.append(folder / CHECKPOINTS_DIR)
    for path in leftovers:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
            changed = True
        elif path.exists():
            path.unlink(missing_ok=True)
            changed = True
    return changed


def _temporary_files(folder: Path) -> list[Path]:
    """Files a write cut short left in a trial folder (atomic writes' ``.*.tmp``, the
    client's ``*.tmp``)."""
    return [p for p in folder.iterdir() if p.is_file() and p.name.endswith(".tmp")]
