"""One shared study of a real framework's unmodified script (tests/test_example_hf.py,
tests/test_example_lightning.py): run it, kill it with its trainers mid-trial once a trial
has written its own checkpoint, run the same command again to the end, and say which trials
the kill interrupted."""

from __future__ import annotations

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
    """``sweep run ARGS`` in ``cwd``, SIGKILLed with its process group as soon as a running
    trial ``has_checkpoint`` (its script's own) and a record, then run again to its end."""
    run_dir = Path(next(a.split("=", 1)[1] for a in args if a.startswith("run_dir=")))
    started = time.monotonic()

    def killable() -> bool:
        if proc.poll() is not None:
            out, err = output_of(proc)
            raise AssertionError(f"sweep ended before a trial checkpointed: {out}{err}")
        # a checkpoint and a record: the next run resumes the trial (the job passes the
        # script its resume_args), from the script's own checkpoint
        return any(
            has_checkpoint(t) and running(t) and bool(records(t))
            for t in run_dir.glob("trials/*/*")
        )

    proc = start_sweep(*args, cwd=cwd)
    try:
        wait_for(killable, timeout=300)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the orchestrator, its workers and trainers
        proc.wait()
    interrupted = [t for t in sorted(run_dir.glob("trials/*/*")) if running(t)]
    res = run_sweep(*args, cwd=cwd, timeout=600)
    assert res.returncode == 0, res.stderr
    return FrameworkStudy(run_dir, interrupted, res.stdout, time.monotonic() - started)


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
