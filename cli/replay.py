"""`sweep replay RUN_DIR [--protocol P …] [--draws N] [--seed S] [--target L]`: what cheaper
protocols would have cost and found on a finished study (:mod:`analysis.replay`); JSON on
stdout.

The `sweep` command table registers :func:`replay_arguments` and runs :func:`command`;
:func:`run_replay` returns the JSON-ready result or raises `UsageError` (missing run dir,
no finished trials, no curves, curves cut where a protocol needs them, a bad protocol:
exit 2). Registering is cheap: xarray and
the fits load when the command runs.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from stepscale.errors import UsageError

__all__ = ["command", "replay_arguments", "run_replay"]

MAX_DRAWS = 100_000  # each draw replays the study once: more cannot be meant
DEFAULT_DRAWS = 200  # analysis.replay.DEFAULT_DRAWS (not imported: registering stays cheap)


def replay_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``sweep replay``."""
    p.description = (
        "Replay a finished study from its stored curves under cheaper protocols and print, "
        "per protocol, the compute it would have spent (steps, examples, FLOPs) as a "
        "fraction of the study's and the B_crit / S_min it would have fitted, with the "
        "spread over random draws. Protocol parts, joined by '+': full, first:K, "
        "random:K, spread:K, batches:B1,B2,…, adaptive:N[:I], transfer[:W], deadline:F, "
        "median[:S], evals:K."
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="the study's run directory")
    p.add_argument(
        "--protocol",
        action="append",
        default=[],
        metavar="P",
        help="a protocol to replay (repeatable; default: a standard set)",
    )
    p.add_argument(
        "--draws",
        type=int,
        default=DEFAULT_DRAWS,
        help=f"draws of each random protocol (default {DEFAULT_DRAWS})",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the draws (default 0)")
    p.add_argument(
        "--target",
        type=float,
        default=None,
        metavar="L",
        help="target eval loss (default: the study's)",
    )


def run_replay(args: argparse.Namespace) -> dict[str, Any]:
    """Replay ``args.run_dir``; returns the JSON-ready result (`ReplayResult.to_dict`)."""
    if args.target is not None and not math.isfinite(args.target):
        raise UsageError(f"--target must be a finite number, got {args.target}")
    if not 1 <= args.draws <= MAX_DRAWS:
        raise UsageError(
            f"--draws must lie in [1, {MAX_DRAWS}], got {args.draws} (the spread of a "
            f"protocol is stable at a few hundred draws)"
        )
    if args.seed < 0:
        raise UsageError(f"--seed must be ≥ 0, got {args.seed}")
    from stepscale.analysis.load import load
    from stepscale.analysis.replay import replay

    ds = load(args.run_dir)
    result = replay(ds, args.protocol, target=args.target, draws=args.draws, seed=args.seed)
    out = result.to_dict()
    out["run_dir"] = str(args.run_dir)
    return out


def command(args: argparse.Namespace) -> int:
    """`sweep replay`: print the replayed protocols as JSON."""
    import json

    print(json.dumps(run_replay(args), indent=2, sort_keys=True, allow_nan=False))
    return 0
