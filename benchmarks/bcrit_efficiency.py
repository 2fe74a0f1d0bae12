"""The critical batch size for a fraction of the compute: is the fast protocol's B_crit the
dense study's, is it cheaper than fewer trials per point, and does `sweep replay` predict
what live runs give?

Per task (``--task demo``: the Markov demo, target eval loss 1.10; ``--task text``: Tiny
Shakespeare, target 2.4), live, on this machine:

1. the dense reference: the task's default study (``batchsize_vs_steps``,
   ``shakespeare_batchsize``) with every batch size × ``--dense-trials`` (24) tuned trials;
2. the fast preset (``batchsize_vs_steps_fast``, ``shakespeare_batchsize_fast``: adaptive
   batch sizes + transfer between points + deadline pruning), once per sampler seed
   (``--seeds``; 10 on each task);
3. the task's default study as shipped (8 trials per point on the demo, 4 on text) for
   ``--default-seeds`` seeds: the second reference, and a live run of a protocol the replay
   replays (fewer trials per point);

then replays the dense study (``--draws`` draws, 200): the fast protocol as far as a replay
can (its adaptive rule, trials per point and deadline; it cannot re-propose trials, so
transfer's predicted first trial is not part of it), the default study's fewer trials, and
the plain grid with K = 1, 2, … random trials per point — the simplest cheaper protocol, to
set the fast protocol's error beside at the same compute.

A seed is the sampler's (``sampler.seed``); every run trains with the dense study's training
seed, so the error measures the protocol, not the seed-to-seed spread of B_crit itself; seed
0 is the presets as they are. Compute is examples trained (steps × batch) by the tune
trials, as a fraction of each reference's.

Prints one JSON document: the references, per seed the fast protocol's batch sizes, S(B)
per batch size, compute fractions, B_crit and error |B_crit / B_crit,dense − 1|, their
summary against the task's targets (``Task.accept``; ``accept`` says which are met) with a
two-sided sign test of the errors' signs, a bootstrap interval of the median error over
seeds, and per batch size the median ratio of the runs' S(B) to the dense study's (where a
lean comes from), the plain-grid curves and the plain grid at the fast protocol's compute,
the replays beside the live runs (within ``REPLAY_WITHIN``, and whether inside the live
median's interval), wall times and the machine's load. A run dir that
exists is resumed (a finished one is read, with the wall time it took when it ran). Takes
tens of minutes per task; ``--quick`` checks the script in a few.

``--grid-seeds N`` adds live runs of the plain grid itself (the default study with
``--grid-trials`` K per point, by default the K whose replayed compute is nearest the fast
protocol's), beside its replays: a replay can only pick among the dense study's trials.

    python benchmarks/bcrit_efficiency.py --task demo|text [--seeds N] [--dense-trials 24]
        [--default-seeds 1] [--grid-seeds 0] [--grid-trials K] [--draws 200] [--work DIR]
        [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SWEEP = str(Path(sys.executable).with_name("sweep"))


@dataclass(frozen=True)
class Task:
    """A batch-size study, its fast preset and the numbers the issue holds them to."""

    default: str  # the study as shipped: also the dense reference, with more trials
    fast: str
    target: float
    default_trials: int
    fast_trials: int
    fast_points: int
    deadline: float
    seeds: int
    accept: dict[str, float]


TASKS = {
    "demo": Task(
        default="batchsize_vs_steps",
        fast="batchsize_vs_steps_fast",
        target=1.10,
        default_trials=8,
        fast_trials=5,
        fast_points=7,
        deadline=2.0,
        seeds=10,
        accept={"error_median": 0.10, "error_p90": 0.25, "compute_fraction_median": 0.25},
    ),
    "text": Task(
        default="shakespeare_batchsize",
        fast="shakespeare_batchsize_fast",
        target=2.4,
        default_trials=4,
        fast_trials=7,
        fast_points=5,
        deadline=1.5,
        seeds=10,
        accept={"error_median": 0.15, "compute_fraction_median": 0.30},
    ),
}
REPLAY_WITHIN = 0.05  # replay vs live: median error and compute fraction


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run_study(run_dir: Path, conf: str, overrides: list[str]) -> float:
    """`sweep run` (resuming a run dir that exists); returns the wall time it took when it
    ran (kept in ``RUN_DIR/../<name>.wall``: a finished study is not timed again)."""
    stamp = run_dir.with_name(run_dir.name + ".wall")
    if stamp.exists() and (run_dir / "study.json").exists():
        return float(stamp.read_text())
    cmd = [SWEEP, "run", f"conf={conf}", f"run_dir={run_dir}", *overrides]
    start = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stderr[-4000:]}")
    wall = time.monotonic() - start
    stamp.write_text(f"{wall:.1f}\n")
    return wall


def fewest_steps(ds: Any, target: float) -> dict[str, float]:
    """Per batch size (JSON key), the steps to result at ``target`` of its tune trials: the
    fewest to the first evaluation below it, the S(B) the replay fits (batch sizes where
    no trial reached it are left out)."""
    from stepscale.analysis.dataset import study_axes
    from stepscale.analysis.fits.targets import steps_at_target

    axis = study_axes(ds).batch
    assert axis is not None
    tune = np.flatnonzero(ds["kind"].values == "tune")
    step, loss = ds["step"].values, ds["eval_loss"].values
    batch = ds[axis.coord].values
    curves = {int(i): (step, loss[i]) for i in tune}
    res = steps_at_target(curves, {i: float(batch[i]) for i in curves}, target).result()
    return {f"{b:g}": s for b, s in zip(res.batch_sizes, res.steps, strict=True)}


def study_answer(run_dir: Path, target: float) -> dict[str, Any]:
    """B_crit (with its interval), S(B) per batch size and the compute of a finished study,
    from its curves."""
    from stepscale.analysis.load import load
    from stepscale.analysis.replay import replay

    ds = load(run_dir)
    rep = replay(ds, ["full"], target=target).to_dict()
    ref = rep["reference"]["all"]
    return {
        "steps_by_batch": fewest_steps(ds, target),
        "b_crit": ref["b_crit"],
        "b_crit_ci": ref.get("b_crit_ci"),
        "s_min": ref["s_min"],
        "batch_sizes": ref["batch_sizes"],
        "examples": rep["study_compute"]["all"]["examples"],
        "steps": rep["study_compute"]["all"]["steps"],
        "trials": rep["study_compute"]["all"]["trials"],
    }


def _signed(values: list[float], ref: float) -> list[float]:
    return [v / ref - 1 if v is not None and math.isfinite(v) else math.inf for v in values]


def sign_test(signed: list[float]) -> dict[str, Any]:
    """Two-sided sign test of the errors' signs (exact binomial, p = 1/2; ties dropped)."""
    above = sum(1 for s in signed if s > 0)
    below = sum(1 for s in signed if s < 0)
    n = above + below
    k = min(above, below)
    p = min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n) if n else 1.0
    return {"above": above, "below": below, "p_value": p, "biased_at_0.05": p < 0.05}


def median_ci(values: list[float], level: float = 0.9, resamples: int = 4000) -> list[float]:
    """A percentile bootstrap interval of the median of ``values`` (the seeds resampled;
    a fixed generator, so the same runs give the same interval): how far the median of
    this many seeds can be from the one more seeds would give."""
    e = np.asarray(values, dtype=float)
    method = "linear" if np.isfinite(e).all() else "inverted_cdf"
    rng = np.random.default_rng(0)
    picks = rng.integers(0, e.size, size=(resamples, e.size))
    medians = np.quantile(e[picks], 0.5, axis=1, method=method)
    tail = (1 - level) / 2
    return [float(np.quantile(medians, q, method="inverted_cdf")) for q in (tail, 1 - tail)]


def steps_ratios(rows: list[dict[str, Any]], dense: dict[str, Any]) -> dict[str, Any]:
    """Per batch size, S(B) of the live runs over the dense study's: the median ratio and
    the runs that measured it. Fewer trials find a worse best, and by how much tells where
    the estimate's lean comes from (a top end overestimated more than the bottom → S_min
    too high → B_crit low)."""
    out: dict[str, Any] = {}
    for b, ref in dense["steps_by_batch"].items():
        r = [row["steps_by_batch"][b] / ref for row in rows if b in row["steps_by_batch"]]
        if r:
            out[b] = {"median": float(np.median(r)), "runs": len(r)}
    return out


def _summary(errors: list[float], fractions: list[float]) -> dict[str, Any]:
    e = np.asarray(errors, dtype=float)
    # A failed fit is an infinite error: quantiles then without interpolation (inf − inf).
    method = "linear" if np.isfinite(e).all() else "inverted_cdf"
    return {
        "error_median": float(np.quantile(e, 0.5, method=method)),
        "error_median_ci90": median_ci(errors),
        "error_p90": float(np.quantile(e, 0.9, method=method)),
        "error_max": float(e.max()),
        "compute_fraction_median": float(np.median(fractions)),
        "compute_fraction_max": float(np.max(fractions)),
    }


def live_runs(
    work: Path,
    task: Task,
    conf: str,
    seeds: list[int],
    overrides: list[str],
    refs: dict[str, dict[str, Any]],
    label: str = "",
) -> dict[str, Any]:
    """One study per sampler seed (run dir ``<conf><label>-s<seed>``): each one's B_crit,
    compute fractions and wall time."""
    dense = refs["dense"]
    rows = []
    for seed in seeds:
        run_dir = work / f"{conf}{label}-s{seed}"
        wall = run_study(run_dir, conf, [f"sampler.seed={seed}", *overrides])
        ans = study_answer(run_dir, task.target)
        row: dict[str, Any] = {
            "seed": seed,
            "b_crit": ans["b_crit"],
            "b_crit_ci": ans["b_crit_ci"],
            "batch_sizes": ans["batch_sizes"],
            "steps_by_batch": ans["steps_by_batch"],
            "trials": ans["trials"],
            "examples": ans["examples"],
            "compute_fraction": ans["examples"] / dense["examples"],
            "wall_s": round(wall, 1),
        }
        if "default" in refs:
            row["compute_fraction_of_default"] = ans["examples"] / refs["default"]["examples"]
        adaptive = run_dir / "adaptive.json"
        if adaptive.exists():
            row["adaptive_stopped"] = json.loads(adaptive.read_text()).get("stopped")
        rows.append(row)
        print(f"{conf} seed {seed}: {json.dumps(row)}", file=sys.stderr, flush=True)
    signed = _signed([r["b_crit"] for r in rows], dense["b_crit"])
    for r, s in zip(rows, signed, strict=True):
        r["signed_error"] = s
    out = {
        "conf": conf,
        "overrides": overrides,
        "runs": rows,
        **_summary([abs(s) for s in signed], [r["compute_fraction"] for r in rows]),
        "sign_test": sign_test(signed),
        "steps_ratio_to_dense": steps_ratios(rows, dense),
    }
    if "default" in refs:
        out["compute_fraction_of_default_median"] = float(
            np.median([r["compute_fraction_of_default"] for r in rows])
        )
    return out


def replayed(dense_dir: Path, protocols: list[str], target: float, draws: int) -> list[dict]:
    """The dense study replayed under ``protocols``: compute fraction and B_crit error."""
    from stepscale.analysis.load import load
    from stepscale.analysis.replay import replay

    res = replay(load(dense_dir), protocols, target=target, draws=draws).to_dict()
    out = []
    for r in res["protocols"]:
        spread = r.get("spread_q10_q90", {})
        out.append(
            {
                "protocol": r["protocol"],
                "draws": r["draws"],
                "compute_fraction": r["compute_fraction"]["examples"],
                "compute_fraction_q10_q90": spread.get("examples"),
                "b_crit": r["b_crit"],
                "b_crit_q10_q90": spread.get("b_crit"),
                "error_median": r["b_crit_error"]["median"],
                "error_p90": r["b_crit_error"]["p90"],
                "failed_fits": r["failed_fits"],
                "batch_sizes": r.get("batch_sizes", r.get("batch_sizes_first_draw")),
            }
        )
    return out


def compare(live: dict[str, Any], rep: dict[str, Any]) -> dict[str, Any]:
    """How closely a replay predicted the live runs of its protocol."""
    fl, fr = live["compute_fraction_median"], rep["compute_fraction"]
    el, er = live["error_median"], rep["error_median"]
    return {
        "protocol": rep["protocol"],
        "live_compute_fraction_median": fl,
        "replay_compute_fraction": fr,
        "live_error_median": el,
        "live_error_median_ci90": live["error_median_ci90"],
        "replay_error_median": er,
        # with few seeds the live median is itself uncertain: is the replay inside its
        # bootstrap interval (beside the acceptance's fixed tolerance)?
        "replay_inside_live_ci90": live["error_median_ci90"][0]
        <= er
        <= live["error_median_ci90"][1],
        "live_error_p90": live["error_p90"],
        "replay_error_p90": rep["error_p90"],
        "within": {
            "compute_fraction": abs(fl - fr) <= REPLAY_WITHIN,
            "error_median": abs(el - er) <= REPLAY_WITHIN,
        },
        "live_b_crit": [r["b_crit"] for r in live["runs"]],
        "replay_b_crit_median_q10_q90": [rep["b_crit"], *(rep["b_crit_q10_q90"] or [])],
    }


def same_compute(grid: list[dict[str, Any]], fraction: float) -> dict[str, Any]:
    """The plain grid beside a protocol of ``fraction``: the two K that bracket it and the
    median error interpolated (linearly in compute) between them."""
    grid = sorted(grid, key=lambda g: g["compute_fraction"])
    below = [g for g in grid if g["compute_fraction"] <= fraction]
    above = [g for g in grid if g["compute_fraction"] >= fraction]
    lo = below[-1] if below else None
    hi = above[0] if above else None
    if lo is None or hi is None or hi is lo:
        g = lo or hi
        assert g is not None
        return {"below": lo, "above": hi, "error_median": g["error_median"]}
    w = (fraction - lo["compute_fraction"]) / (hi["compute_fraction"] - lo["compute_fraction"])
    err = lo["error_median"] + w * (hi["error_median"] - lo["error_median"])
    return {"below": lo["protocol"], "above": hi["protocol"], "error_median": err}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", choices=sorted(TASKS), default="demo")
    ap.add_argument("--seeds", type=int, default=None, help="fast-protocol runs (sampler seeds)")
    ap.add_argument("--dense-trials", type=int, default=24)
    ap.add_argument("--default-seeds", type=int, default=1, help="live runs of the default")
    ap.add_argument(
        "--grid-seeds",
        type=int,
        default=0,
        help="live runs of the plain grid (the default study with --grid-trials per point)",
    )
    ap.add_argument(
        "--grid-trials",
        type=int,
        default=None,
        help="trials per point of the live plain grid (default: the K whose replayed compute "
        "is nearest the fast protocol's)",
    )
    ap.add_argument("--draws", type=int, default=200, help="draws of random replays")
    ap.add_argument("--work", type=Path, default=None, help="keep the run dirs here (resumes)")
    ap.add_argument("--quick", action="store_true", help="tiny settings: checks the script")
    args = ap.parse_args()
    if args.grid_seeds < 0 or (args.grid_trials is not None and args.grid_trials < 1):
        ap.error("--grid-seeds must be >= 0 and --grid-trials >= 1")
    task = TASKS[args.task]
    work = args.work or Path(tempfile.mkdtemp(prefix=f"bcrit-efficiency-{args.task}-"))
    work.mkdir(parents=True, exist_ok=True)
    dense_trials = args.dense_trials
    seeds = args.seeds if args.seeds is not None else task.seeds
    default_seeds, draws = args.default_seeds, args.draws
    fast_over: list[str] = []
    default_trials, fast_trials, fast_points = (
        task.default_trials,
        task.fast_trials,
        task.fast_points,
    )
    if args.quick:
        dense_trials, seeds, default_seeds, draws = 3, 2, 1, 20
        default_trials, fast_trials, fast_points = 2, 2, 4
        fast_over = [
            f"budget.trials_per_point={fast_trials}",
            f"scientific.batch_size.adaptive.max_points={fast_points}",
        ]
    load_start = _load()
    started = time.monotonic()

    dense_dir = work / "dense"
    dense_wall = run_study(
        dense_dir, task.default, [f"budget.trials_per_point={dense_trials}", "name=dense"]
    )
    dense = study_answer(dense_dir, task.target) | {
        "wall_s": round(dense_wall, 1),
        "trials_per_point": dense_trials,
    }
    print(f"dense: {json.dumps(dense)}", file=sys.stderr, flush=True)
    refs = {"dense": dense}
    default = live_runs(
        work,
        task,
        task.default,
        list(range(default_seeds)),
        [f"budget.trials_per_point={default_trials}"],
        refs,
    )
    # The default study as shipped (seed 0) is the second reference.
    refs["default"] = default["runs"][0]
    fast = live_runs(work, task, task.fast, list(range(seeds)), fast_over, refs)

    # The fast protocol as a replay can run it and the default study's fewer trials, against
    # their live runs; the plain grid with K trials per point. Trials drawn three ways: in the
    # dense study's order (first), at random (random), and spread evenly in log LR (spread:
    # like a live study too short for its sampler to concentrate).
    tail = f"+deadline:{task.deadline:g}"
    picks = ("first", "random", "spread")
    rep_fast = replayed(
        dense_dir,
        [f"adaptive:{fast_points}+{pick}:{fast_trials}{tail}+transfer" for pick in picks],
        task.target,
        draws,
    )
    rep_default = replayed(
        dense_dir, [f"{pick}:{default_trials}{tail}" for pick in picks], task.target, draws
    )
    ks = range(1, min(dense_trials, 2 * task.default_trials) + 1)
    grids = {
        pick: replayed(dense_dir, [f"{pick}:{k}{tail}" for k in ks], task.target, draws)
        for pick in ("random", "spread")
    }
    beside = {
        pick: same_compute(grid, fast["compute_fraction_median"]) for pick, grid in grids.items()
    }
    # The plain grid live, at about the fast protocol's compute: a replay can only pick among
    # the dense study's trials, so a point whose dense best is one lucky trial of 24 holds
    # every replay back; live runs are not held to it.
    grid_live = None
    by_k = {pick: dict(zip(ks, grid, strict=True)) for pick, grid in grids.items()}
    if args.grid_seeds > 0:
        k = args.grid_trials or min(
            ks,
            key=lambda k: abs(
                by_k["random"][k]["compute_fraction"] - fast["compute_fraction_median"]
            ),
        )
        grid_live = live_runs(
            work,
            task,
            task.default,
            list(range(args.grid_seeds)),
            [f"budget.trials_per_point={k}"],
            refs,
            label=f"-k{k}",
        ) | {"trials_per_point": k}
    accept = {key: fast[key] <= limit for key, limit in task.accept.items()} | {
        "no_sign_bias": not fast["sign_test"]["biased_at_0.05"],
        "beats_plain_grid_at_same_compute": fast["error_median"] < beside["random"]["error_median"],
        "replay_predicts_live": all(
            all(c["within"].values())
            for c in (compare(fast, rep_fast[1]), compare(default, rep_default[1]))
        ),
    }
    if grid_live is not None:
        accept["beats_live_plain_grid"] = fast["error_median"] < grid_live["error_median"]
    out = {
        "benchmark": "bcrit_efficiency",
        "task": args.task,
        "quick": args.quick,
        "target_loss": task.target,
        "accept_limits": task.accept,
        "accept": accept,
        "met": all(accept.values()),
        "dense": dense,
        "default": default,
        "fast": fast,
        "plain_grid": grids,
        "plain_grid_at_fast_compute": beside,
        "plain_grid_live": grid_live,
        "replay_vs_live": {
            "fast": [compare(fast, r) for r in rep_fast],
            "default": [compare(default, r) for r in rep_default],
            "grid": [
                compare(grid_live, by_k[pick][grid_live["trials_per_point"]])
                for pick in ("random", "spread")
                if grid_live is not None and grid_live["trials_per_point"] in by_k[pick]
            ],
        },
        "wall_s": round(time.monotonic() - started, 1),
        "loadavg_start": load_start,
        "loadavg_end": _load(),
        "cpus": os.cpu_count(),
        "work": str(work),
    }
    print(json.dumps(_strict(out), indent=2, sort_keys=True, allow_nan=False))


def _strict(x: Any) -> Any:
    """Non-finite floats (a fit that failed: an infinite error) → null."""
    if isinstance(x, dict):
        return {k: _strict(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_strict(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


if __name__ == "__main__":
    main()
