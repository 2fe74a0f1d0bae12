"""Checks of a study's launcher settings, and of ``--detach``, before the run dir is made."""

from __future__ import annotations

from stepscale.errors import UsageError
from stepscale.sweeps.study.schema import StudyConfig


def check_launch(cfg: StudyConfig, *, detach: bool) -> None:
    """The launcher's name and settings, and ``--detach`` (a SLURM job) → `UsageError`."""
    from stepscale.sweeps.launch.launchers import LAUNCHERS
    from stepscale.sweeps.launch.slurm import slurm_parameters

    name = cfg.launcher.name
    if name not in LAUNCHERS:
        raise UsageError(f"launcher.name: unknown {name!r}; choose one of {', '.join(LAUNCHERS)}")
    if detach and name != "slurm":
        raise UsageError(
            f"--detach runs the orchestrator as a SLURM job: it needs launcher=slurm "
            f"(got launcher={name})"
        )
    if name == "slurm":
        slurm_parameters(cfg.launcher, cfg.name)  # its own checks raise UsageError
    lc = cfg.launcher
    for key in ("nodes", "tasks_per_node", "array_parallelism", "time_min", "timeout_min"):
        value = getattr(lc, key, None)
        if value is not None and value < 1:
            raise UsageError(f"launcher.{key} must be at least 1, got {value}")
    for key in ("max_requeues", "signal_delay_s", "gpus_per_trial", "gpus_per_task",
                "gpus_per_node"):  # fmt: skip
        value = getattr(lc, key, None)
        if value is not None and value < 0:
            raise UsageError(f"launcher.{key} must be 0 or more, got {value}")
    for key in ("state_poll_s", "poll_s", "mem_gb", "cpus_per_task"):
        value = getattr(lc, key, None)
        if value is not None and not value > 0:
            raise UsageError(f"launcher.{key} must be positive, got {value}")
    _check_local_gpus(cfg)
    if lc.trials_per_job < 1:
        raise UsageError(f"launcher.trials_per_job must be at least 1, got {lc.trials_per_job}")
    if lc.trials_per_job > 1 and name != "slurm":
        raise UsageError(
            f"launcher.trials_per_job={lc.trials_per_job} queues trials in SLURM jobs; with "
            f"launcher={name} leave it at 1 (launcher=local keeps its workers warm anyway)"
        )
    if lc.worker_max_trials < 0:
        raise UsageError(
            f"launcher.worker_max_trials must be 0 (no limit) or more, got {lc.worker_max_trials}"
        )
    if lc.worker_max_rss_gb is not None and lc.worker_max_rss_gb <= 0:
        raise UsageError(
            f"launcher.worker_max_rss_gb must be positive (or null: half the machine's memory "
            f"shared among the workers), got {lc.worker_max_rss_gb}"
        )


def _check_local_gpus(cfg: StudyConfig) -> None:
    """With ``launcher.gpus_per_trial`` on this machine: the GPUs it shows hold
    ``parallelism`` trials at once (checked here, not when the first trial is submitted,
    so nothing is written); a machine whose GPUs cannot be counted is trusted."""
    from stepscale.sweeps.launch.launchers import ON_THIS_MACHINE, local_gpus

    k = int(cfg.launcher.gpus_per_trial or 0)
    if cfg.launcher.name not in ON_THIS_MACHINE or not k:
        return
    shown = len(local_gpus())
    if shown and k * cfg.parallelism > shown:
        raise UsageError(
            f"launcher.gpus_per_trial={k}: {cfg.parallelism} trials at once (parallelism) "
            f"need {k * cfg.parallelism} GPUs, this machine shows {shown}; lower parallelism"
        )
