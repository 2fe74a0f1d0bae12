"""Liveness of trials: who is working on a trial, and is it still alive?

Two heartbeat files live in a trial folder: ``heartbeat.job`` (written by the job while it
trains, with its current step) and ``heartbeat.orch`` (written by the orchestrator that
owns the trial, while it waits for the job, e.g. in a SLURM queue). A trial is alive while
either file is fresher than the timeout — except that a file written on this host by a
process that no longer exists is dead at once, so a resumed study re-runs the trials of
a killed orchestrator without waiting out the timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from stepscale.files import read_json, write_text_atomic
from stepscale.rundir import JOB_HEARTBEAT, ORCH_HEARTBEAT

HOST = socket.gethostname()


def write(path: Path, **info: Any) -> None:
    """Refresh one heartbeat file (atomic replace)."""
    record = {"time": time.time(), "host": HOST, "pid": os.getpid(), **info}
    with contextlib.suppress(OSError):  # a heartbeat is advisory; a full disk is reported elsewhere
        write_text_atomic(path, json.dumps(record))


def read(path: Path) -> dict[str, Any] | None:
    """A heartbeat record, or None (missing, or being written by another process)."""
    return read_json(path, lenient=True)


def _pid_alive(pid: int) -> bool:
    """Does ``pid`` run on this host? A zombie does not: a killed orchestrator's job whose
    new parent never reaps it (a subreaper that does not wait, as a long-lived process that
    once ran a command trainer's job in-process is) stays a zombie, and ``kill(pid, 0)``
    still succeeds on it; counting it alive held its trial for the whole timeout."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc (not Linux): kill(pid, 0) is all there is
    return text[text.rfind(")") + 2 :][:1] not in ("Z", "X")


def fresh(record: dict[str, Any] | None, timeout_s: float) -> bool:
    """Is this heartbeat evidence of a live writer?"""
    if record is None or time.time() - record.get("time", 0) > timeout_s:
        return False
    return not (record.get("host") == HOST and not _pid_alive(int(record.get("pid", -1))))


def trial_alive(folder: Path, timeout_s: float) -> bool:
    """Is anyone (job or owning orchestrator) still working on the trial in ``folder``?"""
    return fresh(read(folder / JOB_HEARTBEAT), timeout_s) or fresh(
        read(folder / ORCH_HEARTBEAT), timeout_s
    )


def hold(folder: Path, owner: str) -> None:
    """Refresh the orchestrator's heartbeat of the trial in ``folder``: ``owner`` holds it,
    and other orchestrators keep off it."""
    write(folder / ORCH_HEARTBEAT, owner=owner)


def let_go(folder: Path) -> None:
    """Drop the orchestrator's heartbeat of the trial in ``folder``: nobody holds it."""
    (folder / ORCH_HEARTBEAT).unlink(missing_ok=True)


def owner_alive(folder: Path, timeout_s: float) -> bool:
    """Is the orchestrator that holds the trial in ``folder`` alive (and waiting for it)?"""
    return fresh(read(folder / ORCH_HEARTBEAT), timeout_s)


def job_step(folder: Path) -> int:
    """The step the job of the trial in ``folder`` last reported (0 if none)."""
    beat = read(folder / JOB_HEARTBEAT)
    return int(beat.get("step", 0)) if beat else 0


class JobHeartbeat:
    """A daemon thread refreshing ``heartbeat.job`` every ``every_s`` with the current step."""

    def __init__(self, folder: Path, every_s: float = 5.0, active: bool = True) -> None:
        self.path = folder / JOB_HEARTBEAT
        self.every_s = every_s
        self.active = active  # False in the other tasks of a multi-process trial
        self.step = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            write(self.path, step=self.step)
            self._stop.wait(self.every_s)

    def __enter__(self) -> JobHeartbeat:
        if self.active:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.active:
            return
        self._stop.set()
        self._thread.join(timeout=2)
        with contextlib.suppress(OSError):
            self.path.unlink()
