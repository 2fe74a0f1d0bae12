"""What a trial's job receives: one picklable, secret-free record. Kept apart from the
code that builds it (`sweeps.study.trials`) so that a job imports little before its trainer runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stepscale.sweeps.study.storage import StorageSpec
from stepscale.sweeps.trainers.spec import TrainerSpec


@dataclass(frozen=True)
class TrialSpec:
    """Everything a job needs, picklable and free of secrets."""

    trial: str  # "<point label>/<n>"
    study_name: str  # Optuna study of the point
    trial_id: int  # Optuna's storage id
    number: int
    trial_dir: str
    config: dict[str, Any]
    storage: StorageSpec
    trainer: TrainerSpec
    seed: int
    target_loss: float | None  # the study's target (the job completes the status with it)
    pruner: dict[str, Any] | None  # PrunerConfig as a dict; None = never ask
    horizon: int  # the trial's horizon in steps
    attempt: int = 1
    env: dict[str, str] = field(default_factory=dict)  # e.g. CUDA_VISIBLE_DEVICES
    prune: bool = True  # False for confirm seeds: report intermediate values, never prune
    settings: dict[str, Any] = field(default_factory=dict)  # path → value the study set
    sizes: dict[str, Any] = field(default_factory=dict)  # the point's plan (trainer.PLAN_KEYS)
    loggers: tuple[str, ...] = ()  # metric loggers beside metrics.jsonl (stepscale.loggers)
    stop_at_target: bool = False  # the study ends a trial at target_loss
    # a command trainer's spike restarts (train.on_spike with train.spike_window/factor;
    # `sweeps.job.command_restarts`); None: no policy (the built-in reads its own config)
    on_spike: dict[str, Any] | None = None
    # (fraction of the horizon, least progress toward the target): sweeps.job.no_progress
    no_progress: tuple[float, float] | None = None
    # the pruner decides from the point's trials 0 … number − 1 − history_lag alone
    # (sampler.lag; sweeps.study.ordered)
    history_lag: int = 0
