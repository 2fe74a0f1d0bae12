"""Which versions ran: the one probe of installed package versions (provenance)."""

from __future__ import annotations

import platform
from collections.abc import Iterable
from importlib import metadata


def package_versions(names: Iterable[str]) -> dict[str, str | None]:
    """Installed version of each distribution, None for those not installed."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def python_version() -> str:
    """The running interpreter's version."""
    return platform.python_version()
