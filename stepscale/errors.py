"""Errors a user can cause, shared by every part of stepscale: bad input is a `UsageError`
(the `sweep` command prints its message and exits 2, never a traceback), a failing
environment an `EnvironmentFailure` (exit 1). The exit codes themselves are decided by the
command floor (`stepscale.cli.exit_codes`). Nothing here imports anything heavy, so a
trial job, the analysis and the built-in trainer may all raise these.
"""

from __future__ import annotations

import signal


def signal_name(signum: int) -> str:
    """``SIGKILL`` for 9; the number itself for a signal Python does not name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


class UsageError(Exception):
    """Bad input from the user: the CLI prints the message and exits with code 2."""


class EnvironmentFailure(Exception):
    """The environment failed (a cluster controller, a server): the CLI prints the
    one-paragraph message and exits with code 1; nothing saved was lost."""
