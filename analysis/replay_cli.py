"""`sweep replay RUN_DIR [--protocol P …] [--draws N] [--seed S] [--target L]`: what cheaper
protocols would have cost and found on a finished study (:mod:`analysis.replay`); JSON on
stdout.

The `sweep` entry point registers the command with :func:`add_replay_command` and calls
:func:`run_replay`, which returns the JSON-ready result or raises :class:`ReplayInputError`
(missing run dir, no finished trials, no curves, curves cut where a protocol needs them,
a bad protocol), which the CLI turns into exit code 2. Registering is cheap: xarray and
the fits load when the command runs.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

__all__ = ["ReplayInputError", "add_replay_command", "run_replay"]

MAX_DRAWS = 100_000  # each draw replays the study once: more cannot be meant
DEFAULT_DRAWS = 200  # analysis.replay.DEFAULT_DRAWS (not imported: registering stays cheap)


class ReplayInputError(ValueError):
    """Bad input to `sweep replay`."""


def add_replay_command(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``replay``; returns its parser."""
    p = subparsers.add_parser(
        "replay",
        help="replay a finished study's curves under cheaper protocols (JSON)",
        description=(
            "Replay a finished study from its stored curves under cheaper protocols and print, "
            "per protocol, the compute it would have spent (steps, examples, FLOPs) as a "
            "fraction of the study's and the B_crit / S_min it would have fitted, with the "
            "spread over random draws. Protocol parts, joined by '+': full, first:K, "
            "random:K, batches:B1,B2,…, adaptive:N[:I], deadline:F, median[:S], evals:K."
        ),
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
    return p


def run_replay(args: argparse.Namespace) -> dict[str, Any]:
    """Replay ``args.run_dir``; returns the JSON-ready result (`ReplayResult.to_dict`)."""
    if args.target is not None and not math.isfinite(args.target):
        raise ReplayInputError(f"--target must be a finite number, got {args.target}")
    if not 1 <= args.draws <= MAX_DRAWS:
        raise ReplayInputError(
            f"--draws must lie in [1, {MAX_DRAWS}], got {args.draws} (the spread of a "
            f"protocol is stable at a few hundred draws)"
        )
    if args.seed < 0:
        raise ReplayInputError(f"--seed must be ≥ 0, got {args.seed}")
    from stepscale.analysis.load import RunDirError, load
    from stepscale.analysis.replay import ReplayError, replay

    try:
        ds = load(args.run_dir)
        result = replay(ds, args.protocol, target=args.target, draws=args.draws, seed=args.seed)
    except (RunDirError, ReplayError) as exc:
        raise ReplayInputError(f"replay: {exc}") from None
    out = result.to_dict()
    out["run_dir"] = str(args.run_dir)
    return out
