"""Launchers: one class, the way trials run chosen explicitly from config.

- ``local`` (default): warm worker processes on this machine, ``parallelism`` of them, each
  running trials one after another without process start, imports or recompiles
  (`sweeps.launch.workers`); a command trainer's program is still its own process per trial;
- ``process``: one fresh process per trial on this machine (submitit LocalExecutor), for
  trainers that leak global state from one run into the next;
- ``slurm``: one SLURM job per trial (submitit SlurmExecutor);
- ``inline``: in this process, one trial at a time (submitit DebugExecutor; for debugging).

With ``gpus_per_trial`` set, each local job (or warm worker) sees its own GPUs
(``CUDA_VISIBLE_DEVICES``, a slot no running job holds) and each SLURM job asks for that many
GPUs; the trainer's data-parallel mesh spans whatever devices the job sees.

Jobs are submitted from inside the trial's folder, so they start there (a trainer's relative
paths land in its trial), and their logs land in ``<trial>/logs/``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import submitit

from stepscale.errors import UsageError
from stepscale.rundir import LOGS_DIR
from stepscale.sweeps.launch.slurm import (
    INHERITED_SLURM,
    QueuedTrialHandle,
    link_logs,
    slurm_job_active,
    slurm_parameters,
)
from stepscale.sweeps.launch.submission import submission_errors
from stepscale.sweeps.launch.workers import WarmJobHandle, WorkerPool
from stepscale.sweeps.study.schema import LauncherConfig

LAUNCHERS = ("local", "process", "slurm", "inline")
ON_THIS_MACHINE = ("local", "process")
log = logging.getLogger(__name__)


@contextlib.contextmanager
def _working_dir(path: Path) -> Iterator[None]:
    previous = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


@dataclass
class JobRequest:
    """One job to submit: ``fn(*args)``, started in ``folder``, logs in ``folder/logs``."""

    folder: Path
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    name: str = "stepscale"
    key: str | None = None  # jobs of one key share shapes (a point): see Launcher.submit


class JobHandle:
    """A submitted trial job: is it done, and how did it end?"""

    def __init__(self, job: Any, inline: bool, slot: int | None = None) -> None:
        self.job = job
        self.inline = inline
        self.slot = slot  # the local GPU slot this job holds, if any
        self._outcome: tuple[bool, Any] | None = None
        if isinstance(job, submitit.LocalJob):
            # A local job writes its result before its process ends: once it has ended, a
            # missing result will not come (submitit would wait 15 s for it on a shared disk).
            job._results_timeout_s = 0
        if inline:  # run now, in this process, without DebugExecutor's post-mortem debugger
            error = job.exception()
            self._outcome = (
                (False, error) if error is not None else (True, job.submission()._result)
            )

    @property
    def job_id(self) -> str:
        """The executor's id of the job (SLURM job id, ``<array>_<index>`` for an array's
        task, local pid)."""
        return str(self.job.job_id)

    @property
    def files(self) -> Path:
        """The folder of submitit's files for this job (pickles, logs)."""
        return Path(self.job.paths.folder)

    @property
    def log(self) -> Path | None:
        """The job's error stream (task 0), where a failed trial's traceback is."""
        if self.inline:
            return None
        return Path(self.job.paths.stderr)

    def done(self) -> bool:
        """Has the job ended (in any way)?"""
        if self._outcome is not None:
            return True
        if not self.job.done():
            return False
        # sacct can show a job that is being requeued (preemption, time limit) as ended for
        # a moment; the controller's queue knows better. A job with a result has ended.
        if isinstance(self.job, submitit.SlurmJob) and not self.job.paths.result_pickle.exists():
            return not slurm_job_active(self.job.job_id)
        return True

    def outcome(self) -> tuple[bool, Any]:
        """(True, result) or (False, error) once done."""
        if self._outcome is None:
            try:
                # Task 0's result; a trial of several tasks (jax.distributed) has one each.
                self._outcome = (True, self.job.results()[0])
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
    """Submits trial jobs with the executor named in ``cfg``; ``parallelism`` warm workers
    for ``local``, whose hung trials (no heartbeat for ``heartbeat_timeout_s``) are killed."""

    def __init__(
        self, cfg: LauncherConfig, parallelism: int = 1, heartbeat_timeout_s: float = 0.0
    ) -> None:
        if cfg.name not in LAUNCHERS:
            raise UsageError(
                f"launcher.name: unknown {cfg.name!r}; choose one of {', '.join(LAUNCHERS)}"
            )
        self.cfg = cfg
        self._slots: dict[int, JobHandle] = {}  # local GPU slot -> the job holding it
        self._last_refresh = time.monotonic()
        self.pool: WorkerPool | None = None
        if cfg.name == "local":
            self.pool = WorkerPool(
                parallelism,
                pin=cfg.pin_cpus,
                max_trials=cfg.worker_max_trials,
                max_rss_gb=cfg.worker_max_rss_gb or default_rss_limit_gb(parallelism),
                timeout_s=cfg.timeout_min * 60.0,
                stale_s=heartbeat_timeout_s,
                gpus=self._slot_gpus if cfg.gpus_per_trial else None,
            )

    @property
    def on_this_machine(self) -> bool:
        """Do trials run as processes of this machine (local or process)?"""
        return self.cfg.name in ON_THIS_MACHINE

    def close(self) -> None:
        """End the warm workers (idle ones at once; busy ones checkpoint first)."""
        if self.pool is not None:
            self.pool.close()

    def _slot_gpus(self, slot: int) -> list[int]:
        """The GPUs of local slot ``slot`` (``gpus_per_trial`` of them, disjoint)."""
        k = int(self.cfg.gpus_per_trial or 0)
        ids = local_gpus() or list(range((slot + 1) * k))  # not countable here: trust config
        if len(ids) < (slot + 1) * k:
            raise UsageError(
                f"launcher.gpus_per_trial={k}: {slot + 1} trials at once need "
                f"{(slot + 1) * k} GPUs, this machine shows {len(ids)}; lower parallelism"
            )
        return ids[slot * k : (slot + 1) * k]

    def refresh(self, force: bool = False) -> None:
        """Re-read SLURM job states now and then: submitit's own cache waits up to 10
        minutes, and a job that ended without a result (cancelled, node failure) is only
        seen through sacct."""
        if self.cfg.name != "slurm":
            return
        now = time.monotonic()
        if force or now - self._last_refresh >= self.cfg.state_poll_s:
            self._last_refresh = now
            submitit.SlurmJob.watcher.update()

    def attach(self, folder: Path, job_id: str, files: Path | None = None) -> JobHandle | None:
        """A handle on an existing SLURM job of a trial, if it is still queued or running
        (``files``: its submitit folder, when not ``folder/logs``, as for an array task)."""
        if self.cfg.name != "slurm":
            return None
        job = submitit.SlurmJob(folder=files or folder / LOGS_DIR, job_id=job_id)
        if job.done(force_check=True) and not slurm_job_active(job_id):
            return None
        return JobHandle(job, inline=False)

    def _free_slot(self) -> int:
        for slot, handle in list(self._slots.items()):
            if handle.done():
                del self._slots[slot]
        slot = 0
        while slot in self._slots:
            slot += 1
        return slot

    def _executor(self, folder: Path, name: str, gpus: list[int]) -> submitit.Executor:
        cfg = self.cfg
        if cfg.name == "inline":
            return submitit.DebugExecutor(folder=folder)
        if cfg.name == "process":
            executor = submitit.LocalExecutor(folder=folder)
            # submitit sets CUDA_VISIBLE_DEVICES for local jobs (to nothing by default):
            # give each job its GPUs explicitly.
            executor.update_parameters(
                timeout_min=cfg.timeout_min, gpus_per_node=len(gpus), visible_gpus=tuple(gpus)
            )
            return executor
        executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=cfg.max_requeues)
        executor.update_parameters(**slurm_parameters(cfg, name))
        return executor

    def submit(
        self,
        folder: Path,
        fn: Callable[..., Any],
        *args: Any,
        name: str = "stepscale",
        key: str | None = None,
    ) -> JobHandle | WarmJobHandle:
        """Submit ``fn(*args)`` as a job named ``name``, started in ``folder`` (logs in
        ``folder/logs``). ``key``: jobs of one key (a point) share shapes, so a warm worker
        that ran one runs the next without a compile."""
        folder.mkdir(parents=True, exist_ok=True)
        if self.pool is not None:
            return self.pool.submit(fn, args, folder, folder / LOGS_DIR, key)
        slot = None
        gpus = local_gpus()
        if self.cfg.name == "process" and self.cfg.gpus_per_trial:
            slot = self._free_slot()
            gpus = self._slot_gpus(slot)
        executor = self._executor(folder / LOGS_DIR, name, gpus)
        env: dict[str, str] = {}
        # sbatch from inside a SLURM job (a detached orchestrator) must not pass that job's
        # SLURM_* settings on: srun in the trial's job would read them as its own.
        drop = INHERITED_SLURM if self.cfg.name == "slurm" else ()
        with (
            _working_dir(folder),
            _controller_ignores_sigint(self.cfg.name == "process"),
            _environment(env, drop=drop),
            submission_errors(),
        ):
            job = executor.submit(fn, *args)
        handle = JobHandle(job, inline=self.cfg.name == "inline", slot=slot)
        if slot is not None:
            self._slots[slot] = handle
        return handle

    def submit_together(
        self, requests: list[JobRequest], array_folder: Path, name: str = "stepscale"
    ) -> list[JobHandle]:
        """Submit jobs asked for at the same time. On SLURM, two or more go as one job array
        named ``name`` (``--array=0-<n-1>%<array_parallelism>``: one sbatch, one line in
        squeue, at most ``array_parallelism`` of them running at once); their submitit files
        live in ``array_folder`` and each job's logs are linked into its ``folder/logs``.
        Elsewhere, and for a single job, each is submitted as by :meth:`submit`."""
        if self.cfg.name != "slurm" or len(requests) < 2:
            return [self.submit(r.folder, r.fn, *r.args, name=r.name, key=r.key) for r in requests]
        array_folder.mkdir(parents=True, exist_ok=True)
        executor = self._executor(array_folder, name, [])
        # The array is sbatch'ed as the batch closes, inside the other two contexts.
        with (
            _working_dir(array_folder),
            _environment({}, drop=INHERITED_SLURM),
            submission_errors(),
            executor.batch(),
        ):
            jobs = [executor.submit(r.fn, *r.args) for r in requests]
        for request, job in zip(requests, jobs, strict=True):
            link_logs(job, request.folder / LOGS_DIR)
        return [JobHandle(job, inline=False) for job in jobs]

    def submit_queues(
        self, queues: list[list[JobRequest]], array_folder: Path, name: str = "stepscale"
    ) -> list[list[QueuedTrialHandle]]:
        """Submit each queue (trials of one point) as one job running them one after
        another (`sweeps.job.trial_job.TrialQueueJob`), several queues as one job array; the job's
        logs are linked into every trial's ``logs/``."""
        from stepscale.sweeps.job.trial_job import TrialQueueJob

        requests = [
            JobRequest(
                q[0].folder, TrialQueueJob(), ([r.args[0] for r in q],), name=q[0].name, key=q[0].key
            )
            for q in queues
        ]  # fmt: skip
        handles = self.submit_together(requests, array_folder, name=name)
        out = []
        for queue, handle in zip(queues, handles, strict=True):
            for request in queue[1:]:
                link_logs(handle.job, request.folder / LOGS_DIR)
            out.append([QueuedTrialHandle(handle, i, r.folder) for i, r in enumerate(queue)])
        return out


def default_rss_limit_gb(workers: int) -> float:
    """A warm worker's memory limit when none is set: half of this machine's memory,
    shared among the workers (at least 2 GiB)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        return 8.0
    return max(2.0, total / 2 / max(1, workers))


def local_gpus() -> list[int]:
    """The GPUs this process may hand to local jobs: CUDA_VISIBLE_DEVICES if set, else every
    NVIDIA GPU the driver lists (none on a machine without one)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [int(x) for x in visible.split(",") if x.strip().isdigit()]
    return list(range(len(list(Path("/proc/driver/nvidia/gpus").glob("*")))))


@contextlib.contextmanager
def _environment(values: dict[str, str], drop: tuple[str, ...] = ()) -> Iterator[None]:
    """Set (and drop, by prefix; SLURM_CONF stays) environment variables for a job's start,
    then restore them."""
    dropped = [k for k in os.environ if k.startswith(drop) and k != "SLURM_CONF"] if drop else []
    previous = {k: os.environ.get(k) for k in [*values, *dropped]}
    for key in dropped:
        del os.environ[key]
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def _controller_ignores_sigint(active: bool) -> Iterator[None]:
    """Start submitit's local controller with SIGINT ignored (inherited through exec).

    A terminal's Ctrl-C reaches the whole process group: the trial processes handle it
    (they checkpoint and stop, see sweeps.job.trial_job), but the controller would die with a
    traceback on the user's terminal and stop waiting for its task."""
    if not active or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
