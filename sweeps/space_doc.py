"""The standard search-space document (`space.json`, format ``stepscale.search_space/v1``).

Stable bytes: sorted keys, fixed float formatting, so the same config always gives the
same document.
"""

from __future__ import annotations

import json
import math
from typing import Any

from sweeps.schema import StudyConfig

SCHEMA_TAG = "stepscale.search_space/v1"


def _num(value: Any) -> Any:
    if (
        isinstance(value, float)
        and math.isfinite(value)
        and value.is_integer()
        and abs(value) < 1e15
    ):
        return value  # keep floats as floats; formatting is fixed by dumps_stable
    return value


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None and v != {} and v != []}


def space_document(cfg: StudyConfig) -> dict[str, Any]:
    """The search space of a study as a plain document."""
    params: list[dict[str, Any]] = []
    for alias, p in cfg.scientific.items():
        params.append(
            _drop_none(
                {
                    "name": alias,
                    "path": p.path,
                    "role": "scientific",
                    "type": _type_of(p.values),
                    "values": list(p.values),
                    "unit": p.unit,
                    "description": p.description,
                }
            )
        )
    for alias, n in cfg.nuisance.items():
        entry = {
            "name": alias,
            "path": n.path,
            "role": "nuisance",
            "type": n.type,
            "scale": n.scale,
            "low": n.low,
            "high": n.high,
            "step": n.step,
            "choices": list(n.choices) if n.choices is not None else None,
            "unit": n.unit,
            "description": n.description,
        }
        if n.by is not None and n.ranges:
            entry["conditional"] = {
                "on": n.by,
                "ranges": {
                    k: _drop_none({"low": r.low, "high": r.high, "choices": r.choices})
                    for k, r in n.ranges.items()
                },
            }
        params.append(_drop_none(entry))
    for alias, f in cfg.fixed.items():
        params.append(
            _drop_none(
                {
                    "name": alias,
                    "path": f.path,
                    "role": "fixed",
                    "type": _type_of([f.value]),
                    "value": f.value,
                    "unit": f.unit,
                    "description": f.description,
                }
            )
        )
    b = cfg.budget
    return {
        "schema": SCHEMA_TAG,
        "name": cfg.name,
        "parameters": params,
        "budget": _drop_none(
            {
                "trials_per_point": b.trials_per_point,
                "max_steps": b.max_steps,
                "max_tokens": b.max_tokens,
                "max_examples": b.max_examples,
                "confirm_seeds": b.confirm_seeds,
            }
        ),
        "objective": _drop_none(
            {"kind": cfg.objective.kind, "target_loss": cfg.objective.target_loss}
        ),
        "sampler": _drop_none(
            {
                "name": cfg.sampler.name,
                "seed": cfg.sampler.seed if cfg.sampler.seed is not None else cfg.seed,
            }
        ),
    }


def _type_of(values: list[Any]) -> str:
    if all(isinstance(v, (bool, str)) for v in values):
        return "categorical"
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "int"
    return "float" if all(isinstance(v, (int, float)) for v in values) else "categorical"


def dumps_stable(doc: Any) -> str:
    """JSON with sorted keys, two-space indent and floats in a fixed repr."""
    return json.dumps(doc, sort_keys=True, indent=2, allow_nan=False) + "\n"
