"""A real two-node Ray cluster on 127.0.0.1 for the Ray tests (`ray.cluster_utils.Cluster`,
Ray's own multi-node test cluster: one raylet per node, all on this machine).

``with ray_cluster() as cluster:`` starts a head node with no CPUs (the GCS, the dashboard
and its job API: the orchestrators connect there) and two worker nodes of one CPU each,
where trials run; small object stores, Ray's default health checks. Its processes start with
the environment a user's shell has (no test-only XLA flags). ``cluster.node_of(pid)`` names
the worker node a process runs on, ``cluster.kill(node)`` kills that node's raylet and
everything on it (a preempted VM), ``private_node(...)`` adds a node in a mount namespace
of its own, which sees another filesystem at one path. Afterwards every node is stopped.

Without Ray installed, `ServerUnavailable` is raised (tests skip, or fail under
STEPSCALE_REQUIRE_CLUSTER=1).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers import xla_flags

from servers import ServerUnavailable

OBJECT_STORE = 80 * 2**20
# Ray replaces a loopback address by this machine's network address, unless it runs as on a
# laptop (its switch for Windows and macOS): then every node, driver and job stays on
# 127.0.0.1. Set before Ray is imported, in this process and the ones it starts.
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def use_loopback() -> None:
    """Keep Ray on 127.0.0.1 in this process and its children (call before importing Ray)."""
    os.environ.update(LOOPBACK)


# Ray's own health checks (a node that stops answering is declared dead up to ~25 s
# later), as a user's cluster has them. Workers run at niceness 0, as the rest of the test
# session does: Ray starts them at 15, which on a node of their own costs nothing, but
# beside the suite's other test processes left a trial about 3% of a core (CI: a killed
# node's trial took over 3 minutes to resume).
SYSTEM_CONFIG = {"worker_niceness": 0}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _user_environment() -> Iterator[None]:
    """The Ray processes started in the block inherit a user's environment (no fake XLA
    devices of the test session)."""
    saved = dict(os.environ)
    os.environ["XLA_FLAGS"] = xla_flags()
    os.environ["PATH"] = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@dataclass
class RayCluster:
    """The running test cluster."""

    cluster: Any  # ray.cluster_utils.Cluster
    dashboard: str  # http://127.0.0.1:PORT, the job API

    @property
    def address(self) -> str:
        """The head's GCS address (``launcher.address``)."""
        return str(self.cluster.address)

    def workers(self) -> list[Any]:
        """The worker nodes (ray._private.node.Node) still running."""
        return list(self.cluster.worker_nodes)

    def raylet_pid(self, node: Any) -> int:
        """The pid of a node's raylet."""
        return int(node.all_processes["raylet"][0].process.pid)

    def node_of(self, pid: int) -> Any | None:
        """The worker node whose raylet is an ancestor of process ``pid`` (None: none)."""
        raylets = {self.raylet_pid(n): n for n in self.workers()}
        while pid > 1:
            if pid in raylets:
                return raylets[pid]
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                return None
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        return None

    def kill(self, node: Any) -> None:
        """Kill a worker node at once: its raylet and every process of it (SIGKILL)."""
        self.cluster.remove_node(node, allow_graceful=False)


@contextmanager
def ray_cluster(workers: int = 2) -> Iterator[RayCluster]:
    """Start the cluster (see the module docstring); yields it, then stops it."""
    try:
        from ray.cluster_utils import Cluster
    except ImportError as exc:
        raise ServerUnavailable(
            f"Ray is not installed ({exc}): pip install 'stepscale[ray]'"
        ) from None
    port = _free_port()
    with _user_environment():
        cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 0,
                "node_ip_address": "127.0.0.1",
                "include_dashboard": True,
                "dashboard_host": "127.0.0.1",
                "dashboard_port": port,
                # its own, not Ray's fixed 52365: another Ray on this machine (a second test
                # session, a user's cluster) has that one, and this head's job agent, which
                # takes `--detach`'s jobs, would not start ("No available agent")
                "dashboard_agent_listen_port": _free_port(),
                "object_store_memory": OBJECT_STORE,
                "_system_config": SYSTEM_CONFIG,
            },
            shutdown_at_exit=True,
        )
        try:
            for _ in range(workers):
                cluster.add_node(
                    num_cpus=1, node_ip_address="127.0.0.1", object_store_memory=OBJECT_STORE
                )
            cluster.wait_for_nodes()
        except BaseException:
            cluster.shutdown()
            raise
    try:
        yield RayCluster(cluster, f"http://127.0.0.1:{port}")
    finally:
        import ray

        ray.shutdown()  # this process may have joined it as a driver (in-process runs)
        cluster.shutdown()


# A worker node started by hand (what `ray.cluster_utils.Cluster.add_node` does), so that it
# can run in a mount namespace of its own; it lives as long as this process.
_NODE = """
import sys, time, ray._private.node, ray._private.parameter
params = ray._private.parameter.RayParams(
    gcs_address=sys.argv[1], node_ip_address="127.0.0.1", num_cpus=1, num_gpus=0,
    object_store_memory=int(sys.argv[2]), min_worker_port=0, max_worker_port=0,
    include_log_monitor=False, node_manager_port=0, dashboard_agent_listen_port=None,
)
ray._private.node.Node(params, head=False, shutdown_at_exit=True, spawn_reaper=False)
while True:
    time.sleep(60)
"""


@contextmanager
def private_node(cluster: RayCluster, folder: Path) -> Iterator[None]:
    """One more worker node, in a mount namespace of its own where ``folder`` is an empty
    tmpfs: it sees other storage there than this machine does (a node-local disk). Needs
    ``unshare`` and the right to mount (root)."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        raise ServerUnavailable("a node with storage of its own needs unshare, as root")
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "true"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        raise ServerUnavailable(f"no mount namespace here (unshare -m: {probe.stderr.strip()})")
    script = f'mount -t tmpfs none {folder} && exec "$0" -c "$1" "$2" "$3"'
    command = [sys.executable, _NODE, cluster.address, str(OBJECT_STORE)]
    env = {**os.environ, "XLA_FLAGS": xla_flags()}
    before = _alive_nodes(cluster)
    proc = subprocess.Popen(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script, *command],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while _alive_nodes(cluster) <= before:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise ServerUnavailable("the node in its own mount namespace did not start")
            time.sleep(0.2)
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _alive_nodes(cluster: RayCluster) -> int:
    return len(cluster.cluster.global_state._live_node_ids())
