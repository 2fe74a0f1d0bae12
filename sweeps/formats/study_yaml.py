"""A stepscale document → a study conf (``# @package _global_`` YAML) that ``sweep run``
accepts: parameters without a known trainer key are left out (listed in a comment), and a
scientific axis and an objective are added when the document has none."""

from __future__ import annotations

import math
import shlex
from typing import Any

import yaml

from stepscale.rundir import BATCH_PATH
from stepscale.sweeps.formats.common import KNOWN_NAMES, unique_alias
from stepscale.sweeps.trainers.builtin import DataConfig, TrainConfig
from stepscale.sweeps.trainers.builtin_keys import TRAINER_PATHS

# Axes to add when a source has no scientific parameter, first free path wins: a
# single-point grid at the trainer's default value.
_DEFAULT_AXES = (
    ("batch_size", BATCH_PATH, DataConfig().global_batch, "sequences"),
    ("seed", "train.seed", TrainConfig().seed, None),
)
_OPTIONAL = ("unit", "quantity", "description")
# The trainer takes one key of each group (a duration in steps, tokens, examples or a
# fraction); the presets set the first, so a conf that sets another clears the rest.
_EXCLUSIVE = (
    ("schedule.warmup_steps", "schedule.warmup_tokens", "schedule.warmup_examples",
     "schedule.warmup_frac"),
    ("train.max_steps", "train.max_tokens", "train.max_examples"),
)  # fmt: skip


def _entry(p: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"path": p["path"]}
    if p["role"] == "scientific":
        out["values"] = p["values"]
    elif p["role"] == "fixed":
        out["value"] = p["value"]
    else:
        out["type"] = p["type"]
        for key in ("low", "high", "scale", "step", "choices"):
            if key in p:
                out[key] = p[key]
        if "conditional" in p:
            out["by"] = p["conditional"]["on"]
            out["ranges"] = p["conditional"]["ranges"]
    for key in _OPTIONAL:
        if key in p:
            out[key] = p[key]
    return out


def _clear_exclusive(paths: set[str], notes: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for group in _EXCLUSIVE:
        if paths & set(group):
            for other in sorted(set(group) - paths):
                section, key = other.split(".")
                out.setdefault(section, {})[key] = None
    if out:
        cleared = ", ".join(f"{s}.{k}" for s, v in out.items() for k in v)
        notes.append(f"set {cleared} to null (the trainer takes one of them)")
    return out


def _mark_quantities(groups: dict[str, dict[str, Any]]) -> None:
    """A user trainer's parameters named like a batch size or a learning rate (by the
    last part of their path: ``batch_size``, ``lr``, ``learning_rate`` …) say so, so that
    the analysis fits S(B) and η*(B) on them."""
    meaning = {BATCH_PATH: "batch_size", "optimizer.lr": "learning_rate"}
    for group in groups.values():
        for entry in group.values():
            quantity = meaning.get(KNOWN_NAMES.get(entry["path"].rsplit(".", 1)[-1], ""))
            if quantity is not None:
                entry.setdefault("quantity", quantity)


def _is_batch(entry: dict[str, Any]) -> bool:
    return entry["path"] == BATCH_PATH or entry.get("quantity") == "batch_size"


def _promote_batch(groups: dict[str, dict[str, Any]], notes: list[str]) -> None:
    """Make a categorical or fixed batch size the scientific axis: batch size is what a
    study without roles most likely compares."""
    for role in ("nuisance", "fixed"):
        for name, entry in groups[role].items():
            if not _is_batch(entry):
                continue
            if role == "fixed":
                values = [entry["value"]]
            elif entry["type"] == "categorical" and "by" not in entry:
                values = entry["choices"]
            else:
                return
            axis = {"path": entry["path"], "values": values}
            axis |= {k: entry[k] for k in _OPTIONAL if k in entry}
            del groups[role][name]
            groups["scientific"][name] = axis
            notes.append(f"the source has no scientific axis: {name} ({entry['path']}) becomes it")
            return


def _grid_size(entry: dict[str, Any]) -> int | None:
    """Points of a nuisance parameter on a grid (None: continuous)."""
    if entry["type"] == "categorical":
        return len(entry.get("choices") or [])
    if entry.get("scale", "linear") != "linear" or (
        entry["type"] == "float" and "step" not in entry
    ):
        return None
    step = entry.get("step", 1)
    return math.floor(round((entry["high"] - entry["low"]) / step, 9)) + 1


def _fit_budget_to_grid(
    conf: dict[str, Any],
    sampler: dict[str, Any] | None,
    nuisance: dict[str, dict[str, Any]],
    notes: list[str],
) -> None:
    """A grid source without a trial budget: one trial per grid point (a budget larger
    than the grid is refused, the tool it came from runs the grid once)."""
    if sampler is None or sampler.get("name") != "grid":
        return
    if "trials_per_point" in conf.get("budget", {}):
        return
    sizes = [_grid_size(e) for e in nuisance.values() if "by" not in e]
    if any(s is None for s in sizes):
        return
    n = math.prod(s for s in sizes if s is not None)
    conf.setdefault("budget", {})["trials_per_point"] = n
    notes.append(f"budget.trials_per_point = {n}: the size of the grid at each point")


def trainer_section(spec: str, params: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``trainer:`` of a study for a user's own trainer ``spec`` (``module:function``,
    or a command line), with a config tree holding every parameter's path (at its first
    value, low end or fixed value: the study sets them per trial)."""
    words = shlex.split(spec)
    is_target = len(words) == 1 and ":" in spec and "/" not in spec
    section: dict[str, Any] = {"target": spec} if is_target else {"command": words}
    tree: dict[str, Any] = {}
    for p in params:
        value = p.get("value", (p.get("values") or p.get("choices") or [p.get("low")])[0])
        node = tree
        *parents, leaf = p["path"].split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    section["config"] = tree
    return section


def study_yaml(
    doc: dict[str, Any], source: str = "stepscale", trainer: str | None = None
) -> tuple[str, list[str]]:
    """(conf YAML, notes on what was added or left out) of a valid document. ``trainer``:
    a user's own trainer (``module:function`` or a command line) whose config keys the
    parameters' paths are; then nothing is left out for lack of a built-in trainer key."""
    notes: list[str] = []
    groups: dict[str, dict[str, Any]] = {"scientific": {}, "nuisance": {}, "fixed": {}}
    known = None if trainer is not None else TRAINER_PATHS
    left_out = [p for p in doc["parameters"] if known is not None and p["path"] not in known]
    kept = [p for p in doc["parameters"] if known is None or p["path"] in known]
    if left_out:
        notes.append(
            f"left out {', '.join(p['name'] for p in left_out)}: no trainer key is known for "
            "them (set their path and add them back)"
        )
    for p in kept:
        groups[p["role"]][p["name"]] = _entry(p)
    for name, entry in groups["nuisance"].items():
        if "by" in entry and entry["by"] not in groups["scientific"]:
            notes.append(f"nuisance {name}: ranges by {entry['by']} dropped (no such axis)")
            entry.pop("by")
            entry.pop("ranges")
    if trainer is not None:
        _mark_quantities(groups)
    if not groups["scientific"]:
        _promote_batch(groups, notes)
    if not groups["scientific"] and trainer is not None:
        groups["scientific"]["seed"] = {"path": "seed", "values": [0]}
        kept = [*kept, {"path": "seed", "values": [0]}]
        notes.append(
            "the source has no scientific axis: added seed (path seed) = [0]; replace it by "
            "the axis to compare (e.g. your batch size, with quantity: batch_size)"
        )
    if not groups["scientific"]:
        taken = {p["name"] for p in kept}
        used = {p["path"] for p in kept}
        alias, path, value, unit = next(a for a in _DEFAULT_AXES if a[1] not in used)
        alias = unique_alias(alias, taken)
        axis: dict[str, Any] = {"path": path, "values": [value]}
        if unit is not None:
            axis["unit"] = unit
        groups["scientific"][alias] = axis
        notes.append(
            f"the source has no scientific axis: added {alias} ({path}) = [{value}], the "
            "trainer's default; list the values to compare"
        )
    conf: dict[str, Any] = {}
    if "description" in doc:
        conf["description"] = doc["description"]
    if trainer is not None:
        conf["trainer"] = trainer_section(trainer, kept)
        paths = sorted(p["path"] for p in kept)
        for a, b in ((a, b) for a in paths for b in paths if b.startswith(a + ".")):
            notes.append(
                f"{a} and {b}: one config key cannot hold a value and keys under it; "
                "set another path: for one of them"
            )
    else:
        conf |= _clear_exclusive({p["path"] for p in kept}, notes)
    conf |= {role: group for role, group in groups.items() if group}
    if doc.get("derived"):  # derived values (sweeps.study.derived) keep their order
        conf["derived"] = {
            d["name"]: {k: v for k, v in d.items() if k != "name"} for d in doc["derived"]
        }
    if "budget" in doc:
        conf["budget"] = dict(doc["budget"])
    _fit_budget_to_grid(conf, doc.get("sampler"), groups["nuisance"], notes)
    if not groups["nuisance"] and conf.get("budget", {}).get("trials_per_point") != 1:
        conf["budget"] = {**conf.get("budget", {}), "trials_per_point": 1}
        notes.append(
            "nothing to tune: budget.trials_per_point = 1 (add a range under nuisance to tune)"
        )
    objective = doc.get("objective")
    if objective is None:
        conf["objective"] = {"kind": "final_eval_loss"}
        notes.append("the source has no objective: using final_eval_loss")
    elif objective["kind"] == "steps_to_target" and "target_loss" not in objective:
        conf["objective"] = {"kind": "final_eval_loss"}
        notes.append(
            "steps_to_target needs a target loss, which the source does not give: using "
            "final_eval_loss (set objective.kind and objective.target_loss to change it)"
        )
    else:
        conf["objective"] = dict(objective)
    if "sampler" in doc:
        conf["sampler"] = dict(doc["sampler"])
    study = f" (study {doc['name']})" if "name" in doc else ""
    header = [
        "# @package _global_",
        f"# Imported by `sweep import --format {source}`{study}.",
        *(f"# Note: {n}." for n in notes),
    ]
    body = yaml.safe_dump(
        conf, sort_keys=False, default_flow_style=None, allow_unicode=True, width=100
    )
    tail = []
    if left_out:
        tail.append("# Left out (no trainer key known; set `path:` and move them back):")
        for p in left_out:
            flow = yaml.safe_dump(
                {k: v for k, v in p.items() if k != "name"},
                default_flow_style=True,
                sort_keys=False,
                width=10_000,
            ).strip()
            tail.append(f"# {p['name']}: {flow}")
    text = "\n".join(header) + "\n" + body + ("\n".join(tail) + "\n" if tail else "")
    return text, notes


def document_to_study_yaml(doc: dict[str, Any]) -> str:
    """The study conf YAML (``# @package _global_``) of a valid document."""
    return study_yaml(doc)[0]
