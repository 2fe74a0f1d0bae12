"""``algoperf``: AlgoPerf's ``tuning_search_space.json`` (MLCommons algorithmic-efficiency).

Each hyperparameter is ``{"min", "max", "scaling": "linear" | "log"}`` (sampled as a
float by AlgoPerf's Halton search) or ``{"feasible_points": [...]}``. A ``reverse_log``
parameter ``x`` is written the AlgoPerf way, as ``one_minus_x`` on a log scale (like the
baselines' ``one_minus_beta1``); a fixed value is a single feasible point, and a single
feasible point reads back as a fixed value. The list form (a list of explicit points) is
read as independent choices per hyperparameter.
"""

from __future__ import annotations

import math
from typing import Any

from stepscale.sweeps.formats.common import (
    alias_for,
    choice_param,
    clean,
    envelope,
    fixed_param,
    is_number,
    load_json,
    named_entries,
    need,
    new_document,
    numeric_param,
    path_for_name,
    unique_alias,
)
from stepscale.sweeps.space_doc import dumps_stable

FMT = "algoperf"
ONE_MINUS = "one_minus_"


def export(doc: dict[str, Any]) -> str:
    """JSON: hyperparameter name → min/max/scaling or feasible_points."""
    out: dict[str, Any] = {}
    for p in doc["parameters"]:
        name = p["name"]
        if p["role"] == "fixed":
            out[name] = {"feasible_points": [p["value"]]}
        elif p["role"] == "scientific":
            out[name] = {"feasible_points": list(p["values"])}
        else:
            low, high, choices = envelope(p)
            if p["type"] == "categorical":
                out[name] = {"feasible_points": choices}
            elif p["scale"] == "reverse_log":
                out[ONE_MINUS + name] = {
                    "min": clean(1.0 - high),
                    "max": clean(1.0 - low),
                    "scaling": "log",
                }
            else:
                out[name] = {
                    "min": low,
                    "max": high,
                    "scaling": "log" if p["scale"] == "log" else "linear",
                }
    return dumps_stable(out)


def parse(text: str) -> tuple[dict[str, Any], list[str]]:
    """Ranges become float nuisance parameters, several feasible points a categorical
    nuisance parameter, one feasible point a fixed value."""
    data = load_json(text, FMT)
    notes: list[str] = []
    if isinstance(data, list):
        need(
            bool(data) and all(isinstance(t, dict) for t in data),
            "$",
            "the list form is a list of objects (one per trial)",
            FMT,
        )
        merged: dict[str, dict[str, Any]] = {}
        for trial in data:
            for key, value in trial.items():
                points = merged.setdefault(key, {"feasible_points": []})["feasible_points"]
                if value not in points:
                    points.append(value)
        notes.append(
            "AlgoPerf's list form gives joint points; each hyperparameter's values are read "
            "as independent choices"
        )
        data = merged
    entries = named_entries(data, "hyperparameter names to search spaces", FMT)
    params: list[dict[str, Any]] = []
    taken: set[str] = set()
    for name, spec in entries:
        where = f"$.{name}"
        need(isinstance(spec, dict), where, "expected an object", FMT)
        reverse = name.startswith(ONE_MINUS) and len(name) > len(ONE_MINUS)
        base = name[len(ONE_MINUS) :] if reverse else name
        alias, path = unique_alias(alias_for(base), taken), path_for_name(base)
        if "feasible_points" in spec:
            points = spec["feasible_points"]
            need(
                isinstance(points, list) and bool(points),
                f"{where}.feasible_points",
                "expected a non-empty list",
                FMT,
            )
            if reverse:
                need(
                    all(is_number(v) for v in points),
                    f"{where}.feasible_points",
                    "one_minus_ values must be numbers",
                    FMT,
                )
                points = [clean(1.0 - v) for v in points]
            if len(points) == 1:
                params.append(fixed_param(alias, path, points[0]))
            else:
                params.append(choice_param(alias, path, points))
            extra = set(spec) - {"feasible_points"}
        else:
            for key in ("min", "max"):
                need(is_number(spec.get(key)), f"{where}.{key}", "expected a number", FMT)
            scaling = spec.get("scaling")
            need(
                scaling in ("linear", "log"),
                f"{where}.scaling",
                f"expected 'linear' or 'log', got {scaling!r}",
                FMT,
            )
            low, high = float(spec["min"]), float(spec["max"])
            need(math.isfinite(low) and math.isfinite(high), where, "bounds must be finite", FMT)
            if reverse:
                low, high = clean(1.0 - high), clean(1.0 - low)
                scale = "reverse_log" if scaling == "log" else "linear"
            else:
                scale = scaling
            params.append(numeric_param(alias, path, "float", low, high, scale))
            extra = set(spec) - {"min", "max", "scaling"}
        if extra:
            notes.append(f"{where}: ignored {', '.join(sorted(extra))}")
    return new_document(params), notes
