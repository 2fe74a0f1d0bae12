"""What does a new process pay to train at a shape it has seen before?

One short run of the tests' tiny GPT (`sweep train`'s trainer, in-process: 24 steps, one
device), each in a fresh Python process, in three states of the cache folder
(``train.compile_cache_dir``) side by side:

- ``nothing``: an empty folder (trace, lower and compile every program);
- ``compilation cache``: JAX's persistent compilation cache warm and the saved programs off
  (trace and lower, then load XLA's compile: what every trial process paid before
  models/executables.py);
- ``saved programs``: both warm (load the compiled programs; nothing traced).

Per state, the median over ``--repeats`` processes of the CPU-seconds of ``train()`` (the
imports before it are the same in every state and printed apart), the programs traced,
and the final eval loss (the same in every state: the loaded programs are the compiled
ones). Ends with one JSON line.

    python benchmarks/executable_cache.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

RUN = """
import json, sys, time
t0 = time.process_time()
sys.path.insert(0, {tests!r})
from helpers import tiny_gpt
from stepscale.models import executables
from stepscale.models.step import TRACE_COUNTS
if sys.argv[2] == "off":  # JAX's compilation cache only (what trials had before)
    executables.configure = lambda directory: None
from stepscale.models.train import train
from stepscale.reporters import NullReporter
t1 = time.process_time()
cfg = tiny_gpt(train__max_steps=24)
cfg.train.compile_cache_dir = sys.argv[1]
status = train(cfg, NullReporter())
print(json.dumps({{"import_cpu_s": t1 - t0, "train_cpu_s": time.process_time() - t1,
                  "traced": sum(TRACE_COUNTS.values()),
                  "final_eval_loss": status["final_eval_loss"]}}))
"""


def run_once(folder: Path, saved: bool = True) -> dict[str, float]:
    """One fresh process training the tiny GPT with ``folder`` as its cache folder (and,
    unless ``saved`` is false, its programs saved there)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run(
        [sys.executable, "-c", RUN.format(tests=str(ROOT / "tests")), str(folder), "on" if saved else "off"],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="executable-cache-") as tmp:
        folder = Path(tmp) / "cache"
        for _ in range(args.repeats):
            shutil.rmtree(folder, ignore_errors=True)
            rows.setdefault("nothing", []).append(run_once(folder))
            shutil.rmtree(folder, ignore_errors=True)
            run_once(folder, saved=False)  # warms JAX's compilation cache only
            rows.setdefault("compilation cache", []).append(run_once(folder, saved=False))
            shutil.rmtree(folder, ignore_errors=True)
            run_once(folder)  # compiles and saves the programs
            rows.setdefault("saved programs", []).append(run_once(folder))
    summary = {}
    print(f"{'state':<20} {'train CPU-s':>12} {'imports CPU-s':>14} {'traced':>7}  final eval loss")
    for state, runs in rows.items():
        train_s = statistics.median(r["train_cpu_s"] for r in runs)
        import_s = statistics.median(r["import_cpu_s"] for r in runs)
        traced = statistics.median(r["traced"] for r in runs)
        losses = sorted({r["final_eval_loss"] for r in runs})
        print(f"{state:<20} {train_s:>12.2f} {import_s:>14.2f} {traced:>7.0f}  {losses}")
        summary[state] = {"train_cpu_s": round(train_s, 3), "traced": traced, "losses": losses}
    base = summary["compilation cache"]["train_cpu_s"]
    summary["saved_vs_compilation_cache"] = round(
        summary["saved programs"]["train_cpu_s"] / base, 3
    )
    print(f"saved programs / compilation cache: {summary['saved_vs_compilation_cache']:.2f}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
