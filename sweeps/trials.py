"""Trial configs, the picklable job spec, and the trial folder's files.

A trial's trainer config is the study's trainer config with the point's scientific
values, the sampled nuisance values, the fixed values, the budget's horizon and the
objective's target written at their paths.
"""

from __future__ import annotations

import copy
import datetime as dt
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from stepscale.files import write_json_atomic, write_text_atomic
from stepscale.models.config import TrainerConfig
from stepscale.rundir import CONFIG_YAML, TRIAL_JSON
from stepscale.sweeps.schema import StudyConfig
from stepscale.sweeps.space import Point, SearchSpace
from stepscale.sweeps.storage import StorageSpec

TRAINER_SECTIONS = ("model", "data", "optimizer", "schedule", "train")


def now_iso() -> str:
    """UTC time in ISO 8601, seconds precision."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_path(tree: dict[str, Any], path: str, value: Any) -> None:
    """``tree[a][b] = value`` for ``path == "a.b"``."""
    *parents, leaf = path.split(".")
    node = tree
    for key in parents:
        node = node[key]
    node[leaf] = value


def trainer_base(study: StudyConfig) -> dict[str, Any]:
    """The trainer sections of the study config as a plain dict."""
    return {k: asdict(getattr(study, k)) for k in TRAINER_SECTIONS}


def trial_config(
    study: StudyConfig,
    space: SearchSpace,
    point: Point,
    nuisance: dict[str, Any],
    seed: int,
    run_dir: Path | None,
) -> dict[str, Any]:
    """The trainer config (plain dict) of one trial."""
    tree = copy.deepcopy(trainer_base(study))
    for alias, value in point.values.items():
        set_path(tree, space.scientific_paths[alias], value)
    paths = space.paths(point.label)
    for alias, value in nuisance.items():
        set_path(tree, paths[alias], value)
    for path, value in space.fixed.values():
        set_path(tree, path, value)
    train = tree["train"]
    b = study.budget
    if b.max_steps is not None or b.max_tokens is not None or b.max_examples is not None:
        train["max_steps"], train["max_tokens"], train["max_examples"] = (
            b.max_steps,
            b.max_tokens,
            b.max_examples,
        )
    if study.objective.target_loss is not None:
        train["target_loss"] = study.objective.target_loss
    train["stop_at_target"] = bool(study.objective.stop_at_target)
    train["seed"] = seed
    train["resume"] = True
    tree["name"] = f"{study.name}/{point.label}"
    tree["run_dir"] = str(run_dir) if run_dir is not None else None
    return tree


def to_trainer_config(tree: dict[str, Any]) -> TrainerConfig:
    """A typed trainer config from a plain dict (as built by `trial_config`)."""
    merged = OmegaConf.merge(OmegaConf.structured(TrainerConfig), tree)
    return OmegaConf.to_object(merged)  # type: ignore[return-value]


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
    trainer: str  # "module:function"
    pruner: dict[str, Any] | None  # PrunerConfig as a dict; None = never ask
    horizon: int  # the trial's horizon in steps
    attempt: int = 1
    env: dict[str, str] = field(default_factory=dict)  # e.g. CUDA_VISIBLE_DEVICES
    prune: bool = True  # False for confirm seeds: report intermediate values, never prune


def write_trial_json(folder: Path, record: dict[str, Any]) -> None:
    """Write ``trial.json`` atomically."""
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(folder / TRIAL_JSON, record)


def write_config_yaml(folder: Path, tree: dict[str, Any]) -> None:
    """The trial's resolved trainer config as YAML."""
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / CONFIG_YAML, OmegaConf.to_yaml(OmegaConf.create(tree)))
