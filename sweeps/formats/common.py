"""Helpers shared by the format modules: errors, numbers, names ↔ trainer paths, parsing,
and building the parameters of a document (what a conversion lost: `formats.losses`)."""

from __future__ import annotations

import contextvars
import json
import math
import re
from typing import Any

import yaml

from stepscale.rundir import BATCH_PATH
from stepscale.sweeps.trainers.builtin_keys import TRAINER_PATHS, TRAINER_TYPES


class FormatError(ValueError):
    """A document or file that is not valid for its claimed format."""


# Names used by other tools (and by our built-in studies) → trainer key. The first name
# listed for a path is the alias an importer gives a parameter known only by its path.
KNOWN_NAMES: dict[str, str] = {
    "lr": "optimizer.lr",
    "learning_rate": "optimizer.lr",
    "peak_lr": "optimizer.lr",
    "b1": "optimizer.b1",
    "beta1": "optimizer.b1",
    "beta_1": "optimizer.b1",
    "momentum": "optimizer.b1",
    "b2": "optimizer.b2",
    "beta2": "optimizer.b2",
    "beta_2": "optimizer.b2",
    "eps": "optimizer.eps",
    "epsilon": "optimizer.eps",
    "weight_decay": "optimizer.weight_decay",
    "wd": "optimizer.weight_decay",
    "clip": "optimizer.clip",
    "grad_clip": "optimizer.clip",
    "grad_clip_norm": "optimizer.clip",
    "max_grad_norm": "optimizer.clip",
    "optimizer": "optimizer.name",
    "warmup_steps": "schedule.warmup_steps",
    "warmup": "schedule.warmup_steps",
    "warmup_frac": "schedule.warmup_frac",
    "warmup_factor": "schedule.warmup_frac",
    "schedule": "schedule.name",
    "final_lr_frac": "schedule.final_lr_frac",
    "end_learning_rate_factor": "schedule.final_lr_frac",
    "decay_frac": "schedule.decay_frac",
    "batch_size": BATCH_PATH,
    "global_batch": BATCH_PATH,
    "seq_len": "data.seq_len",
    "sequence_length": "data.seq_len",
    "model_size": "model.size",
    "model": "model.name",
    "seed": "train.seed",
    # batch ramp-up (MaxText's global_rampup_samples counts global samples, as ours does;
    # its per_device_batch_size_start/_increment are per device: no key of ours)
    "rampup_samples": "data.rampup.samples",
    "global_rampup_samples": "data.rampup.samples",
    "rampup_start": "data.rampup.start",
    "rampup_increment": "data.rampup.increment",
    "rampup_lr_coupling": "data.rampup.lr_coupling",
}

_ALIAS_OF_PATH: dict[str, str] = {}
for _name, _path in KNOWN_NAMES.items():
    _ALIAS_OF_PATH.setdefault(_path, _name)

_LAST_SEGMENT: dict[str, list[str]] = {}
for _path in sorted(TRAINER_PATHS):
    _LAST_SEGMENT.setdefault(_path.rsplit(".", 1)[-1], []).append(_path)

_ALIAS_BAD = re.compile(r"[^A-Za-z0-9_]")
_MATCHED_BY_LAST_NAME = ("optimizer", "schedule", "train")


# Set while importing for a user's own trainer (`sweep import --trainer`): a parameter's
# path is its name in the source, never a built-in trainer key.
KEEP_SOURCE_NAMES: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "keep_source_names", default=False
)

# Set while importing: alias → the source's own name, for every parameter whose trainer key
# was inferred from its name (`name_and_path`); `formats.guesses` checks those guesses
# against the parameter's values and undoes the ones that would change its meaning.
GUESSES: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "guesses", default=None
)
PATH_OK = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def path_for_name(name: str) -> str:
    """The trainer key a parameter name most likely sets (a key itself, a name of
    `KNOWN_NAMES`, or the last part of one optimizer/schedule/train key); the name itself
    when unknown (a conf built from it then leaves the parameter out and says so), or when
    importing for a user's own trainer (`KEEP_SOURCE_NAMES`)."""
    if KEEP_SOURCE_NAMES.get() or name in TRAINER_PATHS:
        return name
    if name in KNOWN_NAMES:
        return KNOWN_NAMES[name]
    # A source's `n_layers`, `temperature` or `path` describe its own model and data, not
    # ours: only hyperparameters of the optimizer, schedule and loop are matched by name.
    candidates = [
        p for p in _LAST_SEGMENT.get(name, []) if p.split(".")[0] in _MATCHED_BY_LAST_NAME
    ]
    return candidates[0] if len(candidates) == 1 and len(_LAST_SEGMENT[name]) == 1 else name


def name_and_path(source: str, taken: set[str]) -> tuple[str, str]:
    """(a free alias, the trainer key) of a parameter the source calls ``source``; a key
    inferred from the name is recorded in `GUESSES` to be checked against the values."""
    alias = unique_alias(alias_for(source), taken)
    path = path_for_name(source)
    guesses = GUESSES.get()
    if path != source and guesses is not None:
        guesses[alias] = source
    return alias, path


def own_path(source: str) -> str:
    """A source name as a config key of its own: the name, with characters a key cannot
    hold as ``_``."""
    key = ".".join(_ALIAS_BAD.sub("_", part) or "_" for part in source.split("."))
    return key if PATH_OK.match(key) else alias_for(source)


def alias_for(name_or_path: str) -> str:
    """A valid alias (identifier) for a parameter known by a name or a trainer key."""
    if name_or_path in _ALIAS_OF_PATH:
        return _ALIAS_OF_PATH[name_or_path]
    if name_or_path in TRAINER_PATHS:
        last = name_or_path.rsplit(".", 1)[-1]
        name_or_path = last if len(_LAST_SEGMENT[last]) == 1 else name_or_path
    alias = _ALIAS_BAD.sub("_", name_or_path)
    return alias if alias[:1].isalpha() or alias[:1] == "_" else f"p_{alias}"


def unique_alias(alias: str, taken: set[str]) -> str:
    """``alias`` or ``alias_2``, ``alias_3`` … whichever is free; marks it taken."""
    out, n = alias, 1
    while out in taken:
        n += 1
        out = f"{alias}_{n}"
    taken.add(out)
    return out


def clean(x: float) -> float:
    """A float rounded to 12 significant digits: undoes the noise of ``1 − x`` and of
    ``stop − step`` so that converting back and forth gives the original value."""
    return float(f"{x:.12g}")


def as_type(kind: str, x: float | int) -> float | int:
    """A bound as the parameter's type: int for int parameters, float otherwise."""
    return int(x) if kind == "int" else float(x)


def is_int(x: Any) -> bool:
    """A real integer (not a bool)."""
    return isinstance(x, int) and not isinstance(x, bool)


def is_number(x: Any) -> bool:
    """An int or a finite float (not a bool)."""
    return is_int(x) or (isinstance(x, float) and math.isfinite(x))


def type_of(values: list[Any]) -> str:
    """The parameter type of a list of values: int, float or categorical."""
    if values and all(is_int(v) for v in values):
        return "int"
    if values and all(is_number(v) for v in values):
        return "float"
    return "categorical"


def load_json(text: str, fmt: str) -> Any:
    """Parse JSON or raise FormatError naming the line and column."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(
            f"not a valid {fmt} file: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None


def load_yaml(text: str, fmt: str) -> Any:
    """Parse YAML or raise FormatError naming the line."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise FormatError(f"not a valid {fmt} file: invalid YAML{where}") from None


def dump_yaml(data: Any, header: str = "") -> str:
    """Block-style YAML with sorted keys: the same data gives the same bytes."""
    return header + yaml.safe_dump(
        data, sort_keys=True, default_flow_style=False, allow_unicode=True, width=10_000
    )


def need(cond: bool, where: str, message: str, fmt: str) -> None:
    """Raise FormatError(``<fmt> file, <where>: <message>``) unless ``cond``."""
    if not cond:
        raise FormatError(f"not a valid {fmt} file: {where}: {message}")


def named_entries(data: Any, what: str, fmt: str) -> list[tuple[str, Any]]:
    """The ``(name, spec)`` entries of a file's top-level object, which must map names to
    ``what`` (an empty one is an empty search space, as the owning tools read it)."""
    need(isinstance(data, dict), "$", f"expected an object mapping {what}", fmt)
    return list(data.items())


def envelope(param: dict[str, Any]) -> tuple[Any, Any, list[Any] | None]:
    """(low, high, choices) of a nuisance parameter ignoring its conditional ranges: its
    own range when it has one, else the union of the ranges by value."""
    low, high, choices = param.get("low"), param.get("high"), param.get("choices")
    ranges = list(param.get("conditional", {}).get("ranges", {}).values())
    if param["type"] == "categorical":
        if choices is None:
            merged: list[Any] = []
            for r in ranges:
                merged += [c for c in r.get("choices", []) if c not in merged]
            choices = merged
        return None, None, choices
    if low is None:
        low = min(r["low"] for r in ranges if "low" in r)
    if high is None:
        high = max(r["high"] for r in ranges if "high" in r)
    return low, high, None


# --- building documents (importers) -----------------------------------------------------


def new_document(params: list[dict[str, Any]], **sections: Any) -> dict[str, Any]:
    """A document with the v1 tag, ``params`` and the sections that are not None."""
    from stepscale.sweeps.study.space_doc import SCHEMA_TAG

    doc: dict[str, Any] = {"schema": SCHEMA_TAG, "parameters": params}
    doc |= {k: v for k, v in sections.items() if v is not None}
    return doc


def numeric_param(
    name: str,
    path: str,
    kind: str,
    low: float,
    high: float,
    scale: str = "linear",
    step: float | None = None,
) -> dict[str, Any]:
    """A nuisance int/float parameter with bounds typed like the parameter."""
    p = {
        "name": name,
        "path": path,
        "role": "nuisance",
        "type": kind,
        "scale": scale,
        "low": as_type(kind, low),
        "high": as_type(kind, high),
    }
    if step is not None:
        p["step"] = as_type(kind, step)
    return p


def choice_param(name: str, path: str, choices: list[Any]) -> dict[str, Any]:
    """A nuisance categorical parameter."""
    return {
        "name": name,
        "path": path,
        "role": "nuisance",
        "type": "categorical",
        "choices": choices,
    }


def fixed_param(name: str, path: str, value: Any) -> dict[str, Any]:
    """A fixed value."""
    return {"name": name, "path": path, "role": "fixed", "type": type_of([value]), "value": value}


def scientific_param(name: str, path: str, values: list[Any]) -> dict[str, Any]:
    """A scientific axis."""
    return {
        "name": name,
        "path": path,
        "role": "scientific",
        "type": type_of(values),
        "values": values,
    }


def is_scalar(x: Any) -> bool:
    """A plain value: str, bool, None or a number (NaN and ±inf too: Optuna and Hydra
    accept them as choices)."""
    return x is None or isinstance(x, (str, bool, int, float))


def is_choice(x: Any) -> bool:
    """A value a categorical parameter may take: a plain value or a list of them (Hydra's
    ``choice([1, 2], [3, 4])``, W&B ``values`` of lists)."""
    return is_scalar(x) or (isinstance(x, list) and all(is_choice(v) for v in x))


# --- trainer key types (importers) -------------------------------------------------------


def _whole(x: Any) -> bool:
    return isinstance(x, float) and x.is_integer()


def fit_trainer_types(doc: dict[str, Any]) -> list[str]:
    """Make parameters of int trainer keys ints when the source could only say float
    (AlgoPerf samples floats, W&B writes ``min: 0.0``…); returns notes on rounded bounds."""
    notes: list[str] = []
    for p in doc["parameters"]:
        if TRAINER_TYPES.get(p["path"]) != "int":
            continue
        if p["role"] == "scientific" and all(_whole(v) or is_int(v) for v in p["values"]):
            _rename_condition_keys(doc, p["name"], {str(v): str(int(v)) for v in p["values"]})
            p["values"] = [int(v) for v in p["values"]]
            p["type"] = "int"
        elif p["role"] == "fixed" and _whole(p["value"]):
            p["value"], p["type"] = int(p["value"]), "int"
        elif p.get("type") == "categorical" and all(
            _whole(v) or is_int(v) for v in p.get("choices", [None])
        ):
            p["choices"] = [int(v) for v in p["choices"]]
        elif p.get("type") == "float" and p["scale"] != "reverse_log" and "conditional" not in p:
            low, high = math.ceil(p["low"]), math.floor(p["high"])
            if (low, high) != (p["low"], p["high"]):
                notes.append(
                    f"{p['name']}: {p['path']} takes integers; range rounded to [{low}, {high}]"
                )
            p["type"], p["low"], p["high"] = "int", low, high
            step = p.pop("step", None)
            if step is not None and float(step).is_integer() and step != 1:
                p["step"] = int(step)
            elif step is not None and step != 1:
                notes.append(f"{p['name']}: step {step} dropped ({p['path']} takes integers)")
    return notes


def _rename_condition_keys(doc: dict[str, Any], axis: str, renamed: dict[str, str]) -> None:
    """Conditional ranges on ``axis`` keyed by its values as text follow a change of their
    text (``128.0`` → ``128``)."""
    for q in doc["parameters"]:
        cond = q.get("conditional")
        if cond is not None and cond["on"] == axis:
            cond["ranges"] = {renamed.get(k, k): r for k, r in cond["ranges"].items()}
