"""The orchestrator side of `launcher=ray`'s warm workers: slots of `TrialHost` actors
(`sweeps.launch.ray_host`) and the handle of a trial job running in one.

A slot is one actor (or, for a trial of several hosts, one actor per host in a
``STRICT_SPREAD`` placement group) with a trial's resources; at most ``parallelism`` slots
exist. A job goes to an idle slot — preferably one that last ran the same point, whose
compiled programs fit — and a slot is made when none is idle. Slots stay until the study
ends, except a slot one of whose actors died. Actors are owned by the orchestrator: when it
dies, Ray ends them and their worker processes at once (the trials' last checkpoints stand),
so nothing is left holding the cluster's resources.

A job whose actor died because its node died (a preempted VM, a killed raylet) is
*interrupted*, not failed: the scheduler runs the trial again, as the same attempt, from its
checkpoint — once no process of the old job can still write to the trial's folder (its job
heartbeat is gone or stale). An actor that died on a node that lives on, or never started
(a runtime_env that cannot be set up), failed.

The actor's death reaches the orchestrator within about a second, but Ray declares its node
dead only after the node missed its health checks (`node_death_window_s`: 30 s with Ray's
defaults). A dead actor whose node still looks alive is therefore classified only when its
node is declared dead (interrupted) or that window has passed with the node alive (failed).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from stepscale.rundir import JOB_HEARTBEAT, LOGS_DIR
from stepscale.sweeps.job import heartbeat
from stepscale.sweeps.launch.ray_host import ENV_NUM_PROCESSES, ENV_PROCESS_ID, TrialHost
from stepscale.sweeps.launch.workers import JOB_STOPPED as STOPPED
from stepscale.sweeps.launch.workers import WorkerJobError
from stepscale.sweeps.study.launcher_configs import RayLauncherConfig

STOP_GRACE_S = 60.0  # a stopped job's processes checkpoint within this, else are killed
NODE_DEATH_MARGIN_S = 5.0  # for a node's death to reach the driver after Ray decided it


class NodeLost(RuntimeError):
    """The node (or one of the nodes) running a trial's job died."""


def bundle(cfg: RayLauncherConfig) -> dict[str, float]:
    """The resources one host of a trial asks for."""
    out: dict[str, float] = {"CPU": float(cfg.cpus_per_trial)}
    if cfg.gpus_per_trial:
        out["GPU"] = float(cfg.gpus_per_trial)
    out.update({k: float(v) for k, v in cfg.resources.items()})
    if cfg.accelerator_type:
        out[f"accelerator_type:{cfg.accelerator_type}"] = 0.001
    return out


@dataclass
class Slot:
    """One slot's actors (one per host), its placement group, and what it runs."""

    actors: list[Any]
    group: PlacementGroup | None
    where: Any  # ObjectRef of each actor's `where()` (its node), resolved when it starts
    name: str = field(default_factory=lambda: uuid.uuid4().hex[:12])  # in its jobs' ids
    key: str | None = None
    job: RayJobHandle | None = None
    dead: bool = False
    jobs: int = 0
    nodes: list[str] = field(default_factory=list)

    def idle(self) -> bool:
        """Free for a job: alive, and its last job (if any) ended."""
        return not self.dead and (self.job is None or self.job.done())

    def node_ids(self) -> list[str] | None:
        """The nodes of its actors, once they have started (None: not known)."""
        if not self.nodes:
            try:
                self.nodes = [w["node_id"] for w in ray.get(self.where, timeout=0)]
            except (GetTimeoutError, RayError):
                return None
        return self.nodes

    def kill(self) -> None:
        """End its actors now and free its placement group (once)."""
        if self.dead:
            return
        self.dead = True
        for actor in self.actors:
            with contextlib.suppress(RayError, ValueError):
                ray.kill(actor, no_restart=True)
        if self.group is not None:
            with contextlib.suppress(RayError, ValueError):
                remove_placement_group(self.group)


class RayJobHandle:
    """A trial job running in a slot; the interface of `sweeps.launch.jobs.JobHandle`,
    and ``interrupted`` when its node died (the scheduler then runs it again as the same
    attempt)."""

    inline = False
    index: int | None = None  # a job of its own

    def __init__(
        self, slot: Slot, job_id: str, folder: Path, refs: list[Any], stale_s: float
    ) -> None:
        self.slot_ref = slot
        self.job_id = job_id
        self.folder = folder
        self.files = folder / LOGS_DIR
        self.log: Path | None = self.files / f"{job_id}_0_log.err"
        self.refs = refs
        self.stale_s = stale_s
        self.interrupted = False
        self._outcome: tuple[bool, Any] | None = None
        self._stopping: float | None = None
        self._lost: RayActorError | None = None  # its node died: the actor's error
        self._died_at: float | None = None  # when its actor's death was first seen

    def done(self) -> bool:
        """Has the job ended (every process of it), or its node died and nothing of the
        old job can still write to the trial's folder?"""
        if self._outcome is not None:
            return True
        if self._lost is not None:  # its node died: wait until the old job cannot write
            return self._interrupt_when_quiet()
        ready, pending = ray.wait(self.refs, num_returns=len(self.refs), timeout=0)
        if pending:
            if ready and self._stopping is None and not self._all_ok(ready):
                self._stop_all()  # one process of a multi-host trial ended: stop the rest
            if self._stopping is not None and time.monotonic() - self._stopping > STOP_GRACE_S:
                self._stopping = float("inf")  # once
                self.slot_ref.kill()
            return False
        results = [self._result(ref) for ref in self.refs]
        lost = [r for r in results if isinstance(r, RayActorError)]
        if not lost:
            self._outcome = self._leader(results)
            return True
        self.slot_ref.kill()
        nodes = self.slot_ref.node_ids()
        if nodes is not None and (lost[0].preempted or not all(node_alive(n) for n in nodes)):
            self._lost = lost[0]
            return self._interrupt_when_quiet()
        now = time.monotonic()
        if self._died_at is None:
            self._died_at = now
        if nodes is not None and now - self._died_at < node_death_window_s():
            return False  # its node may be dead without Ray knowing yet: ask again later
        self._outcome = (False, WorkerJobError(f"the trial's Ray actor died: {lost[0]}"))
        return True

    def _interrupt_when_quiet(self) -> bool:
        """Interrupted, once the trial's job heartbeat is gone or stale (a worker process
        of the dead node's job may still be checkpointing, or its node be cut off)."""
        if heartbeat.fresh(heartbeat.read(self.folder / JOB_HEARTBEAT), self.stale_s):
            return False
        self.interrupted = True
        self._outcome = (False, NodeLost(f"the node running the trial died: {self._lost}"))
        return True

    def _all_ok(self, refs: list[Any]) -> bool:
        return all(isinstance(r := self._result(ref), tuple) and r[0] is True for ref in refs)

    def _result(self, ref: Any) -> Any:
        try:
            return ray.get(ref, timeout=0)
        except RayActorError as exc:
            return exc
        except RayError as exc:  # the call itself failed (cannot happen in `run`)
            return (False, f"{type(exc).__name__}: {exc}")

    def _leader(self, results: list[Any]) -> tuple[bool, Any]:
        """Process 0's outcome when it succeeded; else why the job failed: the first
        process that failed on its own rather than being stopped for another's failure."""
        ok, payload = results[0]
        if ok:
            return True, payload
        failures = [str(p) for good, p in results if not good]
        own = [f for f in failures if not f.startswith(STOPPED)]
        return False, WorkerJobError((own or failures)[0])

    def _stop_all(self) -> None:
        self._stopping = time.monotonic()
        for actor in self.slot_ref.actors:
            with contextlib.suppress(RayError):
                actor.stop.remote(self.job_id)

    def outcome(self) -> tuple[bool, Any]:
        """(True, result) or (False, error), once done."""
        while not self.done():
            time.sleep(0.05)
        assert self._outcome is not None
        return self._outcome

    def cancel(self) -> None:
        """Ask the job to stop: each of its processes checkpoints and ends. A job whose
        actors have not started (waiting for resources) ends at once: nothing of it ran."""
        if self.done() or self._stopping is not None:
            return
        started, _ = ray.wait(self.slot_ref.where, num_returns=len(self.refs), timeout=0)
        if len(started) < len(self.refs):
            self.slot_ref.kill()
            self._outcome = (False, WorkerJobError(f"{STOPPED} before it started"))
            return
        self._stop_all()


def node_death_window_s() -> float:
    """How long after a node stops answering Ray may still list it as alive: the cluster's
    health-check period × failure threshold, plus one check's timeout and a few seconds for
    the news to reach this driver (Ray's defaults: 3 s × 5 + 10 s + 5 s = 30 s). The values
    are the ones this driver received from the cluster when it connected."""
    try:
        from ray._raylet import Config

        period = Config.health_check_period_ms() * Config.health_check_failure_threshold()
        return (period + Config.health_check_timeout_ms()) / 1000.0 + NODE_DEATH_MARGIN_S
    except (ImportError, AttributeError, TypeError):  # another Ray: its documented defaults
        return 30.0


def node_alive(node_id: str) -> bool:
    """Does Ray list node ``node_id`` as alive?"""
    return any(n["NodeID"] == node_id and n["Alive"] for n in ray.nodes())


class RayPool:
    """Up to ``parallelism`` slots of warm workers on the cluster."""

    def __init__(self, cfg: RayLauncherConfig, parallelism: int, stale_s: float) -> None:
        self.cfg = cfg
        self.parallelism = parallelism
        self.stale_s = stale_s
        self.slots: list[Slot] = []
        self.actor_class = ray.remote(TrialHost)

    def _new_slot(self) -> Slot:
        cfg = self.cfg
        hosts = int(cfg.hosts_per_trial)
        resources = bundle(cfg)
        group = None
        if hosts > 1:
            group = placement_group([dict(resources)] * hosts, strategy="STRICT_SPREAD")
        custom = {k: v for k, v in resources.items() if k not in ("CPU", "GPU")}
        options: dict[str, Any] = {
            "num_cpus": resources["CPU"],
            "num_gpus": resources.get("GPU", 0),
            "resources": custom or None,
            "max_concurrency": 4,  # `run` waits for its job while `stop` and `where` answer
            "max_restarts": 0,
            "runtime_env": dict(cfg.runtime_env) or None,
        }
        # Multi-host trials: a fresh worker process per trial (jax.distributed joins once
        # per process); the slot's actors and placement group stay.
        max_trials = 1 if hosts > 1 else int(cfg.worker_max_trials)
        args = (max_trials, cfg.worker_max_rss_gb or 0.0, cfg.timeout_min * 60.0, self.stale_s)
        actors = []
        for i in range(hosts):
            if group is not None:
                options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                    placement_group=group, placement_group_bundle_index=i
                )
            actors.append(self.actor_class.options(**options).remote(*args))
        slot = Slot(actors, group, [a.where.remote() for a in actors])
        self.slots.append(slot)
        return slot

    def _idle(self, key: str | None) -> Slot | None:
        self.slots = [s for s in self.slots if not s.dead]
        idle = [s for s in self.slots if s.idle()]
        same = [s for s in idle if s.key == key]
        return (same or idle or [None])[0]

    def submit(self, fn: Any, args: tuple[Any, ...], folder: Path, key: str | None) -> RayJobHandle:
        """Run ``fn(*args)`` in ``folder`` on an idle slot (made if none is idle)."""
        slot = self._idle(key)
        if slot is None:
            slot = self._new_slot()
        slot.jobs += 1
        job_id = f"ray-{slot.name}.{slot.jobs}"
        hosts = len(slot.actors)
        # A trial of several hosts: process 0's node names the coordinator; Ray resolves
        # that address (an argument of every process's `run`) before the processes start.
        address = slot.actors[0].coordinator.remote() if hosts > 1 else None
        refs = []
        for i, actor in enumerate(slot.actors):
            env = {ENV_NUM_PROCESSES: str(hosts), ENV_PROCESS_ID: str(i)} if hosts > 1 else {}
            refs.append(actor.run.remote(job_id, i, fn, args, str(folder), key, env, address))
        handle = RayJobHandle(slot, job_id, folder, refs, self.stale_s)
        slot.job, slot.key = handle, key
        return handle

    def close(self) -> None:
        """Stop running jobs (they checkpoint), then end every slot's actors."""
        busy = [s.job for s in self.slots if s.job is not None and not s.job.done()]
        for job in busy:
            job.cancel()
        deadline = time.monotonic() + STOP_GRACE_S
        while busy and time.monotonic() < deadline:
            busy = [j for j in busy if not j.done()]
            time.sleep(0.1)
        for slot in self.slots:
            slot.kill()
        self.slots = []
