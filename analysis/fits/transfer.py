"""Transfer between points: a new batch size's nuisance optimum predicted from the batch
sizes already tuned.

- The learning rate follows η*(B): per finished batch size η* is the smoothed optimum of
  :func:`analysis.fits.lr.optimal_lr`; at a batch size between two finished ones the
  prediction interpolates log η* linearly in log B between its two neighbours (a local
  power law, so the flattening of η*(B) above B_crit is followed); outside them it
  extrapolates η*(B) = c·B^α fitted on every finished batch size
  (:func:`analysis.fits.lr.fit_lr_law`). ``log_sd`` is the residual standard deviation of
  that power law in log η* (NaN with fewer than 3 batch sizes): how far η* strays from a
  single law, the interval the orchestrator narrows the search range by.
- Every other nuisance parameter takes the value of the best trial at the nearest
  finished batch size (in log B; ties: the smaller batch size).

Pure functions of arrays; the orchestrator (``stepscale.sweeps.run.transfer``) gathers the
finished trials and enqueues the prediction.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stepscale.analysis.fits.arrays import batch_json
from stepscale.analysis.fits.lr import fit_lr_law, optimal_lr
from stepscale.analysis.fits.records import BATCH, Record

__all__ = [
    "Prediction",
    "TrialObservation",
    "fill_from_best",
    "predict_nuisance",
    "transfer_order",
]


@dataclass(frozen=True)
class TrialObservation:
    """A finished trial of a source point: its batch size, nuisance values (trainer
    values, by alias) and objective (lower is better; NaN when it diverged or failed)."""

    batch: float
    values: Mapping[str, Any]
    objective: float


@dataclass(frozen=True)
class Prediction(Record):
    """The predicted nuisance values of a new point, how each was found, and the
    η*(B) data it came from."""

    batch: float = field(metadata=BATCH)
    values: Mapping[str, Any]
    how: Mapping[str, str]
    sources: tuple[float, ...] = field(metadata=BATCH)
    lr_opt: Mapping[float, float] = field(default_factory=dict)  # source batch → η*
    lr_law: Mapping[str, Any] | None = None  # c, alpha, alpha_ci of η*(B) = c·B^α
    log_sd: float = math.nan

    def _json(self, fields: dict[str, Any]) -> dict[str, Any]:
        """η* per source batch size as rows (batch, lr)."""
        lr_opt = [{"batch": batch_json(b), "lr": v} for b, v in self.lr_opt.items()]
        return fields | {"lr_opt": lr_opt}


def fill_from_best(
    values: dict[str, Any],
    how: dict[str, str],
    names: Sequence[str],
    best: TrialObservation | None,
    why: str,
) -> None:
    """Each of ``names`` not predicted yet takes its value in ``best`` (a source's best
    trial), ``why`` saying where that came from."""
    for name in names:
        if name in values or best is None or name not in best.values:
            continue
        values[name] = best.values[name]
        how[name] = why


def _best_trial(trials: Sequence[TrialObservation]) -> TrialObservation | None:
    ok = [t for t in trials if math.isfinite(t.objective)]
    return min(ok, key=lambda t: t.objective) if ok else None


def _lr_prediction(
    trials: Sequence[TrialObservation], lr_name: str, batch: float
) -> tuple[float, str, dict[float, float], dict[str, Any] | None, float] | None:
    rows = [
        t
        for t in trials
        if isinstance(t.values.get(lr_name), (int, float)) and float(t.values[lr_name]) > 0
    ]
    opt: dict[float, float] = {}
    for b in sorted({t.batch for t in rows}):
        at = [t for t in rows if t.batch == b]
        if not any(math.isfinite(t.objective) for t in at):
            continue  # nothing usable at this batch size: it teaches nothing about η*
        o = optimal_lr(
            [float(t.values[lr_name]) for t in at], [t.objective for t in at], [b] * len(at)
        )
        opt[b] = o.lr_opt[0]
    if not opt:
        return None
    sizes = sorted(opt)
    law = None
    log_sd = math.nan
    if len(sizes) >= 2:
        fitted = fit_lr_law(sizes, [opt[b] for b in sizes])
        law = {"c": fitted.c, "alpha": fitted.alpha, "alpha_ci": fitted.alpha_ci}
        if fitted.n_points >= 3:
            r = np.asarray(fitted.residuals)
            log_sd = float(math.sqrt((r**2).sum() / (r.size - 2)))
    below = [b for b in sizes if b <= batch]
    above = [b for b in sizes if b >= batch]
    if below and above:
        lo, hi = below[-1], above[0]
        if lo == hi:
            return opt[lo], f"η* at B={batch_json(lo)} (already tuned)", opt, law, log_sd
        t = (math.log(batch) - math.log(lo)) / (math.log(hi) - math.log(lo))
        value = math.exp((1 - t) * math.log(opt[lo]) + t * math.log(opt[hi]))
        how = (
            f"η*(B) interpolated in log–log between B={batch_json(lo)} (η*={opt[lo]:.4g}) "
            f"and B={batch_json(hi)} (η*={opt[hi]:.4g})"
        )
        return value, how, opt, law, log_sd
    if law is None:
        b0 = sizes[0]
        return opt[b0], f"η* of the only tuned batch size B={batch_json(b0)}", opt, law, log_sd
    value = float(law["c"] * batch ** law["alpha"])
    how = (
        f"η*(B) = {law['c']:.4g}·B^{law['alpha']:.3f} fitted on B = "
        f"{', '.join(str(batch_json(b)) for b in sizes)}, extrapolated"
    )
    return value, how, opt, law, log_sd


def predict_nuisance(
    trials: Sequence[TrialObservation],
    batch: float,
    names: Sequence[str],
    *,
    lr_name: str | None = None,
) -> Prediction | None:
    """Predict the nuisance values ``names`` at ``batch`` from finished trials of other
    batch sizes (see the module docstring); None when no source trial has a usable
    objective."""
    sources = sorted({t.batch for t in trials if math.isfinite(t.objective)})
    if not sources:
        return None
    values: dict[str, Any] = {}
    how: dict[str, str] = {}
    lr_opt: dict[float, float] = {}
    law = None
    log_sd = math.nan
    if lr_name is not None and lr_name in names:
        got = _lr_prediction(trials, lr_name, batch)
        if got is not None:
            values[lr_name], how[lr_name], lr_opt, law, log_sd = got
    x = math.log(batch)
    nearest = min(sources, key=lambda b: (abs(math.log(b) - x), b))
    best = _best_trial([t for t in trials if t.batch == nearest])
    why = f"best trial at the nearest tuned batch size B={batch_json(nearest)}"
    fill_from_best(values, how, names, best, why)
    return Prediction(
        batch=float(batch),
        values=values,
        how=how,
        sources=tuple(sources),
        lr_opt=lr_opt,
        lr_law=law,
        log_sd=log_sd,
    )


def transfer_order(values: list[float]) -> list[int]:
    """Indices of ``values`` (ascending) in the order transfer measures them: the smallest
    and the one nearest the middle of the range in log value (the two *anchors*, tuned from
    scratch), then the largest (extrapolated along η*(B) from the anchors), then repeatedly
    the one farthest in log value from those taken (ties: the smaller), so every later one
    lies between measured neighbours.

    The largest is not an anchor: it is the costliest batch size per trial, and, tuned from
    scratch with a few trials, the one whose best strays most above its optimum (on Tiny
    Shakespeare, 7 trials at B = 256 found a best 17% above the dense study's against 4–7%
    at the transferred points), which lifts S_min and pulls B_crit low. Transferred, it
    starts from the anchors' η*(B) and their other best values."""
    n = len(values)
    if n <= 2:
        return list(range(n))
    logs = [math.log(v) for v in values]
    centre = (logs[0] + logs[-1]) / 2
    # distances rounded: log 32 − log 16 and log 128 − log 64 differ in the last bit
    middle = min(range(1, n - 1), key=lambda i: (round(abs(logs[i] - centre), 9), i))
    order = [0, middle, n - 1]
    while len(order) < n:
        rest = [i for i in range(n) if i not in order]
        order.append(
            max(rest, key=lambda i: (round(min(abs(logs[i] - logs[j]) for j in order), 9), -i))
        )
    return order
