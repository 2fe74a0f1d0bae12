"""Warm workers (`launcher=local`): trials run one after another in long-lived processes.
The same numbers as a fresh process per trial; the process-per-trial guarantees under
faults (a worker killed or crashed mid-trial, a hung trial, the orchestrator killed or
interrupted): exactly the budget, nothing run twice; workers replaced after their share of
trials or above their memory limit. The speed is measured in benchmarks/, not here."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import (
    assert_exact_budget,
    read_jsonl,
    reported,
    run_sweep,
    start_sweep,
    trials_of,
    wait_for,
    without_wall,
)

from stepscale import rundir

WORKER = "stepscale.sweeps.job.worker_main"

# A Python-function trainer: it runs inside the warm worker. Steps sleep ``sleep_s``; it
# checkpoints every 2 steps (after reporting the step); on request it crashes its process
# once at ``crash_at`` (os._exit) or hangs at ``hang_at`` holding the GIL (a catastrophic
# regular expression: not even its heartbeat thread runs).
TRAINER = """\
import json, os, re, time
from pathlib import Path
from stepscale.trainer import Action

def main(config, reporter, trial_dir):
    trial_dir = Path(trial_dir)
    ckpt = trial_dir / "ckpt.json"
    step = json.loads(ckpt.read_text())["step"] if ckpt.exists() else 0
    reporter.begin(step)
    if step == 0:
        reporter.report(0, {"eval_loss": 2.0})
    while step < int(config.steps):
        time.sleep(float(config.sleep_s))
        step += 1
        if step == int(config.crash_at) and not (trial_dir / "crashed").exists():
            (trial_dir / "crashed").write_text("")
            os._exit(1)
        if step == int(config.hang_at):
            re.match(r"(a+)+$", "a" * 64 + "b")
        action = reporter.report(step, {"eval_loss": 2.0 / (1.0 + float(config.lr) * step)})
        # after the step's report: a kill between the two would otherwise leave a checkpoint
        # past the last record, and the resumed run would never report that step
        if step % 2 == 0:
            (trial_dir / "ckpt.tmp").write_text(json.dumps({"step": step}))
            os.replace(trial_dir / "ckpt.tmp", ckpt)
        if action is Action.PRUNE:
            return {"state": "pruned", "steps_done": step}
    return {"state": "complete", "steps_done": step}
"""

STUDY = """\
# @package _global_
# A tiny study of a Python-function trainer, for warm-worker tests.
trainer:
  target: pytrainer:main
  config: {width: 1, lr: 0.1, steps: 10, sleep_s: 0.0, crash_at: 0, hang_at: 0}
  keys: {max_steps: steps}
scientific:
  width: {path: width, values: [1, 2]}
nuisance:
  lr: {path: lr, type: float, low: 0.01, high: 1.0, scale: log}
budget: {trials_per_point: 2, max_steps: 10}
objective: {kind: steps_to_target, target_loss: 0.5}
parallelism: 2
"""

BASE = ["run", "conf=warm", "--config-dir", "."]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A folder with the trainer (pytrainer.py) and its study (conf=warm --config-dir .)."""
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "warm.yaml").write_text(STUDY)
    (tmp_path / "pytrainer.py").write_text(TRAINER)
    return tmp_path


def _sigterm_pending(pid: int) -> bool:
    """Is a SIGTERM waiting for the (stopped) process ``pid``?"""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    masks = [
        line.split()[1] for line in status.splitlines() if line.startswith(("SigPnd", "ShdPnd"))
    ]
    return any(int(m, 16) & (1 << (signal.SIGTERM - 1)) for m in masks)


def workers_of(pid: int | None = None) -> list[int]:
    """Warm worker processes (of the orchestrator ``pid``, or of anyone)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes()
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if WORKER.encode() in argv and (pid is None or parent == pid):
            found.append(int(proc.name))
    return found


def job_pids(run_dir: Path) -> dict[str, int]:
    """Trial → the pid of the worker that ran its last job (job ids are ``<pid>.<n>``)."""
    return {
        r["trial"]: int(str(r["job_id"]).split(".")[0])
        for rs in trials_of(run_dir).values()
        for r in rs
    }


# ------------------------------------------------------------------- same numbers


@pytest.mark.slow
def test_warm_workers_give_the_trials_and_numbers_of_a_process_per_trial(
    tmp_path: Path, compile_cache: str
) -> None:
    # The built-in trainer, 2 trials at one point, one after another: the second runs in
    # the worker that ran the first, on its compiled programs.
    args = [
        "run", "conf=smoke", "scientific.batch_size.values=[8]", "budget.trials_per_point=2",
        "parallelism=1", "train.devices=1", f"train.compile_cache_dir={compile_cache}",
    ]  # fmt: skip
    runs = {}
    for launcher in ("local", "process"):
        res = run_sweep(*args, f"launcher={launcher}", f"run_dir={launcher}", cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        runs[launcher] = tmp_path / launcher
    warm, fresh = (
        {r["trial"]: r for rs in trials_of(runs[k]).values() for r in rs}
        for k in ("local", "process")
    )
    assert {t: r["nuisance"] for t, r in warm.items()} == {
        t: r["nuisance"] for t, r in fresh.items()
    }
    assert {t: r["objective"] for t, r in warm.items()} == {
        t: r["objective"] for t, r in fresh.items()
    }
    for trial in warm:
        folder = Path("trials") / trial
        got = without_wall(read_jsonl(runs["local"] / folder / rundir.METRICS_JSONL))
        want = without_wall(read_jsonl(runs["process"] / folder / rundir.METRICS_JSONL))
        assert got == want, trial  # bit-identical: the same floats, step by step
    assert len(set(job_pids(runs["local"]).values())) == 1  # one warm worker ran both
    assert len(set(job_pids(runs["process"]).values())) == 2  # a process each


# -------------------------------------------------------------------------- faults


@pytest.mark.slow
def test_a_crashed_or_killed_worker_costs_its_trial_a_retry_and_nothing_else(
    project: Path,
) -> None:
    # Every trial's process dies once (os._exit at step 3); one worker is also killed with
    # SIGKILL mid-trial from outside. Each such trial is retried as the same Optuna trial,
    # from its checkpoint, in a fresh worker; the study ends with exactly its budget.
    args = [*BASE, "retries=2", "trainer.config.sleep_s=0.1", "trainer.config.crash_at=3"]
    proc = start_sweep(*args, cwd=project)
    run_dir = project / "runs" / "warm"
    try:
        wait_for(lambda: any((run_dir / "trials").glob("*/*/crashed")), timeout=120)
        target = run_dir / "trials" / "width=1" / "1"
        wait_for(lambda: reported(target, 5) or proc.poll() is not None, timeout=120)
        record = json.loads((target / rundir.TRIAL_JSON).read_text())
        os.kill(int(str(record["job_id"]).split(".")[0]), signal.SIGKILL)
        _, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err
    assert_exact_budget(run_dir, "warm", per_point=2, points=2)
    records = {r["trial"]: r for rs in trials_of(run_dir).values() for r in rs}
    for trial, r in records.items():
        assert r["state"] == "complete", r
        crashes = [f for f in r["failures"] if "exited with code 1" in f]
        assert len(crashes) == 1, r  # its own os._exit, one line naming the worker's fate
        steps = [m["step"] for m in read_jsonl(run_dir / "trials" / trial / "metrics.jsonl")]
        assert steps == list(range(11)), trial  # resumed from checkpoints, nothing twice
    killed = records["width=1/1"]["failures"]
    assert any("killed by SIGKILL" in f for f in killed), killed
    assert not workers_of(proc.pid)  # the orchestrator ended its workers


@pytest.mark.slow
def test_a_hung_trial_has_its_worker_killed_and_the_study_goes_on(project: Path) -> None:
    args = [
        *BASE, "scientific.width.values=[1]", "parallelism=1", "retries=0",
        "heartbeat_timeout_s=11", "trainer.config.hang_at=2",
    ]  # fmt: skip
    res = run_sweep(*args, cwd=project)
    assert res.returncode == 0, res.stderr
    records = trials_of(project / "runs" / "warm")["width=1"]
    assert [r["state"] for r in records] == ["failed", "failed"], records
    assert all("heartbeat stopped" in r["error"] for r in records), records


@pytest.mark.slow
def test_killed_and_interrupted_orchestrators_leave_no_worker_and_lose_nothing(
    project: Path,
) -> None:
    args = [*BASE, "trainer.config.sleep_s=0.2", "trainer.config.steps=20"]  # 4 s a trial
    args += ["budget.max_steps=20"]
    run_dir = project / "runs" / "warm"
    first = run_dir / "trials" / "width=1" / "0"
    # 1. SIGKILL of the orchestrator alone: its workers see it gone, checkpoint and end.
    proc = start_sweep(*args, cwd=project)
    wait_for(lambda: reported(first, 3), timeout=120)
    workers = workers_of(proc.pid)
    assert workers
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    wait_for(lambda: not any(Path(f"/proc/{w}").exists() for w in workers), timeout=30)
    # 2. Ctrl-C to the whole group (a terminal's): trials checkpoint, exit 130.
    proc = start_sweep(*args, cwd=project)
    wait_for(lambda: len([p for p in run_dir.glob("trials/*/*/metrics.jsonl")]) >= 3, 120)
    time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert not workers_of(proc.pid)
    # 3. `sweep stop` from another shell: the running trials checkpoint, the sweep ends.
    # The workers are paused until the stop reaches them: the trials left after 1 and 2 are
    # short, and on a loaded machine they could otherwise end before `sweep stop` starts.
    proc = start_sweep(*args, cwd=project)
    wait_for(lambda: workers_of(proc.pid), 60)  # it runs trials again
    paused = workers_of(proc.pid)
    for w in paused:
        os.kill(w, signal.SIGSTOP)
    try:
        stopper = start_sweep("stop", str(run_dir), cwd=project)
        wait_for(lambda: any(_sigterm_pending(w) for w in paused), 120)
    finally:
        for w in paused:
            with contextlib.suppress(ProcessLookupError):
                os.kill(w, signal.SIGCONT)
    _, stop_err = stopper.communicate(timeout=120)
    stop = subprocess.CompletedProcess(stopper.args, stopper.returncode, "", stop_err)
    assert stop.returncode == 0, stop.stderr
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "stopped on request" in err, (err, stop.stderr)
    # 4. The same command finishes the exact budget, every trial once.
    res = run_sweep(*args, cwd=project)
    assert res.returncode == 0, res.stderr
    assert_exact_budget(run_dir, "warm", per_point=2, points=2)
    for rs in trials_of(run_dir).values():
        for r in rs:
            assert r["state"] == "complete" and "failures" not in r, r
            steps = [
                m["step"] for m in read_jsonl(run_dir / "trials" / r["trial"] / "metrics.jsonl")
            ]
            assert steps == list(range(21)), r["trial"]
    assert any(r.get("interruptions") for rs in trials_of(run_dir).values() for r in rs)


@pytest.mark.slow
def test_workers_are_replaced_after_their_share_of_trials_or_above_their_memory(
    project: Path,
) -> None:
    one = [*BASE, "parallelism=1", "budget.trials_per_point=3"]  # 6 trials, one at a time
    res = run_sweep(*one, "launcher.worker_max_trials=2", "run_dir=runs/share", cwd=project)
    assert res.returncode == 0, res.stderr
    pids = job_pids(project / "runs" / "share")
    assert len(set(pids.values())) == 3, pids  # two trials each
    res = run_sweep(*one, "launcher.worker_max_rss_gb=0.001", "run_dir=runs/rss", cwd=project)
    assert res.returncode == 0, res.stderr
    pids = job_pids(project / "runs" / "rss")
    assert len(set(pids.values())) == 6, pids  # every worker grew past 1 MB: one trial each
