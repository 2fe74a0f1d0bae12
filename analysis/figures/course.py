"""Figures of batch size over training: eval loss of a ramp study's arms vs steps and vs
examples, spikes per trial vs learning rate, and the critical batch size over training
measured by branching (`sweep branch`) beside B_simple and the study's B_crit."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr

from stepscale.analysis import branching
from stepscale.analysis.dataset import study_axes
from stepscale.analysis.figures import style
from stepscale.analysis.figures.curves import Curve, loss_panels
from stepscale.analysis.study import StudyAnalysis

__all__ = [
    "BcritCourse",
    "RampCurves",
    "SpikesVsLR",
    "bcrit_over_training",
    "draw_bcrit_over_training",
    "draw_ramp_curves",
    "draw_spikes_vs_lr",
    "ramp_curves",
    "spikes_vs_lr",
]


@dataclass(frozen=True)
class RampCurves:
    """Eval loss of each point's best trial vs steps and vs examples (ramp studies)."""

    by_steps: tuple[Curve, ...]
    by_examples: tuple[Curve, ...]
    target: float | None
    batch_unit: str


def ramp_curves(a: StudyAnalysis, ds: xr.Dataset) -> RampCurves | None:
    """The record of the ramp figure (None unless a trial ran a batch ramp)."""
    if "rampup_steps" not in ds.coords or "eval_loss" not in ds:
        return None
    if not (np.nan_to_num(np.asarray(ds["rampup_steps"].values, float)) > 0).any():
        return None
    steps = ds["step"].values.astype(float)
    by_s, by_e = [], []
    for p, i in a.best.items():
        loss = ds["eval_loss"].values[i]
        ex = ds["examples"].values[i]
        ok = np.isfinite(loss) & np.isfinite(ex)
        if ok.any():
            trial = str(ds["trial"].values[i])
            by_s.append(Curve(p, trial, tuple(steps[ok].tolist()), tuple(loss[ok].tolist())))
            by_e.append(Curve(p, trial, tuple(ex[ok].tolist()), tuple(loss[ok].tolist())))
    if not by_s:
        return None
    return RampCurves(tuple(by_s), tuple(by_e), a.target, a.batch_unit)


def draw_ramp_curves(rec: RampCurves) -> Any:
    """Loss vs steps (left) and vs examples (right), one colour per point."""

    def lines(ax: Any, curves: tuple[Curve, ...]) -> None:
        for i, c in enumerate(curves):
            ax.plot(c.x, c.y, color=style.color(i), lw=1.3, label=c.label)

    panels = (
        (rec.by_steps, style.STEPS, "Eval loss vs steps (best trial of each arm)"),
        (rec.by_examples, style.examples_label(rec.batch_unit), "Eval loss vs examples"),
    )
    fig, _ = loss_panels(panels, rec.target, lines)
    return fig


@dataclass(frozen=True)
class SpikesVsLR:
    """Per trial: LR, loss spikes, gradient-norm spikes, and its point (the colour)."""

    points: tuple[str, ...]
    lr: tuple[float, ...]
    loss_spikes: tuple[float, ...]
    grad_norm_spikes: tuple[float, ...]
    point_of: tuple[int, ...]


def spikes_vs_lr(a: StudyAnalysis, ds: xr.Dataset) -> SpikesVsLR | None:
    """The record of the spikes figure (None without an LR axis or without any spike)."""
    axes = study_axes(ds)
    if axes.lr is None or "loss_spikes" not in ds.coords:
        return None
    loss = np.asarray(ds["loss_spikes"].values, float)
    grad = np.asarray(ds["grad_norm_spikes"].values, float)
    if not (np.nansum(loss) + np.nansum(grad)) > 0:
        return None
    lr = np.asarray(ds[axes.lr.coord].values, float)
    ok = np.isfinite(lr) & np.isfinite(loss)
    points = ds["point"].values
    names = tuple(dict.fromkeys(points[ok].tolist()))
    return SpikesVsLR(
        names,
        tuple(lr[ok].tolist()),
        tuple(loss[ok].tolist()),
        tuple(np.nan_to_num(grad[ok]).tolist()),
        tuple(names.index(p) for p in points[ok].tolist()),
    )


def draw_spikes_vs_lr(rec: SpikesVsLR) -> Any:
    """Loss spikes (left) and gradient-norm spikes (right) per trial vs its LR."""
    fig, axes = style.figure(ncols=2, width=9.6)
    for ax, values, title in (
        (axes[0][0], rec.loss_spikes, "loss spikes"),
        (axes[0][1], rec.grad_norm_spikes, "gradient-norm spikes"),
    ):
        for k, name in enumerate(rec.points):
            xs = [x for x, p in zip(rec.lr, rec.point_of, strict=True) if p == k]
            ys = [y for y, p in zip(values, rec.point_of, strict=True) if p == k]
            ax.scatter(xs, ys, s=18, color=style.color(k), label=name, alpha=0.8)
        ax.set_xscale("log")
        ax.set_xlabel(style.LR)
        ax.set_ylabel(f"{title} per trial")
        ax.set_title(f"{title.capitalize()} vs learning rate")
    style.legend(fig, axes[0][1], True, ncols=4, fontsize=7)
    return fig


NOISE_WINDOW = 9  # logged values per running median of B_simple


@dataclass(frozen=True)
class BcritCourse:
    """B_crit(t) of one branch measurement (censored points marked), the base's B_simple,
    and the study's fixed-target B_crit, over steps and over examples or tokens."""

    base: str
    step: tuple[float, ...]
    amount: tuple[float, ...]  # examples or tokens at each step
    amount_label: str
    b_crit: tuple[float, ...]  # the value drawn (a bound when censored)
    censored: tuple[str, ...]  # "", above, below
    noise_step: tuple[float, ...]
    noise_amount: tuple[float, ...]
    noise: tuple[float, ...]
    fixed: tuple[float, float, float] | None  # (B_crit, lo, hi) at the study's target
    target: float | None
    tolerance: float
    batch_unit: str


def bcrit_over_training(a: StudyAnalysis, ds: xr.Dataset) -> BcritCourse | None:
    """The record of the branching figure (None without a `sweep branch` measurement);
    the first measurement with a result is drawn."""
    for m in branching.from_dataset(ds.attrs.get("branches")):
        rows = [s for s in m["steps"] if s["b_crit"] is not None or s["censored"]]
        if not rows:
            continue
        tpe = int(m.get("tokens_per_example") or 1)
        label = style.TOKENS if tpe > 1 else style.examples_label(a.batch_unit)
        values = []
        for s in rows:
            if s["censored"] == branching.BELOW:
                values.append(float(s["base_batch"]))
            else:
                values.append(float(s["b_crit"]))
        noise = _running_median(m.get("noise_scale") or [], NOISE_WINDOW)
        fixed = None
        for g in a.groups:
            f = g.fit_at(a.target)
            if f is not None and math.isfinite(f.b_crit):
                fixed = (float(f.b_crit), float(f.b_crit_ci[0]), float(f.b_crit_ci[1]))
                break
        return BcritCourse(
            base=str(m["base"]),
            step=tuple(float(s["step"]) for s in rows),
            amount=tuple(float(s["examples"]) * tpe for s in rows),
            amount_label=label,
            b_crit=tuple(values),
            censored=tuple(s["censored"] or "" for s in rows),
            noise_step=tuple(float(n[0]) for n in noise),
            noise_amount=tuple(float(n[1]) * tpe for n in noise),
            noise=tuple(float(n[2]) for n in noise),
            fixed=fixed,
            target=a.target,
            tolerance=float(m["tolerance"]),
            batch_unit=a.batch_unit,
        )
    return None


def _running_median(points: list[list[float]], width: int) -> list[tuple[float, float, float]]:
    """(step, examples, value) with each value the median of the ``width`` logged values
    around it (B_simple of one log interval is the ratio of two noisy sums)."""
    values = np.asarray([p[2] for p in points], dtype=float)
    half = width // 2
    out = []
    for i, p in enumerate(points):
        window = values[max(0, i - half) : i + half + 1]
        window = window[np.isfinite(window)]
        if window.size:
            out.append((float(p[0]), float(p[1]), float(np.median(window))))
    return out


def draw_bcrit_over_training(rec: BcritCourse) -> Any:
    """B_crit(t) vs steps (left) and vs examples/tokens (right): ● measured, ▲ at least
    (every tested batch kept up), ▼ below the smallest tested batch (drawn at the base
    batch); B_simple as a line; the fixed-target B_crit as a band."""
    fig, axes = style.figure(ncols=2, width=9.6)
    for ax, x, nx, xlabel in (
        (axes[0][0], rec.step, rec.noise_step, style.STEPS),
        (axes[0][1], rec.amount, rec.noise_amount, rec.amount_label),
    ):
        if rec.noise:
            ax.plot(
                nx, rec.noise, color="0.5", lw=1.0, label="B_simple of the base (running median)"
            )
        for kind, marker, name in (
            ("", "o", "B_crit by branching"),
            ("above", "^", "B_crit ≥ (all tested kept up)"),
            ("below", "v", "B_crit < smallest branch"),
        ):
            xs = [xi for xi, c in zip(x, rec.censored, strict=True) if c == kind]
            ys = [yi for yi, c in zip(rec.b_crit, rec.censored, strict=True) if c == kind]
            if xs:
                ax.plot(
                    xs,
                    ys,
                    ls="-" if kind == "" else "",
                    marker=marker,
                    color=style.color(0),
                    label=name,
                )
        if rec.fixed is not None:
            b, lo, hi = rec.fixed
            ax.axhline(
                b, color=style.color(1), ls="-.", lw=1.1, label=f"B_crit at loss {rec.target:g}"
            )
            if math.isfinite(lo) and math.isfinite(hi):
                ax.axhspan(lo, hi, color=style.color(1), alpha=0.12, lw=0)
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(style.batch_label(rec.batch_unit))
    axes[0][0].set_title(f"Critical batch over training (branches of {rec.base})")
    axes[0][1].set_title(f"… vs {rec.amount_label} (tolerance {rec.tolerance:g})")
    style.legend(fig, axes[0][0], True, ncols=3, fontsize=7)
    return fig
