"""The report's ladder section: the two definitions of "the best batch size", every rung's
optimum, the laws with their intervals, the "B_crit depends on D, not N" claim and the
held-out check ("has it predicted?"), from `stepscale.analysis.ladder`."""

from __future__ import annotations

import math

from stepscale.analysis.fits.ladder import LAWS
from stepscale.analysis.headline import interval_text, law_determination, sig
from stepscale.analysis.report.blocks import Block, heading, para, table
from stepscale.analysis.study import StudyAnalysis

DEFINITIONS = (
    "Two definitions of the best batch size. B_opt(N, D): the batch size of lowest final "
    "loss at the rung's token budget D, each batch size at its best learning rate (StepFun "
    "2025, DeepSeek 2024). B_crit(N, D): from the steps each batch size needs to reach a "
    "target, S(B) = S_min(1 + B_crit/B), where the target at horizon D is the loss the "
    "smallest model reaches at D, 2% looser (Zhang et al. 2024). N counts the parameters "
    "outside the embeddings, D the tokens a trial trains (docs/science.md)."
)


LAW_COLUMNS = [
    "law",
    "fit (exponent [95% bootstrap interval])",
    "rungs",
    "residual std (log)",
    "determined",
]


def ladder_section(a: StudyAnalysis) -> list[Block]:
    """The section's blocks (none unless the study is a ladder)."""
    lad = a.ladder
    if lad is None:
        return []
    unit = lad.batch_unit
    out = [heading("Ladder: laws across scale"), para(DEFINITIONS)]
    rows = []
    for o in lad.rungs:
        total = lad.params_total.get(f"{o.n:g},{o.d:g}", math.nan)
        flags = [w for w, on in (("B at grid end", o.b_at_edge), ("η at end", o.lr_at_edge)) if on]
        rows.append([
            sig(o.n), sig(total), sig(o.d), sig(o.b_opt), sig(o.lr_opt), sig(o.loss_opt, 4),
            sig(o.b_crit), sig(o.target, 4), str(o.n_trials), ", ".join(flags) or "—",
        ])  # fmt: skip
    out.append(
        table(
            [
                "N (non-emb.)", "N (total)", "D tokens", f"B_opt ({unit})", "η*", "L*",
                f"B_crit ({unit})", "B_crit target", "trials", "flags",
            ],
            rows,
            "Every rung's optimum, by compute N·D.",
        )
    )  # fmt: skip
    pooled = [o for o in lad.rungs if o.lr_batches > 1]
    if pooled:
        lo, hi = min(o.lr_batches for o in pooled), max(o.lr_batches for o in pooled)
        count = f"{lo}" if lo == hi else f"{lo}–{hi}"
        out.append(
            para(
                f"η* of a rung is read off its η*(B) line at B_opt: each batch size's η* (a "
                f"local parabola in log η), log η* linear in log B with one slope for the "
                f"ladder, η* ∝ B^{pooled[0].lr_slope:.3f}, the rung's level the mean over "
                f"{count} batch sizes (those whose η* is at an end of the LRs tried are left "
                f"out), so that it rests on all the rung's trials, not on the few of B_opt."
            )
        )
    if lad.laws is not None:
        law_rows = []
        for name, law in lad.laws.laws.items():
            exps = "; ".join(
                f"{r}^{law.exponents[r]:.3f} {interval_text(*law.ci[r])}" for r in law.regressors
            )
            det = law_determination(law)
            law_rows.append([
                LAWS[name], f"{sig(law.coefficient)} · {exps}", str(law.n),
                sig(law.residual_std), "yes" if det.determined else f"no: {det.reason}",
            ])  # fmt: skip
        out.append(
            table(
                LAW_COLUMNS,
                law_rows,
                f"Power laws fitted on every rung (B in {unit} of "
                f"{lad.tokens_per_example:g} tokens).",
            )
        )
        out += [para(f"{LAWS[k]}: not fitted — {v}", "note") for k, v in lad.laws.skipped.items()]
    elif lad.laws_error:
        out.append(para(f"The laws were not fitted: {lad.laws_error}", "warning"))
    if lad.claim is not None:
        out.append(para(lad.claim.sentence))
    out.append(heading("Has it predicted?", 3))
    out.append(
        para(
            "The largest rung is held out: the laws fitted on the smaller rungs predict its "
            "η*, B_opt and loss; the loss at the predicted settings is estimated from the "
            "rung's own trials (a local parabola in log η at the nearest batch sizes), and "
            "compared with its best estimated the same way (the parabolas' minimum over its "
            "batch sizes, not its best single trial, the lowest of many noisy draws) and with "
            "reusing the smallest rung's settings. A trial's final loss is one draw (on the "
            "text ladder, one run's loss at fixed settings scatters by about 1%): a regret "
            "near 1% is within that noise; training the settings again at several seeds "
            "(benchmarks/ladder_reruns.py) measures it without the luck."
        )
    )
    out.append(
        para(lad.holdout.sentence(), "" if lad.holdout.verdict == "predicted" else "warning")
    )
    return out
