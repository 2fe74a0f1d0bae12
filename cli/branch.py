"""The `sweep branch` command line: its arguments and the request they make (light: the
parser is built at every start of `sweep`; `sweeps.run.branches` does the work)."""

from __future__ import annotations

import argparse
from typing import Any

from stepscale.sweeps.run.branch_request import DEFAULT_FACTORS, DEFAULT_TOLERANCE, BranchRequest


def _numbers(kind: type) -> Any:
    def parse(text: str) -> list[Any]:
        try:
            return [kind(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"not a comma-separated list of {kind.__name__}s: {text!r}"
            ) from None

    return parse


def branch_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``sweep branch``."""
    p.description = (
        "Continue a finished trial (the base, batch B) from its kept checkpoints "
        "at k·B for a window of examples, each branch an ordinary trial in "
        "RUN_DIR/branches/<trial>/ (the study's launcher, storage and retries); prints "
        "B_crit at each step as JSON. The base study must keep its checkpoints: "
        "keep_checkpoints=true, train.checkpoint_every and train.keep_checkpoints."
    )
    p.add_argument("run_dir", help="the base study's run dir")
    p.add_argument(
        "--trial", help="base trial POINT/N (default: the best complete trial of the first point)"
    )
    p.add_argument(
        "--steps",
        type=_numbers(int),
        help="steps to branch from, e.g. 0,100,200 (default: every kept checkpoint whose "
        "window the base's run covers, and 0 when there is no warmup)",
    )
    p.add_argument(
        "--factors",
        type=_numbers(float),
        default=list(DEFAULT_FACTORS),
        help="batch multiples k (default 2,4,8,16)",
    )
    window = p.add_mutually_exclusive_group()
    window.add_argument(
        "--window-examples",
        type=float,
        help="examples each branch trains for (default: 4 steps of the largest branch)",
    )
    window.add_argument("--window-tokens", type=float, help="the window in tokens instead")
    p.add_argument(
        "--lr-rule",
        choices=("none", "sqrt", "linear"),
        help="a branch's LR = the base's × k^p, p = 0, ½, 1 (default: linear for sgd and "
        "lars, sqrt otherwise)",
    )
    p.add_argument(
        "--lr-multipliers",
        type=_numbers(float),
        default=[1.0],
        help="also run the rule's LR times each of these; the best counts (default 1)",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=DEFAULT_TOLERANCE,
        help="a branch keeps up when it makes at least (1 − tolerance) of the base's "
        "progress over the window (default 0.5, McCandlish's B_crit)",
    )


def request_from_args(args: argparse.Namespace) -> BranchRequest:
    """The request of parsed `sweep branch` arguments."""
    return BranchRequest(
        trial=args.trial,
        steps=tuple(args.steps) if args.steps is not None else None,
        factors=tuple(args.factors),
        window_examples=args.window_examples,
        window_tokens=args.window_tokens,
        lr_rule=args.lr_rule,
        lr_multipliers=tuple(args.lr_multipliers),
        tolerance=args.tolerance,
    )


def command(args: argparse.Namespace) -> int:
    """`sweep branch`: run the branches, then print B_crit at each step as JSON."""
    import json

    from stepscale.analysis.branching import summary
    from stepscale.sweeps.run.branches import run_branch

    base = run_branch(args.run_dir, request_from_args(args), args.argv)
    print(json.dumps(summary(args.run_dir, base), indent=2, sort_keys=True))
    return 0
