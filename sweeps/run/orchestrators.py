"""Who is orchestrating a run dir, and asking them to stop.

Every running orchestrator keeps ``<run dir>/orchestrators/<id>.json`` fresh (host, pid,
SLURM job id when detached, heartbeat time) and removes it when it ends. ``sweep stop``
writes ``<run dir>/stop.json``; an orchestrator started before that request stops at its
next poll: it submits nothing more, its running trial jobs checkpoint and end, and the
trials stay open, so running the same `sweep run` again resumes them. An orchestrator
started after the request ignores it.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import time
from pathlib import Path
from typing import Any

from stepscale.files import read_json, write_json_atomic
from stepscale.rundir import ORCHESTRATORS_DIR, STOP_JSON
from stepscale.sweeps.job import heartbeat


def _folder(run_dir: Path) -> Path:
    return run_dir / ORCHESTRATORS_DIR


def register(run_dir: Path, owner: str, started: float) -> Path:
    """Write (or refresh) this orchestrator's record; returns its path."""
    path = _folder(run_dir) / f"{owner}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "owner": owner,
        "host": heartbeat.HOST,
        "pid": os.getpid(),
        "slurm_job_id": os.environ.get("STEPSCALE_ORCHESTRATOR_JOB"),
        "started": started,
        "time": time.time(),
    }
    write_json_atomic(path, record)
    return path


def unregister(run_dir: Path, owner: str) -> None:
    """Remove this orchestrator's record (it has ended)."""
    with contextlib.suppress(OSError):
        (_folder(run_dir) / f"{owner}.json").unlink()


def remove_stale(run_dir: Path, timeout_s: float) -> int:
    """Remove the records of orchestrators that died without removing their own (killed:
    on this host their process is gone, elsewhere their heartbeat is older than
    ``timeout_s``); returns how many."""
    removed = 0
    for path in sorted(_folder(run_dir).glob("*.json")):
        record = read_json(path, lenient=True)
        if record is None and time.time() - _mtime(path) < timeout_s:
            continue  # being written right now
        if record is None or not heartbeat.fresh(record, timeout_s):
            with contextlib.suppress(OSError):
                path.unlink()
                removed += 1
    return removed


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def live(run_dir: Path, timeout_s: float) -> list[dict[str, Any]]:
    """The orchestrators of ``run_dir`` whose records are fresh (and, on this host, whose
    process exists)."""
    out = []
    for path in sorted(_folder(run_dir).glob("*.json")):
        record = read_json(path, lenient=True)
        if record is not None and heartbeat.fresh(record, timeout_s):
            out.append(record)
    return out


def request_stop(run_dir: Path) -> dict[str, Any]:
    """Ask every orchestrator running now to stop; returns the request."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "?"
    request = {"time": time.time(), "by": f"{user}@{heartbeat.HOST}"}
    write_json_atomic(run_dir / STOP_JSON, request)
    return request


def stop_requested(run_dir: Path, started: float) -> bool:
    """Has a stop been asked for since an orchestrator started at ``started``?"""
    request = read_json(run_dir / STOP_JSON, lenient=True)
    return request is not None and float(request.get("time", 0)) >= started
