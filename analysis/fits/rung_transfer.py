"""Transfer across the rungs of a ladder: a rung's first batch sizes start from the η* that
the rungs tuned before it reached at the same batch size.

A *rung* is one combination of a ladder's model-size and horizon axes (docs/science.md, "A
ladder of studies").

- **Order** (:func:`rung_order`): rungs by the sum of their positions on the ladder's axes
  (each axis's values ascending), ties in axis order. The first is the smallest model at the
  shortest horizon; every later rung comes after the rungs below it on each axis, so it has
  tuned rungs to be predicted from.
- **Prediction** (:func:`predict_across_rungs`): per source rung η* at the point's batch
  size (the smoothed optimum of :func:`analysis.fits.lr.optimal_lr` over its trials); log η*
  fitted as linear in the logs of the ladder axes that vary among the sources (η* = c·Π x^a,
  the form of the ladder's own laws) when there are at least as many sources as
  coefficients, evaluated at the new rung; otherwise the η* of the nearest source rung (in
  log axis values). ``log_sd`` is the residual standard deviation of that fit in log η*
  (NaN without a degree of freedom). Every other nuisance value is the best trial's of the
  nearest source rung.

Pure functions; the orchestrator (``stepscale.sweeps.run.transfer``) gathers the finished
trials and enqueues the prediction.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stepscale.analysis.fits.lr import optimal_lr
from stepscale.analysis.fits.records import BATCH, Record
from stepscale.analysis.fits.transfer import TrialObservation, fill_from_best

__all__ = ["RungPrediction", "RungSource", "predict_across_rungs", "rung_order"]

Rung = Mapping[str, float]  # ladder axis → its value at the rung


@dataclass(frozen=True)
class RungSource:
    """A finished point of an earlier rung at the same batch size: the rung and its
    trials."""

    rung: Rung
    trials: Sequence[TrialObservation]


@dataclass(frozen=True)
class RungPrediction(Record):
    """The predicted nuisance values of a point of a new rung, how each was found, and the
    η* of each source rung."""

    batch: float = field(metadata=BATCH)
    values: Mapping[str, Any]
    how: Mapping[str, str]
    rungs: tuple[Mapping[str, float], ...]  # each source rung's axis values and its "lr"
    exponents: Mapping[str, float] | None = None  # of the fitted law, by axis
    log_sd: float = math.nan


def rung_order(rungs: Sequence[Sequence[float]]) -> list[int]:
    """Indices of ``rungs`` (each a tuple of axis values, axes in a fixed order) in the
    order transfer tunes them: by the sum of their positions on the axes, then by those
    positions in axis order."""
    if not rungs:
        return []
    axes = len(rungs[0])
    levels = [sorted({r[a] for r in rungs}) for a in range(axes)]
    pos = [tuple(levels[a].index(r[a]) for a in range(axes)) for r in rungs]
    return sorted(range(len(rungs)), key=lambda i: (sum(pos[i]), pos[i]))


def _distance(a: Rung, b: Rung) -> float:
    return math.sqrt(sum((math.log(a[k]) - math.log(b[k])) ** 2 for k in a))


def predict_across_rungs(
    sources: Sequence[RungSource],
    target: Rung,
    batch: float,
    names: Sequence[str],
    *,
    lr_name: str | None,
) -> RungPrediction | None:
    """Predict the nuisance values ``names`` of the point at ``batch`` of rung ``target``
    from the same batch size's points of earlier rungs (see the module docstring); None
    when no source has a trial with a usable objective."""
    usable = [s for s in sources if any(math.isfinite(t.objective) for t in s.trials)]
    if not usable:
        return None
    nearest = min(usable, key=lambda s: (_distance(s.rung, target), tuple(s.rung.values())))
    values: dict[str, Any] = {}
    how: dict[str, str] = {}
    rows: list[dict[str, float]] = []
    exponents: dict[str, float] | None = None
    log_sd = math.nan
    if lr_name is not None and lr_name in names:
        for s in usable:
            at = [
                t
                for t in s.trials
                if isinstance(t.values.get(lr_name), (int, float)) and float(t.values[lr_name]) > 0
            ]
            if any(math.isfinite(t.objective) for t in at):
                o = optimal_lr(
                    [float(t.values[lr_name]) for t in at],
                    [t.objective for t in at],
                    [batch] * len(at),
                )
                rows.append({**s.rung, "lr": float(o.lr_opt[0])})
    if rows:
        axes = [k for k in target if len({r[k] for r in rows}) > 1]
        if len(rows) >= len(axes) + 1 and axes:
            x = np.array([[1.0, *(math.log(r[k]) for k in axes)] for r in rows])
            y = np.log([r["lr"] for r in rows])
            coef, *_ = np.linalg.lstsq(x, y, rcond=None)
            x0 = np.array([1.0, *(math.log(target[k]) for k in axes)])
            values[lr_name] = float(math.exp(float(x0 @ coef)))  # type: ignore[index]
            exponents = {k: float(coef[i + 1]) for i, k in enumerate(axes)}
            dof = len(rows) - len(axes) - 1
            if dof > 0:
                log_sd = float(math.sqrt(float(((y - x @ coef) ** 2).sum()) / dof))
            law = "·".join(f"{k}^{exponents[k]:.3f}" for k in axes)
            how[lr_name] = (  # type: ignore[index]
                f"η* = c·{law} fitted on the η* of {len(rows)} earlier rungs at B={batch:g}"
            )
        else:
            near = min(rows, key=lambda r: _distance({k: r[k] for k in target}, target))
            values[lr_name] = near["lr"]  # type: ignore[index]
            where = ", ".join(f"{k}={near[k]:g}" for k in target)
            how[lr_name] = f"η* of the nearest earlier rung ({where}) at B={batch:g}"  # type: ignore[index]
    ok = [t for t in nearest.trials if math.isfinite(t.objective)]
    best = min(ok, key=lambda t: t.objective)
    where = ", ".join(f"{k}={v:g}" for k, v in nearest.rung.items())
    fill_from_best(
        values, how, names, best, f"best trial of the nearest earlier rung ({where}) at B={batch:g}"
    )
    return RungPrediction(
        batch=float(batch),
        values=values,
        how=how,
        rungs=tuple(rows),
        exponents=exponents,
        log_sd=log_sd,
    )
