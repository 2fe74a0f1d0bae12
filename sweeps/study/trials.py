"""Trial configs and the trial folder's files (the job's spec: `sweeps.job.spec`).

A trial's trainer config is the trainer's config tree (the built-in trainer's sections of
the study config, or ``trainer.config`` of a user's trainer) with the point's scientific
values, the sampled nuisance values, the fixed values and the derived values
(`sweeps.study.derived`) written at their paths, and the
budget's horizon, the seed and the objective's target where the trainer reads them.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from stepscale.files import write_json_atomic, write_text_atomic
from stepscale.rundir import CONFIG_YAML, TRIAL_JSON
from stepscale.sweeps.study.derived import derived_at
from stepscale.sweeps.study.schema import StudyConfig
from stepscale.sweeps.study.space import Point, SearchSpace
from stepscale.sweeps.trainers.kinds import StudyValues, kind_of
from stepscale.sweeps.trainers.spec import TrainerSpec, set_path
from stepscale.trainer import CONFIG_JSON


def now_iso() -> str:
    """UTC time in ISO 8601, seconds precision."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def trainer_base(study: StudyConfig, trainer: TrainerSpec) -> dict[str, Any]:
    """The trainer's config tree before a trial's values (its kind says: the built-in
    trainer's sections of the study config, or a user trainer's own ``trainer.config``)."""
    return kind_of(trainer).config_base(study)


def trial_settings(
    study: StudyConfig,
    trainer: TrainerSpec,
    space: SearchSpace,
    point: Point,
    nuisance: dict[str, Any],
    seed: int,
) -> dict[str, Any]:
    """path → value of everything a study sets in one trial's trainer config: the point's
    scientific values, the sampled nuisance values, the fixed values, the derived values
    and what the trainer's kind adds (a user trainer: the horizon, seed and target at the
    paths of ``trainer.keys``)."""
    settings = {space.scientific_paths[a]: v for a, v in point.values.items()}
    paths = space.paths(point.label)
    settings |= {paths[a]: v for a, v in nuisance.items()}
    settings |= dict(space.fixed.values())
    derived = derived_at(space, point.values, nuisance)
    settings |= {d.path: derived[d.name] for d in space.derived if d.path is not None}
    floats = {n.path for n in space.nuisance.get(point.label, ()) if n.type == "float"}
    return kind_of(trainer).trial_settings(settings, StudyValues.of(study, seed), floats)


def trial_config(
    study: StudyConfig,
    trainer: TrainerSpec,
    space: SearchSpace,
    point: Point,
    nuisance: dict[str, Any],
    seed: int,
    run_dir: Path | None,
) -> dict[str, Any]:
    """The trainer config (plain dict) of one trial."""
    tree = trainer_base(study, trainer)
    for path, value in trial_settings(study, trainer, space, point, nuisance, seed).items():
        set_path(tree, path, value)
    kind_of(trainer).complete_config(
        tree, StudyValues.of(study, seed), name=f"{study.name}/{point.label}", run_dir=run_dir
    )
    return tree


def write_trial_json(folder: Path, record: dict[str, Any]) -> None:
    """Write ``trial.json`` atomically."""
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(folder / TRIAL_JSON, record)


def write_trial_config(folder: Path, tree: dict[str, Any]) -> None:
    """The trial's resolved trainer config as ``config.yaml`` and ``config.json``."""
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / CONFIG_YAML, OmegaConf.to_yaml(OmegaConf.create(tree)))
    write_json_atomic(folder / CONFIG_JSON, tree)


__all__ = ["now_iso", "set_path", "trial_config", "trial_settings"]
