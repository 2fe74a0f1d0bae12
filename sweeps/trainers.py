"""The study's ``trainer:`` setting, read into one of three kinds (docs/trainers.md):

- ``builtin``: the built-in trainer (`stepscale.models.train`), reached only through
  `stepscale.sweeps.builtin`; its config is the study's model/data/optimizer/schedule/train.
- ``function``: ``trainer: {target: "module:function"}``, a Python function called with the
  trainer's own config tree (``trainer.config``), a reporter and the trial folder.
- ``command``: ``trainer: {command: [...]}``, a program in any language run in the trial
  folder; it reports by appending JSON lines to ``metrics.jsonl``.

``trainer: "module:function"`` (a string) is the short form of a function trainer.
"""

from __future__ import annotations

import copy
import importlib
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepscale.sweeps.errors import UsageError

BUILTIN_TRAINER = "stepscale.models.train:train"
# Trainer paths that run directories recorded before the code moved under `stepscale`.
LEGACY_TRAINERS = {"models.train:train": BUILTIN_TRAINER}
BUILTIN, FUNCTION, COMMAND = "builtin", "function", "command"
# What a study may write into a trainer's own config besides its parameters: the trial's
# horizon, seed and target (``trainer.keys: {max_steps: train.steps, …}``).
STUDY_KEYS = ("max_steps", "seed", "target_loss")
PYTHON = "{python}"  # in a command: the interpreter stepscale runs in
_FIELDS = {"target", "command", "validate", "config", "keys", "overrides"}


def canonical_trainer(path: str) -> str:
    """A trainer path ``module:function`` as it is named today (old built-in paths mapped)."""
    return LEGACY_TRAINERS.get(path, path)


@dataclass(frozen=True)
class TrainerSpec:
    """One trainer, as a trial job needs it (picklable, plain data)."""

    kind: str
    target: str | None = None  # module:function (builtin, function)
    command: tuple[str, ...] = ()  # argv (command)
    validate: str | None = None  # module:function, optional
    config: dict[str, Any] = field(default_factory=dict)  # the trainer's own config tree
    keys: dict[str, str] = field(default_factory=dict)  # STUDY_KEYS → path in ``config``
    overrides: bool = True  # command: pass the trial's values as key=value arguments
    python_path: tuple[str, ...] = ()  # folders a function's module is imported from


def trainer_identity(value: Any) -> dict[str, Any]:
    """What of a ``trainer:`` setting fixes the meaning of a trial, as written (the study
    fingerprint keeps it; old run dirs recorded the built-in trainer as a string)."""
    if value is None:
        return {"target": BUILTIN_TRAINER}
    if isinstance(value, str):
        value = {"target": value}
    if not isinstance(value, dict):
        return {"invalid": repr(value)}
    target = value.get("target")
    if isinstance(target, str) and canonical_trainer(target) == BUILTIN_TRAINER:
        return {"target": BUILTIN_TRAINER}
    return {k: value[k] for k in ("target", "command", "config", "keys") if value.get(k)}


def read_trainer(value: Any, search: list[Path] | None = None) -> TrainerSpec:
    """The `TrainerSpec` of a study's ``trainer:`` value (a string or a mapping); any
    mistake → `UsageError` naming the key. ``search``: folders (the working directory, the
    ``--config-dir``) that relative command paths and function modules are looked up in.
    None is the built-in trainer."""
    if value is None:
        return TrainerSpec(BUILTIN, target=BUILTIN_TRAINER)
    if isinstance(value, str):
        value = {"target": value}
    if not isinstance(value, dict):
        raise UsageError(f"trainer: expected 'module:function' or a mapping, got {value!r}")
    unknown = sorted(set(value) - _FIELDS)
    if unknown:
        raise UsageError(
            f"trainer: unknown key(s) {', '.join(unknown)}; a trainer has {', '.join(sorted(_FIELDS))}"
        )
    target, command = value.get("target"), value.get("command")
    if (target is None) == (command is None or command == []):
        raise UsageError("trainer: give exactly one of target: 'module:function' or command: [...]")
    keys = dict(value.get("keys") or {})
    bad = sorted(set(keys) - set(STUDY_KEYS))
    if bad:
        raise UsageError(
            f"trainer.keys: unknown {', '.join(bad)}; choose from {', '.join(STUDY_KEYS)}"
        )
    config = copy.deepcopy(value.get("config") or {})
    if not isinstance(config, dict):
        raise UsageError("trainer.config: expected a mapping (the trainer's own config tree)")
    folders = tuple(str(p) for p in (search or []))
    common = {
        "validate": value.get("validate"),
        "config": config,
        "keys": keys,
        "python_path": folders,
    }
    if target is not None:
        if not isinstance(target, str) or ":" not in target:
            raise UsageError(f"trainer.target: expected 'module:function', got {target!r}")
        if canonical_trainer(target) == BUILTIN_TRAINER:
            if config or keys or value.get("validate"):
                raise UsageError(
                    "trainer: the built-in trainer takes its config from model/data/optimizer/"
                    "schedule/train, not trainer.config/keys/validate"
                )
            return TrainerSpec(BUILTIN, target=BUILTIN_TRAINER)
        return TrainerSpec(FUNCTION, target=target, **common)
    if isinstance(command, str):
        command = command.split()
    if not isinstance(command, list) or not all(isinstance(a, str | int | float) for a in command):
        raise UsageError(f"trainer.command: expected a list of arguments, got {command!r}")
    argv = resolve_command([str(a) for a in command], search or [Path.cwd()])
    return TrainerSpec(
        COMMAND, command=tuple(argv), overrides=bool(value.get("overrides", True)), **common
    )


def resolve_command(argv: list[str], search: list[Path]) -> list[str]:
    """``argv`` with its program found (PATH, or a file in a ``search`` folder) and made
    absolute, and every other argument that names an existing file in a ``search``
    folder made absolute too (the command runs in the trial folder). ``{python}`` is the
    Python that runs stepscale (the same environment, whatever is first on PATH)."""
    argv = [sys.executable if a == PYTHON else a for a in argv]
    program = argv[0]
    found = _existing(program, search)
    if found is not None:
        if not os.access(found, os.X_OK):
            raise UsageError(
                f"trainer.command: {program} is not executable (chmod +x {found}, or put its "
                f"interpreter first: command: [sh, {program}] or ['{{python}}', {program}])"
            )
        program = str(found)
    elif os.sep in program or shutil.which(program) is None:
        raise UsageError(f"trainer.command: {program!r} is not a program on PATH nor a file here")
    rest = [str(p) if (p := _existing(a, search)) is not None else a for a in argv[1:]]
    return [program, *rest]


def _existing(name: str, search: list[Path]) -> Path | None:
    if "=" in name or name.startswith("-"):
        return None
    candidates = [Path(name)] if Path(name).is_absolute() else [d / name for d in search]
    # absolute, not resolved: a virtual environment's python is a symlink that must stay one
    return next((Path(os.path.abspath(c)) for c in candidates if c.is_file()), None)


def import_function(
    path: str, python_path: tuple[str, ...] = (), key: str = "trainer.target"
) -> Callable[..., Any]:
    """The function ``module:function`` names, its module imported with ``python_path``
    folders added at the end of ``sys.path`` (so installed packages still win);
    failures → `UsageError` naming ``key``."""
    for folder in python_path:
        if folder not in sys.path:
            sys.path.append(folder)
    module_name, _, name = canonical_trainer(path).partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"{key}: cannot import module {module_name!r} ({exc})") from None
    except Exception as exc:  # the user's module raised while being imported
        raise UsageError(
            f"{key}: importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    function = getattr(module, name, None)
    if not callable(function):
        raise UsageError(f"{key}: module {module_name!r} has no function {name!r}")
    return function


def config_paths(tree: dict[str, Any], prefix: str = "") -> set[str]:
    """Every dotted key of a config tree (inner nodes and leaves)."""
    out = set()
    for key, value in tree.items():
        out.add(f"{prefix}{key}")
        if isinstance(value, dict):
            out |= config_paths(value, f"{prefix}{key}.")
    return out


def settable_paths(trainer: TrainerSpec, builtin_paths: frozenset[str]) -> frozenset[str] | None:
    """The keys a study's parameters may set: the built-in trainer's, the keys of a user
    trainer's ``trainer.config``, or any (None) when that config is not given."""
    if trainer.kind == BUILTIN:
        return builtin_paths
    return frozenset(config_paths(trainer.config)) if trainer.config else None


def search_folders(config_dir: str | None) -> list[Path]:
    """Where a study's trainer is looked for: the working directory, then ``--config-dir``."""
    folders = [Path.cwd()]
    if config_dir is not None:
        folders.append(Path(config_dir).expanduser().resolve())
    return folders


def study_trainer(cfg: Any, config_dir: str | None) -> tuple[TrainerSpec, frozenset[str] | None]:
    """A study's trainer (read and, for a function, imported: mistakes → `UsageError`) and
    the keys its parameters may set (`settable_paths`)."""
    from stepscale.sweeps.trainer_keys import TRAINER_PATHS

    trainer = read_trainer(cfg.trainer, search_folders(config_dir))
    if trainer.kind == FUNCTION:
        import_function(trainer.target or "", trainer.python_path)
    return trainer, settable_paths(trainer, TRAINER_PATHS)
