"""Test-session setup: four fake CPU devices (multi-device code runs on CPU) and a
compilation cache private to the session, set before JAX is imported anywhere."""

from __future__ import annotations

import os
import tempfile

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# submitit configures logging on import (logging.config.dictConfig), which closes every
# existing handler: absl's (imported with jax) holds the stream pytest captured at that
# moment, and closing it breaks pytest's capture for the rest of the session.
os.environ.setdefault("SUBMITIT_LOG_LEVEL", "NOCONFIG")

import pytest

_CACHE = tempfile.mkdtemp(prefix="stepscale-jax-cache-")


@pytest.fixture
def compile_cache() -> str:
    """A persistent compilation cache directory shared by the tests of this session."""
    return _CACHE
