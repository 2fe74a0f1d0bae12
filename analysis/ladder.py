"""A ladder of studies read from a run dir: the trials of a study whose scientific axes
include the model size (``quantity: model_size``; the built-in trainer's ``model.size``,
``model.d_model``, ``model.n_layers``) or the training horizon in tokens (``quantity:
horizon_tokens``; the built-in trainer's ``train.max_tokens``) beside the batch size, with
the learning rate tuned per point.

Per trial: N is the trainer's ``params_nonembedding`` (else its ``params``, else the
model axis's value when it is a number), D the horizon axis's value (else the horizon in
steps × tokens per step), B the batch axis, η the LR, and the loss the final eval loss of
a complete trial. `analyze_ladder` computes the rungs' optima, the laws on every rung,
the "B_crit depends on D, not N" claim and the held-out check
(`stepscale.analysis.fits.ladder`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xarray as xr

from stepscale.analysis.claims import claim_level
from stepscale.analysis.dataset import dataset_batch_unit, study_axes
from stepscale.analysis.fits.ladder import (
    BcritClaim,
    HoldoutCheck,
    LadderLaws,
    LadderTrials,
    RungOptimum,
    bcrit_claim,
    fit_ladder_laws,
    holdout_check,
    rung_bcrit,
    rung_optima,
)
from stepscale.analysis.fits.records import OMIT, Record
from stepscale.analysis.load import parameters
from stepscale.rundir import COMPLETE, HORIZON_TOKENS, MODEL_SIZE, quantity_of

__all__ = ["LadderAnalysis", "analyze_ladder", "is_ladder", "ladder_trials", "tokens_per_example"]


def _axis(ds: xr.Dataset, quantity: str) -> str | None:
    """The coordinate of the scientific axis measuring ``quantity``, or None."""
    for meta in parameters(ds, "scientific"):
        if quantity_of(meta["path"], meta.get("quantity")) == quantity:
            return str(meta["coord"])
    return None


def is_ladder(ds: xr.Dataset) -> bool:
    """Whether the study is a ladder: a model-size or horizon axis beside a batch-size axis
    and a tuned learning rate."""
    axes = study_axes(ds)
    has_rung_axis = _axis(ds, MODEL_SIZE) is not None or _axis(ds, HORIZON_TOKENS) is not None
    return has_rung_axis and axes.batch is not None and axes.lr is not None


def _floats(ds: xr.Dataset, *names: str) -> np.ndarray:
    """The first of ``names`` (a trial coordinate, or ``status_<name>``) that is numeric."""
    for name in names:
        for coord in (name, f"status_{name}"):
            if coord in ds.coords and ds[coord].values.dtype.kind in "iuf":
                return np.asarray(ds[coord].values, dtype=float)
    return np.full(ds.sizes["trial"], np.nan)


def ladder_trials(ds: xr.Dataset) -> tuple[LadderTrials, np.ndarray]:
    """The complete trials of a ladder as `LadderTrials` (with their eval curves), and
    the total parameter count of each (NaN where not said). `ValueError` when the study
    is not a ladder."""
    if not is_ladder(ds):
        raise ValueError(
            "not a ladder: a ladder needs a model-size (quantity: model_size) or horizon "
            "(quantity: horizon_tokens, path train.max_tokens) scientific axis beside the "
            "batch size, and a tuned learning rate"
        )
    axes = study_axes(ds)
    assert axes.batch is not None and axes.lr is not None
    total = _floats(ds, "params")
    n = _floats(ds, "params_nonembedding")
    n = np.where(np.isfinite(n), n, total)
    model = _axis(ds, MODEL_SIZE)
    if model is not None and ds[model].values.dtype.kind in "iuf":
        n = np.where(np.isfinite(n), n, np.asarray(ds[model].values, dtype=float))
    horizon = _axis(ds, HORIZON_TOKENS)
    steps_d = _floats(ds, "horizon_steps") * _floats(ds, "tokens_per_step")
    if horizon is not None and ds[horizon].values.dtype.kind in "iuf":
        d = np.asarray(ds[horizon].values, dtype=float)
    else:
        d = steps_d
    b = np.asarray(ds[axes.batch.coord].values, dtype=float)
    lr = np.asarray(ds[axes.lr.coord].values, dtype=float)
    loss = _floats(ds, "final_eval_loss")
    ok = (
        (ds["state"].values == COMPLETE)
        & np.isfinite(n)
        & np.isfinite(d)
        & np.isfinite(b)
        & (lr > 0)
    )
    loss = np.where(ok, loss, np.nan)
    curves = []
    if "eval_loss" in ds:
        steps = ds["step"].values.astype(float)
        ev = ds["eval_loss"].values
        for i in np.flatnonzero(ok):
            m = np.isfinite(ev[i])
            curves.append((steps[m], ev[i][m]))
    idx = np.flatnonzero(ok)
    trials = LadderTrials.of(
        n[idx], d[idx], b[idx], lr[idx], loss[idx], curves if "eval_loss" in ds else None
    )
    return trials, total[idx]


@dataclass(frozen=True)
class LadderAnalysis(Record):
    """Everything the report shows of a ladder."""

    batch_unit: str
    tokens_per_example: float
    rungs: tuple[RungOptimum, ...]
    params_total: Mapping[str, float]  # "N,D" → the total parameter count of the rung's model
    laws: LadderLaws | None
    laws_error: str | None
    claim: BcritClaim | None
    holdout: HoldoutCheck
    trials: LadderTrials = field(metadata=OMIT)

    def _json(self, fields: dict[str, Any]) -> dict[str, Any]:
        out = dict(fields)
        out["holdout"] = self.holdout.to_dict() | {"sentence": self.holdout.sentence()}
        if self.holdout.laws is not None:
            out["holdout"]["laws"] = self.holdout.laws.to_dict()
        return out


def tokens_per_example(ds: xr.Dataset) -> float:
    """Tokens per element of a batch (the sequence length; 1 when the trials do not say)."""
    t = _floats(ds, "tokens_per_step") / _floats(ds, "examples_per_step")
    t = t[np.isfinite(t) & (t > 0)]
    return float(np.median(t)) if t.size else 1.0


def analyze_ladder(
    ds: xr.Dataset, *, n_boot: int = 1000, seed: int = 0, confidence: float = 0.95
) -> LadderAnalysis:
    """The ladder's rungs, laws (on every rung), B_crit claim and held-out check."""
    trials, total = ladder_trials(ds)
    unit = dataset_batch_unit(ds)
    tpe = tokens_per_example(ds)
    optima = rung_bcrit(trials, rung_optima(trials))
    params_total = {}
    for o in optima:
        m = trials.rung_mask(o.n, o.d)
        t = total[m][np.isfinite(total[m])]
        params_total[f"{o.n:g},{o.d:g}"] = float(t[0]) if t.size else math.nan
    laws, error, claim = None, None, None
    try:
        laws = fit_ladder_laws(
            optima,
            batch_unit=unit,
            tokens_per_example=tpe,
            n_boot=n_boot,
            seed=seed,
            confidence=confidence,
        )
        claim = bcrit_claim(laws, claim_level(ds.attrs))
    except ValueError as exc:
        error = str(exc)
    check = holdout_check(
        trials,
        n_boot=n_boot,
        seed=seed,
        confidence=confidence,
        batch_unit=unit,
        tokens_per_example=tpe,
    )
    return LadderAnalysis(
        batch_unit=unit,
        tokens_per_example=tpe,
        rungs=tuple(optima),
        params_total=params_total,
        laws=laws,
        laws_error=error,
        claim=claim,
        holdout=check,
        trials=trials,
    )
