"""`sweep stop RUN_DIR`: end a study's orchestrators cleanly, wherever they run.

It writes a stop request into the run dir and waits until every live orchestrator has
ended: each one submits nothing more, lets its running trials checkpoint at their current
step and end, and exits; the trials stay open and the same `sweep run` resumes them. A
detached orchestrator whose SLURM job has not reacted within ``--timeout`` is cancelled.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import time
from pathlib import Path

from stepscale.errors import UsageError
from stepscale.files import read_json
from stepscale.rundir import JOB_JSON, ORCHESTRATOR_DIR, STUDY_JSON
from stepscale.sweeps.run import orchestrators


def stop_study(run_dir: str, timeout_s: float, heartbeat_timeout_s: float = 120.0) -> int:
    """The `sweep stop` command; returns the exit code."""
    path = Path(run_dir)
    if not timeout_s >= 0:  # also NaN
        raise UsageError(f"--timeout: must be a number of seconds ≥ 0, got {timeout_s}")
    if not (path / STUDY_JSON).is_file():
        raise UsageError(f"{run_dir}: not a study run dir (no study.json)")
    live = orchestrators.live(path, heartbeat_timeout_s)
    job = read_json(path / ORCHESTRATOR_DIR / JOB_JSON, lenient=True)
    queued = job is not None and _slurm_job_pending(job["job_id"])
    if not live and not queued:
        print(f"no orchestrator is running for {run_dir}; nothing to stop", file=sys.stderr)
        return 0
    request = orchestrators.request_stop(path)
    if queued:  # not started yet: it would never see the request
        _scancel(job["job_id"])
    names = ", ".join(f"{o['host']}:{o['pid']}" for o in live) or "none running"
    print(f"stop requested for {run_dir} (orchestrators: {names})", file=sys.stderr)
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        remaining = [
            o
            for o in orchestrators.live(path, heartbeat_timeout_s)
            if float(o.get("started", 0)) <= request["time"]
        ]
        if not remaining:
            print(
                f"stopped; trials were checkpointed. Resume with the same `sweep run` "
                f"(run_dir={path})",
                file=sys.stderr,
            )
            return 0
        time.sleep(1.0)
    stuck = [o for o in orchestrators.live(path, heartbeat_timeout_s) if o.get("slurm_job_id")]
    for o in stuck:
        _scancel(str(o["slurm_job_id"]))
    print(
        f"sweep: orchestrators still running after {timeout_s:.0f} s"
        + (
            f"; cancelled SLURM job(s) {', '.join(str(o['slurm_job_id']) for o in stuck)}"
            if stuck
            else ""
        )
        + ". Their trials resume with the same `sweep run`.",
        file=sys.stderr,
    )
    return 1


def _slurm_job_pending(job_id: str) -> bool:
    try:
        out = subprocess.run(
            ["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return out.stdout.strip() in ("PENDING", "REQUEUED", "CONFIGURING")


def _scancel(job_id: str) -> None:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(["scancel", job_id], capture_output=True, timeout=30)


def command(args: argparse.Namespace) -> int:
    """`sweep stop`."""
    return stop_study(args.run_dir, args.timeout)
