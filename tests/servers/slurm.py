"""A real single-node SLURM cluster with accounting, for the cluster tests.

``with slurm_cluster() as conf:`` starts slurmctld, slurmd, slurmdbd + MariaDB and munge
(Debian packages) with the project's own script ``.ci/slurm-cluster.sh``: all state in a
fresh temporary folder, loopback only, on free ports; it sets ``SLURM_CONF`` for this
process and its children and yields the path of slurm.conf. Afterwards every daemon is
stopped by its pid and the folder removed.

A cluster that already runs can be used instead (``STEPSCALE_SLURM_CONF=/path/slurm.conf``):
it is neither started nor stopped. Without the packages, or when not root (the daemons
run as root here), `ServerUnavailable` is raised.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from servers import ServerUnavailable

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / ".ci" / "slurm-cluster.sh"
DAEMONS = ("munged", "slurmctld", "slurmd", "slurmdbd", "mariadbd")
# Concurrent test clusters on one machine (a second suite, a loop of the SLURM file beside CI)
# get distinct blocks of job ids: JAX derives a job's coordinator port from its id % 1024
# (.ci/slurm-cluster.sh). A block is held by a lock that dies with its holder.
ID_BLOCKS, ID_BLOCK = 4, 256


def _free_port_block(n: int) -> int:
    """A base port such that base … base+n-1 are free on loopback now."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n >= 65535:
            continue
        ok = True
        for port in range(base, base + n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no block of free loopback ports")


def _sinfo_ok() -> bool:
    try:
        out = subprocess.run(
            ["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and ("idle" in out.stdout or "mix" in out.stdout)


def _job_id_block() -> tuple[int, int | None]:
    """The first job id of a block no other test cluster on this machine holds, and the
    open lock file that holds it (None: every block is taken, ids start at 1)."""
    for k in range(ID_BLOCKS):
        fd = os.open(f"/tmp/stepscale-slurm-ids-{k}.lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        return 1 + k * ID_BLOCK, fd
    return 1, None


@contextmanager
def slurm_cluster() -> Iterator[Path]:
    """Start (or reuse) a cluster; yields the slurm.conf in use."""
    existing = os.environ.get("STEPSCALE_SLURM_CONF")
    if existing:
        os.environ["SLURM_CONF"] = existing
        if not _sinfo_ok():
            raise ServerUnavailable(f"STEPSCALE_SLURM_CONF={existing}: sinfo does not answer")
        yield Path(existing)
        return
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        raise ServerUnavailable(
            f"SLURM/munge/MariaDB not installed (missing {', '.join(missing)}): "
            f"run `ROOT=/tmp/x {SCRIPT.relative_to(REPO)} install` as root"
        )
    if os.geteuid() != 0:
        raise ServerUnavailable("the test cluster's daemons run as root; run the tests as root")
    root = Path(tempfile.mkdtemp(prefix="slurm-", dir="/tmp"))
    base = _free_port_block(3)
    first_id, id_lock = _job_id_block()
    env = {
        **os.environ,
        "ROOT": str(root),
        "PORT_BASE": str(base),
        "DB_PORT": str(_free_port_block(1)),
        "FIRST_JOB_ID": str(first_id),
    }
    conf = root / "etc" / "slurm.conf"
    previous = os.environ.get("SLURM_CONF")
    started = time.monotonic()
    try:
        out = subprocess.run(
            ["bash", str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=180
        )
        if out.returncode != 0:
            logs = "\n".join(
                f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
                for p in sorted((root / "log").glob("*"))
            )
            raise RuntimeError(f"cluster did not start:\n{out.stdout}\n{out.stderr}\n{logs}")
        os.environ["SLURM_CONF"] = str(conf)
        print(f"slurm cluster up in {time.monotonic() - started:.1f} s ({root})")
        yield conf
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
        shutil.rmtree(root, ignore_errors=True)
        if id_lock is not None:
            os.close(id_lock)


def squeue_ids() -> list[str]:
    """Job ids in the queue now."""
    out = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, timeout=30)
    return out.stdout.split()


def sacct_state(job_id: str) -> str:
    """The accounting state of a job (first word: CANCELLED by 0 → CANCELLED)."""
    out = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "State"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    words = out.stdout.split()
    return words[0] if words else ""
