"""Same config and seed, same trials and answer at any parallelism? Runs one study at
parallelism 1, 2 and 4, then at 2 beside a CPU burner (one busy process per core), one
after another, and prints per run the trials' fingerprint (`analysis.fingerprint`: each
trial's point, number, nuisance values, state, told objective and steps trained), B_crit
with its interval, the wall time and the load average (docs/science.md, "The same trials
at any parallelism").

    python benchmarks/repro_parallelism.py [--conf batchsize_vs_steps_fast] [--seed 0]
        [--parallelism 1,2,4] [--work DIR] [--quick]

``--conf smoke`` and the fast demo are the presets to measure; ``--quick`` runs a
smoke-sized copy of the fast demo (adaptive batch sizes, transfer, deadline pruning: the
copy tests/test_ordered.py runs) in minutes. A run dir that exists is reused. Prints one
JSON document; ``same`` says whether every run gave the same fingerprint and B_crit.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SWEEP = str(Path(sys.executable).with_name("sweep"))
AXIS = "scientific.batch_size.adaptive"
QUICK = [
    "scientific.batch_size.values=[]", f"{AXIS}.low=4", f"{AXIS}.high=32",
    f"{AXIS}.max_points=3", "budget.trials_per_point=4", "budget.max_steps=30",
    "sampler.transfer=true", "objective.stop_at_target=true", "pruner.name=deadline",
    "pruner.deadline_factor=1.0", "train.eval_every=5", "train.devices=1",
    "nuisance.lr.low=1e-4", "budget.no_progress_by=null",
]  # fmt: skip
BURN = "while True: pass"


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run(run_dir: Path, conf: str, seed: int, parallelism: int, extra: list[str]) -> dict:
    """One `sweep run`; its wall time and the load average before and after."""
    cmd = [SWEEP, "run", f"conf={conf}", f"seed={seed}", f"parallelism={parallelism}"]
    cmd += [f"run_dir={run_dir}", *extra]
    before = _load()
    start = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stderr[-4000:]}")
    return {
        "wall_s": round(time.monotonic() - start, 1),
        "load_before": before,
        "load_after": _load(),
    }


def answer(run_dir: Path) -> dict[str, Any]:
    """The trials' fingerprint and the first screen's B_crit of a finished study."""
    from stepscale.analysis.analyze import analyze
    from stepscale.analysis.fingerprint import params_hash, trial_rows
    from stepscale.analysis.headline import headline
    from stepscale.analysis.load import load

    g = headline(analyze(load(run_dir))).groups[0]
    return {
        "params_hash": params_hash(run_dir),
        "trials": len(trial_rows(run_dir)),
        "b_crit": g.value,
        "interval": list(g.ci),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conf", default="batchsize_vs_steps_fast")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--parallelism", default="1,2,4")
    ap.add_argument("--work", type=Path, default=Path("runs/repro_parallelism"))
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    conf = "smoke" if args.quick else args.conf
    extra = QUICK if args.quick else []
    work = args.work / (args.conf + ("_quick" if args.quick else "")) / f"seed{args.seed}"
    work.mkdir(parents=True, exist_ok=True)
    plan = [(int(p), False) for p in args.parallelism.split(",")] + [(2, True)]
    rows = []
    for parallelism, burn in plan:
        name = f"p{parallelism}" + ("_burner" if burn else "")
        burners = (
            [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(os.cpu_count() or 1)]
            if burn
            else []
        )
        try:
            timing = run(work / name, conf, args.seed, parallelism, extra)
        finally:
            for b in burners:
                b.kill()
                b.wait()
        rows.append({"run": name, "parallelism": parallelism, "burner": burn, **timing})
        rows[-1] |= answer(work / name)
    same = len({(r["params_hash"], r["b_crit"], tuple(r["interval"])) for r in rows}) == 1
    out = {"conf": args.conf, "quick": args.quick, "seed": args.seed, "runs": rows, "same": same}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
