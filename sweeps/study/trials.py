"""Trial configs and the trial folder's files (the job's spec: `sweeps.job.spec`).

A trial's trainer config is the trainer's config tree (the built-in trainer's sections of
the study config, or ``trainer.config`` of a user's trainer) with the point's scientific
values, the sampled nuisance values, the fixed values and the derived values
(`sweeps.study.derived`) written at their paths, and the
budget's horizon, the seed and the objective's target where the trainer reads them.
"""

from __future__ import annotations

import copy
import datetime as dt
from dataclasses import asdict
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from stepscale.files import write_json_atomic, write_text_atomic
from stepscale.rundir import CONFIG_YAML, TRIAL_JSON
from stepscale.sweeps.study.derived import derived_at
from stepscale.sweeps.study.schema import StudyConfig
from stepscale.sweeps.study.space import Point, SearchSpace
from stepscale.sweeps.trainers.builtin import SECTIONS
from stepscale.sweeps.trainers.spec import BUILTIN, TrainerSpec
from stepscale.trainer import CONFIG_JSON


def now_iso() -> str:
    """UTC time in ISO 8601, seconds precision."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_path(tree: dict[str, Any], path: str, value: Any) -> None:
    """``tree[a][b] = value`` for ``path == "a.b"`` (missing parents are created)."""
    *parents, leaf = path.split(".")
    node = tree
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value


def trainer_base(study: StudyConfig, trainer: TrainerSpec) -> dict[str, Any]:
    """The trainer's config tree before a trial's values: the built-in trainer's sections
    of the study config, or a user trainer's own ``trainer.config``."""
    if trainer.kind == BUILTIN:
        return {k: asdict(getattr(study, k)) for k in SECTIONS}
    return copy.deepcopy(trainer.config)


def trial_settings(
    study: StudyConfig,
    trainer: TrainerSpec,
    space: SearchSpace,
    point: Point,
    nuisance: dict[str, Any],
    seed: int,
) -> dict[str, Any]:
    """path → value of everything a study sets in one trial's trainer config: the point's
    scientific values, the sampled nuisance values, the fixed values and (for a user
    trainer) the horizon, seed and target at the paths of ``trainer.keys``."""
    settings = {space.scientific_paths[a]: v for a, v in point.values.items()}
    paths = space.paths(point.label)
    settings |= {paths[a]: v for a, v in nuisance.items()}
    settings |= dict(space.fixed.values())
    derived = derived_at(space, point.values, nuisance)
    settings |= {d.path: derived[d.name] for d in space.derived if d.path is not None}
    if trainer.kind != BUILTIN:
        study_values = {
            "max_steps": study.budget.max_steps,
            "seed": seed,
            "target_loss": study.objective.target_loss,
        }
        settings |= {path: study_values[key] for key, path in trainer.keys.items()}
        floats = {n.path for n in space.nuisance.get(point.label, ()) if n.type == "float"}
        floats |= {p for p, v in _leaves(trainer.config).items() if isinstance(v, float)}
        settings = {p: _as_float(v) if p in floats else v for p, v in settings.items()}
    return settings


def _as_float(value: Any) -> Any:
    """A whole number as a float (``1`` → ``1.0``): a float setting stays a float whatever
    the sampler or the YAML gave, so a script that checks its types gets a float."""
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _leaves(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted key → value of every leaf of a config tree."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out |= _leaves(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


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
    if trainer.kind != BUILTIN:
        return tree
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
