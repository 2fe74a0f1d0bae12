"""How a trial ended: the job's outcome read, Optuna told exactly once (the objective
value, with its penalties, comes from `sweeps.study.objective`), and the trial's true end
recorded in trial.json."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from stepscale.rundir import CHECKPOINTS_DIR, FAILED, METRICS_JSONL, PRUNED, TRAINER_FINAL_STATES
from stepscale.sweeps.job import heartbeat
from stepscale.sweeps.study.objective import objective_value, outcome_attrs
from stepscale.sweeps.study.trials import now_iso, write_trial_json


def final_status(ok: bool, result: Any) -> dict[str, Any] | None:
    """The trainer's final status, if a job returned one that ends its trial."""
    status = result if ok and isinstance(result, dict) else None
    return status if status is not None and status.get("state") in TRAINER_FINAL_STATES else None


def job_error(ok: bool, result: Any, log: Path | None = None) -> str:
    """Why a job gave no final status, in one line: its exception (the traceback stays in
    the job's log, named at the end), or what it returned instead."""
    if ok:
        return f"unexpected result {result!r}"[:2000]
    text = str(result)
    if "failed during processing with trace:" in text:  # submitit's FailedJobError
        line = exception_line(text.split("-" * 22, 2)[1] if text.count("-" * 22) >= 2 else text)
    elif (state := re.search(r"has not produced any output \(state: ([^)]*)\)", text)) is not None:
        job = re.match(r"Job (\S+)", text)
        which = f"job {job.group(1)}" if job else "the job"
        line = f"{type(result).__name__}: {which} ended without a result (state: {state.group(1)})"
    else:
        line = f"{type(result).__name__}: {' '.join(text.split())}"
    where = f" (traceback and output: {log})" if log is not None else ""
    return line[: 2000 - len(where)] + where


_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*)(: |$)")


def exception_line(trace: str) -> str:
    """``Type: message`` of the exception that ended a Python traceback, on one line (the
    type without its module path)."""
    lines = [ln for ln in trace.strip().splitlines() if ln.strip()]
    start = len(lines) - 1
    for i in range(len(lines) - 1, -1, -1):
        if not lines[i].startswith((" ", "\t")) and _EXCEPTION_LINE.match(lines[i]):
            start = i
            break
    head, _, message = " ".join(ln.strip() for ln in lines[start:]).partition(": ")
    name = head.rsplit(".", 1)[-1]
    return f"{name}: {message}" if message else name


def tell_once(
    study: optuna.Study,
    storage: optuna.storages.BaseStorage,
    trial_id: int,
    state: str,
    status: dict[str, Any] | None,
    folder: Path,
    objective: str,
) -> tuple[float | None, bool]:
    """Tell Optuna how a trial ended, unless it was told already (by another orchestrator,
    or one that died): then its verdict stands. Returns (the value told or standing,
    whether this call told it). Call it under the run dir's lock."""
    frozen = storage.get_trial(trial_id)
    if frozen.state != TrialState.RUNNING:
        return frozen.value, False
    storage.set_trial_user_attr(trial_id, "state", state)
    told = status if state not in (PRUNED, FAILED) else None
    for key, attr in outcome_attrs(objective, state, told).items():
        storage.set_trial_user_attr(trial_id, key, attr)
    value = None
    if state == PRUNED:
        study.tell(frozen.number, state=TrialState.PRUNED)
    elif state == FAILED:
        study.tell(frozen.number, state=TrialState.FAIL)
    else:
        value = objective_value(objective, status, initial_loss(folder))
        study.tell(frozen.number, value)
    return value, True


def record_end(
    folder: Path,
    record: dict[str, Any],
    state: str,
    value: float | None,
    error: str | None,
    keep_checkpoints: bool,
) -> None:
    """Write the trial's end into trial.json, drop its checkpoints (unless kept) and the
    orchestrator's hold on it."""
    record.update(state=state, objective=value, ended=now_iso())
    if error:
        record["error"] = error[:2000]
    write_trial_json(folder, record)
    if not keep_checkpoints:
        shutil.rmtree(folder / CHECKPOINTS_DIR, ignore_errors=True)
    heartbeat.let_go(folder)


def initial_loss(folder: Path) -> float | None:
    """The step-0 eval loss of a trial, from its metrics."""
    try:
        with open(folder / METRICS_JSONL) as f:
            first = f.readline()
    except OSError:
        return None
    record = read_json_line(first)
    value = record.get("eval_loss") if record else None
    return float(value) if value is not None else None


def read_json_line(line: str) -> dict[str, Any] | None:
    """One JSONL record, or None."""
    try:
        return json.loads(line)
    except ValueError:
        return None
