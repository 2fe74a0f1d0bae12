"""How long does the real-text batch-size study take, where does its compute go, and what
does it answer?

Runs ``sweep run conf=shakespeare_batchsize`` (default parallelism: 2 warm workers, one core
each) in a fresh process and a fresh run dir, then ``sweep report`` on it, and prints:

- the study's wall time and its CPU time (user + sys of the whole process tree: the
  orchestrator, its workers and their compiles), the orchestrator's own CPU time, and the
  machine's load average before and after (on a shared machine the wall time is inflated by
  the other jobs; the CPU time much less so);
- per point: trials, states, steps and examples spent, the fewest steps to the target, the
  epochs of the training text its longest trial saw;
- the answer: B_crit with its interval at each target, whether each target's fit is
  well-posed, B_simple per point, the health checks' warnings and the "has it trained?"
  verdict.

Ends with one JSON line. The issue's bar: at most 10 minutes on a quiet 2-core machine.

    python benchmarks/shakespeare_batchsize.py [--keep DIR] [override ...]

Overrides (``key=value``) go to ``sweep run`` (e.g. ``budget.trials_per_point=3``).
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

SWEEP = str(Path(sys.executable).with_name("sweep"))
CONF = "shakespeare_batchsize"
TRAIN_CHARACTERS = 1_003_854  # the training split of Tiny Shakespeare
BUDGET_S = 600.0


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _own_cpu(pid: int) -> float | None:
    """user + sys seconds of process ``pid`` itself (not its children), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_study(run_dir: Path, overrides: list[str]) -> dict[str, Any]:
    """`sweep run` in a fresh process: wall, CPU of the tree, the orchestrator's own CPU."""
    cmd = [SWEEP, "run", f"conf={CONF}", f"run_dir={run_dir}", *overrides]
    cpu0, load0 = _children_cpu(), _load()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    own = 0.0
    while proc.poll() is None:  # the orchestrator's own CPU, read while it lives
        own = _own_cpu(proc.pid) or own
        time.sleep(0.5)
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err[-4000:]}")
    return {
        "wall_s": round(wall, 1),
        "cpu_s": round(_children_cpu() - cpu0, 1),
        "orchestrator_cpu_s": round(own, 1),
        "load_before": load0,
        "load_after": _load(),
        "answer": out[out.find("answer:") :].strip(),
    }


def report(run_dir: Path) -> dict[str, Any]:
    """`sweep report` on the run dir; its fits.json."""
    res = subprocess.run([SWEEP, "report", str(run_dir)], capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"sweep report failed ({res.returncode}):\n{res.stderr[-4000:]}")
    return json.loads((run_dir / "report" / "fits.json").read_text())


def point_rows(run_dir: Path) -> list[dict[str, Any]]:
    """Per point: trials, states, steps and examples spent, fewest steps to the target, and
    the epochs of the training text seen by its longest trial."""
    rows: dict[int, dict[str, Any]] = {}
    for folder in sorted((run_dir / "trials").glob("*/*")):
        status = json.loads((folder / "status.json").read_text())
        batch = int(status["examples_done"] / max(status["steps_done"], 1))
        row = rows.setdefault(
            batch, {"batch": batch, "trials": 0, "states": {}, "steps": 0, "best": None}
        )
        row["trials"] += 1
        row["states"][status["state"]] = row["states"].get(status["state"], 0) + 1
        row["steps"] += status["steps_done"]
        row["examples"] = row.get("examples", 0) + status["examples_done"]
        chars = status["tokens_done"]
        row["max_epochs"] = max(row.get("max_epochs", 0.0), round(chars / TRAIN_CHARACTERS, 2))
        s = status.get("steps_to_target")
        if s is not None and (row["best"] is None or s < row["best"]):
            row["best"] = s
    return [rows[b] for b in sorted(rows)]


def answer(fits: dict[str, Any]) -> dict[str, Any]:
    """B_crit per target (well-posed or why not), B_simple per point, warnings, verdict."""
    targets = []
    for group in fits["bcrit_vs_target"]["groups"]:
        for t in group["targets"]:
            targets.append({
                "target": t["target"],
                "b_crit": t.get("b_crit"),
                "ci": t.get("b_crit_ci"),
                "s_min": t.get("s_min"),
                "well_posed": t.get("well_posed"),
                "problem": t.get("problem"),
            })  # fmt: skip
        law = group.get("law")
        slope = (law or {}).get("slope"), (law or {}).get("slope_ci")
    noise = {
        p["point"]: round(p["median"], 1)
        for g in fits["noise_scale"]["groups"]
        for p in g["points"]
        if p.get("median") is not None
    }
    return {
        "targets": targets,
        "bcrit_law_slope": slope,
        "b_simple": noise,
        "warnings": [h["message"] for h in fits["health"] if not h["ok"]],
        "trained": fits["trained"]["best"],
    }


def main() -> None:
    """Run the study, report it, print the numbers."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, default=None, help="keep the run dir here")
    ap.add_argument("overrides", nargs="*", help="key=value overrides for sweep run")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="shakespeare_batchsize_"))
    run_dir = root / "run"
    if run_dir.exists():
        raise SystemExit(f"{run_dir} exists: the benchmark times a fresh study")
    timing = run_study(run_dir, args.overrides)
    fits = report(run_dir)
    points = point_rows(run_dir)
    found = answer(fits)
    print(f"sweep run conf={CONF} {' '.join(args.overrides)}".rstrip())
    print(
        f"wall {timing['wall_s']:.0f} s (budget {BUDGET_S:.0f} s on a quiet 2-core machine); "
        f"CPU {timing['cpu_s']:.0f} s (orchestrator {timing['orchestrator_cpu_s']:.0f} s); "
        f"load average {timing['load_before']} -> {timing['load_after']}"
    )
    print(f"{'batch':>6} {'trials':>6} {'steps':>7} {'best':>6} {'epochs':>7}  states")
    for p in points:
        best = "-" if p["best"] is None else str(p["best"])
        print(f"{p['batch']:>6} {p['trials']:>6} {p['steps']:>7} {best:>6} "
              f"{p['max_epochs']:>7.2f}  {p['states']}")  # fmt: skip
    for t in found["targets"]:
        ci = t["ci"] or [None, None]
        posed = "well-posed" if t["well_posed"] else f"not well-posed: {t['problem']}"
        b = "—" if t["b_crit"] is None else f"{t['b_crit']:.1f}"
        lo = "—" if ci[0] is None else f"{ci[0]:.1f}"
        hi = "—" if ci[1] is None else f"{ci[1]:.1f}"
        print(f"B_crit at {t['target']:g}: {b} [{lo}, {hi}] ({posed})")
    print(f"B_crit(L) slope and interval: {found['bcrit_law_slope']}")
    print(f"B_simple (median, second half of the best trial): {found['b_simple']}")
    for w in found["warnings"]:
        print(f"warning: {w}")
    print(timing["answer"])
    print(json.dumps({"timing": timing | {"answer": None}, "points": points, **found}))
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
