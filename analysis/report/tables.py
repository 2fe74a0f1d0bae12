"""The report's tables: one row per trial (steps_to_target.csv and its column meanings),
and the command that refits fits.json's ``steps`` from it."""

from __future__ import annotations

import csv
import io
import shlex
from typing import Any

import numpy as np
import xarray as xr

from stepscale.analysis.load import parameters
from stepscale.analysis.report.numbers import csv_num
from stepscale.analysis.study import StudyAnalysis

REFIT = (
    "sweep fit steps --csv report/steps_to_target.csv --batch-col batch "
    "--steps-col steps_to_target --horizon-col horizon --group-col group"
)
# Stands for the study's batch unit in CSV_COLUMNS (see csv_columns).
BATCH_UNIT = "the study's batch unit"

CSV_COLUMNS: tuple[tuple[str, str], ...] = (
    ("trial", "trial id `<point label>/<n>`"),
    ("point", "point label"),
    (
        "group",
        "values of the scientific axes other than the batch size (`all` when none); "
        "`--group-col group` fits each group apart, as the report does",
    ),
    ("seed", "train.seed of the trial"),
    ("state", "complete, pruned, diverged, failed or running"),
    ("batch", f"batch size in {BATCH_UNIT} (the data.global_batch axis, else examples per step)"),
    ("target", "the primary target loss of steps_to_target"),
    (
        "steps_to_target",
        "first evaluated step with eval loss strictly below target; empty "
        "when not reached (right-censored at horizon)",
    ),
    ("steps_to_target_interp", "the crossing interpolated log-linearly between evaluations"),
    ("reached", "1 when the target was reached, else 0"),
    ("horizon", "last evaluated step (steps): how far the trial ran; the censoring horizon"),
    ("examples_to_target", f"steps_to_target × examples per step ({BATCH_UNIT})"),
    ("tokens_to_target", "steps_to_target × tokens per step (tokens)"),
    ("flops_to_target", "steps_to_target × FLOPs per step"),
    ("wall_s_to_target", "logged wall time at steps_to_target (s)"),
    ("objective", "the value told to the sampler (penalised when censored or diverged)"),
    ("best_eval_loss", "lowest eval loss of the trial"),
    ("final_eval_loss", "last eval loss of the trial"),
    ("steps_done", "optimizer steps the trial ran"),
    ("examples_per_step", f"{BATCH_UNIT} per step"),
    ("tokens_per_step", "tokens per step"),
    ("flops_per_step", "FLOPs per step"),
)


def csv_columns(batch_unit: str) -> tuple[tuple[str, str], ...]:
    """:data:`CSV_COLUMNS` with the study's batch unit (``sequences``, ``examples`` …) in
    place of :data:`BATCH_UNIT`."""
    return tuple((c, d.replace(BATCH_UNIT, batch_unit)) for c, d in CSV_COLUMNS)


def refit_command(batch_unit: str) -> str:
    """The `sweep fit steps` command that refits ``fits.json``'s ``steps`` from
    steps_to_target.csv, with the study's batch unit."""
    return f"{REFIT} --batch-unit {shlex.quote(batch_unit)}"


def column_name(alias: str, taken: set[str]) -> str:
    name = alias if alias not in taken else f"param_{alias}"
    taken.add(name)
    return name


def steps_table(ds: xr.Dataset, a: StudyAnalysis) -> tuple[list[str], list[list[str]]]:
    """Header and rows of steps_to_target.csv: one row per tune trial, in trial order."""
    tune = np.flatnonzero(ds["kind"].values == "tune")
    if tune.size == 0:
        tune = np.arange(ds.sizes["trial"])
    t = a.target
    ts = a.trial_steps
    n = ds.sizes["trial"]

    def num(name: str) -> np.ndarray:
        if name not in ds.coords:
            return np.full(n, np.nan)
        v = ds[name].values
        return v.astype(float) if v.dtype.kind in "iuf" else np.full(n, np.nan)

    eps, tps, fps = num("examples_per_step"), num("tokens_per_step"), num("flops_per_step")
    batch = num(a.axes.batch.coord) if a.axes.batch is not None else eps
    steps = ts.steps[t] if t is not None else np.full(n, np.nan)
    interp = ts.interp[t] if t is not None else np.full(n, np.nan)
    wall = np.full(n, np.nan)
    if "wall_s" in ds:
        wv, st = ds["wall_s"].values, ds["step"].values
        for i in np.flatnonzero(np.isfinite(steps)):
            ok = np.isfinite(wv[i])
            if ok.any():
                wall[i] = np.interp(steps[i], st[ok], wv[i][ok])
    cols: dict[str, Any] = {
        "trial": ds["trial"].values,
        "point": ds["point"].values,
        "group": a.trial_group,
        "seed": ds["seed"].values,
        "state": ds["state"].values,
        "batch": batch,
        "target": np.full(n, np.nan if t is None else t),
        "steps_to_target": steps,
        "steps_to_target_interp": interp,
        "reached": np.isfinite(steps).astype(int),
        "horizon": ts.horizon,
        "examples_to_target": steps * eps,
        "tokens_to_target": steps * tps,
        "flops_to_target": steps * fps,
        "wall_s_to_target": wall,
        "objective": num("objective"),
        "best_eval_loss": num("best_eval_loss"),
        "final_eval_loss": num("final_eval_loss"),
        "steps_done": num("steps_done"),
        "examples_per_step": eps,
        "tokens_per_step": tps,
        "flops_per_step": fps,
    }
    taken = set(cols)
    for meta in parameters(ds):
        cols[column_name(meta["name"], taken)] = ds[meta["coord"]].values
    for target in a.targets:
        cols[column_name(f"steps_at_{target:g}", taken)] = ts.steps[target]
    header = list(cols)
    rows = [[csv_num(item(cols[c][i])) for c in header] for i in tune]
    return header, rows


def item(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


def csv_text(header: list[str], rows: list[list[str]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()
