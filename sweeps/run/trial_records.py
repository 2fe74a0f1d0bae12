"""trial.json's record of a trial (docs/run-dir.md), built in one place: for a trial being
submitted, and for one adopted from a dead orchestrator that never wrote it."""

from __future__ import annotations

from typing import Any

from optuna.trial import FrozenTrial

from stepscale.sweeps.study.derived import derived_at
from stepscale.sweeps.study.schema import StudyConfig
from stepscale.sweeps.study.space import Point, SearchSpace


def json_scalar(value: Any) -> Any:
    """A JSON scalar as it is, anything else as its text."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    return str(value)


def trial_seed(cfg: StudyConfig, trial: FrozenTrial) -> int:
    """The trainer seed of a trial: its own (confirm seeds) or the study's."""
    return int(trial.user_attrs.get("seed", cfg.seed))


def trial_record(
    cfg: StudyConfig, space: SearchSpace, point: Point, trial: FrozenTrial, **fields: Any
) -> dict[str, Any]:
    """What a trial is (its point, number, kind, seed and values, derived ones included), then ``fields`` (its
    state, attempts, owner, times…)."""
    nuisance = space.trainer_values(point.label, trial.params)
    derived = derived_at(space, point.values, nuisance)
    return {
        "trial": f"{point.label}/{trial.number}",
        "point": point.label,
        "number": trial.number,
        "kind": trial.user_attrs.get("kind", "tune"),
        "seed": trial_seed(cfg, trial),
        "scientific": {k: json_scalar(v) for k, v in point.values.items()},
        "nuisance": {k: json_scalar(v) for k, v in nuisance.items()},
        "fixed": {a: json_scalar(v) for a, (_, v) in space.fixed.items()},
        **({"derived": derived} if derived else {}),
        **fields,
    }


def adopted_record(
    cfg: StudyConfig,
    space: SearchSpace,
    point: Point,
    trial: FrozenTrial,
    record: dict[str, Any],
) -> dict[str, Any]:
    """The record of a trial found finished: the one on disk, or (if its orchestrator died
    before writing one) a new one for its first attempt."""
    if "trial" in record:
        return record
    return trial_record(cfg, space, point, trial, attempts=1, started=None)
