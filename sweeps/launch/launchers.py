"""The launchers, by name: each is a `sweeps.launch.base.Launcher` subclass in a module of
its own, registered with `sweeps.launch.registry.register_launcher`:

- ``local`` (default, `sweeps.launch.local`): warm worker processes on this machine,
  ``parallelism`` of them, each running trials one after another without process start,
  imports or recompiles (`sweeps.launch.workers`);
- ``process`` (`sweeps.launch.process`): one fresh process per trial on this machine
  (submitit LocalExecutor), for trainers that leak global state from one run to the next;
- ``slurm`` (`sweeps.launch.slurm_launcher`): one SLURM job per trial (submitit
  SlurmExecutor), job arrays, queues of trials per job, requeues;
- ``inline`` (`sweeps.launch.inline`): in this process, one trial at a time (debugging);
- ``ray`` (`sweeps.launch.ray_launcher`): warm workers on a Ray cluster, multi-host trials
  (the ``stepscale[ray]`` extra; Ray is imported only once it is chosen).

The scheduler and the commands ask the launcher (`make_launcher`, `launcher_class`) what it
can do; none of them compares its name.
"""

from __future__ import annotations

from stepscale.errors import UsageError
from stepscale.sweeps.launch import inline, local, process, ray_launcher, slurm_launcher
from stepscale.sweeps.launch.base import JobRequest, Launcher, TrialHandle
from stepscale.sweeps.launch.registry import REGISTERED, register_launcher
from stepscale.sweeps.study.launcher_schema import LauncherConfig, schemas, typed_launcher

__all__ = [
    "BUILTIN",
    "JobRequest",
    "Launcher",
    "TrialHandle",
    "launcher_class",
    "launcher_names",
    "make_launcher",
    "register_launcher",
]

BUILTIN: tuple[type[Launcher], ...] = (
    local.LocalLauncher,
    process.ProcessLauncher,
    slurm_launcher.SlurmLauncher,
    inline.InlineLauncher,
    ray_launcher.RayLauncher,
)


def launcher_names() -> list[str]:
    """Every registered launcher's name (the built-in ones first)."""
    return [name for name in schemas() if name in REGISTERED]


def launcher_class(name: str) -> type[Launcher]:
    """The launcher registered as ``name``; an unknown name → `UsageError`."""
    if name not in REGISTERED:
        raise UsageError(
            f"launcher.name: unknown {name!r}; choose one of {', '.join(launcher_names())}"
        )
    return REGISTERED[name]


def make_launcher(
    cfg: LauncherConfig, parallelism: int = 1, heartbeat_timeout_s: float = 0.0
) -> Launcher:
    """The launcher ``cfg`` names, set up for ``parallelism`` trials at once (warm workers
    whose trial's heartbeat stopped for ``heartbeat_timeout_s`` are killed)."""
    cls = launcher_class(cfg.name)
    return cls(typed_launcher(cfg), parallelism, heartbeat_timeout_s)
