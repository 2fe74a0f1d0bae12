"""The `sweep branch` command line: its arguments and the request they make (light: the
parser is built at every start of `sweep`; `sweeps.branch_cmd` does the work)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

DEFAULT_FACTORS = (2.0, 4.0, 8.0, 16.0)
DEFAULT_TOLERANCE = 0.5


@dataclass(frozen=True)
class BranchRequest:
    """What the command line asked for (None: the default)."""

    trial: str | None = None
    steps: tuple[int, ...] | None = None
    factors: tuple[float, ...] = DEFAULT_FACTORS
    window_examples: float | None = None
    window_tokens: float | None = None
    lr_rule: str | None = None
    lr_multipliers: tuple[float, ...] = (1.0,)
    tolerance: float = DEFAULT_TOLERANCE


def _numbers(kind: type) -> Any:
    def parse(text: str) -> list[Any]:
        try:
            return [kind(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"not a comma-separated list of {kind.__name__}s: {text!r}"
            ) from None

    return parse


def add_branch_command(sub: Any) -> None:
    """Add ``branch`` to the `sweep` sub-commands."""
    p = sub.add_parser(
        "branch",
        help="branch a finished trial at k×B from its checkpoints: B_crit over training",
        description="Continue a finished trial (the base, batch B) from its kept checkpoints "
        "at k·B for a window of examples, each branch an ordinary trial in "
        "RUN_DIR/branches/<trial>/ (the study's launcher, storage and retries); prints "
        "B_crit at each step as JSON. The base study must keep its checkpoints: "
        "keep_checkpoints=true, train.checkpoint_every and train.keep_checkpoints.",
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
