"""Faults a cluster deals, and what survives them: torn journal writes, orchestrators killed
mid-trial, trainers that crash, two orchestrators started at once, signals. Each study here
runs a tiny command trainer (standard library only: no JAX in its process), so a study of
a few trials takes seconds; the long random kill storm is `benchmarks/kill_storm.py`."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from helpers import (
    assert_exact_budget,
    optuna_trials,
    output_of,
    read_jsonl,
    reported,
    run_sweep,
    start_sweep,
    trials_of,
    wait_for,
)

from stepscale import rundir
from stepscale.sweeps.study.journal import open_journal

# A trainer that counts its steps in a checkpoint file, reports a loss that falls with the
# learning rate, sleeps ``sleep_s`` a step (time to be killed), and crashes once at step
# ``crash_at`` when asked (the file ``crashed`` marks that it did).
TRAINER = """\
import json, os, signal, sys, time
from pathlib import Path
from stepscale import client

cfg = client.config()
if cfg.get("ignore_term"):  # a trainer that finishes its run whatever it is told
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
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
  config: {width: 1, lr: 0.1, steps: 10, sleep_s: 0.0, crash_at: 0, ignore_term: 0}
  keys: {max_steps: steps}
scientific:
  width: {path: width, values: [1, 2]}
nuisance:
  lr: {path: lr, type: float, low: 0.01, high: 1.0, scale: log}
# its loss at LR 0.01 comes 1% of the way to the target by step 1: trials that cannot learn
# end early by that rule (docs/science.md), which these fault tests leave out
budget: {trials_per_point: 3, max_steps: 10, no_progress_by: null}
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


def wait_while_running(proc: subprocess.Popen[str], predicate, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    """Wait for ``predicate`` while ``proc`` runs (its output shown if it ended first)."""

    def holds() -> bool:
        if proc.poll() is not None:
            out, err = output_of(proc)
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
    # Interrupted: every trial the orchestrator had recorded that had not finished (some
    # had checkpoints, some had only just started).
    interrupted = {
        p.parent.relative_to(run_dir / "trials").as_posix()
        for p in run_dir.glob("trials/*/*/trial.json")
        if not (p.parent / rundir.STATUS_JSON).exists()
    }
    assert any((run_dir / "trials" / t / "ckpt.json").exists() for t in interrupted)
    journal = run_dir / rundir.JOURNAL
    data = journal.read_bytes()
    journal.write_bytes(data[: len(data) - 1 - len(data.rstrip(b"\n").rsplit(b"\n", 1)[1]) // 2])
    res = run_sweep(*args, cwd=project)
    assert res.returncode == 0, res.stderr
    assert "record cut short" in res.stderr
    assert_exact_budget(run_dir, "faulty", per_point=3, points=2)
    assert list((run_dir / rundir.ORCHESTRATORS_DIR).iterdir()) == []  # the killed one's too
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


# A kill at each point of an ask (sweeps/run/killpoints.py): the trial exists in Optuna, with
# none, some or all of its parameters, and no folder. Each run below is killed at the next
# ask's point; the next run completes the cut-short trial and runs it, and asks the next.
KILL_POINTS = ["ask:created", "ask:param", "ask:asked"]
TWO_PARAMS = [
    "run", "conf=faulty", "--config-dir", ".", "scientific.width.values=[1]",
    "budget.trials_per_point=4", "parallelism=1",
    "+nuisance.sleep_s={path: sleep_s, type: float, low: 0.0, high: 0.001}",
]  # fmt: skip


@pytest.mark.slow
def test_a_kill_between_asking_for_a_trial_and_recording_it_loses_nothing(
    project: Path,
) -> None:
    run_dir = project / "runs" / "faulty"
    for point in KILL_POINTS:
        proc = start_sweep(*TWO_PARAMS, cwd=project, env={"STEPSCALE_KILL_AT": point})
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == -signal.SIGKILL, (point, err)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # its workers, which outlive it
        ((label, trials),) = optuna_trials(run_dir, "faulty").items()
        cut = trials[-1]  # the newest: asked when the kill came
        assert cut.state.name == "RUNNING" and "kind" not in cut.user_attrs, point
        if point != "ask:asked":
            assert "sleep_s" not in cut.params, point  # asked, parameters not all there
        assert not (run_dir / "trials" / label / str(cut.number)).exists(), point
    res = run_sweep(*TWO_PARAMS, cwd=project)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr and "lock" not in res.stderr.lower(), res.stderr
    assert_exact_budget(run_dir, "faulty", per_point=4, points=1)
    for t in optuna_trials(run_dir, "faulty")[label]:
        assert set(t.params) == {"lr", "sleep_s"} and t.user_attrs["kind"] == "tune", t
    for r in trials_of(run_dir)[label]:
        # first attempts, no retry; an interrupted one (killed with its orchestrator) resumed
        assert r["state"] == "complete" and r["attempts"] == 1, r
        folder = run_dir / "trials" / label / str(r["number"])
        assert [m["step"] for m in read_jsonl(folder / "metrics.jsonl")] == list(range(11)), r


def test_a_journal_lock_held_by_a_killed_process_is_taken_at_once(tmp_path: Path) -> None:
    # A process takes the journal's lock and is killed with it held (kill -9): the next
    # writer appends at once, with no lock file to wait out and nothing on stderr.
    journal = tmp_path / rundir.JOURNAL
    _journal_with_trials(journal, 1)
    holder = subprocess.Popen(
        [sys.executable, "-c", (
            "import sys, time\n"
            "from stepscale.sweeps.study.journal import JournalProcessLock\n"
            f"JournalProcessLock({str(journal)!r}).acquire()\n"
            "print('held', flush=True)\n"
            "time.sleep(600)\n"
        )],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        # While it lives, the lock excludes: another process cannot take it.
        probe = subprocess.run(
            [sys.executable, "-c", (
                "import fcntl, os, sys\n"
                f"fd = os.open({str(journal) + '.flock'!r}, os.O_RDWR)\n"
                "try:\n    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
                "except OSError:\n    sys.exit(7)\n"
            )],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert probe.returncode == 7, probe.stderr
    finally:
        holder.kill()
        holder.wait()
    proc = subprocess.run(
        [sys.executable, "-c", (
            "import time, optuna\n"
            "from stepscale.sweeps.study.journal import open_journal\n"
            "t0 = time.monotonic()\n"
            f"study = optuna.load_study(study_name='s', storage=open_journal(__import__('pathlib').Path({str(journal)!r})))\n"
            "study.tell(study.ask(), 1.0)\n"
            "print(time.monotonic() - t0)\n"
        )],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr  # no "taking longer … to acquire the lock file"
    assert float(proc.stdout) < 5.0  # Optuna's own lock file would be waited out 30 s
    assert len(_study(journal).trials) == 2


# ------------------------------------------------------------------------------ signals

ONE_TRIAL = [
    "run", "conf=faulty", "--config-dir", ".", "scientific.width.values=[1]",
    "budget.trials_per_point=1", "parallelism=1", "trainer.config.sleep_s=0.1",
]  # fmt: skip


@pytest.mark.slow
def test_sigterm_stops_the_orchestrator_as_ctrl_c_does_and_the_study_resumes(
    project: Path,
) -> None:
    # With a pruner, every eval loss goes to Optuna too: a resumed job must not report
    # again the steps it redoes after its checkpoint (Optuna warns and ignores them).
    pruner = ["pruner.name=median", "pruner.n_startup_trials=5"]
    proc = start_sweep(*ONE_TRIAL, *pruner, cwd=project)
    run_dir = project / "runs" / "faulty"
    trial = run_dir / "trials" / "width=1" / "0"
    wait_while_running(proc, lambda: reported(trial, 3))
    proc.send_signal(signal.SIGTERM)  # the orchestrator's pid alone, as a cluster does
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "stopped by SIGTERM" in err and "Traceback" not in err, err
    record = json.loads((trial / rundir.TRIAL_JSON).read_text())
    assert record["state"] == "stopped", record  # checkpointed, resumes next time
    run = json.loads((run_dir / rundir.RUN_JSON).read_text())
    assert run["sessions"][-1]["ended"] is not None and run["ended"] is None
    res = run_sweep(*ONE_TRIAL, *pruner, cwd=project)
    assert res.returncode == 0, res.stderr
    record = json.loads((trial / rundir.TRIAL_JSON).read_text())
    assert record["state"] == "complete" and record["attempts"] == 1, record
    assert record["interruptions"] == 1 and "failures" not in record, record
    assert [r["step"] for r in read_jsonl(trial / rundir.METRICS_JSONL)] == list(range(11))
    assert_exact_budget(run_dir, "faulty", per_point=1, points=1)
    (told,) = optuna_trials(run_dir, "faulty")["width=1"]
    assert sorted(told.intermediate_values) == list(range(1, 11))
    logs = "".join(p.read_text() for p in (trial / rundir.LOGS_DIR).glob("*.err"))
    assert "already reported" not in logs


@pytest.mark.slow
def test_sigint_to_the_orchestrator_alone_records_a_trial_that_finished_as_finished(
    project: Path,
) -> None:
    # Ctrl-C to the orchestrator's pid (not its group): the trial job hears of it from the
    # orchestrator; this trainer runs to its end anyway, so the trial is complete.
    proc = start_sweep(*ONE_TRIAL, "trainer.config.ignore_term=1", cwd=project)
    run_dir = project / "runs" / "faulty"
    trial = run_dir / "trials" / "width=1" / "0"
    wait_while_running(proc, lambda: reported(trial, 3))
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err, err
    assert time.monotonic() - started < 10  # no wait for a signal the job never had
    record = json.loads((trial / rundir.TRIAL_JSON).read_text())
    assert record["state"] == "complete", record
    (told,) = optuna_trials(run_dir, "faulty")["width=1"]
    assert told.state == optuna.trial.TrialState.COMPLETE


# ------------------------------------------------------- the storage is the truth


@pytest.mark.slow
def test_trial_folders_left_behind_by_a_failed_write_are_repaired_from_the_storage(
    project: Path,
) -> None:
    # One trial completes, one fails (its trainer crashes, no retry); then their folders
    # are put back as a full disk during the final bookkeeping leaves them: trial.json and
    # status.json say running, heartbeats, checkpoints and a temporary file remain.
    args = [
        "run", "conf=faulty", "--config-dir", ".", "scientific.width.path=crash_at",
        "scientific.width.values=[0,3]", "budget.trials_per_point=1", "retries=0",
    ]  # fmt: skip
    assert run_sweep(*args, cwd=project).returncode == 0
    run_dir = project / "runs" / "faulty"
    folders = {p.parent.parent.name: p.parent for p in run_dir.glob("trials/*/0/trial.json")}
    assert json.loads((folders["width=3"] / rundir.TRIAL_JSON).read_text())["state"] == "failed"
    for folder in folders.values():
        record = json.loads((folder / rundir.TRIAL_JSON).read_text())
        record.update(state="running", objective=None, ended=None)
        record.pop("error", None)
        (folder / rundir.TRIAL_JSON).write_text(json.dumps(record))
        (folder / rundir.STATUS_JSON).write_text(json.dumps({"state": "running", "steps_done": 3}))
        for name in (rundir.JOB_HEARTBEAT, rundir.ORCH_HEARTBEAT, ".trial.json.1.2.tmp"):
            (folder / name).write_text("{}")
        (folder / rundir.CHECKPOINTS_DIR).mkdir()
    status = json.loads(run_sweep("status", str(run_dir), "--json", cwd=project).stdout)
    assert sum(p["running"] for p in status["points"]) == 2  # what the folders say

    res = run_sweep(*args, cwd=project)  # the same command: nothing to run, folders repaired
    assert res.returncode == 0, res.stderr
    status = json.loads(run_sweep("status", str(run_dir), "--json", cwd=project).stdout)
    states = {p["point"]: (p["complete"], p["failed"], p["running"]) for p in status["points"]}
    assert states == {"width=0": (1, 0, 0), "width=3": (0, 1, 0)}, status
    assert status["finished"] is True, status
    for label, folder in folders.items():
        record = json.loads((folder / rundir.TRIAL_JSON).read_text())
        assert record["state"] == ("failed" if label == "width=3" else "complete"), record
        assert (record["objective"] is None) == (label == "width=3") and record["ended"]
        assert json.loads((folder / rundir.STATUS_JSON).read_text())["state"] == record["state"]
        assert sorted(p.name for p in folder.iterdir() if p.name.startswith((".", "heart"))) == []
        assert not (folder / rundir.CHECKPOINTS_DIR).exists()


# ---------------------------------------------------------------- start-up together


@pytest.mark.slow
def test_two_orchestrators_started_together_on_a_fresh_run_dir_never_fail(
    project: Path,
) -> None:
    base = [*ONE_TRIAL[:-1], "trainer.config.steps=2"]
    for rep in range(5):  # five fresh run dirs: the race of two first starts, five times
        run = [*base, f"run_dir=runs/together{rep}"]
        procs = [start_sweep(*run, cwd=project) for _ in range(2)]
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, (rep, err)
        assert_exact_budget(project / "runs" / f"together{rep}", "faulty", per_point=1, points=1)


# ------------------------------------------------------------------ a full disk


@pytest.fixture
def small_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A real 512 KiB file system (tmpfs, mounted as root, as CI runs), unmounted after."""
    from servers import skip_or_fail

    mount = tmp_path / "disk"
    mount.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        skip_or_fail(f"cannot mount a small tmpfs here: {res.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.slow
def test_a_full_disk_names_the_file_loses_nothing_and_the_study_goes_on_after(
    project: Path, small_disk: Path
) -> None:
    filler = small_disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:  # fill the disk to its last byte
        while os.write(fd, b"\0" * 512):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    run = [*ONE_TRIAL[:-1], f"run_dir={small_disk / 'run'}"]
    res = run_sweep(*run, cwd=project)
    assert res.returncode == 1, res.stderr
    message = res.stderr.strip()
    assert "Traceback" not in message and "\n" not in message, message
    assert f"disk full writing {small_disk / 'run'}/" in message, message
    assert "nothing saved was lost" in message
    filler.unlink()  # space again: the same command runs the study
    res = run_sweep(*run, cwd=project)
    assert res.returncode == 0, res.stderr
    assert_exact_budget(small_disk / "run", "faulty", per_point=1, points=1)


# --------------------------------------------------------------------- large grids


def test_a_long_check_of_a_large_grid_says_how_far_it_has_come(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from stepscale.cli.main import main
    from stepscale.sweeps.study import plan

    monkeypatch.chdir(project)
    monkeypatch.setattr(plan._Progress, "AFTER_S", 0.0)  # as if every check were slow
    monkeypatch.setattr(plan._Progress, "EVERY_S", 0.0)
    monkeypatch.setattr(plan._Progress, "MIN_POINTS", 10)
    values = ",".join(str(v) for v in range(1, 41))
    code = main(
        [
            "run",
            "conf=faulty",
            "--config-dir",
            ".",
            "--dry-run",
            f"scientific.width.values=[{values}]",
        ]
    )
    assert code == 0
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "checking every point" in ln]
    assert len(lines) >= 20 and "40 of 40 points" in lines[-1], lines  # as it goes, to the end


def _immutable(run_dir: Path, on: bool) -> None:
    """chattr ±i on every folder of ``run_dir``: no file can be made, renamed or removed
    there, even by root (as CI runs) — a run dir that became unwritable."""
    folders = [str(run_dir), *(str(Path(d) / n) for d, ns, _ in os.walk(run_dir) for n in ns)]
    folders = [f for f in folders if not os.path.islink(f)]  # aliases/: links, not folders
    res = subprocess.run(["chattr", "+i" if on else "-i", *folders], capture_output=True, text=True)
    if res.returncode != 0:
        from servers import skip_or_fail

        skip_or_fail(f"chattr does not work here: {res.stderr.strip()}")


@pytest.mark.slow
def test_a_run_dir_made_unwritable_mid_study_ends_with_a_message_and_resumes(
    project: Path,
) -> None:
    run_dir = project / "runs" / "faulty"
    run = [*ONE_TRIAL, "budget.trials_per_point=2", "retries=0"]
    proc = start_sweep(*run, cwd=project)
    try:
        wait_while_running(proc, lambda: reported(run_dir / "trials" / "width=1" / "0", 3))
        _immutable(run_dir, True)
        _, err = proc.communicate(timeout=120)
    finally:
        _immutable(run_dir, False)
        if proc.poll() is None:
            kill_group(proc)
    assert proc.returncode == 1, err
    message = err.strip().splitlines()[-1]
    assert message.startswith("sweep: error: cannot write there: Operation not permitted ("), err
    assert "Traceback" not in err, err
    res = run_sweep(*run, cwd=project)  # writable again: the same command finishes the study
    assert res.returncode == 0, res.stderr
    assert_exact_budget(run_dir, "faulty", per_point=2, points=1)


def test_a_heartbeat_whose_writer_is_a_zombie_is_dead_at_once(tmp_path: Path) -> None:
    """A killed orchestrator's job left unreaped (its new parent a subreaper that never
    waits: a long-lived process that once ran a command trainer's job in-process) is a
    zombie; kill(pid, 0) still succeeds on it. Its trial must be free at once, not after
    the heartbeat timeout (a resumed study waited 2 minutes for it)."""
    from stepscale.sweeps.job import heartbeat

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        wait_for(lambda: Path(f"/proc/{proc.pid}/stat").read_text().split(") ")[1][0] == "Z")
        record = {"time": time.time(), "host": heartbeat.HOST, "pid": proc.pid}
        assert not heartbeat.fresh(record, timeout_s=120.0)
        assert heartbeat.fresh({**record, "pid": os.getpid()}, timeout_s=120.0)
    finally:
        proc.wait()
