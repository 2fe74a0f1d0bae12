"""Learning-rate figures: objective vs LR per batch size, a batch × LR heat map of the
best objective, and the optimal LR vs batch size with its power law η*(B) = c·B^α.
Batch axes are labelled with the study's batch unit the records carry (``batch_unit``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr

from stepscale.analysis.analyze import usable_objective
from stepscale.analysis.figures import style
from stepscale.analysis.headline import (
    NOT_DETERMINED,
    lr_law_determination,
    saturating_determination,
)
from stepscale.analysis.load import FINAL_STATES
from stepscale.analysis.study import StudyAnalysis

__all__ = [
    "LRHeatmap",
    "LRLawFigure",
    "LRLawSeries",
    "LRSweep",
    "ObjectiveVsLR",
    "draw_lr_heatmap",
    "draw_lr_law",
    "draw_objective_vs_lr",
    "lr_heatmap",
    "lr_law",
    "objective_vs_lr",
]


@dataclass(frozen=True)
class LRSweep:
    """The finished tune trials of one batch size (or point): LR, objective, and the LRs
    of trials without a usable objective (diverged/failed); ``lr_opt`` is η* if known."""

    label: str
    lr: tuple[float, ...]
    objective: tuple[float, ...]
    failed_lr: tuple[float, ...]
    lr_opt: float
    objective_opt: float


@dataclass(frozen=True)
class ObjectiveVsLR:
    """One panel per group, one line per batch size."""

    objective_kind: str
    panels: tuple[tuple[str, tuple[LRSweep, ...]], ...]


def _finished_tune(ds: xr.Dataset) -> np.ndarray:
    return (ds["kind"].values == "tune") & np.isin(ds["state"].values, list(FINAL_STATES))


def objective_vs_lr(a: StudyAnalysis, ds: xr.Dataset) -> ObjectiveVsLR | None:
    """The record of the objective-vs-LR figure (None without an LR axis)."""
    if a.axes.lr is None:
        return None
    lr = ds[a.axes.lr.coord].values.astype(float)
    obj = usable_objective(ds)
    rows = _finished_tune(ds) & np.isfinite(lr)
    key_axis = a.axes.batch
    keys = ds[key_axis.coord].values.astype(float) if key_axis is not None else ds["point"].values
    panels = []
    for g in a.groups:
        sel = rows & (a.trial_group == g.group)
        opt = {}
        if g.optimal_lr is not None:
            opt = {
                b: (lo, ob)
                for b, lo, ob in zip(
                    g.optimal_lr.batch_sizes,
                    g.optimal_lr.lr_opt,
                    g.optimal_lr.objective_opt,
                    strict=True,
                )
            }
        sweeps = []
        for k in dict.fromkeys(sorted(keys[sel].tolist()) if key_axis else keys[sel].tolist()):
            m = sel & (keys == k)
            ok = m & np.isfinite(obj)
            order = np.argsort(lr[ok], kind="stable")
            lo, ob = opt.get(k, (math.nan, math.nan)) if key_axis else (math.nan, math.nan)
            label = f"B={k:g}" if key_axis else str(k)
            sweeps.append(
                LRSweep(
                    label,
                    tuple(lr[ok][order].tolist()),
                    tuple(obj[ok][order].tolist()),
                    tuple(sorted(lr[m & ~np.isfinite(obj)].tolist())),
                    lo,
                    ob,
                )
            )
        if sweeps:
            panels.append((g.group, tuple(sweeps)))
    if not panels:
        return None
    return ObjectiveVsLR(a.objective_kind, tuple(panels))


def _positive(values: list[float]) -> bool:
    return bool(values) and min(values) > 0


def draw_objective_vs_lr(rec: ObjectiveVsLR) -> Any:
    """Draw each batch size's trials (line), η* (★) and unusable trials (× at the top)."""
    from matplotlib import colormaps

    n = len(rec.panels)
    fig, axes = style.figure(ncols=n, width=max(6.4, 4.2 * n))
    cmap = colormaps["viridis"]
    for ax, (group, sweeps) in zip(axes[0], rec.panels, strict=True):
        allv = [v for s in sweeps for v in s.objective]
        top = max(allv) if allv else 1.0
        for i, s in enumerate(sweeps):
            c = cmap(i / max(len(sweeps) - 1, 1) * 0.9)
            ms = 3.5 if len(s.lr) <= 30 else 1.5  # dense sweeps: small markers
            ax.plot(s.lr, s.objective, "o-", color=c, ms=ms, lw=1.0, label=s.label)
            if math.isfinite(s.lr_opt):
                ax.plot([s.lr_opt], [s.objective_opt], "*", color=c, ms=11, mec="k", mew=0.5)
            if s.failed_lr:
                ax.plot(s.failed_lr, [top] * len(s.failed_lr), "x", color=c, ms=6)
        ax.set_xscale("log")
        if rec.objective_kind == "steps_to_target" and _positive(allv):
            ax.set_yscale("log")
        ax.set_xlabel(style.LR)
        ax.set_ylabel(style.objective_label(rec.objective_kind))
        title = "Objective vs LR (★ η*, × diverged/failed)"
        ax.set_title(title if group == "all" else f"{group}: {title}")
        ax.legend(loc="best", fontsize=7)
    return fig


@dataclass(frozen=True)
class LRHeatmap:
    """Best objective in each (batch size, LR bin) cell, one panel per group.

    ``values[g][i][j]`` is for batch ``batches[g][i]`` and LR bin j (edges ``edges``);
    NaN where no trial; ``failed[g][i][j]`` marks cells whose trials all diverged/failed.
    """

    objective_kind: str
    edges: tuple[float, ...]
    groups: tuple[str, ...]
    batches: tuple[tuple[float, ...], ...]
    values: tuple[tuple[tuple[float, ...], ...], ...]
    failed: tuple[tuple[tuple[bool, ...], ...], ...]
    batch_unit: str


def lr_heatmap(a: StudyAnalysis, ds: xr.Dataset, n_bins: int = 12) -> LRHeatmap | None:
    """The record of the batch × LR heat map (None without both axes)."""
    if a.axes.lr is None or a.axes.batch is None:
        return None
    lr = ds[a.axes.lr.coord].values.astype(float)
    b = ds[a.axes.batch.coord].values.astype(float)
    obj = usable_objective(ds)
    rows = _finished_tune(ds) & np.isfinite(lr) & (lr > 0)
    if not rows.any():
        return None
    lo, hi = float(lr[rows].min()), float(lr[rows].max())
    if hi <= lo:
        lo, hi = lo / 2, hi * 2
    edges = np.geomspace(lo, hi * (1 + 1e-9), n_bins + 1)
    col = np.clip(np.searchsorted(edges, lr, side="right") - 1, 0, n_bins - 1)
    groups, batches, values, failed = [], [], [], []
    for g in a.groups:
        sel = rows & (a.trial_group == g.group)
        sizes = sorted(set(b[sel].tolist()))
        if not sizes:
            continue
        gv, gf = [], []
        for size in sizes:
            rv, rf = [], []
            for j in range(n_bins):
                m = sel & (b == size) & (col == j)
                fin = obj[m][np.isfinite(obj[m])]
                rv.append(float(fin.min()) if fin.size else math.nan)
                rf.append(bool(m.any() and not fin.size))
            gv.append(tuple(rv))
            gf.append(tuple(rf))
        groups.append(g.group)
        batches.append(tuple(sizes))
        values.append(tuple(gv))
        failed.append(tuple(gf))
    return LRHeatmap(
        a.objective_kind,
        tuple(edges.tolist()),
        tuple(groups),
        tuple(batches),
        tuple(values),
        tuple(failed),
        a.batch_unit,
    )


def draw_lr_heatmap(rec: LRHeatmap) -> Any:
    """Draw the heat map (log colour scale for steps), × in all-diverged cells."""
    from matplotlib.colors import LogNorm, Normalize

    n = len(rec.groups)
    fig, axes = style.figure(ncols=n, width=max(6.4, 4.6 * n))
    finite = [v for g in rec.values for r in g for v in r if math.isfinite(v)]
    vmin, vmax = (min(finite), max(finite)) if finite else (0.0, 1.0)
    log = rec.objective_kind == "steps_to_target" and vmin > 0
    norm = LogNorm(vmin, vmax) if log and vmax > vmin else Normalize(vmin, max(vmax, vmin + 1e-12))
    edges = np.asarray(rec.edges)
    mesh = None
    for ax, group, sizes, vals, fails in zip(
        axes[0], rec.groups, rec.batches, rec.values, rec.failed, strict=True
    ):
        arr = np.ma.masked_invalid(np.asarray(vals, dtype=float))
        mesh = ax.pcolormesh(
            edges, np.arange(len(sizes) + 1), arr, norm=norm, cmap="viridis_r", shading="flat"
        )
        centers = np.sqrt(edges[:-1] * edges[1:])
        for i, row in enumerate(fails):
            for j, f in enumerate(row):
                if f:
                    ax.text(centers[j], i + 0.5, "×", ha="center", va="center", color="0.3")
        ax.set_xscale("log")
        ax.set_yticks(np.arange(len(sizes)) + 0.5, [f"{s:g}" for s in sizes])
        ax.grid(False)
        ax.set_xlabel(style.LR)
        ax.set_ylabel(style.batch_label(rec.batch_unit))
        title = "Best objective per batch size and LR bin (× all diverged)"
        ax.set_title(title if group == "all" else f"{group}", fontsize=9)
    if mesh is not None:
        cb = fig.colorbar(mesh, ax=list(axes[0]), shrink=0.9)
        cb.set_label(style.objective_label(rec.objective_kind))
    return fig


@dataclass(frozen=True)
class LRLawSeries:
    """η* per batch size of one group and the fitted law."""

    label: str
    batch: tuple[float, ...]
    lr_opt: tuple[float, ...]
    at_edge: tuple[bool, ...]
    c: float
    alpha: float
    alpha_ci: tuple[float, float]
    b_max: float | None
    saturating: tuple[float, float] | None  # (eps_max, b_noise)
    # "" when α is determined, else why not (analysis.headline): the law is not drawn.
    not_determined: str = ""


@dataclass(frozen=True)
class LRLawFigure:
    """Optimal LR vs batch size (in ``batch_unit``) with η*(B) = c·B^α and the √ and
    linear rules."""

    series: tuple[LRLawSeries, ...]
    batch_unit: str


def lr_law(a: StudyAnalysis, ds: xr.Dataset) -> LRLawFigure | None:
    """The record of the η*(B) figure (None without optimal LRs)."""
    del ds
    series = []
    for g in a.groups:
        o = g.optimal_lr
        if o is None:
            continue
        law = g.lr_law
        sat = None
        if law is not None and saturating_determination(law, o.batch_sizes).determined:
            assert law.saturating is not None
            sat = (law.saturating.eps_max, law.saturating.b_noise)
        series.append(
            LRLawSeries(
                g.group,
                o.batch_sizes,
                o.lr_opt,
                o.at_edge,
                law.c if law else math.nan,
                law.alpha if law else math.nan,
                law.alpha_ci if law else (math.nan, math.nan),
                law.b_max if law else None,
                sat,
                lr_law_determination(law).reason if law else "",
            )
        )
    if not series:
        return None
    return LRLawFigure(tuple(series), a.batch_unit)


def draw_lr_law(rec: LRLawFigure) -> Any:
    """Draw η* (hollow when at the edge of the tried range), the law over its fit range
    (dashed beyond), the saturating form (dotted) and √B / B reference slopes (grey)."""
    fig, axes = style.figure()
    ax = axes[0][0]
    many = len(rec.series) > 1
    for i, s in enumerate(rec.series):
        c = style.color(i)
        name = f"{s.label}: " if many else ""
        b = np.asarray(s.batch)
        lr = np.asarray(s.lr_opt)
        edge = np.asarray(s.at_edge, dtype=bool)
        ax.plot(b[~edge], lr[~edge], "o", color=c, label=f"{name}η* (smoothed optimum)")
        if edge.any():
            ax.plot(b[edge], lr[edge], "o", mfc="none", color=c, label=f"{name}η* at range edge")
        grid = np.geomspace(b.min() / 1.3, b.max() * 1.3, 100)
        if s.not_determined:  # labelled, never drawn as a result
            ax.plot([], [], " ", label=f"{name}η*(B) = c·B^α: {NOT_DETERMINED}")
        elif math.isfinite(s.alpha):
            inside = grid <= (s.b_max if s.b_max is not None else np.inf)
            pred = s.c * grid**s.alpha
            lo, hi = s.alpha_ci
            ci = f" [{lo:.2f}, {hi:.2f}]" if math.isfinite(lo) else ""
            ax.plot(
                grid[inside],
                pred[inside],
                "-",
                color=c,
                label=f"{name}η* = {s.c:.3g}·B^{s.alpha:.2f}{ci}",
            )
            ax.plot(grid[~inside], pred[~inside], "--", color=c, lw=1.0)
        if s.saturating is not None:
            e, bn = s.saturating
            ax.plot(
                grid,
                e / (1 + bn / grid),
                ":",
                color=c,
                lw=1.0,
                label=f"{name}ε_max/(1 + B_noise/B), B_noise={bn:.3g}",
            )
        if i == 0:
            for slope, txt in ((1.0, "linear rule (∝ B)"), (0.5, "√ rule (∝ √B)")):
                ax.plot(
                    grid,
                    lr[0] * (grid / b[0]) ** slope,
                    color="0.6",
                    lw=0.8,
                    ls=(0, (4, 2)) if slope == 1 else (0, (1, 2)),
                    label=txt,
                )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    # The reference rules would stretch the axis far beyond the measured optima.
    opt = [v for s in rec.series for v in s.lr_opt if math.isfinite(v) and v > 0]
    if opt:
        ax.set_ylim(min(opt) / 3, max(opt) * 3)
    ax.set_xlabel(style.batch_label(rec.batch_unit))
    ax.set_ylabel("optimal peak learning rate η*")
    ax.set_title("Optimal learning rate vs batch size")
    ax.legend(loc="best", fontsize=7)
    return fig
