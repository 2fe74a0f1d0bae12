"""Real servers started by tests (PostgreSQL, …), each in a temporary folder of its own.

A server that cannot be started here (binaries not installed) raises `ServerUnavailable`;
tests turn that into a skip with `skip_or_fail`, except where ``STEPSCALE_REQUIRE_CLUSTER=1``
(CI sets it) asks for a failure, so a cluster test can never silently skip there.
"""

from __future__ import annotations

import os

REQUIRE_ENV = "STEPSCALE_REQUIRE_CLUSTER"


class ServerUnavailable(RuntimeError):
    """The server's software is not installed on this machine (or cannot run here)."""


def cluster_required() -> bool:
    """Does the environment demand that cluster tests run (no skipping)?"""
    return os.environ.get(REQUIRE_ENV, "").strip() not in ("", "0", "false", "no")


def skip_or_fail(reason: str) -> None:
    """`pytest.skip` with ``reason``, or `pytest.fail` when cluster tests are required."""
    import pytest

    if cluster_required():
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1: cluster tests may not be skipped)")
    pytest.skip(reason)
