"""Optuna's journal file (the default storage), made to survive torn writes.

A journal is one JSON record per line, appended under Optuna's own lock file. A writer
killed mid-write (SIGKILL, OOM, a node lost) or stopped by a full disk leaves a last line
without its newline; Optuna's reader skips such a line, but the next append would glue a
whole record onto it, and from then on every reader fails on that line for good.

`TornSafeJournalBackend` cuts a torn last record off before each append (under the same
lock, so no live writer is mid-line), and `open_journal` does the same when a study is
opened and mends a journal an older version left broken (a torn record with a whole one
glued on: the whole one is kept, the torn part dropped). A torn record never took effect,
since no reader could read it, so dropping it loses nothing that happened. Whenever the
file is changed, the file as it was is kept beside it (``study.journal.<time>.bak``) and
one warning line says so.

Writers take an OS-level lock (`JournalProcessLock`, ``fcntl.lockf`` on
``study.journal.flock``) instead of Optuna's lock file: the kernel releases it when its
holder dies, so a writer killed while holding it (kill -9, the OOM killer) leaves nothing
for the next one to wait out.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.storages.journal._file import BaseJournalFileLock

_CHUNK = 1 << 16
_RECORD_START = b'{"op_code"'  # how Optuna writes every record (json.dumps of a dict)


LOCK_SUFFIX = ".flock"


class JournalProcessLock(BaseJournalFileLock):
    """An exclusive lock on a journal file that dies with its holder.

    A POSIX record lock (``fcntl.lockf``, honoured on local disks and over NFS through its
    lock manager) on ``<journal>.flock``. Optuna's own locks are files that a killed holder
    leaves behind, which every later writer then waits out (with a warning a line) until a
    grace period lets it break them. POSIX locks belong to a process, not to a file
    descriptor or a thread, and closing any descriptor of the file drops them; so each
    process keeps one descriptor per lock file for good, and a thread lock makes the
    threads of one process take turns.
    """

    _held: ClassVar[dict[tuple[str, int], tuple[int, threading.Lock]]] = {}
    _guard: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, journal_path: str) -> None:
        self.path = journal_path + LOCK_SUFFIX

    def _handle(self) -> tuple[int, threading.Lock]:
        """This process's descriptor of the lock file and its thread lock (made once)."""
        key = (os.path.abspath(self.path), os.getpid())  # a forked child opens its own
        with self._guard:
            if key not in self._held:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
                self._held[key] = (fd, threading.Lock())
            return self._held[key]

    def acquire(self) -> bool:
        """Block until this process holds the lock (an unwritable run dir raises OSError)."""
        fd, turn = self._handle()
        turn.acquire()
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX)
        except BaseException:
            turn.release()
            raise
        return True

    def release(self) -> None:
        """Let the next writer in."""
        fd, turn = self._handle()
        try:
            fcntl.lockf(fd, fcntl.LOCK_UN)
        finally:
            turn.release()


class TornSafeJournalBackend(JournalFileBackend):
    """Optuna's journal file backend with a lock that dies with its holder; a torn last
    record is cut off before each append."""

    def __init__(self, file_path: str) -> None:
        super().__init__(file_path, lock_obj=JournalProcessLock(file_path))
        self.path = Path(file_path)

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        """Append records as Optuna does, after cutting off a torn last record."""
        with journal_lock(self._lock):
            cut_torn_tail(self.path)
            text = "\n".join(json.dumps(log, separators=(",", ":")) for log in logs) + "\n"
            try:
                with open(self.path, "ab") as f:
                    f.write(text.encode("utf-8"))
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as exc:  # a full disk: say which file (the torn tail is cut later)
                exc.filename = exc.filename or str(self.path)
                raise

    def mend(self) -> None:
        """Under the journal's lock, cut a torn last record off and mend records that an
        older version glued onto a torn one (see the module docstring)."""
        with journal_lock(self._lock):
            cut_torn_tail(self.path)
            mend_glued_records(self.path)


@contextlib.contextmanager
def journal_lock(lock: BaseJournalFileLock) -> Iterator[None]:
    """Hold the lock of a journal file. A lock that cannot be made (a read-only or
    unwritable run dir) raises that OSError itself (Optuna's own locks raise a
    RuntimeError while cleaning up after it)."""
    try:
        lock.acquire()
    except RuntimeError as exc:
        if isinstance(exc.__context__, OSError):
            raise exc.__context__ from None
        raise
    try:
        yield
    finally:
        lock.release()


def open_journal(path: Path) -> JournalStorage:
    """The journal storage in ``path`` (created if missing), repaired if a write was torn."""
    backend = TornSafeJournalBackend(str(path))
    if _ends_torn(path):  # else nothing to take the lock for (the usual case)
        with journal_lock(backend._lock):
            cut_torn_tail(path)  # a live writer mid-line held the lock: then nothing is cut
    try:
        return JournalStorage(backend)
    except ValueError:  # Optuna read a bad record before the end: mend it, read again
        backend.mend()
        return JournalStorage(TornSafeJournalBackend(str(path)))


def _ends_torn(path: Path) -> bool:
    """Does the file's last line lack its newline?"""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return False
        f.seek(size - 1)
        return f.read(1) != b"\n"


def cut_torn_tail(path: Path) -> int:
    """Drop a last line that lacks its newline (a torn write); returns the bytes dropped.
    Call it holding the journal's lock."""
    if not _ends_torn(path):
        return 0
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        end = _last_newline_end(f, size)
        backup = _backup(path)
        f.truncate(end)
        f.flush()
        os.fsync(f.fileno())
    _warn(
        f"{path.name} ended in a record cut short ({size - end} bytes, a write interrupted "
        f"by a kill or a full disk); dropped it and kept the file as it was in {backup.name}"
    )
    return size - end


def _last_newline_end(f: Any, size: int) -> int:
    """The offset just after the file's last newline (0 if there is none)."""
    pos = size
    while pos > 0:
        start = max(0, pos - _CHUNK)
        f.seek(start)
        chunk = f.read(pos - start)
        i = chunk.rfind(b"\n")
        if i >= 0:
            return start + i + 1
        pos = start
    return 0


def mend_glued_records(path: Path) -> int:
    """Rewrite lines that are not one JSON record: keep the whole record glued onto the
    end of a torn one, drop what cannot be read. Returns the lines changed. The bytes
    before the first bad line are kept as they are (readers' offsets there stay valid).
    Call it holding the journal's lock."""
    with open(path, "rb") as f:
        lines = f.read().splitlines(keepends=True)
    first_bad = next((i for i, line in enumerate(lines) if not _is_record(line)), None)
    if first_bad is None:
        return 0
    head = sum(len(line) for line in lines[:first_bad])
    mended, changed = [], 0
    for line in lines[first_bad:]:
        if _is_record(line):
            mended.append(line)
            continue
        changed += 1
        whole = _glued_record(line)
        if whole is not None:
            mended.append(whole)
    backup = _backup(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.mend")
    with open(path, "rb") as src, open(tmp, "wb") as dst:
        dst.write(src.read(head))
        dst.writelines(mended)
        dst.flush()
        os.fsync(dst.fileno())
    os.replace(tmp, path)
    _warn(
        f"{path.name} had {changed} unreadable record(s) (a torn write that a later one was "
        f"appended to); kept the whole records, dropped the torn parts, and kept the file "
        f"as it was in {backup.name}"
    )
    return changed


def _is_record(line: bytes) -> bool:
    try:
        return line.endswith(b"\n") and isinstance(json.loads(line), dict)
    except ValueError:
        return False


def _glued_record(line: bytes) -> bytes | None:
    """The last whole record inside a line that starts with a torn one, if any."""
    pos = len(line)
    while (pos := line.rfind(_RECORD_START, 0, pos)) > 0:
        candidate = line[pos:].rstrip(b"\r\n") + b"\n"
        if _is_record(candidate):
            return candidate
    return None


def _backup(path: Path) -> Path:
    """A copy of the journal as it is now, beside it, under a name no other backup has."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    backup = path.with_name(f"{path.name}.{stamp}.bak")
    shutil.copy2(path, backup)
    return backup


def _warn(message: str) -> None:
    print(f"sweep: warning: {message}", file=sys.stderr, flush=True)
