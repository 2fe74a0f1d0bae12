"""``vizier``: OSS Vizier's ``StudySpec`` as JSON (the proto's JSON form, which Vertex AI
Vizier and hyperparameter-tuning jobs read too).

``parameters`` is a list of ParameterSpecs: ``parameterId`` and one of ``doubleValueSpec``
(``minValue``, ``maxValue``), ``integerValueSpec`` (the same, as ints), ``discreteValueSpec``
(``values``: numbers) or ``categoricalValueSpec`` (``values``: strings), with ``scaleType``
``UNIT_LINEAR_SCALE`` | ``UNIT_LOG_SCALE`` | ``UNIT_REVERSE_LOG_SCALE``, and
``conditionalParameterSpecs``: child parameters active for some values of their parent
(``parentCategoricalValues`` / ``parentDiscreteValues`` / ``parentIntValues``). Plus
``metrics`` (``metricId``, ``goal``) and ``algorithm``.

Export: a parameter whose range depends on a categorical scientific axis is written as a
child of that axis, one ParameterSpec per value of the axis; stepped ranges are the
DISCRETE points of their grid (up to 1000); a fixed value is a single feasible value.
Import: a parent whose children give ranges per value is read as that: the parent becomes a
scientific axis (a comparison, tuned separately at each value) and each child a nuisance
parameter with ranges by value (said in the warning). Both camelCase and snake_case field
names, numeric enums and int64 values as strings (the proto's JSON forms) are read, as is a
``studySpec`` inside a tuning job and the older AI Platform ``StudyConfig``
(``parameter``, ``childParameterSpecs``).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from stepscale.sweeps.formats.common import (
    choice_param,
    clean,
    envelope,
    fixed_param,
    is_int,
    is_number,
    load_json,
    name_and_path,
    need,
    new_document,
    numeric_param,
    type_of,
)
from stepscale.sweeps.study.objective import OBJECTIVES
from stepscale.sweeps.study.space_doc import dumps_stable

FMT = "vizier"
MAX_POINTS = 1000
_SCALE = {
    "linear": "UNIT_LINEAR_SCALE",
    "log": "UNIT_LOG_SCALE",
    "reverse_log": "UNIT_REVERSE_LOG_SCALE",
}
_FROM_SCALE = {
    None: "linear",
    0: "linear",
    1: "linear",
    2: "log",
    3: "reverse_log",
    "SCALE_TYPE_UNSPECIFIED": "linear",
    "UNIT_LINEAR_SCALE": "linear",
    "UNIT_LOG_SCALE": "log",
    "UNIT_REVERSE_LOG_SCALE": "reverse_log",
}
_ALGORITHM = {
    "tpe": "ALGORITHM_UNSPECIFIED",  # the service's default: a Bayesian optimiser
    "gp": "GAUSSIAN_PROCESS_BANDIT",
    "random": "RANDOM_SEARCH",
    "grid": "GRID_SEARCH",
    "qmc": "QUASI_RANDOM_SEARCH",
}
_FROM_ALGORITHM = {v: k for k, v in _ALGORITHM.items()} | {"DEFAULT": "tpe"}
_PARENT_KEYS = ("parentCategoricalValues", "parentDiscreteValues", "parentIntValues")
_SPEC_KEYS = ("doubleValueSpec", "integerValueSpec", "discreteValueSpec", "categoricalValueSpec")
_SNAKE = re.compile(r"_([a-z0-9])")


# --- export --------------------------------------------------------------------------------


def _points_spec(values: list[Any]) -> dict[str, Any]:
    """DISCRETE for numbers, else CATEGORICAL (whose values Vizier holds as strings)."""
    if all(is_number(v) for v in values):
        return {"discreteValueSpec": {"values": list(values)}}
    return {
        "categoricalValueSpec": {"values": [v if isinstance(v, str) else _text(v) for v in values]}
    }


def _text(v: Any) -> str:
    return json.dumps(v)


def _range_spec(p: dict[str, Any], low: Any, high: Any, choices: Any) -> dict[str, Any]:
    """The value spec (and scale) of a nuisance parameter with the given range."""
    if p["type"] == "categorical":
        return _points_spec(choices)
    step = p.get("step")
    if step is not None and p["scale"] == "linear":
        n = math.floor(clean((high - low) / step)) + 1
        if n <= MAX_POINTS:
            kind = p["type"]
            points = [
                (int(low) + i * int(step)) if kind == "int" else clean(low + i * step)
                for i in range(n)
            ]
            return {"discreteValueSpec": {"values": points}, "scaleType": "UNIT_LINEAR_SCALE"}
    key = "integerValueSpec" if p["type"] == "int" else "doubleValueSpec"
    return {key: {"minValue": low, "maxValue": high}, "scaleType": _SCALE[p["scale"]]}


def _spec(p: dict[str, Any], value: Any = None) -> dict[str, Any]:
    """A parameter's ParameterSpec (at the value ``value`` of its conditional axis)."""
    if p["role"] == "fixed":
        body = _points_spec([p["value"]])
    elif p["role"] == "scientific":
        body = _points_spec(list(p["values"]))
    else:
        low, high, choices = p.get("low"), p.get("high"), p.get("choices")
        r = (
            p.get("conditional", {}).get("ranges", {}).get(str(value), {})
            if value is not None
            else {}
        )
        low, high, choices = r.get("low", low), r.get("high", high), r.get("choices", choices)
        if (p["type"] != "categorical" and (low is None or high is None)) or (
            p["type"] == "categorical" and choices is None
        ):
            low, high, choices = envelope(p)
        body = _range_spec(p, low, high, choices)
    return {"parameterId": p["name"], **body}


def _condition(parent: dict[str, Any], value: Any) -> dict[str, Any]:
    """The parent-value condition of a child of ``parent`` (its spec as exported) at
    ``value``: CATEGORICAL parents match text, DISCRETE ones numbers."""
    if "categoricalValueSpec" in parent:
        text = value if isinstance(value, str) else _text(value)
        return {"parentCategoricalValues": {"values": [text]}}
    return {"parentDiscreteValues": {"values": [value]}}


def export(doc: dict[str, Any]) -> str:
    """JSON StudySpec: ``parameters`` (conditional ones as children of their axis),
    ``metrics`` and ``algorithm``."""
    by_name = {p["name"]: p for p in doc["parameters"]}
    children: dict[str, list[dict[str, Any]]] = {}
    for p in doc["parameters"]:
        if "conditional" in p:
            children.setdefault(p["conditional"]["on"], []).append(p)
    specs = []
    for p in doc["parameters"]:
        if "conditional" in p:
            continue
        spec = _spec(p)
        if p["name"] in children:
            axis = by_name[p["name"]]["values"]
            spec["conditionalParameterSpecs"] = [
                {**_condition(spec, v), "parameterSpec": _spec(child, v)}
                for child in children[p["name"]]
                for v in axis
            ]
        specs.append(spec)
    out: dict[str, Any] = {"parameters": specs}
    if "objective" in doc:
        out["metrics"] = [{"metricId": doc["objective"]["kind"], "goal": "MINIMIZE"}]
    if "sampler" in doc:
        out["algorithm"] = _ALGORITHM[doc["sampler"]["name"]]
    return dumps_stable(out)


# --- import --------------------------------------------------------------------------------


def _camel(data: Any) -> Any:
    """Proto JSON accepts snake_case field names too: make every key camelCase."""
    if isinstance(data, dict):
        return {
            _SNAKE.sub(lambda m: m.group(1).upper(), str(k)): _camel(v) for k, v in data.items()
        }
    if isinstance(data, list):
        return [_camel(v) for v in data]
    return data


def _int64(x: Any, where: str) -> int:
    if isinstance(x, str):
        need(re.fullmatch(r"-?\d+", x.strip()) is not None, where, f"not an integer: {x!r}", FMT)
        return int(x)
    need(is_int(x) or (isinstance(x, float) and x.is_integer()), where, "expected an integer", FMT)
    return int(x)


def _number(x: Any, where: str) -> float | int:
    if isinstance(x, str):
        try:
            return float(x)
        except ValueError:
            need(False, where, f"not a number: {x!r}", FMT)
    need(is_number(x), where, "expected a number", FMT)
    return x


class _Spec:
    """One ParameterSpec read: its id, domain and where it sits."""

    def __init__(self, raw: Any, where: str) -> None:
        need(isinstance(raw, dict), where, "expected an object (a ParameterSpec)", FMT)
        ident = raw.get("parameterId", raw.get("parameter"))
        need(isinstance(ident, str) and bool(ident), where, "expected a parameterId", FMT)
        self.id, self.where = ident, f"{where}({ident})"
        kinds = [k for k in _SPEC_KEYS if k in raw]
        need(len(kinds) == 1, self.where, f"expected one of {', '.join(_SPEC_KEYS)}", FMT)
        self.kind, body = kinds[0], raw[kinds[0]]
        need(isinstance(body, dict), f"{self.where}.{self.kind}", "expected an object", FMT)
        scale = raw.get("scaleType")
        need(scale in _FROM_SCALE, f"{self.where}.scaleType", f"unknown scale {scale!r}", FMT)
        self.scale = _FROM_SCALE[scale]
        if self.kind in ("discreteValueSpec", "categoricalValueSpec"):
            values = body.get("values")
            need(isinstance(values, list) and bool(values), f"{self.where}.values", "a list", FMT)
            if self.kind == "discreteValueSpec":
                values = [_number(v, f"{self.where}.values") for v in values]
            self.values: list[Any] | None = values
            self.low = self.high = None
        else:
            read = _int64 if self.kind == "integerValueSpec" else _number
            self.values = None
            self.low = read(body.get("minValue"), f"{self.where}.minValue")
            self.high = read(body.get("maxValue"), f"{self.where}.maxValue")
        self.children: list[tuple[list[Any], Any]] = []
        for i, cond in enumerate(raw.get("conditionalParameterSpecs") or []):
            need(
                isinstance(cond, dict),
                f"{self.where}.conditionalParameterSpecs[{i}]",
                "an object",
                FMT,
            )
            self.children.append((self._parent_values(cond, i), cond.get("parameterSpec")))
        for i, child in enumerate(raw.get("childParameterSpecs") or []):  # AI Platform
            self.children.append((self._parent_values(child, i), child))

    def _parent_values(self, cond: dict[str, Any], i: int) -> list[Any]:
        keys = [k for k in _PARENT_KEYS if k in cond]
        where = f"{self.where}.conditionalParameterSpecs[{i}]"
        need(len(keys) == 1, where, f"expected one of {', '.join(_PARENT_KEYS)}", FMT)
        values = (cond[keys[0]] or {}).get("values")
        need(isinstance(values, list) and bool(values), f"{where}.{keys[0]}", "a list", FMT)
        if keys[0] == "parentIntValues":
            return [_int64(v, where) for v in values]
        if keys[0] == "parentDiscreteValues":
            return [_number(v, where) for v in values]
        return values


def _domain_param(alias: str, path: str, s: _Spec) -> dict[str, Any]:
    if s.values is not None:
        if len(s.values) == 1:
            return fixed_param(alias, path, s.values[0])
        return choice_param(alias, path, list(s.values))
    kind = "int" if s.kind == "integerValueSpec" else "float"
    return numeric_param(alias, path, kind, s.low, s.high, s.scale)


def _range_of(s: _Spec) -> dict[str, Any]:
    return {"choices": list(s.values)} if s.values is not None else {"low": s.low, "high": s.high}


def _conditional(
    alias: str,
    path: str,
    parent: str,
    by_value: dict[str, _Spec],
    axis: list[Any],
    notes: list[str],
) -> dict[str, Any]:
    """A nuisance parameter whose range depends on the axis ``parent``: the range of the
    first value is its own, the others differ by value."""
    specs = list(by_value.values())
    first = specs[0]
    kinds = {s.kind for s in specs}
    kinds = {
        "categorical" if k in ("discreteValueSpec", "categoricalValueSpec") else k for k in kinds
    }
    need(len(kinds) == 1, first.where, "a child has different kinds of value per parent value", FMT)
    base = _domain_param(alias, path, first)
    if base["role"] == "fixed":  # one value per parent value: choices by value
        base = choice_param(alias, path, [first.values[0]])  # type: ignore[index]
    base_range = _range_of(first)
    ranges = {}
    for value, s in by_value.items():
        if _range_of(s) != base_range:
            ranges[value] = _range_of(s)
    missing = [v for v in axis if str(v) not in by_value]
    if missing:
        notes.append(
            f"{first.id}: active only at {parent} = {', '.join(by_value)} in the source; tuned "
            f"at every point, with its range at {parent} = {next(iter(by_value))} also at "
            f"{', '.join(map(str, missing))}"
        )
    if ranges:
        base["conditional"] = {"on": parent, "ranges": ranges}
    return base


def _read_params(specs: list[_Spec], notes: list[str]) -> list[dict[str, Any]]:
    params: list[dict[str, Any]] = []
    taken: set[str] = set()
    for s in specs:
        alias, path = name_and_path(s.id, taken)
        if not s.children:
            params.append(_domain_param(alias, path, s))
            continue
        if s.values is None and s.kind == "integerValueSpec" and s.high - s.low < MAX_POINTS:
            s.values = list(range(int(s.low), int(s.high) + 1))  # an INTEGER parent's values
        need(s.values is not None, s.where, "a DOUBLE parameter cannot condition others", FMT)
        axis = list(s.values)  # type: ignore[arg-type]
        params.append(
            {
                "name": alias,
                "path": path,
                "role": "scientific",
                "type": type_of(axis),
                "values": axis,
            }
        )
        by_child: dict[str, dict[str, _Spec]] = {}
        for i, (values, raw) in enumerate(s.children):
            child = _Spec(raw, f"{s.where}.conditionalParameterSpecs[{i}].parameterSpec")
            if child.children:
                notes.append(f"{child.id}: its own conditional parameters are not read (one level)")
            for v in values:  # keyed by the axis value as text (a DISCRETE 128.0 is 128)
                key = next((str(a) for a in axis if a == v and not isinstance(a, bool)), str(v))
                by_child.setdefault(child.id, {})[key] = child
        names = ", ".join(by_child)
        notes.append(
            f"{s.id} becomes a scientific axis: the ranges of {names} depend on its value "
            "(tuned separately at each)"
        )
        for child_id, by_value in by_child.items():
            c_alias, c_path = name_and_path(child_id, taken)
            params.append(_conditional(c_alias, c_path, alias, by_value, axis, notes))
    return params


def parse(text: str) -> tuple[dict[str, Any], list[str]]:
    """ParameterSpecs become nuisance parameters (one feasible value: fixed), parents of
    conditional parameters scientific axes; a stepscale objective among ``metrics`` the
    objective, ``algorithm`` the sampler."""
    data = _camel(load_json(text, FMT))
    need(isinstance(data, dict), "$", "expected a StudySpec object", FMT)
    if "studySpec" in data:
        data = data["studySpec"]
        need(isinstance(data, dict), "$.studySpec", "expected an object", FMT)
    raw = data.get("parameters", [])
    need(isinstance(raw, list), "$.parameters", "expected a list of ParameterSpecs", FMT)
    notes: list[str] = []
    specs = [_Spec(r, f"$.parameters[{i}]") for i, r in enumerate(raw)]
    params = _read_params(specs, notes)
    objective = None
    metrics = data.get("metrics") or []
    need(isinstance(metrics, list), "$.metrics", "expected a list", FMT)
    for m in metrics:
        ident = m.get("metricId", m.get("metric")) if isinstance(m, dict) else None
        goal = m.get("goal") if isinstance(m, dict) else None
        if ident in OBJECTIVES and goal in ("MINIMIZE", 2) and objective is None:
            objective = {"kind": ident}
        else:
            notes.append(f"metric {ident!r} ({goal}) is not a stepscale objective; ignored")
    sampler = None
    algorithm = data.get("algorithm")
    if algorithm is not None:
        if algorithm in _FROM_ALGORITHM:
            sampler = {"name": _FROM_ALGORITHM[algorithm]}
        else:
            notes.append(f"algorithm {algorithm!r} has no stepscale equivalent; ignored")
    ignored = sorted(set(data) - {"parameters", "metrics", "algorithm"})
    if ignored:
        notes.append(f"ignored {', '.join(ignored)}")
    return new_document(params, objective=objective, sampler=sampler), notes
