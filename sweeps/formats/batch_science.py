"""``batch_science``: the ``study.json`` of the data release of Shallue et al. (2018),
"Measuring the Effects of Data Parallelism on Neural Network Training"
(google-research/google-research ``batch_science``).

``parameter_configs`` maps each metaparameter to ``{"type": "DOUBLE", "min_value",
"max_value", "scale": "LINEAR_SCALE" | "LOG_SCALE" | "REVERSE_LOG_SCALE"}``,
``{"type": "INTEGER", "min_value", "max_value", "scale": ""}`` (the release scales
doubles only) or ``{"type": "DISCRETE", "feasible_points": [...]}``; strings use
``"type": "CATEGORICAL"`` (Vizier's name; the release itself has only numeric points).
A study of the release is one batch size: ``batch_size`` holds a single-valued
``data.global_batch`` axis and ``train_steps`` the budget's ``max_steps``. On reading,
Vizier's ``UNIT_*_SCALE`` names are accepted too, and one feasible point is a fixed value.
"""

from __future__ import annotations

from typing import Any

from stepscale.rundir import BATCH_PATH
from stepscale.sweeps.formats.common import (
    choice_param,
    envelope,
    fixed_param,
    is_int,
    is_number,
    load_json,
    name_and_path,
    need,
    new_document,
    numeric_param,
    scientific_param,
    unique_alias,
)
from stepscale.sweeps.study.space_doc import dumps_stable

FMT = "batch_science"
_SCALE = {"linear": "LINEAR_SCALE", "log": "LOG_SCALE", "reverse_log": "REVERSE_LOG_SCALE"}
_FROM_SCALE = {
    "": "linear",
    "NONE": "linear",
    "SCALE_TYPE_UNSPECIFIED": "linear",
    "LINEAR_SCALE": "linear",
    "LOG_SCALE": "log",
    "REVERSE_LOG_SCALE": "reverse_log",
    "UNIT_LINEAR_SCALE": "linear",
    "UNIT_LOG_SCALE": "log",
    "UNIT_REVERSE_LOG_SCALE": "reverse_log",
}
_KNOWN = {"parameter_configs", "batch_size", "train_steps"}


def _points(values: list[Any]) -> dict[str, Any]:
    kind = "DISCRETE" if all(is_number(v) for v in values) else "CATEGORICAL"
    return {"type": kind, "feasible_points": list(values)}


def export(doc: dict[str, Any]) -> str:
    """JSON ``{"parameter_configs": …, "batch_size"?, "train_steps"?}``."""
    configs: dict[str, Any] = {}
    out: dict[str, Any] = {"parameter_configs": configs}
    for p in doc["parameters"]:
        if p["role"] == "scientific":
            values = p["values"]
            if p["path"] == BATCH_PATH and len(values) == 1 and is_int(values[0]):
                out["batch_size"] = values[0]
            else:
                configs[p["name"]] = _points(values)
        elif p["role"] == "fixed":
            configs[p["name"]] = _points([p["value"]])
        else:
            low, high, choices = envelope(p)
            if p["type"] == "categorical":
                configs[p["name"]] = _points(choices)
            elif p["type"] == "int":
                configs[p["name"]] = {
                    "type": "INTEGER",
                    "min_value": low,
                    "max_value": high,
                    "scale": "",
                }
            else:
                configs[p["name"]] = {
                    "type": "DOUBLE",
                    "min_value": low,
                    "max_value": high,
                    "scale": _SCALE[p["scale"]],
                }
    max_steps = doc.get("budget", {}).get("max_steps")
    if max_steps is not None:
        out["train_steps"] = max_steps
    return dumps_stable(out)


def _param(alias: str, path: str, name: str, spec: Any) -> dict[str, Any]:
    where = f"$.parameter_configs.{name}"
    need(isinstance(spec, dict), where, "expected an object", FMT)
    kind = spec.get("type")
    if kind in ("DISCRETE", "CATEGORICAL"):
        points = spec.get("feasible_points", spec.get("categories"))
        need(
            isinstance(points, list) and bool(points),
            f"{where}.feasible_points",
            "expected a non-empty list",
            FMT,
        )
        if len(points) == 1:
            return fixed_param(alias, path, points[0])
        return choice_param(alias, path, points)
    need(
        kind in ("DOUBLE", "INTEGER"),
        f"{where}.type",
        f"expected DOUBLE, INTEGER, DISCRETE or CATEGORICAL, got {kind!r}",
        FMT,
    )
    low, high = spec.get("min_value"), spec.get("max_value")
    need(is_number(low) and is_number(high), where, "expected min_value and max_value", FMT)
    scale = spec.get("scale", spec.get("scale_type", ""))
    need(scale in _FROM_SCALE, f"{where}.scale", f"unknown scale {scale!r}", FMT)
    if kind == "INTEGER":
        need(is_int(low) and is_int(high), where, "INTEGER bounds must be integers", FMT)
        return numeric_param(alias, path, "int", low, high, _FROM_SCALE[scale])
    return numeric_param(alias, path, "float", low, high, _FROM_SCALE[scale])


def parse(text: str) -> tuple[dict[str, Any], list[str]]:
    """Metaparameters become nuisance parameters (one feasible point: fixed),
    ``batch_size`` a scientific ``batch_size`` axis, ``train_steps`` the step budget."""
    data = load_json(text, FMT)
    need(isinstance(data, dict), "$", "expected a study.json object", FMT)
    configs = data.get("parameter_configs")
    need(isinstance(configs, dict), "$.parameter_configs", "expected an object", FMT)
    params, taken, notes = [], set(), []
    for name, spec in configs.items():
        params.append(_param(*name_and_path(name, taken), name, spec))
    if "batch_size" in data:
        bs = data["batch_size"]
        need(is_int(bs) and bs > 0, "$.batch_size", "expected a positive integer", FMT)
        if any(p["path"] == BATCH_PATH for p in params):
            notes.append("batch_size ignored: a metaparameter already sets data.global_batch")
        else:
            params.insert(0, scientific_param(unique_alias("batch_size", taken), BATCH_PATH, [bs]))
    budget = None
    if "train_steps" in data:
        steps = data["train_steps"]
        need(is_int(steps) and steps >= 0, "$.train_steps", "expected an integer ≥ 0", FMT)
        if steps > 0:
            budget = {"max_steps": steps}
        else:
            notes.append("train_steps 0 (a time budget) has no stepscale equivalent")
    ignored = sorted(set(data) - _KNOWN)
    if ignored:
        notes.append(f"ignored {', '.join(ignored)}")
    return new_document(params, budget=budget), notes
