"""Where launchers register: `register_launcher`, a class decorator on a
`sweeps.launch.base.Launcher` subclass. Its ``name`` becomes a choice of ``launcher=`` and
``launcher.name``; its ``config`` schema is registered with the study's config as well
(`sweeps.study.launcher_schema`), so ``launcher=<name>`` composes onto it. The built-in
launchers register when `sweeps.launch.launchers` imports them; a launcher of one's own
registers when its module is imported."""

from __future__ import annotations

from typing import TypeVar

from stepscale.sweeps.launch.base import Launcher
from stepscale.sweeps.study.launcher_schema import register_schema

L = TypeVar("L", bound=type[Launcher])
REGISTERED: dict[str, type[Launcher]] = {}


def register_launcher(cls: L) -> L:
    """Register a launcher class under its ``name`` (a class decorator; a later class of
    the same name replaces the earlier)."""
    if not (isinstance(cls, type) and issubclass(cls, Launcher)):
        raise TypeError(f"{cls!r}: a launcher subclasses sweeps.launch.base.Launcher")
    register_schema(cls.name, cls.config)
    REGISTERED[cls.name] = cls
    return cls
