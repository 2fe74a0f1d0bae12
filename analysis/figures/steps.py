"""Steps to target vs batch size with the S(B) fit, the steps–examples trade-off, and
B_crit vs target loss. One series per group (ablation variants are overlaid).

Each record carries the study's batch unit (``batch_unit``), which its axes are labelled
with."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr

from stepscale.analysis.figures import style
from stepscale.analysis.headline import NOT_DETERMINED, steps_fit_determination
from stepscale.analysis.study import StudyAnalysis

__all__ = [
    "BcritSeries",
    "BcritVsTarget",
    "FitLine",
    "StepsSeries",
    "StepsVsBatch",
    "Tradeoff",
    "bcrit_vs_target",
    "draw_bcrit_vs_target",
    "draw_steps_vs_batch",
    "draw_tradeoff",
    "steps_vs_batch",
    "tradeoff",
]


@dataclass(frozen=True)
class FitLine:
    """A fitted S(B) = S_min (1 + B_crit/B) evaluated on a grid of batch sizes."""

    s_min: float
    e_min: float
    b_crit: float
    b_crit_ci: tuple[float, float]
    grid: tuple[float, ...]
    fitted: tuple[float, ...]
    # "" when B_crit is determined, else why not (analysis.headline): no line is drawn.
    not_determined: str = ""
    # the fit's interval joined with the training seed's part (analysis.fits.seed_part)
    joint_ci: tuple[float, float] | None = None


@dataclass(frozen=True)
class StepsSeries:
    """One group: steps to result per batch size, censored sizes, trials, seeds, fit."""

    label: str
    batch: tuple[float, ...]
    steps: tuple[float, ...]
    censored_batch: tuple[float, ...]
    censored_at: tuple[float, ...]
    trial_batch: tuple[float, ...]
    trial_steps: tuple[float, ...]
    seed_batch: tuple[float, ...]
    seed_lo: tuple[float, ...]
    seed_hi: tuple[float, ...]
    fit: FitLine | None


@dataclass(frozen=True)
class StepsVsBatch:
    """Steps to eval loss < ``target`` vs batch size (in ``batch_unit``), log–log."""

    target: float
    series: tuple[StepsSeries, ...]
    batch_unit: str


def _grid(values: list[float]) -> np.ndarray:
    v = [x for x in values if math.isfinite(x) and x > 0]
    return np.geomspace(min(v) / 1.5, max(v) * 1.5, 200)


def steps_vs_batch(a: StudyAnalysis, ds: xr.Dataset) -> StepsVsBatch | None:
    """The record of the steps-vs-batch figure (None without batch axis or target)."""
    if a.axes.batch is None or a.target is None:
        return None
    x = ds[a.axes.batch.coord].values.astype(float)
    kind = ds["kind"].values
    steps = a.trial_steps.steps[a.target]
    series = []
    for g in a.groups:
        if g.result is None:
            continue
        res = g.result
        sel = (a.trial_group == g.group) & (kind == "tune") & np.isfinite(steps)
        cens = [c if c is not None else math.nan for c in res.censored_at]
        fit = g.fit_at(a.target)
        line = None
        if fit is not None:
            grid = _grid([*res.batch_sizes, *res.not_reached])
            line = FitLine(
                fit.s_min,
                fit.e_min,
                fit.b_crit,
                fit.b_crit_ci,
                tuple(grid.tolist()),
                tuple(fit.predict(grid).tolist()),
                steps_fit_determination(fit).reason,
                g.seed_part.joint_ci if g.seed_part is not None else None,
            )
        sb: list[float] = []
        lo: list[float] = []
        hi: list[float] = []
        if g.seeds is not None:
            for b, mn, mx in zip(g.seeds.batch_sizes, g.seeds.min, g.seeds.max, strict=True):
                if math.isfinite(mn):
                    sb.append(b)
                    lo.append(mn)
                    hi.append(mx)
        series.append(
            StepsSeries(
                label=g.group,
                batch=res.batch_sizes,
                steps=res.steps,
                censored_batch=res.not_reached,
                censored_at=tuple(cens),
                trial_batch=tuple(x[sel].tolist()),
                trial_steps=tuple(steps[sel].tolist()),
                seed_batch=tuple(sb),
                seed_lo=tuple(lo),
                seed_hi=tuple(hi),
                fit=line,
            )
        )
    if not series:
        return None
    return StepsVsBatch(a.target, tuple(series), a.batch_unit)


def draw_steps_vs_batch(rec: StepsVsBatch) -> Any:
    """Draw: measured points, trials (small), seeds (bars), censored (▲ at the horizon),
    fit, perfect scaling E_min/B, S_min, and B_crit with its interval."""
    many = len(rec.series) > 1
    fig, axes = style.figure(height=5.4 if many else 4.2)
    ax = axes[0][0]
    ys: list[float] = []
    for i, s in enumerate(rec.series):
        c = style.color(i)
        name = f"{s.label}: " if many else ""
        ys += [*s.trial_steps, *s.steps, *s.seed_hi, *s.censored_at]
        ax.scatter(
            s.trial_batch, s.trial_steps, s=8, color=c, alpha=0.25, lw=0,
            label=None if many else "a trial",
        )  # fmt: skip
        ax.plot(s.batch, s.steps, "o", color=c, label=f"{name}best of the batch size's trials")
        for b, lo_, hi_ in zip(s.seed_batch, s.seed_lo, s.seed_hi, strict=True):
            ax.plot([b, b], [lo_, hi_], color=c, lw=3, alpha=0.5)
        if s.censored_batch:
            ys = [h for h in s.censored_at if math.isfinite(h)]
            bs = [
                b for b, h in zip(s.censored_batch, s.censored_at, strict=True) if math.isfinite(h)
            ]
            ax.plot(bs, ys, "^", mfc="none", color=c, ms=8, label=f"{name}not reached (≥ horizon)")
        f = s.fit
        if f is None:
            continue
        if f.not_determined:  # labelled, never drawn as a result
            ax.plot([], [], " ", label=f"{name}S(B) fit: {NOT_DETERMINED} ({f.not_determined})")
            continue
        ax.plot(
            f.grid,
            f.fitted,
            "-",
            color=c,
            lw=1.4,
            label=f"{name}fit: S_min={f.s_min:.3g}, B_crit={f.b_crit:.3g}",
        )
        grid = np.asarray(f.grid)
        ax.plot(
            grid, f.e_min / grid, ":", color=c, lw=1.0, label=f"{name}perfect scaling S = E_min/B"
        )
        ax.axhline(f.s_min, color=c, lw=0.8, ls="--", alpha=0.6, label=f"{name}S_min")
        ys.append(f.s_min)
        ax.axvline(f.b_crit, color=c, lw=1.0, ls="-.")
        lo_, hi_ = f.b_crit_ci
        if math.isfinite(lo_) and math.isfinite(hi_):
            ax.axvspan(lo_, hi_, color=c, alpha=0.12, lw=0)
        if f.joint_ci is not None:  # the first screen's interval
            ax.axvspan(*f.joint_ci, color=c, alpha=0.06, lw=0, label=f"{name}with the seed's part")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    fin = [y for y in ys if math.isfinite(y) and y > 0]
    if fin:  # the perfect-scaling line would otherwise stretch the axis far below the data
        ax.set_ylim(min(fin) / 1.6, max(fin) * 1.6)
    ax.set_xlabel(style.batch_label(rec.batch_unit))
    ax.set_ylabel(f"steps to eval loss < {rec.target:g} (steps)")
    ax.set_title("Steps to target vs batch size (dash-dot: B_crit, band: its 95% interval)")
    style.legend(fig, ax, many)
    return fig


@dataclass(frozen=True)
class Tradeoff:
    """Steps vs examples to reach ``target`` per group, with the fitted hyperbola
    (S/S_min − 1)(E/E_min − 1) = 1; examples and batch sizes in ``batch_unit``."""

    target: float
    labels: tuple[str, ...]
    examples: tuple[tuple[float, ...], ...]
    steps: tuple[tuple[float, ...], ...]
    batch: tuple[tuple[float, ...], ...]
    fits: tuple[FitLine | None, ...]
    batch_unit: str


def tradeoff(a: StudyAnalysis, ds: xr.Dataset) -> Tradeoff | None:
    """The record of the steps–examples trade-off figure."""
    rec = steps_vs_batch(a, ds)
    if rec is None:
        return None
    ex = tuple(tuple(b * s for b, s in zip(se.batch, se.steps, strict=True)) for se in rec.series)
    if not any(e > 0 and math.isfinite(e) for row in ex for e in row):
        return None  # no batch size reached the target: nothing to draw on log axes
    return Tradeoff(
        rec.target,
        tuple(s.label for s in rec.series),
        ex,
        tuple(s.steps for s in rec.series),
        tuple(s.batch for s in rec.series),
        tuple(s.fit for s in rec.series),
        rec.batch_unit,
    )


def draw_tradeoff(rec: Tradeoff) -> Any:
    """Draw the trade-off: each point labelled with its batch size; ★ at B = B_crit."""
    many = len(rec.labels) > 1
    fig, axes = style.figure(height=5.2 if many else 4.2)
    ax = axes[0][0]
    for i, label in enumerate(rec.labels):
        c = style.color(i)
        name = f"{label}: " if many else ""
        ax.plot(rec.examples[i], rec.steps[i], "o", color=c, label=f"{name}measured")
        for e, s, b in zip(rec.examples[i], rec.steps[i], rec.batch[i], strict=True):
            ax.annotate(
                f"B={b:g}", (e, s), textcoords="offset points", xytext=(4, 4), fontsize=7, color=c
            )
        f = rec.fits[i]
        if f is None:
            continue
        if f.not_determined:
            ax.plot([], [], " ", label=f"{name}S(B) fit: {NOT_DETERMINED}")
            continue
        grid = np.asarray(f.grid)
        fitted = np.asarray(f.fitted)
        ax.plot(grid * fitted, fitted, "-", color=c, lw=1.2, label=f"{name}fit")
        ax.plot(
            [2 * f.e_min],
            [2 * f.s_min],
            "*",
            color=c,
            ms=12,
            label=f"{name}B = B_crit (2·E_min, 2·S_min)",
        )
        ax.axhline(f.s_min, color=c, lw=0.8, ls="--", alpha=0.6)
        ax.axvline(f.e_min, color=c, lw=0.8, ls="--", alpha=0.6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"examples to eval loss < {rec.target:g} ({rec.batch_unit})")
    ax.set_ylabel(f"steps to eval loss < {rec.target:g} (steps)")
    ax.set_title("Steps–examples trade-off (dashed: S_min and E_min)")
    style.legend(fig, ax, many)
    return fig


@dataclass(frozen=True)
class BcritSeries:
    """B_crit (with interval) at each target of one group, and the fitted law."""

    label: str
    targets: tuple[float, ...]
    b_crit: tuple[float, ...]
    lo: tuple[float, ...]
    hi: tuple[float, ...]
    law_grid: tuple[float, ...]
    law: tuple[float, ...]
    alpha_b: float


@dataclass(frozen=True)
class BcritVsTarget:
    """B_crit (in ``batch_unit``) vs target loss (Kaplan et al. 2020: B_crit(L) =
    B*/L^(1/α_B))."""

    primary: float
    series: tuple[BcritSeries, ...]
    batch_unit: str


def bcrit_vs_target(a: StudyAnalysis, ds: xr.Dataset) -> BcritVsTarget | None:
    """The record of the B_crit-vs-target figure: the well-posed targets of each group
    with at least two of them (None when no group has two)."""
    del ds
    if a.target is None:
        return None
    series = []
    for g in a.groups:
        if g.at_targets is None or len(g.at_targets.well_posed) < 2:
            continue
        fits = {t: g.at_targets.fits[t] for t in g.at_targets.well_posed}
        ts = tuple(fits)
        law = g.at_targets.law
        grid: tuple[float, ...] = ()
        vals: tuple[float, ...] = ()
        if law is not None:
            gr = np.geomspace(min(ts) * 0.95, max(ts) * 1.05, 50)
            grid, vals = tuple(gr.tolist()), tuple(law.predict(gr).tolist())
        series.append(
            BcritSeries(
                g.group,
                ts,
                tuple(f.b_crit for f in fits.values()),
                tuple(f.b_crit_ci[0] for f in fits.values()),
                tuple(f.b_crit_ci[1] for f in fits.values()),
                grid,
                vals,
                law.alpha_b if law is not None else math.nan,
            )
        )
    if not series:
        return None
    return BcritVsTarget(a.target, tuple(series), a.batch_unit)


def draw_bcrit_vs_target(rec: BcritVsTarget) -> Any:
    """Draw B_crit with 95% intervals per target and the power law through them."""
    many = len(rec.series) > 1
    fig, axes = style.figure(height=5.0 if many else 4.2)
    ax = axes[0][0]
    for i, s in enumerate(rec.series):
        c = style.color(i)
        name = f"{s.label}: " if many else ""
        b = np.asarray(s.b_crit)
        lo = np.where(np.isfinite(s.lo), b - np.asarray(s.lo), 0.0)
        hi = np.where(np.isfinite(s.hi), np.asarray(s.hi) - b, 0.0)
        ax.errorbar(
            s.targets,
            b,
            yerr=[np.maximum(lo, 0), np.maximum(hi, 0)],
            fmt="o",
            color=c,
            capsize=3,
            label=f"{name}B_crit (95% interval)",
        )
        if s.law:
            ax.plot(
                s.law_grid,
                s.law,
                "-",
                color=c,
                lw=1.0,
                label=f"{name}B*/L^(1/α_B), α_B = {s.alpha_b:.3g}",
            )
    ax.axvline(rec.primary, color="0.5", lw=0.8, ls="--", label=f"study target {rec.primary:g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    xs = [t for s in rec.series for t in s.targets] + [rec.primary]
    pad = max((max(xs) / min(xs)) ** 0.08, 1.01)  # keep end points off the spines
    ax.set_xlim(min(xs) / pad, max(xs) * pad)
    ax.set_xlabel("target eval loss")
    ax.set_ylabel(f"B_crit ({rec.batch_unit})")
    title = "Critical batch size vs target loss (well-posed targets)"
    if not any(s.law for s in rec.series):
        title += "\ntoo few targets for the power law"
    ax.set_title(title)
    style.legend(fig, ax, many)
    return fig
