"""`launcher=ray` against a real Ray cluster the tests start on 127.0.0.1 (one module
fixture: a head without CPUs and two worker nodes of one CPU each, tests/servers/ray.py):
exact budgets with warm workers, a killed node's trial resuming elsewhere from its
checkpoint with bit-identical metrics, a killed orchestrator's successor, a detached
orchestrator stopped with `sweep stop`, a trial over two hosts joined by jax.distributed,
and bad input refused before anything runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    TEST_COMPILE_CACHE,
    assert_exact_budget,
    optuna_trials,
    read_jsonl,
    reported,
    trials_of,
    user_env,
    wait_for,
    without_wall,
)
from optuna.trial import TrialState
from servers.ray import LOOPBACK, use_loopback

from stepscale.cli.main import main
from stepscale.cli.status import study_status
from stepscale.files import read_json

use_loopback()  # before Ray is imported: the cluster, its jobs and the tests stay on 127.0.0.1

SWEEP = str(Path(sys.executable).with_name("sweep"))
# Tiny trials: 2 points × 2 trials of the smoke study, 30 steps each.
SMALL = ["conf=smoke", "budget.trials_per_point=2", "budget.max_steps=30", "parallelism=2"]
# One trial long enough to interrupt (checkpoints every 50 steps), never pruned.
LONG = [
    "conf=smoke", "scientific.batch_size.values=[8]", "budget.trials_per_point=1",
    "budget.max_steps=1500", "train.log_every=25", "train.eval_every=50",
    "train.checkpoint_every=50", "pruner.name=none", "parallelism=1",
]  # fmt: skip


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """The module's two-node cluster (skipped without Ray, failed under
    STEPSCALE_REQUIRE_CLUSTER=1)."""
    from servers import ServerUnavailable, skip_or_fail
    from servers.ray import ray_cluster

    try:
        with ray_cluster() as running:
            yield running
    except ServerUnavailable as exc:
        skip_or_fail(str(exc))


def _ray(cluster: Any) -> list[str]:
    return [
        "launcher=ray",
        f"launcher.address={cluster.address}",
        "heartbeat_timeout_s=30",
        "launcher.poll_s=0.1",
        "train.devices=1",
        f"train.compile_cache_dir={TEST_COMPILE_CACHE}",
    ]


def _env() -> dict[str, str]:
    return {**user_env(), **LOOPBACK}


def _sweep(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SWEEP, *args], env=_env(), capture_output=True, text=True, timeout=timeout
    )


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [SWEEP, *args], env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip


def _steps(folder: Path) -> list[int]:
    return [r["step"] for r in read_jsonl(folder / "metrics.jsonl")]


def _worker_pid(folder: Path) -> int | None:
    beat = read_json(folder / "heartbeat.job", lenient=True)
    return int(beat["pid"]) if beat else None


# ---------------------------------------------------------------- no cluster needed


def test_without_ray_launcher_ray_names_the_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as if not installed
    code = main(["run", *SMALL, "launcher=ray", f"run_dir={tmp_path / 'r'}", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "pip install 'stepscale[ray]'" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


def test_bad_launcher_keys_exit_2_naming_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def refused(*overrides: str) -> str:
        code = main(["run", *SMALL, "launcher=ray", *overrides, f"run_dir={tmp_path / 'r'}"])
        err = capsys.readouterr().err
        assert code == 2, err
        return err

    assert "launcher.hosts_per_trial must be at least 1" in refused("launcher.hosts_per_trial=0")
    assert "launcher.cpus_per_trial must be 0 or more" in refused("launcher.cpus_per_trial=-1")
    assert "launcher.gpus_per_trial" in refused("+launcher.resources.GPU=1")
    assert "launcher.resources.TPU must be 0 or more" in refused("+launcher.resources.TPU=-4")
    assert "launcher.local_cpus" in refused("launcher.local_cpus=2", "launcher.address=auto")
    assert "launcher.probe_timeout_s must be positive" in refused("launcher.probe_timeout_s=0")
    assert "launcher=ray has no key 'partition'" in refused("launcher.partition=gpu")
    assert not (tmp_path / "r").exists()


def _need_ray() -> None:
    """Skip without Ray (fail under STEPSCALE_REQUIRE_CLUSTER=1)."""
    from servers import skip_or_fail

    try:
        import ray  # noqa: F401
    except ImportError:
        skip_or_fail("Ray is not installed: pip install 'stepscale[ray]'")


def test_an_unreachable_address_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _need_ray()
    start = time.monotonic()
    code = main(
        ["run", *SMALL, "launcher=ray", "launcher.address=127.0.0.1:1", f"run_dir={tmp_path / 'r'}"]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert "launcher.address" in err and "127.0.0.1:1" in err and "Traceback" not in err
    assert time.monotonic() - start < 30 and not (tmp_path / "r").exists()


def test_a_dead_actor_waits_for_rays_health_check_window() -> None:
    """A dead actor whose node still looks alive is classified once Ray's health checks
    would have declared its node dead: period × failure threshold + one timeout, + 5 s."""
    _need_ray()
    from ray._raylet import Config

    from stepscale.sweeps.launch.ray_pool import node_death_window_s

    window = Config.health_check_period_ms() * Config.health_check_failure_threshold()
    assert node_death_window_s() == (window + Config.health_check_timeout_ms()) / 1000 + 5
    assert node_death_window_s() == 30.0  # Ray's defaults: 3 s × 5 + 10 s, + 5 s


# ------------------------------------------------------------------- on the cluster


@pytest.mark.cluster
def test_a_study_runs_exactly_its_budget_on_warm_workers(
    tmp_path: Path, cluster: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "b"
    code = main(["run", *SMALL, *_ray(cluster), f"run_dir={run_dir}"])  # in this process
    assert code == 0, capsys.readouterr().err
    assert_exact_budget(run_dir, "smoke", per_point=2, points=2)
    # 4 trials on 2 slots: each slot's warm worker ran trials one after another.
    slots = {r["job_id"].split(".")[0] for rs in trials_of(run_dir).values() for r in rs}
    assert len(slots) <= 2, slots
    status = _sweep("status", str(run_dir), "--json")
    assert json.loads(status.stdout)["finished"], status.stdout


@pytest.mark.cluster
def test_resources_no_node_has_and_a_run_dir_nodes_cannot_see_exit_2(
    tmp_path: Path, cluster: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from servers import ServerUnavailable, skip_or_fail
    from servers.ray import private_node

    def refused(*overrides: str) -> str:  # not --dry-run: a dry run contacts no cluster
        code = main(["run", *SMALL, *_ray(cluster), *overrides])
        err = capsys.readouterr().err
        assert code == 2, err
        assert "Traceback" not in err
        return err

    run_dir = f"run_dir={tmp_path / 'r'}"
    assert "launcher.resources.TPU: no node" in refused("+launcher.resources.TPU=4", run_dir)
    assert "launcher.accelerator_type" in refused("launcher.accelerator_type=H100", run_dir)
    assert "launcher.hosts_per_trial" in refused("launcher.hosts_per_trial=3", run_dir)
    assert "launcher.cpus_per_trial" in refused("launcher.cpus_per_trial=2", run_dir)
    private = tmp_path / "private"
    private.mkdir()
    try:
        with private_node(cluster, private):
            err = refused(f"run_dir={private / 'study'}")
    except ServerUnavailable as exc:
        skip_or_fail(str(exc))
    assert "run_dir:" in err and "does not see" in err, err
    assert not (private / "study").exists() and list(private.iterdir()) == []


@pytest.mark.cluster
def test_a_two_host_trial_is_one_jax_distributed_job(tmp_path: Path, cluster: Any) -> None:
    run_dir = tmp_path / "h"
    args = [*LONG, "budget.max_steps=20", *_ray(cluster), "train.devices=2"]
    args += ["launcher.hosts_per_trial=2", "keep_checkpoints=true", f"run_dir={run_dir}"]
    res = _sweep("run", *args)
    assert res.returncode == 0, res.stderr
    assert_exact_budget(run_dir, "smoke", per_point=1, points=1)
    (folder,) = (run_dir / "trials").glob("*/*")
    status = read_json(folder / "status.json")
    assert status["state"] == "complete" and status["steps_done"] == 20
    # Process 0 wrote the checkpoints of a run laid out over 2 processes, 1 device each.
    (last,) = sorted((folder / "checkpoints").glob("step_*"))[-1:]
    layout = json.loads((last / "host.json").read_text())["layout"]
    assert layout["processes"] == 2 and layout["devices"] == 2, layout
    job = read_json(folder / "trial.json")["job_id"]
    assert {p.name for p in (folder / "logs").glob(f"{job}_*_log.err")} == {
        f"{job}_0_log.err",
        f"{job}_1_log.err",
    }


@pytest.mark.cluster
def test_a_killed_orchestrators_successor_runs_exactly_the_budget(
    tmp_path: Path, cluster: Any
) -> None:
    run_dir = tmp_path / "k"
    args = ["run", *SMALL, "budget.max_steps=300", *_ray(cluster), f"run_dir={run_dir}"]
    proc = _start(*args)
    wait_for(lambda: len(list(run_dir.glob("trials/*/*/metrics.jsonl"))) >= 2, timeout=120)
    os.killpg(proc.pid, signal.SIGKILL)  # the orchestrator; its actors die with it (Ray)
    proc.wait()
    res = _sweep(*args)
    assert res.returncode == 0, res.stderr
    assert_exact_budget(run_dir, "smoke", per_point=2, points=2)
    for records in trials_of(run_dir).values():
        for r in records:
            assert r["attempts"] == 1, r  # interrupted, not failed: no retry used
            folder = run_dir / "trials" / r["point"] / str(r["number"])
            steps = _steps(folder)
            assert steps == sorted(set(steps))  # nothing run twice, nothing lost


@pytest.mark.cluster
def test_detach_then_sweep_stop_checkpoints_trials_and_a_rerun_resumes_them(
    tmp_path: Path, cluster: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "d"
    args = ["run", *LONG, *_ray(cluster), f"run_dir={run_dir}"]
    res = _sweep(*args, "--detach")
    assert res.returncode == 0, res.stderr
    assert "submitted orchestrator as Ray job stepscale-smoke-" in res.stdout, res.stdout
    job = read_json(run_dir / "orchestrator" / "job.json")
    assert job["launcher"] == "ray" and job["job_api"]
    folder = run_dir / "trials" / "batch_size=8" / "0"
    wait_for(lambda: reported(folder, 50), timeout=150)
    shown = study_status(run_dir)  # what `sweep status` shows, while it runs
    assert shown["detached_job"]["job_id"] == job["job_id"] and shown["orchestrators"]
    assert main(["stop", str(run_dir)]) == 0, capsys.readouterr().err
    record = read_json(folder / "trial.json")
    assert record["state"] == "stopped", record
    assert any((folder / "checkpoints").glob("step_*"))
    stopped_at = _steps(folder)[-1]
    res = _sweep(*args)
    assert res.returncode == 0, res.stderr
    assert_exact_budget(run_dir, "smoke", per_point=1, points=1)
    status = read_json(folder / "status.json")
    assert 0 < status["resumed_from_step"] <= stopped_at and status["steps_done"] == 1500
    assert read_json(folder / "trial.json")["attempts"] == 1


@pytest.mark.cluster
def test_a_killed_node_interrupts_its_trial_which_resumes_on_the_other_node_bit_identical(
    tmp_path: Path, cluster: Any
) -> None:
    """The cluster loses a node (the tests after it need one). An uninterrupted run of the
    same trial runs meanwhile on the other node, where the interrupted one then resumes."""
    reference, run_dir = tmp_path / "ref", tmp_path / "n"
    uninterrupted = _start("run", *LONG, *_ray(cluster), f"run_dir={reference}")
    proc = _start("run", *LONG, *_ray(cluster), f"run_dir={run_dir}")
    folder = run_dir / "trials" / "batch_size=8" / "0"
    wait_for(lambda: reported(folder, 100) and _worker_pid(folder) is not None, timeout=120)
    node = cluster.node_of(_worker_pid(folder))
    assert node is not None
    cluster.kill(node)  # a preempted VM: its raylet and every process on it, at once
    for p in (uninterrupted, proc):
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
    record = read_json(folder / "trial.json")
    assert record["attempts"] == 1 and record.get("interruptions") == 1, record
    status = read_json(folder / "status.json")
    assert status["resumed_from_step"] > 0 and status["steps_done"] == 1500
    ours, theirs = (read_jsonl(f / "metrics.jsonl") for f in (folder, _only(reference)))
    assert without_wall(ours) == without_wall(theirs)  # bit-identical on CPU
    (trial,) = optuna_trials(run_dir, "smoke")["batch_size=8"]
    assert trial.state == TrialState.COMPLETE and trial.number == 0


def _only(run_dir: Path) -> Path:
    (folder,) = (run_dir / "trials").glob("*/*")
    return folder


@pytest.mark.cluster
def test_a_stopped_command_trainer_study_leaves_no_process_on_the_nodes(
    tmp_path: Path, cluster: Any
) -> None:
    """A script that forks a child and a double-forked daemon, on Ray's warm workers:
    Ctrl-C, SIGTERM to the orchestrator and `sweep stop` each end them all within 10 s, the
    same command resuming the trial in between (tests/test_misbehave.py runs the same
    locally)."""
    from test_misbehave import stop_a_forking_study

    launcher = ["launcher=ray", f"launcher.address={cluster.address}", "launcher.poll_s=0.1"]
    hows = ["Ctrl-C", "SIGTERM", "sweep stop"]
    stop_a_forking_study(tmp_path, tmp_path / "run", launcher, _env(), hows)
