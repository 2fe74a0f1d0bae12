"""Regenerate README's headline figure (docs/demo_sb.png) from a finished demo run dir.

    python docs/make_figure.py runs/batchsize_vs_steps            # → docs/demo_sb.png
    python docs/make_figure.py RUN_DIR -o OTHER.png

The figure is the report's S(B) figure (steps to the target vs batch size with the fit and
B_crit, or "not determined" and no line), drawn by the same code as `sweep report`, so
the same run dir always gives the same bytes. Nothing is written into the run dir.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    """Draw RUN_DIR's S(B) figure into ``-o`` (default docs/demo_sb.png)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir", help="a finished run dir of conf=batchsize_vs_steps")
    p.add_argument("-o", "--out", default=str(HERE / "demo_sb.png"), help="the PNG to write")
    args = p.parse_args(argv)

    from stepscale.analysis import figures, load
    from stepscale.analysis.analyze import analyze
    from stepscale.analysis.figures import style
    from stepscale.analysis.load import RunDirError

    try:
        ds = load(args.run_dir)
    except RunDirError as exc:
        print(f"make_figure: {exc}", file=sys.stderr)
        return 2
    rec = figures.steps.steps_vs_batch(analyze(ds), ds)
    if rec is None:
        print(f"make_figure: {args.run_dir} has no batch-size axis or target", file=sys.stderr)
        return 2
    data = style.save_png(figures.draw("steps_vs_batch", rec), Path(args.out))
    print(f"{args.out}: {len(data) // 1024} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
