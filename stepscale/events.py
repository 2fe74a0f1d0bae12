"""A run's ``events.jsonl``: where each run of a trial's job began and why it stopped,
across retries and requeues, and what the trainer had to work around on the way (a corrupt
checkpoint skipped). Written by the job and by the built-in trainer (so it lives with the
contracts both may import), read by `sweep status`, the report and the tests."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from stepscale.files import write_text_atomic
from stepscale.rundir import EVENTS_JSONL


def record_event(folder: Path, event: str, step: int, **info: Any) -> None:
    """Append an event (start, resume, stopped, checkpoint_skipped, …) to
    ``<folder>/events.jsonl``; a disk that refuses it loses only the event."""
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


def drop_events(folder: Path, names: tuple[str, ...], after_step: int) -> None:
    """Remove the events named ``names`` past ``after_step`` from ``<folder>/events.jsonl``
    (a run resumed from a checkpoint at ``after_step`` finds them again); other events and
    unreadable lines stay."""
    path = folder / EVENTS_JSONL
    try:
        lines = path.read_text().splitlines(keepends=True)
    except OSError:
        return
    kept = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            kept.append(line)
            continue
        if not (record.get("event") in names and int(record.get("step", 0)) > after_step):
            kept.append(line)
    if len(kept) != len(lines):
        with contextlib.suppress(OSError):
            write_text_atomic(path, "".join(kept))


def drop_restarts(folder: Path, name: str, kept: int) -> None:
    """Remove the ``name`` events numbered (``restart``) past ``kept`` from
    ``<folder>/events.jsonl``: a run resumed from a checkpoint that counts ``kept``
    restarts does the later ones again."""
    path = folder / EVENTS_JSONL
    try:
        lines = path.read_text().splitlines(keepends=True)
    except OSError:
        return
    kept_lines = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            kept_lines.append(line)
            continue
        if not (record.get("event") == name and int(record.get("restart", 0)) > kept):
            kept_lines.append(line)
    if len(kept_lines) != len(lines):
        with contextlib.suppress(OSError):
            write_text_atomic(path, "".join(kept_lines))


def _job_id() -> str | None:
    """This job's id as the orchestrator knows it: ``<array>_<index>`` for an array task."""
    env = os.environ
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return env.get("SLURM_JOB_ID") or env.get("SUBMITIT_LOCAL_JOB_ID")
