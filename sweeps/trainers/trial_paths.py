"""Trial paths any argument parser can take.

A trial's folder is ``RUN_DIR/trials/<point label>/<n>/`` and a point label holds ``=`` and
``,`` (``batch_size=32``): a script that splits ``--out_dir=…/trials/batch_size=32/0/out``
on every ``=`` fails. So the placeholder ``{trial_dir}`` of a command trainer gives the
trial's safe alias, ``RUN_DIR/aliases/<point alias>/<n>`` (`stepscale.rundir.trial_alias`),
through a relative symlink ``aliases/<point alias> → ../trials/<point label>`` that the job
makes before the script starts. The trial's id, its folder and everything that reads it
stay as they were; an old run dir gets its links when its trials next run.

``sweep run`` refuses (exit 2) a study whose command uses such a placeholder while the run
dir's own path holds a character a parser may split on (`check_trial_paths`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from stepscale.errors import UsageError
from stepscale.rundir import (
    ALIASES_DIR,
    TRIALS_DIR,
    point_alias,
    trial_alias,
    unsafe_path_chars,
)
from stepscale.sweeps.trainers.arg_styles import placeholders
from stepscale.sweeps.trainers.spec import COMMAND, TrainerSpec

# The placeholders that give a path under the run dir.
PATH_PLACEHOLDERS = ("trial_dir",)


def placeholder_trial_dir(trial_dir: str | Path) -> str:
    """The path ``{trial_dir}`` gives for the trial folder ``trial_dir``: its alias under
    ``RUN_DIR/aliases/``, whose link is made (or mended) here. A folder that is not laid out
    as ``…/trials/<label>/<n>`` is given as it is."""
    folder = Path(trial_dir)
    label, number = folder.parent.name, folder.name
    if folder.parent.parent.name != TRIALS_DIR or not number.isdigit():
        return str(folder)
    run_dir = folder.parent.parent.parent
    alias = trial_alias(run_dir, label, int(number))
    link = alias.parent
    target = os.path.join("..", TRIALS_DIR, label)
    if os.path.islink(link) and os.readlink(link) == target:
        return str(alias)
    link.parent.mkdir(exist_ok=True)
    # Another job of the point may make the same link at once: each makes its own and
    # renames it into place (the same link either way).
    temporary = link.parent / f".{link.name}.{os.getpid()}.tmp"
    temporary.unlink(missing_ok=True)
    os.symlink(target, temporary)
    try:
        os.replace(temporary, link)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise RuntimeError(
            f"cannot make {link} a link to {target} (for the placeholder {{trial_dir}}): {exc}"
        ) from None
    return str(alias)


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


def path_placeholders_used(trainer: TrainerSpec, settings: Iterable[Any] = ()) -> list[str]:
    """The path placeholders (``{trial_dir}``) that a command trainer's command,
    ``resume_args``, file ``metrics.source``, config strings or ``settings`` name."""
    if trainer.kind != COMMAND:
        return []
    source = getattr(trainer.metrics, "source", None)
    texts = [
        *trainer.command,
        *trainer.resume_args,
        *trainer.restart_args,
        *_strings(trainer.config),
    ]
    texts += [*_strings(list(settings)), *([source] if isinstance(source, str) else [])]
    named = set().union(*(placeholders(t) for t in texts)) if texts else set()
    return [p for p in PATH_PLACEHOLDERS if p in named]


def check_trial_paths(
    trainer: TrainerSpec, run_dir: Path, labels: Iterable[str], settings: Iterable[Any] = ()
) -> None:
    """Refuse (`UsageError`) a command trainer whose path placeholders would give a path
    with a character a parser may split on: the run dir's own path (resolved, as the jobs
    get it) must hold only `stepscale.rundir.SAFE_PATH_CHARS`, and no two point labels may
    share an alias."""
    used = path_placeholders_used(trainer, settings)
    if not used:
        return
    names = ", ".join("{" + p + "}" for p in used)
    resolved = str(Path(run_dir).resolve())
    bad = unsafe_path_chars(resolved)
    if bad:
        shown = " ".join(repr(c) for c in bad)
        raise UsageError(
            f"run_dir: the run dir's path {resolved!r} holds {shown}, and the trainer's "
            f"command gives it to the script through {names} (as "
            f"{resolved}/{ALIASES_DIR}/<point>/<n>): a script that splits its arguments on "
            "'=' or ',' (or a shell) would take it apart. Choose a run dir whose path has only "
            "letters, digits and _ . / + - (run_dir=PATH; an existing run dir can be moved "
            "there and resumed with run_dir=NEW_PATH)."
        )
    seen: dict[str, str] = {}
    for label in labels:
        other = seen.setdefault(point_alias(label), label)
        if other != label:
            raise UsageError(
                f"scientific: the points {other!r} and {label!r} would share the folder alias "
                f"{point_alias(label)!r} that {names} gives (a value holds '=' or ','); "
                "give the values without those characters"
            )
