"""``launcher=process``: one fresh process per trial on this machine (submitit
LocalExecutor), for trainers that leak global state from one run into the next. With
``gpus_per_trial`` each job gets a slot of GPUs no running job holds."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import submitit

from stepscale.rundir import LOGS_DIR
from stepscale.sweeps.launch.base import Launcher
from stepscale.sweeps.launch.gpus import check_local_gpus, local_gpus, slot_gpus
from stepscale.sweeps.launch.jobs import JobHandle, controller_ignores_sigint, working_dir
from stepscale.sweeps.launch.registry import register_launcher
from stepscale.sweeps.launch.submission import submission_errors
from stepscale.sweeps.study.launcher_configs import ProcessLauncherConfig
from stepscale.sweeps.study.schema import StudyConfig


@register_launcher
class ProcessLauncher(Launcher):
    """A process per trial on this machine."""

    name = "process"
    config = ProcessLauncherConfig
    child_jobs = True

    def __init__(
        self, cfg: ProcessLauncherConfig, parallelism: int = 1, heartbeat_timeout_s: float = 0.0
    ) -> None:
        super().__init__(cfg, parallelism, heartbeat_timeout_s)
        self._slots: dict[int, JobHandle] = {}  # local GPU slot -> the job holding it

    def _free_slot(self) -> int:
        for slot, handle in list(self._slots.items()):
            if handle.done():
                del self._slots[slot]
        slot = 0
        while slot in self._slots:
            slot += 1
        return slot

    def submit(
        self,
        folder: Path,
        fn: Callable[..., Any],
        *args: Any,
        name: str = "stepscale",
        key: str | None = None,
    ) -> JobHandle:
        """Start ``fn(*args)`` in a process of its own, in ``folder`` (logs in its logs/)."""
        folder.mkdir(parents=True, exist_ok=True)
        slot = None
        gpus = local_gpus()
        if self.cfg.gpus_per_trial:
            slot = self._free_slot()
            gpus = slot_gpus(self.cfg.gpus_per_trial, slot)
        executor = submitit.LocalExecutor(folder=folder / LOGS_DIR)
        # submitit sets CUDA_VISIBLE_DEVICES for local jobs (to nothing by default): give
        # each job its GPUs explicitly.
        executor.update_parameters(
            timeout_min=self.cfg.timeout_min, gpus_per_node=len(gpus), visible_gpus=tuple(gpus)
        )
        with working_dir(folder), controller_ignores_sigint(), submission_errors():
            job = executor.submit(fn, *args)
        handle = JobHandle(job, inline=False, slot=slot)
        if slot is not None:
            self._slots[slot] = handle
        return handle

    @classmethod
    def check(cls, cfg: StudyConfig) -> None:
        """The shared checks and the GPUs ``parallelism`` trials need."""
        super().check(cfg)
        check_local_gpus(cfg)
