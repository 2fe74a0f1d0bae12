"""`launcher=ray` and its cluster, before anything runs: Ray installed, the cluster reached
(``launcher.address``), a trial's resources on enough of its nodes, and the run directory
on storage every node sees (a probe written on each node, read here). Each refusal is a
`UsageError` naming the key (exit 2) and leaves nothing behind.

Ray is imported only here and in the other ``sweeps/launch/ray_*`` modules, and only once
`launcher=ray` is chosen (tests/test_contracts.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stepscale.errors import UsageError
from stepscale.sweeps.study.launcher_configs import RayLauncherConfig

EXTRA = "pip install 'stepscale[ray]'"
LOCAL = "local"
CONNECT_TIMEOUT_S = 5.0
# What this process is connected to: the address it asked for, the cluster's dashboard
# (its job API, for --detach), and whether it started that cluster itself.
_CONNECTED: dict[str, Any] = {}


def require_ray() -> Any:
    """The ``ray`` module, or a `UsageError` naming the extra that installs it."""
    try:
        import ray
    except ImportError as exc:
        raise UsageError(
            f"launcher=ray needs Ray, which is not installed here ({exc}): {EXTRA}"
        ) from None
    return ray


def resolve_address(cfg: RayLauncherConfig) -> str:
    """``launcher.address``, else the RAY_ADDRESS environment variable, else ``auto``."""
    return cfg.address or os.environ.get("RAY_ADDRESS") or "auto"


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a "host:port" or "ray://host:port" address (None: auto, local)."""
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _reachable(address: str) -> None:
    """Refuse an address nothing answers at (Ray itself would wait for minutes)."""
    where = _host_port(address)
    if where is None:
        return
    try:
        with socket.create_connection(where, timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise UsageError(
            f"launcher.address: cannot reach a Ray cluster at {address!r} "
            f"({exc.strerror or exc}); start its head (`ray start --head`), or set "
            "launcher.address (or RAY_ADDRESS) to its host:port, or launcher.address=local "
            "for a cluster of this machine"
        ) from None


def connect(cfg: RayLauncherConfig) -> dict[str, Any]:
    """Connect this process to the cluster ``cfg`` names (once; again for another address);
    ``address: local`` starts a cluster of this machine. Returns what it is connected to."""
    ray = require_ray()
    address = resolve_address(cfg)
    if ray.is_initialized() and _CONNECTED.get("address") == address:
        return _CONNECTED
    disconnect()
    if address != LOCAL:
        _reachable(address)
    try:
        with _quiet():
            context = ray.init(
                address=None if address == LOCAL else address,
                num_cpus=cfg.local_cpus if address == LOCAL else None,
                include_dashboard=False if address == LOCAL else None,
                configure_logging=False,
                log_to_driver=False,  # the trials' output goes to their logs
                # a cluster of this machine runs trials at the priority launcher=local
                # does (Ray's workers default to niceness 15: behind any other work here)
                _system_config={"worker_niceness": 0} if address == LOCAL else None,
            )
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise UsageError(
            f"launcher.address: no Ray cluster at {address!r}: {exc}. Start one (`ray "
            "start --head`), set launcher.address (or RAY_ADDRESS) to its head's "
            "host:port, or launcher.address=local for a cluster of this machine"
        ) from None
    dashboard = getattr(context, "dashboard_url", None) or None
    _CONNECTED.clear()
    _CONNECTED.update(address=address, dashboard=dashboard, local=address == LOCAL)
    return _CONNECTED


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Ray's start-up chatter (token notices, JAX's fork warning as Ray starts its
    processes) kept off the study's output; its errors still show."""
    ray_log = logging.getLogger("ray")
    level = ray_log.level
    ray_log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called")
            yield
    finally:
        ray_log.setLevel(level)


def disconnect() -> None:
    """Leave the cluster (a local one ends with it)."""
    if "address" not in _CONNECTED:
        return
    _CONNECTED.clear()
    import ray

    if ray.is_initialized():
        ray.shutdown()


def _key_of(resource: str) -> str:
    if resource == "CPU":
        return "launcher.cpus_per_trial"
    if resource == "GPU":
        return "launcher.gpus_per_trial"
    if resource.startswith("accelerator_type:"):
        return "launcher.accelerator_type"
    return f"launcher.resources.{resource}"


def _amount(value: float) -> str:
    return f"{value:g}"


def _nodes() -> list[dict[str, Any]]:
    import ray

    return [n for n in ray.nodes() if n.get("Alive")]


def fitting_nodes(need: dict[str, float]) -> list[dict[str, Any]]:
    """The live nodes with every resource of ``need`` (in total, not free now)."""
    return [n for n in _nodes() if all(n["Resources"].get(k, 0.0) >= v for k, v in need.items())]


def check_resources(cfg: RayLauncherConfig) -> None:
    """Refuse a trial no node (or, for ``hosts_per_trial`` N, no N nodes) could host,
    naming the key asked for; an autoscaling cluster is left to its autoscaler."""
    from stepscale.sweeps.launch.ray_pool import bundle

    if cfg.autoscaling:
        return
    need = bundle(cfg)
    hosts = int(cfg.hosts_per_trial)
    fits = fitting_nodes(need)
    if len(fits) >= hosts:
        return
    nodes = _nodes()
    have = "; ".join(
        f"{n.get('NodeManagerAddress', '?')}: "
        + ", ".join(f"{k} {_amount(v)}" for k, v in sorted(n["Resources"].items()) if _shown(k))
        for n in nodes
    )
    asked = ", ".join(f"{_amount(v)} {k}" for k, v in need.items())
    if fits:
        raise UsageError(
            f"launcher.hosts_per_trial: a trial spans {hosts} nodes, but only {len(fits)} "
            f"node(s) of the cluster have {asked}; the cluster's nodes have: {have}"
        )
    for resource, amount in need.items():
        if not any(n["Resources"].get(resource, 0.0) >= amount for n in nodes):
            what = resource.removeprefix("accelerator_type:")
            thing = f"{_amount(amount)} {what}" if resource == what else f"accelerator {what}"
            raise UsageError(
                f"{_key_of(resource)}: no node of the cluster has {thing}; its nodes have: "
                f"{have or 'no live node'}. Ask for what the nodes have, or set "
                "launcher.autoscaling=true when the cluster adds such nodes itself"
            )
    raise UsageError(
        f"launcher: no node of the cluster has all of {asked} at once; its nodes have: {have}"
    )


def _shown(resource: str) -> bool:
    """Resources worth naming to a user (not Ray's per-node and memory bookkeeping)."""
    return not resource.startswith(("node:", "memory", "object_store_memory"))


def _nearest_existing(path: Path) -> Path:
    path = path.resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


class _NodeGone(Exception):
    """The node a probe was sent to is no longer alive."""


def _probe_answer(ref: Any, node_id: str, deadline: float) -> Any:
    """A probe's answer. `_NodeGone` when its node is declared dead while it waits: a
    node that died just before the run (a preempted VM, the node of an interrupted
    trial) is still listed alive until it misses its health checks, and a probe pinned
    to it would wait out the timeout and refuse the run. `GetTimeoutError` past
    ``deadline``."""
    import ray
    from ray.exceptions import GetTimeoutError

    from stepscale.sweeps.launch.ray_pool import node_alive

    while True:
        ready, _ = ray.wait([ref], timeout=min(1.0, max(0.0, deadline - time.monotonic())))
        if ready:
            return ray.get(ref)
        if not node_alive(node_id):
            raise _NodeGone(node_id)
        if time.monotonic() >= deadline:
            raise GetTimeoutError(f"no answer from node {node_id}")


def probe_run_dir(cfg: RayLauncherConfig, run_dir: Path) -> None:
    """Every node that can run a trial writes a probe file beside the run dir (into its
    nearest existing folder, which every node must see at the same path); this process
    reads each one back. A node that cannot write there, or whose file does not show up
    here, sees other storage: `UsageError` naming ``run_dir``."""
    import ray
    from ray.exceptions import GetTimeoutError, RayError
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from stepscale.sweeps.launch.ray_host import remove_probe, write_probe
    from stepscale.sweeps.launch.ray_pool import bundle, node_alive

    folder = _nearest_existing(run_dir)
    nodes = fitting_nodes(bundle(cfg))
    token = uuid.uuid4().hex[:12]
    writer = ray.remote(write_probe)
    options: dict[str, Any] = {"num_cpus": 0, "max_retries": 0}
    if cfg.runtime_env:
        options["runtime_env"] = dict(cfg.runtime_env)
    names = {n["NodeID"]: f".stepscale-probe-{token}-{n['NodeID'][:12]}" for n in nodes}
    refs = {
        node: writer.options(
            **options, scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
        ).remote(str(folder), name, node)
        for node, name in names.items()
    }
    address = {n["NodeID"]: n.get("NodeManagerAddress", "?") for n in nodes}
    problems: list[str] = []
    deadline = time.monotonic() + cfg.probe_timeout_s
    for node, ref in refs.items():
        where = f"node {address[node]} ({node[:12]})"
        try:
            error = _probe_answer(ref, node, deadline)
        except _NodeGone:
            continue  # it died meanwhile: it runs no trial (Ray may list it for 30 s more)
        except GetTimeoutError:
            problems.append(f"{where} did not answer within {cfg.probe_timeout_s:g} s")
            continue
        except RayError as exc:
            if not node_alive(node):
                continue
            problems.append(f"{where}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
            continue
        if error:
            problems.append(f"{where} cannot write there: {error}")
            continue
        probe = folder / names[node]
        try:
            seen = probe.read_text() == node
        except OSError:
            seen = False
        if seen:
            probe.unlink(missing_ok=True)
        else:
            problems.append(f"{where} wrote a file there that this machine does not see")
            remover = ray.remote(remove_probe).options(
                **options, scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
            )
            remover.remote(str(folder / names[node]))
    if problems:
        raise UsageError(
            f"run_dir: {run_dir} must be on storage every node of the Ray cluster sees at "
            f"the same path (a shared filesystem: NFS, Filestore, a FUSE bucket…), checked "
            f"beside it in {folder}: {'; '.join(problems)}"
        )
