"""`sweep run --dry-run`: print the plan of a study (a table, or JSON) and launch nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stepscale.sweeps.storage import StorageSpec


def print_dry_run(plan: dict[str, Any], run_dir: Path, storage: StorageSpec, as_json: bool) -> None:
    """Print ``plan`` (from `sweeps.plan.plan_summary`) with where the study would run."""
    if as_json:
        record = plan | {"run_dir": str(run_dir), "storage": storage.display()}
        print(json.dumps(record, indent=2, sort_keys=True))
    else:
        print_plan(plan, run_dir, storage)


def print_plan(plan: dict[str, Any], run_dir: Path, storage: StorageSpec) -> None:
    """The plan as a table: the study's settings, then a row per point and the totals."""
    print(
        f"study {plan['name']}: {plan['n_points']} points × {plan['trials_per_point']} trials",
        end="",
    )
    print(f" (+{plan['confirm_seeds']} confirm seeds)" if plan["confirm_seeds"] else "")
    print(f"  objective {plan['objective']['kind']}", end="")
    target = plan["objective"]["target_loss"]
    print(f" (target loss {target})" if target is not None else "")
    print(
        f"  sampler {plan['sampler']}, pruner {plan['pruner']}, launcher {plan['launcher']}, parallelism {plan['parallelism']}"
    )
    print(f"  run dir {run_dir}, storage {storage.display()}")
    if plan.get("transfer"):
        print("  transfer between points: each point after the two ends starts from a prediction")
    adaptive = plan.get("adaptive")
    if adaptive:
        print(
            f"  adaptive batch sizes: the points below, then up to {adaptive['max_points']} in "
            f"all from {', '.join(adaptive['candidates'])} (stops once the B_crit interval "
            f"is within a factor {adaptive['ci_ratio']:g}): at most "
            f"{adaptive['max_trials']} trials, {adaptive['max_budget_steps']} steps"
        )
    print(f"  {'point':32s} {'steps/trial':>11s} {'tokens/trial':>13s} {'budget steps':>12s}")
    for p in plan["points"]:
        print(
            f"  {p['point']:32s} {p['horizon_steps']:11d} {_count(p['horizon_tokens']):>13s} {p['budget_steps']:12d}"
        )
    tokens = plan["total_budget_tokens"]
    print(
        f"  total: {plan['total_trials']} trials, {plan['total_budget_steps']} steps"
        + (f" ({tokens} tokens)" if tokens is not None else "")
    )


def _count(value: int | None) -> str:
    """A count, or — when the trainer did not say (a user trainer without validate)."""
    return "—" if value is None else str(value)
