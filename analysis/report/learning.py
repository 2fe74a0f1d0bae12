"""The report's "Has it trained?" section: per point, its best trial against the task's
baseline, its own step-0 eval loss and the floor (analysis.verdict); points that did not
learn are flagged."""

from __future__ import annotations

import math

from stepscale.analysis.headline import sig
from stepscale.analysis.report.blocks import Block, heading, para, table
from stepscale.analysis.study import StudyAnalysis
from stepscale.analysis.verdict import MARGIN


def learning_section(a: StudyAnalysis) -> list[Block]:
    """The section's blocks (none when no trial finished)."""
    v = a.learning
    if not v.points:
        return []
    rows = []
    for p in v.points:
        flag = {True: "yes", False: "NO", None: "unknown"}[p.learned]
        prog = p.progress
        rows.append([
            p.point,
            p.trial,
            sig(p.initial),
            sig(p.final),
            sig(p.baseline),
            p.baseline_kind or ("step-0 eval loss" if math.isfinite(p.initial) else "—"),
            sig(p.floor),
            f"{prog:.0%}" if math.isfinite(prog) else "—",
            flag,
        ])  # fmt: skip
    headers = [
        "point",
        "best trial",
        "step-0 eval loss",
        "final eval loss",
        "baseline",
        "baseline is",
        "floor",
        "from baseline to floor",
        "learned",
    ]
    rule = (
        f"A point learned when its best trial's final eval loss is below the baseline (else "
        f"its step-0 eval loss) by {MARGIN:.0%} of the way to the floor (0 when unknown)."
    )
    blocks = [heading("Has it trained?"), para(v.line()), para(rule)]
    if v.not_learned:
        blocks.append(para(f"did not learn: {', '.join(v.not_learned)}", "warning"))
    blocks.append(table(headers, rows, "best trial per point against the baseline"))
    return blocks
