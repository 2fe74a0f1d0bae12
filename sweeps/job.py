"""What runs inside a trial's job: load the trial, train with a reporter that writes the
trial's files and talks to Optuna (intermediate eval losses by step, the pruner's
verdict), keep a heartbeat. The orchestrator, not the job, tells Optuna the result.

Stopping signals (SLURM's SIGTERM on ``scancel``, ``scontrol requeue`` or preemption, and
submitit's USR2 before a time limit) never cut a trial mid-step: they are held like Ctrl-C
until the trainer's next safe point, where it saves a checkpoint at the current step.
Then, for USR2, submitit's own handler requeues the job (`TrialJob` is checkpointable: the
requeued job is the same call, which resumes from that checkpoint); for SIGTERM the job
exits without a result, so SLURM's verdict stands (requeued, or cancelled → failed).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import submitit

from stepscale.models.reporter import Action, JsonlReporter
from stepscale.rundir import EVENTS_JSONL
from stepscale.sweeps.heartbeat import JobHeartbeat
from stepscale.sweeps.schema import canonical_trainer
from stepscale.sweeps.trials import TrialSpec, to_trainer_config


def trainer_function(path: str) -> Any:
    """The function a trainer path ``module:function`` names (old built-in paths included)."""
    module, _, function = canonical_trainer(path).partition(":")
    return getattr(importlib.import_module(module), function)


class TrialReporter:
    """JsonlReporter + Optuna: eval losses become intermediate values; the pruner may stop."""

    def __init__(
        self,
        files: JsonlReporter,
        trial: Any | None,
        heartbeat: JobHeartbeat,
        prune: bool = True,
    ) -> None:
        self.files = files
        self.trial = trial
        self.heartbeat = heartbeat
        self.prune = prune

    def begin(self, step: int) -> None:
        """Open the trial's metrics file (resuming after ``step``)."""
        self.files.begin(step)
        self.heartbeat.step = step
        record_event(self.heartbeat.path.parent, "start" if step == 0 else "resume", step)

    def report(self, step: int, metrics: dict[str, Any]) -> Action:
        """Write the record; at evaluations report to Optuna and ask the pruner."""
        self.files.report(step, metrics)
        self.heartbeat.step = step
        loss = metrics.get("eval_loss")
        if self.trial is None or loss is None or step == 0 or loss != loss:
            return Action.CONTINUE
        self.trial.report(float(loss), step)
        return Action.PRUNE if self.prune and self.trial.should_prune() else Action.CONTINUE

    def finish(self, status: dict[str, Any]) -> None:
        """Write the final status."""
        self.files.finish(status)


def _optuna_trial(spec: TrialSpec) -> Any | None:
    if spec.pruner is None:
        return None
    import optuna

    from stepscale.sweeps.samplers import make_pruner
    from stepscale.sweeps.schema import PrunerConfig
    from stepscale.sweeps.storage import open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(
        study_name=spec.study_name,
        storage=open_storage(spec.storage),
        pruner=make_pruner(PrunerConfig(**spec.pruner), horizon=spec.horizon),
    )
    return optuna.trial.Trial(study, spec.trial_id)


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


class StopSignals:
    """Turns SIGTERM and submitit's preemption signal into a held Ctrl-C (see the module
    docstring); remembers which one came. Only in a submitit job's main thread."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.previous: dict[int, Any] = {}
        executor = os.environ.get("SUBMITIT_EXECUTOR", "")
        self.active = (
            executor in ("slurm", "local") and threading.current_thread() is threading.main_thread()
        )
        self.preempt = submitit.JobEnvironment._usr_sig() if self.active else None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None:  # SLURM may signal twice; the first one is in hand
            return
        self.received = signum
        held = signal.getsignal(signal.SIGINT)  # the trainer's DeferredInterrupt, if training
        if callable(held) and held is not signal.default_int_handler:
            held(signal.SIGINT, frame)
        else:  # not training yet (or any more): nothing to save, stop now
            raise KeyboardInterrupt

    def __enter__(self) -> StopSignals:
        if self.active:
            for sig in (signal.SIGTERM, self.preempt):
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def finish_stop(self) -> None:
        """After the trainer stopped at a safe point: requeue (preemption signal, through
        submitit's handler, which calls `TrialJob.checkpoint`) or exit without a result."""
        handler = self.previous.get(self.preempt) if self.preempt is not None else None
        if self.received == self.preempt and callable(handler):
            handler(self.received, None)  # checkpoints, requeues and exits
        raise SystemExit(128 + int(self.received or 0))


def run_trial(spec: TrialSpec) -> dict[str, Any]:
    """Train one trial to its end and return the trainer's final status."""
    if threading.current_thread() is threading.main_thread():
        # The local launcher starts jobs with SIGINT ignored (for its controller's sake);
        # the trial itself must stop cleanly on Ctrl-C.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.update(spec.env)
    folder = Path(spec.trial_dir)
    cfg = to_trainer_config(spec.config)
    trainer = trainer_function(spec.trainer)
    # In a trial of several tasks (jax.distributed) every task trains, task 0 reports.
    leader = (
        int(os.environ.get("SLURM_PROCID", os.environ.get("SUBMITIT_LOCAL_GLOBALID", "0"))) == 0
    )
    with StopSignals() as stop, JobHeartbeat(folder, active=leader) as heartbeat:
        reporter = TrialReporter(
            JsonlReporter(folder), _optuna_trial(spec), heartbeat, prune=spec.prune
        )
        try:
            return trainer(cfg, reporter, run_dir=folder)
        except KeyboardInterrupt:
            if stop.received is None:
                raise
            if leader:
                name = signal.Signals(stop.received).name
                record_event(folder, "stopped", heartbeat.step, signal=name)
    stop.finish_stop()
    raise AssertionError("unreachable")


class TrialJob(submitit.helpers.Checkpointable):
    """The callable a launcher submits for a trial. Checkpointable: on preemption or time
    limit submitit requeues the same call, which resumes from the trial's checkpoint."""

    def __call__(self, spec: TrialSpec) -> dict[str, Any]:
        return run_trial(spec)
