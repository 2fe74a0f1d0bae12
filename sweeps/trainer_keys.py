"""The trainer config's keys: one walk over `TrainerConfig`'s dataclass fields, giving
every leaf's dotted key (``optimizer.lr``) and its type; what a study may set and what an
importer may round to an int both come from here."""

from __future__ import annotations

import dataclasses
from typing import Any

from stepscale.models.config import TrainerConfig


def trainer_fields() -> dict[str, str]:
    """Dotted key → the type annotation (text, e.g. ``int``, ``float | None``) of every
    leaf field of the trainer config, in declaration order."""
    out: dict[str, str] = {}

    def walk(obj: Any, prefix: str) -> None:
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                walk(value, f"{prefix}{f.name}.")
            else:
                out[f"{prefix}{f.name}"] = str(f.type)

    walk(TrainerConfig(), "")
    return out


def _single_type(annotation: str) -> str | None:
    """``int`` of ``int`` or ``int | None``; None when the annotation allows several types."""
    kinds = {t.strip() for t in annotation.split("|")} - {"None"}
    return kinds.pop() if len(kinds) == 1 else None


TRAINER_FIELDS = trainer_fields()
# Every key a study may set (the trainer's name and run dir are the orchestrator's).
TRAINER_PATHS = frozenset(TRAINER_FIELDS) - {"name", "run_dir"}
# Dotted key → its Python type name (``int``, ``float``, ``str``, ``bool``), for keys of one type.
TRAINER_TYPES = {
    path: kind
    for path, annotation in TRAINER_FIELDS.items()
    if (kind := _single_type(annotation)) is not None
}
