"""Has it trained? The verdict on a study's trials, before any fit is believed.

A B_crit measured on trials that learned nothing is noise. Per point, the trial with the
lowest final eval loss (any trainer, tune or confirm) is compared with

- the task's **baseline**: the eval loss of a model that learned nothing useful, as the
  trainer states it (``baseline_loss`` in status.json, from the built-in trainer's data:
  the unigram entropy of the training split for text and token files, log(vocabulary) for
  the Markov chain, log(classes) for the teacher, the NQM's expected loss at its starting
  point; a user's trainer returns it from ``validate`` or reports it), and
- its own **initial** (step-0) eval loss, when the trainer reported one.

The *reference* is the lower of the two that are known (a model may start below the
uniform baseline: then it must beat its start). The trial *learned* when its final eval
loss is below the reference by a clear margin: :data:`MARGIN` of the way from the
reference to the loss floor (the floor when known, else 0, the floor of every
cross-entropy). Where a floor is known, ``progress`` says how far the trial got from the
baseline (else its start) towards it (0 = the baseline, 1 = the floor).

The study is **not trained** when no point's best trial learned: the answer is then the
numbers, never a B_crit. It is *unknown* when no trial has a reference to compare with.
Pure functions of the loaded Dataset (analysis.load).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from stepscale.analysis.fits.records import OMIT, Record, as_json, insert_before
from stepscale.rundir import NO_PROGRESS

if TYPE_CHECKING:
    import xarray as xr

__all__ = ["MARGIN", "NOT_TRAINED", "PointLearning", "Verdict", "learned", "verdict"]

MARGIN = 0.05  # of the way from the reference loss to the floor
NOT_TRAINED = "not trained"


def _fmt(x: float) -> str:
    return f"{x:.3g}" if math.isfinite(x) else "—"


def learned(final: float, reference: float, floor: float = math.nan) -> bool | None:
    """Did a final eval loss beat ``reference`` (baseline or initial loss) by the margin?
    None when either number is missing."""
    if not (math.isfinite(final) and math.isfinite(reference)):
        return None
    low = floor if math.isfinite(floor) and floor < reference else 0.0
    gap = reference - low if reference > low else abs(reference)
    return final < reference - MARGIN * gap


@dataclass(frozen=True)
class PointLearning(Record):
    """The best trial of one point against its reference losses (NaN = not known)."""

    point: str
    trial: str
    final: float = field(metadata=as_json("final_eval_loss"))
    initial: float = field(metadata=as_json("initial_eval_loss"))
    baseline: float = field(metadata=as_json("baseline_loss"))
    floor: float = field(metadata=as_json("loss_floor"))
    baseline_kind: str = field(metadata=OMIT)

    @property
    def reference(self) -> float:
        """The lower of the baseline and the initial eval loss that are known (NaN: none)."""
        known = [x for x in (self.baseline, self.initial) if math.isfinite(x)]
        return min(known) if known else math.nan

    @property
    def learned(self) -> bool | None:
        """Beat the reference by the margin (None: no reference or no final loss)."""
        return learned(self.final, self.reference, self.floor)

    @property
    def progress(self) -> float:
        """(baseline − final) / (baseline − floor): how far towards the floor (NaN when
        the floor or the baseline is unknown)."""
        ref = self.baseline if math.isfinite(self.baseline) else self.initial
        floor = self.floor
        if not (math.isfinite(ref) and math.isfinite(floor) and ref > floor):
            return math.nan
        return (ref - self.final) / (ref - floor)

    def text(self) -> str:
        """``final 1.47 vs baseline 3.31 (unigram …); start 4.2; 62% of the way to the floor``."""
        parts = [f"final eval loss {_fmt(self.final)}"]
        if math.isfinite(self.baseline):
            kind = f" ({self.baseline_kind})" if self.baseline_kind else ""
            parts[0] += f" vs baseline {_fmt(self.baseline)}{kind}"
        if math.isfinite(self.initial):
            parts.append(f"step-0 eval loss {_fmt(self.initial)}")
        if math.isfinite(self.floor):
            prog = self.progress
            way = f", {prog:.0%} of the way from the baseline" if math.isfinite(prog) else ""
            parts.append(f"floor {_fmt(self.floor)}{way}")
        return "; ".join(parts)

    def _json(self, fields: dict[str, Any]) -> dict[str, Any]:
        """The baseline's kind (null when not stated) before the floor; the progress and
        the judgement."""
        fields = insert_before(fields, "loss_floor", {"baseline": self.baseline_kind or None})
        return fields | {"progress": self.progress, "learned": self.learned}


@dataclass(frozen=True)
class Verdict(Record):
    """The study's answer to "has it trained?": ``trained`` is True, False or None (no
    trial has a reference loss to compare with)."""

    points: tuple[PointLearning, ...]
    # trials stopped by the no-progress rule (status.json ``ended_by: no_progress``;
    # sweeps.job.no_progress): pruned, not diverged
    no_progress: int = field(default=0, metadata=as_json("ended_no_progress"))

    @property
    def best(self) -> PointLearning | None:
        """The point whose best trial got furthest below its reference."""
        known = [p for p in self.points if p.learned is not None]
        if not known:
            return None
        return min(known, key=lambda p: p.final - p.reference)

    @property
    def trained(self) -> bool | None:
        """Some point's best trial learned (None: nothing to judge by)."""
        flags = [p.learned for p in self.points if p.learned is not None]
        return any(flags) if flags else None

    @property
    def not_learned(self) -> tuple[str, ...]:
        """The points whose best trial did not learn."""
        return tuple(p.point for p in self.points if p.learned is False)

    def line(self) -> str:
        """One line: ``trained: …`` / ``NOT TRAINED: …`` / ``trained: unknown …``."""
        best = self.best
        if best is None:
            return (
                "trained: unknown (no trial reported a step-0 eval loss and the trainer "
                "states no baseline_loss)"
            )
        rule = f"needs a final eval loss {MARGIN:.0%} of the way below the baseline"
        ended = (
            f"; {self.no_progress} trial{'s' if self.no_progress != 1 else ''} ended early, no "
            f"progress toward the target"
            if self.no_progress
            else ""
        )
        if not self.trained:
            return (
                f"{NOT_TRAINED.upper()}: no trial beat the baseline by a clear margin ({rule}); "
                f"best trial {best.trial}: {best.text()}{ended}"
            )
        lines = f"trained: best trial {best.trial}: {best.text()}"
        if self.not_learned:
            lines += f" (did not learn: {', '.join(self.not_learned)})"
        return lines

    def _json(self, fields: dict[str, Any]) -> dict[str, Any]:
        """The verdict, its margin and the best point before the points."""
        return {"trained": self.trained, "margin": MARGIN, "best": self.best, **fields}


def _per_trial(ds: xr.Dataset, names: tuple[str, ...]) -> np.ndarray:
    """The first numeric per-trial coordinate of ``names`` (NaN when none)."""
    for name in names:
        if name in ds.coords and ds[name].dims == ("trial",):
            v = ds[name].values
            if v.dtype.kind in "iuf":
                return v.astype(float)
    return np.full(ds.sizes["trial"], np.nan)


def _first_finite(rows: np.ndarray) -> np.ndarray:
    """Per row of a (trial, step) array, its first finite value (NaN when none)."""
    out = np.full(rows.shape[0], np.nan)
    for i, row in enumerate(rows):
        ok = np.flatnonzero(np.isfinite(row))
        if ok.size:
            out[i] = row[ok[0]]
    return out


def _last_finite(rows: np.ndarray) -> np.ndarray:
    out = np.full(rows.shape[0], np.nan)
    for i, row in enumerate(rows):
        ok = np.flatnonzero(np.isfinite(row))
        if ok.size:
            out[i] = row[ok[-1]]
    return out


def verdict(ds: xr.Dataset) -> Verdict:
    """The verdict of a loaded study (see the module docstring)."""
    n = ds.sizes["trial"]
    if n == 0:
        return Verdict(())
    has_curve = "eval_loss" in ds and ds.sizes.get("step", 0) > 0
    curve = ds["eval_loss"].values if has_curve else np.full((n, 0), np.nan)
    steps = ds["step"].values if has_curve else np.empty(0)
    initial = curve[:, 0] if steps.size and steps[0] == 0 else np.full(n, np.nan)
    initial = np.where(np.isfinite(initial), initial, _per_trial(ds, ("initial_eval_loss",)))
    final = _per_trial(ds, ("final_eval_loss",))
    final = np.where(np.isfinite(final), final, _last_finite(curve) if has_curve else np.nan)
    baseline = _per_trial(ds, ("baseline_loss", "status_baseline_loss"))
    if "baseline_loss" in ds.data_vars:  # a trainer that reports it as a metric
        reported = _first_finite(ds["baseline_loss"].values)
        baseline = np.where(np.isfinite(baseline), baseline, reported)
    floor = _per_trial(ds, ("loss_floor", "status_loss_floor"))
    kinds = ds["baseline"].values.astype(str) if "baseline" in ds.coords else np.full(n, "")
    running = ds["running"].values.astype(bool) if "running" in ds.coords else np.zeros(n, bool)
    ids = ds["trial"].values.tolist()
    points = ds["point"].values.astype(str)
    out = []
    for p in dict.fromkeys(points.tolist()):
        rows = [i for i in range(n) if points[i] == p and not running[i]]
        rows = [i for i in rows if math.isfinite(final[i])] or rows
        if not rows:
            continue
        i = min(rows, key=lambda r: final[r] if math.isfinite(final[r]) else math.inf)
        out.append(
            PointLearning(
                point=p,
                trial=str(ids[i]),
                final=float(final[i]),
                initial=float(initial[i]),
                baseline=float(baseline[i]),
                floor=float(floor[i]),
                baseline_kind=str(kinds[i]) if kinds[i] not in ("nan", "None") else "",
            )
        )
    ended = ds["ended_by"].values.astype(str) if "ended_by" in ds.coords else np.full(n, "")
    return Verdict(tuple(out), int((ended == NO_PROGRESS).sum()))
