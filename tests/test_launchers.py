"""Launchers: GPUs per trial (local slots, SLURM options), job environments."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import cloudpickle
import pytest

from stepscale.errors import UsageError
from stepscale.sweeps.launch.launchers import make_launcher
from stepscale.sweeps.launch.slurm import slurm_parameters
from stepscale.sweeps.study.launcher_configs import LocalLauncherConfig, SlurmLauncherConfig


def visible_devices(hold_s: float) -> str:
    """What a job sees (runs in the job's own process)."""
    time.sleep(hold_s)
    return os.environ.get("CUDA_VISIBLE_DEVICES", "")


def test_local_jobs_get_disjoint_gpus_and_free_slots_are_reused(tmp_path: Path):
    # The jobs cannot import this test module: send the function itself.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    launcher = make_launcher(LocalLauncherConfig(gpus_per_trial=2))
    first = launcher.submit(tmp_path / "a", visible_devices, 3.0)
    second = launcher.submit(tmp_path / "b", visible_devices, 0.0)
    assert second.outcome() == (True, "2,3")
    third = launcher.submit(tmp_path / "c", visible_devices, 0.0)  # slot 1 is free again
    assert third.outcome() == (True, "2,3")
    assert first.outcome() == (True, "0,1")
    fourth = launcher.submit(tmp_path / "d", visible_devices, 0.0)
    assert fourth.outcome() == (True, "0,1")
    assert (
        "CUDA_VISIBLE_DEVICES" not in os.environ or os.environ.get("CUDA_VISIBLE_DEVICES") != "0,1"
    )


def test_slurm_options_from_the_launcher_config():
    cfg = SlurmLauncherConfig(
        partition="gpu",
        account="proj",
        qos="high",
        time_min=240,
        nodes=2,
        tasks_per_node=1,
        gpus_per_trial=16,
        cpus_per_task=32,
        mem_gb=200,
        constraint="a100",
        setup=["module load cuda"],
        signal_delay_s=300,
        additional={"exclude": "node01"},
    )
    params = slurm_parameters(cfg, "bvs:batch_size=8/0")
    assert params == {
        "job_name": "bvs:batch_size=8/0",
        "time": 240,
        "nodes": 2,
        "ntasks_per_node": 1,
        "array_parallelism": 256,
        "signal_delay_s": 300,
        "partition": "gpu",
        "account": "proj",
        "qos": "high",
        "gpus_per_node": 8,
        "cpus_per_task": 32,
        "mem": "204800M",
        "constraint": "a100",
        "setup": ["module load cuda"],
        "additional_parameters": {"exclude": "node01"},
    }
    with pytest.raises(UsageError, match="gpus_per_trial"):
        slurm_parameters(SlurmLauncherConfig(nodes=2, gpus_per_trial=3), "x")


def test_sbatch_from_inside_a_job_does_not_pass_the_jobs_slurm_settings_on(tmp_path: Path):
    """A detached orchestrator runs in a SLURM job; its SLURM_* variables must not reach the
    trial jobs it submits (srun would take them as its own), SLURM_CONF must."""
    from stepscale.sweeps.launch.jobs import environment as _environment

    os.environ["SLURM_MEM_PER_CPU"] = "1000"
    os.environ["SLURM_CONF"] = "/etc/slurm/slurm.conf.test"
    try:
        with _environment({"X_TEST": "1"}, drop=("SLURM_",)):
            assert "SLURM_MEM_PER_CPU" not in os.environ
            assert os.environ["SLURM_CONF"] == "/etc/slurm/slurm.conf.test"
            assert os.environ["X_TEST"] == "1"
        assert os.environ["SLURM_MEM_PER_CPU"] == "1000" and "X_TEST" not in os.environ
    finally:
        os.environ.pop("SLURM_MEM_PER_CPU", None)
        os.environ.pop("SLURM_CONF", None)
