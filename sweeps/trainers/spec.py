"""The study's ``trainer:`` setting, read into one of three kinds (docs/trainers.md):

- ``builtin``: the built-in trainer (`stepscale.models.train`), reached only through
  `stepscale.sweeps.trainers.builtin`; its config is the study's model/data/optimizer/schedule/train.
- ``function``: ``trainer: {target: "module:function"}``, a Python function called with the
  trainer's own config tree (``trainer.config``), a reporter and the trial folder.
- ``command``: ``trainer: {command: [...]}``, a program in any language run in the trial
  folder (or ``trainer.cwd``); it reports by appending JSON lines to ``metrics.jsonl``, or
  prints its metrics in its own format (``trainer.metrics``: `sweeps.trainers.line_formats`), and
  takes its settings in its own argument style (``trainer.args``: `sweeps.trainers.arg_styles`).

``trainer: "module:function"`` (a string) is the short form of a function trainer. What
each kind answers when the orchestrator or a job asks (its config base, its validate, how
a trial runs …) is `sweeps.trainers.kinds`; a `TrainerSpec` is plain, picklable data.
"""

from __future__ import annotations

import copy
import importlib
import os
import shutil
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepscale.errors import UsageError
from stepscale.sweeps.trainers.arg_styles import ArgsSpec, check_placeholders, read_args
from stepscale.sweeps.trainers.line_formats import MetricsSpec, read_metrics

BUILTIN_TRAINER = "stepscale.models.train:train"
# Trainer paths that run directories recorded before the code moved under `stepscale`.
LEGACY_TRAINERS = {"models.train:train": BUILTIN_TRAINER}
BUILTIN, FUNCTION, COMMAND = "builtin", "function", "command"
# What a study may write into a trainer's own config besides its parameters: the trial's
# horizon, seed and target (``trainer.keys: {max_steps: train.steps, …}``).
STUDY_KEYS = ("max_steps", "seed", "target_loss")
PYTHON = "{python}"  # in a command: the interpreter stepscale runs in
_FIELDS = {"target", "command", "validate", "config", "keys", "overrides"}
# What only a command trainer has (docs/trainers.md, "An existing script, unmodified").
_COMMAND_FIELDS = {
    "metrics",
    "args",
    "cwd",
    "stop_signal",
    "stop_grace_s",
    "resume_args",
    "restart_args",
    "checkpoint_every",
    "inactivity_s",
    "secret_env",
}
STOP_GRACE_S = 60.0  # how long a signalled program may take to save a checkpoint and exit
# How long a program may run without giving a record before it is ended as hung (at least;
# 10 × the longest gap between its records once it has reported): docs/trainers.md.
INACTIVITY_S = 600.0


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
    python_path: tuple[str, ...] = ()  # folders a function's module is imported from
    # command only:
    args: ArgsSpec = field(default_factory=ArgsSpec)  # how the trial's settings are passed
    metrics: MetricsSpec = field(default_factory=MetricsSpec)  # where its records come from
    cwd: str | None = None  # the program's working directory (None: the trial folder)
    stop_signal: int = signal.SIGTERM  # sent on prune or stop
    stop_grace_s: float = STOP_GRACE_S  # then SIGKILL
    resume_args: tuple[str, ...] = ()  # added when the trial already has records
    # added when the job restarts the program before a loss spike (train.on_spike):
    # {restart_step} and {batches_skipped} say where to resume and how many batches to skip
    restart_args: tuple[str, ...] = ()
    checkpoint_every: int = 0  # the program keeps a checkpoint every this many steps
    inactivity_s: float = INACTIVITY_S  # no record for this long (at least): hung (0: no limit)
    secret_env: tuple[str, ...] = ()  # environment variables whose values are never quoted


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
    return {k: value[k] for k in ("target", "command", "config", "keys", "args") if value.get(k)}


def trainer_kind(value: Any) -> str:
    """The kind (`BUILTIN`, `FUNCTION` or `COMMAND`) a study's ``trainer:`` setting names,
    told without checking the rest of it (`read_trainer` checks)."""
    if value is None:
        return BUILTIN
    if isinstance(value, str):
        value = {"target": value}
    if isinstance(value, dict) and value.get("command") not in (None, []):
        return COMMAND
    target = value.get("target") if isinstance(value, dict) else None
    if isinstance(target, str) and canonical_trainer(target) == BUILTIN_TRAINER:
        return BUILTIN
    return FUNCTION


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
    unknown = sorted(set(value) - _FIELDS - _COMMAND_FIELDS)
    if unknown:
        raise UsageError(
            f"trainer: unknown key(s) {', '.join(unknown)}; a trainer has "
            f"{', '.join(sorted(_FIELDS | _COMMAND_FIELDS))}"
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
        only = sorted(k for k in _COMMAND_FIELDS | {"overrides"} if value.get(k) is not None)
        if only:
            raise UsageError(f"trainer: {', '.join(only)} belong to a command trainer, not target:")
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
    folders = list(search or [Path.cwd()])
    cwd = _working_dir(value.get("cwd"), folders)
    argv = resolve_command([str(a) for a in command], [Path(cwd), *folders] if cwd else folders)
    resume_args = _arg_list(value, "resume_args")
    restart_args = _arg_list(value, "restart_args")
    known = config_paths(config) | set(keys.values()) if config else None
    check_placeholders(argv, known, "trainer.command")
    check_placeholders(resume_args, known, "trainer.resume_args")
    check_placeholders(restart_args, known, "trainer.restart_args")
    every = value.get("checkpoint_every", 0)
    if isinstance(every, bool) or not isinstance(every, int) or every < 0:
        raise UsageError(
            f"trainer.checkpoint_every: expected the steps between the program's checkpoints "
            f"(an integer ≥ 0), got {every!r}"
        )
    metrics = read_metrics(value.get("metrics"))
    if metrics.parsed and metrics.source not in ("stdout", "stderr"):
        check_placeholders([metrics.source], known, "trainer.metrics.source")
    grace = value.get("stop_grace_s", STOP_GRACE_S)
    if isinstance(grace, bool) or not isinstance(grace, int | float) or not grace >= 0:
        raise UsageError(f"trainer.stop_grace_s: expected seconds ≥ 0, got {grace!r}")
    inactivity = value.get("inactivity_s", INACTIVITY_S)
    if inactivity is None:
        inactivity = 0.0
    if isinstance(inactivity, bool) or not isinstance(inactivity, int | float) or inactivity < 0:
        raise UsageError(
            f"trainer.inactivity_s: expected seconds ≥ 0 (0 or null: no limit), got {inactivity!r}"
        )
    secret_env = value.get("secret_env") or []
    if isinstance(secret_env, str):
        secret_env = [secret_env]
    if not isinstance(secret_env, list) or not all(isinstance(n, str) for n in secret_env):
        raise UsageError(
            f"trainer.secret_env: expected a list of environment variable names, got {secret_env!r}"
        )
    return TrainerSpec(
        COMMAND,
        command=tuple(argv),
        args=read_args(value.get("args"), value.get("overrides")),
        metrics=metrics,
        cwd=cwd,
        stop_signal=_signal(value.get("stop_signal")),
        stop_grace_s=float(grace),
        resume_args=tuple(resume_args),
        restart_args=tuple(restart_args),
        checkpoint_every=every,
        inactivity_s=float(inactivity),
        secret_env=tuple(secret_env),
        **common,
    )


def _arg_list(value: dict[str, Any], key: str) -> list[str]:
    """``trainer.<key>``: a list of arguments (a string is split on spaces)."""
    args = value.get(key) or []
    if isinstance(args, str):
        args = args.split()
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise UsageError(f"trainer.{key}: expected a list of arguments, got {args!r}")
    return args


def _working_dir(value: Any, search: list[Path]) -> str | None:
    """``trainer.cwd`` made absolute: relative to the ``--config-dir`` when one is given
    (the study file's folder), else to the working directory; it must exist."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise UsageError(f"trainer.cwd: expected a folder, got {value!r}")
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = search[-1] / path
    if not path.is_dir():
        raise UsageError(f"trainer.cwd: {value!r} ({path}) does not exist or is not a folder")
    return os.path.abspath(path)


def _signal(value: Any) -> int:
    """``trainer.stop_signal`` (a name such as SIGINT or TERM, or a number) as a number."""
    if value is None:
        return int(signal.SIGTERM)
    try:
        if isinstance(value, int) and not isinstance(value, bool):
            return int(signal.Signals(value))
        name = str(value).upper()
        return int(signal.Signals[name if name.startswith("SIG") else "SIG" + name])
    except (KeyError, ValueError):
        raise UsageError(
            f"trainer.stop_signal: unknown signal {value!r} (e.g. SIGTERM, SIGINT, SIGUSR1)"
        ) from None


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


def set_path(tree: dict[str, Any], path: str, value: Any) -> None:
    """``tree[a][b] = value`` for ``path == "a.b"`` (missing parents are created)."""
    *parents, leaf = path.split(".")
    node = tree
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value


def search_folders(config_dir: str | None) -> list[Path]:
    """Where a study's trainer is looked for: the working directory, then ``--config-dir``."""
    folders = [Path.cwd()]
    if config_dir is not None:
        folders.append(Path(config_dir).expanduser().resolve())
    return folders
