"""A command trainer's arguments in the script's own style (``trainer.args``), and the
placeholders of its command line.

Argument styles are plug-ins registered by name (`ArgStyle`, `STYLES`):

- ``key=value``: Hydra's override grammar (the default; ``optim.lr=0.001``);
- ``--key=value``: argparse, absl, exec-style configurators (``--learning_rate=0.001``);
- ``--key value``: argparse's other spelling (``--learning_rate 0.001``);
- ``-key value`` / ``-key=value``: single-dash flags (Go's flag package, some C++ and
  Java trainers);
- ``none``: no arguments (the script reads ``config.json`` or the environment).

Values are written by type so that a script that checks types gets the type it declared:
a float is always a float literal (``1.0``, never ``1``; the orchestrator has made a
float setting a float already, `sweeps.study.trials`), booleans as ``booleans`` says
(``python``: True/False, ``lower``: true/false, ``int``: 1/0).

Placeholders, in the command, the resume arguments, argument values that are strings and
a file source: ``{trial_dir}``, ``{seed}``, ``{max_steps}``, ``{python}`` and any key of
the trial's config by its dotted path (``{optim.lr}``); ``{{`` and ``}}`` are braces.
Imports nothing of Hydra: it runs inside a trial's job.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from stepscale.errors import UsageError

BOOLEANS = {"python": ("True", "False"), "lower": ("true", "false"), "int": ("1", "0")}
STUDY_PLACEHOLDERS = ("trial_dir", "seed", "max_steps", "python")
# A command trainer's spike restarts (`sweeps.job.command_restarts`): the checkpoint step the
# last restart went back to and the batches skipped in all (both 0 before any restart).
RESTART_PLACEHOLDERS = ("restart_step", "batches_skipped")
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_][\w.]*)\}")


def hydra_value(value: Any, booleans: str = "lower") -> str:
    """A value as Hydra's override grammar reads it (``0.001``, ``true``, ``null``,
    ``[1,2]``, a quoted string when it is not a plain word)."""
    if value is None:
        return "null"
    if isinstance(value, str):
        plain = value and all(c.isalnum() or c in "_-./:" for c in value)
        return value if plain else "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, list | dict):
        return json.dumps(value, separators=(",", ":"))
    return literal(value, booleans)


def literal(value: Any, booleans: str = "python") -> str:
    """A value as a script parses it back (Python's ``literal_eval``, argparse's types): a
    float always with a point or exponent (``1.0``, ``1e-05``, ``inf``), booleans as asked,
    strings as they are."""
    if isinstance(value, bool):
        return BOOLEANS[booleans][0 if value else 1]
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    if isinstance(value, int | str):
        return str(value)
    if value is None:
        return "None" if booleans == "python" else "null"
    return json.dumps(value, separators=(",", ":"))


@dataclass(frozen=True)
class ArgStyle:
    """One way of passing settings: its argv items for a name and a value."""

    name: str
    items: Callable[[str, str], list[str]]
    value: Callable[[Any, str], str]
    booleans: str  # the default rendering of booleans in this style


STYLES: dict[str, ArgStyle] = {}


def register_style(style: ArgStyle) -> None:
    """Register an argument style under its name."""
    STYLES[style.name] = style


register_style(ArgStyle("key=value", lambda k, v: [f"{k}={v}"], hydra_value, "lower"))
register_style(ArgStyle("--key=value", lambda k, v: [f"--{k}={v}"], literal, "python"))
register_style(ArgStyle("--key value", lambda k, v: [f"--{k}", v], literal, "python"))
register_style(ArgStyle("-key value", lambda k, v: [f"-{k}", v], literal, "python"))
register_style(ArgStyle("-key=value", lambda k, v: [f"-{k}={v}"], literal, "python"))
register_style(ArgStyle("none", lambda k, v: [], literal, "python"))


@dataclass(frozen=True)
class ArgsSpec:
    """``trainer.args``: the style, study path → the script's name, how booleans read."""

    style: str = "key=value"
    names: dict[str, str] = field(default_factory=dict)
    booleans: str = "lower"

    def render(self, settings: Mapping[str, Any], values: Mapping[str, Any]) -> list[str]:
        """The argv items of ``settings`` (path → value); string values have their
        placeholders filled from ``values``."""
        style = STYLES[self.style]
        out: list[str] = []
        for path, value in settings.items():
            if isinstance(value, str):
                value = fill(value, values, self.booleans)
            out += style.items(self.names.get(path, path), style.value(value, self.booleans))
        return out


def read_args(value: Any, overrides: Any) -> ArgsSpec:
    """The `ArgsSpec` of ``trainer.args`` (a style name or a mapping: style, names,
    booleans) and the older ``trainer.overrides`` (true: ``key=value``; false: none)."""
    if value is None:
        if overrides is None or overrides:
            return ArgsSpec()
        return ArgsSpec("none", booleans="python")
    if overrides is not None:
        raise UsageError(
            "trainer.overrides: give trainer.args instead (overrides: false is args: none)"
        )
    if isinstance(value, str):
        value = {"style": value}
    if not isinstance(value, Mapping):
        raise UsageError(
            f"trainer.args: expected a style or a mapping (style, names, booleans), got {value!r}"
        )
    unknown = sorted(set(value) - {"style", "names", "booleans"})
    if unknown:
        raise UsageError(
            f"trainer.args: unknown key(s) {', '.join(unknown)}; it has style, names, booleans"
        )
    style = value.get("style", "key=value")
    if style not in STYLES:
        raise UsageError(
            f"trainer.args.style: unknown argument style {style!r}; choose one of "
            f"{', '.join(repr(s) for s in STYLES)}"
        )
    booleans = value.get("booleans") or STYLES[style].booleans
    if booleans not in BOOLEANS:
        raise UsageError(
            f"trainer.args.booleans: unknown {booleans!r}; choose one of {', '.join(BOOLEANS)}"
        )
    names = value.get("names") or {}
    if not isinstance(names, Mapping) or not all(isinstance(v, str) and v for v in names.values()):
        raise UsageError(
            f"trainer.args.names: expected study path → the script's name, got {names!r}"
        )
    return ArgsSpec(str(style), {str(k): v for k, v in names.items()}, str(booleans))


def placeholders(text: str) -> set[str]:
    """The placeholder names in ``text``."""
    return {m.group(1) for m in _PLACEHOLDER.finditer(text) if m.group(1)}


def fill(text: str, values: Mapping[str, Any], booleans: str = "python") -> str:
    """``text`` with its placeholders replaced by ``values`` (written as `literal`s); an
    unknown name → `UsageError`."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return match.group(0)[0]
        if name not in values:
            raise UsageError(
                f"trainer.command: unknown placeholder {{{name}}} in {text!r}; there are "
                f"{', '.join('{' + n + '}' for n in STUDY_PLACEHOLDERS)} and the trial config's keys"
            )
        return literal(values[name], booleans)

    return _PLACEHOLDER.sub(one, text)


def flat_config(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Every key of a config tree by its dotted path (inner nodes and leaves)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out[f"{prefix}{key}"] = value
        if isinstance(value, Mapping):
            out |= flat_config(value, f"{prefix}{key}.")
    return out


def check_placeholders(texts: list[str], known: set[str] | None, key: str) -> None:
    """Refuse a placeholder that names neither a study value nor (when ``known`` is not
    None) a key of the trainer's config."""
    allowed = STUDY_PLACEHOLDERS
    if key in ("trainer.restart_args", "trainer.resume_args"):
        allowed += RESTART_PLACEHOLDERS  # where a restart's step and skip are passed on
    for text in texts:
        for name in placeholders(text):
            if name in allowed or known is None or name in known:
                continue
            raise UsageError(
                f"{key}: unknown placeholder {{{name}}} in {text!r}; there are "
                f"{', '.join('{' + n + '}' for n in allowed)} and the keys of trainer.config"
            )
