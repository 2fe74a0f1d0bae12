"""Does the demo's answer hold across training seeds? Runs one study at several seeds
(``sweep run conf=CONF seed=K``: the training seed, and with it the sampler's) and prints,
per seed, the first screen's B_crit and interval (with the part that is the training
seed's, estimated from the trials' scatter: docs/report.md, "Settled across seeds") and how
many of the other seeds' B_crit fall inside that interval, and inside the fit's own interval
alone; a study that says its answer is not settled across seeds is counted as saying so.

    python benchmarks/seed_spread.py [--conf batchsize_vs_steps] [--seeds 0,1,2,3,4]
        [--jobs 2] [--work DIR] [--quick]

A run dir that exists is resumed (a finished one is read, with the wall time it took when
it ran). Prints one JSON document, with the machine's load average before and after.
Takes about 12 minutes for the demo's five seeds on a quiet 2-core machine; ``--quick``
checks the script on smoke-sized studies in minutes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bcrit_efficiency import run_study  # `sweep run`, timed once (benchmarks/ is on the path)

SWEEP = str(Path(sys.executable).with_name("sweep"))
QUICK = [
    "scientific.batch_size.values=[8,16,32,64]", "budget.trials_per_point=5",
    "budget.max_steps=60", "data.eval_examples=64",
]  # fmt: skip


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def first_screen(run_dir: Path) -> dict[str, Any]:
    """The first screen's answer of a finished study: B_crit, its interval, the seed's part
    and whether it is settled across seeds."""
    from stepscale.analysis.analyze import analyze
    from stepscale.analysis.headline import headline
    from stepscale.analysis.load import load

    h = headline(analyze(load(run_dir)))
    g = h.groups[0]
    seed = g.seed_part
    return {
        "b_crit": g.value,
        "interval": list(g.ci),
        "fit_interval": list(g.fit_ci) if g.fit_ci is not None else None,
        "seed_interval": list(seed.ci) if seed is not None else None,
        "seed_share": seed.share if seed is not None else None,
        "seed_sd_log_bcrit": seed.sd_log_bcrit if seed is not None else None,
        "seed_bcrits": dict(zip(seed.seeds, seed.b_crits, strict=True))
        if seed is not None
        else None,
        "settled_across_seeds": seed.settled if seed is not None else None,
        "determined": h.determined,
        "text": h.lines()[0],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conf", default="batchsize_vs_steps")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--jobs", type=int, default=2, help="studies run at once")
    ap.add_argument("--work", type=Path, default=Path("runs/seed_spread"))
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    overrides = QUICK if args.quick else []
    work = args.work / (args.conf + ("_quick" if args.quick else ""))
    work.mkdir(parents=True, exist_ok=True)
    load_before = _load()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        walls = dict(
            zip(
                seeds,
                pool.map(
                    lambda k: run_study(work / f"seed{k}", args.conf, [f"seed={k}", *overrides]),
                    seeds,
                ),
                strict=True,
            )
        )
    rows = {k: first_screen(work / f"seed{k}") | {"wall_s": round(walls[k], 1)} for k in seeds}
    for k, row in rows.items():
        lo, hi = row["interval"]
        others = [r["b_crit"] for j, r in rows.items() if j != k and math.isfinite(r["b_crit"])]
        row["others_inside"] = sum(lo <= b <= hi for b in others)
        if row["fit_interval"] is not None:
            flo, fhi = row["fit_interval"]
            row["others_inside_fit_interval"] = sum(flo <= b <= fhi for b in others)
        row["others"] = len(others)
        row["holds"] = row["others_inside"] == len(others) or row["settled_across_seeds"] is False
    out = {
        "conf": args.conf,
        "overrides": overrides,
        "seeds": rows,
        "every_seed_holds": all(r["holds"] for r in rows.values()),
        "load_before": load_before,
        "load_after": _load(),
    }
    print(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()
