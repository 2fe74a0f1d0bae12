"""The cluster side of `launcher=ray`: a warm worker on a node, as a Ray actor.

`TrialHost` is a thin, long-lived actor holding one slot's resources on its node. It runs
trial jobs one after another in a warm worker process of its own (`sweeps.launch.workers`,
`sweeps.job.worker_main`), started on the node beside it: a trial pays no process start,
imports or recompile at a shape that worker has seen, its stop signal reaches it as on this
machine (SIGTERM: the trial checkpoints at its current step and ends), and a worker process
that crashes ends only its job. The actor itself never runs trial code, so when it dies its
node died (or the actor was killed from outside), never the trial. When Ray ends the actor
(its orchestrator died) it ends the worker process with it; a worker that outlives its actor
anyway notices (its parent is gone), checkpoints and ends.

Several hosts of one trial (``hosts_per_trial``) are one actor each in a strict-spread
placement group; the first names the coordinator (its node's address and a free port) and
every process gets ``STEPSCALE_COORDINATOR_ADDRESS``, ``STEPSCALE_NUM_PROCESSES`` and
``STEPSCALE_PROCESS_ID`` (`stepscale.models.distributed` joins them with
``jax.distributed``).
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stepscale.sweeps.job.reaper import end_leftovers
from stepscale.sweeps.launch.workers import WarmJobHandle, WorkerPool

# What a process of a multi-host trial reads to join the others (models.distributed).
ENV_ADDRESS = "STEPSCALE_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "STEPSCALE_NUM_PROCESSES"
ENV_PROCESS_ID = "STEPSCALE_PROCESS_ID"
POLL_S = 0.05


class WithEnv:
    """``fn(*args)`` with environment variables set first (the worker restores its
    environment after each job)."""

    def __init__(self, fn: Callable[..., Any], env: dict[str, str]) -> None:
        self.fn = fn
        self.env = env

    def __call__(self, *args: Any) -> Any:
        os.environ.update(self.env)
        return self.fn(*args)


def write_probe(folder: str, name: str, text: str) -> str | None:
    """The run-dir probe's node side: write ``text`` to ``folder/name``; None, or why not."""
    try:
        (Path(folder) / name).write_text(text)
    except OSError as exc:
        return f"{exc.strerror or exc} ({folder} on that node)"
    return None


def remove_probe(path: str) -> None:
    """Remove a probe file this node wrote (one the orchestrator could not see)."""
    Path(path).unlink(missing_ok=True)


def free_port() -> int:
    """A TCP port free on this node now."""
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


class TrialHost:
    """A slot's warm worker on a cluster node (made a Ray actor by `sweeps.launch.ray_pool`)."""

    def __init__(self, max_trials: int, max_rss_gb: float, timeout_s: float, stale_s: float):
        # The worker process starts outside a runtime_env's working_dir: the worker drops its
        # own working directory from sys.path, and the working_dir is on PYTHONPATH.
        os.chdir(tempfile.gettempdir())
        self.pool = WorkerPool(
            1,
            pin=False,
            max_trials=max_trials,
            max_rss_gb=max_rss_gb,
            timeout_s=timeout_s,
            stale_s=stale_s,
        )
        self.job: WarmJobHandle | None = None
        self.cancelled: set[str] = set()
        self.lock = threading.Lock()

    def where(self) -> dict[str, Any]:
        """This actor's node (Ray's node id, its address, host name) and process id."""
        import ray

        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "ip": ray.util.get_node_ip_address(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
        }

    def coordinator(self) -> str:
        """``host:port`` for the coordinator of a multi-host trial whose process 0 runs here."""
        import ray

        return f"{ray.util.get_node_ip_address()}:{free_port()}"

    def run(
        self,
        job_id: str,
        task: int,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        folder: str,
        key: str | None,
        env: dict[str, str],
        coordinator: str | None = None,
    ) -> tuple[bool, Any]:
        """Run ``fn(*args)`` in ``folder`` in the warm worker (logs in ``folder/logs``),
        with ``env`` set (and the ``coordinator`` of a multi-host trial); returns (True,
        result) or (False, why it failed or stopped)."""
        logs = Path(folder) / "logs"
        if coordinator:
            env = {**env, ENV_ADDRESS: coordinator}
        with self.lock:
            if job_id in self.cancelled:
                return False, "the job was stopped (before it started)"
            self.job = self.pool.submit(
                WithEnv(fn, env) if env else fn,
                args,
                Path(folder),
                logs,
                key,
                job_id=job_id,
                task=task,
            )
        job = self.job
        while not job.done():
            time.sleep(POLL_S)
        end_leftovers(Path(folder))  # what a killed job's program left on this node
        with self.lock:
            self.job = None
        ok, result = job.outcome()
        return (True, result) if ok else (False, str(result))

    def stop(self, job_id: str) -> None:
        """Stop job ``job_id`` (its trial checkpoints and ends), now or when it would start."""
        with self.lock:
            self.cancelled.add(job_id)
            job = self.job
        if job is not None and job.job_id == job_id:
            job.cancel()

    def close(self) -> None:
        """End the warm worker (a running trial checkpoints first)."""
        self.pool.close()
