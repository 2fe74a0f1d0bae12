"""Health checks of a study's answer, for the report: is B_crit pinned, and could the study
have been told so?

- **range edge**: a point's best trial has a nuisance value within 5% of an end of its
  declared range (log width for log scales): the optimum may lie outside — widen it;
- **around B_crit**: fewer than 2 fitted batch sizes below or above B_crit: the bend of
  S(B) is not measured on that side;
- **interval**: the 95% interval of B_crit spans more than a factor 3;
- **trials per point**: the replay (:mod:`analysis.replay`) of random subsets of K trials
  per point moves B_crit by more than the stated precision (median error 15%) for every
  K below the study's trials per point: the study may have too few to claim it;
- **training seed**: the training seed's part of B_crit's interval, measured by refitting
  S(B) at each confirm seed (:mod:`analysis.fits.seed_part`), moves B_crit by more than a
  factor 1.25 either way: the answer is not settled across seeds (the first screen's
  interval includes the seed's part); without confirm seeds the check says it is not
  measured, without a warning.

Pure functions of the analysis, the Dataset, the search space (space.json) and a replay.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xarray as xr

from stepscale.analysis.fits.arrays import batch_json
from stepscale.analysis.fits.records import Record, as_json
from stepscale.analysis.fits.seed_part import SEED_SETTLED
from stepscale.analysis.replay import ReplayResult
from stepscale.analysis.study import StudyAnalysis

__all__ = ["EDGE", "MAX_CI_RATIO", "PRECISION", "S_OF_B_CHECKS", "HealthCheck", "health_checks"]

EDGE = 0.05  # fraction of a range's width counted as its edge
MAX_CI_RATIO = 3.0
# the checks of each group's S(B) fit at the study's target (`_around`)
S_OF_B_CHECKS = ("batch sizes around B_crit", "B_crit interval")
PRECISION = 0.15  # median |B_crit / B_crit,full − 1| the trials-per-point check asks for


@dataclass(frozen=True)
class HealthCheck(Record):
    """One check: its name, whether it passed, and what it found."""

    name: str = field(metadata=as_json("check"))
    ok: bool
    message: str


def _position(value: float, low: float, high: float, scale: str | None) -> float:
    """Where ``value`` lies in [low, high], 0…1, in the parameter's own scale."""
    if scale == "log" and low > 0 and value > 0:
        f = math.log
    elif scale == "reverse_log" and high < 1 and value < 1:

        def f(v: float) -> float:
            return -math.log(1 - v)
    else:

        def f(v: float) -> float:
            return v

    span = f(high) - f(low)
    return (f(value) - f(low)) / span if span else 0.5


def _range_of(p: Mapping[str, Any], values: Mapping[str, Any]) -> tuple[Any, Any]:
    low, high = p.get("low"), p.get("high")
    cond = p.get("conditional")
    if isinstance(cond, Mapping) and cond.get("on") in values:
        override = (cond.get("ranges") or {}).get(str(values[cond["on"]])) or {}
        low, high = override.get("low", low), override.get("high", high)
    return low, high


def _edges(a: StudyAnalysis, ds: xr.Dataset, space: Mapping[str, Any]) -> HealthCheck:
    params = [
        p
        for p in space.get("parameters", [])
        if p.get("role") == "nuisance" and p.get("type") in ("float", "int")
    ]
    meta = {m["name"]: m["coord"] for m in json_list(ds.attrs.get("parameters"))}
    sci = [m for m in json_list(ds.attrs.get("parameters")) if m["role"] == "scientific"]
    found = []
    for point, i in a.best.items():
        values = {m["name"]: ds[m["coord"]].values[i].item() for m in sci}
        for p in params:
            coord = meta.get(p["name"])
            low, high = _range_of(p, values)
            if (
                coord is None
                or not isinstance(low, (int, float))
                or not isinstance(high, (int, float))
            ):
                continue
            v = ds[coord].values[i]
            if not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v):
                continue
            pos = _position(float(v), float(low), float(high), p.get("scale"))
            if pos <= EDGE or pos >= 1 - EDGE:
                side = "low" if pos <= EDGE else "high"
                found.append(
                    f"{point}: best {p['name']} = {float(v):.4g} is at the {side} end of its "
                    f"range [{low:g}, {high:g}]"
                )
    if found:
        return HealthCheck(
            "range edge",
            False,
            "; ".join(found) + ": the optimum may lie outside — widen the range",
        )
    return HealthCheck(
        "range edge", True, "every point's best trial lies inside its nuisance ranges"
    )


def json_list(text: Any) -> list[dict[str, Any]]:
    """A JSON list attribute of the Dataset (``parameters``), or []."""
    try:
        value = json.loads(text) if isinstance(text, str) else []
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def _around(a: StudyAnalysis) -> list[HealthCheck]:
    out = []
    for g in a.groups:
        fit = g.fit_at(a.target)
        if fit is None:
            continue
        prefix = "" if g.group == "all" else f"{g.group}: "
        below = [b for b in fit.batch_sizes if b < fit.b_crit]
        above = [b for b in fit.batch_sizes if b > fit.b_crit]
        ok = len(below) >= 2 and len(above) >= 2
        msg = (
            f"{prefix}{len(below)} fitted batch size(s) below B_crit = {fit.b_crit:.4g} "
            f"({', '.join(str(batch_json(b)) for b in below) or 'none'}) and {len(above)} above "
            f"({', '.join(str(batch_json(b)) for b in above) or 'none'})"
        )
        if not ok:
            side = "below" if len(below) < 2 else "above"
            msg += f": too few {side} B_crit to pin it — add batch sizes {side} it"
        out.append(HealthCheck(S_OF_B_CHECKS[0], ok, msg))
        lo, hi = fit.b_crit_ci
        if math.isfinite(lo) and math.isfinite(hi) and lo > 0:
            ratio = hi / lo
            ok = ratio <= MAX_CI_RATIO
            msg = f"{prefix}the 95% interval [{lo:.4g}, {hi:.4g}] spans a factor {ratio:.3g}"
            if not ok:
                msg += f" (more than {MAX_CI_RATIO:g}): B_crit is poorly determined"
            out.append(HealthCheck(S_OF_B_CHECKS[1], ok, msg))
    return out


_RANDOM = re.compile(r"^random:(\d+)$")


def _trials_needed(replay: ReplayResult) -> list[HealthCheck]:
    out = []
    for group in replay.totals:
        rows = []
        for r in replay.results:
            m = _RANDOM.match(r.protocol)
            if r.group == group and m is not None and math.isfinite(r.error["median"]):
                # a draw whose S(B) cannot be fitted counts as wrong; 10% of them fail it
                med = r.error["median"] if r.failed <= 0.1 * r.draws else math.inf
                rows.append((int(m.group(1)), med, r.error["p90"]))
        if not rows:
            continue
        rows.sort()
        prefix = "" if group == "all" else f"{group}: "
        good = [k for k, med, _ in rows if med <= PRECISION]
        k_max, med_max, _ = rows[-1]
        worst = "S(B) often cannot be fitted" if not math.isfinite(med_max) else ""
        if good:
            out.append(
                HealthCheck(
                    "trials per point",
                    True,
                    f"{prefix}random subsets of {good[0]} trials per point already give B_crit "
                    f"within {PRECISION:.0%} of the study's (median over {replay.draws} draws)",
                )
            )
        else:
            out.append(
                HealthCheck(
                    "trials per point",
                    False,
                    f"{prefix}random subsets of {k_max} trials per point "
                    + (
                        f"move B_crit by a median {med_max:.0%} (more than {PRECISION:.0%})"
                        if not worst
                        else f"leave too few batch sizes reaching the target ({worst})"
                    )
                    + ": the study's B_crit has not settled — more trials per point are "
                    f"needed for a precision of {PRECISION:.0%}",
                )
            )
    return out


def _training_seed(a: StudyAnalysis) -> list[HealthCheck]:
    out = []
    for g in a.groups:
        if g.fit_at(a.target) is None:
            continue
        prefix = "" if g.group == "all" else f"{g.group}: "
        part = g.seed_part
        if part is None:
            msg = (
                f"{prefix}not measured: no confirm seeds (budget.confirm_seeds) reached the "
                "target at every batch size, so B_crit's interval is one training seed's; "
                "another seed moves every trial together, which one seed's trials cannot show"
            )
            out.append(HealthCheck("training seed", True, msg))  # told, not a warning
            continue
        lo, hi = part.ci
        values = ", ".join(f"{b:.4g}" for b in part.b_crits)
        msg = (
            f"{prefix}another training seed may move B_crit ×/÷ {part.factor:.3g} (95%: "
            f"[{lo:.4g}, {hi:.4g}]; B_crit {values} at seeds "
            f"{', '.join(map(str, part.seeds))}); it is {part.share:.0%} of the joint "
            f"interval [{part.joint_ci[0]:.4g}, {part.joint_ci[1]:.4g}]"
        )
        if part.skipped:
            msg += f"; confirm seed(s) {', '.join(map(str, part.skipped))} left out (not reached)"
        if not part.settled:
            msg += f": not settled across seeds (more than ×/÷ {SEED_SETTLED:g})"
        out.append(HealthCheck("training seed", part.settled, msg))
    return out


def health_checks(
    a: StudyAnalysis,
    ds: xr.Dataset,
    space: Mapping[str, Any] | None = None,
    replay: ReplayResult | None = None,
) -> tuple[HealthCheck, ...]:
    """Every check the study supports (see the module docstring)."""
    out: list[HealthCheck] = []
    if space:
        out.append(_edges(a, ds, space))
    out += _around(a)
    out += _training_seed(a)
    if replay is not None:
        out += _trials_needed(replay)
    return tuple(out)
