"""Has the ladder predicted? Prediction error and regret on the held-out rung against the
ladder's compute (fewer rungs, fewer trials per point), over seeds.

Per seed, a full ladder is run (``--task text``: ``sweep run conf=ladder_shakespeare``
or, with ``--quick``, ``ladder_shakespeare_quick``, seed S, live on this machine;
``--task synthetic``: the known-answer task of `stepscale.models.ladder_task` sampled in
process, LRs drawn log-uniformly per point as a sampler would, noise 0.01). Then its
records are cut down without new compute:

- ``all``: every rung and trial;
- ``trials=k``: the first k trials of every point (by trial number);
- ``no smallest N`` / ``no smallest D``: the rungs of the smallest model / horizon dropped;

and for each, the held-out check (`stepscale.analysis.fits.ladder.holdout_check`: the
largest rung held out, the laws of the others predict it) gives the η* ratio measured /
predicted, the B_opt ratio, the regret of the predicted settings and of reusing the
smallest rung's settings. Compute is the tokens trained by the trials used, as a fraction
of the full ladder's (the held-out rung's trials included: they measure the answer).

Acceptance (issue 42) on the text ladder over ≥ 3 seeds: the held-out η* within a factor
1.5 of the predicted, the loss at the predicted settings within 1% of the rung's best,
less regret than reusing the smallest rung's settings. Prints one JSON document with the
machine's load average. A run dir that exists is resumed (a finished one is read). The regret
here is read off the trials, against the rung's best estimated by the same smoother as the
loss at the settings (`smoothed_best`; against the best single trial beside it); `benchmarks/ladder_reruns.py` measures it by training the
held-out rung's settings again at several seeds.

    python benchmarks/ladder.py --task text --seeds 3 [--first-seed S] [--quick] [--work DIR]
    python benchmarks/ladder.py --task synthetic --seeds 10
    python benchmarks/ladder.py --run-dirs RUN_DIR … (finished ladders, one per seed)
"""

from __future__ import annotations

import argparse
import itertools
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
import yaml

from stepscale.analysis.fits.ladder import (
    LOSS_TOLERANCE,
    LR_FACTOR,
    HoldoutCheck,
    LadderTrials,
    holdout_check,
)

SWEEP = str(Path(sys.executable).with_name("sweep"))


def _load() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def text_ladder(seed: int, work: Path, quick: bool) -> tuple[LadderTrials, np.ndarray, float]:
    """Run (or resume) the text ladder of ``seed``; its trials, their trial numbers and the
    wall time of the run."""
    conf = "ladder_shakespeare_quick" if quick else "ladder_shakespeare"
    run = work / f"{conf}_seed{seed}"
    start = time.monotonic()
    res = subprocess.run(
        [SWEEP, "run", f"conf={conf}", f"run_dir={run}", f"seed={seed}"],
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - start
    if res.returncode != 0:
        raise SystemExit(f"sweep run failed ({res.returncode}): {res.stderr[-2000:]}")
    trials, numbers = read_ladder(run)
    return trials, numbers, wall


def read_ladder(run: Path) -> tuple[LadderTrials, np.ndarray]:
    """A finished ladder's trials and their trial numbers (aligned)."""
    from stepscale.analysis.ladder import ladder_trials
    from stepscale.analysis.load import load

    ds = load(run)
    trials, _ = ladder_trials(ds)
    from stepscale.rundir import COMPLETE

    done = ds["state"].values == COMPLETE
    numbers = np.asarray(ds["number"].values, dtype=float)[done]
    numbers = numbers[np.isfinite(np.asarray(ds["final_eval_loss"].values, dtype=float)[done])]
    return trials, numbers


def study_seed(run: Path) -> int:
    """The seed a finished ladder ran with (its run dir's config.yaml)."""
    return int(yaml.safe_load((run / "config.yaml").read_text()).get("seed") or 0)


def synthetic_ladder(seed: int, trials_per_point: int = 6) -> tuple[LadderTrials, np.ndarray]:
    """The known-answer ladder, LRs log-uniform in [1e-3, 0.3] per point, noise 0.01."""
    from stepscale.models.ladder_task import LadderLaw, final_loss

    law = LadderLaw()
    rng = np.random.default_rng(seed)
    rows, numbers = [], []
    for n, d in itertools.product((1e5, 4e5, 1.6e6), (2e6, 8e6, 3.2e7)):
        for b in (16, 32, 64, 128, 256, 512):
            for k in range(trials_per_point):
                lr = math.exp(rng.uniform(math.log(1e-3), math.log(0.3)))
                rows.append((n, d, b, lr, final_loss(law, n, d, b, lr) + rng.normal(0, 0.01)))
                numbers.append(k)
    return LadderTrials.of(*np.array(rows).T), np.array(numbers, dtype=float)


def _subset(t: LadderTrials, keep: np.ndarray) -> LadderTrials:
    return LadderTrials.of(t.n[keep], t.d[keep], t.b[keep], t.lr[keep], t.loss[keep])


def variants(t: LadderTrials, numbers: np.ndarray) -> dict[str, np.ndarray]:
    """Name → the trials kept: all, the first k per point, without the smallest N or D."""
    out = {"all": np.ones(t.n.size, dtype=bool)}
    most = int(numbers.max()) + 1 if numbers.size else 0
    for k in range(3, most):
        out[f"trials={k}"] = numbers < k
    if np.unique(t.n).size > 2:
        out["no smallest N"] = t.n != t.n.min()
    if np.unique(t.d).size > 2:
        out["no smallest D"] = t.d != t.d.min()
    return out


def _vs(loss: float, best: float) -> float | None:
    return max(0.0, loss - best) / abs(best) if math.isfinite(loss) and best else None


def _row(c: HoldoutCheck, compute: float) -> dict[str, Any]:
    return {
        "compute": compute,
        "verdict": c.verdict,
        "lr_ratio": c.lr_ratio,
        "batch_ratio": c.batch_ratio,
        "regret": c.regret,
        "regret_smallest": c.regret_smallest,
        # the same losses against the rung's best single trial (the winner's curse left in)
        "regret_vs_best_trial": _vs(c.loss_at_predicted, c.loss_best_trial),
        "regret_smallest_vs_best_trial": _vs(c.loss_at_smallest, c.loss_best_trial),
        "lr_in_interval": c.lr_in_interval,
        "reasons": list(c.reasons),
    }


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def med(key: str) -> float | None:
        v = [r[key] for r in rows if r[key] is not None and math.isfinite(r[key])]
        return float(np.median(v)) if v else None

    lr_ok = [r for r in rows if r["lr_ratio"] and 1 / LR_FACTOR <= r["lr_ratio"] <= LR_FACTOR]
    regret_ok = [r for r in rows if r["regret"] is not None and r["regret"] <= LOSS_TOLERANCE]

    def better(suffix: str) -> int:
        a, b = f"regret{suffix}", f"regret_smallest{suffix}"
        return sum(r[a] is not None and r[b] is not None and r[a] < r[b] for r in rows)

    curse_ok = [
        r
        for r in rows
        if r["regret_vs_best_trial"] is not None and r["regret_vs_best_trial"] <= LOSS_TOLERANCE
    ]
    return {
        "seeds": len(rows),
        "compute_median": med("compute"),
        "lr_ratio_median": med("lr_ratio"),
        "lr_log_error_max": max(
            (abs(math.log(r["lr_ratio"])) for r in rows if r["lr_ratio"] and r["lr_ratio"] > 0),
            default=None,
        ),
        "batch_ratio_median": med("batch_ratio"),
        "regret_median": med("regret"),
        "regret_smallest_median": med("regret_smallest"),
        "regret_vs_best_trial_median": med("regret_vs_best_trial"),
        "accept": {
            f"lr within {LR_FACTOR}x": f"{len(lr_ok)}/{len(rows)}",
            f"regret <= {100 * LOSS_TOLERANCE:g}%": f"{len(regret_ok)}/{len(rows)}",
            "less regret than the smallest rung's settings": f"{better('')}/{len(rows)}",
        },
        "against the best single trial": {
            f"regret <= {100 * LOSS_TOLERANCE:g}%": f"{len(curse_ok)}/{len(rows)}",
            "less regret than the smallest rung's settings": (
                f"{better('_vs_best_trial')}/{len(rows)}"
            ),
        },
        "verdicts": {v: sum(r["verdict"] == v for r in rows) for v in {r["verdict"] for r in rows}},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", choices=("text", "synthetic"), default="synthetic")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=0, help="seeds first … first + seeds − 1")
    ap.add_argument("--quick", action="store_true", help="text: ladder_shakespeare_quick")
    ap.add_argument("--work", type=Path, default=None, help="keep the run dirs here (resumes)")
    ap.add_argument("--n-boot", type=int, default=300)
    ap.add_argument(
        "--run-dirs",
        type=Path,
        nargs="+",
        default=None,
        help="analyse these finished ladders (one per seed) instead of running any",
    )
    args = ap.parse_args()
    work = args.work or (
        Path(".") if args.run_dirs else Path(tempfile.mkdtemp(prefix="ladder_bench_"))
    )
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    per_variant: dict[str, list[dict[str, Any]]] = {}
    walls = []
    load_before = _load()
    runs = args.run_dirs or []
    seeds = (
        [study_seed(r) for r in runs]
        if runs
        else list(range(args.first_seed, args.first_seed + args.seeds))
    )
    for i, seed in enumerate(seeds):
        if runs:
            t, numbers = read_ladder(runs[i])
        elif args.task == "text":
            t, numbers, wall = text_ladder(seed, work, args.quick)
            walls.append(wall)
        else:
            t, numbers = synthetic_ladder(seed)
        tokens = t.d  # a trial trains D tokens: compute is the sum of D over the trials used
        for name, keep in variants(t, numbers).items():
            sub = _subset(t, keep)
            check = holdout_check(sub, n_boot=args.n_boot, seed=seed)
            row = _row(check, float(tokens[keep].sum() / tokens.sum()))
            per_variant.setdefault(name, []).append({"seed": seed, **row})
    out = {
        "task": args.task,
        "quick": args.quick,
        "work": str(work),
        "load_before": load_before,
        "load_after": _load(),
        "wall_s": walls,
        "variants": {
            name: {"summary": _summary(rows), "seeds": rows} for name, rows in per_variant.items()
        },
    }
    print(json.dumps(out, indent=2, default=lambda x: None))


if __name__ == "__main__":
    main()
