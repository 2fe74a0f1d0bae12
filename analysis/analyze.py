"""Every fit of a study from its loaded Dataset (docs/science.md): :func:`analyze` runs them
and returns the typed record of :mod:`stepscale.analysis.study`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
import xarray as xr

from stepscale.analysis.ablation import ablation_table, confirm_claims
from stepscale.analysis.claims import claim_level
from stepscale.analysis.dataset import (
    BATCH_PATH,
    LR_PATH,
    StudyAxes,
    TrialSteps,
    best_trials,
    choose_targets,
    curves,
    cut_levels,
    dataset_batch_unit,
    point_rows,
    study_axes,
    trial_groups,
    trial_steps,
)
from stepscale.analysis.fits.lr import LRLaw, OptimalLR, fit_lr_law, optimal_lr
from stepscale.analysis.fits.seed_part import SeedPart, seed_part
from stepscale.analysis.fits.spread import (
    NoiseScaleSummary,
    SeedSpread,
    noise_scale_summary,
    spread_over_seeds,
)
from stepscale.analysis.fits.steps import StepsToResult, steps_to_result
from stepscale.analysis.fits.targets import BcritAtTargets, bcrit_at_targets
from stepscale.analysis.ladder import LadderAnalysis, analyze_ladder, is_ladder
from stepscale.analysis.load import FINAL_STATES
from stepscale.analysis.study import FitSettings, GroupFits, StudyAnalysis
from stepscale.analysis.verdict import verdict

__all__ = ["DROPPED", "analyze", "usable_objective"]

DROPPED = "automatic target dropped, its S(B) fit is not well-posed: "


def _drop_automatic(at: BcritAtTargets, drop: set[float]) -> BcritAtTargets:
    """``at`` without the automatic targets in ``drop`` that were flagged: they move to
    ``skipped`` with the reason (the law, fitted on well-posed targets only, is unchanged)."""
    gone = [t for t in at.fits if t in drop and t in at.flagged]
    if not gone:
        return at
    skipped = dict(at.skipped)
    for t in gone:
        skipped[t] = DROPPED + at.flagged[t]
    return replace(
        at,
        fits={t: f for t, f in at.fits.items() if t not in gone},
        skipped=dict(sorted(skipped.items())),
        flagged={t: r for t, r in at.flagged.items() if t not in gone},
    )


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
    ids = ds["trial"].values[tune].tolist()
    batch = dict(zip(ids, x[tune].tolist(), strict=True))
    cut = {t: c for t, c in zip(ids, cut_levels(ds)[tune].tolist(), strict=True) if c == c}
    at = bcrit_at_targets(
        cv,
        batch,
        list(targets),
        cut_at=cut,
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
    unit: str,
) -> tuple[OptimalLR | None, LRLaw | None, list[str]]:
    assert axes.lr is not None and axes.batch is not None
    notes: list[str] = []
    rows = sel & (ds["kind"].values == "tune") & np.isin(ds["state"].values, list(FINAL_STATES))
    lr = _num(ds, axes.lr.coord)
    b = _num(ds, axes.batch.coord)
    obj = usable_objective(ds)
    rows &= np.isfinite(lr) & (lr > 0)
    worse = rows & _ended_above_initial_loss(ds, obj)
    if worse.any():
        # Finite but untrained (an LR past the stability edge): fitted, one such point
        # bends the local quadratic past every real trial. Counted as tried, like diverged.
        obj = np.where(worse, np.nan, obj)
        notes.append(
            f"{int(worse.sum())} trial(s) ended with a loss above their initial loss: "
            "treated as diverged for η*"
        )
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
            f"fewer than 2 batch sizes at or below B_crit = {b_crit:.4g} {unit}: η*(B) is "
            f"fitted on all batch sizes"
        )
    elif b_crit is None:
        notes.append("B_crit unknown: η*(B) is fitted on all batch sizes")
    try:
        law = fit_lr_law(opt.batch_sizes, opt.lr_opt, b_max=b_max)
    except ValueError as exc:
        notes.append(f"η*(B) not fitted: {exc}")
    return opt, law, notes


def _seed_part(
    ds: xr.Dataset,
    sel: np.ndarray,
    x: np.ndarray,
    ts: TrialSteps,
    target: float | None,
    at: BcritAtTargets | None,
) -> SeedPart | None:
    """The training seed's part of B_crit's interval at ``target``, from the group's confirm
    seeds (`analysis.fits.seed_part`)."""
    if at is None or target is None or float(target) not in at.fits:
        return None
    seed = ds["seed"].values.astype(float)
    kind = ds["kind"].values
    conf = sel & (kind == "confirm") & np.isfinite(seed)
    tune = sel & (kind == "tune") & np.isfinite(seed)
    if not conf.any() or not tune.any():
        return None
    study_seed = int(np.median(seed[tune]))
    fit = at.fits[float(target)]
    return seed_part(fit, study_seed, x[conf], seed[conf], ts.steps[target][conf])


def _ended_above_initial_loss(ds: xr.Dataset, obj: np.ndarray) -> np.ndarray:
    """Per trial: is its (loss-valued) objective above its eval loss at step 0?"""
    kind = ds.attrs.get("objective_kind")
    if kind not in ("final_eval_loss", "min_eval_loss") or "eval_loss" not in ds:
        return np.zeros(obj.shape, bool)
    steps = ds["step"].values
    if steps.size == 0 or steps[0] != 0:
        return np.zeros(obj.shape, bool)
    initial = ds["eval_loss"].values[:, 0].astype(float)
    with np.errstate(invalid="ignore"):
        return np.isfinite(initial) & (obj > initial)


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
    # the claims between studies test the interpolated crossings (finer than evaluations)
    tested = ts.interp[target][conf] if target is not None else None
    return spread_over_seeds(x[conf], values[conf], tested)


def _dropped_targets(fits: Sequence[GroupFits], droppable: set[float]) -> dict[float, str]:
    """Automatic targets fitted well-posed in no group → the reason (per group when several)."""
    out: dict[float, str] = {}
    ats = [g for g in fits if g.at_targets is not None]
    for t in sorted(droppable):
        if not ats or any(t in g.at_targets.fits for g in ats):  # type: ignore[union-attr]
            continue
        reasons = []
        for g in ats:
            r = g.at_targets.skipped.get(t, "")  # type: ignore[union-attr]
            r = r[len(DROPPED) :] if r.startswith(DROPPED) else r
            reasons.append(r if len(ats) == 1 else f"{g.group}: {r}")
        out[t] = "; ".join(reasons)
    return out


def _targets_note(auto: Sequence[float], dropped: Mapping[float, str]) -> str:
    kept = [t for t in auto if t not in dropped]
    text = (
        "automatic targets (between the loss every point reaches and the initial loss; "
        "pass --target to choose your own): "
    )
    text += ", ".join(f"{t:g}" for t in kept) + " kept" if kept else "none kept"
    if dropped:
        text += (
            "; "
            + ", ".join(f"{t:g}" for t in sorted(dropped))
            + " dropped because their S(B) fit is not well-posed (reasons under B_crit vs "
            "target loss and in fits.json)"
        )
    return text


def _ladder(ds: xr.Dataset, settings: FitSettings, notes: list[str]) -> LadderAnalysis | None:
    """The ladder's laws and held-out check when the study is a ladder (else None); a
    ladder without enough finished rungs gets a note instead."""
    if not is_ladder(ds):
        return None
    try:
        return analyze_ladder(
            ds, n_boot=settings.n_boot, seed=settings.seed, confidence=settings.confidence
        )
    except ValueError as exc:
        notes.append(f"ladder laws not computed: {exc}")
        return None


def analyze(
    ds: xr.Dataset, targets: Sequence[float] = (), settings: FitSettings | None = None
) -> StudyAnalysis:
    """Run every fit the study supports; see the module docstring."""
    settings = settings or FitSettings()
    unit = dataset_batch_unit(ds)
    axes = study_axes(ds)
    groups = trial_groups(ds, axes)
    target, all_targets, auto = choose_targets(ds, axes, targets)
    ts = trial_steps(ds, all_targets)
    best = best_trials(ds)
    points = point_rows(ds, axes, groups, ts, target)
    notes: list[str] = []
    if axes.batch is None:
        notes.append(
            f"no batch-size axis (a scientific parameter with path {BATCH_PATH}, or "
            "quantity: batch_size on a trainer's own key): the S(B) "
            f"fit, B_crit vs target, optimal LR vs batch size and B_simple beside B_crit are "
            f"skipped"
        )
    if axes.lr is None:
        notes.append(
            f"no learning-rate nuisance parameter (path {LR_PATH}, or quantity: "
            "learning_rate): optimal LR per batch "
            f"size and the η*(B) law are skipped"
        )
    if target is None:
        notes.append("no target loss (none in the study and no --target): steps to target skipped")
    cut = cut_levels(ds)
    cut_at = tuple(sorted(set(cut[np.isfinite(cut)].tolist())))
    n_cut = int(np.isfinite(cut).sum())
    if n_cut:
        levels = ", ".join(f"{c:g}" for c in cut_at)
        notes.append(
            f"curves cut at the target: {n_cut} of {ds.sizes['trial']} trials were stopped on "
            f"reaching eval loss {levels} (stop_at_target), so their eval-loss curves end at "
            f"their first evaluation below it. Steps to a harder target (below {min(cut_at):g}) "
            f"cannot be measured on them; B_crit vs target can only use easier targets, which "
            f"the runs reach after few evaluations"
        )
    target_note = len(notes)
    if "eval_loss" not in ds:
        notes.append("no eval_loss logged: steps to target cannot be computed")
    if "noise_scale" not in ds:
        notes.append("no noise_scale metric logged: the gradient noise scale is not shown")
    if not (ds["kind"].values == "confirm").any():
        notes.append("no confirm seeds: the spread over seeds is not reported")

    x = _num(ds, axes.x.coord) if axes.x is not None else np.full(ds.sizes["trial"], np.nan)
    fits = []
    droppable = {t for t in auto if t != target}
    for g in dict.fromkeys(groups.tolist()):
        sel = groups == g
        gnotes: list[str] = []
        result = at = None
        error = None
        if axes.batch is not None and target is not None and "eval_loss" in ds:
            result, at, error = _steps_fits(ds, sel, x, ts, target, all_targets, settings)
            if at is not None:
                at = _drop_automatic(at, droppable)
        elif axes.batch is None and target is not None and axes.x is not None:
            tune = sel & (ds["kind"].values == "tune")
            if (x[tune] > 0).all():  # steps to result is tabulated on a positive axis
                result = steps_to_result(x[tune], ts.steps[target][tune], ts.horizon[tune])
        opt = law = None
        if axes.lr is not None and axes.batch is not None:
            b_crit = None
            if at is not None and float(target) in at.fits:  # type: ignore[arg-type]
                b_crit = at.fits[float(target)].b_crit  # type: ignore[arg-type]
            try:
                opt, law, lr_notes = _lr_fits(ds, axes, sel, b_crit, unit)
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
                seed_part=_seed_part(ds, sel, x, ts, target, at),
            )
        )

    dropped = _dropped_targets(fits, droppable)
    kept = tuple(t for t in all_targets if t not in dropped)
    if auto:
        notes.insert(target_note, _targets_note(auto, dropped))

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
        confirm = (ds["kind"].values == "confirm") & np.isin(ds["state"].values, list(FINAL_STATES))
        if confirm.any():  # the claims: best tuned variant vs each other, on the confirm seeds
            steps = str(ds.attrs.get("objective_kind", "")) == "steps_to_target"
            # steps where the eval loss crossed the target (NaN: never), not the objective,
            # whose penalty for a seed that never reached it is no number of steps
            steps = steps and "steps_to_target_interp" in ds.coords
            values = (
                np.asarray(ds["steps_to_target_interp"].values, dtype=float)
                if steps
                else usable_objective(ds)
            )
            abl = confirm_claims(
                abl,
                ds[axes.variant.coord].values[confirm].astype(str),
                b[confirm],
                values[confirm],
                what="steps" if steps else str(ds.attrs.get("objective_kind", "objective")),
                unit="steps" if steps else "",
                level=claim_level(ds.attrs),
            )
    ladder = _ladder(ds, settings, notes)
    return StudyAnalysis(
        study=str(ds.attrs.get("study", "")),
        objective_kind=str(ds.attrs.get("objective_kind", "")),
        target=target,
        targets=kept,
        auto_targets=bool(auto),
        automatic=auto,
        dropped=dropped,
        cut_at=cut_at,
        n_cut=n_cut,
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
        batch_unit=unit,
        learning=verdict(ds),
        ladder=ladder,
    )
