"""What does the orchestrator cost over training the same runs in a plain loop?

The same six trainings (a tiny GPT, six learning rates; 560 steps ≈ 23 s of training each on
a quiet 2-core machine, `--steps 950` ≈ 40 s) run

1. in a plain loop in one Python process (`models.train.train` six times), and
2. through `sweep run` with the local launcher at parallelism 1 (a process per trial,
   Optuna journal storage, heartbeats, files),
3. and, for information, at parallelism 2.

Process start, imports and compiles are included everywhere; the persistent compilation
cache is warmed once beforehand so neither side pays a cold compile. Ends with one JSON
line: both wall times and their ratio (target ≤ 1.10).

    python benchmarks/orchestration_overhead.py [--steps 560] [--runs 6]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STUDY = """# @package _global_
# Benchmark: six fixed trainings (one per LR), nothing tuned.
defaults:
  - override /model: gpt
  - override /data: markov
model:
  size: tiny
data:
  vocab_size: 16
  order: 1
  seq_len: 64
  global_batch: 64
  eval_examples: 256
  eval_batch: 64
schedule:
  warmup_steps: 10
train:
  log_every: 10
  eval_every: 50
  checkpoint_every: 200
  devices: 1
scientific:
  lr:
    path: optimizer.lr
    values: {lrs}
budget:
  trials_per_point: 1
  max_steps: {steps}
objective:
  kind: final_eval_loss
"""

PLAIN_LOOP = """
import sys
from pathlib import Path
from stepscale.sweeps.compose import prepare_study
from stepscale.sweeps.space import build_space
from stepscale.sweeps.trials import trial_config
from stepscale.sweeps.trainers import BUILTIN, TrainerSpec
from stepscale.reporters import JsonlReporter
from stepscale.sweeps.builtin import configure_compile_cache, run

config_dir, out, cache = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
_, cfg, _ = prepare_study(["conf=bench_overhead", f"train.compile_cache_dir={cache}"], config_dir)
space = build_space(cfg)
configure_compile_cache(cache)
for point in space.points:
    folder = out / point.label
    tree = trial_config(cfg, TrainerSpec(BUILTIN), space, point, {}, cfg.seed, folder)
    run(tree, JsonlReporter(folder), folder)
"""


def timed(cmd: list[str], env: dict[str, str]) -> float:
    """Wall seconds of a command (which must succeed)."""
    start = time.perf_counter()
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{cmd[:3]} failed:\n{res.stderr[-3000:]}")
    return time.perf_counter() - start


def main() -> None:
    """Run the three variants and print the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--steps", type=int, default=560, help="steps per training (560 ≈ 23 s on 2 cores)"
    )
    parser.add_argument("--runs", type=int, default=6)
    args = parser.parse_args()
    sweep = str(Path(sys.executable).with_name("sweep"))
    lrs = [round(1e-3 * 1.5**i, 6) for i in range(args.runs)]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "conf" / "conf").mkdir(parents=True)
        (root / "conf" / "conf" / "bench_overhead.yaml").write_text(
            STUDY.format(lrs=lrs, steps=args.steps)
        )
        config_dir, cache = str(root / "conf"), str(root / "cache")
        common = [
            "conf=bench_overhead",
            "--config-dir",
            config_dir,
            f"train.compile_cache_dir={cache}",
        ]
        # Warm the persistent cache (a short study with the same shapes), then time.
        timed([sweep, "run", *common, "budget.max_steps=20", f"run_dir={root / 'warm'}"], env)
        plain = timed(
            [sys.executable, "-c", PLAIN_LOOP, config_dir, str(root / "plain"), cache], env
        )
        print(f"plain loop: {plain:.1f} s", file=sys.stderr)
        p1 = timed([sweep, "run", *common, "parallelism=1", f"run_dir={root / 'p1'}"], env)
        print(f"sweep run, parallelism 1: {p1:.1f} s", file=sys.stderr)
        p2 = timed([sweep, "run", *common, "parallelism=2", f"run_dir={root / 'p2'}"], env)
        print(f"sweep run, parallelism 2: {p2:.1f} s", file=sys.stderr)
    result = {
        "runs": args.runs,
        "steps_per_run": args.steps,
        "plain_loop_s": round(plain, 2),
        "sweep_parallelism_1_s": round(p1, 2),
        "sweep_parallelism_2_s": round(p2, 2),
        "ratio": round(p1 / plain, 3),
    }
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
