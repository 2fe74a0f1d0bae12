"""The exit code every `sweep` command ends with.

0 success; 2 bad input (config, override, usage, unreadable file) with a message and no
traceback; 130 on Ctrl-C (143 on SIGTERM) after saving state; 1 internal or environment
error with a clear message.
"""

from __future__ import annotations

import errno
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from stepscale.errors import EnvironmentFailure, UsageError


def exit_code(command: Callable[[], int]) -> int:
    """Run a command and return its exit code; a `UsageError`, Ctrl-C or a full disk
    becomes a one-line message on stderr and its exit code (2, 130, 1)."""
    try:
        return command()
    except UsageError as exc:
        print(f"sweep: error: {exc}", file=sys.stderr)
        return 2
    except EnvironmentFailure as exc:
        print(f"sweep: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        signum = int(getattr(exc, "signum", signal.SIGINT))
        what = (
            "interrupted"
            if signum == signal.SIGINT
            else f"stopped by {signal.Signals(signum).name}"
        )
        print(f"sweep: {what}; state saved — run the same command to resume", file=sys.stderr)
        return 128 + signum
    except OSError as exc:  # the environment: a full or read-only disk, a permission
        where = f" ({exc.filename})" if exc.filename else ""
        if exc.errno == errno.ENOSPC:
            where = f" writing {exc.filename}" if exc.filename else ""
            what = "disk full"
        elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            what = f"cannot write there: {exc.strerror}"
        else:
            what = exc.strerror or type(exc).__name__
        print(
            f"sweep: error: {what}{where}; nothing saved was lost — fix that and run the same "
            "command to go on",
            file=sys.stderr,
        )
        return 1


@contextmanager
def out_of_memory(message: str) -> Iterator[None]:
    """A `MemoryError` raised inside becomes an `EnvironmentFailure` saying ``message``
    (exit 1, one line: what ran out and what to do)."""
    try:
        yield
    except MemoryError:
        raise EnvironmentFailure(message) from None
