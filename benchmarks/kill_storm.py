"""Kill storm: random SIGKILLs over the orchestrator and its trainers, then a check that the
storage and the trial folders agree and that nothing was lost or done twice.

Studies (run one after another, each in its own run dir):

- ``numpy``: the NumPy example (`examples/numpy_regression`) as a command trainer, 3 batch
  sizes × 4 trials, its steps slowed to ~1.5 s a trial, checkpoints every 50 steps;
- ``builtin``: the built-in trainer's `smoke` study (a tiny GPT, checkpoints every 10 steps);
- ``sqlite``: the NumPy study again, on SQLite storage.

Each study runs as rounds of the same `sweep run`: after a random wait (0.3–3 s) one kill
goes to a live target chosen at random — the orchestrator's whole process group (it and
its trials, as a node failure or ``kill -9`` of a login session does), the orchestrator's
pid alone (its trial processes go on), or one trainer process (a crash) — and, unless the
orchestrator died, the next kill comes after another wait. When the orchestrator is dead,
the storage is checked against the trial folders (below) and the next round starts. A study
ends with a round that finishes it; the final check then asks for complete agreement.

After every kill (once the orchestrator is gone):

- ``lost``: a trial whose folder holds a final status or record but which the storage does
  not have; a trial the storage has as finished without a folder;
- ``duplicated``: a point with more finished trials than its budget, a trial number twice,
  a step recorded twice in a trial's metrics.jsonl;
- ``inconsistent``: the journal unreadable by Optuna itself; and at the end of a study, a
  trial whose trial.json state differs from the storage's, a running trial, a heartbeat
  or temporary file left behind.

Prints one JSON line: kills delivered (to a live process), by target, trials checked, lost,
duplicated, inconsistent (target: ≥ 20 kills, 0 lost, 0 duplicated, 0 inconsistent).

    python benchmarks/kill_storm.py [--kills 24] [--studies numpy,builtin,sqlite] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SWEEP = str(Path(sys.executable).with_name("sweep"))
NUMPY = ROOT / "examples" / "numpy_regression"
FINAL = {"complete", "pruned", "diverged", "failed"}

STUDIES: dict[str, list[str]] = {
    "numpy": [
        "conf=numpy_batchsize", "--config-dir", str(NUMPY),
        "scientific.batch_size.values=[8,32,128]", "budget.trials_per_point=4",
        "trainer.config.train.sleep_s=0.005", "retries=3", "parallelism=2",
    ],
    "builtin": ["conf=smoke", "retries=3", "parallelism=2", "train.checkpoint_every=10"],
    "sqlite": [
        "conf=numpy_batchsize", "--config-dir", str(NUMPY), "storage=sqlite",
        "scientific.batch_size.values=[8,32]", "budget.trials_per_point=3",
        "trainer.config.train.sleep_s=0.005", "retries=3", "parallelism=2",
    ],
}  # fmt: skip


def trainer_pids(run_dir: Path) -> list[int]:
    """Processes whose working directory is a trial folder of ``run_dir`` (the trial jobs
    and the programs they run)."""
    trials = str((run_dir / "trials").resolve())
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if os.readlink(proc / "cwd").startswith(trials):
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def storage_trials(run_dir: Path, spec: str) -> dict[str, list[Any]]:
    """The storage's trials by point label, read by Optuna itself (no repair)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    if not (run_dir / ("study.db" if spec == "sqlite" else "study.journal")).exists():
        return {}  # killed before the study had a storage
    if spec == "sqlite":
        storage: Any = optuna.storages.RDBStorage(f"sqlite:///{run_dir / 'study.db'}")
    else:
        backend = optuna.storages.journal.JournalFileBackend(str(run_dir / "study.journal"))
        storage = optuna.storages.JournalStorage(backend)
    out = {}
    for summary in optuna.get_all_study_summaries(storage):
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        out[summary.study_name.split("/", 1)[1]] = study.get_trials(deepcopy=False)
    return out


def true_state(trial: Any) -> str | None:
    names = {"COMPLETE": "complete", "PRUNED": "pruned", "FAIL": "failed"}
    if trial.state.name not in names:
        return None
    told = trial.user_attrs.get("state")
    return told if told in FINAL else names[trial.state.name]


def read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def check(run_dir: Path, spec: str, budget: int, final: bool) -> dict[str, Any]:
    """Counts of lost, duplicated and inconsistent trials (see the module docstring)."""
    found = {"trials": 0, "lost": 0, "duplicated": 0, "inconsistent": 0, "problems": []}

    def problem(kind: str, what: str) -> None:
        found[kind] += 1
        found["problems"].append(f"{kind}: {what}")

    try:
        stored = storage_trials(run_dir, spec)
    except Exception as exc:  # the storage itself unreadable
        problem("inconsistent", f"storage unreadable: {type(exc).__name__}: {exc}")
        return found
    for folder in sorted((run_dir / "trials").glob("*/*")):
        label, number = folder.parent.name, int(folder.name)
        trials = {t.number: t for t in stored.get(label, [])}
        record, status = read(folder / "trial.json"), read(folder / "status.json")
        ended = (record or {}).get("state") in FINAL or (status or {}).get("state") in FINAL
        if number not in trials and ended:
            problem("lost", f"{label}/{number} finished on disk, absent from the storage")
        steps = [json.loads(x)["step"] for x in _lines(folder / "metrics.jsonl")]
        if len(steps) != len(set(steps)):
            problem("duplicated", f"{label}/{number}: a step recorded twice in metrics.jsonl")
        if final and number in trials:
            state = true_state(trials[number])
            if record is None or record.get("state") != state:
                problem(
                    "inconsistent",
                    f"{label}/{number}: trial.json {record and record.get('state')} vs storage {state}",
                )
            leftovers = [
                p.name
                for p in folder.iterdir()
                if p.name.startswith("heartbeat") or p.name.endswith(".tmp")
            ]
            if leftovers:
                problem("inconsistent", f"{label}/{number}: left behind {leftovers}")
    for label, trials in stored.items():
        found["trials"] += len(trials)
        numbers = [t.number for t in trials]
        if len(numbers) != len(set(numbers)):
            problem("duplicated", f"{label}: a trial number twice")
        done = [t for t in trials if true_state(t) is not None]
        if len(done) > budget:
            problem("duplicated", f"{label}: {len(done)} finished trials for a budget of {budget}")
        for t in done:
            if not (run_dir / "trials" / label / str(t.number)).is_dir():
                problem("lost", f"{label}/{t.number} finished in the storage without a folder")
        if final and (len(done) != budget or len(trials) != budget):
            problem(
                "inconsistent",
                f"{label}: {len(done)}/{len(trials)} finished for a budget of {budget}",
            )
    return found


def _lines(path: Path) -> list[str]:
    try:
        return [ln for ln in path.read_text().splitlines() if ln.strip().startswith("{")]
    except OSError:
        return []


def storm(spec: str, kills: int, rng: random.Random, work: Path, totals: dict[str, Any]) -> None:
    """Run one study to its end through ``kills`` random kills (see the module docstring)."""
    run_dir = work / spec
    args = [SWEEP, "run", *STUDIES[spec], f"run_dir={run_dir}"]
    budget = 3 if spec == "sqlite" else (4 if spec == "numpy" else 3)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    delivered = 0
    while True:
        proc = subprocess.Popen(
            args, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            start_new_session=True, text=True,
        )  # fmt: skip
        while delivered < kills and proc.poll() is None:
            time.sleep(rng.uniform(0.3, 3.0))
            if proc.poll() is not None:
                break
            target = rng.choice(["group", "orchestrator", "trainer", "trainer"])
            pids = trainer_pids(run_dir) if target == "trainer" else []
            try:
                if target == "group":
                    os.killpg(proc.pid, signal.SIGKILL)
                elif target == "orchestrator":
                    os.kill(proc.pid, signal.SIGKILL)
                elif pids:
                    os.kill(rng.choice(pids), signal.SIGKILL)
                else:
                    continue  # no trainer running at this moment: wait for the next kill
            except ProcessLookupError:
                continue
            delivered += 1
            totals["kills_delivered"] += 1
            totals["by_target"][target] += 1
            if target != "trainer":
                break
        _, err = proc.communicate()
        if proc.returncode not in (0, -signal.SIGKILL):
            totals["errors"].append(f"{spec}: exit {proc.returncode}: {err.strip()[-400:]}")
        _wait_for_trainers(run_dir)  # a pid-alone kill leaves its trials running
        if proc.returncode == 0:
            _add(totals, check(run_dir, spec, budget, final=True))
            return
        _add(totals, check(run_dir, spec, budget, final=False))


def _wait_for_trainers(run_dir: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while trainer_pids(run_dir) and time.monotonic() < deadline:
        time.sleep(0.2)


def _add(totals: dict[str, Any], result: dict[str, Any]) -> None:
    for key in ("lost", "duplicated", "inconsistent"):
        totals[key] += result[key]
    totals["checks"] += 1
    totals["trials_checked"] += result["trials"]
    totals["problems"].extend(result["problems"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=24, help="kills in all (split over studies)")
    parser.add_argument("--studies", default="numpy,builtin,sqlite")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    specs = args.studies.split(",")
    rng = random.Random(args.seed)
    totals: dict[str, Any] = {
        "kills_delivered": 0,
        "by_target": {"group": 0, "orchestrator": 0, "trainer": 0},
        "checks": 0,
        "trials_checked": 0,
        "lost": 0,
        "duplicated": 0,
        "inconsistent": 0,
        "problems": [],
        "errors": [],
    }
    start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="kill-storm-"))
    try:
        for i, spec in enumerate(specs):
            share = args.kills // len(specs) + (1 if i < args.kills % len(specs) else 0)
            storm(spec, share, rng, work, totals)
            print(f"{spec}: done ({totals['kills_delivered']} kills so far)", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    totals["wall_s"] = round(time.monotonic() - start, 1)
    totals["meets_goal"] = (
        totals["kills_delivered"] >= 20
        and totals["lost"] == totals["duplicated"] == totals["inconsistent"] == 0
        and not totals["errors"]
    )
    print(json.dumps(totals, sort_keys=True))


if __name__ == "__main__":
    main()
