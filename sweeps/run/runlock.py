"""One orchestrator at a time may decide what runs next in a run dir.

Several orchestrators may work on one study (two `sweep run` of the same config, on one
machine or on several login nodes that share the run dir). Asking for a trial, adopting
an orphaned one and telling a result each read the study and then write to it; holding
this lock over each such step keeps the budget exact and every trial with one owner.

It is a POSIX record lock (``fcntl.lockf``) on ``<run dir>/.orchestrator.lock``: it works on
local disks and on NFS (through the lock manager), and the kernel releases it when the
holder dies, so a killed orchestrator never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

from stepscale.rundir import RUN_LOCK


class RunLock:
    """An exclusive, re-entrant (within one object) lock on a run dir."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / RUN_LOCK
        self._fd: int | None = None
        self._depth = 0

    def __enter__(self) -> RunLock:
        if self._depth == 0:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.lockf(self._fd, fcntl.LOCK_EX)
        self._depth += 1
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._depth -= 1
        if self._depth == 0 and self._fd is not None:
            fcntl.lockf(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Release the file (and the lock, if held)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            self._depth = 0
