"""The built-in trainer config's keys (`stepscale.sweeps.trainers.builtin.trainer_fields`): every
leaf's dotted key (``optimizer.lr``) and its type; what a study may set and what an
importer may round to an int both come from here."""

from __future__ import annotations

from stepscale.sweeps.trainers.builtin import trainer_fields


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
