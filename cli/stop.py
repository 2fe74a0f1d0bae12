"""`sweep stop RUN_DIR`: end a study's orchestrators cleanly, wherever they run.

It writes a stop request into the run dir and waits until every live orchestrator has
ended: each one submits nothing more, lets its running trials checkpoint at their current
step and end, and exits; the trials stay open and the same `sweep run` resumes them. A
detached orchestrator whose SLURM job (or Ray job) has not reacted within ``--timeout`` is
cancelled; one whose job has not started yet is cancelled at once.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from stepscale.errors import UsageError
from stepscale.files import read_json
from stepscale.rundir import JOB_JSON, ORCHESTRATOR_DIR, STUDY_JSON
from stepscale.sweeps.launch.base import Launcher
from stepscale.sweeps.launch.slurm_launcher import scancel
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
    launcher = _job_launcher(job)
    queued = launcher is not None and launcher.orchestrator_pending(job)
    if not live and not queued:
        print(f"no orchestrator is running for {run_dir}; nothing to stop", file=sys.stderr)
        return 0
    request = orchestrators.request_stop(path)
    if queued:  # not started yet: it would never see the request
        launcher.cancel_orchestrator(job)
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
    left = orchestrators.live(path, heartbeat_timeout_s)
    stuck = [o for o in left if o.get("slurm_job_id")]
    for o in stuck:
        scancel(str(o["slurm_job_id"]))
    cancelled = ""
    if stuck:
        cancelled = f"; cancelled SLURM job(s) {', '.join(str(o['slurm_job_id']) for o in stuck)}"
    elif left and launcher is not None and job.get("launcher", "slurm") != "slurm":
        # A detached orchestrator of another launcher (a Ray job): its job is stopped, and
        # its stop signal stops its trials as Ctrl-C does.
        launcher.cancel_orchestrator(job)
        cancelled = f"; stopped {launcher.job_noun} {job['job_id']}"
    print(
        f"sweep: orchestrators still running after {timeout_s:.0f} s{cancelled}. "
        "Their trials resume with the same `sweep run`.",
        file=sys.stderr,
    )
    return 1


def _job_launcher(job: Any) -> type[Launcher] | None:
    """The launcher of a detached orchestrator's job record (SLURM's when it names none:
    a run dir from before other launchers could detach), or None without a record."""
    if not isinstance(job, dict) or "job_id" not in job:
        return None
    from stepscale.sweeps.launch.launchers import launcher_class

    try:
        return launcher_class(str(job.get("launcher", "slurm")))
    except UsageError:  # a launcher of one's own, not registered in this process
        return None


def command(args: argparse.Namespace) -> int:
    """`sweep stop`."""
    return stop_study(args.run_dir, args.timeout)
