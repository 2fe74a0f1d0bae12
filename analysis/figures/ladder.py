"""Ladder figure: η* vs N (one line per D) and B_opt vs D (one line per N), measured
optima as points and the fitted laws as lines (`stepscale.analysis.ladder`). A law that is
not determined (`stepscale.analysis.headline.law_determination`) draws no line: its panel
says why; a B_opt at an end of the batch grid (a bound, not an optimum) is an open marker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr

from stepscale.analysis.figures import style
from stepscale.analysis.headline import LAW_SYMBOLS, NOT_DETERMINED, law_determination
from stepscale.analysis.study import StudyAnalysis

__all__ = ["LadderFigure", "draw_ladder_laws", "ladder_laws"]


@dataclass(frozen=True)
class LadderFigure:
    """Each rung's (N, D, η*, B_opt) and the laws' values on a grid of N and D."""

    batch_unit: str
    n: tuple[float, ...]
    d: tuple[float, ...]
    lr_opt: tuple[float, ...]
    b_opt: tuple[float, ...]
    # (fixed value, xs, ys) per line: η* vs N at each D, B_opt vs D at each N
    lr_lines: tuple[tuple[float, tuple[float, ...], tuple[float, ...]], ...]
    b_lines: tuple[tuple[float, tuple[float, ...], tuple[float, ...]], ...]
    b_at_edge: tuple[bool, ...] = ()
    # law → why it draws no line ("not determined, …" or "not fitted")
    undrawn: tuple[tuple[str, str], ...] = ()


def _law_line(law: Any, axis: str, xs: np.ndarray, fixed: dict[str, float]) -> tuple[float, ...]:
    return tuple(
        law.predict(**{r: (x if r == axis else fixed[r]) for r in law.regressors}).value for x in xs
    )


def ladder_laws(a: StudyAnalysis, ds: xr.Dataset) -> LadderFigure | None:
    """The record (None unless the study is a ladder with fitted laws)."""
    lad = a.ladder
    if lad is None or lad.laws is None or not lad.rungs:
        return None
    rungs = lad.rungs
    ns = sorted({o.n for o in rungs})
    ds_ = sorted({o.d for o in rungs})
    lr_law, b_law = lad.laws.laws.get("lr"), lad.laws.laws.get("batch")
    undrawn = []
    for name, law in (("lr", lr_law), ("batch", b_law)):
        det = law_determination(law) if law is not None else None
        if det is None:
            undrawn.append((name, "not fitted"))
        elif not det.determined:
            undrawn.append((name, f"{NOT_DETERMINED}, {det.reason}"))
    skip = {name for name, _ in undrawn}
    lr_law = None if "lr" in skip else lr_law
    b_law = None if "batch" in skip else b_law
    gn = np.geomspace(ns[0], ns[-1], 20)
    gd = np.geomspace(ds_[0], ds_[-1], 20)
    lr_lines = (
        tuple((d, tuple(gn), _law_line(lr_law, "N", gn, {"N": 0.0, "D": d})) for d in ds_)
        if lr_law is not None and "N" in lr_law.regressors
        else ()
    )
    b_lines = (
        tuple((n, tuple(gd), _law_line(b_law, "D", gd, {"N": n, "D": 0.0})) for n in ns)
        if b_law is not None and "D" in b_law.regressors
        else ()
    )
    return LadderFigure(
        batch_unit=lad.batch_unit,
        n=tuple(o.n for o in rungs),
        d=tuple(o.d for o in rungs),
        lr_opt=tuple(o.lr_opt for o in rungs),
        b_opt=tuple(o.b_opt for o in rungs),
        lr_lines=lr_lines,
        b_lines=b_lines,
        b_at_edge=tuple(o.b_at_edge for o in rungs),
        undrawn=tuple(undrawn),
    )


def draw_ladder_laws(rec: LadderFigure) -> Any:
    """Two log–log panels: η* vs N, B_opt vs D."""
    fig, axes = style.figure(ncols=2, width=10.0)
    left, right = axes[0]
    ds_ = sorted(set(rec.d))
    ns = sorted(set(rec.n))
    for i, d in enumerate(ds_):
        m = [k for k, v in enumerate(rec.d) if v == d]
        left.scatter(
            [rec.n[k] for k in m],
            [rec.lr_opt[k] for k in m],
            color=style.color(i),
            label=f"D = {d:.3g}",
        )
    for i, (d, xs, ys) in enumerate(rec.lr_lines):
        left.plot(xs, ys, color=style.color(ds_.index(d) if d in ds_ else i))
    edge = rec.b_at_edge or (False,) * len(rec.n)
    for i, n in enumerate(ns):
        label: str | None = f"N = {n:.3g}"
        for at_edge in (False, True):
            m = [k for k, v in enumerate(rec.n) if v == n and edge[k] == at_edge]
            if not m:
                continue
            right.scatter(
                [rec.d[k] for k in m],
                [rec.b_opt[k] for k in m],
                color=style.color(i),
                facecolors="none" if at_edge else style.color(i),
                label=label,
            )
            label = None  # one legend entry per N; open markers: bounds (the caption)
    for i, (n, xs, ys) in enumerate(rec.b_lines):
        right.plot(xs, ys, color=style.color(ns.index(n) if n in ns else i))
    left.set(
        xscale="log", yscale="log", xlabel="N (parameters outside the embeddings)", ylabel="η*"
    )
    right.set(xscale="log", yscale="log", xlabel="D (tokens)", ylabel=f"B_opt ({rec.batch_unit})")
    why = dict(rec.undrawn)
    for ax, name in ((left, "lr"), (right, "batch")):
        if name in why:
            ax.set_title(f"{LAW_SYMBOLS[name]} law: {why[name]}: no line", fontsize="small")
    left.legend(fontsize="small")
    right.legend(fontsize="small")
    return fig
