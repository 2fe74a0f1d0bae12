"""The standard search-space document (`space.json`, format ``stepscale.search_space/v1``).

One object per parameter (scientific axes, nuisance parameters, fixed values), the
derived values (``derived``: name, path, expression and its declared range), plus the
budget, objective and sampler; validated by ``sweeps/study/search_space.schema.json`` (see
``sweeps.formats``). Stable bytes: sorted keys, bounds typed like their parameter (ints
for int parameters, floats otherwise), floats in Python's shortest round-trip form, so
the same config always gives the same document.

The batch axis (the parameter at ``stepscale.rundir.BATCH_PATH``) always has a ``unit``:
the study's own, else what its trainer's batch counts (`sweeps.trainers.kinds`: the
built-in trainer asks its data source; a user's trainer counts examples), so that the
analysis reads the unit it labels batch sizes and examples with from here.
"""

from __future__ import annotations

import json
from typing import Any

from stepscale.rundir import BATCH_PATH, BATCH_SIZE, EXAMPLES
from stepscale.sweeps.study.adaptive_axis import candidates
from stepscale.sweeps.study.schema import NuisanceParam, StudyConfig
from stepscale.sweeps.trainers.kinds import trainer_batch_unit

SCHEMA_TAG = "stepscale.search_space/v1"


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None and v != {} and v != []}


def _bound(kind: str, x: float | None) -> float | int | None:
    if x is None:
        return None
    return int(x) if kind == "int" else float(x)


def _nuisance(alias: str, n: NuisanceParam) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": alias,
        "path": n.path,
        "role": "nuisance",
        "type": n.type,
        "unit": n.unit,
        "quantity": n.quantity,
        "description": n.description,
    }
    if n.type == "categorical":
        entry["choices"] = list(n.choices) if n.choices is not None else None
    else:
        entry |= {
            "scale": n.scale,
            "low": _bound(n.type, n.low),
            "high": _bound(n.type, n.high),
            # an int step of 1 is the default: written or not, the same space
            "step": None if n.type == "int" and n.step == 1 else _bound(n.type, n.step),
        }
    if n.by is not None and n.ranges:
        ranges = {}
        for value, r in n.ranges.items():
            if n.type == "categorical":
                ranges[str(value)] = _drop_none({"choices": r.choices})
            else:
                ranges[str(value)] = _drop_none(
                    {"low": _bound(n.type, r.low), "high": _bound(n.type, r.high)}
                )
        entry["conditional"] = {"on": n.by, "ranges": ranges}
    return _drop_none(entry)


def written_unit(
    path: str, unit: str | None, quantity: str | None, trainer_unit: str
) -> str | None:
    """The unit space.json gives a parameter at ``path`` whose config states ``unit``:
    ``unit`` when stated; for the batch axis (``path`` is BATCH_PATH) the unit of the
    trainer's batch (``trainer_unit``), for another batch size (``quantity: batch_size``)
    ``examples``; else none."""
    if unit is not None:
        return unit
    if path == BATCH_PATH:
        return trainer_unit
    return EXAMPLES if quantity == BATCH_SIZE else None


def space_document(cfg: StudyConfig) -> dict[str, Any]:
    """The search space of a (validated) study as a ``stepscale.search_space/v1`` document."""
    # What the trainer's batch counts, asked only when the batch axis does not state it:
    # the built-in trainer answers through its data sources, which import JAX.
    stated = [*cfg.scientific.values(), *cfg.fixed.values()]
    unstated = any(p.path == BATCH_PATH and p.unit is None for p in stated)
    trainer_unit = trainer_batch_unit(cfg) if unstated else EXAMPLES  # EXAMPLES: never used
    params: list[dict[str, Any]] = []
    for alias, p in cfg.scientific.items():
        # An adaptive axis is written as every batch size it may run (its candidates).
        values = candidates(p.adaptive) if p.adaptive.enabled else list(p.values)
        params.append(
            _drop_none(
                {
                    "name": alias,
                    "path": p.path,
                    "role": "scientific",
                    "type": _type_of(values),
                    "values": values,
                    "unit": written_unit(p.path, p.unit, p.quantity, trainer_unit),
                    "quantity": p.quantity,
                    "description": p.description,
                }
            )
        )
    for alias, n in cfg.nuisance.items():
        params.append(_nuisance(alias, n))
    for alias, f in cfg.fixed.items():
        entry = _drop_none(
            {
                "name": alias,
                "path": f.path,
                "role": "fixed",
                "type": _type_of([f.value]),
                "unit": written_unit(f.path, f.unit, f.quantity, trainer_unit),
                "quantity": f.quantity,
                "description": f.description,
            }
        )
        entry["value"] = f.value  # may be null
        params.append(entry)
    derived = [
        _drop_none(
            {
                "name": alias,
                "path": d.path,
                "expr": d.expr,
                "low": d.low,
                "high": d.high,
                "type": None if d.type == "float" else d.type,  # float is the default
                "unit": d.unit,
                "quantity": d.quantity,
                "description": d.description,
            }
        )
        for alias, d in cfg.derived.items()
    ]
    b = cfg.budget
    doc = {
        "schema": SCHEMA_TAG,
        "name": cfg.name,
        "description": cfg.description,
        "parameters": params,
        "derived": derived,  # left out when empty
        "budget": _drop_none(
            {
                "trials_per_point": b.trials_per_point,
                "max_steps": b.max_steps,
                "max_tokens": b.max_tokens,
                "max_examples": b.max_examples,
                "confirm_seeds": b.confirm_seeds or None,  # 0 (off) is left out
            }
        ),
        "objective": _drop_none(
            {
                "kind": cfg.objective.kind,
                "target_loss": cfg.objective.target_loss,
                "stop_at_target": cfg.objective.stop_at_target or None,  # false is left out
            }
        ),
        "sampler": _drop_none(
            {
                "name": cfg.sampler.name,
                "seed": cfg.sampler.seed if cfg.sampler.seed is not None else cfg.seed,
            }
        ),
    }
    doc = _drop_none(doc)
    doc["parameters"] = params
    return doc


def _type_of(values: list[Any]) -> str:
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "int"
    if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return "float"
    return "categorical"


def dumps_stable(doc: Any) -> str:
    """JSON with sorted keys, two-space indent and floats in Python's shortest round-trip
    form. NaN and infinities, which only categorical choices may hold (Optuna allows them),
    are written ``NaN`` / ``Infinity`` as Python's and Optuna's own JSON writers do."""
    return json.dumps(doc, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
