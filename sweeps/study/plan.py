"""The plan of a study: every point's trainer config checked by the trainer at the ends of
its nuisance ranges, giving the point's horizon and sizes; and the summary of what the
study will run (shown by ``--dry-run`` and the progress display)."""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from typing import Any

from stepscale.errors import UsageError
from stepscale.rundir import EXAMPLES, SEQUENCES
from stepscale.sweeps.study.axes import ladder_axes
from stepscale.sweeps.study.schema import StudyConfig
from stepscale.sweeps.study.space import Point, SearchSpace
from stepscale.sweeps.study.trials import trial_config
from stepscale.sweeps.trainers import builtin
from stepscale.sweeps.trainers.kinds import kind_of
from stepscale.sweeps.trainers.spec import TrainerSpec
from stepscale.trainer import PLAN_KEYS


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


def plan_points(
    cfg: StudyConfig, space: SearchSpace, trainer: TrainerSpec, *, here: bool
) -> dict[str, dict[str, Any]]:
    """Validate every point's trainer config (the trainer's ``validate``, at the ends of
    the nuisance ranges), and every batch size an adaptive study may add; returns per-point
    horizons and sizes. ``here``: the launcher runs trials on this machine (its devices
    and memory are the trials'; `Launcher.on_this_machine`)."""
    check = kind_of(trainer).validator(here=here)
    out = {}
    every = (*space.points, *space.candidates)  # candidates: batch sizes it may add
    progress = _Progress(len(every))
    for done, point in enumerate(every):
        progress.show(done)
        plans = []
        for values in range_ends(space, point):
            tree = trial_config(cfg, trainer, space, point, values, cfg.seed, None)
            try:
                plans.append(check(tree) if check is not None else None)
            except builtin.RejectedConfig as exc:
                raise UsageError(
                    f"point {point.label} (nuisance {values}) is rejected by the trainer: {exc}"
                ) from None
            except Exception as exc:  # e.g. a value of the wrong type for its path
                raise UsageError(
                    f"point {point.label} (nuisance {values}): the trainer's validate refused "
                    f"its config: {type(exc).__name__}: {exc}"
                ) from None
        out[point.label] = _sizes(cfg, point.label, plans[0])
        if out[point.label]["examples_per_step"] is None:  # its validate did not say
            out[point.label]["examples_per_step"] = _batch_examples(cfg, point)
    progress.show(len(every))
    return out


class _Progress:
    """Says how far the check of a large grid has come (once it has taken a few seconds),
    so a long silence before the first trial or the dry run's plan is explained. The clock
    starts after the first point, whose check includes the trainer's imports."""

    MIN_POINTS = 20  # a small grid is checked in the time the imports take: nothing to say
    AFTER_S = 2.0  # quiet for grids checked faster than this
    EVERY_S = 5.0

    def __init__(self, total: int) -> None:
        self.total = total
        self.start = time.monotonic()
        self.last = 0.0

    def show(self, done: int) -> None:
        if done == 1:
            self.start = time.monotonic()
        now = time.monotonic() - self.start
        final = done == self.total
        if self.total < self.MIN_POINTS or now < self.AFTER_S:
            return
        if not final and now - self.last < self.EVERY_S:
            return
        if final and self.last == 0.0:
            return  # never said anything: nothing to close
        self.last = now
        print(
            f"sweep: checking every point's config with the trainer: {done:,} of "
            f"{self.total:,} points ({now:.0f} s)",
            file=sys.stderr,
            flush=True,
        )


def _batch_examples(cfg: StudyConfig, point: Point) -> int | None:
    """A user trainer's examples per step, when its validate does not say: the point's
    batch size (the scientific axis with ``quantity: batch_size``) counted in examples or
    sequences."""
    for alias, p in cfg.scientific.items():
        if p.quantity == "batch_size" and (p.unit or EXAMPLES) in (EXAMPLES, SEQUENCES):
            value = point.values[alias]
            return int(value) if isinstance(value, int | float) else None
    return None


def _sizes(cfg: StudyConfig, label: str, plan: Any) -> dict[str, Any]:
    """A point's sizes from what the trainer's validate returned (a dict of PLAN_KEYS, or
    None); the horizon falls back to the study's budget.max_steps."""
    if plan is not None and not isinstance(plan, dict):
        raise UsageError(
            f"point {label}: the trainer's validate returned {type(plan).__name__}; "
            f"return None or a dict of {', '.join(PLAN_KEYS)}"
        )
    sizes = {k: (plan or {}).get(k) for k in PLAN_KEYS}
    b = cfg.budget
    if sizes["horizon_steps"] is None:
        per_step = {"max_tokens": "tokens_per_step", "max_examples": "examples_per_step"}
        for key, rate in per_step.items():
            budget = getattr(b, key)
            if budget is not None and sizes[rate]:
                sizes["horizon_steps"] = math.ceil(budget / sizes[rate])
            elif budget is not None:
                raise UsageError(
                    f"budget.{key}: this trainer does not say what a step consumes (its "
                    f"validate returns no {rate}); give the horizon as budget.max_steps"
                )
        if b.max_steps is not None:
            sizes["horizon_steps"] = b.max_steps
    if sizes["horizon_steps"] is None:
        raise UsageError(
            f"point {label}: no horizon; give budget.max_steps (how many steps a trial trains)"
        )
    sizes["horizon_steps"] = int(sizes["horizon_steps"])
    return sizes


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
            "horizon_tokens": _times(steps, s["tokens_per_step"]),
            "horizon_examples": _times(steps, s["examples_per_step"]),
            "budget_steps": steps * trials,
            "budget_tokens": _times(steps * trials, s["tokens_per_step"]),
            "params": s["params"],
            # N of a ladder's laws: the parameters outside the embeddings (else params)
            "params_nonembedding": s.get("params_nonembedding"),
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
        "total_budget_tokens": _total(p["budget_tokens"] for p in points),
        "objective": dataclasses.asdict(cfg.objective),
        "sampler": cfg.sampler.name,
        "pruner": cfg.pruner.name,
        "launcher": cfg.launcher.name,
        "parallelism": cfg.parallelism,
        "transfer": cfg.sampler.transfer,
        "transfer_across_rungs": cfg.sampler.transfer and bool(ladder_axes(cfg)),
        "adaptive": _adaptive_plan(cfg, space, sizes, trials),
    }


def _adaptive_plan(
    cfg: StudyConfig, space: SearchSpace, sizes: dict[str, dict[str, Any]], trials: int
) -> dict[str, Any] | None:
    """What an adaptive axis may add to the points listed (None without one): its
    candidates, and the most it may run (its longest candidates added)."""
    axis = next((a for a in cfg.scientific.values() if a.adaptive.enabled), None)
    if axis is None:
        return None
    more = max(0, axis.adaptive.max_points - len(space.points))
    longest = sorted((sizes[p.label]["horizon_steps"] for p in space.candidates), reverse=True)
    now = sum(sizes[p.label]["horizon_steps"] for p in space.points) * trials
    return {
        "candidates": [p.label for p in space.candidates],
        "max_points": axis.adaptive.max_points,
        "ci_ratio": axis.adaptive.ci_ratio,
        "max_trials": trials * min(axis.adaptive.max_points, len(space.points) + len(longest)),
        "max_budget_steps": now + trials * sum(longest[:more]),
    }


def _times(steps: int, per_step: int | None) -> int | None:
    """Steps × what a step consumes; None when the trainer did not say."""
    return None if per_step is None else steps * per_step


def _total(values: Any) -> int | None:
    """The sum, or None when any value is unknown."""
    values = list(values)
    return None if any(v is None for v in values) else sum(values)
