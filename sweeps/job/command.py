"""A command trainer inside a trial's job: run the program (in the trial folder, or
``trainer.cwd``), follow its records (the ``metrics.jsonl`` it appends to, or the lines of
its own output that ``trainer.metrics`` reads: `sweeps.trainers.output_sources`); Optuna hears its
eval losses, the heartbeat its step; pass the pruner's verdict back (``control.json``, and
for a script that prints its metrics, ``trainer.stop_signal``, then SIGKILL after
``trainer.stop_grace_s``); forward stop signals.

The program gets the trial's config as ``config.yaml``/``config.json`` in the trial folder,
the study's settings as arguments in its own style (``trainer.args``: `sweeps.trainers.arg_styles`)
and the ``STEPSCALE_*`` environment (`stepscale.trainer`). A non-zero exit fails the attempt
(the orchestrator retries it as the same trial) unless the trial was pruned; so does a
malformed metrics.jsonl line, and a run whose output gave no record at all. Its output
lands in the trial's logs whole.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from stepscale.errors import signal_name
from stepscale.events import record_event
from stepscale.files import read_json, write_json_atomic
from stepscale.reporters import finite_or_none
from stepscale.rundir import COMPLETE, CONTROL_JSON, METRICS_JSONL, PRUNED, STATUS_JSON
from stepscale.sweeps.trainers.arg_styles import fill, flat_config, hydra_value
from stepscale.sweeps.trainers.metrics_file import MalformedRecord, last_step
from stepscale.sweeps.trainers.output_sources import (
    FileSource,
    JsonlSource,
    PipeSource,
    final_records,
)
from stepscale.trainer import FINAL_STATES, Action

POLL_S = 0.02  # how often the job looks for new records while the program runs


class CommandFailed(RuntimeError):
    """The trainer program exited with a non-zero code (or was killed), or gave no record."""


def override_value(value: Any) -> str:
    """A value as Hydra's override grammar reads it (`sweeps.trainers.arg_styles.hydra_value`)."""
    return hydra_value(value)


def placeholder_values(spec: Any) -> dict[str, Any]:
    """What the placeholders of a trial's command name: the trial's config by dotted key,
    ``trial_dir``, ``seed``, ``max_steps`` and ``python``."""
    from stepscale.sweeps.trainers.trial_paths import placeholder_trial_dir

    values = flat_config(spec.config)
    values |= {
        "trial_dir": placeholder_trial_dir(spec.trial_dir),  # a path without '=' (aliases/)
        "seed": spec.seed,
        "max_steps": int(spec.horizon),
        "python": sys.executable,
    }
    return values


def command_line(spec: Any, resuming: bool = False) -> list[str]:
    """The program's argv: the command (placeholders filled), the study's settings in the
    script's argument style, and ``trainer.resume_args`` when ``resuming``."""
    trainer = spec.trainer
    values = placeholder_values(spec)
    booleans = trainer.args.booleans
    argv = [fill(a, values, booleans) for a in trainer.command]
    argv += trainer.args.render(spec.settings, values)
    if resuming:
        argv += [fill(a, values, booleans) for a in trainer.resume_args]
    return argv


def run_command(spec: Any, reporter: Any, stop: Any) -> dict[str, Any]:
    """Run the trainer program of ``spec`` (a `TrialSpec`) to its end; returns its status."""
    trainer = spec.trainer
    folder = Path(spec.trial_dir)
    control = folder / CONTROL_JSON
    for stale in (control, folder / STATUS_JSON):
        stale.unlink(missing_ok=True)
    parsed = trainer.metrics.parsed
    resume = last_step(folder / METRICS_JSONL)
    resuming = resume > 0 and (bool(trainer.resume_args) or not parsed)
    if parsed:
        # The job writes metrics.jsonl: kept up to the resumed step, or started afresh (a
        # script that cannot resume starts again from step 0 and its records replace these).
        reporter.begin(resume if resuming else 0)
    else:
        reporter.heartbeat.step = resume
        reporter.loggers.begin(resume)  # the loggers follow the file from the resumed step
        record_event(folder, "start" if resume == 0 else "resume", resume)
    sys.stdout.flush()
    sys.stderr.flush()
    where = trainer.metrics.source
    proc = subprocess.Popen(
        command_line(spec, resuming),
        cwd=trainer.cwd or folder,
        env=os.environ.copy(),
        stdout=subprocess.PIPE if where == "stdout" else sys.stdout,
        stderr=subprocess.PIPE if where == "stderr" else sys.stderr,
    )
    source = _source(spec, proc)
    verdict = Action.CONTINUE
    deadline: float | None = None  # when a signalled program is killed

    def follow(records: list[dict[str, Any]]) -> None:
        nonlocal verdict, deadline
        for record in records:
            if parsed:
                if verdict != Action.CONTINUE:
                    return  # what a pruned script prints while it stops is not its curve
                step = record["step"]
                metrics = {k: finite_or_none(v) for k, v in record.items() if k != "step"}
                action = reporter.report(step, metrics)
            else:
                action = reporter.observe(record["step"], record)
            if action != Action.CONTINUE and verdict == Action.CONTINUE:
                verdict = action
                write_json_atomic(control, {"action": action.value, "step": record["step"]})
                if parsed:  # the script does not read control.json: signal it
                    _signal(proc, trainer.stop_signal)
                    name = signal_name(trainer.stop_signal)
                    record_event(folder, f"{action.value}_signal", record["step"], signal=name)
                    deadline = time.monotonic() + trainer.stop_grace_s

    try:
        while True:
            exited = proc.poll() is not None
            if exited:
                follow(final_records(source))
                break
            follow(source.read_new())
            if deadline is not None and time.monotonic() > deadline:
                proc.kill()
            time.sleep(POLL_S)
    except MalformedRecord:
        _end(proc, signal.SIGTERM)
        raise
    except KeyboardInterrupt:
        # A stop signal (or Ctrl-C, which the program got from the terminal itself): let
        # the program save its checkpoint, then stop as the job does — unless it finished
        # its run meanwhile: then the trial is finished.
        if stop.received is not None:
            sig = trainer.stop_signal if stop.received == signal.SIGTERM else stop.received
            _signal(proc, sig)
        _wait(proc, trainer.stop_grace_s)
        ran_to_end = _status_written(folder) is not None or _at_end(folder, spec)
        if proc.returncode != 0 or not ran_to_end:
            raise
        follow(final_records(source))
    pruned = verdict == Action.PRUNE
    if pruned and parsed:
        text = _exit_text(proc.returncode) if proc.returncode else "the trainer command exited"
        print(f"stepscale: the trial was pruned; {text}", file=sys.stderr, flush=True)
    elif proc.returncode != 0:
        raise CommandFailed(_exit_text(proc.returncode) + _last_lines(source))
    elif parsed and source.stream.records == 0:
        raise CommandFailed(source.stream.no_record_message(source.where))
    return _status(folder, verdict, last_step(folder / METRICS_JSONL))


def _source(spec: Any, proc: subprocess.Popen[bytes]) -> Any:
    """Where the records of ``proc`` come from (`sweeps.trainers.output_sources`)."""
    metrics = spec.trainer.metrics
    folder = Path(spec.trial_dir)
    if not metrics.parsed:
        return JsonlSource(folder / METRICS_JSONL)
    if metrics.source == "stdout":
        return PipeSource(metrics, proc.stdout, sys.stdout.fileno(), "stdout")  # type: ignore[arg-type]
    if metrics.source == "stderr":
        return PipeSource(metrics, proc.stderr, sys.stderr.fileno(), "stderr")  # type: ignore[arg-type]
    path = Path(fill(metrics.source, placeholder_values(spec)))
    return FileSource(
        metrics, path if path.is_absolute() else Path(spec.trainer.cwd or folder) / path
    )


def _last_lines(source: Any) -> str:
    """The last lines of a parsed output, for a failure message ("" for metrics.jsonl)."""
    if not source.parsed or not source.stream.last_lines:
        return ""
    lines = "\n".join(f"    {line[:200]}" for line in source.stream.last_lines)
    return f"; the last lines of its {source.where}:\n{lines}"


def _signal(proc: subprocess.Popen[Any], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)


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
    _signal(proc, sig)
    _wait(proc, 10.0)
