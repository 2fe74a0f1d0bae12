"""`sweep run --dry-run`: print the plan of a study (a table, or JSON) and launch nothing.

A dry run contacts nothing: not the storage's database server, not the cluster of the
launcher (`sbatch --test-only`, the Ray cluster). The plan names what it therefore did not
check; `sweep run` without --dry-run checks it all before it writes anything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stepscale.cli.status import STATES, study_status
from stepscale.rundir import QUEUED, STOPPED, STUDY_JSON
from stepscale.sweeps.study.storage import StorageSpec


def with_existing(plan: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """``plan`` with, when ``run_dir`` holds this study already, each point's trials that
    ended (``done``), that will resume (``unfinished``: running, stopped or queued) and that
    the run would start (``new``), and the totals (``existing: true``); with confirm seeds,
    the study's claims so far and the seeds they need (`stepscale.analysis.claim_estimate`)."""
    if not (run_dir / STUDY_JSON).exists():
        return plan | {"existing": False}
    rows = {r["point"]: r for r in study_status(run_dir)["points"]}
    points = []
    for p in plan["points"]:
        row = rows.get(p["point"], {})
        done = sum(row.get(s, 0) for s in STATES[1:])
        unfinished = sum(row.get(s, 0) for s in (STATES[0], STOPPED, QUEUED))
        new = max(p["trials"] - done - unfinished, 0)
        points.append(p | {"done": done, "unfinished": unfinished, "new": new})
    claims = []
    if plan.get("confirm_seeds") and any(p["done"] for p in points):
        from stepscale.analysis.claim_estimate import confirm_estimates  # heavy: only here

        claims = confirm_estimates(run_dir)
    return plan | {
        "existing": True,
        "claims": claims,
        "points": points,
        "total_done": sum(p["done"] for p in points),
        "total_unfinished": sum(p["unfinished"] for p in points),
        "total_new": sum(p["new"] for p in points),
    }


def not_contacted(storage: StorageSpec, launcher: str) -> list[str]:
    """What a dry run leaves unchecked because checking it means contacting a server: the
    storage's database and the launcher's cluster (a launcher of this machine has none)."""
    from stepscale.sweeps.launch.launchers import launcher_class

    out = []
    if storage.name == "postgres":
        out.append(f"that the PostgreSQL server answers ({storage.display()})")
    if not launcher_class(launcher).on_this_machine:
        out.append(
            f"that launcher={launcher} can submit jobs from here and its jobs see the run dir"
        )
    return out


def print_dry_run(
    plan: dict[str, Any],
    run_dir: Path,
    storage: StorageSpec,
    as_json: bool,
    unchecked: list[str] | None = None,
) -> None:
    """Print ``plan`` (from `sweeps.study.plan.plan_summary`, with `with_existing`) with where the
    study would run and what the dry run did not check (``unchecked``, `not_contacted`)."""
    unchecked = unchecked or []
    if as_json:
        record = plan | {
            "run_dir": str(run_dir), "storage": storage.display(), "not_checked": unchecked
        }  # fmt: skip
        print(json.dumps(record, indent=2, sort_keys=True))
    else:
        print_plan(plan, run_dir, storage)
        for item in unchecked:
            print(f"  not checked by --dry-run (it contacts nothing): {item}")


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
        print(
            "  transfer between points: the smallest and middle batch sizes of each group are "
            "tuned first, the others start from a prediction"
        )
    if plan.get("transfer_across_rungs"):
        print(
            "  transfer across rungs: only the first rung searches the declared ranges; a later "
            "rung's first batch sizes start from the η* law of the rungs before it"
        )
    adaptive = plan.get("adaptive")
    if adaptive:
        print(
            f"  adaptive batch sizes: the points below, then up to {adaptive['max_points']} in "
            f"all from {', '.join(adaptive['candidates'])} (stops once the B_crit interval "
            f"is within a factor {adaptive['ci_ratio']:g}): at most "
            f"{adaptive['max_trials']} trials, {adaptive['max_budget_steps']} steps"
        )
    existing = plan.get("existing", False)
    extra = f" {'done':>5s} {'resume':>6s} {'new':>4s}" if existing else ""
    # N (the parameters outside the embeddings, else all) and D (tokens a trial trains)
    # of every point: a ladder's two axes (analysis.ladder)
    print(
        f"  {'point':32s} {'steps/trial':>11s} {'D tokens/trial':>14s} {'N params':>10s} "
        f"{'budget steps':>12s}{extra}"
    )
    for p in plan["points"]:
        extra = f" {p['done']:5d} {p['unfinished']:6d} {p['new']:4d}" if existing else ""
        n = p.get("params_nonembedding") or p.get("params")
        print(
            f"  {p['point']:32s} {p['horizon_steps']:11d} {_count(p['horizon_tokens']):>14s} "
            f"{_count(n):>10s} {p['budget_steps']:12d}{extra}"
        )
    tokens = plan["total_budget_tokens"]
    print(
        f"  total: {plan['total_trials']} trials, {plan['total_budget_steps']} steps"
        + (f" ({tokens} tokens)" if tokens is not None else "")
    )
    if existing:
        print(
            f"  in {run_dir} already: {plan['total_done']} ended, {plan['total_unfinished']} to "
            f"resume; this run would start {plan['total_new']} new trial(s)"
        )
    for c in plan.get("claims", []):
        print(f"  claim: {c['estimate']}")


def _count(value: int | None) -> str:
    """A count, or — when the trainer did not say (a user trainer without validate)."""
    return "—" if value is None else str(value)
