"""``launcher=ray``: trials on a Ray cluster (KubeRay, a cloud cluster, TPU pod slices, or
``address: local``), through the ``stepscale[ray]`` extra.

Each trial runs in a warm worker of a slot (`sweeps.launch.ray_pool`, `ray_host`): a
long-lived actor holding the trial's resources (``cpus_per_trial``, ``gpus_per_trial``,
``resources``, ``accelerator_type``, a ``runtime_env``), placed by Ray, running trials one
after another so that repeated shapes reuse compiled programs; ``parallelism`` slots at
most. A trial of ``hosts_per_trial`` N runs one process per node in a strict-spread
placement group, joined by ``jax.distributed``. The actors are owned by the orchestrator:
Ctrl-C and SIGTERM stop the trials (they checkpoint) as with `launcher=local`, and when the
orchestrator dies Ray ends them, so its successor re-runs them from their checkpoints. A
node that dies interrupts its trials, which run again on another node from their
checkpoints as the same attempts. ``--detach`` runs the orchestrator as a Ray job
(`sweeps.launch.ray_detach`).

Before anything runs (`sweeps.launch.ray_cluster`): Ray must be installed, the cluster
reachable, a trial's resources on enough nodes, and the run dir on storage every node sees
— each refused with exit 2 naming the key (these are the user's settings, so a
`UsageError` rather than `check_submission`'s usual environment failure).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from stepscale.errors import UsageError
from stepscale.sweeps.launch.base import Launcher, TrialHandle, check_amounts
from stepscale.sweeps.launch.registry import register_launcher
from stepscale.sweeps.study.launcher_configs import RayLauncherConfig
from stepscale.sweeps.study.launcher_schema import LauncherConfig
from stepscale.sweeps.study.schema import StudyConfig

_AT_LEAST_ONE = ("hosts_per_trial", "local_cpus")
_NONE_OR_MORE = ("cpus_per_trial", "worker_max_trials")
_POSITIVE = ("worker_max_rss_gb", "probe_timeout_s")


@register_launcher
class RayLauncher(Launcher):
    """Warm workers on a Ray cluster."""

    name = "ray"
    config = RayLauncherConfig
    on_this_machine = False
    child_jobs = True  # its actors end with the orchestrator, which follows them closely
    can_detach = True
    job_noun = "Ray job"

    def __init__(
        self, cfg: RayLauncherConfig, parallelism: int = 1, heartbeat_timeout_s: float = 0.0
    ) -> None:
        super().__init__(cfg, parallelism, heartbeat_timeout_s)
        self._pool: Any = None

    def _slots(self) -> Any:
        if self._pool is None:
            from stepscale.sweeps.launch.ray_cluster import connect
            from stepscale.sweeps.launch.ray_pool import RayPool

            connect(self.cfg)
            self._pool = RayPool(self.cfg, self.parallelism, self.heartbeat_timeout_s)
        return self._pool

    def submit(
        self,
        folder: Path,
        fn: Callable[..., Any],
        *args: Any,
        name: str = "stepscale",
        key: str | None = None,
    ) -> TrialHandle:
        """Hand ``fn(*args)`` to an idle slot on the cluster (one that last ran a job of the
        same ``key`` first), started in ``folder``, which every node sees."""
        folder.mkdir(parents=True, exist_ok=True)
        handle: TrialHandle = self._slots().submit(fn, args, folder, key)
        return handle

    def close(self) -> None:
        """Stop running trials (they checkpoint), end the slots' actors, leave the cluster
        (a local one ends)."""
        from stepscale.sweeps.launch.ray_cluster import disconnect

        if self._pool is not None:
            self._pool.close()
            self._pool = None
        disconnect()

    @classmethod
    def check(cls, cfg: StudyConfig) -> None:
        """The shared checks, this launcher's counts and amounts, and Ray installed."""
        super().check(cfg)
        lc = cfg.launcher
        check_amounts(lc, _AT_LEAST_ONE, _NONE_OR_MORE, _POSITIVE)
        for resource, amount in dict(lc.resources).items():
            if resource in ("CPU", "GPU"):
                which = "cpus_per_trial" if resource == "CPU" else "gpus_per_trial"
                raise UsageError(
                    f"launcher.resources.{resource}: ask for {resource}s with launcher.{which}"
                )
            if not amount >= 0:
                raise UsageError(f"launcher.resources.{resource} must be 0 or more, got {amount}")
        from stepscale.sweeps.launch.ray_cluster import LOCAL, require_ray, resolve_address

        if lc.local_cpus is not None and resolve_address(lc) != LOCAL:
            raise UsageError(
                "launcher.local_cpus: the CPUs of a local cluster; it needs launcher.address=local"
            )
        require_ray()

    @classmethod
    def check_submission(cls, cfg: LauncherConfig) -> None:
        """The cluster answers and some node(s) can host a trial's resources."""
        from stepscale.sweeps.launch.ray_cluster import check_resources, connect

        assert isinstance(cfg, RayLauncherConfig)
        connect(cfg)
        check_resources(cfg)

    @classmethod
    def check_run_dir(cls, cfg: LauncherConfig, run_dir: Path) -> None:
        """Every node that can run a trial sees the run dir's storage (a probe)."""
        from stepscale.sweeps.launch.ray_cluster import LOCAL, connect, probe_run_dir

        assert isinstance(cfg, RayLauncherConfig)
        if connect(cfg)["address"] == LOCAL:
            return  # a cluster of this machine sees its files
        probe_run_dir(cfg, run_dir)

    @classmethod
    def submit_orchestrator(
        cls, cfg: StudyConfig, folder: Path, job: Callable[..., int], args: tuple[Any, ...]
    ) -> tuple[str, Path]:
        """Submit the orchestrator as a Ray job (no CPU of its own) on the cluster's head."""
        from stepscale.sweeps.launch import ray_detach

        lc = cfg.launcher
        assert isinstance(lc, RayLauncherConfig)
        return ray_detach.submit(lc, ray_detach.job_api(lc), cfg.name, folder, job, args)

    @classmethod
    def orchestrator_record(cls, cfg: StudyConfig) -> dict[str, Any]:
        """The job API the orchestrator's job was submitted to."""
        from stepscale.sweeps.launch import ray_detach

        assert isinstance(cfg.launcher, RayLauncherConfig)
        return {"job_api": ray_detach.job_api(cfg.launcher)}

    @classmethod
    def orchestrator_pending(cls, job: dict[str, Any]) -> bool:
        """Is the orchestrator's Ray job still pending?"""
        from stepscale.sweeps.launch import ray_detach

        return bool(job.get("job_api")) and ray_detach.pending(job["job_api"], job["job_id"])

    @classmethod
    def cancel_orchestrator(cls, job: dict[str, Any]) -> None:
        """Stop the orchestrator's Ray job."""
        from stepscale.sweeps.launch import ray_detach

        if job.get("job_api"):
            ray_detach.stop(job["job_api"], job["job_id"])
