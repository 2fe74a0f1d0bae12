"""``hydra``: the ``hydra.sweeper`` block of Hydra's Optuna sweeper plugin
(hydra-optuna-sweeper): ``params`` in Hydra's override grammar, plus ``sampler``
(``_target_`` + ``seed``), ``direction`` and ``study_name``.

Parameters are keyed by their config path. Grammar used: ``interval(a, b)`` (floats),
``int(interval(a, b))`` (ints), ``tag(log, …)`` for a log scale, ``choice(…)`` for
categoricals and scientific axes, ``range(start, stop, step=s)`` for a step — Hydra's
``range`` excludes ``stop``, so ``stop`` is one step past the high end — and a plain value
for a fixed one. No reverse-log scale, roles, units or budgets.
"""

from __future__ import annotations

import math
import re
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep
from hydra.errors import HydraException

from stepscale.sweeps.formats.common import (
    FormatError,
    alias_for,
    choice_param,
    clean,
    dump_yaml,
    envelope,
    fixed_param,
    is_int,
    is_scalar,
    load_yaml,
    need,
    new_document,
    numeric_param,
    unique_alias,
)

FMT = "hydra"
_TARGET = {
    "tpe": "optuna.samplers.TPESampler",
    "random": "optuna.samplers.RandomSampler",
    "qmc": "optuna.samplers.QMCSampler",
    "gp": "optuna.samplers.GPSampler",
    "grid": "optuna.samplers.GridSampler",
}
_SAMPLER = {target.rsplit(".", 1)[-1]: name for name, target in _TARGET.items()}
_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_KEYWORDS = {"true", "false", "null", "inf", "nan"}
HEADER = (
    "# Search space for Hydra's Optuna sweeper (pip install hydra-optuna-sweeper); use it\n"
    "# with `defaults: [override hydra/sweeper: optuna]` in the primary config.\n"
)


def _num(x: float | int, kind: str) -> str:
    return str(int(x)) if kind == "int" else repr(float(x))


def _value(v: Any) -> str:
    """A value in Hydra's override grammar."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if is_int(v):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        if _PLAIN.match(v) and v.lower() not in _KEYWORDS:
            return v
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_value(x)}" for k, x in v.items()) + "}"
    return _value(str(v))


def _choice(values: list[Any]) -> str:
    # Hydra's choice() refuses null; the loss report shows a dropped null.
    kept = [_value(v) for v in values if v is not None]
    return f"choice({', '.join(kept)})" if kept else "null"


def _override(p: dict[str, Any]) -> Any:
    if p["role"] == "fixed":
        v = p["value"]
        return v if is_int(v) or isinstance(v, (bool, float)) else _value(v)
    if p["role"] == "scientific":
        return _choice(p["values"])
    low, high, choices = envelope(p)
    if p["type"] == "categorical":
        return _choice(choices)
    kind, scale, step = p["type"], p["scale"], p.get("step")
    if scale == "log":
        body = f"interval({_num(low, kind)}, {_num(high, kind)})"
        return f"tag(log, int({body}))" if kind == "int" else f"tag(log, {body})"
    if step is not None and not (kind == "int" and step == 1):
        n = math.floor(clean((high - low) / step)) + 1  # grid points in [low, high]
        stop = low + n * step if kind == "int" else clean(low + n * step)
        return f"range({_num(low, kind)}, {_num(stop, kind)}, step={_num(step, kind)})"
    body = f"interval({_num(low, kind)}, {_num(high, kind)})"
    return f"int({body})" if kind == "int" else body


def export(doc: dict[str, Any]) -> str:
    """YAML ``hydra: sweeper: {params, sampler, direction, study_name}``."""
    sweeper: dict[str, Any] = {
        "direction": "minimize",
        "params": {p["path"]: _override(p) for p in doc["parameters"]},
    }
    if "sampler" in doc:
        name = doc["sampler"]["name"]
        sampler: dict[str, Any] = {"_target_": _TARGET[name]}
        if name == "grid":
            sampler["_partial_"] = True  # the sweeper builds the grid from params
        if "seed" in doc["sampler"]:
            sampler["seed"] = doc["sampler"]["seed"]
        sweeper["sampler"] = sampler
    if "name" in doc:
        sweeper["study_name"] = doc["name"]
    return dump_yaml({"hydra": {"sweeper": sweeper}}, HEADER)


def _range_values(v: RangeSweep) -> list[Any]:
    start, stop, step = v.start, v.stop, v.step
    if all(is_int(x) for x in (start, stop, step)):
        return list(range(start, stop, step))
    n = max(0, math.ceil(clean((stop - start) / step)))
    return [clean(start + i * step) for i in range(n)]


def _param(alias: str, path: str, key: str, raw: Any) -> dict[str, Any]:
    where = f"hydra.sweeper.params.{key}"
    if raw is None or isinstance(raw, (bool, int, float)):
        return fixed_param(alias, path, raw)
    need(isinstance(raw, str), where, "expected an override string or a value", FMT)
    try:
        override = OverridesParser.create().parse_overrides([f"{path}={raw}"])[0]
    except HydraException as exc:
        first = str(exc).strip().splitlines()[0]
        raise FormatError(f"not a valid {FMT} file: {where}: {first}") from None
    v = override.value()
    if not override.is_sweep_override():
        return fixed_param(alias, path, v)
    if isinstance(v, ChoiceSweep):
        choices = list(override.sweep_iterator())
        need(all(is_scalar(c) for c in choices), where, "choices must be plain values", FMT)
        return choice_param(alias, path, choices)
    if isinstance(v, RangeSweep):
        values = _range_values(v)
        need(bool(values) and v.step > 0, where, f"{raw!r} is empty", FMT)
        if v.shuffle or len(values) == 1:
            return choice_param(alias, path, values)
        kind = "int" if all(is_int(x) for x in values) and is_int(v.step) else "float"
        step = None if kind == "int" and v.step == 1 else v.step
        return numeric_param(alias, path, kind, values[0], values[-1], step=step)
    if isinstance(v, IntervalSweep):
        kind = "int" if is_int(v.start) and is_int(v.end) else "float"
        scale = "log" if "log" in v.tags else "linear"
        return numeric_param(alias, path, kind, v.start, v.end, scale)
    need(False, where, f"unsupported sweep {raw!r}", FMT)
    return {}  # pragma: no cover


def parse(text: str) -> tuple[dict[str, Any], list[str]]:
    """``params`` become nuisance parameters (plain values fixed ones), named after their
    path; ``sampler._target_``/``seed`` the sampler, ``study_name`` the name."""
    data = load_yaml(text, FMT)
    need(isinstance(data, dict), "$", "expected a mapping", FMT)
    if "hydra" in data:
        sweeper = data["hydra"].get("sweeper") if isinstance(data["hydra"], dict) else None
        need(isinstance(sweeper, dict), "hydra.sweeper", "expected a mapping", FMT)
    elif "params" in data:
        sweeper = data
    else:
        sweeper = {"params": data}  # a bare params block
    raw = sweeper.get("params")
    need(isinstance(raw, dict) and bool(raw), "hydra.sweeper.params", "expected a mapping", FMT)
    notes: list[str] = []
    params, taken = [], set()
    for key, value in raw.items():
        path = str(key).lstrip("+~")
        params.append(_param(unique_alias(alias_for(path), taken), path, str(key), value))
    sampler = None
    if sweeper.get("sampler") is not None:
        spec = sweeper["sampler"]
        need(isinstance(spec, dict), "hydra.sweeper.sampler", "expected a mapping", FMT)
        target = str(spec.get("_target_", "optuna.samplers.TPESampler")).rsplit(".", 1)[-1]
        if target in _SAMPLER:
            sampler = {"name": _SAMPLER[target]}
            if is_int(spec.get("seed")):
                sampler["seed"] = spec["seed"]
        else:
            notes.append(f"sampler {target} has no stepscale equivalent; ignored")
    direction = sweeper.get("direction", "minimize")
    if direction != "minimize":
        notes.append(f"direction {direction!r}: stepscale objectives are minimised")
    ignored = sorted(
        set(sweeper) - {"params", "sampler", "direction", "study_name", "_target_", "defaults"}
    )
    if ignored:
        notes.append(f"ignored hydra.sweeper.{', hydra.sweeper.'.join(ignored)}")
    name = sweeper.get("study_name")
    return (
        new_document(params, name=name if isinstance(name, str) else None, sampler=sampler),
        notes,
    )
