"""A real PostgreSQL server for tests, private to one test session or module.

``with postgres_server() as url:`` runs ``initdb`` into a fresh temporary folder, starts
the server on a free loopback port (TCP on 127.0.0.1 only; its Unix socket inside that
folder; fsync off for speed), creates a role with a random password and a database, and
yields ``postgresql://USER:PASSWORD@127.0.0.1:PORT/DB``. Afterwards — also when the test
failed or was interrupted — the server is stopped by its pid (``pg_ctl stop -m fast``,
then SIGKILL if it is still there) and the folder removed.

The binaries are those of ``$STEPSCALE_PG_BINDIR`` if it is set, else the newest of
``/usr/lib/postgresql/*/bin`` (Debian/Ubuntu) or those on ``PATH``; without them
`ServerUnavailable` is raised.
PostgreSQL refuses to run as root: as root, every server command runs as the ``postgres``
system user (the folder is handed to it), as anyone else as that user.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from servers import ServerUnavailable

TOOLS = ("initdb", "pg_ctl", "postgres", "psql")
HOST = "127.0.0.1"
ROLE = "stepscale"
DATABASE = "stepscale_test"
SUPERUSER = "postgres"
_INSTALL_HINT = "install them with `apt-get install postgresql` or set STEPSCALE_PG_BINDIR"


def _version_key(bindir: Path) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in bindir.parent.name.split("."))
    except ValueError:
        return (-1,)


def find_bindir() -> Path:
    """The folder holding initdb, pg_ctl, postgres and psql (newest version first)."""
    explicit = os.environ.get("STEPSCALE_PG_BINDIR")
    if explicit:  # exactly these binaries, or none
        if all(os.access(Path(explicit) / tool, os.X_OK) for tool in TOOLS):
            return Path(explicit)
        raise ServerUnavailable(
            f"STEPSCALE_PG_BINDIR={explicit} does not hold the PostgreSQL server binaries "
            f"({', '.join(TOOLS)})"
        )
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key, reverse=True)
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    for folder in candidates:
        if all(os.access(folder / tool, os.X_OK) for tool in TOOLS):
            return folder
    raise ServerUnavailable(
        f"PostgreSQL server binaries ({', '.join(TOOLS)}) not found in "
        f"/usr/lib/postgresql/*/bin or on PATH; {_INSTALL_HINT}"
    )


@dataclass(frozen=True)
class _Runner:
    """Runs server commands as the user the server may run as."""

    bindir: Path
    uid: int | None  # None: as ourselves
    gid: int | None
    cwd: Path

    def __call__(
        self, tool: str, *args: str, stdin: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(LC_ALL="C", LANG="C", TZ="UTC")
        extra = {}
        if self.uid is not None:
            extra = {"user": self.uid, "group": self.gid, "extra_groups": []}
            env.update(HOME=str(self.cwd), USER=SUPERUSER, LOGNAME=SUPERUSER)
        return subprocess.run(
            [str(self.bindir / tool), *args],
            input=stdin,
            cwd=self.cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            **extra,  # type: ignore[arg-type]
        )


def _base_dir(as_other_user: bool) -> str:
    """Where the server's folder goes: the temp dir, unless the server's user could not
    reach it (every parent must be world-traversable) or the socket path would be too long
    (Unix sockets take ~100 bytes)."""
    for base in (tempfile.gettempdir(), "/tmp", "/var/tmp"):
        path = Path(base).resolve()
        if len(str(path)) > 60 or not path.is_dir():
            continue
        if not as_other_user or all(p.stat().st_mode & 0o001 for p in (path, *path.parents)):
            return str(path)
    return "/tmp"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    """Is the process there (a zombie waiting for its reaper counts as gone)?"""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def _read_pid(data: Path) -> int | None:
    try:
        return int((data / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _check(result: subprocess.CompletedProcess, what: str) -> None:
    if result.returncode != 0:
        raise RuntimeError(
            f"{what} failed (exit {result.returncode}):\n{result.stdout}\n{result.stderr}"
        )


def _stop(run: _Runner, data: Path, pid: int | None) -> None:
    """pg_ctl stop -m fast; SIGKILL the postmaster if it is still there after that."""
    if pid is None:
        return
    with contextlib.suppress(subprocess.SubprocessError, OSError):
        run("pg_ctl", "-D", str(data), "-m", "fast", "-w", "-t", "15", "stop", timeout=30)
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)


@dataclass
class Timings:
    """Seconds spent starting (initdb + start + role/db) and stopping (stop + cleanup)."""

    start_s: float = 0.0
    stop_s: float = 0.0


@contextlib.contextmanager
def postgres_server(timings: Timings | None = None) -> Iterator[str]:
    """A running PostgreSQL server; yields ``postgresql://user:password@127.0.0.1:port/db``."""
    t0 = time.monotonic()
    bindir = find_bindir()
    uid = gid = None
    if os.geteuid() == 0:
        try:
            account = pwd.getpwnam(SUPERUSER)
        except KeyError:
            raise ServerUnavailable(
                "running as root, PostgreSQL needs the 'postgres' system user to run as; "
                + _INSTALL_HINT
            ) from None
        uid, gid = account.pw_uid, account.pw_gid
    folder = Path(tempfile.mkdtemp(prefix="stepscale-pg-", dir=_base_dir(uid is not None)))
    data = folder / "data"
    log = folder / "server.log"
    pid: int | None = None
    run = _Runner(bindir, uid, gid, folder)
    try:
        if uid is not None:
            os.chown(folder, uid, gid)  # type: ignore[arg-type]
        _check(
            run(
                "initdb", "-D", str(data), "-U", SUPERUSER, "--auth-local=trust",
                "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync",
                "--no-instructions",
            ),
            "initdb",
        )  # fmt: skip
        for attempt in range(3):  # the free port may be taken in between: try another
            port = _free_port()
            settings = {
                "listen_addresses": f"'{HOST}'",
                "port": str(port),
                "unix_socket_directories": f"'{folder}'",
                "fsync": "off",
                "synchronous_commit": "off",
                "full_page_writes": "off",
                "max_connections": "60",
                "shared_buffers": "16MB",
            }
            (data / "postgresql.auto.conf").write_text(
                "".join(f"{k} = {v}\n" for k, v in settings.items())
            )
            if uid is not None:
                os.chown(data / "postgresql.auto.conf", uid, gid)  # type: ignore[arg-type]
            started = run(
                "pg_ctl", "-D", str(data), "-l", str(log), "-w", "-t", "30", "start", timeout=60
            )
            pid = _read_pid(data)
            if started.returncode == 0 and pid is not None:
                break
            _stop(run, data, pid)
            pid = None
            if attempt == 2:
                raise RuntimeError(f"PostgreSQL did not start:\n{_tail(log)}")
        password = secrets.token_hex(16)
        # The password goes through stdin, never on a command line (visible in ps).
        sql = (
            f"CREATE ROLE {ROLE} LOGIN PASSWORD '{password}';\n"
            f"CREATE DATABASE {DATABASE} OWNER {ROLE};\n"
        )
        _check(
            run(
                "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", str(folder), "-p", str(port),
                "-U", SUPERUSER, "-d", "postgres", stdin=sql,
            ),
            "creating the role and database",
        )  # fmt: skip
        if timings is not None:
            timings.start_s = time.monotonic() - t0
        yield f"postgresql://{ROLE}:{password}@{HOST}:{port}/{DATABASE}"
    finally:
        t1 = time.monotonic()
        _stop(run, data, pid if pid is not None else _read_pid(data))
        shutil.rmtree(folder, ignore_errors=True)
        if timings is not None:
            timings.stop_s = time.monotonic() - t1
