"""Views of a loaded study Dataset: its axes, groups, curves and per-point summaries.

A study's axes are found by what they measure, not by alias: the batch-size axis is the
scientific parameter with ``quantity: batch_size`` in space.json, the LR the nuisance
parameter with ``quantity: learning_rate``, the sequence length the scientific one with
``quantity: seq_len``; the built-in trainer's ``data.global_batch``, ``optimizer.lr`` and
``data.seq_len`` measure these without saying so (`stepscale.rundir.quantity_of`).
Scientific axes other than the batch size split trials into *groups* (one S(B) fit each);
a categorical one is an ablation *variant*. The *x* axis of a study is its batch size,
else its first numeric scientific axis. Batch sizes and examples are counted in the
study's batch unit (:func:`dataset_batch_unit`), which every label of the report names.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xarray as xr

from stepscale.analysis.fits.records import OMIT, Record, as_json
from stepscale.analysis.fits.targets import CurveSteps, steps_at_target
from stepscale.analysis.load import FINAL_STATES, parameters
from stepscale.rundir import (
    BATCH_PATH,
    BATCH_SIZE,
    EXAMPLES,
    LEARNING_RATE,
    SEQ_LEN,
    quantity_of,
    unit_of_counts,
)

__all__ = [
    "BATCH_PATH",
    "LR_PATH",
    "SEQ_LEN_PATH",
    "Axis",
    "PointRow",
    "StudyAxes",
    "TrialSteps",
    "best_trials",
    "choose_targets",
    "curves",
    "cut_levels",
    "dataset_batch_unit",
    "eval_horizon",
    "point_rows",
    "study_axes",
    "trial_groups",
    "trial_steps",
]

LR_PATH = "optimizer.lr"
SEQ_LEN_PATH = "data.seq_len"


@dataclass(frozen=True)
class Axis:
    """A parameter of the study: alias, coordinate name in the Dataset, trainer path (its
    JSON: name and path)."""

    name: str
    coord: str = field(metadata=OMIT)
    path: str
    role: str = field(metadata=OMIT)
    categorical: bool = field(metadata=OMIT)
    # batch_size | learning_rate | seq_len (stepscale.rundir)
    quantity: str | None = field(default=None, metadata=OMIT)


@dataclass(frozen=True)
class StudyAxes(Record):
    """The axes the fits need, each None when the study does not have it."""

    scientific: tuple[Axis, ...]
    batch: Axis | None
    lr: Axis | None
    seq_len: Axis | None
    x: Axis | None
    group_axes: tuple[Axis, ...] = field(metadata=as_json("groups"))
    variant: Axis | None


def study_axes(ds: xr.Dataset) -> StudyAxes:
    """Find the study's axes from the parameter metadata of a loaded Dataset."""
    axes = []
    for meta in parameters(ds):
        values = ds[meta["coord"]].values
        categorical = values.dtype.kind in "USO" or values.dtype.kind == "b"
        quantity = quantity_of(meta["path"], meta.get("quantity"))
        axes.append(
            Axis(meta["name"], meta["coord"], meta["path"], meta["role"], categorical, quantity)
        )
    sci = tuple(a for a in axes if a.role == "scientific")
    batch = next((a for a in sci if a.quantity == BATCH_SIZE and not a.categorical), None)
    lr = next(
        (
            a
            for a in axes
            if a.role == "nuisance" and a.quantity == LEARNING_RATE and not a.categorical
        ),
        None,
    )
    seq = next((a for a in sci if a.quantity == SEQ_LEN and not a.categorical), None)
    x = batch or next((a for a in sci if not a.categorical), None)
    groups = tuple(a for a in sci if a is not batch)
    variant = next((a for a in groups if a.categorical), None) if batch is not None else None
    return StudyAxes(sci, batch, lr, seq, x, groups, variant)


def dataset_batch_unit(ds: xr.Dataset) -> str:
    """What the study's batch sizes count (``sequences``, ``examples`` …).

    The ``batch_unit`` attribute :func:`analysis.load.load` sets; for a Dataset without it
    (a results.nc written before), the ``units`` of its ``examples_per_step``
    coordinate, else the rule of a run dir without a stated unit
    (:func:`stepscale.rundir.unit_of_counts` of its per-step counts).
    """
    unit = ds.attrs.get("batch_unit")
    if isinstance(unit, str) and unit.strip():
        return unit.strip()
    if "examples_per_step" in ds.coords:
        unit = ds["examples_per_step"].attrs.get("units")
        if isinstance(unit, str) and unit.strip():
            return unit.strip()
    if "tokens_per_step" in ds.coords and "examples_per_step" in ds.coords:
        tokens = np.asarray(ds["tokens_per_step"].values, dtype=float)
        examples = np.asarray(ds["examples_per_step"].values, dtype=float)
        return unit_of_counts(zip(tokens.tolist(), examples.tolist(), strict=True))
    return EXAMPLES


def _value_text(v: Any) -> str:
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))
    return str(v.item() if isinstance(v, np.generic) else v)


def trial_groups(ds: xr.Dataset, axes: StudyAxes) -> np.ndarray:
    """Per trial, the label of its group: ``alias=value`` of the non-batch scientific
    axes joined by ``,`` (the point label without the batch size), or ``all``."""
    n = ds.sizes["trial"]
    if not axes.group_axes or axes.batch is None:
        return np.array(["all"] * n, dtype=str)
    cols = [[f"{a.name}={_value_text(v)}" for v in ds[a.coord].values] for a in axes.group_axes]
    return np.array([",".join(parts) for parts in zip(*cols, strict=True)], dtype=str)


# ---------------------------------------------------------------- curves and targets


def eval_horizon(ds: xr.Dataset) -> np.ndarray:
    """Per trial, the last step with a finite eval loss (NaN without any)."""
    if "eval_loss" not in ds:
        return np.full(ds.sizes["trial"], np.nan)
    ok = np.isfinite(ds["eval_loss"].values)
    steps = ds["step"].values.astype(float)
    last = np.where(ok, steps[None, :], -np.inf).max(axis=1, initial=-np.inf)
    return np.where(np.isfinite(last), last, np.nan)


def curves(ds: xr.Dataset, mask: np.ndarray | None = None) -> dict[str, tuple[Any, Any]]:
    """trial id → (steps, eval losses) at the evaluated steps, for the trials in ``mask``."""
    if "eval_loss" not in ds:
        return {}
    steps = ds["step"].values
    loss = ds["eval_loss"].values
    out = {}
    for i, tid in enumerate(ds["trial"].values.tolist()):
        if mask is not None and not mask[i]:
            continue
        ok = np.isfinite(loss[i])
        out[tid] = (steps[ok], loss[i][ok])
    return out


def _round_sig(x: float, digits: int = 3) -> float:
    if x == 0 or not math.isfinite(x):
        return x
    return float(f"{x:.{digits}g}")


def choose_targets(
    ds: xr.Dataset, axes: StudyAxes, given: Sequence[float] = ()
) -> tuple[float | None, tuple[float, ...], tuple[float, ...]]:
    """(primary target, all targets ascending, the ones chosen automatically).

    The primary target is the study's ``target_loss``, else the first given one; the
    study's ``objective.report_targets`` count as given. With
    fewer than three targets and a batch-size axis, targets are added between the
    loss every point's best tune trial reaches and the median initial eval loss (5, 15,
    30 and 50% of the way up), so B_crit can be fitted against the target. They are
    candidates: the analysis keeps only those whose S(B) fit is well-posed. Curves cut
    at a target (``stop_at_target``) end at it, so every automatic target is then
    easier than the study's.
    """
    study_target = ds.attrs.get("target_loss")
    explicit = [float(t) for t in ([study_target] if study_target is not None else [])]
    explicit += [float(t) for t in json.loads(ds.attrs.get("report_targets") or "[]")]
    explicit += [float(t) for t in given]
    explicit = list(dict.fromkeys(t for t in explicit if math.isfinite(t)))
    auto: list[float] = []
    if len(explicit) < 3 and axes.batch is not None and "eval_loss" in ds:
        loss = ds["eval_loss"].values
        tune = ds["kind"].values == "tune"
        points = ds["point"].values
        best = []
        for p in dict.fromkeys(points.tolist()):
            rows = loss[(points == p) & tune]
            if rows.size and np.isfinite(rows).any():
                best.append(float(np.nanmin(rows)))
        first = loss[:, 0][np.isfinite(loss[:, 0])] if loss.shape[1] else np.empty(0)
        if best and first.size:
            low, top = max(best), float(np.median(first))
            if top > low:
                auto = [_round_sig(low + f * (top - low)) for f in (0.05, 0.15, 0.3, 0.5)]
                # Skip automatic targets within 5% of a given one: they add nothing.
                auto = [
                    t
                    for t in dict.fromkeys(auto)
                    if t > low and all(abs(t - e) > 0.05 * abs(e) for e in explicit)
                ]
    primary = explicit[0] if explicit else (auto[len(auto) // 2] if auto else None)
    return primary, tuple(sorted({*explicit, *auto})), tuple(sorted(auto))


def cut_levels(ds: xr.Dataset) -> np.ndarray:
    """Per trial, the loss its run was stopped at (``stop_at_target``: status reason
    "target reached", at the trial's ``target_loss``), else NaN. Such a curve ends at
    its first evaluation below that loss: harder targets cannot be measured on it."""
    n = ds.sizes["trial"]
    if "reason" not in ds.coords or "target_loss" not in ds.coords:
        return np.full(n, np.nan)
    reason = ds["reason"].values.astype(str)
    level = np.array(
        [
            float(v) if isinstance(v, (int, float, np.integer, np.floating)) else math.nan
            for v in ds["target_loss"].values.tolist()
        ],
        dtype=float,
    )
    return np.where(reason == "target reached", level, np.nan)


@dataclass(frozen=True)
class TrialSteps:
    """Per trial (aligned with the Dataset's ``trial``), steps to each target.

    ``steps[L]`` is the first evaluated step with eval loss strictly below L (NaN if not
    reached: censored at ``horizon``, the last evaluated step), ``interp[L]`` the
    log-linear interpolated crossing.
    """

    trial: tuple[str, ...]
    horizon: np.ndarray
    steps: Mapping[float, np.ndarray]
    interp: Mapping[float, np.ndarray]


def trial_steps(ds: xr.Dataset, targets: Sequence[float]) -> TrialSteps:
    """Recompute every trial's steps to each target from its stored eval-loss curve."""
    ids = ds["trial"].values.tolist()
    cv = curves(ds)
    dummy = dict.fromkeys(cv, 1.0)
    steps: dict[float, np.ndarray] = {}
    interp: dict[float, np.ndarray] = {}
    for t in targets:
        if cv:
            res: CurveSteps = steps_at_target(cv, dummy, t)
            pos = {tid: i for i, tid in enumerate(res.trials)}
            steps[t] = np.array([res.steps[pos[i]] for i in ids])
            interp[t] = np.array([res.steps_interp[pos[i]] for i in ids])
        else:
            steps[t] = interp[t] = np.full(len(ids), np.nan)
    return TrialSteps(tuple(ids), eval_horizon(ds), steps, interp)


# ------------------------------------------------------------------- per-point rows


def best_trials(ds: xr.Dataset) -> dict[str, int]:
    """Per point, the index of its best tune trial: lowest objective among final trials,
    else (nothing final yet) lowest eval loss reached. Points without any eval are left out."""
    points = ds["point"].values
    tune = ds["kind"].values == "tune"
    obj = ds["objective"].values
    final = np.isin(ds["state"].values, list(FINAL_STATES))
    loss = ds["eval_loss"].values if "eval_loss" in ds else None
    out: dict[str, int] = {}
    for p in dict.fromkeys(points.tolist()):
        rows = np.flatnonzero((points == p) & tune)
        if rows.size == 0:
            rows = np.flatnonzero(points == p)
        ok = rows[final[rows] & np.isfinite(obj[rows])]
        if ok.size:
            out[p] = int(ok[np.argmin(obj[ok])])
            continue
        if loss is not None:
            best = np.array(
                [np.nanmin(loss[i]) if np.isfinite(loss[i]).any() else np.inf for i in rows]
            )
            if np.isfinite(best).any():
                out[p] = int(rows[np.argmin(best)])
    return out


@dataclass(frozen=True)
class PointRow(Record):
    """One scientific point at the primary target (NaN/"" where not applicable)."""

    point: str
    group: str
    x: float
    n_tune: int
    n_confirm: int
    states: Mapping[str, int]
    n_reached: int
    steps_to_target: float
    censored_at: float
    fastest_trial: str
    examples_to_target: float
    tokens_to_target: float
    flops_to_target: float
    wall_s_to_target: float
    best_trial: str
    best_objective: float
    best_eval_loss: float
    steps_spent: float
    flops_spent: float
    wall_s_spent: float

    def _json(self, fields: dict[str, Any]) -> dict[str, Any]:
        """The states by name."""
        return fields | {"states": dict(sorted(self.states.items()))}


def _at_step(ds: xr.Dataset, var: str, i: int, step: float) -> float:
    """A trial's logged ``var`` at ``step``, linearly interpolated between logged steps."""
    if var not in ds or not math.isfinite(step):
        return math.nan
    v = ds[var].values[i]
    ok = np.isfinite(v)
    if not ok.any():
        return math.nan
    return float(np.interp(step, ds["step"].values[ok], v[ok]))


def _num(ds: xr.Dataset, name: str) -> np.ndarray:
    if name not in ds.coords:
        return np.full(ds.sizes["trial"], np.nan)
    v = ds[name].values
    return v.astype(float) if v.dtype.kind in "iuf" else np.full(v.shape, np.nan)


def point_rows(
    ds: xr.Dataset,
    axes: StudyAxes,
    groups: np.ndarray,
    ts: TrialSteps,
    target: float | None,
) -> tuple[PointRow, ...]:
    """Per point (in study order): trial counts by state, steps to ``target`` (fewest over
    tune trials, or censored at the largest horizon), the cost of getting there (examples,
    tokens, FLOPs, wall time of the fastest trial) and the compute spent on the point."""
    points = ds["point"].values
    kinds = ds["kind"].values
    states = ds["state"].values
    x = _num(ds, axes.x.coord) if axes.x is not None else np.full(points.size, np.nan)
    steps = ts.steps[target] if target is not None else np.full(points.size, np.nan)
    eps, tps, fps = (
        _num(ds, k) for k in ("examples_per_step", "tokens_per_step", "flops_per_step")
    )
    done, wall = _num(ds, "steps_done"), _num(ds, "status_wall_s")
    bel = _num(ds, "best_eval_loss")
    if "eval_loss" in ds:
        loss = ds["eval_loss"].values
        curve_best = np.array(
            [np.nanmin(r) if np.isfinite(r).any() else np.nan for r in loss], dtype=float
        )
        bel = np.where(np.isfinite(bel), bel, curve_best)
    best = best_trials(ds)
    ids = ds["trial"].values
    out = []
    for p in dict.fromkeys(points.tolist()):
        rows = np.flatnonzero(points == p)
        tune = rows[kinds[rows] == "tune"]
        pool = tune if tune.size else rows
        reached = pool[np.isfinite(steps[pool])]
        if reached.size:
            f = int(reached[np.argmin(steps[reached])])
            s = float(steps[f])
            fastest, cens = str(ids[f]), math.nan
            cost = (s * eps[f], s * tps[f], s * fps[f], _at_step(ds, "wall_s", f, s))
        else:
            hz = ts.horizon[pool][np.isfinite(ts.horizon[pool])]
            s, fastest, cens = math.nan, "", float(hz.max()) if hz.size else math.nan
            cost = (math.nan,) * 4
        bi = best.get(p)
        counts: dict[str, int] = {}
        for st in states[rows].tolist():
            counts[st] = counts.get(st, 0) + 1
        spent = np.nan_to_num(done[rows])
        out.append(
            PointRow(
                point=p,
                group=str(groups[rows[0]]),
                x=float(x[rows[0]]),
                n_tune=int(tune.size),
                n_confirm=int((kinds[rows] == "confirm").sum()),
                states=counts,
                n_reached=int(reached.size),
                steps_to_target=s,
                censored_at=cens,
                fastest_trial=fastest,
                examples_to_target=float(cost[0]),
                tokens_to_target=float(cost[1]),
                flops_to_target=float(cost[2]),
                wall_s_to_target=float(cost[3]),
                best_trial="" if bi is None else str(ids[bi]),
                best_objective=math.nan if bi is None else float(ds["objective"].values[bi]),
                best_eval_loss=float(np.nanmin(bel[pool]))
                if np.isfinite(bel[pool]).any()
                else math.nan,
                steps_spent=float(spent.sum()),
                flops_spent=float(np.nansum(spent * fps[rows])),
                wall_s_spent=float(np.nansum(wall[rows])),
            )
        )
    return tuple(out)


def point_values(ds: xr.Dataset, axes: StudyAxes) -> dict[str, dict[str, Any]]:
    """point label → {alias: value} of its scientific parameters."""
    out: dict[str, dict[str, Any]] = {}
    points = ds["point"].values.tolist()
    for i, p in enumerate(points):
        if p in out:
            continue
        out[p] = {
            a.name: json.loads(json.dumps(ds[a.coord].values[i].item())) for a in axes.scientific
        }
    return out
