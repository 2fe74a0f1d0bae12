"""How long does the demo take, and what does it answer? The previous demo and the new one,
side by side in one run, each from a cold and from a warm compile cache.

The previous demo is ``benchmarks/presets/conf/batchsize_vs_steps_previous.yaml`` (the
preset before issue 33: LR and warmup tuned per batch size, no pruning, raw weights
evaluated every 5 steps); the new one is the built-in ``batchsize_vs_steps``. Each runs
twice, in the order previous-cold, new-cold, new-warm, previous-warm (so a load that drifts
during the benchmark weighs on both alike): *cold* with an empty persistent compilation
cache of its own (``train.compile_cache_dir``), *warm* with that cache filled by its cold
run. Every run is a fresh run dir and a fresh ``sweep run`` process at the presets'
``parallelism=2`` (warm workers).

Per run: the wall time, the CPU time of the process tree (user + sys of ``sweep run`` and
every process it waited for: the workers), the time to the first trained step (as
``sweep run`` reports it; imports, workers and compiles included), the answer (B_crit, its
95% interval and the factor it spans, from ``sweep report``'s fits; whether the report's
health checks pass) and the compute (steps × batch trained by the tune trials, steps trained,
budget steps = trials × horizon), and the load average around it. Then the ratios new /
previous, cold and warm. The report is written after the timed run and is not timed; the
two runs of one preset must give the same B_crit (the study is deterministic).

Prints a table on stderr and one JSON document on stdout. On a shared machine the wall
times follow the load (given beside them); the CPU times much less.

    python benchmarks/demo_time.py [--work DIR] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SWEEP = str(Path(sys.executable).with_name("sweep"))
PRESETS = ROOT / "benchmarks" / "presets"
PREVIOUS = ("batchsize_vs_steps_previous", ["--config-dir", str(PRESETS)])
NEW = ("batchsize_vs_steps", [])
ORDER = (("previous", "cold"), ("new", "cold"), ("new", "warm"), ("previous", "warm"))
# --quick: a few trials at 3 batch sizes, to check the script in minutes.
QUICK = ["budget.trials_per_point=2", "scientific.batch_size.values=[4,32,256]"]


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed_run(
    run_dir: Path, conf: str, extra: list[str], cache: Path, overrides: list[str]
) -> dict[str, Any]:
    """One `sweep run --json` in a fresh run dir: wall and CPU seconds, the time to its
    first trained step and the load average before and after."""
    cmd = [
        SWEEP, "run", f"conf={conf}", *extra, f"run_dir={run_dir}",
        f"train.compile_cache_dir={cache}", *overrides, "--json",
    ]  # fmt: skip
    load_before = _load()
    cpu0 = _cpu_children()
    start = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - start
    cpu = _cpu_children() - cpu0
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stderr[-4000:]}")
    summary = json.loads(res.stdout)
    times = summary.get("time") or {}
    return {
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "first_progress_s": times.get("first_progress_s"),
        "loadavg_before": load_before,
        "loadavg_after": _load(),
    }


def compute(run_dir: Path) -> dict[str, int]:
    """Steps × batch and steps trained by the tune trials, and the budget steps (trials ×
    horizon), from the trials' status.json."""
    examples = steps = budget = 0
    for status_file in sorted(run_dir.glob("trials/*/*/status.json")):
        trial = json.loads((status_file.parent / "trial.json").read_text())
        if trial.get("kind", "tune") != "tune":
            continue
        status = json.loads(status_file.read_text())
        steps += int(status.get("steps_done") or 0)
        examples += int(status.get("examples_done") or 0)
        budget += int(status.get("horizon_steps") or 0)
    return {"steps_x_batch": examples, "steps": steps, "budget_steps": budget}


def answer(run_dir: Path) -> dict[str, Any]:
    """`sweep report` (not timed), then B_crit, its interval and the health checks."""
    res = subprocess.run([SWEEP, "report", str(run_dir)], capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"sweep report {run_dir} failed:\n{res.stderr[-4000:]}")
    fits = json.loads((run_dir / "report" / "fits.json").read_text())
    health = {h["check"]: h["ok"] for h in fits.get("health", [])}
    out: dict[str, Any] = {"b_crit": None, "b_crit_ci": None, "ci_factor": None}
    groups = (fits.get("steps") or {}).get("groups") or []
    if groups and groups[0].get("b_crit") is not None:  # the demo has one group, "all"
        fit = groups[0]
        lo, hi = fit["b_crit_ci"]
        out = {
            "b_crit": fit["b_crit"],
            "b_crit_ci": [lo, hi],
            "ci_factor": hi / lo if lo is not None and hi is not None and lo > 0 else None,
        }
    return out | {"health_ok": health, "settled": bool(health) and all(health.values())}


def ratios(new: dict[str, Any], old: dict[str, Any]) -> dict[str, float | None]:
    """new / previous for each time."""
    out: dict[str, float | None] = {}
    for key in ("wall_s", "cpu_s", "first_progress_s"):
        a, b = new.get(key), old.get(key)
        out[key] = round(a / b, 3) if a is not None and b else None
    return out


def _row(name: str, r: dict[str, Any]) -> str:
    ci = r["b_crit_ci"]
    bc = (
        f"{r['b_crit']:.3g} [{ci[0]:.3g}, {ci[1]:.3g}] ×{r['ci_factor']:.2f}"
        if r.get("b_crit") is not None and ci
        else "—"
    )
    first = r["first_progress_s"]
    return (
        f"{name:14s} {r['wall_s']:8.1f} {r['cpu_s']:8.1f} "
        f"{(f'{first:.1f}' if first is not None else '—'):>8s}  {bc:28s} "
        f"{r['steps_x_batch']:>9,d} {r['steps']:>6,d} {r['budget_steps']:>7,d}  "
        f"{'yes' if r['settled'] else 'no':7s} {r['loadavg_before'][0]:.1f}→{r['loadavg_after'][0]:.1f}"
    )


def main() -> None:
    """Run the four studies and print the comparison."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=None, help="keep run dirs and caches here")
    ap.add_argument(
        "--quick", action="store_true", help="2 trials at 3 batch sizes: checks the script"
    )
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="demo-time-"))
    work.mkdir(parents=True, exist_ok=True)
    overrides = QUICK if args.quick else []
    presets = {"previous": PREVIOUS, "new": NEW}
    for name in presets:  # cold means cold: an empty cache and no run dir
        shutil.rmtree(work / f"cache_{name}", ignore_errors=True)
        for phase in ("cold", "warm"):
            shutil.rmtree(work / f"{name}_{phase}", ignore_errors=True)
    load_start = _load()
    started = time.monotonic()
    runs: dict[str, dict[str, Any]] = {}
    for name, phase in ORDER:
        conf, extra = presets[name]
        run_dir = work / f"{name}_{phase}"
        r = timed_run(run_dir, conf, extra, work / f"cache_{name}", overrides)
        r |= compute(run_dir) | answer(run_dir)
        runs[f"{name}_{phase}"] = r
        print(f"{name} {phase}: {json.dumps(r)}", file=sys.stderr, flush=True)
    same = {
        name: runs[f"{name}_cold"]["b_crit"] == runs[f"{name}_warm"]["b_crit"] for name in presets
    }
    out = {
        "benchmark": "demo_time",
        "quick": args.quick,
        "runs": runs,
        "ratios_new_over_previous": {
            phase: ratios(runs[f"new_{phase}"], runs[f"previous_{phase}"])
            for phase in ("cold", "warm")
        },
        "compute_new_over_previous": {
            k: round(runs["new_cold"][k] / runs["previous_cold"][k], 3)
            for k in ("steps_x_batch", "steps", "budget_steps")
        },
        "same_answer_cold_and_warm": same,
        "wall_s": round(time.monotonic() - started, 1),
        "loadavg_start": load_start,
        "loadavg_end": _load(),
        "cpus": os.cpu_count(),
        "work": str(work),
    }
    header = (
        f"{'run':14s} {'wall s':>8s} {'CPU s':>8s} {'first s':>8s}  {'B_crit [95%] ×factor':28s} "
        f"{'steps×B':>9s} {'steps':>6s} {'budget':>7s}  settled load"
    )
    lines = [header] + [_row(k, v) for k, v in runs.items()]
    for phase in ("cold", "warm"):
        rt = out["ratios_new_over_previous"][phase]
        lines.append(
            f"new / previous, {phase}: wall {rt['wall_s']}, CPU {rt['cpu_s']}, "
            f"first progress {rt['first_progress_s']}"
        )
    cmp = out["compute_new_over_previous"]
    lines.append(
        f"new / previous compute: steps × batch {cmp['steps_x_batch']}, steps {cmp['steps']}, "
        f"budget steps {cmp['budget_steps']}"
    )
    print("\n".join(lines), file=sys.stderr)
    print(json.dumps(out, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
