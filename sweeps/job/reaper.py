"""Nothing a trial started outlives it: a command trainer's program runs in a session (and
process group) of its own, marked by an environment variable that every process it starts
inherits, and whoever ends the trial ends all of them (docs/trainers.md, "When a script
misbehaves").

- `start_marked` gives the `subprocess.Popen` arguments: a new session, and
  ``STEPSCALE_PROCESS_MARK=<trial folder>`` in the program's environment.
- `end_group` ends the program's group (the stop signal, a grace, SIGKILL), then every
  leftover: a process still in its group or session, or carrying the mark — a child that
  kept the output pipe, a double-forked daemon, one that left the session. The leftovers are
  returned so the job can record them (``leftovers_killed`` in the trial's events.jsonl,
  shown by ``sweep status``).
- `become_subreaper` (Linux, ``prctl(PR_SET_CHILD_SUBREAPER)``): orphans of the program are
  re-parented to the job instead of init, so they stay in the job's process tree (SLURM's
  process tracking finds them) and the job reaps them once killed.
- `kill_marked` is the launchers' net when a job itself was killed (a warm worker past its
  timeout, a Ray actor ended): every process of this host with the trial's mark.

Only this user's processes can be seen (``/proc/<pid>/environ``) and killed; that is all a
trial can start.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepscale.events import record_event
from stepscale.redact import redact_output
from stepscale.sweeps.job import heartbeat

MARK_ENV = "STEPSCALE_PROCESS_MARK"  # set for a command trainer's program: its trial folder
PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
PR_SET_PDEATHSIG = 1
LEFTOVER_GRACE_S = 2.0  # a leftover gets SIGTERM, then SIGKILL after this


@dataclass(frozen=True)
class Leftover:
    """A process found alive after its trial's program ended."""

    pid: int
    command: str


def become_subreaper() -> bool:
    """Make this process the reaper of its descendants' orphans (Linux); True if it is."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def start_marked(folder: Path, env: dict[str, str]) -> dict[str, Any]:
    """The `subprocess.Popen` keyword arguments that start a trial's program in a session of
    its own with the trial's mark in ``env`` (a copy is made) and, on Linux, killed when the
    job dies (``PR_SET_PDEATHSIG``: a job killed at once with its process group — a closed
    terminal's SIGHUP, ``kill -9`` of the group — no longer takes the program with it, since
    the program has a session of its own)."""
    kwargs: dict[str, Any] = {"env": {**env, MARK_ENV: str(folder)}, "start_new_session": True}
    prctl = _prctl()
    if prctl is not None:
        kwargs["preexec_fn"] = _die_with_parent(prctl, os.getpid())
    return kwargs


def _prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _die_with_parent(prctl: Any, parent: int) -> Any:
    """What runs in the forked child before exec: SIGKILL when the job's thread that started
    it ends (the job runs the program from its main thread), and at once if the job is
    already gone. Only async-safe calls: the child of a threaded process."""

    def child() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return child


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, ppid, process group, session) of ``pid``, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    return fields[0], int(fields[1]), int(fields[2]), int(fields[3])


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode("utf-8", errors="replace").strip()


def _marked(pid: int, needle: bytes) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return needle in b"\0" + environ


def find_leftovers(folder: Path, group: int | None = None) -> list[Leftover]:
    """Live processes (not zombies) of this host that belong to the trial in ``folder``:
    in the process group/session ``group``, or with the trial's mark. Never this process."""
    if not os.path.isdir("/proc"):
        return []
    needle = f"\0{MARK_ENV}={folder}\0".encode()
    me = os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        stat = _stat(pid)
        if stat is None or stat[0] in ("Z", "X"):
            continue
        in_group = group is not None and group in (stat[2], stat[3])
        if in_group or _marked(pid, needle):
            found.append(Leftover(pid, _command(pid)))
    return found


def _alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def _reap(pid: int) -> None:
    """Collect ``pid``'s exit if it is a child of this process (an orphan re-parented here)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def kill_all(leftovers: list[Leftover], grace_s: float = LEFTOVER_GRACE_S) -> None:
    """SIGTERM to each, SIGKILL to those alive ``grace_s`` later; reap those that are ours."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in leftovers:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p.pid, sig)
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 5.0)
        while time.monotonic() < deadline:
            for p in leftovers:
                _reap(p.pid)
            if not any(_alive(p.pid) for p in leftovers):
                return
            time.sleep(0.05)


def signal_group(group: int, sig: int) -> None:
    """Send ``sig`` to a process group (gone already: nothing to do)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)


def end_group(
    proc: Any,
    folder: Path,
    sig: int,
    grace_s: float,
    whole_group: bool = False,
    send: bool = True,
) -> list[Leftover]:
    """End a trial's program (``proc``, a `subprocess.Popen` started by `start_marked`) and
    all it started: unless it has exited, ``sig`` to it (``whole_group``: to its process
    group, as a terminal's Ctrl-C would; ``send`` false: it was sent already) and SIGKILL
    to its group after ``grace_s``; then the leftovers (`find_leftovers`, `kill_all`).
    Returns the leftovers found after the program itself had ended."""
    group = proc.pid
    if proc.poll() is None:
        if not send:
            pass
        elif whole_group:
            signal_group(group, sig)
        else:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            signal_group(group, signal.SIGKILL)
            proc.wait()
    leftovers = find_leftovers(folder, group)
    if leftovers:
        kill_all(leftovers)
    reap_orphans()
    return leftovers


def reap_orphans() -> None:
    """Collect the exit of every orphan re-parented to this process (a subreaper) that has
    ended: a zombie child in another session than this process's. Children this process
    started itself share its session (the trainer's program, whose `Popen` collects it,
    is never a zombie child here once it was waited for)."""
    if not os.path.isdir("/proc"):
        return
    me, session = os.getpid(), os.getsid(0)
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        stat = _stat(int(name))
        if stat is not None and stat[0] == "Z" and stat[1] == me and stat[3] != session:
            _reap(int(name))


def kill_marked(folder: Path) -> list[Leftover]:
    """Kill every process of this host with the mark of the trial in ``folder`` (its job
    was killed before it could end them); returns them."""
    leftovers = find_leftovers(folder)
    if leftovers:
        kill_all(leftovers)
    return leftovers


def record_leftovers(
    folder: Path, step: int, leftovers: list[Leftover], secrets: list[str], by: str
) -> None:
    """Say in the trial's events.jsonl (``leftovers_killed``, which ``sweep status`` shows)
    and on stderr (the job's log) which processes outlived the trial's program; ``by``:
    ``job`` or ``launcher`` (the job itself had been killed)."""
    commands = [redact_output(p.command, secrets)[:200] for p in leftovers[:5]]
    record_event(
        folder, "leftovers_killed", step, processes=len(leftovers), commands=commands, by=by
    )
    print(
        f"stepscale: killed {len(leftovers)} process(es) the trainer command of {folder} "
        "left behind: " + "; ".join(commands),
        file=sys.stderr,
        flush=True,
    )


def end_leftovers(folder: Path) -> list[Leftover]:
    """A launcher's net after a job ended: kill what the trial's program left on this
    machine (`kill_marked`) and record it (`record_leftovers`, by the launcher)."""
    leftovers = kill_marked(folder)
    if leftovers:
        record_leftovers(folder, heartbeat.job_step(folder), leftovers, [], "launcher")
    return leftovers


__all__ = [
    "MARK_ENV",
    "Leftover",
    "become_subreaper",
    "end_group",
    "end_leftovers",
    "find_leftovers",
    "kill_all",
    "kill_marked",
    "reap_orphans",
    "record_leftovers",
    "start_marked",
]
