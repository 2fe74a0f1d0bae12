"""A trial job submitted through one of submitit's executors (LocalExecutor, SlurmExecutor,
DebugExecutor), and the context a job is submitted in: the trial's folder as working
directory (a trainer's relative paths land in its trial), the environment it inherits,
and SIGINT ignored by a local controller."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import submitit

from stepscale.sweeps.job.reaper import end_leftovers
from stepscale.sweeps.launch.slurm import slurm_job_active


class JobHandle:
    """A submitted trial job: is it done, and how did it end?"""

    index: int | None = None  # a job of its own (a queue's trials: slurm.QueuedTrialHandle)

    def __init__(self, job: Any, inline: bool, slot: int | None = None) -> None:
        self.job = job
        self.inline = inline
        self.slot = slot  # the local GPU slot this job holds, if any
        self._outcome: tuple[bool, Any] | None = None
        self._swept = False  # its leftovers looked for (a local job, once it ended)
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
        if isinstance(self.job, submitit.LocalJob) and not self._swept:
            # A local job killed (its timeout) before it ended its program: what the program
            # left on this machine goes with it (sweeps.job.reaper).
            self._swept = True
            end_leftovers(Path(self.job.paths.folder).parent)
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


@contextlib.contextmanager
def working_dir(path: Path) -> Iterator[None]:
    """Run the block in ``path`` (a job submitted there starts there)."""
    previous = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


@contextlib.contextmanager
def environment(values: dict[str, str], drop: tuple[str, ...] = ()) -> Iterator[None]:
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
def controller_ignores_sigint() -> Iterator[None]:
    """Start submitit's local controller with SIGINT ignored (inherited through exec).

    A terminal's Ctrl-C reaches the whole process group: the trial processes handle it
    (they checkpoint and stop, see sweeps.job.trial_job), but the controller would die with a
    traceback on the user's terminal and stop waiting for its task."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
