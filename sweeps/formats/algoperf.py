"""``algoperf``: AlgoPerf's ``tuning_search_space.json`` (MLCommons algorithmic-efficiency).

Each hyperparameter is ``{"min", "max", "scaling": "linear" | "log"}`` (sampled as a
float by AlgoPerf's Halton search) or ``{"feasible_points": [...]}``. Keys of the built-in
trainer are written under AlgoPerf's names (``learning_rate``, ``one_minus_beta1``,
``beta2``, ``weight_decay``, ``warmup_factor`` …; ``warmup_steps`` for a warmup in steps,
which AlgoPerf's baselines do not have; other parameters under their own name).
β1 is always ``one_minus_beta1`` (1 − β1, as the baselines' submissions read it), and any
``reverse_log`` parameter ``x`` is ``one_minus_x`` on a log scale. Integer parameters and
stepped ranges are written as the feasible points of their grid (AlgoPerf's Halton code
samples ranges as floats), up to 1000 points. A fixed value is a single feasible point, and
a single feasible point reads back as a fixed value. The list form (a list of explicit
points) is read as independent choices per hyperparameter.
"""

from __future__ import annotations

import math
from typing import Any

from stepscale.sweeps.formats.common import (
    KEEP_SOURCE_NAMES,
    choice_param,
    clean,
    envelope,
    fixed_param,
    is_number,
    load_json,
    name_and_path,
    named_entries,
    need,
    new_document,
    numeric_param,
)
from stepscale.sweeps.study.space_doc import dumps_stable

FMT = "algoperf"
ONE_MINUS = "one_minus_"
# AlgoPerf's names (its baselines' search spaces) for keys of the built-in trainer.
NAMES = {
    "optimizer.lr": "learning_rate",
    "optimizer.b2": "beta2",
    "optimizer.weight_decay": "weight_decay",
    "optimizer.eps": "epsilon",
    "optimizer.clip": "grad_clip",
    "schedule.warmup_frac": "warmup_factor",
    "schedule.warmup_steps": "warmup_steps",  # AlgoPerf has none: the name says the unit
    "data.global_batch": "batch_size",
    "train.seed": "seed",
}
# Keys AlgoPerf always writes as one minus the value, whatever the form.
ONE_MINUS_NAMES = {"optimizer.b1": "beta1"}
MAX_POINTS = 1000


def _grid(p: dict[str, Any], low: float, high: float) -> list[Any] | None:
    """The feasible points of an int or stepped range (None past MAX_POINTS or for a
    continuous float range)."""
    step = p.get("step")
    if p["type"] == "int":
        step = int(step or 1)
        n = (int(high) - int(low)) // step + 1
        return list(range(int(low), int(high) + 1, step)) if n <= MAX_POINTS else None
    if step is None or p["scale"] != "linear":
        return None
    n = math.floor(clean((high - low) / step)) + 1
    return [clean(low + i * step) for i in range(n)] if n <= MAX_POINTS else None


def _one_minus(values: list[Any]) -> list[Any] | None:
    return [clean(1.0 - v) for v in values] if all(is_number(v) for v in values) else None


def _entry(p: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(AlgoPerf name, search space) of a parameter."""
    path, name = p["path"], NAMES.get(p["path"], p["name"])
    if p["role"] == "fixed":
        points: list[Any] | None = [p["value"]]
    elif p["role"] == "scientific":
        points = list(p["values"])
    else:
        low, high, choices = envelope(p)
        points = choices if p["type"] == "categorical" else _grid(p, low, high)
        one_minus = points is None and (
            p["scale"] == "reverse_log" or (path in ONE_MINUS_NAMES and p["scale"] == "linear")
        )
        if one_minus:  # log of 1 − x, or 1 − x linear
            base = ONE_MINUS_NAMES.get(path, name)
            scaling = "log" if p["scale"] == "reverse_log" else "linear"
            return ONE_MINUS + base, {
                "min": clean(1.0 - high),
                "max": clean(1.0 - low),
                "scaling": scaling,
            }
        if points is None:
            scaling = "log" if p["scale"] == "log" else "linear"
            return name, {"min": low, "max": high, "scaling": scaling}
    if path in ONE_MINUS_NAMES and _one_minus(points) is not None:
        return ONE_MINUS + ONE_MINUS_NAMES[path], {"feasible_points": _one_minus(points)}
    return name, {"feasible_points": points}


def export(doc: dict[str, Any]) -> str:
    """JSON: hyperparameter name → min/max/scaling or feasible_points."""
    out: dict[str, Any] = {}
    for p in doc["parameters"]:
        name, space = _entry(p)
        if name in out:  # two parameters under one AlgoPerf name: the second keeps its own
            name = p["name"] if p["name"] not in out else f"{p['name']}_{p['path']}"
        out[name] = space
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
        # For a user's own trainer `one_minus_x` stays what its code reads: 1 − x.
        reverse = (
            name.startswith(ONE_MINUS)
            and len(name) > len(ONE_MINUS)
            and not KEEP_SOURCE_NAMES.get()
        )
        base = name[len(ONE_MINUS) :] if reverse else name
        alias, path = name_and_path(base, taken)
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
