"""The plan of a study: every point's trainer config checked by the trainer at the ends of
its nuisance ranges, giving the point's horizon and sizes; and the summary of what the
study will run (shown by ``--dry-run`` and the progress display)."""

from __future__ import annotations

import dataclasses
from typing import Any

from stepscale.sweeps.errors import UsageError
from stepscale.sweeps.schema import StudyConfig
from stepscale.sweeps.space import Point, SearchSpace
from stepscale.sweeps.trials import to_trainer_config, trial_config


def range_ends(space: SearchSpace, point: Point) -> list[dict[str, Any]]:
    """Nuisance values at the low and at the high end of every range."""
    ends: list[dict[str, Any]] = [{}, {}]
    for n in space.nuisance[point.label]:
        if n.type == "categorical":
            ends[0][n.name], ends[1][n.name] = n.choices[0], n.choices[-1]
        else:
            cast = int if n.type == "int" else float
            ends[0][n.name], ends[1][n.name] = cast(n.low), cast(n.high)
    return ends


def plan_points(cfg: StudyConfig, space: SearchSpace) -> dict[str, dict[str, Any]]:
    """Validate every point's trainer config; returns per-point horizons and sizes."""
    from stepscale.models.errors import ConfigError
    from stepscale.models.plan import prepare

    out = {}
    for point in space.points:
        plans = []
        for values in range_ends(space, point):
            tree = trial_config(cfg, space, point, values, cfg.seed, None)
            if cfg.launcher.name == "slurm":
                # The jobs' devices (GPUs, several tasks) are not this machine's: the job
                # checks train.devices against what it gets.
                tree["train"]["devices"] = None
            try:
                plans.append(prepare(to_trainer_config(tree)))
            except ConfigError as exc:
                raise UsageError(
                    f"point {point.label} (nuisance {values}) is rejected by the trainer: {exc}"
                ) from None
            except Exception as exc:  # e.g. a value of the wrong type for its path
                raise UsageError(f"point {point.label}: invalid trainer config: {exc}") from None
        plan = plans[0]
        out[point.label] = {
            "horizon_steps": plan.horizon,
            "tokens_per_step": plan.tokens_per_step,
            "examples_per_step": plan.examples_per_step,
            "params": plan.n_params,
            "flops_per_step": plan.flops_per_step,
            "loss_floor": plan.info.loss_floor,
        }
    return out


def plan_summary(
    cfg: StudyConfig, space: SearchSpace, sizes: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Trials, horizons and budgets per point and in total, with the study's settings."""
    trials = cfg.budget.trials_per_point + cfg.budget.confirm_seeds
    points = []
    for p in space.points:
        s = sizes[p.label]
        steps = s["horizon_steps"]
        points.append({
            "point": p.label,
            "trials": trials,
            "horizon_steps": steps,
            "tokens_per_step": s["tokens_per_step"],
            "horizon_tokens": steps * s["tokens_per_step"],
            "horizon_examples": steps * s["examples_per_step"],
            "budget_steps": steps * trials,
            "budget_tokens": steps * trials * s["tokens_per_step"],
            "params": s["params"],
            "loss_floor": s["loss_floor"],
        })  # fmt: skip
    return {
        "name": cfg.name,
        "points": points,
        "n_points": len(points),
        "trials_per_point": cfg.budget.trials_per_point,
        "confirm_seeds": cfg.budget.confirm_seeds,
        "total_trials": trials * len(points),
        "total_budget_steps": sum(p["budget_steps"] for p in points),
        "total_budget_tokens": sum(p["budget_tokens"] for p in points),
        "objective": dataclasses.asdict(cfg.objective),
        "sampler": cfg.sampler.name,
        "pruner": cfg.pruner.name,
        "launcher": cfg.launcher.name,
        "parallelism": cfg.parallelism,
    }
