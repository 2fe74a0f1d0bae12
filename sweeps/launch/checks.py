"""Checks of a study's launcher settings, of ``--detach``, and of whether the launcher can
submit from here, before the run dir is made: the launcher named must be registered, able
to detach when asked to, and content with its own settings (each launcher checks its keys:
`Launcher.check`) and its environment (`Launcher.check_submission`; SLURM: ``sbatch
--test-only``, so a controller that does not answer leaves nothing behind), and whether
its jobs see the run dir (`Launcher.check_run_dir`; Ray: a probe on every node)."""

from __future__ import annotations

from pathlib import Path

from stepscale.errors import UsageError
from stepscale.sweeps.study.launcher_schema import LauncherConfig
from stepscale.sweeps.study.schema import StudyConfig


def check_launch(cfg: StudyConfig, *, detach: bool) -> None:
    """The launcher's name and settings, and ``--detach`` → `UsageError`."""
    from stepscale.sweeps.launch.detach import detach_refusal
    from stepscale.sweeps.launch.launchers import launcher_class

    launcher = launcher_class(cfg.launcher.name)  # an unknown name is refused here
    if detach and not launcher.can_detach:
        raise UsageError(detach_refusal(cfg.launcher.name))
    launcher.check(cfg)


def check_submission(cfg: LauncherConfig) -> None:
    """Can this launcher submit jobs from here? A failure is the environment's
    (`EnvironmentFailure`, exit 1)."""
    from stepscale.sweeps.launch.launchers import launcher_class

    launcher_class(cfg.name).check_submission(cfg)


def check_run_dir(cfg: LauncherConfig, run_dir: Path) -> None:
    """Can this launcher's jobs reach ``run_dir`` (Ray: a probe on every node)? A refusal
    is a `UsageError`; nothing is written."""
    from stepscale.sweeps.launch.launchers import launcher_class

    launcher_class(cfg.name).check_run_dir(cfg, run_dir)
