"""The report's sections on each fit: S(B) and B_crit, other targets, the optimal LR, the
gradient noise scale, the spread over seeds, ablations."""

from __future__ import annotations

import math
from collections.abc import Sequence

from stepscale.analysis.analyze import DROPPED
from stepscale.analysis.fits.lr import LRLaw
from stepscale.analysis.headline import (
    NOT_DETERMINED,
    lr_law_determination,
    saturating_determination,
    steps_fit_determination,
)
from stepscale.analysis.report.blocks import (
    Block,
    heading,
    para,
    table,
)
from stepscale.analysis.report.numbers import batch_text, integer, interval, is_finite, num
from stepscale.analysis.report.tables import (
    refit_command,
)
from stepscale.analysis.study import StudyAnalysis


def group_name(g: str) -> str:
    return "" if g == "all" else f" — {g}"


def points_table(a: StudyAnalysis) -> Block:
    t = "target" if a.target is None else f"L < {a.target:g}"
    headers = [
        "point",
        "trials (tune+confirm)",
        "states",
        "reached",
        f"steps to {t}",
        f"examples to target ({a.batch_unit})",
        "tokens to target (tokens)",
        "FLOPs to target",
        "wall to target (s)",
        "best objective",
        "best eval loss",
        "steps spent",
        "FLOPs spent",
        "wall spent (s)",
    ]
    rows = []
    for p in a.points:
        steps = (
            integer(p.steps_to_target)
            if is_finite(p.steps_to_target)
            else (
                f"not reached in {integer(p.censored_at)}"
                if is_finite(p.censored_at)
                else "not reached"
            )
        )
        rows.append(
            [
                p.point,
                f"{p.n_tune}+{p.n_confirm}",
                ", ".join(f"{k} {v}" for k, v in sorted(p.states.items())),
                f"{p.n_reached}/{p.n_tune}",
                steps,
                integer(p.examples_to_target),
                integer(p.tokens_to_target),
                num(p.flops_to_target, 3),
                num(p.wall_s_to_target),
                num(p.best_objective),
                num(p.best_eval_loss),
                integer(p.steps_spent),
                num(p.flops_spent, 3),
                num(p.wall_s_spent),
            ]
        )
    return table(
        headers,
        rows,
        "Per point: steps to result is the fewest steps of any tune "
        "trial; wall time and FLOPs are those of that trial to the target.",
    )


def fit_section(a: StudyAnalysis) -> list[Block]:
    if a.target is None or a.axes.batch is None:
        return []
    out = [heading(f"S(B) fit at eval loss < {a.target:g}")]
    headers = [
        "group",
        "S_min (steps)",
        f"E_min ({a.batch_unit})",
        f"B_crit ({a.batch_unit})",
        "CBS (r, B0)",
        "perfect scaling B ≤",
        "max parallelism B ≥",
        "batch sizes fitted",
        "not reached (censored at)",
        "residual sd (log)",
    ]
    rows = []
    for g in a.groups:
        f = g.fit_at(a.target)
        nr = []
        if g.result is not None:
            nr = [
                f"{batch_text(b)} ({integer(c) if c is not None else '?'})"
                for b, c in zip(g.result.not_reached, g.result.censored_at, strict=True)
            ]
        if f is None:
            rows.append(
                [
                    g.group,
                    "—",
                    "—",
                    "—",
                    "—",
                    "—",
                    "—",
                    "—",
                    "; ".join(nr) or "—",
                    f"not fitted: {g.steps_error or 'no data'}",
                ]
            )
            continue
        det = steps_fit_determination(f)
        rows.append(
            [
                g.group,
                f"{num(f.s_min)} {interval(f.s_min_ci)}",
                f"{num(f.e_min)} {interval(f.e_min_ci)}",
                f"{num(f.b_crit)} {interval(f.b_crit_ci)}" if det.determined else det.label,
                f"{num(f.cbs)} (r={num(f.overhead)}, B0={batch_text(f.reference_batch)})",
                num(f.perfect_scaling_max_batch),
                num(f.max_parallelism_min_batch),
                ", ".join(batch_text(b) for b in f.batch_sizes),
                "; ".join(nr) or "none",
                num(f.residual_std, 3),
            ]
        )
    out.append(
        table(
            headers,
            rows,
            "S(B) = S_min (1 + B_crit/B), least squares in log space; "
            "[95% residual-bootstrap intervals]. Batch sizes that never reached the "
            "target are censored, not fitted, and listed; a batch size that needed more than "
            "1.25× the steps of a smaller one is under-tuned and left out.",
        )
    )
    out.append(para(f"Refit from the table: `{refit_command(a.batch_unit)}`", "note"))
    rows = []
    for g in a.groups:
        if g.result is None:
            continue
        r = g.result
        fit = g.fit_at(a.target)
        under = set(fit.under_tuned) if fit is not None else set()
        for b, s, k in zip(r.batch_sizes, r.steps, r.n_rows, strict=True):
            status = "reached; under-tuned, left out of the fit" if b in under else "reached"
            rows.append([g.group, batch_text(b), integer(s), str(k), status])
        for b, c in zip(r.not_reached, r.censored_at, strict=True):
            rows.append([g.group, batch_text(b), "—", "", f"not reached within {integer(c)} steps"])
    if rows:
        out.append(
            table(
                ["group", "batch size", "steps to result", "tune trials", "status"],
                rows,
                "Steps to result per batch size",
            )
        )
    return out


def target_kind(a: StudyAnalysis, t: float) -> str:
    if t == a.target:
        return "study target" if a.target not in a.automatic else "primary (automatic)"
    return "automatic" if t in a.automatic else "given (--target)"


def targets_section(a: StudyAnalysis) -> list[Block]:
    rows: list[tuple[str, float, list[str]]] = []
    laws = []
    for g in a.groups:
        at = g.at_targets
        if at is None:
            continue
        for t, f in at.fits.items():
            problem = at.flagged.get(t)
            rows.append(
                (
                    g.group,
                    t,
                    [
                        g.group,
                        num(t),
                        target_kind(a, t),
                        num(f.b_crit) if steps_fit_determination(f).determined else NOT_DETERMINED,
                        interval(f.b_crit_ci),
                        num(f.s_min),
                        str(f.n_points),
                        ", ".join(batch_text(b) for b in f.not_reached) or "none",
                        "well-posed" if problem is None else f"not well-posed: {problem}",
                    ],
                )
            )
        for t, reason in at.skipped.items():
            status = (
                f"dropped: {reason[len(DROPPED) :]}"
                if reason.startswith(DROPPED)
                else f"not fitted: {reason}"
            )
            rows.append(
                (g.group, t, [g.group, num(t), target_kind(a, t), "—", "—", "—", "—", "—", status])
            )
        prefix = "" if g.group == "all" else f"{g.group}: "
        law = at.law
        if law is not None:
            laws.append(
                para(
                    f"{prefix}B_crit(L) = B*·L^slope with B* = {num(law.b_star)}, slope = "
                    f"{num(law.slope, 3)} {interval(law.slope_ci, 3)}, α_B = {num(law.alpha_b, 3)} "
                    f"(fitted on the {law.n_points} well-posed targets "
                    f"{', '.join(num(t) for t in law.targets)})."
                )
            )
        elif at.law_note:
            laws.append(para(prefix + at.law_note + ".", "note"))
    if not rows:
        return []
    rows.sort(key=lambda r: (r[0], r[1]))
    out = [heading("B_crit vs target loss")]
    if a.n_cut:
        out.append(
            para(
                f"The curves were cut at the target: {a.n_cut} trials stopped on reaching eval "
                f"loss {', '.join(num(c) for c in a.cut_at)} (stop_at_target), so no harder "
                f"target can be measured; only easier targets are available here.",
                "warning",
            )
        )
    out += [
        table(
            [
                "group",
                "target",
                "kind",
                f"B_crit ({a.batch_unit})",
                "95% interval",
                "S_min (steps)",
                "batch sizes fitted",
                "not reached",
                "status",
            ],
            [r[2] for r in rows],
            "S(B) refitted at each target from the stored eval-loss curves. Only well-posed "
            "fits enter the figure and B_crit(L): at least 3 batch sizes reaching the target "
            "after their 2nd evaluation, B_crit not at the bound of the fit, a 95% interval "
            "within a factor 10, curves not cut before the target. Automatic targets that "
            "fail are dropped, given ones are flagged.",
        ),
        *laws,
    ]
    return out


def lr_section(a: StudyAnalysis) -> list[Block]:
    rows = []
    laws = []
    for g in a.groups:
        o = g.optimal_lr
        if o is None:
            continue
        for i, b in enumerate(o.batch_sizes):
            rows.append(
                [
                    g.group,
                    batch_text(b),
                    num(o.lr_opt[i]),
                    o.method[i],
                    "yes" if o.at_edge[i] else "no",
                    num(o.best_lr[i]),
                    num(o.objective_opt[i]),
                    str(o.n_trials[i]),
                ]
            )
        if g.lr_law is not None:
            laws.append(para(lr_law_text(g.group, g.lr_law, o.batch_sizes)))
    if not rows:
        return []
    return [
        heading("Optimal learning rate"),
        table(
            [
                "group",
                "batch size",
                "η*",
                "method",
                "at range edge",
                "best trial LR",
                "objective at η*",
                "trials",
            ],
            rows,
            "η* per batch size: minimum of a local quadratic in log LR over the tuned "
            "trials (method 'best': the best trial's LR)",
        ),
        *laws,
    ]


def _prefix(group: str) -> str:
    return "" if group == "all" else f"{group}: "


def lr_law_text(group: str, law: LRLaw, batch_sizes: Sequence[float] = ()) -> str:
    """The η*(B) law of one group in words; "not determined" (no value, no rule) when α's
    interval or the number of points does not determine it (analysis.headline)."""
    below = "all batch sizes" if law.b_max is None else f"B ≤ {num(law.b_max)}"
    det = lr_law_determination(law)
    sat = law.saturating
    sat_det = saturating_determination(law, batch_sizes)
    if not det.determined:
        text = (
            f"{_prefix(group)}η*(B) = c·B^α: {NOT_DETERMINED} — {det.reason} (fitted on {below}, "
            f"{law.n_points} batch sizes); read η* per batch size from the table."
        )
    else:
        rules = "; ".join(
            f"{r.name} rule α={num(r.alpha, 2)}: {'inside' if r.inside_ci else 'outside'} "
            f"the interval"
            for r in law.rules
        )
        text = (
            f"{_prefix(group)}η*(B) = {num(law.c)}·B^α with α = {num(law.alpha)} "
            f"{interval(law.alpha_ci)} fitted on {below} ({law.n_points} batch sizes); "
            f"closest rule: {law.closest_rule} ({rules})."
        )
    if sat is not None and sat.identified:
        if sat_det.determined:
            text += (
                f" Saturating form ε_max/(1 + B_noise/B): ε_max = {num(sat.eps_max)}, "
                f"B_noise = {num(sat.b_noise)}."
            )
        else:
            text += f" Saturating form ε_max/(1 + B_noise/B): {NOT_DETERMINED} ({sat_det.reason})."
    return text


def noise_section(a: StudyAnalysis) -> list[Block]:
    rows = []
    for g in a.groups:
        f = g.fit_at(a.target)
        for p, s in g.noise.items():
            rows.append(
                [
                    g.group,
                    p,
                    num(s.median),
                    f"[{num(s.q25)}, {num(s.q75)}]",
                    str(s.n),
                    integer(s.from_step),
                    num(f.b_crit) if f is not None else "—",
                ]
            )
    if not rows:
        return []
    return [
        heading("Gradient noise scale"),
        table(
            [
                "group",
                "point",
                f"B_simple median ({a.batch_unit})",
                "quartiles",
                "values",
                "from step",
                "B_crit at target",
            ],
            rows,
            "B_simple of each point's best trial over the second half of training, beside "
            "the fitted B_crit",
        ),
    ]


def seeds_section(a: StudyAnalysis) -> list[Block]:
    rows = []
    for g in a.groups:
        s = g.seeds
        if s is None:
            continue
        for i, b in enumerate(s.batch_sizes):
            rows.append(
                [
                    g.group,
                    batch_text(b),
                    str(s.n[i]),
                    str(s.n_reached[i]),
                    num(s.mean[i]),
                    num(s.std[i]),
                    num(s.min[i]),
                    num(s.max[i]),
                ]
            )
    if not rows:
        return []
    what = "steps to target" if a.target is not None else "objective"
    return [
        heading("Spread over confirm seeds"),
        table(
            [
                "group",
                a.axes.x.name if a.axes.x else "x",
                "runs",
                "reached",
                "mean",
                "std",
                "min",
                "max",
            ],
            rows,
            f"{what} of the confirm runs (best parameters, other seeds)",
        ),
    ]


def ablation_section(a: StudyAnalysis) -> list[Block]:
    abl = a.ablation
    if abl is None:
        return []
    out = [heading(f"Ablation: {abl.axis}")]
    for row in abl.rows:
        title = "all" if math.isnan(row.batch) else f"batch size {batch_text(row.batch)}"
        rows = [
            [v.variant, str(v.n_trials), num(v.best), interval(v.ci), v.best_trial or "—"]
            for v in row.variants
        ]
        out.append(
            table(
                [abl.axis, "finished trials", "best objective", "95% interval", "best trial"],
                rows,
                title,
            )
        )
        probs = "; ".join(f"P({x} beats {y}) = {p:.3f}" for x, y, p in row.p_beats)
        if probs:
            out.append(para(f"{title}: {probs} (bootstrap over each variant's trials)."))
        if row.warning:
            out.append(para(row.warning, "warning"))
        out += [para(f"{title}: {c.sentence()}") for c in row.claims]
    return out
