"""Every fit of a study from its loaded Dataset (DESIGN.md §4), as one typed record.

Per group of trials (the values of the scientific axes other than the batch size):
steps to result per batch size at the primary target (censored trials censored, batch
sizes that never got there listed, never dropped), the S(B) fit and its redo at every
target with B_crit(L), the optimal LR per batch size and η*(B) = c·B^α below B_crit,
the gradient noise scale B_simple of each point's best trial, and the spread of steps
to target over confirm seeds. An ablation table compares the variants of a categorical
scientific axis. Fits a study cannot support are skipped with a note saying why.

The S(B) fits use the same defaults as ``sweep fit steps`` (overhead 0.2, 1000 bootstrap
replicates, seed 0, smallest batch size as B0), so ``steps_to_target.csv`` gives the
same numbers through that command.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xarray as xr

from analysis.ablation import AblationTable, ablation_table
from analysis.dataset import (
    BATCH_PATH,
    LR_PATH,
    PointRow,
    StudyAxes,
    TrialSteps,
    best_trials,
    choose_targets,
    curves,
    point_rows,
    study_axes,
    trial_groups,
    trial_steps,
)
from analysis.fits.lr import LRLaw, OptimalLR, fit_lr_law, optimal_lr
from analysis.fits.steps import (
    BcritAtTargets,
    NoiseScaleSummary,
    SeedSpread,
    StepsFit,
    StepsToResult,
    _jsonable,
    bcrit_at_targets,
    noise_scale_summary,
    spread_over_seeds,
    steps_to_result,
)
from analysis.load import FINAL_STATES

__all__ = ["FitSettings", "GroupFits", "StudyAnalysis", "analyze", "usable_objective"]

SCHEMA = "stepscale.fits/v1"


@dataclass(frozen=True)
class FitSettings:
    """Options shared by the fits (the defaults of ``sweep fit steps``)."""

    overhead: float = 0.2
    n_boot: int = 1000
    seed: int = 0
    confidence: float = 0.95

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class GroupFits:
    """The fits of one group of trials (``all`` when the batch size is the only axis)."""

    group: str
    result: StepsToResult | None
    at_targets: BcritAtTargets | None
    steps_error: str | None
    optimal_lr: OptimalLR | None
    lr_law: LRLaw | None
    seeds: SeedSpread | None
    noise: Mapping[str, NoiseScaleSummary]
    notes: tuple[str, ...] = field(default=())

    def fit_at(self, target: float | None) -> StepsFit | None:
        """The S(B) fit at ``target`` (None if not fitted there)."""
        if self.at_targets is None or target is None:
            return None
        return self.at_targets.fits.get(float(target))


@dataclass(frozen=True)
class StudyAnalysis:
    """Everything the report shows, computed from one Dataset."""

    study: str
    objective_kind: str
    target: float | None
    targets: tuple[float, ...]
    auto_targets: bool
    partial: bool
    axes: StudyAxes
    trial_group: np.ndarray
    trial_steps: TrialSteps
    best: Mapping[str, int]
    points: tuple[PointRow, ...]
    groups: tuple[GroupFits, ...]
    ablation: AblationTable | None
    notes: tuple[str, ...]
    settings: FitSettings

    @property
    def warnings(self) -> tuple[str, ...]:
        """Warnings of every fit (S(B) at the primary target, ablation budgets)."""
        out: list[str] = []
        for g in self.groups:
            fit = g.fit_at(self.target)
            prefix = "" if g.group == "all" else f"{g.group}: "
            if fit is not None:
                out += [prefix + w for w in fit.warnings]
        if self.ablation is not None:
            out += list(self.ablation.warnings)
        return tuple(out)

    def to_dict(self) -> dict[str, Any]:
        """The content of fits.json (``steps`` has the shape of ``sweep fit steps``)."""
        t = self.target
        steps_groups = []
        for g in self.groups:
            fit = g.fit_at(t)
            if fit is not None:
                steps_groups.append({"group": g.group, **fit.to_dict()})
            elif self.axes.batch is not None and (g.result is not None or g.steps_error):
                entry: dict[str, Any] = {"group": g.group, "error": g.steps_error}
                if g.result is not None:
                    entry["not_reached"] = g.result.to_dict()["not_reached"]
                steps_groups.append(entry)
        return {
            "schema": SCHEMA,
            "study": self.study,
            "partial": self.partial,
            "objective": {"kind": self.objective_kind},
            "axes": self.axes.to_dict(),
            "target": _jsonable(t),
            "targets": _jsonable(self.targets),
            "automatic_targets": self.auto_targets,
            "settings": self.settings.to_dict(),
            "points": [p.to_dict() for p in self.points],
            "steps": {"target": _jsonable(t), "groups": steps_groups},
            "steps_to_result": {
                "target": _jsonable(t),
                "groups": [
                    {"group": g.group, **g.result.to_dict()}
                    for g in self.groups
                    if g.result is not None
                ],
            },
            "bcrit_vs_target": {
                "groups": [_targets_dict(g) for g in self.groups if g.at_targets is not None]
            },
            "optimal_lr": {
                "groups": [
                    {"group": g.group, **g.optimal_lr.to_dict()}
                    for g in self.groups
                    if g.optimal_lr is not None
                ]
            },
            "lr_law": {
                "groups": [
                    {"group": g.group, **g.lr_law.to_dict()}
                    for g in self.groups
                    if g.lr_law is not None
                ]
            },
            "noise_scale": {
                "groups": [
                    {
                        "group": g.group,
                        "points": [{"point": p, **s.to_dict()} for p, s in g.noise.items()],
                    }
                    for g in self.groups
                    if g.noise
                ]
            },
            "seed_spread": {
                "quantity": "steps_to_target" if t is not None else "objective",
                "groups": [
                    {"group": g.group, **g.seeds.to_dict()}
                    for g in self.groups
                    if g.seeds is not None
                ],
            },
            "ablation": None if self.ablation is None else self.ablation.to_dict(),
            "notes": list(self.notes) + [n for g in self.groups for n in g.notes],
            "warnings": list(self.warnings),
        }


def _targets_dict(g: GroupFits) -> dict[str, Any]:
    assert g.at_targets is not None
    rows = [
        {
            "target": _jsonable(t),
            "b_crit": _jsonable(f.b_crit),
            "b_crit_ci": _jsonable(f.b_crit_ci),
            "s_min": _jsonable(f.s_min),
            "e_min": _jsonable(f.e_min),
            "n_points": f.n_points,
            "not_reached": f.to_dict()["not_reached"],
        }
        for t, f in g.at_targets.fits.items()
    ]
    return {
        "group": g.group,
        "targets": rows,
        "skipped": [{"target": _jsonable(t), "reason": r} for t, r in g.at_targets.skipped.items()],
        "law": None if g.at_targets.law is None else g.at_targets.law.to_dict(),
    }


def usable_objective(ds: xr.Dataset) -> np.ndarray:
    """Per trial, its objective where it finished usefully; NaN for running, diverged and
    failed trials (they count as tried, never as best)."""
    obj = ds["objective"].values.astype(float)
    ok = np.isin(ds["state"].values, ["complete", "pruned"])
    return np.where(ok, obj, np.nan)


def _num(ds: xr.Dataset, coord: str) -> np.ndarray:
    return ds[coord].values.astype(float)


def _steps_fits(
    ds: xr.Dataset,
    sel: np.ndarray,
    x: np.ndarray,
    ts: TrialSteps,
    target: float | None,
    targets: Sequence[float],
    settings: FitSettings,
) -> tuple[StepsToResult | None, BcritAtTargets | None, str | None]:
    if target is None:
        return None, None, None
    tune = sel & (ds["kind"].values == "tune")
    if not tune.any():
        tune = sel
    result = steps_to_result(x[tune], ts.steps[target][tune], ts.horizon[tune])
    cv = curves(ds, tune)
    batch = dict(zip(ds["trial"].values[tune].tolist(), x[tune].tolist(), strict=True))
    at = bcrit_at_targets(
        cv,
        batch,
        list(targets),
        overhead=settings.overhead,
        n_boot=settings.n_boot,
        seed=settings.seed,
        confidence=settings.confidence,
    )
    return result, at, at.skipped.get(float(target))


def _lr_fits(
    ds: xr.Dataset,
    axes: StudyAxes,
    sel: np.ndarray,
    b_crit: float | None,
) -> tuple[OptimalLR | None, LRLaw | None, list[str]]:
    assert axes.lr is not None and axes.batch is not None
    notes: list[str] = []
    rows = sel & (ds["kind"].values == "tune") & np.isin(ds["state"].values, list(FINAL_STATES))
    lr = _num(ds, axes.lr.coord)
    b = _num(ds, axes.batch.coord)
    obj = usable_objective(ds)
    rows &= np.isfinite(lr) & (lr > 0)
    keep = rows.copy()
    for size in np.unique(b[rows]):
        at = rows & (b == size)
        if not np.isfinite(obj[at]).any():
            keep &= ~at
            notes.append(f"batch size {size:g}: no finished trial with a usable objective")
    if not keep.any():
        return None, None, [*notes, "no finished trial with a usable objective: no optimal LR"]
    opt = optimal_lr(lr[keep], obj[keep], b[keep])
    law = None
    sizes = np.array(opt.batch_sizes)
    b_max = b_crit if b_crit is not None and (sizes <= b_crit).sum() >= 2 else None
    if b_crit is not None and b_max is None:
        notes.append(
            f"fewer than 2 batch sizes at or below B_crit = {b_crit:.4g}: η*(B) is fitted on "
            f"all batch sizes"
        )
    elif b_crit is None:
        notes.append("B_crit unknown: η*(B) is fitted on all batch sizes")
    try:
        law = fit_lr_law(opt.batch_sizes, opt.lr_opt, b_max=b_max)
    except ValueError as exc:
        notes.append(f"η*(B) not fitted: {exc}")
    return opt, law, notes


def _noise(
    ds: xr.Dataset, sel: np.ndarray, best: Mapping[str, int]
) -> dict[str, NoiseScaleSummary]:
    if "noise_scale" not in ds:
        return {}
    out = {}
    steps = ds["step"].values
    points = ds["point"].values
    for p, i in best.items():
        if not sel[i] or points[i] != p:
            continue
        v = ds["noise_scale"].values[i]
        ok = np.isfinite(v)
        if ok.any():
            out[p] = noise_scale_summary(steps[ok], v[ok])
    return out


def _seeds(
    ds: xr.Dataset, sel: np.ndarray, x: np.ndarray, ts: TrialSteps, target: float | None
) -> SeedSpread | None:
    conf = sel & (ds["kind"].values == "confirm") & np.isfinite(x) & (x > 0)
    if not conf.any():
        return None
    values = ts.steps[target] if target is not None else usable_objective(ds)
    return spread_over_seeds(x[conf], values[conf])


def analyze(
    ds: xr.Dataset, targets: Sequence[float] = (), settings: FitSettings | None = None
) -> StudyAnalysis:
    """Run every fit the study supports; see the module docstring."""
    settings = settings or FitSettings()
    axes = study_axes(ds)
    groups = trial_groups(ds, axes)
    target, all_targets, auto = choose_targets(ds, axes, targets)
    ts = trial_steps(ds, all_targets)
    best = best_trials(ds)
    points = point_rows(ds, axes, groups, ts, target)
    notes: list[str] = []
    if axes.batch is None:
        notes.append(
            f"no batch-size axis (a scientific parameter with path {BATCH_PATH}): the S(B) "
            f"fit, B_crit vs target, optimal LR vs batch size and B_simple beside B_crit are "
            f"skipped"
        )
    if axes.lr is None:
        notes.append(
            f"no learning-rate nuisance parameter (path {LR_PATH}): optimal LR per batch "
            f"size and the η*(B) law are skipped"
        )
    if target is None:
        notes.append("no target loss (none in the study and no --target): steps to target skipped")
    elif auto:
        notes.append(
            "targets "
            + ", ".join(f"{t:g}" for t in all_targets)
            + " include automatic ones between the loss every point reaches and the "
            "initial loss; pass --target to choose them"
        )
    if "eval_loss" not in ds:
        notes.append("no eval_loss logged: steps to target cannot be computed")
    if "noise_scale" not in ds:
        notes.append("no noise_scale metric logged: the gradient noise scale is not shown")
    if not (ds["kind"].values == "confirm").any():
        notes.append("no confirm seeds: the spread over seeds is not reported")

    x = _num(ds, axes.x.coord) if axes.x is not None else np.full(ds.sizes["trial"], np.nan)
    fits = []
    for g in dict.fromkeys(groups.tolist()):
        sel = groups == g
        gnotes: list[str] = []
        result = at = None
        error = None
        if axes.batch is not None and target is not None and "eval_loss" in ds:
            result, at, error = _steps_fits(ds, sel, x, ts, target, all_targets, settings)
        elif axes.batch is None and target is not None and axes.x is not None:
            tune = sel & (ds["kind"].values == "tune")
            result = steps_to_result(x[tune], ts.steps[target][tune], ts.horizon[tune])
        opt = law = None
        if axes.lr is not None and axes.batch is not None:
            b_crit = None
            if at is not None and float(target) in at.fits:  # type: ignore[arg-type]
                b_crit = at.fits[float(target)].b_crit  # type: ignore[arg-type]
            try:
                opt, law, lr_notes = _lr_fits(ds, axes, sel, b_crit)
            except ValueError as exc:
                lr_notes = [f"optimal LR not computed: {exc}"]
            gnotes += [n if g == "all" else f"{g}: {n}" for n in lr_notes]
        fits.append(
            GroupFits(
                group=g,
                result=result,
                at_targets=at,
                steps_error=error,
                optimal_lr=opt,
                lr_law=law,
                seeds=_seeds(ds, sel, x, ts, target),
                noise=_noise(ds, sel, best),
                notes=tuple(gnotes),
            )
        )

    abl = None
    if axes.variant is not None:
        rows = (ds["kind"].values == "tune") & np.isin(ds["state"].values, list(FINAL_STATES))
        b = _num(ds, axes.batch.coord) if axes.batch is not None else np.full(rows.size, np.nan)
        abl = ablation_table(
            ds[axes.variant.coord].values[rows].astype(str),
            b[rows],
            usable_objective(ds)[rows],
            ds["trial"].values[rows].tolist(),
            axis=axes.variant.name,
            seed=settings.seed,
            confidence=settings.confidence,
        )
    return StudyAnalysis(
        study=str(ds.attrs.get("study", "")),
        objective_kind=str(ds.attrs.get("objective_kind", "")),
        target=target,
        targets=all_targets,
        auto_targets=auto,
        partial=bool(ds.attrs.get("partial", 0)),
        axes=axes,
        trial_group=groups,
        trial_steps=ts,
        best=best,
        points=points,
        groups=tuple(fits),
        ablation=abl,
        notes=tuple(notes),
        settings=settings,
    )
