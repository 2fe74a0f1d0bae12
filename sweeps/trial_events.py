"""A trial's ``events.jsonl``: where each run of its job began and why it stopped, across
retries and requeues (written by the job, read by `sweep status` and the tests)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from stepscale.rundir import EVENTS_JSONL


def record_event(folder: Path, event: str, step: int, **info: Any) -> None:
    """Append a job event (start, resume, signal) to ``<trial>/events.jsonl``: where each
    run of the job began and why it stopped, across retries and requeues."""
    record = {
        "event": event,
        "step": step,
        "time": time.time(),
        "host": socket.gethostname(),
        "job_id": _job_id(),
        **info,
    }
    with contextlib.suppress(OSError), open(folder / EVENTS_JSONL, "a") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")


def _job_id() -> str | None:
    """This job's id as the orchestrator knows it: ``<array>_<index>`` for an array task."""
    env = os.environ
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return env.get("SLURM_JOB_ID") or env.get("SUBMITIT_LOCAL_JOB_ID")
