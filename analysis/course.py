"""Batch size over the course of training, from a loaded study: does a batch ramp save
steps or examples, and where do loss and gradient-norm spikes occur.

- :func:`ramp_comparison`: every ramped point (its trials report ``rampup_steps`` > 0)
  against the constant-batch point of the same other scientific values. Steps and
  examples to the target — at the log-linear crossing between evaluations, so seeds that
  cross between the same two evaluations still differ — of the confirm seeds (the best
  tune values rerun with new seeds): their means with 95% t-intervals, and the differences ramp − constant with
  Welch intervals. A ramp *saved* steps (examples) when the interval of the difference lies
  below 0, *cost* them when it lies above, and the study cannot tell otherwise. Each
  ramp's claims "fewer steps" and "fewer examples" than the constant batch are tested
  with a one-sided Welch test at the study's ``objective.claim_level`` (analysis.claims).
  Without confirm seeds only the best tune trials are compared, without intervals.
- :func:`spike_table`: per point, trials with a loss spike, spikes counted, divergences and
  the learning rates of trials with and without spikes (the trainer's rule: docs/run-dir.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import xarray as xr

from stepscale.analysis.claims import Claim, claim, claim_level
from stepscale.analysis.dataset import study_axes
from stepscale.analysis.fits.student_t import t_quantile
from stepscale.analysis.load import parameters
from stepscale.rundir import DIVERGED

B2_PATH = "optimizer.b2"
RAMP_PREFIX = "data.rampup."


@dataclass(frozen=True)
class Estimate:
    """A mean over seeds with its 95% interval (NaN bounds: fewer than 2 values)."""

    mean: float
    lo: float
    hi: float
    n: int


@dataclass(frozen=True)
class Arm:
    """One point of a ramp study: its steps and examples to the target."""

    point: str
    ramped: bool
    rampup_steps: float  # the first step at the final batch (median over its trials)
    best_steps: float  # the best tune trial's steps to target (NaN: not reached)
    best_examples: float
    steps: Estimate | None  # over confirm seeds that reached the target
    examples: Estimate | None
    n_seeds: int  # confirm seeds run
    reference: str | None  # the constant-batch point it is compared with
    d_steps: Estimate | None  # ramp − constant
    d_examples: Estimate | None


@dataclass(frozen=True)
class RampComparison:
    """Every arm of a ramp study and what the comparison says."""

    arms: tuple[Arm, ...]
    target: float | None
    batch_unit: str
    verdicts: tuple[str, ...]
    # "the ramp reaches the target in fewer steps (examples) than the constant batch",
    # each with its one-sided Welch test over the confirm seeds (analysis.claims)
    claims: tuple[Claim, ...] = ()


def _mean_ci(values: Sequence[float]) -> Estimate | None:
    v = np.asarray([x for x in values if math.isfinite(x)], dtype=float)
    if v.size == 0:
        return None
    if v.size < 2:
        return Estimate(float(v[0]), math.nan, math.nan, 1)

    half = t_quantile(0.975, v.size - 1) * float(v.std(ddof=1)) / math.sqrt(v.size)
    m = float(v.mean())
    return Estimate(m, m - half, m + half, int(v.size))


def welch(a: Sequence[float], b: Sequence[float]) -> Estimate | None:
    """mean(a) − mean(b) with a 95% Welch t-interval (NaN bounds: a side has < 2 values)."""
    x = np.asarray([v for v in a if math.isfinite(v)], dtype=float)
    y = np.asarray([v for v in b if math.isfinite(v)], dtype=float)
    if x.size == 0 or y.size == 0:
        return None
    d = float(x.mean() - y.mean())
    if x.size < 2 or y.size < 2:
        return Estimate(d, math.nan, math.nan, int(min(x.size, y.size)))

    vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    se = math.sqrt(vx + vy)
    if se == 0:
        return Estimate(d, d, d, int(min(x.size, y.size)))
    dof = (vx + vy) ** 2 / (vx**2 / (x.size - 1) + vy**2 / (y.size - 1))
    half = t_quantile(0.975, dof) * se
    return Estimate(d, d - half, d + half, int(min(x.size, y.size)))


def _at_target(ds: xr.Dataset, i: int) -> tuple[float, float]:
    """(steps, examples) of trial ``i`` where its eval loss crossed the target: the
    log-linear crossing between evaluations (``steps_to_target_interp``), and the examples
    consumed by then (exact at logged steps, linear in between: one batch per step)."""
    s = float(ds["steps_to_target_interp"].values[i])
    if not math.isfinite(s):
        return math.nan, math.nan
    steps = ds["step"].values.astype(float)
    examples = np.asarray(ds["examples"].values[i], dtype=float)
    ok = np.isfinite(examples)
    return s, float(np.interp(s, steps[ok], examples[ok]))


def ramp_comparison(ds: xr.Dataset, best: dict[str, int], batch_unit: str) -> RampComparison | None:
    """The record of a ramp study (None when no trial ran a batch ramp)."""
    if "rampup_steps" not in ds.coords or "steps_to_target_interp" not in ds.coords:
        return None
    ramp_steps = np.asarray(ds["rampup_steps"].values, dtype=float)
    if not np.nanmax(np.where(np.isfinite(ramp_steps), ramp_steps, 0)) > 0:
        return None
    points = ds["point"].values
    kinds = ds["kind"].values
    others = [
        m["coord"]
        for m in parameters(ds, "scientific")
        if not str(m["path"]).startswith(RAMP_PREFIX)
    ]
    rows: dict[str, dict[str, object]] = {}
    for p in dict.fromkeys(points.tolist()):
        idx = np.flatnonzero(points == p)
        confirm = [i for i in idx if kinds[i] == "confirm"]
        at = [_at_target(ds, i) for i in confirm]
        b = best.get(p)
        bs, be = _at_target(ds, b) if b is not None else (math.nan, math.nan)
        key = tuple(str(ds[c].values[idx[0]]) for c in others)
        rows[p] = {
            "ramped": bool(np.nanmax(np.nan_to_num(ramp_steps[idx], nan=0.0)) > 0),
            "rampup_steps": float(np.nanmedian(ramp_steps[idx])) if idx.size else math.nan,
            "best": (bs, be),
            "steps": [s for s, _ in at],
            "examples": [e for _, e in at],
            "key": key,
        }
    arms, verdicts = [], []
    claims: list[Claim] = []
    level = claim_level(ds.attrs)
    for p, r in rows.items():
        ref = None
        if r["ramped"]:
            ref = next(
                (q for q, o in rows.items() if not o["ramped"] and o["key"] == r["key"]), None
            )
        d_steps = d_examples = None
        if ref is not None:
            d_steps = welch(r["steps"], rows[ref]["steps"])  # type: ignore[arg-type]
            d_examples = welch(r["examples"], rows[ref]["examples"])  # type: ignore[arg-type]
        arm = Arm(
            point=p,
            ramped=bool(r["ramped"]),
            rampup_steps=float(r["rampup_steps"]),  # type: ignore[arg-type]
            best_steps=r["best"][0],  # type: ignore[index]
            best_examples=r["best"][1],  # type: ignore[index]
            steps=_mean_ci(r["steps"]),  # type: ignore[arg-type]
            examples=_mean_ci(r["examples"]),  # type: ignore[arg-type]
            n_seeds=len(r["steps"]),  # type: ignore[arg-type]
            reference=ref,
            d_steps=d_steps,
            d_examples=d_examples,
        )
        arms.append(arm)
        if ref is not None:
            verdicts.append(_verdict(arm, batch_unit))
            for what, unit in (("steps", "steps"), ("examples", batch_unit)):
                claims.append(
                    claim(p, r[what], ref, rows[ref][what], what, unit, level)  # type: ignore[arg-type]
                )
    return RampComparison(tuple(arms), _target(ds), batch_unit, tuple(verdicts), tuple(claims))


def _target(ds: xr.Dataset) -> float | None:
    t = ds.attrs.get("target_loss")
    return float(t) if t is not None else None


def _verdict(arm: Arm, unit: str) -> str:
    """One sentence: did the ramp of ``arm`` save steps and examples against its reference."""
    parts = []
    for what, d, u in (("steps", arm.d_steps, "steps"), ("examples", arm.d_examples, unit)):
        if d is None:
            parts.append(f"{what}: not comparable (a side never reached the target)")
        elif not (math.isfinite(d.lo) and math.isfinite(d.hi)):
            parts.append(f"{what}: {d.mean:+.4g} {u} (one seed a side: no interval)")
        elif d.hi < 0:
            parts.append(f"saved {what}: {d.mean:+.4g} {u} [{d.lo:.4g}, {d.hi:.4g}]")
        elif d.lo > 0:
            parts.append(f"cost {what}: {d.mean:+.4g} {u} [{d.lo:.4g}, {d.hi:.4g}]")
        else:
            parts.append(
                f"no difference in {what} resolved: {d.mean:+.4g} {u} [{d.lo:.4g}, {d.hi:.4g}]"
            )
    return f"{arm.point} vs {arm.reference}: " + "; ".join(parts) + "."


@dataclass(frozen=True)
class SpikeRow:
    """Spikes of one point's trials."""

    point: str
    batch: str
    b2: str
    trials: int
    with_loss_spikes: int
    loss_spikes: int
    grad_norm_spikes: int
    diverged: int
    lr_spiking: float  # median LR of the trials with a loss or gradient-norm spike
    lr_quiet: float  # median LR of the others
    # train.on_spike (None: no trial of the point ran a restart policy)
    restarts: int | None = None  # restarts done by its trials
    with_restarts: int | None = None  # trials that restarted
    steps_redone: int | None = None  # steps those restarts abandoned
    steps_done: int | None = None  # steps of the paths kept, for the share redone


@dataclass(frozen=True)
class SpikeTable:
    """Per point, the spikes its trials recorded."""

    rows: tuple[SpikeRow, ...]
    total_loss_spikes: int
    total_grad_norm_spikes: int
    total_restarts: int | None = None  # None: no trial ran a restart policy
    total_steps_redone: int | None = None


def _per_point(ds: xr.Dataset, path: str) -> tuple[str | None, bool]:
    """(the coordinate of the parameter at ``path``, whether it varies within a point)."""
    meta = next((m for m in parameters(ds) if m["path"] == path), None)
    if meta is None:
        return None, False
    return meta["coord"], meta["role"] == "nuisance"


def spike_table(ds: xr.Dataset) -> SpikeTable | None:
    """The record of the instability section (None when no trial counted spikes)."""
    if "loss_spikes" not in ds.coords:
        return None
    loss = np.asarray(ds["loss_spikes"].values, dtype=float)
    grad = np.asarray(ds["grad_norm_spikes"].values, dtype=float)
    if not np.isfinite(loss).any():
        return None
    axes = study_axes(ds)
    lr = np.asarray(ds[axes.lr.coord].values, dtype=float) if axes.lr is not None else None
    b2c, b2_tuned = _per_point(ds, B2_PATH)
    points = ds["point"].values
    states = ds["state"].values
    restarts = _counts(ds, "spike_restarts")
    redone = _counts(ds, "steps_redone")
    done = _counts(ds, "steps_done")
    rows = []
    for p in dict.fromkeys(points.tolist()):
        idx = np.flatnonzero((points == p) & np.isfinite(loss))
        if idx.size == 0:
            continue
        spiking = (loss[idx] > 0) | (np.nan_to_num(grad[idx]) > 0)
        lrs = lr[idx] if lr is not None else np.full(idx.size, math.nan)
        policy = idx[np.isfinite(restarts[idx])]  # the trials that ran a restart policy
        rows.append(
            SpikeRow(
                point=p,
                batch=str(ds[axes.batch.coord].values[idx[0]]) if axes.batch else "—",
                b2="tuned" if b2_tuned else _value(ds[b2c].values[idx[0]]) if b2c else "—",
                trials=int(idx.size),
                with_loss_spikes=int((loss[idx] > 0).sum()),
                loss_spikes=int(loss[idx].sum()),
                grad_norm_spikes=int(np.nan_to_num(grad[idx]).sum()),
                diverged=int((states[idx] == DIVERGED).sum()),
                lr_spiking=_median(lrs[spiking]),
                lr_quiet=_median(lrs[~spiking]),
                **(
                    {
                        "restarts": int(restarts[policy].sum()),
                        "with_restarts": int((restarts[policy] > 0).sum()),
                        "steps_redone": int(np.nansum(redone[policy])),
                        "steps_done": int(np.nansum(done[policy])),
                    }
                    if policy.size
                    else {}
                ),
            )
        )
    any_policy = bool(np.isfinite(restarts).any())
    return SpikeTable(
        tuple(rows),
        int(np.nansum(loss)),
        int(np.nansum(grad)),
        int(np.nansum(restarts)) if any_policy else None,
        int(np.nansum(redone)) if any_policy else None,
    )


def _counts(ds: xr.Dataset, name: str) -> np.ndarray:
    """A per-trial count coordinate as floats (NaN where a trial lacks it, or all NaN when
    no trial has it)."""
    if name not in ds.coords:
        return np.full(ds.sizes["trial"], math.nan)
    return np.asarray(ds[name].values, dtype=float)


def _value(v: object) -> str:
    """A parameter's value as text; floats (e.g. a derived β2) to 4 significant digits."""
    return f"{v:.4g}" if isinstance(v, float | np.floating) else str(v)


def _median(v: np.ndarray) -> float:
    v = v[np.isfinite(v)]
    return float(np.median(v)) if v.size else math.nan
