"""`sweep predict`: a ladder's laws at the run you cannot afford to sweep.

From a ladder's run dir (the laws are fitted on every rung), a laws JSON (the report's
``fits.json`` or ``sweep predict --json``'s output) or an external CSV of trials (one row
per run: N, D, batch size, LR, final loss), for a target given by ``--n`` and ``--d`` on
``--devices``: η*, B_opt, B_crit and the loss with prediction intervals, the extrapolation
factor, a loud warning past 100× the largest rung, and the settings as the trainer takes
them. Every bad input (a non-positive or non-finite N or D, a run dir with fewer than 2
rungs, a law in an axis the ladder did not vary, devices that divide no global batch near
B_opt) exits 2 with a message (`UsageError`).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from stepscale.errors import UsageError

__all__ = ["command", "load_laws", "predict_arguments", "run_predict"]


def predict_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``sweep predict``."""
    p.description = (
        "Predict η*, B_opt, B_crit and the loss of a target run (N parameters outside the "
        "embeddings, D tokens) from a ladder's laws; the answer first, JSON with --json."
    )
    p.add_argument(
        "source",
        nargs="?",
        metavar="RUN_DIR|LAWS.json",
        help="a ladder's run dir, or a JSON file of its laws (fits.json or predict --json)",
    )
    p.add_argument("--n", type=float, required=True, help="the target's N (parameters)")
    p.add_argument("--d", type=float, required=True, help="the target's D (training tokens)")
    p.add_argument(
        "--devices", type=int, required=True, help="devices the global batch is split over"
    )
    p.add_argument(
        "--max-per-device",
        type=int,
        metavar="M",
        help="largest per-device batch that fits; more becomes gradient accumulation",
    )
    p.add_argument(
        "--law",
        action="append",
        default=[],
        metavar="NAME:N,D",
        help="fit law NAME (lr, batch, loss, bcrit) in these axes only (repeatable)",
    )
    p.add_argument("--csv", metavar="FILE", help="an external table of trials instead")
    for col, default in (
        ("n", "N"),
        ("d", "D"),
        ("batch", "batch"),
        ("lr", "lr"),
        ("loss", "loss"),
    ):
        p.add_argument(
            f"--{col}-col", default=default, metavar="C", help=f"CSV column of {default}"
        )
    p.add_argument(
        "--tokens-per-example",
        type=float,
        default=1.0,
        help="CSV: tokens per element of a batch (the sequence length); default 1 (batch in tokens)",
    )
    p.add_argument("--batch-unit", default=None, help="CSV: what the batch column counts")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap replicates (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--json", action="store_true", help="print JSON")


def _check_target(args: argparse.Namespace) -> None:
    for name, v in (("--n", args.n), ("--d", args.d)):
        if not (math.isfinite(v) and v > 0):
            raise UsageError(f"{name} must be a positive finite number, got {v}")
    if args.devices < 1:
        raise UsageError(f"--devices must be ≥ 1, got {args.devices}")
    if args.max_per_device is not None and args.max_per_device < 1:
        raise UsageError(f"--max-per-device must be ≥ 1, got {args.max_per_device}")
    if not 0 <= args.n_boot <= 100_000:
        raise UsageError(f"--n-boot must lie in [0, 100000], got {args.n_boot}")
    if (args.source is None) == (args.csv is None):
        raise UsageError("give one source: a run dir or a laws JSON file, or --csv FILE")


def _regressors(specs: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for spec in specs:
        name, sep, axes = spec.partition(":")
        names = [a.strip() for a in axes.split(",") if a.strip()]
        if not sep or not name.strip() or not names:
            raise UsageError(f"--law {spec!r} is not of the form NAME:N,D (e.g. batch:D)")
        out[name.strip()] = names
    return out


def _fit(trials: Any, args: argparse.Namespace, unit: str, tpe: float, where: str) -> Any:
    from stepscale.analysis.fits.ladder import fit_ladder_laws, rung_bcrit, rung_optima

    optima = rung_bcrit(trials, rung_optima(trials))
    if len(optima) < 2:
        raise UsageError(
            f"{where}: a ladder needs 2 or more rungs (distinct N, D) with a finished trial; "
            f"it has {len(optima)}"
        )
    try:
        return fit_ladder_laws(
            optima,
            regressors=_regressors(args.law),
            batch_unit=unit,
            tokens_per_example=tpe,
            n_boot=args.n_boot,
            seed=args.seed,
        )
    except ValueError as exc:
        raise UsageError(f"{where}: {exc}") from None


def load_laws(args: argparse.Namespace) -> Any:
    """The `LadderLaws` of the source given (fitted now from a run dir or a CSV)."""
    from stepscale.analysis.fits.ladder import LadderTrials, laws_from_dict

    if args.csv is not None:
        from stepscale.analysis.table import load_table

        cols = [args.n_col, args.d_col, args.batch_col, args.lr_col, args.loss_col]
        try:
            table = load_table(args.csv, list(dict.fromkeys(cols)))
        except ValueError as exc:
            raise UsageError(f"predict: {exc}") from None
        if not (math.isfinite(args.tokens_per_example) and args.tokens_per_example > 0):
            raise UsageError("--tokens-per-example must be a positive number")
        trials = LadderTrials.of(*(table[c] for c in cols))
        unit = args.batch_unit or ("tokens" if args.tokens_per_example == 1 else "sequences")
        return _fit(trials, args, unit, args.tokens_per_example, args.csv)
    path = Path(args.source)
    if path.is_dir():
        from stepscale.analysis.ladder import ladder_trials, tokens_per_example
        from stepscale.analysis.load import load

        ds = load(path)
        try:
            trials, _ = ladder_trials(ds)
        except ValueError as exc:
            raise UsageError(f"{path}: {exc}") from None
        from stepscale.analysis.dataset import dataset_batch_unit

        return _fit(trials, args, dataset_batch_unit(ds), tokens_per_example(ds), str(path))
    if not path.is_file():
        raise UsageError(f"{path}: no such run dir or laws file")
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path}: not readable JSON: {exc}") from None
    if isinstance(doc, dict) and isinstance(doc.get("ladder"), dict):  # the report's fits.json
        doc = doc["ladder"]
    if isinstance(doc, dict) and isinstance(doc.get("laws"), dict) and "laws" in doc["laws"]:
        doc = doc["laws"]  # predict --json's output, or the ladder record
    if args.law:
        raise UsageError("--law refits a law: give a run dir or --csv, not a laws file")
    try:
        return laws_from_dict(doc if isinstance(doc, dict) else {})
    except ValueError as exc:
        raise UsageError(f"{path}: {exc}") from None


def run_predict(args: argparse.Namespace) -> Any:
    """The `TargetPrediction` of the arguments (UsageError for bad input)."""
    from stepscale.analysis.ladder_predict import predict_target

    _check_target(args)
    laws = load_laws(args)
    try:
        return predict_target(laws, args.n, args.d, args.devices, args.max_per_device)
    except ValueError as exc:
        raise UsageError(f"predict: {exc}") from None


def command(args: argparse.Namespace) -> int:
    """`sweep predict`: the answer first (or JSON)."""
    result = run_predict(args)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, allow_nan=False))
    else:
        print("\n".join(result.lines()))
    return 0
