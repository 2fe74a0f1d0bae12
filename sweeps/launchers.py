"""Launchers: one class, a different submitit executor chosen explicitly from config.

- ``local`` (default): one process per trial on this machine (submitit LocalExecutor);
- ``slurm``: one SLURM job per trial (submitit SlurmExecutor);
- ``inline``: in this process, one trial at a time (submitit DebugExecutor; for debugging).

Jobs are submitted from inside the trial's folder, so they start there (and a user's own
``models/`` or ``analysis/`` in the directory `sweep` was started from cannot shadow ours),
and their logs land in ``<trial>/logs/``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import submitit

from sweeps.compose import UsageError
from sweeps.schema import LauncherConfig

LAUNCHERS = ("local", "slurm", "inline")


@contextlib.contextmanager
def _working_dir(path: Path) -> Iterator[None]:
    previous = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


class JobHandle:
    """A submitted trial job: is it done, and how did it end?"""

    def __init__(self, job: Any, inline: bool) -> None:
        self.job = job
        self.inline = inline
        self._outcome: tuple[bool, Any] | None = None
        if inline:  # run now, in this process, without DebugExecutor's post-mortem debugger
            error = job.exception()
            self._outcome = (
                (False, error) if error is not None else (True, job.submission()._result)
            )

    @property
    def job_id(self) -> str:
        """The executor's id of the job (SLURM job id, local pid)."""
        return str(self.job.job_id)

    def done(self) -> bool:
        """Has the job ended (in any way)?"""
        return self._outcome is not None or self.job.done()

    def outcome(self) -> tuple[bool, Any]:
        """(True, result) or (False, error) once done."""
        if self._outcome is None:
            try:
                self._outcome = (True, self.job.result())
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # the job failed, was killed or cancelled
                self._outcome = (False, exc)
        return self._outcome

    def cancel(self) -> None:
        """Stop the job if it still runs (a local controller ignores SIGINT, so it gets
        SIGTERM, which it forwards to its task)."""
        if self.done():
            return
        process = getattr(self.job, "_process", None)
        with contextlib.suppress(Exception):
            if process is not None:
                process.send_signal(signal.SIGTERM)
            else:
                self.job.cancel(check=False)


class Launcher:
    """Submits trial jobs with the executor named in ``cfg``."""

    def __init__(self, cfg: LauncherConfig) -> None:
        if cfg.name not in LAUNCHERS:
            raise UsageError(
                f"launcher.name: unknown {cfg.name!r}; choose one of {', '.join(LAUNCHERS)}"
            )
        self.cfg = cfg

    def _executor(self, folder: Path) -> submitit.Executor:
        cfg = self.cfg
        if cfg.name == "inline":
            return submitit.DebugExecutor(folder=folder)
        if cfg.name == "local":
            executor = submitit.LocalExecutor(folder=folder)
            executor.update_parameters(timeout_min=cfg.timeout_min)
            return executor
        executor = submitit.SlurmExecutor(folder=folder)
        params: dict[str, Any] = {
            "time": cfg.time_min,
            "nodes": cfg.nodes,
            "ntasks_per_node": cfg.tasks_per_node,
            "array_parallelism": cfg.array_parallelism,
        }
        optional = {
            "partition": cfg.partition,
            "account": cfg.account,
            "qos": cfg.qos,
            "gpus_per_task": cfg.gpus_per_task,
            "cpus_per_task": cfg.cpus_per_task,
            "mem": f"{int(cfg.mem_gb * 1024)}M" if cfg.mem_gb else None,
            "constraint": cfg.constraint,
        }
        params.update({k: v for k, v in optional.items() if v is not None})
        if cfg.additional:
            params["additional_parameters"] = dict(cfg.additional)
        executor.update_parameters(**params)
        return executor

    def submit(self, folder: Path, fn: Callable[..., Any], *args: Any) -> JobHandle:
        """Submit ``fn(*args)`` as a job started in ``folder`` (logs in ``folder/logs``)."""
        folder.mkdir(parents=True, exist_ok=True)
        executor = self._executor(folder / "logs")
        with _working_dir(folder), _controller_ignores_sigint(self.cfg.name == "local"):
            job = executor.submit(fn, *args)
        return JobHandle(job, inline=self.cfg.name == "inline")


@contextlib.contextmanager
def _controller_ignores_sigint(active: bool) -> Iterator[None]:
    """Start submitit's local controller with SIGINT ignored (inherited through exec).

    A terminal's Ctrl-C reaches the whole process group: the trial processes handle it
    (they checkpoint and stop, see sweeps.job), but the controller would die with a
    traceback on the user's terminal and stop waiting for its task."""
    if not active or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
