"""`sweep status RUN_DIR [--json]`: a row per point from the run dir's files (no storage
access needed, so it works from any machine that sees the run dir)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from stepscale.errors import UsageError
from stepscale.files import read_json
from stepscale.rundir import (
    COMPLETE,
    EVENTS_JSONL,
    FAILED,
    JOB_JSON,
    ORCHESTRATOR_DIR,
    QUEUED,
    RUN_JSON,
    RUNNING,
    SPIKE_RESTART,
    STATUS_JSON,
    STOPPED,
    STUDY_JSON,
    TRAINER_FINAL_STATES,
    TRIAL_JSON,
    TRIALS_DIR,
)
from stepscale.sweeps.run import orchestrators

STATES = (RUNNING, *TRAINER_FINAL_STATES, FAILED)
KNOWN_STATES = (*STATES, STOPPED, QUEUED)
DAMAGED = "damaged"  # a trial.json that cannot be read: not counted as any state
ORCHESTRATOR_TIMEOUT_S = 120.0
MAX_FAILURES = 5  # failed trials whose message the table prints


def study_status(run_dir: Path) -> dict[str, Any]:
    """Counts by state, best objective and steps spent per point."""
    study = read_json(run_dir / STUDY_JSON, lenient=True)
    if study is None:
        raise UsageError(f"{run_dir}: not a study run dir (no readable study.json)")
    _check_study_file(run_dir / STUDY_JSON, study)
    budget = study["budget"]["trials_per_point"] + study["budget"].get("confirm_seeds", 0)
    points = []
    damaged: list[str] = []
    failures: list[dict[str, Any]] = []  # why each failed trial failed (its trial.json)
    leftovers: list[dict[str, Any]] = []  # trials whose program left processes behind
    for p in study["points"]:
        row: dict[str, Any] = {
            "point": p["label"],
            "budget": budget,
            "best": None,
            "steps": 0,
            "n_params": None,  # N: the trainer's params_nonembedding, else params
            "d_tokens": None,  # D: the tokens a trial trains (horizon × tokens per step)
            "restarts": [],
            "steps_redone": 0,
        }
        row.update({s: 0 for s in (*KNOWN_STATES, DAMAGED)})
        for trial_json in sorted((run_dir / TRIALS_DIR / p["label"]).glob(f"*/{TRIAL_JSON}")):
            trial = _record(trial_json)
            state = trial.get("state")
            if state not in KNOWN_STATES:  # unreadable, not a record, or a state unknown
                damaged.append(str(trial_json))
                state = DAMAGED
            row[state] += 1
            name = f"{p['label']}/{trial_json.parent.name}"
            if state == FAILED and isinstance(trial.get("error"), str):
                failures.append({"trial": name, "error": trial["error"]})
            killed = _leftovers_killed(trial_json.parent / EVENTS_JSONL)
            if killed:
                leftovers.append({"trial": name, "processes": killed})
            status = _record(trial_json.parent / STATUS_JSON)
            steps = status.get("steps_done")
            _sizes(row, status)
            row["steps"] += steps if _count(steps) else 0
            for restart in _restarts(trial_json.parent):
                row["restarts"].append({"trial": trial_json.parent.name, **restart})
                redone = restart.get("steps_redone")
                row["steps_redone"] += redone if _count(redone) else 0
            value = trial.get("objective")
            if (
                state == COMPLETE
                and isinstance(value, int | float)
                and (row["best"] is None or value < row["best"])
            ):
                row["best"] = value
        points.append(row)
    run = _record(run_dir / RUN_JSON)
    job = _record(run_dir / ORCHESTRATOR_DIR / JOB_JSON)
    done = not damaged and all(
        r["running"] == 0 and sum(r[s] for s in STATES[1:]) >= r["budget"] for r in points
    )
    live = orchestrators.live(run_dir, ORCHESTRATOR_TIMEOUT_S)
    return {
        "orchestrators": [
            {k: o.get(k) for k in ("host", "pid", "slurm_job_id", "started")} for o in live
        ],
        "detached_job": job if {"job_id", "log"} <= set(job) else None,
        "name": study["name"],
        "run_dir": str(run_dir),
        "objective": study["objective"],
        "points": points,
        "damaged": damaged,
        "failures": failures,
        "leftovers_killed": leftovers,
        "finished": done and run.get("ended") is not None,
        "started": run.get("started"),
        "ended": run.get("ended"),
    }


def _sizes(row: dict[str, Any], status: dict[str, Any]) -> None:
    """Fill the point's N and D from a trial's status, when it says them."""
    n = status.get("params_nonembedding", status.get("params"))
    if row["n_params"] is None and _count(n):
        row["n_params"] = n
    horizon, per_step = status.get("horizon_steps"), status.get("tokens_per_step")
    if row["d_tokens"] is None and _count(horizon) and _count(per_step):
        row["d_tokens"] = horizon * per_step


def _check_study_file(path: Path, study: Any) -> None:
    """Refuse (`UsageError`) a study.json without what the table needs."""

    def bad(what: str) -> UsageError:
        return UsageError(
            f"{path} is not a study file this version of sweep can read ({what}); it is "
            "written by `sweep run`: run the study's command again to rewrite it"
        )

    if not isinstance(study, dict):
        raise bad(f"it holds a {type(study).__name__}, not a mapping")
    missing = [k for k in ("name", "budget", "points", "objective") if k not in study]
    if missing:
        raise bad(f"missing key(s): {', '.join(missing)}")
    budget = study["budget"]
    if not isinstance(budget, dict) or not _count(budget.get("trials_per_point")):
        raise bad("budget.trials_per_point is not a count")
    if not _count(budget.get("confirm_seeds", 0)):
        raise bad("budget.confirm_seeds is not a count")
    points = study["points"]
    if not isinstance(points, list) or not all(
        isinstance(p, dict) and isinstance(p.get("label"), str) for p in points
    ):
        raise bad("points is not a list of {label: …}")
    if not isinstance(study["objective"], dict) or "kind" not in study["objective"]:
        raise bad("objective.kind is missing")
    if any("/" in p["label"] or p["label"] in (".", "..") for p in points):
        raise bad("a point label is a path")


def _leftovers_killed(path: Path) -> int:
    """How many processes a trial's program left behind that were killed (its events'
    ``leftovers_killed``: sweeps.job.reaper), over all its runs."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return 0
    total = 0
    for line in lines:
        if '"leftovers_killed"' not in line:
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and _count(event.get("processes")):
            total += event["processes"]
    return total


def shown_error(error: str, width: int = 400) -> str:
    """A failed trial's message as the table shows it: its start (what ended the trial)
    and its end (the last line of the script's output, where a traceback's error is)."""
    if len(error) <= width:
        return error
    head = width * 2 // 5
    return f"{error[:head]} … {error[-(width - head - 3) :]}"


def _record(path: Path) -> dict[str, Any]:
    """A JSON record of the run dir, or {} when it is missing, unreadable or not a mapping
    (one a process is writing, or a damaged one: the table shows what it can)."""
    record = read_json(path, lenient=True)
    return record if isinstance(record, dict) else {}


def _restarts(trial_dir: Path) -> list[dict[str, Any]]:
    """The spike restarts (train.on_spike) in a trial's events.jsonl, read as they stand
    (a running trial's too): spike step, step restarted from, batches skipped."""
    try:
        lines = (trial_dir / EVENTS_JSONL).read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == SPIKE_RESTART:
            keys = ("step", "from_step", "batches_skipped", "steps_redone", "trigger")
            out.append({k: event.get(k) for k in keys})
    return out


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def print_status(run_dir: str, as_json: bool) -> int:
    """Print the status table (or JSON)."""
    path = Path(run_dir)
    if not path.is_dir():
        raise UsageError(f"{run_dir}: no such run dir")
    status = study_status(path)
    if as_json:
        print(json.dumps(status, indent=2, sort_keys=True))
        return 0
    state = "finished" if status["finished"] else "in progress"
    if status["damaged"]:
        state = "damaged records, see below"
    print(f"{status['name']} ({state}) — objective {status['objective']['kind']}")
    running = status["orchestrators"]
    job = status["detached_job"]
    where = ", ".join(
        f"{o['host']} pid {o['pid']}"
        + (f" (SLURM job {o['slurm_job_id']})" if o.get("slurm_job_id") else "")
        for o in running
    )
    print(f"  orchestrators: {where or 'none running'}", end="")
    print(f"; detached job {job['job_id']}, log {job['log']}" if job else "")
    print(
        f"  {'point':32s} {'done':>7s} {'running':>7s} {'pruned':>6s} {'diverged':>8s} {'failed':>6s} {'best':>10s} {'steps':>9s} {'N params':>10s} {'D tokens':>12s}"
    )
    for r in status["points"]:
        done = r["complete"] + r["pruned"] + r["diverged"] + r["failed"]
        best = "—" if r["best"] is None or not math.isfinite(r["best"]) else f"{r['best']:.6g}"
        n, d = ("—" if v is None else str(v) for v in (r["n_params"], r["d_tokens"]))
        print(
            f"  {r['point']:32s} {done:>3d}/{r['budget']:<3d} {r['running']:7d} {r['pruned']:6d} "
            f"{r['diverged']:8d} {r['failed']:6d} {best:>10s} {r['steps']:9d} {n:>10s} {d:>12s}"
        )
    restarted = [r for r in status["points"] if r["restarts"]]
    for r in restarted:
        listed = ", ".join(
            f"trial {e['trial']}: spike at step {e['step']} → back to {e['from_step']}, "
            f"{e['batches_skipped']} batches skipped"
            for e in r["restarts"][:5]
        )
        more = f" (+{len(r['restarts']) - 5} more)" if len(r["restarts"]) > 5 else ""
        print(
            f"  {r['point']}: {len(r['restarts'])} spike restart(s), {r['steps_redone']} "
            f"steps redone (not in the steps column) — {listed}{more}"
        )
    stopped = sum(r[STOPPED] for r in status["points"])
    if stopped:
        print(f"  {stopped} trial(s) stopped at a checkpoint: the same `sweep run` resumes them")
    queued = sum(r[QUEUED] for r in status["points"])
    if queued:
        print(
            f"  {queued} trial(s) queued: their jobs could not be submitted; the same "
            "`sweep run` submits them"
        )
    for failure in status["failures"][:MAX_FAILURES]:
        print(f"  failed {failure['trial']}: {shown_error(failure['error'])}")
    if len(status["failures"]) > MAX_FAILURES:
        print(f"  … and {len(status['failures']) - MAX_FAILURES} more failed trial(s) (--json)")
    if status["leftovers_killed"]:
        killed = ", ".join(f"{t['trial']} ({t['processes']})" for t in status["leftovers_killed"])
        print(
            f"  processes left behind by the trainer command were killed after their trial "
            f"ended (events.jsonl: leftovers_killed): {killed}"
        )
    if status["damaged"]:
        print(
            f"  warning: {len(status['damaged'])} trial record(s) damaged (unreadable "
            f"trial.json, counted in no column): {', '.join(status['damaged'])}; the same "
            "`sweep run` rewrites a finished trial's record from the study's storage"
        )
    return 0


def command(args: argparse.Namespace) -> int:
    """`sweep status`."""
    return print_status(args.run_dir, args.json)
