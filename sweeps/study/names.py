"""A study's name: one folder name under ``runs/`` and part of its Optuna study names, so
a plain name (`study_name`); a path is chosen with ``run_dir=``."""

from __future__ import annotations

import re
from typing import Any

from stepscale.errors import UsageError

NAME_PATTERN = re.compile(r"[A-Za-z0-9_.-]+")


def study_name(name: Any, choices: dict[str, Any], folder: str) -> str:
    """The study's ``name``: the given one, which must be a plain name (letters, digits,
    ``_``, ``.``, ``-``; not ``.`` or ``..``), or else one derived from the conf preset
    (``sub/x`` → ``sub_x``). ``folder`` says where the name puts the run dir (for the
    message). A path is refused (`UsageError`): ``run_dir=`` is the way to choose one."""
    if name is None:
        return re.sub(r"[^A-Za-z0-9_.-]", "_", str(choices["conf"])).strip(".") or "study"
    text = str(name)
    if NAME_PATTERN.fullmatch(text) and text not in (".", ".."):
        return text
    raise UsageError(
        f"name: {text!r} is not a plain name (letters, digits, '_', '.' and '-'; not '.' or "
        f"'..'): the name makes the run dir {folder} and the names of its Optuna studies. "
        "To choose where the run dir goes, give run_dir=PATH (the only way to choose a path)."
    )
