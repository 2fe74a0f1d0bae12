"""The critical batch size for a fraction of the compute: is the cheap protocol's B_crit the
dense study's, and does `sweep replay` predict what live runs of a protocol give?

Runs, live, on this machine (the demo's model and data, target eval loss 1.10):

1. the dense reference: the demo before issue 33 (``batchsize_vs_steps_previous`` in
   benchmarks/presets, whose model, data, ranges and horizon the fast preset shares) with 7
   batch sizes × ``--dense-trials`` (24) tuned trials each;
2. the cheap protocol, ``batchsize_vs_steps_fast`` (adaptive batch sizes + transfer between
   points + deadline pruning), once per seed (``--seeds``, default 10);
3. that demo as it is (8 trials per point) for ``--demo-seeds`` seeds: a live run of a
   protocol the replay can replay (fewer trials per point);

then replays the dense study under the protocols run live and compares. A seed is the
sampler's (``sampler.seed``); every run trains with the dense study's training seed, so
the error measures the protocol, not the seed-to-seed spread of B_crit itself; seed 0 is the
presets as they are. Compute is examples trained (steps × batch) by the tune trials, as a
fraction of the dense study's.

Prints one JSON document: the dense B_crit, per seed the cheap protocol's compute fraction
and B_crit, the distribution of |B_crit / B_crit,dense − 1| against the targets (median
≤ 15%, 90th percentile ≤ 35%, at ≤ 30% of the compute), the replay vs the live runs, wall
times and the machine's load. Takes tens of minutes; ``--quick`` checks the script in a few.

    python benchmarks/bcrit_efficiency.py [--seeds 10] [--dense-trials 24] [--demo-seeds 3]
        [--work DIR] [--quick]
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
from pathlib import Path
from typing import Any

import numpy as np

SWEEP = str(Path(sys.executable).with_name("sweep"))
# The reference the fast preset was designed against: the demo before issue 33 (the
# built-in demo now tunes one LR over another range and evaluates a moving average).
DENSE = "batchsize_vs_steps_previous"
PRESETS = ["--config-dir", str(Path(__file__).resolve().parent / "presets")]
TARGET = 1.10
TARGETS = {"median_error": 0.15, "p90_error": 0.35, "compute_fraction": 0.30}


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run_study(run_dir: Path, conf: str, overrides: list[str]) -> float:
    """`sweep run` (resuming a run dir that exists); returns its wall time in seconds."""
    cmd = [SWEEP, "run", f"conf={conf}", f"run_dir={run_dir}", *overrides]
    start = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stderr[-4000:]}")
    return time.monotonic() - start


def study_answer(run_dir: Path) -> dict[str, Any]:
    """B_crit (with its interval) and the compute of a finished study, from its curves."""
    from stepscale.analysis.load import load
    from stepscale.analysis.replay import replay

    rep = replay(load(run_dir), ["full"], target=TARGET).to_dict()
    ref = rep["reference"]["all"]
    return {
        "b_crit": ref["b_crit"],
        "b_crit_ci": ref.get("b_crit_ci"),
        "s_min": ref["s_min"],
        "batch_sizes": ref["batch_sizes"],
        "examples": rep["study_compute"]["all"]["examples"],
        "steps": rep["study_compute"]["all"]["steps"],
        "trials": rep["study_compute"]["all"]["trials"],
    }


def _errors(values: list[float], ref: float) -> list[float]:
    return [abs(v / ref - 1) if v is not None and math.isfinite(v) else math.inf for v in values]


def _summary(errors: list[float], fractions: list[float]) -> dict[str, Any]:
    e = np.asarray(errors, dtype=float)
    # A failed fit is an infinite error: quantiles then without interpolation (inf − inf).
    method = "linear" if np.isfinite(e).all() else "inverted_cdf"
    return {
        "error_median": float(np.quantile(e, 0.5, method=method)),
        "error_p90": float(np.quantile(e, 0.9, method=method)),
        "error_max": float(e.max()),
        "compute_fraction_median": float(np.median(fractions)),
        "compute_fraction_max": float(np.max(fractions)),
    }


def live_runs(
    work: Path, conf: str, seeds: list[int], overrides: list[str], dense: dict[str, Any]
) -> dict[str, Any]:
    """One study per sampler seed: each one's B_crit, compute fraction and wall time."""
    rows = []
    for seed in seeds:
        run_dir = work / f"{conf}-s{seed}"
        wall = run_study(run_dir, conf, [f"sampler.seed={seed}", *overrides])
        ans = study_answer(run_dir)
        extra = {}
        adaptive = run_dir / "adaptive.json"
        if adaptive.exists():
            extra["adaptive_stopped"] = json.loads(adaptive.read_text()).get("stopped")
        rows.append(
            {
                "seed": seed,
                "b_crit": ans["b_crit"],
                "b_crit_ci": ans["b_crit_ci"],
                "batch_sizes": ans["batch_sizes"],
                "trials": ans["trials"],
                "compute_fraction": ans["examples"] / dense["examples"],
                "steps_fraction": ans["steps"] / dense["steps"],
                "wall_s": round(wall, 1),
                **extra,
            }
        )
        print(f"{conf} seed {seed}: {json.dumps(rows[-1])}", file=sys.stderr, flush=True)
    errors = _errors([r["b_crit"] for r in rows], dense["b_crit"])
    for r, e in zip(rows, errors, strict=True):
        r["error"] = e
    return {
        "conf": conf,
        "overrides": overrides,
        "runs": rows,
        **_summary(errors, [r["compute_fraction"] for r in rows]),
    }


def replayed(dense_dir: Path, protocol: str, draws: int) -> dict[str, Any]:
    """The dense study replayed under ``protocol``: compute fraction and B_crit error."""
    from stepscale.analysis.load import load
    from stepscale.analysis.replay import replay

    r = replay(load(dense_dir), [protocol], target=TARGET, draws=draws).to_dict()["protocols"][0]
    spread = r.get("spread_q10_q90", {})
    return {
        "protocol": protocol,
        "draws": r["draws"],
        "compute_fraction": r["compute_fraction"]["examples"],
        "compute_fraction_q10_q90": spread.get("examples"),
        "b_crit": r["b_crit"],
        "b_crit_q10_q90": spread.get("b_crit"),
        "error_median": r["b_crit_error"]["median"],
        "error_p90": r["b_crit_error"]["p90"],
        "batch_sizes": r.get("batch_sizes", r.get("batch_sizes_first_draw")),
    }


def compare(live: dict[str, Any], rep: dict[str, Any]) -> dict[str, Any]:
    """How closely a replay predicted the live runs of its protocol."""
    fl, fr = live["compute_fraction_median"], rep["compute_fraction"]
    return {
        "live_compute_fraction_median": fl,
        "replay_compute_fraction": fr,
        "compute_ratio_live_over_replay": fl / fr if fr else None,
        "live_error_median": live["error_median"],
        "replay_error_median": rep["error_median"],
        "live_error_p90": live["error_p90"],
        "replay_error_p90": rep["error_p90"],
        "live_b_crit": [r["b_crit"] for r in live["runs"]],
        "replay_b_crit_median_q10_q90": [rep["b_crit"], *(rep["b_crit_q10_q90"] or [])],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=10, help="cheap-protocol runs (sampler seeds)")
    ap.add_argument("--dense-trials", type=int, default=24)
    ap.add_argument("--demo-seeds", type=int, default=3, help="live runs of the 8-trial demo")
    ap.add_argument("--draws", type=int, default=200, help="draws of random replays")
    ap.add_argument("--work", type=Path, default=None, help="keep the run dirs here (resumes)")
    ap.add_argument("--quick", action="store_true", help="tiny settings: checks the script")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bcrit-efficiency-"))
    work.mkdir(parents=True, exist_ok=True)
    dense_trials, seeds, demo_seeds = args.dense_trials, args.seeds, args.demo_seeds
    cheap_over: list[str] = []
    demo_trials = 8
    if args.quick:
        dense_trials, seeds, demo_seeds, demo_trials = 3, 2, 1, 2
        cheap_over = ["budget.trials_per_point=2", "scientific.batch_size.adaptive.max_points=4"]
    load_start = _load()
    started = time.monotonic()

    dense_dir = work / "dense"
    dense_wall = run_study(
        dense_dir, DENSE, [*PRESETS, f"budget.trials_per_point={dense_trials}", "name=dense"]
    )
    dense = study_answer(dense_dir)
    dense["wall_s"] = round(dense_wall, 1)
    dense["trials_per_point"] = dense_trials
    print(f"dense: {json.dumps(dense)}", file=sys.stderr, flush=True)

    # Seed 0 is the presets as they are (sampler.seed defaults to the study seed, 0).
    cheap = live_runs(work, "batchsize_vs_steps_fast", list(range(seeds)), cheap_over, dense)
    demo = live_runs(
        work,
        DENSE,
        list(range(demo_seeds)),
        [*PRESETS, f"budget.trials_per_point={demo_trials}"],
        dense,
    )
    # The cheap protocol without transfer (the replay cannot re-propose trials) …
    cheap_trials = 2 if args.quick else 8
    n_max = 4 if args.quick else 5
    rep_cheap = [
        replayed(dense_dir, f"adaptive:{n_max}+first:{cheap_trials}+deadline:1.5", 1),
        replayed(dense_dir, f"adaptive:{n_max}+random:{cheap_trials}+deadline:1.5", args.draws),
    ]
    # … and fewer trials per point, which the live demo runs are.
    rep_demo = [
        replayed(dense_dir, f"first:{demo_trials}", 1),
        replayed(dense_dir, f"random:{demo_trials}", args.draws),
    ]
    met = (
        cheap["error_median"] <= TARGETS["median_error"]
        and cheap["error_p90"] <= TARGETS["p90_error"]
        and cheap["compute_fraction_median"] <= TARGETS["compute_fraction"]
    )
    out = {
        "benchmark": "bcrit_efficiency",
        "quick": args.quick,
        "target_loss": TARGET,
        "targets": TARGETS,
        "met": met,
        "dense": dense,
        "cheap": cheap,
        "demo_8_trials": demo,
        "replay_vs_live": {
            "cheap_protocol": [compare(cheap, r) | {"protocol": r["protocol"]} for r in rep_cheap],
            "fewer_trials": [compare(demo, r) | {"protocol": r["protocol"]} for r in rep_demo],
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
