"""``launcher=inline``: each trial runs in the orchestrator's own process, one at a time,
as it is submitted (submitit DebugExecutor, without its post-mortem debugger): for
debugging, and for tests that need no process of their own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import submitit

from stepscale.rundir import LOGS_DIR
from stepscale.sweeps.launch.base import Launcher
from stepscale.sweeps.launch.jobs import JobHandle, working_dir
from stepscale.sweeps.launch.registry import register_launcher
from stepscale.sweeps.launch.submission import submission_errors
from stepscale.sweeps.study.launcher_configs import InlineLauncherConfig


@register_launcher
class InlineLauncher(Launcher):
    """Trials in this process."""

    name = "inline"
    config = InlineLauncherConfig

    def submit(
        self,
        folder: Path,
        fn: Callable[..., Any],
        *args: Any,
        name: str = "stepscale",
        key: str | None = None,
    ) -> JobHandle:
        """Run ``fn(*args)`` now, in ``folder``; the handle is done when this returns."""
        folder.mkdir(parents=True, exist_ok=True)
        executor = submitit.DebugExecutor(folder=folder / LOGS_DIR)
        with working_dir(folder), submission_errors():
            job = executor.submit(fn, *args)
        return JobHandle(job, inline=True)
