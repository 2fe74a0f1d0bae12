"""Warm workers for `launcher=local`: ``parallelism`` long-lived processes that run trial
jobs one after another (`sweeps.job.worker_main` is the worker's side).

A job is handed to an idle worker — preferably one that last ran a trial of the same point,
whose compiled programs fit it — and followed through a `WarmJobHandle`, which answers as a
submitit job handle does (done, outcome, cancel, its logs). With several workers on a CPU
machine each gets its own cores (``os.sched_setaffinity``) and matching thread counts
(``launcher.pin_cpus``); with ``gpus_per_trial`` each worker keeps its own GPUs.

Isolation is the process-per-trial launcher's: a worker that dies (segfault, ``os._exit``,
the OOM killer, ``kill -9``) ends only its job, as a failure the scheduler retries from the
trial's checkpoint in a fresh worker; a job past ``timeout_min``, or whose heartbeat stopped
while its worker lives (a hang), has its worker killed, the same way. A worker is replaced
after ``worker_max_trials`` trials or when it grows past ``worker_max_rss_gb``.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import cloudpickle

from stepscale.errors import signal_name
from stepscale.rundir import JOB_HEARTBEAT
from stepscale.sweeps.job.reaper import end_leftovers

# Python in the worker, started with `-c` (not `-m`: that would put the working directory
# first on sys.path).
_BOOT = "from stepscale.sweeps.job.worker_main import main; main()"
_THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")
STOP_GRACE_S = 60.0


# How the outcome of a job stopped by a signal begins (Ctrl-C, SIGTERM: not its own failure).
JOB_STOPPED = "the job was stopped"


class WorkerJobError(RuntimeError):
    """A job that raised in its worker (its traceback), or whose worker died."""


def was_stopped(ok: bool, result: Any) -> bool:
    """Whether a job's outcome says it was stopped by a signal, not that it failed."""
    return not ok and isinstance(result, WorkerJobError) and str(result).startswith(JOB_STOPPED)


@dataclass
class Worker:
    """One worker process and what it is doing."""

    proc: subprocess.Popen[bytes]
    conn: Connection
    slot: int
    job: WarmJobHandle | None = None
    last_key: str | None = None
    ready: bool = False
    ended: bool = False
    inbox: list[Any] = field(default_factory=list)

    @property
    def pid(self) -> int:
        """The worker's process id."""
        return self.proc.pid

    def alive(self) -> bool:
        """Is the process still there?"""
        return self.proc.poll() is None

    def receive(self) -> None:
        """Read whatever the worker has sent (never blocks)."""
        try:
            while self.conn.poll(0):
                message = pickle.loads(self.conn.recv_bytes())
                if message[0] == "ready":
                    self.ready = True
                elif message[0] == "done" and self.job is not None:
                    self.job._finished(message[2], message[3])
                    self.job = None
        except (EOFError, OSError):
            self.ended = True

    def kill(self) -> None:
        """End the process now."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        self.ended = True


class WarmJobHandle:
    """A trial job running in a warm worker; the interface of `sweeps.launch.jobs.JobHandle`."""

    inline = False
    index: int | None = None  # a job of its own

    def __init__(
        self,
        worker: Worker,
        job_id: str,
        folder: Path,
        timeout_s: float,
        stale_s: float,
        task: int = 0,
    ) -> None:
        self.worker = worker
        self.job_id = job_id
        self.files = folder  # the trial's logs folder
        self.log = folder / f"{job_id}_{task}_log.err"
        self.trial_dir = folder.parent
        self.started = time.monotonic()
        self.timeout_s = timeout_s
        self.stale_s = stale_s
        self.slot = worker.slot
        self._outcome: tuple[bool, Any] | None = None
        self._cancelled = False

    def _finished(self, outcome: tuple[str, Any], rss: int) -> None:
        kind, payload = outcome
        if kind == "success":
            self._outcome = (True, payload)
        elif kind == "error":
            self._outcome = (
                False,
                WorkerJobError(f"failed during processing with trace:\n{payload}"),
            )
        else:
            self._outcome = (False, WorkerJobError(f"{JOB_STOPPED} ({payload})"))
        self.rss = rss

    def done(self) -> bool:
        """Has the job ended (its result came, or its worker died, hung or timed out)?"""
        if self._outcome is not None:
            return True
        self.worker.receive()
        if self._outcome is not None:
            return True
        if not self.worker.alive() or self.worker.ended:
            self.worker.receive()  # a result sent just before the end
            if self._outcome is None:
                code = self.worker.proc.wait()
                self._outcome = (False, WorkerJobError(_death(code)))
                self.end_leftovers()  # the job died before it could end its program
            self.worker.job = None
            return True
        why = self._overdue()
        if why is not None:
            self.worker.kill()
            self.end_leftovers()
            self.worker.job = None
            self._outcome = (False, WorkerJobError(why))
            return True
        return False

    def end_leftovers(self) -> None:
        """Kill what the trial's program left on this machine when its job was killed
        (`sweeps.job.reaper.end_leftovers`)."""
        end_leftovers(self.trial_dir)

    def _overdue(self) -> str | None:
        running = time.monotonic() - self.started
        if self.timeout_s > 0 and running > self.timeout_s:
            return f"the trial ran past launcher.timeout_min ({self.timeout_s / 60:g} min)"
        if self.stale_s > 0 and running > self.stale_s and not self._cancelled:
            try:
                age = time.time() - (self.trial_dir / JOB_HEARTBEAT).stat().st_mtime
            except OSError:
                age = running  # never beat: the job never got going
            if age > self.stale_s:
                return (
                    f"the trial's heartbeat stopped {age:.0f} s ago (a hang): its worker was killed"
                )
        return None

    def outcome(self) -> tuple[bool, Any]:
        """(True, result) or (False, error) once done."""
        while not self.done():
            time.sleep(0.01)
        assert self._outcome is not None
        return self._outcome

    def cancel(self) -> None:
        """Ask the job to stop: SIGTERM to its worker, whose trial checkpoints and ends."""
        if self.done():
            return
        self._cancelled = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.worker.pid, signal.SIGTERM)


def _death(code: int) -> str:
    if code < 0:
        name = signal_name(-code)
        return f"the worker process running the trial was killed by {name}"
    return f"the worker process running the trial exited with code {code}"


def cpu_sets(workers: int, gpus: bool) -> list[str]:
    """Disjoint CPU sets, one per worker slot ("" = no pinning): the cores this process may
    use, split evenly, when there are at least as many as workers and no GPUs."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except AttributeError:
        return [""] * workers
    if gpus or workers < 2 or len(cores) < workers:
        return [""] * workers
    share = len(cores) // workers
    return [",".join(map(str, cores[i * share : (i + 1) * share])) for i in range(workers)]


class WorkerPool:
    """Up to ``size`` warm workers; `submit` hands a job to one of them."""

    def __init__(
        self,
        size: int,
        *,
        pin: bool,
        max_trials: int,
        max_rss_gb: float,
        timeout_s: float,
        stale_s: float,
        gpus: Callable[[int], list[int]] | None = None,
    ) -> None:
        self.size = size
        self.cpus = cpu_sets(size, gpus is not None) if pin else [""] * size
        self.gpus = gpus  # the GPUs of a worker slot, when trials get GPUs of their own
        self.max_trials = max_trials
        self.max_rss = int(max_rss_gb * 2**30)
        self.timeout_s = timeout_s
        self.stale_s = stale_s
        self.workers: list[Worker] = []
        self._jobs = 0

    def _start(self, slot: int) -> Worker:
        parent, child = socket.socketpair()
        env = dict(os.environ)
        cores = self.cpus[slot] if slot < len(self.cpus) else ""
        if cores:
            threads = str(len(cores.split(",")))
            env.update({k: threads for k in _THREAD_ENV})
        if self.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, self.gpus(slot)))
        argv = [sys.executable, "-c", _BOOT, str(child.fileno()), cores]
        argv += [str(self.max_trials), str(self.max_rss)]
        proc = subprocess.Popen(argv, env=env, pass_fds=(child.fileno(),), close_fds=True)
        child.close()
        conn = Connection(os.dup(parent.fileno()))
        parent.close()
        worker = Worker(proc, conn, slot)
        self.workers.append(worker)
        return worker

    def _idle(self, key: str | None) -> Worker | None:
        for w in self.workers:
            if w.job is None:
                w.receive()
        self.workers = [w for w in self.workers if (w.alive() and not w.ended) or w.job is not None]
        idle = [w for w in self.workers if w.job is None and w.alive() and not w.ended]
        same = [w for w in idle if w.last_key == key]
        return (same or idle or [None])[0]

    def submit(
        self,
        fn: Any,
        args: tuple[Any, ...],
        folder: Path,
        logs: Path,
        key: str | None = None,
        job_id: str | None = None,
        task: int = 0,
    ) -> WarmJobHandle:
        """Run ``fn(*args)`` in ``folder`` on a warm worker (started if none is idle).
        ``job_id``: the caller's id of the job (default ``<worker pid>.<n>``); ``task``: the
        process's place in a trial of several (its logs and result are ``<job id>_<task>_*``)."""
        worker = self._idle(key)
        if worker is None:
            taken = {w.slot for w in self.workers}
            slot = next(i for i in range(len(self.workers) + 1) if i not in taken)
            worker = self._start(slot)
        self._jobs += 1
        job_id = job_id or f"{worker.pid}.{self._jobs}"
        handle = WarmJobHandle(worker, job_id, logs, self.timeout_s, self.stale_s, task)
        logs.mkdir(parents=True, exist_ok=True)
        stem = logs / f"{job_id}_{task}"
        message = (
            "run", job_id, fn, args, str(folder), f"{stem}_log.out", f"{stem}_log.err",
            f"{stem}_result.pkl",
        )  # fmt: skip
        try:
            worker.conn.send_bytes(cloudpickle.dumps(message))
        except OSError:  # it ended just now: the handle reports the death
            worker.ended = True
        worker.job, worker.last_key = handle, key
        return handle

    def close(self) -> None:
        """Let idle workers end; stop the others (their trials checkpoint)."""
        for w in self.workers:
            with contextlib.suppress(OSError):
                if w.job is None:
                    w.conn.send_bytes(pickle.dumps(("exit",)))
                else:
                    os.kill(w.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for w in self.workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                w.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            if w.alive():
                w.kill()
                if w.job is not None:
                    w.job.end_leftovers()
            w.conn.close()
        self.workers = []
