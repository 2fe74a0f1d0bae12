"""Ablation figure: best objective so far vs number of trials, per variant, with the
bootstrap band of the best of n random trials; one panel per batch size."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr

from stepscale.analysis.ablation import best_so_far
from stepscale.analysis.analyze import usable_objective
from stepscale.analysis.figures import style
from stepscale.analysis.load import FINAL_STATES
from stepscale.analysis.study import StudyAnalysis

__all__ = ["BestSoFarFigure", "BestSoFarLine", "best_so_far_figure", "draw_best_so_far"]


@dataclass(frozen=True)
class BestSoFarLine:
    """One variant at one batch size."""

    variant: str
    n: tuple[int, ...]
    best: tuple[float, ...]
    lo: tuple[float, ...]
    hi: tuple[float, ...]


@dataclass(frozen=True)
class BestSoFarFigure:
    """Panels (batch size, lines per variant)."""

    axis: str
    objective_kind: str
    panels: tuple[tuple[float, tuple[BestSoFarLine, ...]], ...]


def best_so_far_figure(a: StudyAnalysis, ds: xr.Dataset) -> BestSoFarFigure | None:
    """The record of the best-so-far figure (None unless the study is an ablation)."""
    axis = a.axes.variant
    if axis is None or a.ablation is None:
        return None
    rows = (ds["kind"].values == "tune") & np.isin(ds["state"].values, list(FINAL_STATES))
    var = ds[axis.coord].values.astype(str)
    b = (
        ds[a.axes.batch.coord].values.astype(float)
        if a.axes.batch is not None
        else np.full(var.size, np.nan)
    )
    number = ds["number"].values
    obj = usable_objective(ds)
    panels = []
    for bi, row in enumerate(a.ablation.rows):
        size = row.batch
        at = rows & (np.isnan(b) if math.isnan(size) else b == size)
        lines = []
        for vi, v in enumerate(row.variants):
            m = np.flatnonzero(at & (var == v.variant))
            m = m[np.argsort(number[m], kind="stable")]
            r = best_so_far(obj[m], seed=a.settings.seed * 1000 + bi * 31 + vi)
            lines.append(
                BestSoFarLine(
                    v.variant,
                    tuple(int(k) for k in r.n),
                    tuple(r.best.tolist()),
                    tuple(r.lo.tolist()),
                    tuple(r.hi.tolist()),
                )
            )
        panels.append((size, tuple(lines)))
    return BestSoFarFigure(axis.name, a.objective_kind, tuple(panels))


def draw_best_so_far(rec: BestSoFarFigure) -> Any:
    """Draw step lines of the actual best so far and shaded bootstrap bands."""
    n = len(rec.panels)
    ncols = min(n, 3)
    nrows = math.ceil(n / ncols)
    fig, axes = style.figure(
        ncols=ncols, nrows=nrows, width=3.2 * ncols + 0.6, height=2.8 * nrows + 0.4
    )
    flat = [ax for row in axes for ax in row]
    for ax, (size, lines) in zip(flat, rec.panels, strict=False):
        for i, ln in enumerate(lines):
            c = style.color(i)
            ax.fill_between(ln.n, ln.lo, ln.hi, step="post", color=c, alpha=0.15, lw=0)
            ax.step(ln.n, ln.best, where="post", color=c, label=f"{rec.axis}={ln.variant}")
        if rec.objective_kind == "steps_to_target":
            ax.set_yscale("log")
        ax.set_title("all batch sizes" if math.isnan(size) else f"batch size {size:g}")
        ax.set_xlabel("trials")
        ax.set_ylabel(f"best {style.objective_label(rec.objective_kind)}")
    for ax in flat[n:]:
        ax.set_visible(False)
    handles, labels = flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=max(len(labels), 1))
    fig.suptitle("Best objective vs number of trials (band: 95% bootstrap of best of n)")
    return fig
