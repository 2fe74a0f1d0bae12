"""The built-in trainer as the orchestrator sees it: the one module of `stepscale.sweeps`
that imports `stepscale.models` (a test enforces it).

The built-in trainer is the default implementation of the trainer interface
(`stepscale.trainer`): its config is the study's ``model``/``data``/``optimizer``/
``schedule``/``train`` sections (`TrainerConfig`), its ``validate`` is the planner
(`stepscale.models.plan.prepare`) and it runs as `stepscale.models.train.train`. Only the
config dataclasses are imported at module level; JAX is imported when training or
planning starts, so a command trainer's job never loads it.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

from stepscale.models.config import DataConfig, TrainConfig, TrainerConfig
from stepscale.rundir import EXAMPLES, SEQUENCES
from stepscale.trainer import PLAN_KEYS, Reporter

__all__ = [
    "SECTIONS",
    "DataConfig",
    "RejectedConfig",
    "TrainConfig",
    "TrainerConfig",
    "batch_unit",
    "branch_point",
    "configure_compile_cache",
    "plan_run",
    "run",
    "spike_rule",
    "to_trainer_config",
    "train_config",
    "trainer_choices",
    "trainer_fields",
    "validate",
]

# The study config's sections that are the built-in trainer's config.
SECTIONS = ("model", "data", "optimizer", "schedule", "train")


class RejectedConfig(ValueError):
    """The built-in trainer cannot train this config (its message says why)."""


def trainer_fields() -> dict[str, str]:
    """Dotted key → the type annotation (text, e.g. ``int``, ``float | None``) of every
    leaf field of the built-in trainer's config, in declaration order."""
    out: dict[str, str] = {}

    def walk(obj: Any, prefix: str) -> None:
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                walk(value, f"{prefix}{f.name}.")
            else:
                out[f"{prefix}{f.name}"] = str(f.type)

    walk(TrainerConfig(), "")
    return out


def trainer_choices() -> dict[str, tuple[str, ...]]:
    """Dotted key → the names the built-in trainer accepts there (models, model sizes,
    data sources, optimizers, schedules). Imports JAX (through the optimizers)."""
    from stepscale.models.data import source_names
    from stepscale.models.data.tokenize import TOKENIZERS
    from stepscale.models.nets.presets import MODELS, PRESETS
    from stepscale.models.optim import OPTIMIZERS
    from stepscale.models.schedules import SCHEDULES

    sizes = tuple(dict.fromkeys(size for model in MODELS for size in PRESETS.get(model, {})))
    return {
        "model.name": tuple(MODELS),
        "model.size": sizes,
        "data.name": source_names(),
        "data.tokenizer": tuple(TOKENIZERS),
        "optimizer.name": tuple(OPTIMIZERS),
        "schedule.name": tuple(SCHEDULES),
    }


def to_trainer_config(tree: dict[str, Any]) -> TrainerConfig:
    """A typed trainer config from a plain dict (as a study builds it for a trial)."""
    from omegaconf import OmegaConf

    merged = OmegaConf.merge(_schema(), tree)
    return OmegaConf.to_object(merged)  # type: ignore[return-value]


@functools.cache
def _schema() -> Any:
    """The trainer config's OmegaConf schema, built once (it is most of a conversion's
    cost; `OmegaConf.merge` copies it)."""
    from omegaconf import OmegaConf

    return OmegaConf.structured(TrainerConfig)


def plan_run(cfg: TrainerConfig, *, here: bool = True) -> Any:
    """The built-in trainer's plan of a run (`stepscale.models.plan.RunPlan`); a config it
    cannot train → `RejectedConfig`. ``here``: the run will use this machine's devices (so
    it must fit in their memory)."""
    from stepscale.models.errors import ConfigError
    from stepscale.models.plan import prepare

    try:
        return prepare(cfg, check_memory=here)
    except ConfigError as exc:
        raise RejectedConfig(str(exc)) from None


def batch_unit(data: DataConfig) -> str:
    """What a batch of the built-in trainer counts with ``data``: ``sequences`` when its
    source's examples are sequences (the source's plug-in says), else ``examples``. An
    unknown source → `stepscale.models.errors.ConfigError` (a `UsageError`) naming the
    registered ones. Imports JAX (through the sources)."""
    from stepscale.models.data import source_plugin

    return SEQUENCES if source_plugin(data.name).sequences else EXAMPLES


def validate(tree: dict[str, Any], *, here: bool = True) -> dict[str, Any]:
    """The trainer interface's ``validate`` of the built-in trainer: the point's sizes
    (`stepscale.trainer.PLAN_KEYS`), or `RejectedConfig`/another error naming the problem.
    ``here``: the trials run on this machine's devices; else (SLURM) their devices are the
    job's, which checks ``train.devices`` against what it gets (so it is not checked here)."""
    if not here:
        tree = {**tree, "train": {**tree["train"], "devices": None}}
    from stepscale.models.plan import describe

    sizes = describe(plan_run(to_trainer_config(tree), here=here))
    return {key: sizes[key] for key in PLAN_KEYS}


def branch_point(tree: dict[str, Any], step: int) -> dict[str, Any]:
    """What a run of the built-in trainer had done and was doing at ``step`` (`sweep
    branch`): ``batch`` (the global batch of that step), ``examples`` (consumed before it),
    ``lr`` (the peak LR with a ramp stage's coupling), ``warmup_steps``, ``horizon_steps``,
    ``schedule`` and ``optimizer`` (names) and ``tokens_per_example``. A config it cannot
    train → `RejectedConfig`."""
    from stepscale.models.ramp import lr_scale

    plan = plan_run(to_trainer_config(tree), here=False)
    cfg = plan.cfg
    schedule = plan.schedule
    batch = schedule.batch_at(step) if schedule is not None else plan.examples_per_step
    coupling = lr_scale(cfg.data.rampup.lr_coupling, batch, cfg.data.global_batch)
    return {
        "batch": batch,
        "examples": plan.examples_before(step),
        "lr": cfg.optimizer.lr * coupling,
        "warmup_steps": plan.warmup,
        "horizon_steps": plan.horizon,
        "schedule": cfg.schedule.name,
        "optimizer": cfg.optimizer.name,
        "tokens_per_example": plan.info.tokens_per_example,
    }


def run(tree: dict[str, Any], reporter: Reporter, trial_dir: Path) -> dict[str, Any]:
    """Train one trial of the built-in trainer from its config tree; returns its status."""
    return train_config(to_trainer_config(tree), reporter, trial_dir)


def train_config(
    cfg: TrainerConfig, reporter: Reporter, run_dir: Path, **kwargs: Any
) -> dict[str, Any]:
    """Train one run of the built-in trainer (`stepscale.models.train.train`)."""
    from stepscale.models.train import train

    return train(cfg, reporter, run_dir=run_dir, **kwargs)


def configure_compile_cache(directory: str | None) -> None:
    """Point JAX's persistent compilation cache at ``directory`` (None: the default); a
    directory that cannot be made → `RejectedConfig`."""
    from stepscale.models.errors import ConfigError
    from stepscale.models.train import configure_compile_cache as configure

    try:
        configure(directory)
    except ConfigError as exc:
        raise RejectedConfig(str(exc)) from None


def spike_rule() -> tuple[Any, Any, Any, str]:
    """The built-in trainer's spike rule and restart record, which a command trainer's job
    applies to the losses its program prints (`sweeps.job.command_restarts`):
    (`SpikeDetector`, `Restarts`, `restart_point`, the non-finite trigger's name). Imported
    when asked, so that what only reads configs imports no trainer code."""
    from stepscale.models.restarts import NON_FINITE, Restarts, restart_point
    from stepscale.models.spikes import SpikeDetector

    return SpikeDetector, Restarts, restart_point, NON_FINITE
