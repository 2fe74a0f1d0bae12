"""B_crit at other targets: first crossings recomputed from stored eval-loss curves, which
targets are well posed, S(B) refitted per target, and Kaplan et al. 2020's law
B_crit(L) = B*/L^(1/α_B) across targets.

Every fit is a pure function of arrays and returns a frozen dataclass whose ``to_dict()``
holds JSON-ready values (non-finite floats become ``None``).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from stepscale.analysis.fits.arrays import batch_json, floats
from stepscale.analysis.fits.records import BATCH, OMIT, Record
from stepscale.analysis.fits.steps import (
    BCRIT_MARGIN,
    StepsFit,
    StepsToResult,
    fit_steps,
    steps_to_result,
)
from stepscale.analysis.fits.student_t import t_quantile
from stepscale.rundir import interpolated_crossing

# ------------------------------------------------------------ B_crit vs target (Kaplan)


@dataclass(frozen=True)
class BcritTargetLaw(Record):
    """Fit of B_crit(L) = B*/L^(1/α_B) in log space (Kaplan et al. 2020).

    ``slope`` is d log B_crit / d log L = −1/α_B, with a t-interval ``slope_ci``
    (NaN with only two targets).
    """

    b_star: float
    alpha_b: float
    slope: float
    slope_ci: tuple[float, float]
    targets: tuple[float, ...]
    b_crits: tuple[float, ...]
    residuals: tuple[float, ...]
    n_points: int

    def predict(self, target: ArrayLike) -> np.ndarray:
        """B_crit at the given targets."""
        return self.b_star * np.power(floats(target, "target"), self.slope)


def fit_bcrit_vs_target(
    targets: ArrayLike, b_crits: ArrayLike, *, confidence: float = 0.95
) -> BcritTargetLaw:
    """Fit B_crit(L) = B*/L^(1/α_B) by least squares of log B_crit on log L.

    Needs at least two distinct positive targets with finite positive B_crit; non-finite
    entries are skipped.
    """
    t = floats(targets, "targets")
    bc = floats(b_crits, "b_crits")
    if t.shape != bc.shape:
        raise ValueError(f"targets and b_crits differ in length: {t.size} vs {bc.size}")
    ok = np.isfinite(t) & np.isfinite(bc) & (t > 0) & (bc > 0)
    t, bc = t[ok], bc[ok]
    if np.unique(t).size < 2:
        raise ValueError(
            f"fitting B_crit(L) needs at least 2 distinct positive targets with a finite "
            f"B_crit; got {t.tolist()}"
        )
    lx, ly = np.log(t), np.log(bc)
    slope, intercept = np.polyfit(lx, ly, 1)
    resid = ly - (intercept + slope * lx)
    n = lx.size
    if n > 2:
        se = math.sqrt((resid**2).sum() / (n - 2) / ((lx - lx.mean()) ** 2).sum())
        q = t_quantile(0.5 + confidence / 2, n - 2)
        ci = (float(slope - q * se), float(slope + q * se))
    else:
        ci = (math.nan, math.nan)
    return BcritTargetLaw(
        b_star=math.exp(intercept),
        alpha_b=-1.0 / slope if slope != 0 else math.inf,
        slope=float(slope),
        slope_ci=ci,
        targets=tuple(float(v) for v in t),
        b_crits=tuple(float(v) for v in bc),
        residuals=tuple(float(v) for v in resid),
        n_points=n,
    )


# ----------------------------------------------------- steps to target from stored curves


def first_crossing(steps: ArrayLike, loss: ArrayLike, target: float) -> tuple[float, float]:
    """First evaluated step with loss strictly below ``target``, and the interpolated one.

    The interpolated crossing treats log(loss) as linear in step between the previous
    evaluation and the first one below target (`stepscale.rundir.interpolated_crossing`,
    the trainer's formula); with no previous evaluation it is the crossing step itself. Non-finite
    losses are skipped. Returns (nan, nan) when the target is never reached.
    """
    st = floats(steps, "steps")
    lo = floats(loss, "loss")
    if st.shape != lo.shape:
        raise ValueError(f"steps and loss differ in length: {st.size} vs {lo.size}")
    keep = np.isfinite(st) & np.isfinite(lo)
    st, lo = st[keep], lo[keep]
    order = np.argsort(st, kind="stable")
    st, lo = st[order], lo[order]
    below = np.flatnonzero(lo < target)
    if below.size == 0:
        return (math.nan, math.nan)
    i = int(below[0])
    s1 = float(st[i])
    if i == 0:
        return (s1, s1)
    return (s1, interpolated_crossing(float(st[i - 1]), float(lo[i - 1]), s1, float(lo[i]), target))


@dataclass(frozen=True)
class CurveSteps(Record):
    """Steps to a target recomputed per trial from stored eval-loss curves.

    ``steps`` is the first evaluated step strictly below target, ``steps_interp`` the
    log-linear interpolated crossing (both NaN if not reached); ``horizon`` is the last
    evaluated step of each trial (a trial that did not reach the target is censored there).
    """

    target: float
    trials: tuple[Hashable, ...]
    batch: tuple[float, ...] = field(metadata=BATCH)
    steps: tuple[float, ...]
    steps_interp: tuple[float, ...]
    horizon: tuple[float, ...]

    def result(self, interpolated: bool = False) -> StepsToResult:
        """Steps to result per batch size from these trials."""
        s = self.steps_interp if interpolated else self.steps
        return steps_to_result(self.batch, s, self.horizon)

    def _json(self, fields: dict[str, Any]) -> dict[str, Any]:
        """Trials by their text."""
        return fields | {"trials": [str(t) for t in self.trials]}


def steps_at_target(
    curves: Mapping[Hashable, tuple[ArrayLike, ArrayLike]],
    batch: Mapping[Hashable, float],
    target: float,
) -> CurveSteps:
    """Recompute each trial's steps to ``target`` from its eval-loss curve.

    ``curves`` maps trial → (steps, eval losses); ``batch`` maps trial → batch size.
    Trials are reported in sorted order (by their string form).
    """
    missing = [t for t in curves if t not in batch]
    if missing:
        raise ValueError(f"no batch size given for trials {[str(t) for t in missing][:5]}")
    trials = sorted(curves, key=str)
    out_s, out_i, out_h, out_b = [], [], [], []
    for trial in trials:
        st, lo = curves[trial]
        first, interp = first_crossing(st, lo, target)
        stf = floats(st, "steps")
        fin = stf[np.isfinite(stf)]
        out_s.append(first)
        out_i.append(interp)
        out_h.append(float(fin.max()) if fin.size else math.nan)
        out_b.append(float(batch[trial]))
    return CurveSteps(
        target=float(target),
        trials=tuple(trials),
        batch=tuple(out_b),
        steps=tuple(out_s),
        steps_interp=tuple(out_i),
        horizon=tuple(out_h),
    )


@dataclass(frozen=True)
class BcritAtTargets(Record):
    """S(B) fits redone at several targets from stored curves, and B_crit(L) across them.

    ``fits`` maps each target to its fit; ``skipped`` maps targets that could not be
    fitted to the reason. ``flagged`` maps fitted targets whose S(B) fit is not
    well-posed (see :func:`target_problems`) to the reason: they stay in ``fits`` but are
    left out of ``law``, which is fitted on the well-posed targets only and is None with
    fewer than ``min_law_targets`` of them (``law_note`` says why).
    """

    fits: Mapping[float, StepsFit]
    skipped: Mapping[float, str]
    law: BcritTargetLaw | None
    flagged: Mapping[float, str] = field(default_factory=dict, metadata=OMIT)
    law_note: str | None = None

    @property
    def well_posed(self) -> tuple[float, ...]:
        """The fitted targets whose fit is well-posed, ascending."""
        return tuple(t for t in self.fits if t not in self.flagged)

    def _json(self, fields: dict[str, Any]) -> dict[str, Any]:
        """Each fit with its target and whether it is well-posed; the skipped targets as
        rows (target, reason)."""
        fits = [
            {"target": t, "well_posed": t not in self.flagged, "problem": self.flagged.get(t)}
            | f.to_dict()
            for t, f in self.fits.items()
        ]
        skipped = [{"target": t, "reason": r} for t, r in self.skipped.items()]
        return fields | {"fits": fits, "skipped": skipped}


def _last_loss(curve: tuple[ArrayLike, ArrayLike]) -> float:
    st, lo = floats(curve[0], "steps"), floats(curve[1], "loss")
    ok = np.isfinite(st) & np.isfinite(lo)
    return float(lo[ok][np.argmax(st[ok])]) if ok.any() else math.nan


def _cut_problem(
    curves: Mapping[Hashable, tuple[ArrayLike, ArrayLike]],
    cut_at: Mapping[Hashable, float],
    target: float,
) -> str | None:
    """Why steps to ``target`` are unknown for trials whose curves were cut, or None.

    A trial stopped on reaching loss c (``cut_at[trial] = c``) has no evaluation after
    the first one below c; for a harder target L < c its steps to L are unknown (not
    censored) unless that last evaluation is already below L.
    """
    unknown = [
        c
        for t, c in cut_at.items()
        if t in curves and math.isfinite(c) and target < c and not _last_loss(curves[t]) < target
    ]
    if not unknown:
        return None
    levels = ", ".join(f"{c:g}" for c in sorted(set(unknown)))
    return (
        f"harder than the loss {levels} at which {len(unknown)} trial(s) were stopped "
        f"(stop_at_target): their eval-loss curves end there, so their steps to {target:g} "
        f"are unknown, not censored"
    )


def _evals_to_result(
    curves: Mapping[Hashable, tuple[ArrayLike, ArrayLike]],
    cs: CurveSteps,
    batch_size: float,
) -> float:
    """At one batch size, how many evaluation intervals the steps to result span:
    s / (s − previous evaluated step) of its fastest trial (largest over ties)."""
    rows = [i for i, b in enumerate(cs.batch) if b == batch_size and math.isfinite(cs.steps[i])]
    if not rows:
        return math.nan
    best = min(cs.steps[i] for i in rows)
    out = math.nan
    for i in rows:
        s = cs.steps[i]
        if s != best:
            continue
        st = floats(curves[cs.trials[i]][0], "steps")
        lo = floats(curves[cs.trials[i]][1], "loss")
        before = st[np.isfinite(st) & np.isfinite(lo) & (st < s)]
        prev = float(before.max()) if before.size else 0.0
        k = s / (s - prev) if s > prev else math.nan
        out = k if not math.isfinite(out) else max(out, k)
    return out


def target_problems(
    curves: Mapping[Hashable, tuple[ArrayLike, ArrayLike]],
    cs: CurveSteps,
    fit: StepsFit,
    *,
    cut_at: Mapping[Hashable, float] | None = None,
    min_evals: int = 3,
    max_ci_ratio: float = 10.0,
) -> tuple[str, ...]:
    """Why the S(B) fit at ``cs.target`` is not well-posed (empty when it is).

    - curves cut at an easier loss (``cut_at``, trial → loss it was stopped at): steps to
      this harder target are unknown for those trials;
    - fewer than 3 batch sizes reach the target after ``min_evals`` evaluation intervals
      or more: steps measured at the first evaluations are quantised by the evaluation
      interval (reached at the 1st evaluation: anywhere between 0 and that step), so
      they cannot resolve S(B);
    - B_crit at the bound of the fit (S(B) flat, or ∝ 1/B, over the batch sizes);
    - a bootstrap interval of B_crit spanning more than a factor ``max_ci_ratio``.
    """
    out: list[str] = []
    if cut_at:
        cut = _cut_problem(curves, cut_at, cs.target)
        if cut is not None:
            out.append(cut)
    evals = [_evals_to_result(curves, cs, b) for b in fit.batch_sizes]
    resolved = sum(1 for k in evals if k >= min_evals - 1e-9)
    if resolved < 3:
        early = [
            batch_json(b)
            for b, k in zip(fit.batch_sizes, evals, strict=True)
            if not k >= min_evals - 1e-9
        ]
        out.append(
            f"reached within the first {min_evals - 1} evaluations at {len(early)} of "
            f"{len(evals)} batch sizes ({early}; at most {max(fit.steps):g} steps): the "
            f"evaluation interval does not resolve S(B) (needs 3 batch sizes reaching it "
            f"at evaluation {min_evals} or later)"
        )
    x = np.log(np.asarray(fit.batch_sizes))
    lb = math.log(fit.b_crit)
    if lb <= x.min() - BCRIT_MARGIN + 1e-6 or lb >= x.max() + BCRIT_MARGIN - 1e-6:
        flat = lb <= x.min() - BCRIT_MARGIN + 1e-6
        out.append(
            f"B_crit is not identified: the fit hit its bound {fit.b_crit:.3g} (S(B) is "
            f"{'flat' if flat else 'proportional to 1/B'} over the batch sizes)"
        )
    else:
        lo, hi = fit.b_crit_ci
        if math.isfinite(lo) and math.isfinite(hi) and lo > 0 and hi / lo > max_ci_ratio:
            out.append(
                f"B_crit = {fit.b_crit:.4g} is poorly determined: its {fit.confidence:.0%} "
                f"interval [{lo:.3g}, {hi:.3g}] spans a factor {hi / lo:.3g} "
                f"(more than {max_ci_ratio:g})"
            )
    return tuple(out)


def bcrit_at_targets(
    curves: Mapping[Hashable, tuple[ArrayLike, ArrayLike]],
    batch: Mapping[Hashable, float],
    targets: Sequence[float],
    *,
    interpolated: bool = False,
    cut_at: Mapping[Hashable, float] | None = None,
    min_evals: int = 3,
    max_ci_ratio: float = 10.0,
    min_law_targets: int = 3,
    **fit_kwargs: Any,
) -> BcritAtTargets:
    """Fit S(B) at each target from stored curves, then B_crit(L) (Kaplan et al. 2020).

    ``fit_kwargs`` go to :func:`fit_steps`. A target with too few batch sizes reaching
    it is recorded in ``skipped`` rather than failing the whole call. A fitted target
    whose fit is not well-posed (:func:`target_problems`, with ``cut_at``,
    ``min_evals`` and ``max_ci_ratio``) is recorded in ``flagged`` and left out of the
    law, which needs ``min_law_targets`` well-posed targets (3: with 2 the line through
    them has no residual and no interval).
    """
    fits: dict[float, StepsFit] = {}
    skipped: dict[float, str] = {}
    flagged: dict[float, str] = {}
    for target in sorted(float(t) for t in targets):
        cs = steps_at_target(curves, batch, target)
        res = cs.result(interpolated)
        try:
            fit = fit_steps(
                res.batch_sizes,
                res.steps,
                not_reached=dict(zip(res.not_reached, res.censored_at, strict=True)),
                **fit_kwargs,
            )
        except ValueError as exc:
            cut = _cut_problem(curves, cut_at, target) if cut_at else None
            skipped[target] = str(exc) if cut is None else f"{cut}; {exc}"
            continue
        fits[target] = fit
        problems = target_problems(
            curves, cs, fit, cut_at=cut_at, min_evals=min_evals, max_ci_ratio=max_ci_ratio
        )
        if problems:
            flagged[target] = "; ".join(problems)
    good = [t for t in fits if t not in flagged]
    law = None
    note = None
    if len(good) >= max(min_law_targets, 2):
        law = fit_bcrit_vs_target(good, [fits[t].b_crit for t in good])
    elif fits:
        have = ", ".join(f"{t:g}" for t in good) or "none"
        note = (
            f"B_crit(L) not fitted: it needs at least {max(min_law_targets, 2)} targets with "
            f"a well-posed S(B) fit; {len(good)} here ({have})"
        )
    return BcritAtTargets(fits=fits, skipped=skipped, law=law, flagged=flagged, law_note=note)
