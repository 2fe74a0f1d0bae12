"""The one style of every figure, and deterministic PNG output.

matplotlib is imported inside the functions (it is heavy and only the report needs it).
Figures are made with ``matplotlib.figure.Figure`` (no pyplot, no global backend), drawn
under :func:`context`, and saved by :func:`to_png` with a fixed DPI and no software or
date metadata, so the same data always gives the same bytes.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "DPI",
    "LR",
    "STEPS",
    "TOKENS",
    "batch_label",
    "color",
    "context",
    "examples_label",
    "figure",
    "legend",
    "objective_label",
    "plain_ticks",
    "save_svg",
    "to_png",
    "to_svg",
]

DPI = 110
RC: dict[str, Any] = {
    "font.family": "DejaVu Sans",
    "font.size": 9.0,
    "axes.titlesize": 10.0,
    "axes.labelsize": 9.0,
    "legend.fontsize": 8.0,
    "xtick.labelsize": 8.0,
    "ytick.labelsize": 8.0,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "lines.linewidth": 1.6,
    "lines.markersize": 5.0,
    "legend.frameon": False,
    "figure.dpi": DPI,
    "savefig.dpi": DPI,
    "svg.hashsalt": "stepscale",
    # SVG text stays text (editable, half the size, 3× faster to write than glyph paths).
    "svg.fonttype": "none",
    "image.cmap": "viridis",
}
PALETTE = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#9467bd",
    "#ff7f0e",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
)

STEPS = "steps"
TOKENS = "tokens"
LR = "peak learning rate"


def batch_label(unit: str) -> str:
    """Axis label of batch sizes counted in ``unit`` (the study's batch unit)."""
    return f"batch size ({unit})"


def examples_label(unit: str) -> str:
    """Axis label of examples counted in ``unit`` (the study's batch unit)."""
    return f"examples ({unit})"


def color(i: int) -> str:
    """The i-th colour of the palette (cycling)."""
    return PALETTE[i % len(PALETTE)]


def objective_label(kind: str) -> str:
    """Axis label of a study's objective, with its unit."""
    return {
        "steps_to_target": "steps to target (steps)",
        "final_eval_loss": "final eval loss",
        "min_eval_loss": "min eval loss",
    }.get(kind, f"objective ({kind})" if kind else "objective")


@contextlib.contextmanager
def context() -> Iterator[None]:
    """The rc settings of every figure (wrap both drawing and saving)."""
    import matplotlib

    with matplotlib.rc_context(RC):
        yield


def figure(ncols: int = 1, nrows: int = 1, width: float = 6.4, height: float = 4.2) -> Any:
    """A new Figure with a grid of axes: ``(fig, axes[nrows][ncols])``."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def legend(fig: Any, ax: Any, outside: bool, ncols: int = 2, **kwargs: Any) -> None:
    """The legend inside ``ax``, or below the plot (for long legends, or where lines
    fill the whole axes) when ``outside``."""
    if outside:
        handles, labels = ax.get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncols=ncols, **kwargs)
    else:
        ax.legend(loc="best", **kwargs)


@functools.cache
def _plain_formatter() -> type:
    from matplotlib.ticker import LogFormatterSciNotation

    class PlainLog(LogFormatterSciNotation):  # type: ignore[misc]
        """Labels the ticks matplotlib would label, as 16 or 0.001 rather than 2^4, 10^-3."""

        def __call__(self, x: float, pos: int | None = None) -> str:
            text = super().__call__(x, pos)
            return f"{x:g}" if text and 1e-4 <= abs(x) < 1e6 else text

    return PlainLog


def plain_ticks(ax: Any) -> None:
    """Plain-number tick labels on the log axes of ``ax`` (call after setting scales)."""
    cls = _plain_formatter()
    for axis in (ax.xaxis, ax.yaxis):
        if axis.get_scale() != "log":
            continue
        base = axis.get_transform().base
        axis.set_major_formatter(cls(base=base))
        axis.set_minor_formatter(cls(base=base, labelOnlyBase=False))


def to_png(fig: Any) -> bytes:
    """The PNG bytes of ``fig``: fixed DPI, no metadata that changes between renders."""
    import io

    buf = io.BytesIO()
    with context():
        fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def to_svg(fig: Any) -> bytes:
    """The SVG bytes of ``fig``: no date or creator, ids salted with ``svg.hashsalt``
    (the same figure always gives the same bytes)."""
    import io

    buf = io.BytesIO()
    with context():
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    return buf.getvalue()


def save_svg(fig: Any, path: Path) -> bytes:
    """Write ``fig`` as SVG to ``path``; returns the bytes written."""
    data = to_svg(fig)
    path.write_bytes(data)
    return data


def save_png(fig: Any, path: Path) -> bytes:
    """Write ``fig`` as PNG to ``path``; returns the bytes written."""
    data = to_png(fig)
    path.write_bytes(data)
    return data
