"""The SLURM path against a real single-node cluster (tests/servers/slurm.py): the same
study through SLURM and locally, requeue and preemption resuming at the step they hit,
scancel seen as a failure and retried, detached orchestrators, `sweep stop`."""

from __future__ import annotations

import json
import logging
import re
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import job_events, output_of, shadowing_packages, xla_flags
from servers.slurm import sacct_state, squeue_ids
from test_study import assert_exact_budget, optuna_trials, sweep, trials_of

from stepscale.cli.status import study_status
from stepscale.errors import UsageError
from stepscale.files import read_json

pytestmark = pytest.mark.cluster

SLURM = ["launcher=slurm", "launcher.state_poll_s=2", "launcher.poll_s=0.3"]
# One long trial: time to interrupt it, checkpoints only every 1000 steps so a resume at
# any other step proves the job saved at the step it was signalled.
LONG = [
    "conf=smoke",
    "scientific.batch_size.values=[8]",
    "budget.trials_per_point=1",
    "budget.max_steps=5000",
    "train.log_every=50",
    "train.eval_every=250",
    "train.checkpoint_every=1000",
    "parallelism=1",
]
WALL = ("wall_s", "steps_per_s")


def _popen(args: list[str], cache: str, cwd: Path) -> subprocess.Popen:
    from test_study import FAST, SWEEP, _env

    return subprocess.Popen(
        [SWEEP, *args, *FAST, f"train.compile_cache_dir={cache}"],
        cwd=cwd,
        env=_env(cache),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait(predicate: Any, timeout: float, what: str, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _wait_for_sacct(job_id: str, state: str, timeout: float = 60) -> None:
    # The result file can be on disk while the job's batch step is still exiting, and
    # slurmctld hands the end to slurmdbd asynchronously: sacct may say RUNNING for a moment.
    seen: list[str] = []

    def settled() -> bool:
        seen.append(sacct_state(job_id))
        return seen[-1] == state

    try:
        _wait(settled, timeout, f"sacct to say {state} for job {job_id}", every=0.5)
    except AssertionError as err:
        raise AssertionError(f"{err}; it said {sorted(set(seen))}") from None


def _only_trial(run_dir: Path) -> Path:
    folders = list((run_dir / "trials").glob("*/*"))
    return folders[0] if len(folders) == 1 else None  # type: ignore[return-value]


def _last_step(folder: Path | None) -> int:
    if folder is None:
        return -1
    try:
        lines = (folder / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return -1
    for line in reversed(lines):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError):
            continue
    return -1


def _job_id(run_dir: Path) -> str:
    folder = _only_trial(run_dir)
    record = read_json(folder / "trial.json") if folder else None
    return str(record["job_id"]) if record and record.get("job_id") else ""


def _runs_again_after_requeue(job_id: str, timeout: float = 120) -> None:
    """Wait until a requeued batch job runs again (or has ended), only watching it.

    SLURM holds a requeued job until its begin time, ``cred_expire`` + 1 s after the
    requeue (`.ci/slurm-cluster.sh` sets cred_expire=10 on the test cluster, 120 s by
    default): the job's old credential is revoked, and a restart within the second of the
    revocation is refused ("Job credential revoked") and ends the job FAILED. A test that
    releases the job early (``scontrol update StartTime=now``) races that revocation, so
    none does. The requeue goes through COMPLETING (KillWait, the epilog) before the hold,
    and a job requeued twice (stopped by the test, then by its own checkpoint) is held
    twice."""
    seen: list[str] = []

    def running_again() -> bool:
        out = subprocess.run(
            ["squeue", "-h", "-j", job_id, "-o", "%T %r"], capture_output=True, text=True
        ).stdout.strip()
        seen.append(out)
        return (
            len(seen) > 1
            and (out.startswith("RUNNING") or not out)
            and any(s.startswith("PENDING") for s in seen)
        )

    try:
        _wait(running_again, timeout, f"job {job_id} to be requeued and run again", every=0.5)
    except AssertionError as err:
        raise AssertionError(f"{err}; squeue said {_runs(seen)}\n{_slurm_story(job_id)}") from None


def _runs(states: list[str]) -> list[str]:
    """Consecutive repeats folded: what the controller said, in order."""
    return [s for i, s in enumerate(states) if i == 0 or s != states[i - 1]]


def _slurm_story(*job_ids: str) -> str:
    """What the controller knows of these jobs and said about them: for a failure message."""
    import os

    parts = []
    for job in job_ids:
        for cmd in (
            ["scontrol", "show", "job", job],
            ["sacct", "-D", "-X", "-j", job, "-o", "JobID,State,ExitCode,Start,End,Reason%30"],
        ):
            out = subprocess.run(cmd, capture_output=True, text=True)
            parts.append(f"$ {' '.join(cmd)}\n{out.stdout}{out.stderr}")
    conf = Path(os.environ.get("SLURM_CONF", ""))
    log = conf.parent.parent / "log" / "slurmctld.log"
    if log.is_file():
        lines = [ln for ln in log.read_text(errors="replace").splitlines()
                 if any(f"JobId={j}" in ln or f"job {j}" in ln.lower() for j in job_ids)]  # fmt: skip
        parts.append("slurmctld.log:\n" + "\n".join(lines[-40:]))
    return "\n".join(parts)


def _metrics(folder: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in WALL} for r in rows]


def _finish(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        out, err = output_of(proc)
        raise AssertionError(f"sweep run did not finish in {timeout} s:\n{err[-3000:]}") from None
    assert proc.returncode == 0, err[-3000:]
    return out, err


def test_squeue_verdict_on_live_ended_unknown_jobs_and_an_unreachable_controller(
    slurm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    """A job counts as ended only when the controller says so; when it cannot be asked
    the job counts as live (asked again later), never as ended and retried twice."""
    from stepscale.sweeps.launch import slurm as slurm_side
    from stepscale.sweeps.launch.slurm import slurm_job_active

    out = subprocess.run(
        ["sbatch", "--parsable", "--wrap", "sleep 120", "-o", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        check=True,
    )
    job = out.stdout.strip().split(";")[0]
    try:
        assert slurm_job_active(job)
        assert not slurm_job_active("987654")  # the controller does not know it
        # The same cluster seen through a controller port nothing listens on.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            dead_port = s.getsockname()[1]
        text = re.sub(r"(?m)^SlurmctldPort=\d+", f"SlurmctldPort={dead_port}", slurm.read_text())
        # MessageTimeout=1: the client gives up on the closed port at once, not after ~18 s
        (tmp_path / "slurm.conf").write_text(text + "MessageTimeout=1\n")
        slurm_side._last_silence_warning[0] = 0.0
        with (
            monkeypatch.context() as m,
            caplog.at_level(logging.WARNING, "stepscale.sweeps.launch.slurm"),
        ):
            m.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
            assert slurm_job_active("987654")
            assert slurm_job_active(job)
        # The wait is said, once (not at every poll), naming the job and what squeue said.
        (said,) = [r.getMessage() for r in caplog.records]
        assert "did not answer about job 987654" in said and "count as still running" in said
        assert "Unable to contact slurm controller" in said, said
        # The controller answers again: the next silence is said at once.
        assert slurm_job_active(job) and slurm_side._last_silence_warning[0] == 0.0
    finally:
        subprocess.run(["scancel", job], check=True)
    _wait(lambda: not slurm_job_active(job), 60, f"cancelled job {job} to leave the queue")


def test_slurm_study_gives_the_same_trials_as_local(slurm: Path, tmp_path: Path, compile_cache):
    args = ["run", "conf=smoke", "scientific.batch_size.values=[8]", "parallelism=1", "seed=3"]
    local = sweep([*args, f"run_dir={tmp_path / 'local'}"], cache=compile_cache)
    assert local.returncode == 0, local.stderr
    on_slurm = sweep([*args, *SLURM, f"run_dir={tmp_path / 'slurm'}"], cache=compile_cache)
    assert on_slurm.returncode == 0, on_slurm.stderr

    def table(run_dir: Path) -> dict[str, list[tuple[Any, ...]]]:
        return {
            label: [(t.number, t.params, t.state, t.value) for t in trials]
            for label, trials in optuna_trials(run_dir, "smoke").items()
        }

    assert table(tmp_path / "slurm") == table(tmp_path / "local")
    assert_exact_budget(tmp_path / "slurm", "smoke", per_point=3, points=1)
    for records in trials_of(tmp_path / "slurm").values():
        for rec in records:
            assert rec["job_id"].isdigit()  # a SLURM job id, not a local pid
            folder = tmp_path / "slurm" / "trials" / rec["point"] / str(rec["number"])
            # Job logs land in the trial's folder.
            assert list((folder / "logs").glob(f"{rec['job_id']}_0_log.out"))
            _wait_for_sacct(rec["job_id"], "COMPLETED")


def test_trials_asked_together_go_as_one_job_array_under_its_cap(
    slurm: Path, tmp_path: Path, compile_cache
):
    """parallelism=4: the first pass asks 4 trials and submits them as one array, of which
    SLURM runs at most launcher.array_parallelism=2 at once (the node has room for 8)."""
    run_dir = tmp_path / "run"
    args = ["run", "conf=smoke", "parallelism=4", "launcher.array_parallelism=2"]
    out = sweep([*args, *SLURM, f"run_dir={run_dir}"], cache=compile_cache)
    assert out.returncode == 0, out.stderr
    assert_exact_budget(run_dir, "smoke", per_point=3, points=2)
    records = [rec for recs in trials_of(run_dir).values() for rec in recs]
    # The first array submitted (job ids compared as numbers: 8 comes before 11).
    array = min((rec["job_id"].split("_")[0] for rec in records if "_" in rec["job_id"]), key=int)
    tasks = sorted(r["job_id"] for r in records if r["job_id"].startswith(f"{array}_"))
    assert tasks == [f"{array}_{i}" for i in range(4)], [r["job_id"] for r in records]
    assert (run_dir / "jobs" / f"{array}_submission.sh").read_text().count("--array=0-3%2") == 1
    for rec in records:
        folder = run_dir / "trials" / rec["point"] / str(rec["number"])
        # Every trial's logs are in its folder (an array task's as links to the array's).
        log = folder / "logs" / f"{rec['job_id']}_0_log.out"
        assert f"{rec['job_id']}_submitted.pkl" in log.read_text(), log
        if rec["job_id"] in tasks:
            assert log.is_symlink() and Path(rec["job_files"]) == (run_dir / "jobs").resolve()
        # The job's own record of itself names the same id the orchestrator knows it by.
        events = [json.loads(e) for e in (folder / "events.jsonl").read_text().splitlines()]
        assert {e["job_id"] for e in events} == {rec["job_id"]}
        _wait_for_sacct(rec["job_id"], "COMPLETED")
    # What SLURM recorded: at most 2 of the array's tasks ran at any time.
    rows = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", array, "-o", "JobID,Start,End"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    spans = [tuple(row.split("|")[1:]) for row in rows]
    assert len(spans) == 4, rows
    assert max(sum(s <= start < e for s, e in spans) for start, _ in spans) <= 2, spans


# The requeue test's trial: long enough to be signalled twice (at step ≥ 300, then ≥ 500 steps
# after its first resume), checkpoints still due only every 1000 steps.
REQUEUED = [*LONG, "budget.max_steps=3000"]


def test_requeue_and_preemption_resume_at_the_signalled_step(
    slurm: Path, tmp_path: Path, compile_cache
):
    run_dir = tmp_path / "slurm"
    proc = _popen(["run", *REQUEUED, *SLURM, f"run_dir={run_dir}"], compile_cache, tmp_path)
    # The local reference runs beside it (the SLURM run waits on its requeues meanwhile).
    ref = _popen(["run", *REQUEUED, f"run_dir={tmp_path / 'ref'}"], compile_cache, tmp_path)
    try:
        # 1. `scontrol requeue` (what an admin or a preemption with PreemptMode=REQUEUE does):
        #    SIGTERM → checkpoint at the current step → the same job id runs again.
        _wait(lambda: _last_step(_only_trial(run_dir)) >= 300, 120, "training to start")
        job = _job_id(run_dir)
        subprocess.run(["scontrol", "requeue", job], check=True)
        _runs_again_after_requeue(job)
        folder = _only_trial(run_dir)
        first = _wait(lambda: _resumed_step(folder), 120, "the requeued job to resume")
        # 2. submitit's preemption/time-limit signal (USR2): the job checkpoints, submitit
        #    requeues it through its Checkpointable, it resumes.
        _wait(lambda: _last_step(folder) >= first + 500, 120, "training to go on")
        subprocess.run(["scancel", "--signal=USR2", job], check=True)
        _runs_again_after_requeue(job)
        _finish(proc, 300)
        _finish(ref, 300)
    finally:
        for p in (proc, ref):
            if p.poll() is None:
                p.kill()
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    stops = [(e["signal"], e["step"]) for e in events if e["event"] == "stopped"]
    assert [sig for sig, _ in stops] == ["SIGTERM", "SIGUSR2"], events
    # Each run resumed exactly where the signal stopped the previous one, and checkpoints
    # were due only every 1000 steps: the job saved at the step the signal reached it.
    resumes = _resume_steps(folder)
    assert resumes == [step for _, step in stops], events
    assert any(step % 1000 for step in resumes), resumes
    ref_folder = _only_trial(tmp_path / "ref")
    assert _metrics(folder) == _metrics(ref_folder)
    status = read_json(folder / "status.json")
    ref_status = read_json(ref_folder / "status.json")
    for key in ("steps_done", "final_eval_loss", "best_eval_loss", "steps_to_target", "state"):
        assert status[key] == ref_status[key], key
    # Still one Optuna trial, told once, every intermediate value once.
    (trial,) = optuna_trials(run_dir, "smoke")["batch_size=8"]
    assert trial.number == 0 and trial.state.name == "COMPLETE"
    assert sorted(trial.intermediate_values) == list(range(250, 3001, 250))
    record = read_json(folder / "trial.json")
    assert record["attempts"] == 1 and "failures" not in record, record
    _wait_for_sacct(job, "COMPLETED")


def _resume_steps(folder: Path) -> list[int]:
    """Steps the trial's job resumed from (its events.jsonl, one record per run)."""
    try:
        lines = (folder / "events.jsonl").read_text().splitlines()
    except OSError:
        return []
    return [r["step"] for r in map(json.loads, lines) if r["event"] == "resume"]


def _resumed_step(folder: Path) -> int:
    steps = _resume_steps(folder)
    return steps[-1] if steps else 0


def test_scancel_is_a_failure_retried_with_retries_and_final_without(
    slurm: Path, tmp_path: Path, compile_cache
):
    """Two studies at once, one with `retries=1`, one with `retries=0`, each trial job
    cancelled at step 300: the first study's trial runs again from its checkpoint as a
    second attempt and completes; the second's fails with the cancellation as its error."""
    procs, run_dirs = {}, {}
    # Cancelled at once (step 300): a shorter horizon than LONG's is enough for the retry.
    args = ["run", *LONG, "budget.max_steps=1500", *SLURM]
    try:
        for retries in (1, 0):
            run_dirs[retries] = run_dir = tmp_path / f"retries{retries}"
            procs[retries] = _popen(
                [*args, f"retries={retries}", f"run_dir={run_dir}"], compile_cache, tmp_path
            )
        first: dict[int, str] = {}

        def cancel_each_once_it_trains() -> bool:
            # Both studies are watched together: each job is cancelled as soon as its trial
            # is past step 300 (waiting for one first would let the other finish its 1500).
            for retries, run_dir in run_dirs.items():
                if retries not in first and _last_step(_only_trial(run_dir)) >= 300:
                    first[retries] = _job_id(run_dir)
                    subprocess.run(["scancel", first[retries]], check=True)
            return len(first) == len(run_dirs)

        _wait(cancel_each_once_it_trains, 120, "both trials to train")
        for proc in procs.values():
            _finish(proc, 300)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
    for retries, run_dir in run_dirs.items():
        _wait_for_sacct(first[retries], "CANCELLED", 30)
        record = read_json(_only_trial(run_dir) / "trial.json")
        (trial,) = optuna_trials(run_dir, "smoke")["batch_size=8"]
        if retries:
            assert record["attempts"] == 2 and record["state"] == "complete"
            assert record["job_id"] != first[retries]
            (failure,) = record["failures"]  # why it needed a second job
            assert "CANCELLED" in failure
            assert trial.state.name == "COMPLETE"
            assert _resume_steps(_only_trial(run_dir))  # the retry went on from the checkpoint
        else:
            assert record["state"] == "failed" and record["attempts"] == 1
            assert "CANCELLED" in record["error"]
            assert trial.state.name == "FAIL"
        assert first[retries] not in squeue_ids()


def test_a_detached_sweep_stops_resumes_survives_its_time_limit_and_reports(
    slurm: Path, tmp_path: Path, compile_cache
):
    """One detached study through its life. `--detach` returns at once (submitted from a
    directory holding its own models/, analysis/ and sweeps/ packages). `sweep stop` ends
    the orchestrator and the trial job; the trial is stopped, checkpointed, as the same
    attempt. The same command resumes it from its checkpoint. The orchestrator's time limit
    (USR2) requeues the orchestrator, and the new one owns the trial job that kept running:
    no second run of the trial, no lost result. `sweep status` and `sweep report` read the
    finished study."""
    run_dir = tmp_path / "run"
    user = shadowing_packages(tmp_path / "user")
    args = [*LONG, *SLURM, f"run_dir={run_dir}"]
    started = time.monotonic()
    out = sweep(["run", *args, "--detach"], cwd=user, cache=compile_cache)
    assert out.returncode == 0, out.stderr
    assert time.monotonic() - started < 60  # returns at once, does not wait for the study
    orch = read_json(run_dir / "orchestrator" / "job.json")["job_id"]
    assert f"SLURM job {orch}" in out.stdout
    assert f"sweep status {run_dir}" in out.stdout and f"sweep stop {run_dir}" in out.stdout
    folder = lambda: _only_trial(run_dir)  # noqa: E731 (the folder exists once asked)
    _wait(lambda: _last_step(folder()) >= 300, 180, "the trial to train")
    trial_job = _job_id(run_dir)

    # 1. `sweep stop`: both jobs end, the trial is stopped at its step as the same attempt.
    stop = sweep(["stop", str(run_dir)])
    assert stop.returncode == 0 and "stopped" in stop.stderr, stop.stderr
    _wait(lambda: orch not in squeue_ids() and trial_job not in squeue_ids(), 60, "jobs to end")
    record = read_json(folder() / "trial.json")
    assert record["state"] == "stopped" and record["attempts"] == 1
    stopped_at = _last_step(folder())
    assert 300 <= stopped_at < 5000
    status = json.loads(sweep(["status", str(run_dir), "--json"]).stdout)
    assert not status["finished"] and status["orchestrators"] == []

    # 2. The same command resumes it (detached again): the trial goes on from its checkpoint.
    again = sweep(["run", *args, "--detach"], cwd=user, cache=compile_cache)
    assert again.returncode == 0, again.stderr
    orch = read_json(run_dir / "orchestrator" / "job.json")["job_id"]
    _wait(lambda: _resume_steps(folder()), 120, "the trial to resume")
    assert _resume_steps(folder())[-1] >= 300
    resumed_job = _job_id(run_dir)
    assert resumed_job != trial_job

    # 3. The orchestrator's time limit: it requeues itself and its successor takes over.
    subprocess.run(["scancel", "--signal=USR2", orch], check=True)
    _runs_again_after_requeue(orch)

    def finished() -> bool:
        # read in this process, what `sweep status --json` prints (the command is run above
        # and below): a poll every 2 s through it cost a Python start and its imports each
        return study_status(run_dir)["finished"]

    try:
        _wait(finished, 600, "the study to finish", every=2)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{_slurm_story(orch, resumed_job)}") from None
    record = read_json(folder() / "trial.json")
    assert record["state"] == "complete" and record["attempts"] == 1
    assert record["job_id"] == resumed_job  # the same job ran to its end
    # one job stopped, one resumed; the orchestrator's requeue started no other
    assert job_events(folder()) == ["start", "stopped", "resume"]
    assert_exact_budget(run_dir, "smoke", per_point=1, points=1)
    run = read_json(run_dir / "run.json")
    assert len(run["sessions"]) == 3 and run["ended"] is not None  # three orchestrators
    _wait_for_sacct(orch, "COMPLETED")
    text = sweep(["status", str(run_dir)])
    assert "finished" in text.stdout and f"detached job {orch}" in text.stdout
    report = sweep(["report", str(run_dir)])
    assert report.returncode == 0, report.stderr
    assert (run_dir / "report" / "index.html").is_file()


def test_a_trial_spans_two_slurm_tasks_with_jax_distributed(
    slurm: Path, tmp_path: Path, compile_cache
):
    """launcher.tasks_per_node=2: both tasks train one trial as one SPMD program (gloo
    collectives on CPU, one device each) and give the numbers of one process with two
    devices."""
    from test_study import SWEEP, _env

    common = [
        SWEEP,
        "run",
        "conf=smoke",
        "scientific.batch_size.values=[8]",
        "budget.trials_per_point=1",
        "budget.max_steps=60",
        "parallelism=1",
        "pruner=none",
        f"train.compile_cache_dir={compile_cache}",
    ]
    env = _env(compile_cache) | {"XLA_FLAGS": xla_flags(2)}
    ref = subprocess.run(
        [*common, f"run_dir={tmp_path / 'ref'}"], env=env, capture_output=True, text=True
    )
    assert ref.returncode == 0, ref.stderr
    two = subprocess.run(
        [*common, *SLURM, "launcher.tasks_per_node=2", f"run_dir={tmp_path / 'slurm'}"],
        env=_env(compile_cache),  # one CPU device per task
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert two.returncode == 0, two.stderr
    folder = _only_trial(tmp_path / "slurm")
    status = read_json(folder / "status.json")
    assert status["state"] == "complete" and status["devices"] == 2
    rows, ref_rows = _metrics(folder), _metrics(_only_trial(tmp_path / "ref"))
    assert [r["step"] for r in rows] == [r["step"] for r in ref_rows]
    for row, ref_row in zip(rows, ref_rows, strict=True):
        for key, value in ref_row.items():
            if isinstance(value, float):
                assert row[key] == pytest.approx(value, rel=1e-5), (row["step"], key)
    # Both tasks ran (two task logs), one reported.
    job = read_json(folder / "trial.json")["job_id"]
    assert sorted(p.name for p in (folder / "logs").glob(f"{job}_*_log.out")) == [
        f"{job}_0_log.out",
        f"{job}_1_log.out",
    ]
    assert job_events(folder) == ["start"]
    record = read_json(folder / "trial.json")
    assert record["state"] == "complete" and record["attempts"] == 1, record


def test_a_command_trainer_study_detached_on_slurm_in_job_arrays(
    slurm: Path, tmp_path: Path, compile_cache
):
    """The NumPy example as a command trainer: detached orchestrator, trials in SLURM job
    arrays, then the report's B_crit from the program's own curves."""
    run_dir = tmp_path / "run"
    example = Path(__file__).resolve().parent.parent / "examples" / "numpy_regression"
    args = [
        "run", "conf=numpy_batchsize", "--config-dir", str(example),
        "scientific.batch_size.values=[4,16,64,256]", "budget.trials_per_point=4",
        "parallelism=4", *SLURM, f"run_dir={run_dir}", "--detach",
    ]  # fmt: skip
    out = sweep(args, cwd=tmp_path, cache=compile_cache)
    assert out.returncode == 0, out.stderr

    def finished() -> bool:
        try:
            return study_status(run_dir)["finished"]  # `sweep status --json`'s, in process
        except UsageError:  # no study.json yet: the detached orchestrator has not written it
            return False

    _wait(finished, 300, "the detached command-trainer study to finish", every=2)
    assert_exact_budget(run_dir, "numpy_batchsize", per_point=4, points=4)
    records = [rec for recs in trials_of(run_dir).values() for rec in recs]
    # none failed (a too-high LR ends above its first loss: diverged)
    assert all(rec["state"] in ("complete", "pruned", "diverged") for rec in records), records
    assert any("_" in rec["job_id"] for rec in records)  # array tasks
    report = sweep(["report", str(run_dir)])
    assert report.returncode == 0, report.stderr
    fit = json.loads((run_dir / "report" / "fits.json").read_text())["steps"]["groups"][0]
    assert fit["b_crit_ci"][0] < fit["b_crit"] < fit["b_crit_ci"][1]


def test_a_job_runs_a_queue_of_trials_and_a_requeue_resumes_the_one_it_was_running(
    slurm: Path, tmp_path: Path, compile_cache
):
    """launcher.trials_per_job=3: three trials of one point in one SLURM job, one after
    another. `scontrol requeue` during the second: the job runs again, skips the first
    (finished), resumes the second from its checkpoint, then runs the third."""
    run_dir = tmp_path / "run"
    example = Path(__file__).resolve().parent.parent / "examples" / "numpy_regression"
    args = [
        "run", "conf=numpy_batchsize", "--config-dir", str(example),
        "scientific.batch_size.values=[16]", "budget.trials_per_point=3", "parallelism=3",
        "launcher.trials_per_job=3", "trainer.config.train.sleep_s=0.02", *SLURM,
        "sampler.lag=2",  # three trials of the point asked at once (sweeps.study.ordered)
        f"run_dir={run_dir}",
    ]  # fmt: skip
    proc = _popen(args, compile_cache, tmp_path)
    second = run_dir / "trials" / "batch_size=16" / "1"
    try:
        # Requeued early in the second trial (300 steps of 20 ms): well before its end.
        _wait(lambda: _last_step(second) >= 30, 180, "the second trial of the queue to train")
        job = str(read_json(second / "trial.json")["job_id"])
        subprocess.run(["scontrol", "requeue", job], check=True)
        _runs_again_after_requeue(job)
        _finish(proc, 300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_exact_budget(run_dir, "numpy_batchsize", per_point=3, points=1)
    records = sorted(trials_of(run_dir)["batch_size=16"], key=lambda r: r["number"])
    # SLURM puts the requeued job back in the queue (JobRequeue=1) and the same job runs
    # again: it skips the first trial (finished), resumes the second from its checkpoint
    # and runs the third. No trial failed, none was retried as another job.
    assert [(r["job_id"], r.get("job_index")) for r in records] == [(job, 0), (job, 1), (job, 2)], (
        f"{records}\n{_slurm_story(job)}"
    )
    for r in records:
        assert r["state"] == "complete", r
        assert r["attempts"] == 1 and "failures" not in r, r
        folder = run_dir / "trials" / "batch_size=16" / str(r["number"])
        events = job_events(folder)
        assert events == (["start", "stopped", "resume"] if r["number"] == 1 else ["start"]), r
        steps = [m["step"] for m in _metrics(folder)]
        assert steps == sorted(set(steps)) and steps[-1] == 300, r


def test_a_submission_sbatch_refuses_leaves_the_trials_queued_for_the_next_run(
    slurm: Path, tmp_path: Path, compile_cache
):
    """The cluster answers (the check before the run dir passes) but sbatch refuses the
    trials' job (an sbatch option it does not know): exit 1 with one paragraph naming the
    command, its exit code and what sbatch said; no traceback; the trials are queued, not
    stopped, and the same command without the bad option runs them as first attempts."""
    run_dir = tmp_path / "run"
    args = ["run", "conf=smoke", "scientific.batch_size.values=[8]", "budget.trials_per_point=1"]
    args += ["parallelism=1", *SLURM, f"run_dir={run_dir}"]
    refused = sweep([*args, "+launcher.additional.no_such_option=1"], cache=compile_cache)
    assert refused.returncode == 1, refused.stderr
    assert "Traceback" not in refused.stderr
    (message,) = [ln for ln in refused.stderr.splitlines() if ln.startswith("sweep: error:")]
    assert re.search(r"`sbatch [^`]+` exited with code \d+: ", message), message
    assert "unrecognized option '--no-such-option=1'" in message, message  # sbatch's stderr
    assert "queued" in message, message
    (record,) = trials_of(run_dir)["batch_size=8"]
    assert record["state"] == "queued" and "job_id" not in record
    status = sweep(["status", str(run_dir)])
    assert "1 trial(s) queued" in status.stdout, status.stdout
    again = sweep(args, cache=compile_cache)
    assert again.returncode == 0, again.stderr
    (record,) = trials_of(run_dir)["batch_size=8"]
    assert record["state"] == "complete" and record["attempts"] == 1
    assert "interruptions" not in record and record["job_id"].isdigit()


def test_a_stopped_command_trainer_study_leaves_no_process_on_the_node(
    slurm: Path, tmp_path: Path
) -> None:
    """A script that forks a child and a double-forked daemon, on SLURM: Ctrl-C, SIGTERM to
    the orchestrator and `sweep stop` each end them all, the trial job included (the job is
    scancelled, checkpoints and ends; the same command resumes it), within 10 s
    (tests/test_misbehave.py runs the same locally)."""
    from test_misbehave import secret_env, stop_a_forking_study

    hows = ["Ctrl-C", "SIGTERM", "sweep stop"]
    stop_a_forking_study(tmp_path, tmp_path / "run", SLURM, secret_env(), hows)
