"""One shared study of a real framework's unmodified script (tests/test_example_hf.py,
tests/test_example_lightning.py): run it, kill it with its trainers mid-trial once a trial
has written its own checkpoint, run the same command again to the end, and say which trials
the kill interrupted."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers import output_of, read_jsonl, run_sweep, start_sweep, trials_of, wait_for

from stepscale import rundir
from stepscale.files import read_json


@dataclass
class FrameworkStudy:
    """A finished study and what happened to it."""

    run_dir: Path
    interrupted: list[Path]  # trial folders running (with a checkpoint) when it was killed
    answer: str  # the second `sweep run`'s stdout (its answer)
    seconds: float  # wall time of both runs


def run_killed_and_resumed(
    args: list[str], cwd: Path, has_checkpoint: Callable[[Path], bool]
) -> FrameworkStudy:
    """``sweep run ARGS`` in ``cwd``, SIGKILLed with its process group and its trainers as
    soon as a running trial ``has_checkpoint`` (its script's own) and a record, then run
    again to its end. The check that decides the kill is made with every process of the
    study stopped (SIGSTOP), so what it saw is what the kill leaves: a trainer cannot
    write a newer checkpoint between the two."""
    run_dir = Path(next(a.split("=", 1)[1] for a in args if a.startswith("run_dir=")))
    started = time.monotonic()

    def ready() -> bool:
        # a checkpoint and a record: the next run resumes the trial (the job passes the
        # script its resume_args), from the script's own checkpoint
        return any(
            has_checkpoint(t) and running(t) and bool(records(t))
            for t in run_dir.glob("trials/*/*")
        )

    frozen: list[int] = []

    def killable() -> bool:
        if proc.poll() is not None:
            out, err = output_of(proc)
            raise AssertionError(f"sweep ended before a trial checkpointed: {out}{err}")
        if not ready():
            return False
        frozen[:] = signal_tree(proc.pid, signal.SIGSTOP)
        if ready():
            return True
        signal_each(frozen, signal.SIGCONT)
        return False

    proc = start_sweep(*args, cwd=cwd)
    try:
        wait_for(killable, timeout=300)
    finally:
        # the orchestrator, its workers and trainers (each trainer in a group of its own)
        os.killpg(proc.pid, signal.SIGKILL)
        signal_each([*frozen, *descendants(proc.pid)], signal.SIGKILL)
        proc.wait()
    interrupted = [t for t in sorted(run_dir.glob("trials/*/*")) if running(t)]
    res = run_sweep(*args, cwd=cwd, timeout=600)
    assert res.returncode == 0, res.stderr
    return FrameworkStudy(run_dir, interrupted, res.stdout, time.monotonic() - started)


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (children, theirs, …), from /proc."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def signal_tree(pid: int, sig: signal.Signals) -> list[int]:
    """Send ``sig`` to ``pid`` and every process below it, parents first, again until no
    new one appears (a child forked meanwhile); the processes signalled."""
    sent: list[int] = []
    while new := [p for p in [pid, *descendants(pid)] if p not in sent]:
        signal_each(new, sig)
        sent += new
    return sent


def signal_each(pids: list[int], sig: signal.Signals) -> None:
    """Send ``sig`` to each of ``pids`` that still exists."""
    for p in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, sig)


def running(trial: Path) -> bool:
    """Whether the trial's job is training (its status.json says so while it runs)."""
    return (read_json(trial / rundir.STATUS_JSON, lenient=True) or {}).get("state") == "running"


def records(trial: Path) -> list[dict[str, Any]]:
    """The trial's metrics.jsonl."""
    return read_jsonl(trial / rundir.METRICS_JSONL)


def folders(run_dir: Path, state: str) -> list[Path]:
    """The trial folders whose trial.json has ``state``."""
    return [
        run_dir / "trials" / label / str(r["number"])
        for label, rs in trials_of(run_dir).items()
        for r in rs
        if r["state"] == state
    ]


def status(trial: Path) -> dict[str, Any]:
    """The trial's status.json."""
    return read_json(trial / rundir.STATUS_JSON) or {}


def trial_record(trial: Path) -> dict[str, Any]:
    """The trial's trial.json."""
    return json.loads((trial / rundir.TRIAL_JSON).read_text())


def logs(trial: Path, suffix: str) -> str:
    """The text of the trial's job logs (``out`` or ``err``)."""
    return "".join(p.read_text() for p in (trial / rundir.LOGS_DIR).glob(f"*.{suffix}"))
