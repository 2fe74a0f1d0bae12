"""The report's sections on batch size over the course of training: a batch ramp against a
constant batch, loss and gradient-norm spikes, and the critical batch size over training
measured by branching (`sweep branch`)."""

from __future__ import annotations

import math

import xarray as xr

from stepscale.analysis import branching
from stepscale.analysis.course import Estimate, RampComparison, SpikeRow, SpikeTable
from stepscale.analysis.course import ramp_comparison as compare_ramps
from stepscale.analysis.course import spike_table as count_spikes
from stepscale.analysis.report.blocks import Block, heading, para, table
from stepscale.analysis.report.numbers import integer, is_finite, num
from stepscale.analysis.study import StudyAnalysis

SPIKE_RULE = (
    "A step's training loss is a spike when it exceeds train.spike_factor (default 1.5) × "
    "the median of the train.spike_window (default 20) steps before it; a gradient-norm "
    "spike likewise with train.grad_norm_spike_factor (default 5). Consecutive flagged "
    "steps count once."
)


def course_sections(a: StudyAnalysis, ds: xr.Dataset) -> list[Block]:
    """Every section of this module the study has data for."""
    return [*ramp_section(a, ds), *spikes_section(ds), *branch_section(a, ds)]


def _estimate(e: Estimate | None, digits: int = 3) -> str:
    if e is None:
        return "—"
    if not (math.isfinite(e.lo) and math.isfinite(e.hi)):
        return f"{num(e.mean, digits)} (n={e.n})"
    return f"{num(e.mean, digits)} [{num(e.lo, digits)}, {num(e.hi, digits)}] (n={e.n})"


def ramp_section(a: StudyAnalysis, ds: xr.Dataset) -> list[Block]:
    """Steps and examples to the target of each arm, ramp − constant with intervals."""
    rec: RampComparison | None = compare_ramps(ds, dict(a.best), a.batch_unit)
    if rec is None:
        return []
    t = "the target" if rec.target is None else f"L < {rec.target:g}"
    rows = [
        [
            arm.point,
            "ramp" if arm.ramped else "constant",
            integer(arm.rampup_steps),
            integer(arm.best_steps),
            integer(arm.best_examples),
            _estimate(arm.steps),
            _estimate(arm.examples),
            arm.reference or "—",
            _estimate(arm.d_steps),
            _estimate(arm.d_examples),
        ]
        for arm in rec.arms
    ]
    out = [
        heading("Batch ramp-up vs a constant batch"),
        table(
            [
                "point",
                "batch",
                "steps before the final batch",
                f"steps to {t} (best tune)",
                f"examples ({rec.batch_unit})",
                "steps, confirm seeds [95%]",
                f"examples, confirm seeds [95%] ({rec.batch_unit})",
                "compared with",
                "Δ steps (ramp − constant) [95%]",
                f"Δ examples [95%] ({rec.batch_unit})",
            ],
            rows,
            "Steps and examples where the eval loss crossed the target (log-linear between "
            "evaluations). Confirm seeds rerun each arm's best tuned values; intervals are "
            "t-intervals of the mean and Welch intervals of the difference. Seeds that never "
            "reached the target are left out of the means (n says how many counted).",
        ),
    ]
    out += [para(v) for v in rec.verdicts]
    if rec.claims:
        level = rec.claims[0].level
        out.append(
            para(
                f"Claims, each tested on the confirm seeds with a one-sided Welch t-test at "
                f"p < {level:g} (docs/science.md); a claim that does not reach the level is "
                "not shown with that many seeds, not a result:"
            )
        )
        out += [para(c.sentence()) for c in rec.claims]
    if not any(arm.n_seeds for arm in rec.arms):
        out.append(
            para("No confirm seeds ran (budget.confirm_seeds = 0): no intervals.", "warning")
        )
    return out


def spikes_section(ds: xr.Dataset) -> list[Block]:
    """Spikes per point: trials with spikes, counts, divergences, LRs with and without."""
    rec: SpikeTable | None = count_spikes(ds)
    if rec is None:
        return []
    rows = [
        [
            r.point,
            r.batch,
            r.b2,
            str(r.trials),
            str(r.with_loss_spikes),
            str(r.loss_spikes),
            str(r.grad_norm_spikes),
            str(r.diverged),
            num(r.lr_spiking),
            num(r.lr_quiet),
            *(_restart_cells(r) if rec.total_restarts is not None else []),
        ]
        for r in rec.rows
    ]
    out = [
        heading("Instability: loss and gradient-norm spikes"),
        table(
            [
                "point",
                "batch",
                "β2",
                "trials",
                "trials with a loss spike",
                "loss spikes",
                "grad-norm spikes",
                "diverged",
                "median LR, trials with spikes",
                "median LR, without",
                *(RESTART_COLUMNS if rec.total_restarts is not None else []),
            ],
            rows,
            SPIKE_RULE + (RESTART_RULE if rec.total_restarts is not None else ""),
        ),
    ]
    if rec.total_restarts is not None:
        out.append(para(_restart_cost(rec)))
    if rec.total_loss_spikes == 0:
        out.append(
            para(
                "No trial of this study had a loss spike by this rule"
                + (
                    f" ({rec.total_grad_norm_spikes} gradient-norm spikes were recorded)."
                    if rec.total_grad_norm_spikes
                    else "."
                ),
                "note",
            )
        )
    return out


RESTART_COLUMNS = ["trials that restarted", "restarts", "steps redone (share of steps kept)"]
RESTART_RULE = (
    " Under train.on_spike.policy=restart a loss spike (or a non-finite loss) sends the "
    "trial back to its newest checkpoint at least train.on_spike.rewind_steps before the "
    "spike, and the data stream skips train.on_spike.skip_batches batches from there "
    "(docs/science.md); the steps it abandons are redone: compute spent, not progress. "
    "Spikes counted are those of the path each trial kept; each restart's steps are in its "
    "events.jsonl (sweep status lists them)."
)


def _restart_cells(r: SpikeRow) -> list[str]:
    if r.restarts is None:
        return ["—", "—", "—"]
    share = f" ({100 * r.steps_redone / r.steps_done:.1f}%)" if r.steps_done else ""
    return [str(r.with_restarts), str(r.restarts), f"{r.steps_redone}{share}"]


def _restart_cost(rec: SpikeTable) -> str:
    """What the restarts cost, in all."""
    kept = sum(r.steps_done or 0 for r in rec.rows if r.restarts is not None)
    redone = rec.total_steps_redone or 0
    share = (
        f" — {100 * redone / kept:.1f}% on top of the {integer(kept)} steps kept" if kept else ""
    )
    return (
        f"Restarts: {rec.total_restarts} in all, which redid {integer(redone)} steps{share}. "
        "Steps to the target are those of the path that reached it; the redone steps are in "
        "each trial's steps_spent, examples_done and flops_done."
    )


def branch_section(a: StudyAnalysis, ds: xr.Dataset) -> list[Block]:
    """B_crit(t) of every `sweep branch` measurement, with each step's branches."""
    found = branching.from_dataset(ds.attrs.get("branches"))
    if not found:
        return []
    out = [heading("Critical batch size over training (branching)")]
    for m in found:
        out.append(
            para(
                f"Branches of {m['base']}: each continues the base from a checkpoint at k×its "
                f"batch for {integer(m['window_examples'])} {a.batch_unit} with the LR rule "
                f"'{m['lr_rule']}'; a branch keeps up when its loss improvement over the "
                f"window is at least {1 - float(m['tolerance']):g} × the base's over the same "
                "examples. B_crit(t) is the largest tested batch that keeps up together with "
                "every smaller one."
            )
        )
        rows = []
        for s in m["steps"]:
            judged = ", ".join(
                f"{b['batch']}:{'✓' if b['keeps_up'] else '✗' if b['keeps_up'] is False else '?'}"
                + (f"({num(b['ratio'], 3)})" if is_finite(b["ratio"]) else "")
                for b in s["branches"]
            )
            if s["censored"] == branching.ABOVE:
                bc = f"≥ {num(s['b_crit'])}"
            elif s["censored"] == branching.BELOW:
                bc = f"< {num(min(s['tested']))}" if s["tested"] else "—"
            else:
                bc = num(s["b_crit"])
            rows.append(
                [
                    integer(s["step"]),
                    integer(s["examples"]),
                    integer(s["tokens"]),
                    str(s["base_batch"]),
                    bc,
                    "yes" if s["complete"] else "no (branches running)",
                    judged,
                ]
            )
        out.append(
            table(
                [
                    "step",
                    f"examples ({a.batch_unit})",
                    "tokens",
                    "base batch",
                    f"B_crit ({a.batch_unit})",
                    "all judged",
                    "branch batch: kept up (progress ratio)",
                ],
                rows,
            )
        )
    return out
