"""A command trainer inside a trial's job: run the program in the trial folder, follow the
records it appends to ``metrics.jsonl`` (Optuna hears its eval losses, the heartbeat its
step), pass the pruner's verdict back through ``control.json``, forward stop signals.

The program gets the trial's config as ``config.yaml``/``config.json`` in its working
directory, the study's settings as Hydra-style ``key=value`` arguments (unless
``trainer.overrides: false``) and the ``STEPSCALE_*`` environment (`stepscale.trainer`).
A non-zero exit fails the attempt (the orchestrator retries it as the same trial); a
malformed record stops the program and fails the attempt, naming the line. Its stdout and
stderr are the job's, so they land in the trial's logs.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from stepscale.events import record_event
from stepscale.files import read_json, write_json_atomic
from stepscale.rundir import COMPLETE, CONTROL_JSON, METRICS_JSONL, PRUNED, STATUS_JSON
from stepscale.sweeps.errors import signal_name
from stepscale.sweeps.metrics_file import MalformedRecord, MetricsTail, last_step
from stepscale.trainer import FINAL_STATES, Action

POLL_S = 0.02  # how often the job looks for new records while the program runs
GRACE_S = 60.0  # how long a signalled program may take to save a checkpoint and exit


class CommandFailed(RuntimeError):
    """The trainer program exited with a non-zero code (or was killed)."""


def override_value(value: Any) -> str:
    """A value as Hydra's override grammar reads it (``0.001``, ``true``, ``null``,
    ``[1,2]``, a quoted string when it is not a plain word)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value) if not isinstance(value, float) or math.isfinite(value) else str(value)
    if isinstance(value, str):
        plain = value and all(c.isalnum() or c in "_-./:" for c in value)
        return value if plain else "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return json.dumps(value, separators=(",", ":"))


def command_line(spec: Any) -> list[str]:
    """The program's argv: the command, then ``path=value`` of every study setting."""
    argv = list(spec.trainer.command)
    if spec.trainer.overrides:
        argv += [f"{path}={override_value(v)}" for path, v in spec.settings.items()]
    return argv


def run_command(spec: Any, reporter: Any, stop: Any) -> dict[str, Any]:
    """Run the trainer program of ``spec`` (a `TrialSpec`) to its end; returns its status."""
    folder = Path(spec.trial_dir)
    control = folder / CONTROL_JSON
    for stale in (control, folder / STATUS_JSON):
        stale.unlink(missing_ok=True)
    resume = last_step(folder / METRICS_JSONL)
    reporter.heartbeat.step = resume
    reporter.loggers.begin(resume)  # the loggers follow the file from the resumed step
    record_event(folder, "start" if resume == 0 else "resume", resume)
    sys.stdout.flush()
    sys.stderr.flush()
    proc = subprocess.Popen(
        command_line(spec), cwd=folder, env=os.environ.copy(), stdout=sys.stdout, stderr=sys.stderr
    )
    tail = MetricsTail(folder / METRICS_JSONL)
    verdict = Action.CONTINUE

    def follow() -> None:
        nonlocal verdict
        for record in tail.read_new():
            action = reporter.observe(record["step"], record)
            if action != Action.CONTINUE and verdict == Action.CONTINUE:
                verdict = action
                write_json_atomic(control, {"action": action.value, "step": record["step"]})

    try:
        while True:
            exited = proc.poll() is not None
            follow()
            if exited:
                break
            time.sleep(POLL_S)
    except MalformedRecord:
        _end(proc, signal.SIGTERM)
        raise
    except KeyboardInterrupt:
        # A stop signal (or Ctrl-C, which the program got from the terminal itself): let
        # the program save its checkpoint, then stop as the job does — unless it finished
        # its run meanwhile: then the trial is finished.
        if stop.received is not None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(stop.received)
        _wait(proc, GRACE_S)
        ran_to_end = _status_written(folder) is not None or _at_end(folder, spec)
        if proc.returncode != 0 or not ran_to_end:
            raise
        follow()
    if proc.returncode != 0:
        raise CommandFailed(_exit_text(proc.returncode))
    return _status(folder, verdict, last_step(folder / METRICS_JSONL))


def _status_written(folder: Path) -> dict[str, Any] | None:
    """The program's own final status.json, if it wrote one."""
    written = read_json(folder / STATUS_JSON, lenient=True)
    return written if isinstance(written, dict) and written.get("state") in FINAL_STATES else None


def _at_end(folder: Path, spec: Any) -> bool:
    """Did the program report its horizon's last step (it ran to its end)?"""
    return last_step(folder / METRICS_JSONL) >= int(spec.horizon)


def _status(folder: Path, verdict: Action, steps_done: int) -> dict[str, Any]:
    """The program's own final status.json if it wrote one, else what the job saw."""
    written = _status_written(folder)
    if written is not None:
        return written
    state = PRUNED if verdict == Action.PRUNE else COMPLETE
    return {"state": state, "steps_done": steps_done}


def _exit_text(code: int) -> str:
    if code < 0:
        name = signal_name(-code)
        return f"the trainer command was killed by {name}"
    return f"the trainer command exited with code {code}"


def _wait(proc: subprocess.Popen[Any], timeout: float) -> None:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _end(proc: subprocess.Popen[Any], sig: int) -> None:
    """Stop the program: ``sig``, then SIGKILL if it does not exit within 10 s."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)
    _wait(proc, 10.0)
