"""The built-in preset against a PyTorch implementation of the same model, side by side.

`sweep train conf=train_shakespeare_char` (JAX, the built-in trainer) and
`examples/char_gpt/train.py` (a plain PyTorch script) train the same character GPT on Tiny
Shakespeare with the same setup: 4 layers, 4 heads, width 128, context 64, batch 12, AdamW
(β2 0.99, weight decay 0.1, clip 1.0), LR 1e-3 with a linear warmup and cosine decay to 1e-4,
no dropout, tied embeddings, an evaluation every 250 steps. (The PyTorch script keeps its
linear layers' and norms' biases, which the preset leaves out, and estimates its losses on 20
random batches of 12 from each split where the preset evaluates 256 fixed held-out windows.)

They run alternately on one machine, PyTorch first — P S P S … for ``--pairs`` pairs — each
a fresh process timed from its start to its exit, so imports, data loading, compilation and
evaluations are all counted. The built-in runs share a JAX compile cache that starts empty:
the first built-in run compiles from nothing (``cold``), the later ones find its programs
(``warm``), as a user's second `sweep train` finds the default cache
``~/.cache/stepscale/jax``. PyTorch gets as many threads as the machine has cores
(``--torch-threads``); JAX's CPU backend uses them all.

It prints a line per run and then one JSON line: every run's wall and CPU time, cache state,
final eval loss and the load average around it; the medians; and ``speed_ratio`` = PyTorch's
median wall time / the preset's median wall time (above 1: the preset is faster), beside
``speed_ratio_cold`` (the first built-in run's) and ``speed_ratio_warm`` (the warm runs').

    python benchmarks/vs_pytorch.py [--steps 2000] [--pairs 2] [--keep DIR]

``--steps N`` shortens both runs to N steps (warmup and evaluation interval shrunk to fit),
to check the benchmark quickly. Timings depend on what else the machine runs: quote the load
average printed beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "char_gpt" / "train.py"
CORPUS = ROOT / "models" / "data" / "corpora" / "tinyshakespeare.txt.gz"
SWEEP = str(Path(sys.executable).with_name("sweep"))
VAL_LOSS = re.compile(r"^step (\d+): train loss [0-9.]+, val loss ([0-9.]+)", re.M)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def schedule(steps: int) -> tuple[int, int]:
    """Warmup steps and evaluation interval: the preset's 100 and 250, shrunk for short runs."""
    return min(100, max(1, steps // 10)), min(250, steps)


def _timed(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, str]:
    cpu0 = _children_cpu()
    t0 = time.perf_counter()
    res = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(args[:3])} … failed ({res.returncode}):\n{res.stderr[-3000:]}")
    return wall, _children_cpu() - cpu0, res.stdout


def run_pytorch(out_dir: Path, steps: int, threads: int) -> dict[str, Any]:
    """`examples/char_gpt/train.py` with the preset's setup; wall, CPU and final val loss."""
    warmup, every = schedule(steps)
    args = [
        sys.executable, str(SCRIPT), f"--data_path={CORPUS}", f"--out_dir={out_dir}",
        "--batch_size=12", "--block_size=64", "--n_layer=4", "--n_head=4", "--n_embd=128",
        "--dropout=0.0", "--learning_rate=0.001", f"--max_iters={steps}",
        "--weight_decay=0.1", "--beta1=0.9", "--beta2=0.99", "--grad_clip=1.0",
        f"--warmup_iters={warmup}", f"--lr_decay_iters={steps}", "--min_lr=0.0001",
        f"--eval_interval={every}", "--eval_iters=20", f"--threads={threads}",
    ]  # fmt: skip
    load0 = _load()
    wall, cpu, out = _timed(args, SCRIPT.parent, dict(os.environ))
    losses = VAL_LOSS.findall(out)
    final = float(losses[-1][1]) if losses and int(losses[-1][0]) == steps else None
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "eval_loss": final,
            "load": [load0, _load()]}  # fmt: skip


def run_preset(run_dir: Path, steps: int, cache: Path) -> dict[str, Any]:
    """`sweep train conf=train_shakespeare_char` for `steps` steps; wall, CPU, final eval loss."""
    warmup, every = schedule(steps)
    args = [
        SWEEP, "train", "conf=train_shakespeare_char", f"run_dir={run_dir}",
        f"train.max_steps={steps}", f"schedule.warmup_steps={warmup}",
        f"train.eval_every={every}", f"train.log_every={every}",
        f"train.compile_cache_dir={cache}",
    ]  # fmt: skip
    cold = not any(cache.iterdir()) if cache.is_dir() else True
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one CPU device, as a user
    load0 = _load()
    wall, cpu, _ = _timed(args, ROOT, env)
    status = json.loads((run_dir / "status.json").read_text())
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "eval_loss": status.get("final_eval_loss"), "cache": "cold" if cold else "warm",
            "load": [load0, _load()]}  # fmt: skip


def _ratio(a: float, b: float) -> float:
    return round(a / b, 3)


def main() -> None:
    """Alternate the two, print each run and the JSON summary."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000, help="steps of each run (2000: the preset)")
    ap.add_argument("--pairs", type=int, default=2, help="PyTorch + preset pairs, alternating")
    ap.add_argument("--torch-threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--keep", type=Path, default=None, help="keep the run dirs here")
    args = ap.parse_args()
    if args.steps < 1 or args.pairs < 1:
        ap.error("--steps and --pairs must be at least 1")
    root = args.keep or Path(tempfile.mkdtemp(prefix="vs_pytorch_"))
    root.mkdir(parents=True, exist_ok=True)
    cache = root / "jax_cache"
    cache.mkdir(exist_ok=True)
    torch_runs: list[dict[str, Any]] = []
    preset_runs: list[dict[str, Any]] = []
    for i in range(args.pairs):
        torch_runs.append(run_pytorch(root / f"torch{i}", args.steps, args.torch_threads))
        print(f"pytorch run {i + 1}: {json.dumps(torch_runs[-1])}", flush=True)
        preset_runs.append(run_preset(root / f"preset{i}", args.steps, cache))
        print(f"preset  run {i + 1}: {json.dumps(preset_runs[-1])}", flush=True)
    torch_median = statistics.median(r["wall_s"] for r in torch_runs)
    preset_median = statistics.median(r["wall_s"] for r in preset_runs)
    warm = [r["wall_s"] for r in preset_runs if r["cache"] == "warm"]
    summary = {
        "steps": args.steps,
        "torch_threads": args.torch_threads,
        "order": "pytorch, preset, alternating; each a fresh process",
        "pytorch": torch_runs,
        "preset": preset_runs,
        "pytorch_median_wall_s": round(torch_median, 1),
        "preset_median_wall_s": round(preset_median, 1),
        "speed_ratio": _ratio(torch_median, preset_median),
        "speed_ratio_cold": _ratio(torch_median, preset_runs[0]["wall_s"]),
        "speed_ratio_warm": _ratio(torch_median, statistics.median(warm)) if warm else None,
        "cpus": os.cpu_count(),
    }
    print(json.dumps(summary))
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
