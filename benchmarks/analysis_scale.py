"""How long does the analysis of a large study take?

Writes a synthetic run directory (docs/run-dir.md) of 2,000 trials × 500 logged steps —
8 batch sizes × 250 tuned trials, train metrics every 10 steps, eval loss and noise scale
every 20, a known S(B), some diverged trials — then times, on the same machine:

- ``load``: run dir → xarray Dataset (``analysis.load``);
- ``save_nc``: the Dataset → results.nc;
- ``fits``: every fit of the study (``analysis.study.analyze``: steps to target at 5
  targets, S(B) with 1000 bootstrap replicates per target, optimal LR, noise scale);
- ``figures``: every figure record drawn and written as PNG;
- ``report``: the whole `sweep report` (load + fits + figures + all files).

Ends with one JSON line of the times; the target is report ≤ 30 s on 2 CPU cores.

    python benchmarks/analysis_scale.py [--points 8] [--trials-per-point 250] [--steps 500]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from run_dirs import Spec, make_run_dir

from stepscale.analysis import figures
from stepscale.analysis.analyze import analyze
from stepscale.analysis.load import load, save
from stepscale.analysis.report import write_report

TARGET_S = 30.0


def main() -> None:
    """Build the run dir, time each stage, print one JSON line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=8, help="batch sizes (from 16, doubling)")
    ap.add_argument("--trials-per-point", type=int, default=250)
    ap.add_argument("--steps", type=int, default=500, help="logged steps per trial")
    ap.add_argument("--keep", metavar="DIR", help="write the run dir here and keep it")
    args = ap.parse_args()

    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="stepscale-bench-"))
    run = root / "run"
    if run.exists():
        shutil.rmtree(run)
    log_every = 10
    spec = Spec(
        name="analysis_scale",
        batches=tuple(16 * 2**i for i in range(args.points)),
        lr_multipliers=tuple(np.geomspace(0.25, 16.0, args.trials_per_point).tolist()),
        horizon=(args.steps - 1) * log_every,
        log_every=log_every,
        eval_every=2 * log_every,
    )
    times: dict[str, float] = {}
    try:
        t0 = time.perf_counter()
        make_run_dir(run, spec)
        times["write_s"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        ds = load(run)
        times["load_s"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        save(ds, root / "results.nc")
        times["save_nc_s"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        a = analyze(ds)
        times["fits_s"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        figures.render(figures.build(a, ds), root / "figures")
        times["figures_s"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        write_report(run)
        times["report_s"] = time.perf_counter() - t0
        sizes = {"trials": int(ds.sizes["trial"]), "steps": int(ds.sizes["step"])}
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    print(
        f"{sizes['trials']} trials × {sizes['steps']} steps: load {times['load_s']:.2f} s, "
        f"fits {times['fits_s']:.2f} s, figures {times['figures_s']:.2f} s, whole report "
        f"{times['report_s']:.2f} s (target ≤ {TARGET_S:.0f} s)",
        file=sys.stderr,
    )
    out = {
        **sizes,
        "cpus": os.cpu_count(),
        **{k: round(v, 3) for k, v in times.items()},
        "target_s": TARGET_S,
        "within_target": times["report_s"] <= TARGET_S,
    }
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
