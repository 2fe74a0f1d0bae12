"""``launcher=local`` (the default): warm worker processes on this machine, ``parallelism``
of them, each running trials one after another without process start, imports or
recompiles (`sweeps.launch.workers`; a command trainer's program is still its own process
per trial). A worker whose trial's heartbeat stopped is killed, as is one past
``timeout_min``; with ``gpus_per_trial`` each worker keeps GPUs of its own."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stepscale.errors import UsageError
from stepscale.rundir import LOGS_DIR
from stepscale.sweeps.launch.base import Launcher
from stepscale.sweeps.launch.gpus import check_local_gpus, slot_gpus
from stepscale.sweeps.launch.registry import register_launcher
from stepscale.sweeps.launch.workers import WarmJobHandle, WorkerPool
from stepscale.sweeps.study.launcher_configs import LocalLauncherConfig
from stepscale.sweeps.study.schema import StudyConfig


@register_launcher
class LocalLauncher(Launcher):
    """Warm workers on this machine."""

    name = "local"
    config = LocalLauncherConfig
    child_jobs = True

    def __init__(
        self, cfg: LocalLauncherConfig, parallelism: int = 1, heartbeat_timeout_s: float = 0.0
    ) -> None:
        super().__init__(cfg, parallelism, heartbeat_timeout_s)
        self.pool = WorkerPool(
            parallelism,
            pin=cfg.pin_cpus,
            max_trials=cfg.worker_max_trials,
            max_rss_gb=cfg.worker_max_rss_gb or default_rss_limit_gb(parallelism),
            timeout_s=cfg.timeout_min * 60.0,
            stale_s=heartbeat_timeout_s,
            gpus=self._slot_gpus if cfg.gpus_per_trial else None,
        )

    def _slot_gpus(self, slot: int) -> list[int]:
        return slot_gpus(self.cfg.gpus_per_trial, slot)

    def submit(
        self,
        folder: Path,
        fn: Callable[..., Any],
        *args: Any,
        name: str = "stepscale",
        key: str | None = None,
    ) -> WarmJobHandle:
        """Hand ``fn(*args)`` to an idle warm worker (one that last ran a job of the same
        ``key`` first, whose compiled programs fit), started in ``folder``."""
        folder.mkdir(parents=True, exist_ok=True)
        return self.pool.submit(fn, args, folder, folder / LOGS_DIR, key)

    def close(self) -> None:
        """End the warm workers (idle ones at once; busy ones checkpoint first)."""
        self.pool.close()

    @classmethod
    def check(cls, cfg: StudyConfig) -> None:
        """The shared checks, the workers' limits, and the GPUs ``parallelism`` trials need."""
        super().check(cfg)
        lc = cfg.launcher
        if lc.worker_max_trials < 0:
            raise UsageError(
                f"launcher.worker_max_trials must be 0 (no limit) or more, got "
                f"{lc.worker_max_trials}"
            )
        if lc.worker_max_rss_gb is not None and lc.worker_max_rss_gb <= 0:
            raise UsageError(
                f"launcher.worker_max_rss_gb must be positive (or null: half the machine's "
                f"memory shared among the workers), got {lc.worker_max_rss_gb}"
            )
        check_local_gpus(cfg)


def default_rss_limit_gb(workers: int) -> float:
    """A warm worker's memory limit when none is set: half of this machine's memory,
    shared among the workers (at least 2 GiB)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        return 8.0
    return max(2.0, total / 2 / max(1, workers))
