"""``wandb``: a Weights & Biases sweep configuration (YAML).

``method`` (bayes | random | grid), ``metric`` (``name``: the objective, ``goal:
minimize``), ``name``, ``description`` and ``parameters``: a fixed value is
``{value: v}``, a categorical ``{values: [...]}``, ranges use the distributions
``uniform``, ``int_uniform``, ``log_uniform_values``, ``q_uniform`` (a step, when the
low end is a multiple of it: W&B rounds to multiples of ``q``; ``max`` is the last point of
the grid, so rounding never leaves the range) and ``q_log_uniform_values`` with ``q: 1``
(log-scaled ints). W&B has no reverse-log distribution, no roles, paths, units or budgets.
On import, ``q`` defaults to 1 as in W&B, nested ``parameters`` become dotted names (said
in the warning), and ``inv_log_uniform(_values)`` is a log scale of its value range.
"""

from __future__ import annotations

import math
from typing import Any

from stepscale.sweeps.formats.common import (
    choice_param,
    clean,
    dump_yaml,
    envelope,
    fixed_param,
    is_int,
    is_number,
    load_yaml,
    name_and_path,
    need,
    new_document,
    numeric_param,
)
from stepscale.sweeps.study.objective import OBJECTIVES

FMT = "wandb"
_METHOD = {"tpe": "bayes", "gp": "bayes", "random": "random", "qmc": "random", "grid": "grid"}
_SAMPLER = {"bayes": "tpe", "random": "random", "grid": "grid"}
_UNBOUNDED = {
    "normal",
    "q_normal",
    "log_normal",
    "q_log_normal",
    "beta",
    "q_beta",
}
_TOP = {"method", "metric", "parameters", "name", "description"}


def _aligned(low: float, step: float) -> bool:
    ratio = low / step
    return math.isclose(ratio, round(ratio), abs_tol=1e-9)


def _spec(p: dict[str, Any]) -> dict[str, Any]:
    if p["role"] == "fixed":
        return {"value": p["value"]}
    if p["role"] == "scientific":
        return {"values": list(p["values"])}
    low, high, choices = envelope(p)
    if p["type"] == "categorical":
        return {"values": choices}
    step, scale = p.get("step"), p["scale"]
    if p["type"] == "int":
        if scale == "log":
            return {"distribution": "q_log_uniform_values", "min": low, "max": high, "q": 1}
        if step is not None and step != 1 and _aligned(low, step):
            last = low + (high - low) // step * step
            return {"distribution": "q_uniform", "min": low, "max": last, "q": step}
        return {"distribution": "int_uniform", "min": low, "max": high}
    if scale == "log":
        return {"distribution": "log_uniform_values", "min": low, "max": high}
    if step is not None and _aligned(low, step):
        last = clean(low + math.floor(clean((high - low) / step)) * step)
        return {"distribution": "q_uniform", "min": low, "max": last, "q": step}
    return {"distribution": "uniform", "min": low, "max": high}


def export(doc: dict[str, Any]) -> str:
    """A W&B sweep configuration in YAML."""
    out: dict[str, Any] = {
        "method": _METHOD[doc["sampler"]["name"]] if "sampler" in doc else "random",
        "parameters": {p["name"]: _spec(p) for p in doc["parameters"]},
    }
    if "objective" in doc:
        out["metric"] = {"name": doc["objective"]["kind"], "goal": "minimize"}
    for key in ("name", "description"):
        if key in doc:
            out[key] = doc[key]
    return dump_yaml(out)


def _flatten(params: dict[str, Any], prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = []
    for key, spec in params.items():
        name = f"{prefix}{key}"
        need(isinstance(spec, dict), f"parameters.{name}", "expected a mapping", FMT)
        if isinstance(spec.get("parameters"), dict):
            out += _flatten(spec["parameters"], f"{name}.")
        else:
            out.append((name, spec))
    return out


def _nested(raw: dict[str, Any]) -> list[str]:
    return [
        k for k, v in raw.items() if isinstance(v, dict) and isinstance(v.get("parameters"), dict)
    ]


def _param(
    alias: str, path: str, name: str, spec: dict[str, Any], notes: list[str]
) -> dict[str, Any] | None:
    where = f"parameters.{name}"
    if "value" in spec:
        return fixed_param(alias, path, spec["value"])
    if "values" in spec:
        values = spec["values"]
        need(isinstance(values, list) and bool(values), f"{where}.values", "expected a list", FMT)
        if "probabilities" in spec:
            notes.append(f"{where}: probabilities ignored (choices are sampled by the sampler)")
        return choice_param(alias, path, values)
    dist = spec.get("distribution")
    if dist in _UNBOUNDED:
        notes.append(f"{where}: W&B distribution {dist} has no bounded equivalent; left out")
        return None
    lo, hi = spec.get("min"), spec.get("max")
    need(is_number(lo) and is_number(hi), where, "expected min and max numbers", FMT)
    dist = dist or ("int_uniform" if is_int(lo) and is_int(hi) else "uniform")
    q = spec.get("q", 1)  # W&B's default
    if dist.startswith("q_"):
        need(is_number(q) and q > 0, f"{where}.q", "expected a positive number", FMT)
    if dist in ("log_uniform", "q_log_uniform"):  # bounds are natural logs
        lo, hi = clean(math.exp(lo)), clean(math.exp(hi))
        dist += "_values"
    if dist == "inv_log_uniform":  # 1/x log-uniform, bounds natural logs: x in [e^-max, e^-min]
        lo, hi = clean(math.exp(-hi)), clean(math.exp(-lo))
        dist = "log_uniform_values"
    if dist == "inv_log_uniform_values":  # 1/x log-uniform in [1/max, 1/min]: x log-uniform
        dist = "log_uniform_values"
    if dist == "uniform":
        return numeric_param(alias, path, "float", lo, hi)
    if dist == "int_uniform":
        need(is_int(lo) and is_int(hi), where, "int_uniform needs integer min and max", FMT)
        return numeric_param(alias, path, "int", lo, hi)
    if dist == "q_uniform":
        kind = "int" if is_int(lo) and is_int(hi) and is_int(q) else "float"
        return numeric_param(
            alias, path, kind, lo, hi, step=None if q == 1 and kind == "int" else q
        )
    if dist == "log_uniform_values":
        return numeric_param(alias, path, "float", lo, hi, "log")
    if dist == "q_log_uniform_values":
        if q == 1 and is_int(lo) and is_int(hi):
            return numeric_param(alias, path, "int", lo, hi, "log")
        notes.append(f"{where}: the step q={q} is dropped (no step on a log scale)")
        return numeric_param(alias, path, "float", lo, hi, "log")
    need(False, f"{where}.distribution", f"unknown W&B distribution {dist!r}", FMT)
    return None  # pragma: no cover


def parse(text: str) -> tuple[dict[str, Any], list[str]]:
    """Parameters become nuisance parameters (``value`` ones fixed values); ``method``
    the sampler, a ``metric`` named like a stepscale objective the objective."""
    data = load_yaml(text, FMT)
    need(isinstance(data, dict), "$", "expected a mapping (a sweep configuration)", FMT)
    raw = data.get("parameters")
    need(isinstance(raw, dict), "parameters", "expected a mapping", FMT)
    notes: list[str] = []
    params, taken = [], set()
    flat = _flatten(raw)
    nested = _nested(raw)
    if nested:
        dotted = [n for n, _ in flat if n.split(".")[0] in nested]
        notes.append(
            f"nested parameters of {', '.join(nested)} read as dotted names "
            f"({', '.join(dotted)}); W&B passes them to the program nested"
        )
    for name, spec in flat:
        alias, path = name_and_path(name, taken)
        p = _param(alias, path, name, spec, notes)
        if p is not None:
            params.append(p)
    sampler = None
    if "method" in data:
        method = data["method"]
        need(method in _SAMPLER, "method", f"expected bayes, random or grid, got {method!r}", FMT)
        sampler = {"name": _SAMPLER[method]}
    objective = None
    metric = data.get("metric")
    if metric is not None:
        need(isinstance(metric, dict), "metric", "expected a mapping", FMT)
        if metric.get("goal", "minimize") != "minimize":
            notes.append(f"metric.goal {metric.get('goal')!r}: stepscale objectives are minimised")
        if metric.get("name") in OBJECTIVES:
            objective = {"kind": metric["name"]}
        else:
            notes.append(f"metric {metric.get('name')!r} is not a stepscale objective; ignored")
    ignored = sorted(set(data) - _TOP)
    if ignored:
        notes.append(f"ignored {', '.join(ignored)}")
    return (
        new_document(
            params,
            name=data.get("name") if isinstance(data.get("name"), str) else None,
            description=data.get("description")
            if isinstance(data.get("description"), str)
            else None,
            sampler=sampler,
            objective=objective,
        ),
        notes,
    )
