"""Named points in the orchestrator where a test can kill it, to prove that a kill at
that exact moment loses nothing (fault injection).

``STEPSCALE_KILL_AT=<point>`` in the orchestrator's environment makes it SIGKILL itself
the first time it passes that point; unset (always, outside tests) a point costs one
dictionary look-up. The points:

- ``ask:created``: Optuna has the new trial (RUNNING), none of its parameters yet;
- ``ask:param``: after the trial's first parameter, before the others;
- ``ask:asked``: every parameter recorded, before the trial's kind and seed (and before
  its folder is written).
"""

from __future__ import annotations

import os
import signal

ENV = "STEPSCALE_KILL_AT"
POINTS = ("ask:created", "ask:param", "ask:asked")


def kill_point(name: str) -> None:
    """SIGKILL this process here if ``STEPSCALE_KILL_AT`` names ``name``."""
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
