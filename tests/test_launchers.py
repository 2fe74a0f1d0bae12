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
from stepscale.sweeps.study.launcher_configs import (
    LauncherConfig,
    LocalLauncherConfig,
    SlurmLauncherConfig,
)


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


# A run dir's config.yaml from before per-launcher schemas: every launcher's keys.
OLD_LAUNCHER = """launcher:
  name: {name}
  timeout_min: 1440
  pin_cpus: false
  worker_max_trials: 100
  worker_max_rss_gb: null
  gpus_per_trial: null
  poll_s: 0.5
  partition: gpu
  account: null
  qos: null
  time_min: 60
  nodes: 1
  tasks_per_node: 1
  gpus_per_task: null
  cpus_per_task: null
  mem_gb: null
  constraint: null
  gpus_per_node: null
  array_parallelism: 256
  setup: []
  signal_delay_s: 90
  max_requeues: 20
  trials_per_job: 1
  state_poll_s: 15.0
  additional: {{}}
  orchestrator:
    partition: cpu
    account: null
    qos: null
    time_min: 1440
    cpus: 1
    mem_gb: 2.0
    additional: {{}}
"""


def _with_old_launcher(config_yaml: Path, name: str) -> None:
    """Put the old launcher section (all 29 keys) into a run dir's config.yaml."""
    text = config_yaml.read_text()
    start = text.index("launcher:\n")
    end = text.index("\nstorage:", start) + 1
    config_yaml.write_text(text[:start] + OLD_LAUNCHER.format(name=name) + text[end:])


def _study_files(run_dir: Path, overrides: list[str]) -> None:
    """The files `sweep run` writes first in a run dir (without running a trial)."""
    from stepscale.sweeps.study.compose import prepare_study
    from stepscale.sweeps.study.files import make_run_dir, write_study_files
    from stepscale.sweeps.study.space import build_space
    from stepscale.sweeps.trainers.kinds import study_trainer

    raw, cfg, _ = prepare_study(overrides, None)
    space = build_space(cfg, study_trainer(cfg, None)[1])
    make_run_dir(run_dir)
    write_study_files(run_dir, raw, cfg, space)


def test_an_old_run_dirs_launcher_section_reads_as_its_launchers_schema(tmp_path: Path):
    from stepscale.sweeps.run.branches import study_config

    run_dir = tmp_path / "run"
    _study_files(run_dir, ["conf=smoke", "launcher=slurm", f"run_dir={run_dir}"])
    saved = (run_dir / "config.yaml").read_text()
    assert "pin_cpus" not in saved and "partition: null" in saved  # its own keys only now
    _with_old_launcher(run_dir / "config.yaml", "slurm")
    cfg = study_config(run_dir)
    assert isinstance(cfg.launcher, SlurmLauncherConfig)
    assert (cfg.launcher.partition, cfg.launcher.orchestrator.partition) == ("gpu", "cpu")
    assert not hasattr(cfg.launcher, "pin_cpus")
    _with_old_launcher(run_dir / "config.yaml", "local")
    cfg = study_config(run_dir)
    assert isinstance(cfg.launcher, LocalLauncherConfig) and cfg.launcher.pin_cpus is False
    assert not hasattr(cfg.launcher, "partition")


def test_an_old_run_dir_is_run_again_and_answers_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """A study's identity leaves the launcher out: an old run dir's config.yaml (every
    launcher's keys) goes on with the same command, and `sweep status` reads it."""
    from stepscale.cli.main import main

    run_dir = tmp_path / "run"
    args = ["conf=smoke", f"run_dir={run_dir}"]
    _study_files(run_dir, args)
    _with_old_launcher(run_dir / "config.yaml", "local")
    assert main(["run", *args, "--dry-run"]) == 0, capsys.readouterr().err
    assert main(["status", str(run_dir)]) == 0, capsys.readouterr().err


def test_an_old_training_run_dir_resumes(tmp_path: Path):
    """`sweep train` resumes a run dir whose config.yaml has the old launcher section."""
    from omegaconf import OmegaConf

    from stepscale.cli.train import _check_run_dir
    from stepscale.sweeps.study.compose import compose_config

    cfg, _ = compose_config(["conf=train_smoke"], None, command="train")
    text = OmegaConf.to_yaml(cfg, resolve=True)
    (tmp_path / "config.yaml").write_text(text)
    _with_old_launcher(tmp_path / "config.yaml", "local")
    _check_run_dir(tmp_path, text, resume=True)  # no UsageError: the same run


def test_each_launcher_answers_for_itself():
    """What the scheduler asks instead of the launcher's name."""
    from stepscale.sweeps.launch.launchers import launcher_class, launcher_names

    assert launcher_names()[:5] == ["local", "process", "slurm", "inline", "ray"]
    asked = ("on_this_machine", "child_jobs", "submits_together", "jobs_outlive_orchestrator")
    table = {n: [getattr(launcher_class(n), a) for a in (*asked, "can_detach")]
             for n in ("local", "process", "slurm", "inline", "ray")}  # fmt: skip
    assert table == {
        "local": [True, True, False, False, False],
        "process": [True, True, False, False, False],
        "slurm": [False, False, True, True, True],
        "inline": [True, False, False, False, False],
        # Ray's actors end with their orchestrator (which stops them on Ctrl-C), so the
        # orchestrator follows them as closely as its own processes.
        "ray": [False, True, False, False, True],
    }
    with pytest.raises(UsageError, match=r"launcher\.name: unknown 'nope'"):
        launcher_class("nope")


def test_launcher_name_and_a_users_launcher_files_choose_the_schema(tmp_path: Path):
    """``launcher.name`` still names the launcher (on the command line or in a preset), and
    a launcher file of the user's composes onto the schema it names — or, without
    ``defaults:``, onto the schema of the launcher its ``name`` gives."""
    from stepscale.sweeps.study.compose import prepare_study
    from stepscale.sweeps.study.launcher_configs import (
        InlineLauncherConfig,
        ProcessLauncherConfig,
    )

    conf = tmp_path / "conf"
    (conf / "conf").mkdir(parents=True)
    (conf / "launcher").mkdir()
    head = "# @package _global_\ndefaults:\n  - smoke\n  - _self_\n"
    (conf / "conf" / "named.yaml").write_text(head + "launcher: {name: inline}\n")
    (conf / "conf" / "keyed.yaml").write_text(head + "launcher: {name: slurm, partition: a}\n")
    schema = "defaults:\n  - slurm_schema\n  - _self_\n"
    (conf / "launcher" / "mine.yaml").write_text(schema + "name: slurm\npartition: b\n")
    (conf / "launcher" / "bare.yaml").write_text("name: slurm\npartition: c\naccount: d\n")

    def launcher(*overrides: str) -> LauncherConfig:
        return prepare_study(["conf=smoke", *overrides], str(conf))[1].launcher

    assert type(launcher("launcher.name=process")) is ProcessLauncherConfig
    assert type(prepare_study(["conf=named"], str(conf))[1].launcher) is InlineLauncherConfig
    keyed = prepare_study(["conf=keyed"], str(conf))[1].launcher
    assert isinstance(keyed, SlurmLauncherConfig) and keyed.partition == "a"
    assert launcher("launcher.name=slurm", "launcher.partition=e").partition == "e"
    assert launcher("launcher=mine", "launcher.qos=q").partition == "b"
    bare = launcher("launcher=bare", "launcher.qos=q")
    assert isinstance(bare, SlurmLauncherConfig) and (bare.account, bare.qos) == ("d", "q")
    with pytest.raises(UsageError, match=r"launcher=local has no key 'nodes'.*launcher=slurm"):
        launcher("launcher.nodes=2")
