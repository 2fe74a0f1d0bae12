"""Replay figure: compute fraction vs B_crit error of each replayed protocol
(:mod:`analysis.replay`): where a cheaper protocol would have landed."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from stepscale.analysis.figures import style
from stepscale.analysis.replay import ReplayResult

__all__ = ["ReplayFigure", "draw_replay", "replay_figure"]


@dataclass(frozen=True)
class ReplayFigure:
    """Per protocol: examples spent as a fraction of the study's (median, q10, q90) and
    the error |B_crit / B_crit,full − 1| in percent (median, p90)."""

    group: str
    protocols: tuple[str, ...]
    fraction: tuple[float, ...]
    fraction_lo: tuple[float, ...]
    fraction_hi: tuple[float, ...]
    error: tuple[float, ...]
    error_p90: tuple[float, ...]
    random: tuple[bool, ...]


def replay_figure(rep: ReplayResult) -> ReplayFigure | None:
    """The record of the first group's protocols with a finite error (None without any)."""
    if not rep.totals:
        return None
    group = next(iter(rep.totals))
    rows = [
        r
        for r in rep.results
        if r.group == group
        and math.isfinite(r.error["median"])
        and math.isfinite(r.examples["median"])
    ]
    if not rows:
        return None
    return ReplayFigure(
        group=group,
        protocols=tuple(r.protocol for r in rows),
        fraction=tuple(r.examples["median"] for r in rows),
        fraction_lo=tuple(r.examples["q10"] for r in rows),
        fraction_hi=tuple(r.examples["q90"] for r in rows),
        error=tuple(100 * r.error["median"] for r in rows),
        error_p90=tuple(100 * min(r.error["p90"], 10.0) for r in rows),
        random=tuple(r.draws > 1 for r in rows),
    )


def draw_replay(rec: ReplayFigure) -> Any:
    """Each protocol a point (median) with its 10–90% compute range and a bar up to the
    90th percentile of its error; random protocols hollow."""
    fig, ((ax,),) = style.figure(width=7.0, height=4.6)
    for i, name in enumerate(rec.protocols):
        c = style.color(i)
        x, y = rec.fraction[i], rec.error[i]
        ax.errorbar(
            [x],
            [y],
            xerr=[[x - rec.fraction_lo[i]], [rec.fraction_hi[i] - x]],
            yerr=[[0.0], [max(rec.error_p90[i] - y, 0.0)]],
            fmt="o",
            color=c,
            mfc="none" if rec.random[i] else c,
            capsize=2,
            lw=1,
        )
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("examples spent (fraction of the study's tune trials)")
    ax.set_ylabel("|B_crit / B_crit,full − 1| (%)")
    ax.set_ylim(bottom=0)
    title = "Replay: compute vs B_crit error (bar: to the 90th percentile)"
    ax.set_title(title if rec.group == "all" else f"{title} — {rec.group}")
    return fig
