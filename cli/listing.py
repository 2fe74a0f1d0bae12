"""`sweep list`: the presets of the `conf` group, built in and from --config-dir."""

from __future__ import annotations

import argparse
from pathlib import Path

from stepscale.errors import UsageError
from stepscale.sweeps.study.compose import conf_dir, read_preset_text


def _describe(path: Path) -> tuple[str, str]:
    """(kind, one-line description) of a preset file: its first comment line after the
    package header; studies declare `scientific:`. Unreadable → `UsageError` naming it."""
    text = read_preset_text(path)
    kind = "study" if "\nscientific:" in text else "train"
    for line in text.splitlines():
        if line.startswith("#") and "@package" not in line:
            return kind, line.lstrip("# ").strip()
    return kind, ""


def presets(config_dir: str | None) -> list[tuple[str, str, str, str]]:
    """(name, kind, description, source) of every preset, built-ins first."""
    sources = [("built-in", conf_dir() / "conf")]
    if config_dir is not None:
        user = Path(config_dir).expanduser()
        if not user.is_dir():
            raise UsageError(f"--config-dir {config_dir}: no such directory")
        sources.append((str(user), user / "conf"))
    rows = []
    for origin, folder in sources:
        for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
            kind, desc = _describe(path)
            rows.append((path.stem, kind, desc, origin))
    return rows


def print_presets(config_dir: str | None) -> int:
    """Print one line per preset: name, kind, description."""
    for name, kind, desc, origin in presets(config_dir):
        suffix = "" if origin == "built-in" else f"  [{origin}]"
        print(f"{name:24s} {kind:6s} {desc}{suffix}")
    return 0


def command(args: argparse.Namespace) -> int:
    """`sweep list`."""
    return print_presets(args.config_dir)
