"""Stopping the orchestrator with a signal: Ctrl-C (SIGINT) and SIGTERM (a cluster's
normal way to stop a process) both end a study cleanly, whether the signal reached the
whole process group (a terminal's Ctrl-C) or the orchestrator's pid alone (`kill`).

While the scheduler runs, a first signal only asks it to stop at its next safe point (never
between telling Optuna and recording a trial's end): it forwards the stop to its local trial
jobs, which checkpoint, records trials that finished meanwhile as finished and the rest as
stopped, closes ``run.json`` and exits 130 (SIGINT) or 143 (SIGTERM) with a message; the same
command resumes. A second signal stops at once. Outside the scheduler loop, SIGTERM acts as
SIGINT does (an `Interrupted` raised where the program is).
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """The command was stopped by a signal (``signum``); its exit code is 128 + signum."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


def sigterm_interrupts() -> None:
    """Make SIGTERM raise `Interrupted` as Ctrl-C raises KeyboardInterrupt (in the main
    thread of a command run from a shell, not inside a submitit job, whose SIGTERM
    handling is submitit's)."""
    if _in_main_thread() and not os.environ.get("SUBMITIT_EXECUTOR"):
        signal.signal(signal.SIGTERM, _raise_interrupted)


class StopRequest:
    """While active, SIGINT and SIGTERM set ``signum`` (the scheduler stops at its next
    safe point); a second signal raises `Interrupted` at once."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            raise Interrupted(signum)
        self.signum = signum

    def __enter__(self) -> StopRequest:
        if _in_main_thread():
            for sig in STOP_SIGNALS:
                if sig == signal.SIGTERM and os.environ.get("SUBMITIT_EXECUTOR"):
                    continue  # a detached orchestrator: submitit handles its job's signals
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def check(self) -> None:
        """Raise `Interrupted` if a signal asked to stop (after the caller has stopped)."""
        if self.signum is not None:
            raise Interrupted(self.signum)
