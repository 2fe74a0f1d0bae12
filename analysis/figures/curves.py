"""Training curves of each point's best trial: eval loss vs step, loss vs steps and vs
tokens side by side (sequence-length studies), and the gradient noise scale B_simple
over training beside B_crit."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr

from stepscale.analysis.figures import style
from stepscale.analysis.study import StudyAnalysis

__all__ = [
    "BestCurves",
    "Curve",
    "LossStepsTokens",
    "NoiseScale",
    "best_curves",
    "draw_best_curves",
    "draw_loss_steps_tokens",
    "draw_noise_scale",
    "loss_panels",
    "loss_steps_tokens",
    "noise_scale",
]


@dataclass(frozen=True)
class Curve:
    """One trial's curve: x values (steps or tokens) and y values."""

    label: str
    trial: str
    x: tuple[float, ...]
    y: tuple[float, ...]


@dataclass(frozen=True)
class BestCurves:
    """Eval loss vs step of the best trial of every point; the targets as lines."""

    curves: tuple[Curve, ...]
    targets: tuple[float, ...]
    primary: float | None


def _best_curve(ds: xr.Dataset, var: str, i: int, x: np.ndarray, label: str) -> Curve | None:
    v = ds[var].values[i]
    ok = np.isfinite(v) & np.isfinite(x)
    if not ok.any():
        return None
    return Curve(label, str(ds["trial"].values[i]), tuple(x[ok].tolist()), tuple(v[ok].tolist()))


def best_curves(a: StudyAnalysis, ds: xr.Dataset) -> BestCurves | None:
    """The record of the best-trial eval-loss figure (None without eval_loss)."""
    if "eval_loss" not in ds:
        return None
    steps = ds["step"].values.astype(float)
    out = [_best_curve(ds, "eval_loss", i, steps, p) for p, i in a.best.items()]
    curves = tuple(c for c in out if c is not None)
    if not curves:
        return None
    return BestCurves(curves, a.targets, a.target)


def _lines(ax: Any, curves: tuple[Curve, ...]) -> None:
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    n = len(curves)
    for i, c in enumerate(curves):
        ax.plot(c.x, c.y, color=cmap(i / max(n - 1, 1) * 0.9), lw=1.2, label=c.label)


def draw_best_curves(rec: BestCurves) -> Any:
    """Draw one line per point (viridis in study order) and the targets (grey)."""
    fig, axes = style.figure()
    ax = axes[0][0]
    _lines(ax, rec.curves)
    for t in rec.targets:
        primary = t == rec.primary
        ax.axhline(t, color="0.3" if primary else "0.7", lw=0.9 if primary else 0.6, ls="--")
    ax.set_yscale("log")
    ax.set_xlabel(style.STEPS)
    ax.set_ylabel("eval loss")
    ax.set_title("Eval loss of each point's best trial (dashed: targets)")
    ax.legend(loc="upper right", ncols=1 if len(rec.curves) <= 10 else 2, fontsize=7)
    return fig


@dataclass(frozen=True)
class LossStepsTokens:
    """Eval loss of each point's best trial vs steps and vs tokens (side by side)."""

    by_steps: tuple[Curve, ...]
    by_tokens: tuple[Curve, ...]
    primary: float | None


def loss_steps_tokens(a: StudyAnalysis, ds: xr.Dataset) -> LossStepsTokens | None:
    """The record of the sequence-length figure (None unless a seq_len axis exists)."""
    if a.axes.seq_len is None or "eval_loss" not in ds:
        return None
    steps = ds["step"].values.astype(float)
    by_s, by_t = [], []
    for p, i in a.best.items():
        cs = _best_curve(ds, "eval_loss", i, steps, p)
        ct = _best_curve(ds, "eval_loss", i, ds["tokens"].values[i], p)
        if cs is not None and ct is not None:
            by_s.append(cs)
            by_t.append(ct)
    if not by_s:
        return None
    return LossStepsTokens(tuple(by_s), tuple(by_t), a.target)


def loss_panels(
    panels: Sequence[tuple[tuple[Curve, ...], str, str]],
    target: float | None,
    lines: Callable[[Any, tuple[Curve, ...]], None],
) -> tuple[Any, Any]:
    """Eval loss side by side against each of ``panels`` (curves, x label, title):
    ``lines(ax, curves)`` draws the curves, then the target (dashed), the log y axis and
    the legend (last panel). Returns the figure and its axes."""
    fig, axes = style.figure(ncols=len(panels), width=9.6)
    for ax, (curves, xlabel, title) in zip(axes[0], panels, strict=True):
        lines(ax, curves)
        if target is not None:
            ax.axhline(target, color="0.3", lw=0.9, ls="--")
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("eval loss")
        ax.set_title(title)
    axes[0][-1].legend(loc="upper right", fontsize=7)
    return fig, axes


def draw_loss_steps_tokens(rec: LossStepsTokens) -> Any:
    """Draw loss vs steps (left) and loss vs tokens (right), same colours and y axis."""
    panels = (
        (rec.by_steps, style.STEPS, "Eval loss vs steps"),
        (rec.by_tokens, style.TOKENS, "Eval loss vs tokens"),
    )
    fig, axes = loss_panels(panels, rec.primary, _lines)
    axes[0][1].sharey(axes[0][0])
    return fig


@dataclass(frozen=True)
class NoiseScale:
    """B_simple over training of each point's best trial, and B_crit of its group, both
    in ``batch_unit``."""

    curves: tuple[Curve, ...]
    b_crit: tuple[tuple[str, float, float, float], ...]  # (group, B_crit, lo, hi)
    target: float | None
    batch_unit: str


def noise_scale(a: StudyAnalysis, ds: xr.Dataset) -> NoiseScale | None:
    """The record of the noise-scale figure (None without a noise_scale metric)."""
    if "noise_scale" not in ds:
        return None
    steps = ds["step"].values.astype(float)
    curves = []
    for p, i in a.best.items():
        c = _best_curve(ds, "noise_scale", i, steps, p)
        if c is not None:
            curves.append(c)
    if not curves:
        return None
    bc = []
    for g in a.groups:
        f = g.fit_at(a.target)
        if f is not None:
            bc.append((g.group, f.b_crit, f.b_crit_ci[0], f.b_crit_ci[1]))
    return NoiseScale(tuple(curves), tuple(bc), a.target, a.batch_unit)


def draw_noise_scale(rec: NoiseScale) -> Any:
    """Draw B_simple vs step per point and B_crit (with its interval) as horizontal bands."""
    rows = -(-(len(rec.curves) + len(rec.b_crit)) // 4)
    fig, axes = style.figure(height=4.2 + 0.2 * rows)
    ax = axes[0][0]
    _lines(ax, rec.curves)
    for i, (group, b, lo, hi) in enumerate(rec.b_crit):
        c = style.color(i + 1)
        name = "" if group == "all" else f" ({group})"
        ax.axhline(
            b,
            color=c,
            lw=1.2,
            ls="-.",
            label=f"B_crit{name} at loss {rec.target:g}: {b:.4g} {rec.batch_unit}",
        )
        if math.isfinite(lo) and math.isfinite(hi):
            ax.axhspan(lo, hi, color=c, alpha=0.12, lw=0)
    ax.set_yscale("log")
    ax.set_xlabel(style.STEPS)
    ax.set_ylabel(f"B_simple ({rec.batch_unit})")
    ax.set_title("Gradient noise scale B_simple of each point's best trial")
    # The curves fill the axes: the legend goes below them.
    style.legend(fig, ax, True, ncols=4, fontsize=7)
    return fig
