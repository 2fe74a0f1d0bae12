"""A run directory → one ``xarray.Dataset`` with dims (trial, step), and its NetCDF file.

The run directory is the contract of docs/run-dir.md. The dataset holds:

- dims ``trial`` (ids ``<point label>/<n>``, ordered by point as in study.json, then by
  trial number) and ``step`` (the union of every trial's logged steps);
- one float data variable per metric of metrics.jsonl (NaN where a trial has no record
  of it at that step);
- per-trial coordinates: ``point``, ``number``, ``kind`` (tune/confirm), ``seed``,
  ``state``, ``running`` (no final status yet), ``objective``, ``attempts``, ``started``,
  ``ended`` (trial.json); every scalar field of status.json (``steps_done``,
  ``steps_to_target``, ``steps_to_target_interp``, ``best_eval_loss``,
  ``final_eval_loss``, ``tokens_per_step``, ``examples_per_step``, ``flops_per_step`` …)
  under its own name, or ``status_<name>`` when the name is taken (``status_wall_s``,
  the trial's total wall time; ``status_state``); one coordinate per scientific,
  nuisance and fixed parameter, named by its alias, or ``param_<alias>`` when the alias
  is taken (``param_lr``, beside the logged ``lr`` metric) — each carries ``role``,
  ``path`` and ``alias`` attributes, and ``attrs["parameters"]`` lists them all;
- the derived 2-D coordinates ``tokens`` and ``examples`` = step × per-step count (the
  logged value where one was logged);
- attributes: ``study``, ``objective_kind``, ``target_loss`` (absent without a
  target), ``report_targets`` (JSON list of the study's further targets, when it has some), ``scientific`` and ``parameters`` (JSON), ``partial`` (1 while a trial runs or
  run.json has no end time), trial counts, ``batch_unit``: what a batch size counts
  (``sequences``, ``examples`` …; :func:`study_batch_unit`), and ``branches`` (JSON, only
  when `sweep branch` measured the critical batch over training:
  `stepscale.analysis.branching`).

Coordinates with a unit carry it as their ``units`` attribute: ``examples``,
``examples_per_step`` and the batch-size parameter in ``batch_unit``, other parameters in
the ``unit`` space.json gives them.

Strings are numpy unicode arrays and flags are bool, so the dataset written by
:func:`save` reads back identical (:func:`open_results`).

``analysis.load`` is the function :func:`load` (exported by the package); import the
module's other names with ``from analysis.load import …``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from stepscale import rundir
from stepscale.analysis.branching import dataset_attr
from stepscale.analysis.trial_files import (
    RunDirError,
    TrialRecord,
    per_step_count,
    read_json,
    read_trials,
    trial_dirs,
    trial_state,
)
from stepscale.files import atomic_path
from stepscale.rundir import BATCH_SIZE, quantity_of, unit_of_counts

if TYPE_CHECKING:
    import xarray as xr

__all__ = [
    "FINAL_STATES",
    "RunDirError",
    "load",
    "open_results",
    "parameters",
    "read_json",
    "save",
]

SCHEMA = "stepscale.results/v1"
FINAL_STATES = rundir.FINAL_STATES
# Metric names of the contract; reserved even when no trial logged them, so that the name
# of a parameter or status coordinate does not depend on which metrics happen to exist.
KNOWN_METRICS = rundir.METRIC_KEYS
# Metrics that become the derived (trial, step) coordinates instead of data variables.
DERIVED = rundir.PER_STEP_COUNTS
TRIAL_FIELDS = rundir.TRIAL_COORDS
# Status fields always present as coordinates (NaN when no trial has them yet).
STATUS_FIELDS = rundir.STATUS_COORDS
UNITS = {
    "step": "steps",
    "steps_done": "steps",
    "steps_to_target": "steps",
    "steps_to_target_interp": "steps",
    "tokens": "tokens",
    "tokens_per_step": "tokens",
    "flops_per_step": "FLOPs",
    "wall_s": "s",
    "status_wall_s": "s",
}
# Coordinates counted in the study's batch unit (the ``batch_unit`` attribute).
BATCH_UNIT_COORDS = ("examples", "examples_per_step")


# ------------------------------------------------------------------------- columns


def _column(values: Sequence[Any]) -> np.ndarray:
    """A typed 1-D array: int64, float64 (None → NaN), bool, or unicode (None → "")."""
    present = [v for v in values if v is not None]
    if not present:
        return np.full(len(values), np.nan)
    if all(isinstance(v, bool) for v in present) and len(present) == len(values):
        return np.array(values, dtype=bool)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        if len(present) == len(values):
            return np.array(values, dtype=np.int64)
        return np.array([math.nan if v is None else v for v in values], dtype=float)
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return np.array([math.nan if v is None else v for v in values], dtype=float)
    text = ["" if v is None else v if isinstance(v, str) else _text(v) for v in values]
    return np.array(text, dtype=str)


def _text(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _unique_name(name: str, taken: set[str], prefix: str) -> str:
    out = name if name not in taken else f"{prefix}_{name}"
    while out in taken:
        out = f"{prefix}_{out}"
    taken.add(out)
    return out


# ------------------------------------------------------------------------ the loader


def _axes(study: Mapping[str, Any], space: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """alias → (role, path) from space.json's parameters and study.json's lists."""
    out: dict[str, tuple[str, str]] = {}
    for p in space.get("parameters", []) or []:
        if isinstance(p, Mapping) and "name" in p:
            out[str(p["name"])] = (str(p.get("role", "")), str(p.get("path", "")))
    for d in (
        space.get("derived", []) or []
    ):  # values computed from the others (sweeps.study.derived)
        if isinstance(d, Mapping) and "name" in d:
            out[str(d["name"])] = ("derived", str(d.get("path", "")))
    for role in ("nuisance", "fixed", "scientific"):
        for s in study.get(role, []) or []:
            if isinstance(s, Mapping) and "name" in s:
                out[str(s["name"])] = (role, str(s.get("path", "")))
    return out


def _space_quantities(space: Mapping[str, Any]) -> dict[str, str]:
    """alias → what the parameter measures (`stepscale.rundir.quantity_of`)."""
    out = {}
    for p in space.get("parameters", []) or []:
        if isinstance(p, Mapping) and "name" in p:
            quantity = quantity_of(str(p.get("path", "")), p.get("quantity"))
            if quantity is not None:
                out[str(p["name"])] = quantity
    return out


def _space_units(space: Mapping[str, Any]) -> dict[str, str]:
    """alias → unit of the parameters of space.json that state one."""
    out = {}
    for p in space.get("parameters", []) or []:
        if isinstance(p, Mapping) and "name" in p and isinstance(p.get("unit"), str):
            out[str(p["name"])] = str(p["unit"])
    return out


def study_batch_unit(space: Mapping[str, Any], trials: Sequence[TrialRecord] = ()) -> str:
    """The unit of a study's batch sizes (``sequences``, ``examples`` …).

    The ``unit`` space.json gives the parameter that measures the batch size (the
    scientific axis, else a fixed value); a run directory without one (written before
    space.json stated it, or by another writer) counts sequences when its trials' steps
    hold more tokens than examples, else examples (:func:`stepscale.rundir.unit_of_counts`).
    """
    params = [p for p in space.get("parameters", []) or [] if isinstance(p, Mapping)]
    for role in ("scientific", "fixed"):
        for p in params:
            unit = p.get("unit")
            measures = quantity_of(str(p.get("path", "")), p.get("quantity"))
            ours = p.get("role") == role and measures == BATCH_SIZE
            if ours and isinstance(unit, str) and unit.strip():
                return unit.strip()
    return unit_of_counts(
        (
            per_step_count(t, "tokens_per_step", "tokens"),
            per_step_count(t, "examples_per_step", "examples"),
        )
        for t in trials
    )


def load(run_dir: str | os.PathLike[str]) -> xr.Dataset:
    """Read every trial of a run directory into a Dataset with dims (trial, step).

    See the module docstring for the variables, coordinates and attributes. Running
    trials (no final state) are included and marked by ``running``. Raises
    :class:`RunDirError` for a missing directory, no trials, or an unreadable file.
    """
    import xarray as xr  # imported here: `analysis` is imported by every `sweep` command

    root = Path(run_dir)
    if not root.exists():
        raise RunDirError(f"run directory {root} does not exist")
    if not root.is_dir():
        raise RunDirError(f"run directory {root} is not a directory")
    study = read_json(root / rundir.STUDY_JSON) or {}
    space = read_json(root / rundir.SPACE_JSON) or {}
    run = read_json(root / rundir.RUN_JSON)
    dirs = trial_dirs(root)
    if not dirs:
        raise RunDirError(f"run directory {root} holds no trials (nothing under {root}/trials/)")
    trials = read_trials(dirs)
    unit = study_batch_unit(space, trials)
    order = {
        str(p.get("label")): i
        for i, p in enumerate(study.get("points", []) or [])
        if isinstance(p, Mapping)
    }
    trials.sort(key=lambda t: (order.get(t.point, len(order)), t.point, t.number))
    ids = [t.id for t in trials]
    if len(set(ids)) != len(ids):
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        raise RunDirError(f"run directory {root}: duplicate trial ids {dupes[:5]}")

    all_steps = (
        np.unique(np.concatenate([t.steps for t in trials]))
        if any(t.steps.size for t in trials)
        else np.empty(0, np.int64)
    )
    metric_names = sorted({k for t in trials for k in t.metrics})
    n_t, n_s = len(trials), all_steps.size
    grids = {k: np.full((n_t, n_s), np.nan) for k in metric_names}
    for i, t in enumerate(trials):
        idx = np.searchsorted(all_steps, t.steps)
        for k, v in t.metrics.items():
            grids[k][i, idx] = v

    taken = {"trial", "step", *TRIAL_FIELDS}
    data_vars: dict[str, Any] = {}
    for k in metric_names:
        if k in DERIVED:
            continue
        # NetCDF (HDF5) takes '/' as a group separator: a framework's tag such as
        # TensorBoard's `eval/runtime` becomes the variable `eval_runtime` (its name kept).
        name = _unique_name(k.replace("/", "_"), taken, "metric")
        attrs = _unit_attrs(k, unit) | ({"metric": k} if "/" in k else {})
        data_vars[name] = (("trial", "step"), grids[k], attrs)
    taken |= set(KNOWN_METRICS)

    states = [trial_state(t) for t in trials]
    coords: dict[str, Any] = {
        "trial": ("trial", np.array(ids, dtype=str)),
        "step": ("step", all_steps.astype(np.int64), _unit_attrs("step", unit)),
        "point": ("trial", np.array([t.point for t in trials], dtype=str)),
        "number": ("trial", np.array([t.number for t in trials], dtype=np.int64)),
        "kind": ("trial", np.array([str(t.info.get("kind") or "tune") for t in trials], str)),
        "seed": ("trial", _column([_scalar(t.info.get("seed")) for t in trials])),
        "state": ("trial", np.array(states, dtype=str)),
        "running": ("trial", np.array([s not in FINAL_STATES for s in states], dtype=bool)),
        "objective": ("trial", _float_column([t.info.get("objective") for t in trials])),
        "attempts": ("trial", _column([_scalar(t.info.get("attempts")) for t in trials])),
        "started": ("trial", _str_column([t.info.get("started") for t in trials])),
        "ended": ("trial", _str_column([t.info.get("ended") for t in trials])),
    }

    axes = _axes(study, space)
    param_units = _space_units(space)
    quantities = _space_quantities(space)
    params_meta = []
    for role in ("scientific", "nuisance", "fixed", "derived"):
        aliases = list(
            dict.fromkeys(
                [a for a, (r, _) in axes.items() if r == role]
                + [a for t in trials for a in (t.info.get(role) or {})]
            )
        )
        for alias in aliases:
            values = [_param_value(t, role, alias, study) for t in trials]
            name = _unique_name(alias, taken, "param")
            path = axes.get(alias, ("", ""))[1]
            attrs = {"role": role, "path": path, "alias": alias}
            quantity = quantities.get(alias, quantity_of(path, None))
            if quantity == BATCH_SIZE:
                attrs["units"] = unit
            elif alias in param_units:
                attrs["units"] = param_units[alias]
            coords[name] = ("trial", _column(values), attrs)
            params_meta.append(
                {"name": alias, "coord": name, "role": role, "path": path, "quantity": quantity}
            )

    status_keys = list(STATUS_FIELDS) + sorted(
        {k for t in trials for k, v in t.status.items() if _is_scalar(v)} - set(STATUS_FIELDS)
    )
    for key in status_keys:
        name = _unique_name(key, taken, "status")
        values = [_scalar(t.status.get(key)) for t in trials]
        if key in ("tokens_per_step", "examples_per_step"):
            metric = "tokens" if key == "tokens_per_step" else "examples"
            col: np.ndarray = np.array([per_step_count(t, key, metric) for t in trials])
        else:
            col = _column(values)
        coords[name] = ("trial", col, _unit_attrs(name, unit))

    for metric, per_step_key in DERIVED.items():
        per = np.asarray(coords[per_step_key][1], dtype=float)
        derived = all_steps[None, :] * per[:, None]
        if metric in grids:
            logged = np.isfinite(grids[metric])
            derived = np.where(logged, grids[metric], derived)
        coords[metric] = (("trial", "step"), derived, _unit_attrs(metric, unit))

    n_running = sum(s not in FINAL_STATES for s in states)
    ended = run.get("ended") if isinstance(run, Mapping) else None
    partial = n_running > 0 or (isinstance(run, Mapping) and ended is None)
    objective = study.get("objective") or {}
    attrs: dict[str, Any] = {
        "schema": SCHEMA,
        "study": str(study.get("name") or root.resolve().name),
        "objective_kind": str(objective.get("kind") or ""),
        "scientific": json.dumps(study.get("scientific") or [], sort_keys=True),
        "parameters": json.dumps(params_meta, sort_keys=True),
        "partial": int(partial),
        "n_trials": n_t,
        "n_running": int(n_running),
        "created": str(study.get("created") or ""),
        "run_started": str((run or {}).get("started") or ""),
        "run_ended": str(ended or ""),
        "batch_unit": unit,
    }
    target = objective.get("target_loss")
    if isinstance(target, (int, float)) and not isinstance(target, bool):
        attrs["target_loss"] = float(target)
    level = objective.get("claim_level")  # of claims with statistics (analysis.claims)
    if isinstance(level, (int, float)) and not isinstance(level, bool):
        attrs["claim_level"] = float(level)
    more = [
        float(t)
        for t in objective.get("report_targets") or []
        if isinstance(t, (int, float)) and not isinstance(t, bool)
    ]
    if more:
        attrs["report_targets"] = json.dumps(more)
    branches = dataset_attr(root)
    if branches is not None:
        attrs["branches"] = branches
    return xr.Dataset(data_vars=data_vars, coords=coords, attrs=attrs)


def _unit_attrs(name: str, batch_unit: str) -> dict[str, str]:
    if name in BATCH_UNIT_COORDS:
        return {"units": batch_unit}
    return {"units": UNITS[name]} if name in UNITS else {}


def _is_scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def _scalar(v: Any) -> Any:
    return v if _is_scalar(v) else _text(v)


def _float_column(values: Iterable[Any]) -> np.ndarray:
    return np.array(
        [
            float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan
            for v in values
        ],
        dtype=float,
    )


def _str_column(values: Iterable[Any]) -> np.ndarray:
    return np.array(["" if v is None else str(v) for v in values], dtype=str)


def _param_value(t: TrialRecord, role: str, alias: str, study: Mapping[str, Any]) -> Any:
    group = t.info.get(role) or {}
    if alias in group:
        return _scalar(group[alias])
    if role == "scientific":
        for p in study.get("points", []) or []:
            if isinstance(p, Mapping) and p.get("label") == t.point:
                return _scalar((p.get("values") or {}).get(alias))
    return None


# ------------------------------------------------------------------- NetCDF and meta


def save(ds: xr.Dataset, path: str | os.PathLike[str]) -> Path:
    """Write ``ds`` as NetCDF (engine h5netcdf) atomically; returns the path.

    The (trial, step) arrays are mostly NaN (trials log at different steps and stop at
    different horizons): zlib level 1 makes the file ~7× smaller for little time.
    """
    p = Path(path)
    encoding = {
        name: {"zlib": True, "complevel": 1}
        for name, v in ds.variables.items()
        if v.ndim == 2 and v.dtype.kind == "f"
    }
    with atomic_path(p) as tmp:
        ds.to_netcdf(tmp, engine="h5netcdf", encoding=encoding)
    return p


def open_results(path: str | os.PathLike[str]) -> xr.Dataset:
    """Read a dataset written by :func:`save` fully into memory."""
    import xarray as xr

    return xr.load_dataset(path, engine="h5netcdf")


def parameters(ds: xr.Dataset, role: str | None = None) -> list[dict[str, str]]:
    """The parameter coordinates of a loaded dataset: name (alias), coord, role, path."""
    meta = json.loads(ds.attrs.get("parameters", "[]"))
    return [m for m in meta if role is None or m["role"] == role]
