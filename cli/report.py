"""`sweep report RUN_DIR [--target L …]`: the report of a study, as files in RUN_DIR/report/;
`sweep report RUN_A RUN_B … --out DIR`: a comparison of several studies in DIR
(:mod:`analysis.compare`).

The `sweep` command table registers :func:`report_arguments` and runs :func:`command`;
:func:`run_report` returns a small JSON-ready summary or raises `UsageError` (missing run
dir, no trials, unreadable files, bad targets: exit 2); the command prints what it wrote and,
as its last line, the page to open (``--json``: the summary). Importing this module is cheap
(registering the command does not load xarray or matplotlib).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from stepscale.cli.exit_codes import out_of_memory
from stepscale.errors import UsageError

__all__ = ["command", "report_arguments", "run_report", "summary_text"]


def report_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``sweep report``: RUN_DIR…, ``--out DIR``, repeatable ``--target L``."""
    p.description = (
        "Analyse a study's run directory: steps to target per batch size, the S(B) fit "
        "and critical batch size (also at other --target losses, from the stored "
        "curves), optimal LR vs batch size, noise scale, ablation tables; writes "
        "index.html, report.md, fits.json, results.nc, steps_to_target.csv, "
        "provenance.json and figures/*.png|svg into RUN_DIR/report/. With several run "
        "dirs and --out DIR: one comparison page overlaying their S(B) and η*(B)."
    )
    p.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        nargs="+",
        help="the study's run directory; two or more: a comparison of their S(B) and η*(B) "
        "(needs --out)",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="where a comparison of several run dirs is written (index.html, report.md, "
        "comparison.json, figures/); required with two or more RUN_DIRs",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print what was written (the report dir, its files and figures) as JSON instead "
        "of the page to open",
    )
    p.add_argument(
        "--target",
        type=float,
        action="append",
        default=[],
        metavar="L",
        help="also analyse steps to eval loss < L (repeatable)",
    )


def run_report(args: argparse.Namespace) -> dict[str, Any]:
    """Write the report of ``args.run_dir`` (or the comparison of several into ``args.out``);
    return {report_dir, files, …}."""
    targets = list(getattr(args, "target", None) or [])
    bad = [t for t in targets if not math.isfinite(t)]
    if bad:
        raise UsageError(f"--target must be a finite number, got {bad[0]}")
    run_dirs = args.run_dir if isinstance(args.run_dir, list) else [args.run_dir]
    out = getattr(args, "out", None)
    if len(run_dirs) > 1:
        if not out:
            raise UsageError(
                f"report: {len(run_dirs)} run dirs make a comparison, which needs --out DIR "
                "(where to write it; each run dir's own report stays in RUN_DIR/report/)"
            )
        from stepscale.analysis.compare import write_comparison

        return write_comparison(run_dirs, out, targets)
    if out:
        raise UsageError(
            "report: --out is for comparisons of two or more run dirs; one study's report is "
            f"written into {run_dirs[0]}/report/"
        )
    from stepscale.analysis.report import write_report  # heavy (xarray, matplotlib): only when run

    return write_report(run_dirs[0], targets).to_dict()


def command(args: argparse.Namespace) -> int:
    """`sweep report`: write the report (or comparison); print what it wrote, ending with the
    page to open (``report: DIR/index.html``), or (``--json``) the listing as JSON."""
    import json

    with out_of_memory("not enough memory for the report; run it on a machine with more memory"):
        result = run_report(args)
    if getattr(args, "json", False):
        print(json.dumps(result, indent=2, sort_keys=True, default=str))
        return 0
    print(summary_text(result))
    return 0


def summary_text(result: dict[str, Any]) -> str:
    """What a person reads after `sweep report`: what was written, then the page to open
    as the last line."""
    folder = Path(str(result["report_dir"]))
    files = result.get("files") or []
    if "studies" in result:  # a comparison
        studies = ", ".join(map(str, result["studies"]))
        what = f"wrote the comparison of {studies}"
    else:
        what = f"wrote the report of {result.get('n_trials', 0)} trials"
        if result.get("partial"):
            what += " (partial: the study is still running or did not end)"
    lines = [f"{what}: {len(files)} files in {folder}/", f"report: {folder / 'index.html'}"]
    return "\n".join(lines)
