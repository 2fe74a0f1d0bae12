"""Multi-process runs: one training run as one SPMD program over several processes (nodes).

`maybe_initialize(cfg)` joins the processes with ``jax.distributed.initialize`` when the
run is multi-process, before any JAX computation (`models.plan.prepare` and
`models.train.train` call it first; it is idempotent). ``train.distributed`` decides:

- ``auto`` (default): initialise when the process is one of several, that is when
  ``train.num_processes`` (or the environment variable ``STEPSCALE_NUM_PROCESSES``) is
  above 1, or inside a SLURM job step of several tasks (``srun`` with ``SLURM_NTASKS`` > 1
  and the variables JAX's own SLURM detection reads: ``SLURM_JOB_ID``,
  ``SLURM_STEP_NODELIST``, ``SLURM_PROCID``, ``SLURM_LOCALID``). A batch script itself
  (no ``SLURM_STEP_NODELIST``) or a one-task step stays single-process.
- ``on``: always initialise; what the fields and the environment leave unset JAX detects
  (SLURM, Open MPI, TPU pods).
- ``off``: never initialise (a caller that initialised JAX itself still gets a
  multi-process run: the trainer follows ``jax.process_count()``).

Explicit processes (no cluster manager): every process gets the same
``train.coordinator_address`` ("host:port" of process 0; or ``STEPSCALE_COORDINATOR_ADDRESS``,
or JAX's ``JAX_COORDINATOR_ADDRESS``) and ``train.num_processes``, and its own
``train.process_id`` (or ``STEPSCALE_PROCESS_ID``). Under SLURM everything comes from the
job step; ``JAX_COORDINATOR_PORT`` overrides the port JAX derives from the job id.

GPUs under SLURM: JAX's detection assumes one process per GPU (``--ntasks-per-node`` = GPUs
per node, every GPU visible to every task, e.g. ``--gres=gpu:N`` rather than
``--gpus-per-task``) and gives process ``SLURM_LOCALID`` that GPU; for one process driving
all the GPUs of its node set ``JAX_LOCAL_DEVICE_IDS=0,1,…`` (read by JAX).

On CPU, cross-process collectives use gloo (``jax_cpu_collectives_implementation``; set here
unless the user chose another one).

In a multi-process run: ``train.devices`` counts global devices (all processes; None = all
of them), split evenly, the first ``devices / processes`` local devices of every process;
on-device data sources generate the same global batch as one process would, host-side
ones read only the rows of each process's devices; only process 0 reports (writes
``metrics.jsonl``/``status.json``, shows progress) and writes checkpoints, every process
restores them; the pruner's verdict (process 0's reporter) is broadcast, so every process
stops at the same step and `train()` returns the same status everywhere.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from stepscale.models.checks import choice
from stepscale.models.config import TrainConfig, TrainerConfig
from stepscale.models.errors import ConfigError

MODES = ("auto", "on", "off")
ENV_ADDRESS = "STEPSCALE_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "STEPSCALE_NUM_PROCESSES"
ENV_PROCESS_ID = "STEPSCALE_PROCESS_ID"
# What jax._src.clusters.slurm_cluster.SlurmCluster.is_env_present requires.
SLURM_VARS = (
    "SLURM_JOB_ID",
    "SLURM_STEP_NODELIST",
    "SLURM_NTASKS",
    "SLURM_PROCID",
    "SLURM_LOCALID",
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JoinArgs:
    """Arguments of ``jax.distributed.initialize`` (None = let JAX detect it)."""

    coordinator_address: str | None
    num_processes: int | None
    process_id: int | None
    timeout_s: int
    why: str  # what made the run multi-process (for messages)


def _int_setting(field: str, value: int | None, env: Mapping[str, str], var: str) -> int | None:
    if value is not None:
        return value
    raw = env.get(var)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(field, f"environment variable {var}={raw!r} is not an integer") from None


def join_args(cfg: TrainConfig, env: Mapping[str, str] | None = None) -> JoinArgs | None:
    """How this process joins a multi-process run, or None for a single-process run.

    Pure (reads only ``cfg`` and ``env``, default ``os.environ``); raises ConfigError on
    unusable values."""
    env = os.environ if env is None else env
    mode = cfg.distributed
    choice("train.distributed", mode, MODES)
    if mode == "off":
        return None
    address = cfg.coordinator_address or env.get(ENV_ADDRESS) or None
    n = _int_setting("train.num_processes", cfg.num_processes, env, ENV_NUM_PROCESSES)
    pid = _int_setting("train.process_id", cfg.process_id, env, ENV_PROCESS_ID)
    if n is not None and n < 1:
        raise ConfigError("train.num_processes", f"must be ≥ 1, got {n}")
    if pid is not None and (pid < 0 or (n is not None and pid >= n)):
        raise ConfigError("train.process_id", f"must lie in [0, num_processes = {n}), got {pid}")
    if cfg.distributed_timeout_s <= 0:
        raise ConfigError(
            "train.distributed_timeout_s", f"must be > 0, got {cfg.distributed_timeout_s}"
        )
    timeout = int(cfg.distributed_timeout_s)
    if mode == "on":
        return JoinArgs(address, n, pid, timeout, "train.distributed=on")
    if n is not None:
        if n == 1:
            return None
        return JoinArgs(address, n, pid, timeout, f"num_processes={n}")
    if all(v in env for v in SLURM_VARS):
        try:
            tasks = int(env["SLURM_NTASKS"])
        except ValueError:
            return None
        if tasks > 1:
            return JoinArgs(address, None, pid, timeout, f"SLURM step with SLURM_NTASKS={tasks}")
    return None


def _use_gloo_on_cpu() -> None:
    """Cross-process collectives on CPU need an implementation (jax ≥ 0.5.1 defaults to
    gloo; older versions to none)."""
    if not jax.config.jax_cpu_collectives_implementation:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")


def maybe_initialize(cfg: TrainerConfig | TrainConfig) -> bool:
    """Join the other processes of this run if it is multi-process (see the module doc).

    Idempotent; must run before any JAX computation. Returns True when JAX runs distributed
    (initialised here, earlier, or by the caller)."""
    if jax.distributed.is_initialized():
        return True
    t = cfg.train if isinstance(cfg, TrainerConfig) else cfg
    args = join_args(t)
    if args is None:
        return False
    from jax._src import xla_bridge  # the check jax.distributed.initialize itself makes

    if xla_bridge.backends_are_initialized():
        raise ConfigError(
            "train.distributed",
            f"this process is one of several ({args.why}) but JAX was already used in it; "
            "call models.distributed.maybe_initialize(cfg) before any JAX computation, "
            "or set train.distributed=off for a single-process run",
        )
    _use_gloo_on_cpu()
    try:
        jax.distributed.initialize(
            coordinator_address=args.coordinator_address,
            num_processes=args.num_processes,
            process_id=args.process_id,
            initialization_timeout=args.timeout_s,
        )
    except (ValueError, TypeError) as exc:  # missing or inconsistent arguments
        raise ConfigError("train.distributed", f"cannot join the other processes: {exc}") from exc
    log.info(
        "jax.distributed: process %d of %d (%s)", jax.process_index(), jax.process_count(), args.why
    )
    return True


# ----------------------------------------------------------------- helpers for the trainer
def process_count() -> int:
    """Processes in this run (1 unless distributed)."""
    return jax.process_count()


def is_leader() -> bool:
    """True in the process that reports and writes files (process 0)."""
    return jax.process_index() == 0


def mesh_devices(n_devices: int) -> list[Any]:
    """The devices of an ``n_devices`` data mesh: the first ``n_devices`` local devices in a
    single process; otherwise the first ``n_devices / processes`` local devices of every
    process, in process order (so the global batch is laid out as in one process)."""
    procs = jax.process_count()
    if procs == 1:
        return list(jax.local_devices()[:n_devices])
    per = n_devices // procs
    by_process: dict[int, list[Any]] = {}
    for d in sorted(jax.devices(), key=lambda d: (d.process_index, d.id)):
        by_process.setdefault(d.process_index, []).append(d)
    return [d for p in sorted(by_process) for d in by_process[p][:per]]


def put(tree: Any, sharding: jax.sharding.Sharding) -> Any:
    """Host (numpy) values that every process holds in full → global arrays laid out as
    ``sharding``; each process copies only the pieces of its own devices (no collective)."""

    def one(x: Any) -> jax.Array:
        arr = np.asarray(x)
        return jax.make_array_from_callback(arr.shape, sharding, lambda index: arr[index])

    return jax.tree.map(one, tree)


def to_host(tree: Any) -> Any:
    """Global arrays → numpy. Replicated arrays are read from a local copy; others are
    gathered across processes (a collective: every process must call it, in the same order)."""
    if jax.process_count() == 1:
        return jax.device_get(tree)

    def one(x: Any) -> Any:
        if not isinstance(x, jax.Array):
            return x
        if x.is_fully_replicated:
            return np.asarray(x.addressable_data(0))
        from jax.experimental import multihost_utils

        return multihost_utils.process_allgather(x, tiled=True)

    return jax.tree.map(one, tree)


def broadcast_int(value: int) -> int:
    """Process 0's ``value`` (an int32) in every process."""
    if jax.process_count() == 1:
        return int(value)
    from jax.experimental import multihost_utils

    return int(multihost_utils.broadcast_one_to_all(np.int32(value)))


def broadcast_seconds(value: float) -> float:
    """Process 0's wall-clock ``value`` in every process (to 0.1 ms)."""
    if jax.process_count() == 1:
        return value
    from jax.experimental import multihost_utils

    whole, frac = divmod(value, 1.0)
    parts = np.array([int(whole), round(frac * 1e4)], dtype=np.int32)
    got = multihost_utils.broadcast_one_to_all(parts)
    return float(got[0]) + float(got[1]) / 1e4


def any_process(flag: bool) -> bool:
    """True in every process when ``flag`` is True in at least one."""
    if jax.process_count() == 1:
        return bool(flag)
    from jax.experimental import multihost_utils

    return bool(np.any(multihost_utils.process_allgather(np.int32(flag))))


def barrier(name: str) -> None:
    """Wait until every process got here."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)
