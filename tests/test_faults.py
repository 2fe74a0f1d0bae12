"""Faults a cluster deals, and what survives them: torn journal writes, orchestrators killed
mid-trial, trainers that crash, two orchestrators started at once, signals. Each study here
runs a tiny command trainer (standard library only: no JAX in its process), so a study of
a few trials takes seconds; the long random kill storm is `benchmarks/kill_storm.py`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from helpers import assert_exact_budget, read_jsonl, trials_of, wait_for

from stepscale import rundir
from stepscale.sweeps.journal import open_journal

SWEEP = str(Path(sys.executable).with_name("sweep"))

# A trainer that counts its steps in a checkpoint file, reports a loss that falls with the
# learning rate, sleeps ``sleep_s`` a step (time to be killed), and crashes once at step
# ``crash_at`` when asked (the file ``crashed`` marks that it did).
TRAINER = """\
import json, os, sys, time
from pathlib import Path
from stepscale import client

cfg = client.config()
ckpt = Path("ckpt.json")
start = json.loads(ckpt.read_text())["step"] if ckpt.exists() else 0
client.begin(start)
if start == 0:
    client.report(0, eval_loss=2.0)
for step in range(start + 1, int(cfg["steps"]) + 1):
    time.sleep(float(cfg["sleep_s"]))
    if step == int(cfg["crash_at"]) and not Path("crashed").exists():
        Path("crashed").write_text("")
        print("crashing on purpose", file=sys.stderr)
        os._exit(3)
    if step % 2 == 0:
        Path("ckpt.tmp").write_text(json.dumps({"step": step}))
        os.replace("ckpt.tmp", ckpt)
    if not client.report(step, eval_loss=2.0 / (1.0 + float(cfg["lr"]) * step)):
        break
"""

STUDY = """\
# @package _global_
# A tiny study of a command trainer, for fault tests.
trainer:
  command: ["{python}", train.py]
  config: {width: 1, lr: 0.1, steps: 10, sleep_s: 0.0, crash_at: 0}
  keys: {max_steps: steps}
scientific:
  width: {path: width, values: [1, 2]}
nuisance:
  lr: {path: lr, type: float, low: 0.01, high: 1.0, scale: log}
budget: {trials_per_point: 3, max_steps: 10}
objective: {kind: steps_to_target, target_loss: 0.5}
parallelism: 2
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A folder with the fault trainer and its study (conf=faulty --config-dir .)."""
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "faulty.yaml").write_text(STUDY)
    (tmp_path / "train.py").write_text(TRAINER)
    return tmp_path


def sweep(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The real console script."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    return subprocess.run(
        [SWEEP, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def start_sweep(*args: str, cwd: Path) -> subprocess.Popen[str]:
    """`sweep` in its own process group (a kill takes its trainers along)."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    return subprocess.Popen(
        [SWEEP, *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def wait_while_running(proc: subprocess.Popen[str], predicate, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    """Wait for ``predicate`` while ``proc`` runs (its output shown if it ended first)."""

    def holds() -> bool:
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"sweep ended early ({proc.returncode}): {out}{err}")
        return bool(predicate())

    wait_for(holds, timeout=timeout)


def kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the process group of ``proc`` (orchestrator, controllers, trainers)."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


# ------------------------------------------------------------------ the journal


def _journal_with_trials(path: Path, n: int) -> None:
    storage = open_journal(path)
    study = optuna.create_study(study_name="s", storage=storage)
    for i in range(n):
        study.tell(study.ask(), float(i))


def _study(path: Path) -> optuna.Study:
    return optuna.load_study(study_name="s", storage=open_journal(path))


def test_a_torn_last_record_is_dropped_with_a_backup_and_the_study_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "study.journal"
    _journal_with_trials(path, 3)
    whole = path.read_bytes()
    last = whole.rstrip(b"\n").rsplit(b"\n", 1)[1]
    path.write_bytes(whole + last[: len(last) // 2])  # a write cut short by a kill
    study = _study(path)
    err = capsys.readouterr().err
    assert "record cut short" in err and ".bak" in err and err.count("\n") == 1
    backups = list(tmp_path.glob("study.journal.*.bak"))
    assert len(backups) == 1 and backups[0].read_bytes().endswith(last[: len(last) // 2])
    assert path.read_bytes() == whole
    study.tell(study.ask(), 3.0)  # appends onto a clean line
    plain = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(path))
    )  # Optuna itself reads the file again
    assert [t.value for t in optuna.load_study(study_name="s", storage=plain).trials] == [
        0.0,
        1.0,
        2.0,
        3.0,
    ]


def test_a_torn_record_cut_before_the_next_append_never_corrupts_the_journal(
    tmp_path: Path,
) -> None:
    # A trainer's job killed while reporting tears the last line while the orchestrator
    # runs; the orchestrator's next write must not glue its record onto the torn one.
    path = tmp_path / "study.journal"
    _journal_with_trials(path, 2)
    study = _study(path)
    with open(path, "ab") as f:
        f.write(b'{"op_code": 7, "worker_id": "x", "trial_id": 0, "st')
    study.tell(study.ask(), 2.0)
    assert [t.value for t in _study(path).trials] == [0.0, 1.0, 2.0]


def test_a_journal_broken_by_a_glued_record_is_mended(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # What older versions left: a torn record (the tell of trial 1), then Optuna's own
    # backend appended the next trial onto it; Optuna itself cannot read such a file.
    path, three = tmp_path / "study.journal", tmp_path / "three.journal"
    _journal_with_trials(path, 2)
    _journal_with_trials(three, 3)
    lines = path.read_bytes().splitlines(keepends=True)
    trial_2 = three.read_bytes().splitlines(keepends=True)[len(lines) :]
    torn = lines[-1][: len(lines[-1]) // 2]
    path.write_bytes(b"".join([*lines[:-1], torn + trial_2[0], *trial_2[1:]]))
    with pytest.raises(ValueError):
        optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
    study = _study(path)
    assert "unreadable record" in capsys.readouterr().err
    # The torn tell is gone (trial 1 is running again: the orchestrator re-runs or tells
    # it from its folder); the whole records glued onto it stand.
    assert [(t.state.name, t.value) for t in study.trials] == [
        ("COMPLETE", 0.0),
        ("RUNNING", None),
        ("COMPLETE", 2.0),
    ]
    assert len(list(tmp_path.glob("study.journal.*.bak"))) == 1


# --------------------------------------------- kills of the orchestrator and the trainer


@pytest.mark.slow
def test_an_orchestrator_kill_and_a_torn_journal_cost_no_retry_and_no_trial(
    project: Path,
) -> None:
    # Every trial crashes once (at step 6) and has one retry; the orchestrator is killed
    # with its trainers mid-study, and the journal's last record is torn as by that kill.
    # The same command finishes the exact budget: the kill is an interruption, not a failure.
    args = ["run", "conf=faulty", "--config-dir", ".", "retries=1"]
    args += ["trainer.config.sleep_s=0.1", "trainer.config.crash_at=6"]
    proc = start_sweep(*args, cwd=project)
    run_dir = project / "runs" / "faulty"
    try:
        wait_while_running(proc, lambda: any(run_dir.glob("trials/*/*/ckpt.json")))
    finally:
        kill_group(proc)
    interrupted = {
        p.parent.relative_to(run_dir / "trials").as_posix()
        for p in run_dir.glob("trials/*/*/ckpt.json")
        if not (p.parent / rundir.STATUS_JSON).exists()
    }
    assert interrupted
    journal = run_dir / rundir.JOURNAL
    data = journal.read_bytes()
    journal.write_bytes(data[: len(data) - 1 - len(data.rstrip(b"\n").rsplit(b"\n", 1)[1]) // 2])
    res = sweep(*args, cwd=project)
    assert res.returncode == 0, res.stderr
    assert "record cut short" in res.stderr
    assert_exact_budget(run_dir, "faulty", per_point=3, points=2)
    for label, records in trials_of(run_dir).items():
        for r in records:
            assert r["state"] == "complete", r
            assert r["attempts"] == 2 and len(r["failures"]) == 1, r  # the one crash
            failure = r["failures"][0]  # one line, naming the log
            assert failure.startswith("CommandFailed: the trainer command exited with code 3")
            assert "\n" not in failure and "logs/" in failure
            folded = f"{label}/{r['number']}"
            assert r.get("interruptions", 0) == (1 if folded in interrupted else 0), r
            steps = [m["step"] for m in read_jsonl(run_dir / "trials" / folded / "metrics.jsonl")]
            assert steps == list(range(11)), folded  # resumed from checkpoints, nothing twice
