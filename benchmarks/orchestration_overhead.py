"""What does the orchestrator cost over training the same runs, and what do warm workers save?

Three measurements, each side by side in one run (``--parts`` picks some):

``overhead`` — per-trial overhead on repeated shapes: 12 trials of a tiny GPT at one point
(12 learning rates, ``--steps`` steps each) through `sweep run` at parallelism 1 with warm
workers (``launcher=local``), with a fresh process per trial (``launcher=process``) and,
when Ray is installed (``stepscale[ray]``), with warm workers on a local Ray cluster
(``launcher=ray launcher.address=local``: a cluster of this machine started by the run,
whose start is in the run's wall time, not in any trial's slot). A trial's slot is Optuna's
ask → tell; its training is the trainer's own ``wall_s``; the overhead is slot − training
(goal for warm workers: median ≤ 0.3 s).

``short`` — short trials of a user's Python function (the Flax MLP of
examples/flax_user_trainer): 16 trials, 2 batch sizes × 8 learning rates, steps chosen so a
trial trains ~1–10 s. `sweep run` at parallelism 2 with warm workers (cores pinned, and
unpinned for comparison) against a plain loop running the same 16 trial configs back to back
in one Python process (goal: sweep ≤ 0.8 × the plain loop).

``demo`` — `sweep run conf=batchsize_vs_steps` (56 trials, parallelism 2) with warm workers
and with a process per trial, back to back (goal: warm ≤ 0.65 × process per trial).

The persistent compilation cache is warmed before the timed runs, so nobody pays a cold
compile. Prints one JSON line.

    python benchmarks/orchestration_overhead.py [--parts overhead,short,demo] [--steps 100]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SWEEP = str(Path(sys.executable).with_name("sweep"))
FLAX = ROOT / "examples" / "flax_user_trainer"

OVERHEAD_STUDY = """# @package _global_
# Benchmark: 12 trainings of one shape (a tiny GPT), only the learning rate differs.
defaults:
  - override /model: gpt
  - override /data: markov
model: {{size: tiny}}
data: {{vocab_size: 16, order: 1, seq_len: 64, eval_examples: 128, eval_batch: 64}}
schedule: {{warmup_steps: 10}}
train: {{log_every: 10, eval_every: 50, checkpoint_every: 0, devices: 1}}
scientific:
  batch_size: {{path: data.global_batch, values: [32], unit: sequences}}
nuisance:
  lr: {{path: optimizer.lr, type: float, low: 1.0e-3, high: 1.0e-2, scale: log}}
sampler: {{name: random}}
budget: {{trials_per_point: 12, max_steps: {steps}}}
objective: {{kind: final_eval_loss}}
"""

SHORT_STUDY = """# @package _global_
# Benchmark: 16 short trainings of a user's Flax MLP (2 batch sizes x 8 learning rates).
trainer:
  target: mytrainer.train:main
  validate: mytrainer.train:validate
  config:
    data: {{dim: 8, teacher_width: 32, noise: 0.3, n_train: 4096, n_eval: 1024, seed: 1234}}
    model: {{width: 64, depth: 2}}
    optim: {{lr: 0.01}}
    train: {{batch_size: 32, steps: {steps}, eval_every: 25, checkpoint_every: 1000, seed: 0,
             compile_cache_dir: {cache}}}
  keys: {{max_steps: train.steps, seed: train.seed}}
scientific:
  batch_size: {{path: train.batch_size, values: [32, 256], unit: examples, quantity: batch_size}}
nuisance:
  lr: {{path: optim.lr, type: float, low: 1.0e-3, high: 1.0e-1, scale: log}}
sampler: {{name: random}}
budget: {{trials_per_point: 8, max_steps: {steps}}}
objective: {{kind: final_eval_loss}}
parallelism: 2
"""

# The same trial configs, back to back in one process: what a researcher's own loop costs.
PLAIN_LOOP = """
import json, sys
from pathlib import Path
from omegaconf import OmegaConf
sys.path.insert(0, sys.argv[1])
from mytrainer.train import main
from stepscale.reporters import JsonlReporter
for folder in sys.argv[3:]:
    config = OmegaConf.create(json.loads((Path(folder) / "config.json").read_text()))
    out = Path(sys.argv[2]) / Path(folder).parent.name / Path(folder).name
    out.mkdir(parents=True)
    main(config, JsonlReporter(out), out)
"""


def run(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    """Wall seconds of a command (which must succeed)."""
    start = time.perf_counter()
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} failed:\n{res.stderr[-3000:]}")
    return time.perf_counter() - start


def slots(run_dir: Path) -> list[dict[str, float]]:
    """Per trial: its slot (Optuna ask → tell) and its training (the trainer's wall_s)."""
    import optuna

    backend = optuna.storages.journal.JournalFileBackend(str(run_dir / "study.journal"))
    storage = optuna.storages.JournalStorage(backend)
    out = []
    for summary in optuna.get_all_study_summaries(storage):
        label = summary.study_name.split("/", 1)[1]
        for t in optuna.load_study(study_name=summary.study_name, storage=storage).trials:
            status = json.loads(
                (run_dir / "trials" / label / str(t.number) / "status.json").read_text()
            )
            slot = (t.datetime_complete - t.datetime_start).total_seconds()
            out.append({"slot": slot, "training": float(status["wall_s"])})
    return out


def summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "max": round(max(values), 3)}


def part_overhead(root: Path, env: dict[str, str], steps: int) -> dict[str, Any]:
    conf = root / "over" / "conf"
    conf.mkdir(parents=True)
    (conf / "bench_overhead.yaml").write_text(OVERHEAD_STUDY.format(steps=steps))
    common = [
        SWEEP,
        "run",
        "conf=bench_overhead",
        "--config-dir",
        str(root / "over"),
        "parallelism=1",
    ]
    common.append(f"train.compile_cache_dir={root / 'cache'}")
    run([*common, "budget.trials_per_point=1", f"run_dir={root / 'o-warmup'}"], root, env)
    result: dict[str, Any] = {"trials": 12, "steps": steps}
    for launcher, extra in launchers():
        run_dir = root / f"o-{launcher}"
        wall = run([*common, f"launcher={launcher}", *extra, f"run_dir={run_dir}"], root, env)
        trials = slots(run_dir)
        result[launcher] = {
            "wall_s": round(wall, 2),
            "slot_s": summary([t["slot"] for t in trials]),
            "training_s": summary([t["training"] for t in trials]),
            "overhead_s": summary([t["slot"] - t["training"] for t in trials]),
        }
        print(f"overhead, {launcher}: {result[launcher]}", file=sys.stderr)
    result["warm_overhead_median_s"] = result["local"]["overhead_s"]["median"]
    if "ray" in result:
        result["ray_overhead_median_s"] = result["ray"]["overhead_s"]["median"]
    result["meets_goal"] = result["warm_overhead_median_s"] <= 0.3
    return result


def launchers() -> list[tuple[str, list[str]]]:
    """The launchers the overhead part compares, with their settings: warm workers, a
    process per trial, and warm workers on a local Ray cluster when Ray is installed."""
    out: list[tuple[str, list[str]]] = [("local", []), ("process", [])]
    if importlib.util.find_spec("ray") is not None:
        out.append(("ray", ["launcher.address=local", "launcher.local_cpus=2"]))
    return out


def part_short(root: Path, env: dict[str, str], steps: int) -> dict[str, Any]:
    project = root / "short"
    shutil.copytree(FLAX, project, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    cache = root / "cache-short"
    (project / "conf" / "bench_short.yaml").write_text(SHORT_STUDY.format(steps=steps, cache=cache))
    common = [SWEEP, "run", "conf=bench_short", "--config-dir", "."]
    run([*common, "budget.trials_per_point=1", "run_dir=runs/warmup"], project, env)
    result: dict[str, Any] = {"trials": 16, "steps": steps}
    for name, extra in (("warm_pinned", []), ("warm_unpinned", ["launcher.pin_cpus=false"])):
        wall = run([*common, *extra, f"run_dir=runs/{name}"], project, env)
        result[f"sweep_{name}_s"] = round(wall, 2)
        print(f"short, sweep {name}: {wall:.1f} s", file=sys.stderr)
    folders = sorted(str(p) for p in (project / "runs" / "warm_pinned" / "trials").glob("*/*"))
    plain = run(
        [sys.executable, "-c", PLAIN_LOOP, str(project), str(root / "plain"), *folders],
        project,
        env,
    )
    print(f"short, plain loop: {plain:.1f} s", file=sys.stderr)
    result.update(
        plain_loop_s=round(plain, 2),
        trial_job_s=summary([job_seconds(Path(f)) for f in folders]),
        ratio_pinned=round(result["sweep_warm_pinned_s"] / plain, 3),
        ratio_unpinned=round(result["sweep_warm_unpinned_s"] / plain, 3),
    )
    result["meets_goal"] = min(result["ratio_pinned"], result["ratio_unpinned"]) <= 0.8
    return result


def job_seconds(folder: Path) -> float:
    """How long a trial's job ran: from its start event to its final status."""
    start = json.loads((folder / "events.jsonl").read_text().splitlines()[0])["time"]
    return (folder / "status.json").stat().st_mtime - start


def part_demo(root: Path, env: dict[str, str]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    common = [
        SWEEP,
        "run",
        "conf=batchsize_vs_steps",
        f"train.compile_cache_dir={root / 'cache-demo'}",
    ]
    run([*common, "budget.trials_per_point=1", f"run_dir={root / 'd-warmup'}"], root, env)
    for launcher in ("local", "process"):
        wall = run(
            [*common, f"launcher={launcher}", f"run_dir={root / ('d-' + launcher)}"], root, env
        )
        result[f"{launcher}_s"] = round(wall, 1)
        print(f"demo, {launcher}: {wall:.1f} s", file=sys.stderr)
    result["ratio"] = round(result["local_s"] / result["process_s"], 3)
    result["meets_goal"] = result["ratio"] <= 0.65
    return result


def main() -> None:
    """Run the chosen parts and print the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", default="overhead,short,demo")
    parser.add_argument("--steps", type=int, default=100, help="steps of an overhead trial")
    parser.add_argument("--short-steps", type=int, default=6000, help="steps of a short trial")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    result: dict[str, Any] = {"load_average": [round(x, 2) for x in os.getloadavg()]}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        parts = args.parts.split(",")
        if "overhead" in parts:
            result["overhead"] = part_overhead(root, env, args.steps)
        if "short" in parts:
            result["short"] = part_short(root, env, args.short_steps)
        if "demo" in parts:
            result["demo"] = part_demo(root, env)
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
