"""How many confirm seeds a study's claims need, from the seeds it has run: the dry run of
an existing run dir (`sweep run … --dry-run`) lists every claim of the study so far (each
ramp against its constant batch, each ablation variant against the best tuned one) with
its p-value, the seeds behind it and, when it is not shown but points the claimed way,
the confirm seeds per arm that would show a difference of that size (analysis.claims)."""

from __future__ import annotations

import math
import os
from typing import Any

from stepscale.analysis.analyze import analyze
from stepscale.analysis.claims import Claim
from stepscale.analysis.course import ramp_comparison
from stepscale.analysis.load import load


def study_claims(run_dir: str | os.PathLike[str]) -> list[tuple[str, Claim]]:
    """Every claim a study's report would state, from its confirm seeds so far, with
    where it holds (the batch size of an ablation's row; "" for a ramp)."""
    ds = load(run_dir)
    a = analyze(ds)
    claims: list[tuple[str, Claim]] = []
    ramps = ramp_comparison(ds, dict(a.best), a.batch_unit)
    if ramps is not None:
        claims += [("", c) for c in ramps.claims]
    if a.ablation is not None:
        for row in a.ablation.rows:
            where = "" if math.isnan(row.batch) else f"batch {row.batch:g} {a.batch_unit}"
            claims += [(where, c) for c in row.claims]
    return claims


def estimate(claim: Claim, where: str = "") -> dict[str, Any]:
    """One claim as the dry run shows it: its record and the text line."""
    if claim.shown:
        line = f"shown with {min(claim.n_a, claim.n_b)} seeds (p = {claim.test.p_less:.2g})"  # type: ignore[union-attr]
    elif claim.test is None:
        line = "not tested yet: needs 2 or more confirm seeds a side that reached the target"
    elif claim.needed is not None and claim.test.diff < 0:
        line = (
            f"not shown with {min(claim.n_a, claim.n_b)} seeds (p = {claim.test.p_less:.2g}); "
            f"about {claim.needed} seeds per arm would show a difference this size: "
            f"budget.confirm_seeds={claim.needed}"
        )
    else:
        line = (
            f"not shown with {min(claim.n_a, claim.n_b)} seeds (p = {claim.test.p_less:.2g}); "
            "the difference so far does not point the claimed way"
        )
    title = f"{claim.a} fewer {claim.what} than {claim.b}" + (f" at {where}" if where else "")
    return claim.to_dict() | {"where": where, "estimate": f"{title}: {line}"}


def confirm_estimates(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The dry run's claims of an existing run dir (empty when it has none); an analysis
    that cannot read the run dir yet gives one record saying why."""
    try:
        claims = study_claims(run_dir)
    except Exception as exc:  # a run dir the analysis cannot read yet: say so, plan anyway
        return [{"estimate": f"claims not estimated: {type(exc).__name__}: {exc}"}]
    return [estimate(c, where) for where, c in claims]
