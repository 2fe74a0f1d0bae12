"""Figures of a study: each is a pure function of the analysis returning a typed record
(a frozen dataclass holding the data drawn) and a thin drawing function.

:func:`build` makes every record the study supports; :func:`draw` turns one into a
matplotlib Figure; :func:`render` writes them all as deterministic PNGs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import xarray as xr

from stepscale.analysis.figures import ablation, course, curves, ladder, lr, replay, steps, style
from stepscale.analysis.study import StudyAnalysis

__all__ = ["FIGURES", "build", "draw", "render"]

# name → (record builder, drawer, caption); the order is the report's order.
FIGURES: dict[str, tuple[Callable[[StudyAnalysis, xr.Dataset], Any], Callable[[Any], Any], str]]
FIGURES = {
    "steps_vs_batch": (
        steps.steps_vs_batch,
        steps.draw_steps_vs_batch,
        "Steps to the target vs batch size (log–log) with the S(B) fit, perfect scaling, "
        "B_crit and its 95% interval; ▲ marks batch sizes that never reached the target "
        "(at the horizon they were censored at); small dots are individual trials, bars the "
        "range over confirm seeds.",
    ),
    "steps_vs_examples": (
        steps.tradeoff,
        steps.draw_tradeoff,
        "The steps–examples trade-off: each batch size's steps and examples to the target, "
        "with the fitted hyperbola; ★ is B = B_crit.",
    ),
    "bcrit_vs_target": (
        steps.bcrit_vs_target,
        steps.draw_bcrit_vs_target,
        "B_crit refitted at several target losses from the stored curves (only targets "
        "whose S(B) fit is well-posed), with the power law B_crit(L) = B*/L^(1/α_B) when "
        "at least 3 of them allow it.",
    ),
    "best_curves": (
        curves.best_curves,
        curves.draw_best_curves,
        "Eval loss vs step of the best trial of every point.",
    ),
    "loss_steps_tokens": (
        curves.loss_steps_tokens,
        curves.draw_loss_steps_tokens,
        "Sequence length: eval loss of each point's best trial vs steps and vs tokens.",
    ),
    "noise_scale": (
        curves.noise_scale,
        curves.draw_noise_scale,
        "Gradient noise scale B_simple over training (best trial of each point) beside "
        "B_crit at the study target.",
    ),
    "ramp_curves": (
        course.ramp_curves,
        course.draw_ramp_curves,
        "Batch ramp-up: eval loss of each arm's best trial vs steps and vs examples (a ramp "
        "spends its first steps on smaller batches).",
    ),
    "bcrit_over_training": (
        course.bcrit_over_training,
        course.draw_bcrit_over_training,
        "Critical batch size over training from `sweep branch`: ● the largest branch batch "
        "that kept up with the base per example, ▲ every tested batch kept up, ▼ not even "
        "the smallest; beside the base's B_simple (running median of 9 logged values) and the "
        "study's B_crit at its target.",
    ),
    "spikes_vs_lr": (
        course.spikes_vs_lr,
        course.draw_spikes_vs_lr,
        "Loss and gradient-norm spikes of every trial vs its learning rate, coloured by point.",
    ),
    "objective_vs_lr": (
        lr.objective_vs_lr,
        lr.draw_objective_vs_lr,
        "Objective vs peak learning rate per batch size; ★ the smoothed optimum η*, × trials "
        "that diverged or failed.",
    ),
    "lr_heatmap": (
        lr.lr_heatmap,
        lr.draw_lr_heatmap,
        "Best objective in each batch size × learning-rate cell.",
    ),
    "lr_vs_batch": (
        lr.lr_law,
        lr.draw_lr_law,
        "Optimal learning rate vs batch size with η*(B) = c·B^α (solid over the batch sizes "
        "it was fitted on, below B_crit) and the linear and square-root rules.",
    ),
    "ladder_laws": (
        ladder.ladder_laws,
        ladder.draw_ladder_laws,
        "Ladder: η* vs N at each horizon D and B_opt vs D at each N; points are the rungs' "
        "measured optima (open: a best batch size at an end of the grid, a bound), lines the "
        "power laws fitted on every rung (none for a law that is not determined).",
    ),
    "best_so_far": (
        ablation.best_so_far_figure,
        ablation.draw_best_so_far,
        "Ablation: best objective after n trials per variant; the band is the 95% bootstrap "
        "interval of the best of n randomly drawn trials.",
    ),
    # Built by the report from its replay of the study (analysis.replay), not from (a, ds).
    "replay": (
        lambda a, ds: None,
        replay.draw_replay,
        "Replay of cheaper protocols from the stored curves: examples spent (fraction of the "
        "study's tune trials, median and 10–90% over random draws) vs the error of the B_crit "
        "each would have reported (median; bar to the 90th percentile). Hollow: random subsets.",
    ),
}


def build(a: StudyAnalysis, ds: xr.Dataset) -> dict[str, Any]:
    """Every figure record the study supports, by name, in report order."""
    out = {}
    for name, (builder, _, _) in FIGURES.items():
        rec = builder(a, ds)
        if rec is not None:
            out[name] = rec
    return out


def draw(name: str, record: Any) -> Any:
    """The matplotlib Figure of one record (log axes labelled with plain numbers)."""
    with style.context():
        fig = FIGURES[name][1](record)
        for ax in fig.axes:
            style.plain_ticks(ax)
        return fig


def render(records: dict[str, Any], outdir: Path) -> dict[str, bytes]:
    """Draw and write every record as ``outdir/<name>.png`` and ``outdir/<name>.svg``;
    returns name → PNG bytes."""
    outdir.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, rec in records.items():
        fig = draw(name, rec)
        out[name] = style.save_png(fig, outdir / f"{name}.png")
        # the SVG keeps the layout the PNG's draw solved instead of solving it again (a third
        # of a figure's rendering)
        fig.set_layout_engine("none")
        style.save_svg(fig, outdir / f"{name}.svg")
    return out
