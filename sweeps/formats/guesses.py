"""Checks of the trainer keys an importer inferred from parameter names: a guess stands
only where the parameter's values mean what the key means. A fraction of training is not
a step count, a project's own model or optimizer names are not the built-in trainer's;
such a parameter keeps its own name as its key (with a user's trainer every key is the
user's) and the import's warning says so. Two names guessed onto one key: the first keeps
it. Parameters whose name cannot be a config key (a W&B key with a list index) are left
out, each with a note, and the rest of the file is imported."""

from __future__ import annotations

import functools
import math
from typing import Any

from stepscale.sweeps.formats.common import PATH_OK, own_path
from stepscale.sweeps.trainers.builtin_keys import TRAINER_FIELDS, TRAINER_TYPES

# Names that say their unit: only these may set a step count whatever their values.
_STEP_NAMES = ("warmup_steps",)
_STEP_KEYS = ("schedule.warmup_steps",)


# The keys of `trainer_choices` (a test holds them equal): the built-in trainer's names are
# asked for only when a guess lands on one of these, since asking imports its registries
# (and JAX); `sweep export` reads its own text back through here.
CHOICE_KEYS = (
    "model.name", "model.size", "data.name", "data.tokenizer", "optimizer.name", "schedule.name"
)  # fmt: skip


@functools.cache
def _choices() -> dict[str, tuple[str, ...]]:
    from stepscale.sweeps.trainers.builtin import trainer_choices

    return trainer_choices()


def _values(p: dict[str, Any]) -> list[Any] | None:
    """Every value a parameter may take, or None for a range."""
    if "values" in p:
        return list(p["values"])
    if "value" in p:
        return [p["value"]]
    if "choices" in p or p["type"] == "categorical":
        values = list(p.get("choices", []))
        for r in p.get("conditional", {}).get("ranges", {}).values():
            values += [c for c in r.get("choices", []) if c not in values]
        return values
    return None


def _bounds(p: dict[str, Any]) -> list[float]:
    out = [p[k] for k in ("low", "high") if k in p]
    for r in p.get("conditional", {}).get("ranges", {}).values():
        out += [r[k] for k in ("low", "high") if k in r]
    return out


def _whole(x: Any) -> bool:
    return (
        isinstance(x, (int, float))
        and not isinstance(x, bool)
        and math.isfinite(x)
        and (float(x).is_integer())
    )


def _mismatch(source: str, p: dict[str, Any]) -> str | None:
    """Why ``p``'s values do not fit the key guessed from its name ``source``; None if
    they do."""
    path = p["path"]
    values = _values(p)
    allowed = _choices().get(path) if path in CHOICE_KEYS else None
    if allowed is not None:
        if values is None:
            return f"a numeric range, while {path} takes a name"
        others = [v for v in values if v not in allowed]
        if others:
            return (
                f"{', '.join(map(str, others))} {'is' if len(others) == 1 else 'are'} not "
                f"{path} of the built-in trainer ({', '.join(allowed)})"
            )
        return None
    kind = TRAINER_TYPES.get(path)
    if kind in ("int", "float") and values is not None:
        optional = "None" in TRAINER_FIELDS.get(path, "")
        bad = [
            v
            for v in values
            if not (isinstance(v, (int, float)) and not isinstance(v, bool))
            and not (v is None and optional)
        ]
        if bad:
            return f"{', '.join(map(repr, bad))} {'is' if len(bad) == 1 else 'are'} not a number"
    if path in _STEP_KEYS and source not in _STEP_NAMES:
        numbers = values if values is not None else _bounds(p)
        fractions = [v for v in numbers if not _whole(v)]
        if fractions:
            shown = ", ".join(map(str, fractions))
            return f"{shown} {'is a fraction' if len(fractions) == 1 else 'are fractions'}, not a step count"
    return None


def review_guesses(doc: dict[str, Any], guesses: dict[str, str]) -> list[str]:
    """Undo the guessed keys (``guesses``: alias → source name) whose values do not fit,
    and the second of two guesses onto one key; drop parameters whose name is no key.
    Returns one note per change."""
    notes: list[str] = []
    kept: list[dict[str, Any]] = []
    for p in doc["parameters"]:
        if not PATH_OK.match(p["path"]):
            notes.append(
                f"{p['path']}: left out (not a config key stepscale can set, e.g. a list index)"
            )
            continue
        kept.append(p)
    doc["parameters"] = kept
    taken = {p["path"]: p["name"] for p in kept if p["name"] not in guesses}
    for p in kept:
        source = guesses.get(p["name"])
        if source is None:
            continue
        reason = _mismatch(source, p)
        if reason is None and p["path"] in taken:
            reason = f"{p['path']} is already set by {taken[p['path']]}"
        if reason is not None:
            own = own_path(source)
            notes.append(f"{source}: kept under its own key {own}, not {p['path']} ({reason})")
            p["path"] = own
        taken.setdefault(p["path"], p["name"])
    return notes
