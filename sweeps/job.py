"""What runs inside a trial's job: load the trial, train with a reporter that writes the
trial's files and talks to Optuna (intermediate eval losses by step, the pruner's
verdict), keep a heartbeat. The orchestrator, not the job, tells Optuna the result."""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from models.reporter import Action, JsonlReporter
from sweeps.heartbeat import JobHeartbeat
from sweeps.trials import TrialSpec, to_trainer_config


def _protect_sys_path() -> None:
    """Jobs start with the working directory first on sys.path (``python -m``); a user's own
    ``models/`` or ``analysis/`` there must not shadow ours, so drop it."""
    cwd = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", ".", cwd)]


class TrialReporter:
    """JsonlReporter + Optuna: eval losses become intermediate values; the pruner may stop."""

    def __init__(self, files: JsonlReporter, trial: Any | None, heartbeat: JobHeartbeat) -> None:
        self.files = files
        self.trial = trial
        self.heartbeat = heartbeat

    def begin(self, step: int) -> None:
        """Open the trial's metrics file (resuming after ``step``)."""
        self.files.begin(step)
        self.heartbeat.step = step

    def report(self, step: int, metrics: dict[str, Any]) -> Action:
        """Write the record; at evaluations report to Optuna and ask the pruner."""
        self.files.report(step, metrics)
        self.heartbeat.step = step
        loss = metrics.get("eval_loss")
        if self.trial is None or loss is None or step == 0 or loss != loss:
            return Action.CONTINUE
        self.trial.report(float(loss), step)
        return Action.PRUNE if self.trial.should_prune() else Action.CONTINUE

    def finish(self, status: dict[str, Any]) -> None:
        """Write the final status."""
        self.files.finish(status)


def _optuna_trial(spec: TrialSpec) -> Any | None:
    if spec.pruner is None:
        return None
    import optuna

    from sweeps.samplers import make_pruner
    from sweeps.schema import PrunerConfig
    from sweeps.storage import open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(
        study_name=spec.study_name,
        storage=open_storage(spec.storage),
        pruner=make_pruner(PrunerConfig(**spec.pruner), horizon=spec.horizon),
    )
    return optuna.trial.Trial(study, spec.trial_id)


def run_trial(spec: TrialSpec) -> dict[str, Any]:
    """Train one trial to its end and return the trainer's final status."""
    _protect_sys_path()
    if threading.current_thread() is threading.main_thread():
        # The local launcher starts jobs with SIGINT ignored (for its controller's sake);
        # the trial itself must stop cleanly on Ctrl-C.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.update(spec.env)
    folder = Path(spec.trial_dir)
    cfg = to_trainer_config(spec.config)
    module, _, function = spec.trainer.partition(":")
    trainer = getattr(importlib.import_module(module), function)
    with JobHeartbeat(folder) as heartbeat:
        reporter = TrialReporter(JsonlReporter(folder), _optuna_trial(spec), heartbeat)
        return trainer(cfg, reporter, run_dir=folder)
