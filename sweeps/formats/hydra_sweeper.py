"""``hydra``: a primary config for Hydra's Optuna sweeper plugin (hydra-optuna-sweeper):
``defaults`` choosing the sweeper and its sampler (``override hydra/sweeper/sampler:
tpe | random | grid``: the plugin builds the sampler from that group, so a ``_target_``
set under ``hydra.sweeper.sampler`` would be merged with the TPE sampler's options), and
``hydra.sweeper`` with ``params`` in Hydra's override grammar, ``sampler.seed``,
``direction`` and ``study_name``.

Parameters are keyed by their config path. Grammar used: ``interval(a, b)`` (floats),
``int(interval(a, b))`` (ints), ``tag(log, …)`` for a log scale, ``choice(…)`` for
categoricals and scientific axes, ``range(a, b, step=s)`` for a step and a plain value for
a fixed one. The plugin reads ``range`` its own way, not as Hydra's basic sweeper does: with
every sampler but grid it is Optuna's distribution from ``a`` to ``b`` *inclusive*; with the
grid sampler it is ``a, a + s, …`` strictly below ``b``. Exports and imports follow the
plugin. The plugin's Optuna (< 3) has no QMC or GP sampler (``qmc`` is written as random,
``gp`` as tpe); its grid sampler takes no seed and only discrete parameters (a study with a
continuous one is written with the random sampler). No reverse-log scale, roles, units or
budgets.
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
    is_choice,
    is_int,
    load_yaml,
    need,
    new_document,
    numeric_param,
    unique_alias,
)

FMT = "hydra"
# stepscale sampler → the plugin's sampler group option (hydra/sweeper/sampler).
_GROUP = {"tpe": "tpe", "random": "random", "grid": "grid", "qmc": "random", "gp": "tpe"}
# The plugin's sampler group options → stepscale samplers (None: no equivalent).
_FROM_GROUP: dict[str, str | None] = {
    "tpe": "tpe",
    "random": "random",
    "grid": "grid",
    "cmaes": None,
    "nsgaii": None,
    "motpe": None,
}
_FROM_TARGET = {
    "TPESampler": "tpe",
    "RandomSampler": "random",
    "GridSampler": "grid",
    "QMCSampler": "qmc",
    "GPSampler": "gp",
}
_SAMPLER_GROUP = "hydra/sweeper/sampler"
_SAMPLER_KEYS = {"_target_", "seed", "_partial_"}
_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_KEYWORDS = {"true", "false", "null", "inf", "nan"}
HEADER = (
    "# Primary config for Hydra's Optuna sweeper (pip install hydra-optuna-sweeper); add your\n"
    "# app's own keys and run it with --multirun. The plugin reads range(a, b, step=s) as\n"
    "# a..b inclusive (with its grid sampler: a, a+s, ... below b).\n"
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


def _discrete(p: dict[str, Any]) -> bool:
    """Can a grid sampler enumerate this nuisance parameter (the plugin's, as ours)?"""
    if p["type"] == "categorical":
        return True
    return p["scale"] == "linear" and (p["type"] == "int" or p.get("step") is not None)


def _last(low: float, high: float, step: float, kind: str) -> float | int:
    """The last point of the grid low, low + step, … that is ≤ high."""
    if kind == "int":
        return int(low) + (int(high) - int(low)) // int(step) * int(step)
    return clean(low + math.floor(clean((high - low) / step)) * step)


def _override(p: dict[str, Any], grid: bool) -> Any:
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
    if grid and kind == "int":  # the plugin's grid: low, low + step, … below the end
        step = int(step or 1)
        stop = _last(low, high, step, kind) + step
        return f"range({int(low)}, {stop}, step={step})"
    if grid and step is not None:  # a float grid as its points (no rounding at the end)
        last = _last(low, high, step, kind)
        n = round((last - low) / step)
        return _choice([clean(low + i * step) for i in range(n + 1)])
    if step is not None and not (kind == "int" and step == 1):  # the plugin: end inclusive
        last = _last(low, high, step, kind)
        return f"range({_num(low, kind)}, {_num(last, kind)}, step={_num(step, kind)})"
    body = f"interval({_num(low, kind)}, {_num(high, kind)})"
    return f"int({body})" if kind == "int" else body


def _sampler_option(doc: dict[str, Any]) -> str | None:
    """The plugin's sampler for a document: grid only when every nuisance parameter is
    discrete (the plugin's grid sampler refuses the others; then random)."""
    if "sampler" not in doc:
        return None
    option = _GROUP[doc["sampler"]["name"]]
    nuisance = [p for p in doc["parameters"] if p["role"] == "nuisance"]
    if option == "grid" and not all(_discrete(p) for p in nuisance):
        return "random"
    return option


def export(doc: dict[str, Any]) -> str:
    """YAML: ``defaults`` (the optuna sweeper and its sampler) and ``hydra: sweeper:
    {params, sampler: {seed}, direction, study_name}``."""
    option = _sampler_option(doc)
    sweeper: dict[str, Any] = {
        "direction": "minimize",
        "params": {p["path"]: _override(p, option == "grid") for p in doc["parameters"]},
    }
    defaults: list[Any] = [{"override hydra/sweeper": "optuna"}]
    if option is not None:
        defaults.append({f"override {_SAMPLER_GROUP}": option})
        if option != "grid" and "seed" in doc["sampler"]:  # the grid sampler has no seed
            sweeper["sampler"] = {"seed": doc["sampler"]["seed"]}
    if "name" in doc:
        sweeper["study_name"] = doc["name"]
    return dump_yaml({"defaults": defaults, "hydra": {"sweeper": sweeper}}, HEADER)


def _plugin_range(v: RangeSweep, grid: bool) -> list[Any]:
    """The values the plugin samples from ``range(start, stop, step)``: Optuna's
    distribution from start to stop inclusive (its end trimmed to the step grid), or with
    the grid sampler the points start + i·step for i < (end − start) // step."""
    start, stop, step = v.start, v.stop, v.step
    if all(is_int(x) for x in (start, stop, step)):
        end = start + (stop - start) // step * step
        n = (end - start) // step + (0 if grid else 1)
        return [start + i * step for i in range(max(0, n))]
    end = clean(start + math.floor(clean((stop - start) / step)) * step)
    n = math.floor(clean((end - start) / step)) + (0 if grid else 1)
    return [clean(start + i * step) for i in range(max(0, n))]


def _param(alias: str, path: str, key: str, raw: Any, grid: bool) -> dict[str, Any]:
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
        need(all(is_choice(c) for c in choices), where, "choices must be values or lists", FMT)
        return choice_param(alias, path, choices)
    if isinstance(v, RangeSweep):
        need(v.step is not None and v.step > 0, where, f"{raw!r}: the step must be > 0", FMT)
        if v.shuffle:  # the plugin: a categorical of Hydra's own values
            return choice_param(alias, path, list(override.sweep_iterator()))
        values = _plugin_range(v, grid)
        need(bool(values), where, f"{raw!r} is empty", FMT)
        if len(values) == 1:
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


def _group_option(defaults: Any) -> str | None:
    """The sampler chosen in a defaults list (``override hydra/sweeper/sampler: X``)."""
    if not isinstance(defaults, list):
        return None
    for entry in defaults:
        if isinstance(entry, dict):
            for key, value in entry.items():
                if str(key).removeprefix("override ").strip() == _SAMPLER_GROUP:
                    return str(value)
    return None


def _sampler(option: str | None, spec: Any, notes: list[str]) -> tuple[dict[str, Any] | None, bool]:
    """(stepscale sampler, is it the plugin's grid sampler) from the defaults list's option
    and the ``hydra.sweeper.sampler`` mapping."""
    need(spec is None or isinstance(spec, dict), "hydra.sweeper.sampler", "a mapping", FMT)
    spec = spec or {}
    if "_target_" in spec:
        target = str(spec["_target_"]).rsplit(".", 1)[-1]
        name = _FROM_TARGET.get(target)
        label = target
    elif option is not None:
        name, label = _FROM_GROUP.get(option), f"{option} (hydra/sweeper/sampler)"
    else:
        name, label = None, None
    for key in sorted(set(spec) - _SAMPLER_KEYS):
        notes.append(f"sampler option {key}={spec[key]!r} ignored (no stepscale equivalent)")
    if label is not None and name is None:
        notes.append(f"sampler {label} has no stepscale equivalent; the study's sampler is used")
        return None, False
    if name is None:
        return None, False
    sampler: dict[str, Any] = {"name": name}
    if is_int(spec.get("seed")):
        sampler["seed"] = spec["seed"]
    return sampler, name == "grid"


def parse(text: str) -> tuple[dict[str, Any], list[str]]:
    """``params`` become nuisance parameters (plain values fixed ones), named after their
    path; the sampler comes from the defaults list (or ``sampler._target_``) and
    ``sampler.seed``, ``study_name`` is the name."""
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
    raw = {} if raw is None else raw
    need(isinstance(raw, dict), "hydra.sweeper.params", "expected a mapping", FMT)
    notes: list[str] = []
    sampler, grid = _sampler(_group_option(data.get("defaults")), sweeper.get("sampler"), notes)
    params, taken = [], set()
    for key, value in raw.items():
        path = str(key).lstrip("+~")
        params.append(_param(unique_alias(alias_for(path), taken), path, str(key), value, grid))
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
