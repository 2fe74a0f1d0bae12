"""`sweep fit steps` and `sweep fit hparams`: scaling-law fits of any CSV table, as JSON.

The `sweep` command table registers :func:`fit_arguments` and runs :func:`command`;
:func:`run_fit` returns a JSON-ready dict (finite floats or null, deterministic: the
bootstrap seed is fixed) or raises `UsageError` for bad input (exit 2). Registering is
cheap: numpy and the fits load when the command runs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from typing import Any

from stepscale.cli.exit_codes import out_of_memory
from stepscale.errors import UsageError

__all__ = [
    "command",
    "fit_arguments",
    "fit_hparams_command",
    "fit_steps_command",
    "parse_laws",
    "run_fit",
    "to_json",
]


# `fit steps --batch-unit` when not given: the neutral word, right for any table.
DEFAULT_BATCH_UNIT = "examples"
# Percentile intervals are stable to a few digits at a few thousand replicates; beyond this
# the replicates only cost memory (the steps fit draws n_boot × rows indices at once).
MAX_BOOT = 100_000


def fit_arguments(fit: argparse.ArgumentParser) -> None:
    """The arguments of ``sweep fit``: its sub-commands ``steps`` and ``hparams`` (the chosen
    one lands in ``args.fit_command``; pass the parsed args to :func:`run_fit`)."""
    fit.description = "Fit scaling laws to a CSV table; prints JSON on stdout."
    sub = fit.add_subparsers(dest="fit_command", metavar="{steps,hparams}")
    sub.required = True

    steps = sub.add_parser(
        "steps",
        help="fit S(B) = S_min (1 + B_crit/B) to steps to target vs batch size",
        description=(
            "Fit S(B) = S_min (1 + B_crit/B) (McCandlish et al. 2018) in log space, with "
            "residual-bootstrap 95% intervals. Several rows per batch size: the minimum "
            "is used. Empty/NaN/inf steps = target not reached (censored at the horizon "
            "column when given), excluded from the fit and listed in not_reached."
        ),
    )
    steps.add_argument("--csv", required=True, metavar="FILE", help="input table")
    steps.add_argument("--batch-col", required=True, metavar="C", help="batch size column")
    steps.add_argument("--steps-col", required=True, metavar="C", help="steps to target column")
    steps.add_argument("--group-col", metavar="C", help="fit each value of this column apart")
    steps.add_argument("--horizon-col", metavar="C", help="steps each trial ran to")
    steps.add_argument(
        "--batch-unit",
        default=DEFAULT_BATCH_UNIT,
        metavar="U",
        help=(
            "what the batch column counts (sequences, examples, tokens …), written as "
            "batch_unit in the output: B_crit, E_min and the batch sizes are in it. An "
            "external table does not say, so the default is the neutral "
            f"{DEFAULT_BATCH_UNIT!r} (every element of a batch is an example; a sequence "
            "model's are sequences)"
        ),
    )
    steps.add_argument(
        "--overhead",
        type=float,
        default=0.2,
        metavar="R",
        help="overhead r for the critical batch size (1+r)·B0 + r·B_crit (default 0.2)",
    )
    steps.add_argument(
        "--reference-batch",
        type=float,
        metavar="B0",
        help="reference batch size B0 (default: the smallest batch size fitted)",
    )
    steps.add_argument(
        "--keep-under-tuned",
        action="store_true",
        help=(
            "fit every batch size; by default one that needed more than 1.25x the steps of "
            "a smaller one is left out as under-tuned (listed as under_tuned)"
        ),
    )
    _add_boot_options(steps)

    hp = sub.add_parser(
        "hparams",
        help="fit optimal-hyperparameter power laws h = c·Π x^a",
        description=(
            "Keep, per cell of the --by columns, the runs whose loss is strictly within a "
            "relative band of the cell's best; fit log(h) on log(x) by least squares over "
            "the kept runs, with bootstrap 95% intervals of the exponents."
        ),
    )
    hp.add_argument("--csv", required=True, metavar="FILE", help="input table")
    hp.add_argument("--loss-col", required=True, metavar="C", help="loss column (lower is better)")
    hp.add_argument("--hparams", required=True, metavar="a,b", help="hyperparameter columns")
    hp.add_argument("--by", required=True, metavar="x,y", help="scaling-variable columns (cells)")
    hp.add_argument(
        "--law",
        action="append",
        default=[],
        metavar="h:x,y",
        help="regress hyperparameter h on x,y instead of the --by columns (repeatable)",
    )
    hp.add_argument(
        "--band",
        type=float,
        default=0.0025,
        metavar="F",
        help="relative loss band around each cell's best (default 0.0025)",
    )
    _add_boot_options(hp)
    return fit


def _add_boot_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--n-boot",
        type=int,
        default=1000,
        metavar="N",
        help="bootstrap replicates (default 1000)",
    )
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")


def run_fit(args: argparse.Namespace) -> dict[str, Any]:
    """Run the ``fit`` sub-command named in ``args.fit_command``; return its JSON dict."""
    command = getattr(args, "fit_command", None)
    if command not in ("steps", "hparams"):
        raise UsageError(f"unknown fit command {command!r}; expected 'steps' or 'hparams'")
    result = fit_steps_command(args) if command == "steps" else fit_hparams_command(args)
    if getattr(args, "n_boot", 1000) == 0:  # allowed (a point estimate): say why no intervals
        print(
            "sweep: note: --n-boot 0 draws no bootstrap replicates, so every interval in "
            "the output is null; give --n-boot 1000 (the default) or more for intervals",
            file=sys.stderr,
        )
    return result


def _check_boot(args: argparse.Namespace) -> tuple[int, int]:
    n_boot = getattr(args, "n_boot", 1000)
    seed = getattr(args, "seed", 0)
    if not 0 <= n_boot <= MAX_BOOT:
        raise UsageError(
            f"--n-boot must lie in [0, {MAX_BOOT}], got {n_boot} (a 95% interval is stable "
            "at a few thousand replicates)"
        )
    if seed < 0:
        raise UsageError(f"--seed must be >= 0, got {seed}")
    return n_boot, seed


def fit_steps_command(args: argparse.Namespace) -> dict[str, Any]:
    """`sweep fit steps`: one S(B) fit per group (or one group "all"), sorted by name, and
    the unit of the batch column (``--batch-unit``) as ``batch_unit``."""
    import numpy as np

    from stepscale.analysis.fits.steps import fit_steps, steps_to_result
    from stepscale.analysis.table import load_table

    if not (math.isfinite(args.overhead) and args.overhead > 0):
        raise UsageError(f"--overhead must be a positive number, got {args.overhead}")
    ref = args.reference_batch
    if ref is not None and not (math.isfinite(ref) and ref > 0):
        raise UsageError(f"--reference-batch must be a positive number, got {ref}")
    n_boot, seed = _check_boot(args)
    unit = getattr(args, "batch_unit", None)
    unit = DEFAULT_BATCH_UNIT if unit is None else str(unit).strip()
    if not unit:
        raise UsageError("--batch-unit must not be empty")
    numeric = [args.batch_col, args.steps_col]
    if args.horizon_col:
        numeric.append(args.horizon_col)
    numeric = list(dict.fromkeys(numeric))
    group_col = args.group_col
    text = [group_col] if group_col and group_col not in numeric else []
    try:
        table = load_table(args.csv, numeric, text=text)
    except ValueError as exc:
        raise UsageError(f"fit steps: {exc}") from None
    if table.n_rows == 0:
        raise UsageError(f"fit steps: table {args.csv} has no data rows")

    batch = table[args.batch_col]
    steps = table[args.steps_col]
    horizon = table[args.horizon_col] if args.horizon_col else None
    if group_col:
        labels = np.array([_group_label(v) for v in table[group_col]], dtype=object)
        groups = sorted(set(labels.tolist()))
    else:
        labels = np.full(table.n_rows, "all", dtype=object)
        groups = ["all"]

    out = []
    for g in groups:
        m = labels == g
        where = f"group {g!r}: " if group_col else ""
        try:
            res = steps_to_result(batch[m], steps[m], None if horizon is None else horizon[m])
            fit = fit_steps(
                res.batch_sizes,
                res.steps,
                not_reached=dict(zip(res.not_reached, res.censored_at, strict=True)),
                overhead=args.overhead,
                reference_batch=ref,
                n_boot=n_boot,
                seed=seed,
                monotone=not args.keep_under_tuned,
            )
        except ValueError as exc:
            raise UsageError(
                f"fit steps: {where}{exc} (columns --batch-col {args.batch_col!r}, "
                f"--steps-col {args.steps_col!r} of {args.csv})"
            ) from None
        out.append({"group": g, **fit.to_dict()})
    return {"batch_unit": unit, "groups": out}


def _group_label(value: Any) -> str:
    """Group values as text; a numeric group column gives "64" rather than "64.0"."""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)


def _names(option: str, value: str) -> list[str]:
    names = [v.strip() for v in value.split(",")]
    if not value.strip() or any(not n for n in names):
        raise UsageError(f"{option} must be a comma-separated list of column names, got {value!r}")
    return list(dict.fromkeys(names))


def parse_laws(specs: Sequence[str], hparams: Sequence[str]) -> dict[str, list[str]]:
    """Parse ``--law h:x,y`` options into {h: [x, y]}; UsageError on bad syntax."""
    laws: dict[str, list[str]] = {}
    for spec in specs:
        head, sep, tail = spec.partition(":")
        h = head.strip()
        if not sep or not h or ":" in tail or not tail.strip():
            raise UsageError(
                f"--law {spec!r} is not of the form h:x,y (a hyperparameter, a colon, and "
                f"comma-separated regressor columns)"
            )
        if h not in hparams:
            raise UsageError(
                f"--law {spec!r} names {h!r}, which is not in --hparams {list(hparams)}"
            )
        if h in laws:
            raise UsageError(f"--law given twice for {h!r}")
        laws[h] = _names(f"--law {spec!r}", tail)
    return laws


def fit_hparams_command(args: argparse.Namespace) -> dict[str, Any]:
    """`sweep fit hparams`: power laws of the near-optimal hyperparameters."""
    from stepscale.analysis.fits.hparams import fit_hparam_laws
    from stepscale.analysis.table import load_table

    hparams = _names("--hparams", args.hparams)
    by = _names("--by", args.by)
    laws = parse_laws(args.law, hparams)
    if not (math.isfinite(args.band) and args.band >= 0):
        raise UsageError(f"--band must be a non-negative number, got {args.band}")
    n_boot, seed = _check_boot(args)
    needed = [args.loss_col, *hparams, *by, *(r for regs in laws.values() for r in regs)]
    try:
        table = load_table(args.csv, list(dict.fromkeys(needed)))
    except ValueError as exc:
        raise UsageError(f"fit hparams: {exc}") from None
    if table.n_rows == 0:
        raise UsageError(f"fit hparams: table {args.csv} has no data rows")
    try:
        result = fit_hparam_laws(
            table.columns,
            args.loss_col,
            hparams,
            by,
            laws=laws,
            band=args.band,
            n_boot=n_boot,
            seed=seed,
        )
    except ValueError as exc:
        raise UsageError(f"fit hparams: {exc} (table {args.csv})") from None
    return result.to_dict()


def to_json(result: dict[str, Any]) -> str:
    """The JSON text printed for a fit result (strict: no NaN/Infinity)."""
    return json.dumps(result, indent=2, allow_nan=False)


def command(args: argparse.Namespace) -> int:
    """`sweep fit`: print the fit as JSON."""
    with out_of_memory("not enough memory for the fit; lower --n-boot or fit a smaller table"):
        result = run_fit(args)
    print(to_json(result))
    return 0
