"""The study's headline: the one answer a user looks for first, and whether it is determined.

- A batch-size study with a target loss: B_crit at the target from the S(B) fit, with its
  interval, per group of trials;
- any other study: the objective's best per point (and the point where it is lowest).

Before either, the headline says whether the study trained at all (analysis.verdict): a
study whose best trial did not beat the task's baseline by a clear margin answers
**"not trained"** with those numbers, and no B_crit or best objective.

Every headline says what it rests on (points, trials) and whether it is **determined**.
A fit is *not determined* when it rests on fewer than :data:`MIN_POINTS` points, or when
its interval is too wide to say anything: for a scale such as B_crit, an interval whose
upper / lower end exceeds :data:`MAX_CI_FACTOR`; for an exponent such as α of
η*(B) = c·B^α, an interval wider than :data:`MAX_EXPONENT_WIDTH` (it then cannot tell the
constant rule α = 0 from the linear rule α = 1); a missing interval counts as too wide.
Such a fit is labelled "not determined" wherever it appears (report text and tables,
figures draw no line for it, the end of `sweep run`) and never shown as a result.

Pure functions of :class:`analysis.study.StudyAnalysis` (docs/report.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from stepscale.analysis.fits.lr import LRLaw
from stepscale.analysis.fits.powerlaw import PowerLaw
from stepscale.analysis.fits.records import OMIT, Record, as_json, insert_before
from stepscale.analysis.fits.seed_part import SEED_SETTLED, SeedPart
from stepscale.analysis.fits.steps import StepsFit
from stepscale.analysis.fits.student_t import t_quantile
from stepscale.analysis.ladder import LadderAnalysis
from stepscale.analysis.study import GroupFits, StudyAnalysis
from stepscale.analysis.verdict import Verdict

__all__ = [
    "LAW_SYMBOLS",
    "MAX_CI_FACTOR",
    "MAX_EXPONENT_WIDTH",
    "MIN_POINTS",
    "NOT_DETERMINED",
    "Determination",
    "GroupHeadline",
    "Headline",
    "answer_lines",
    "exponent_determination",
    "headline",
    "interval_text",
    "ladder_laws_line",
    "ladder_rungs_line",
    "law_determination",
    "lr_law_determination",
    "saturating_determination",
    "scale_determination",
    "sig",
    "steps_fit_determination",
]

MIN_POINTS = 3  # a fit on fewer points has no residual left to judge it by
MAX_CI_FACTOR = 10.0  # upper / lower end of a scale's interval (B_crit, S_min …)
MAX_EXPONENT_WIDTH = 1.0  # upper − lower end of an exponent's interval (α of η*(B))
NOT_DETERMINED = "not determined"


def sig(x: Any, digits: int = 3) -> str:
    """``x`` with ``digits`` significant figures ("—" when not a finite number): the one
    way the report, the headline and `sweep run` write measured and fitted numbers."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        try:
            x = float(x)
        except (TypeError, ValueError):
            return "—"
    f = float(x)
    if not math.isfinite(f):
        return "—"
    if 1e3 <= abs(f) < 1e6:  # 2,760 rather than 2.76e+03
        return f"{float(f'{f:.{digits}g}'):,.0f}"
    return f"{f:.{digits}g}"


@dataclass(frozen=True)
class Determination:
    """Whether a fit is determined; ``reason`` says why not ("" when it is)."""

    determined: bool
    reason: str = ""

    @property
    def label(self) -> str:
        """ "determined" or "not determined (<reason>)"."""
        return "determined" if self.determined else f"{NOT_DETERMINED} ({self.reason})"


def _few(n_points: int) -> str | None:
    if n_points < MIN_POINTS:
        return f"rests on {n_points} point{'s' if n_points != 1 else ''}, fewer than {MIN_POINTS}"
    return None


def scale_determination(n_points: int, ci: Sequence[float]) -> Determination:
    """A positive quantity (B_crit …) with interval ``ci`` fitted on ``n_points`` points."""
    few = _few(n_points)
    if few:
        return Determination(False, few)
    lo, hi = float(ci[0]), float(ci[1])
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo <= 0:
        return Determination(False, "its interval is unbounded")
    if hi / lo > MAX_CI_FACTOR:
        return Determination(
            False,
            f"its interval [{sig(lo)}, {sig(hi)}] spans a factor {sig(hi / lo, 2)}, more than "
            f"{MAX_CI_FACTOR:g}",
        )
    if hi <= lo * (1 + 1e-9):
        # Every resampled fit gave the same value (e.g. 3 points and no residual left):
        # the bootstrap has not measured the uncertainty, whatever it is.
        return Determination(False, f"its interval [{sig(lo)}, {sig(hi)}] has no width")
    return Determination(True)


def exponent_determination(n_points: int, ci: Sequence[float]) -> Determination:
    """An exponent (α …) with interval ``ci`` fitted on ``n_points`` points."""
    few = _few(n_points)
    if few:
        return Determination(False, few)
    lo, hi = float(ci[0]), float(ci[1])
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return Determination(False, "its interval is unbounded")
    if hi - lo > MAX_EXPONENT_WIDTH:
        return Determination(
            False,
            f"its interval [{sig(lo, 2)}, {sig(hi, 2)}] is wider than {MAX_EXPONENT_WIDTH:g}",
        )
    return Determination(True)


def steps_fit_determination(fit: StepsFit) -> Determination:
    """Is B_crit of an S(B) fit determined? Besides its interval, B_crit must not lie wholly
    outside the batch sizes measured: a B_crit far below the smallest (or above the
    largest) is an extrapolation of the fit's form, not a measurement."""
    det = scale_determination(fit.n_points, fit.b_crit_ci)
    sizes = [b for b in fit.batch_sizes if math.isfinite(b) and b > 0]
    if not det.determined or not sizes:
        return det
    lo, hi = float(fit.b_crit_ci[0]), float(fit.b_crit_ci[1])
    if hi < min(sizes) or lo > max(sizes):
        return Determination(
            False,
            f"B_crit's interval [{sig(lo)}, {sig(hi)}] lies outside the batch sizes measured "
            f"({sig(min(sizes))}–{sig(max(sizes))})",
        )
    return det


def lr_law_determination(law: LRLaw) -> Determination:
    """Is α of η*(B) = c·B^α determined?"""
    return exponent_determination(law.n_points, law.alpha_ci)


def saturating_determination(law: LRLaw, batch_sizes: Sequence[float] = ()) -> Determination:
    """Is B_noise of the saturating form ε_max/(1 + B_noise/B) determined? It has no
    interval, so it counts only when identified, on at least :data:`MIN_POINTS` batch sizes,
    with B_noise inside the measured ``batch_sizes`` (default: those of the power law;
    outside them no bend is measured)."""
    sat = law.saturating
    if sat is None or not sat.identified:
        return Determination(False, "no bend in η*(B) over the batch sizes")
    few = _few(sat.n_points)
    if few:
        return Determination(False, few)
    sizes = tuple(batch_sizes) or law.batch_sizes
    lo, hi = min(sizes), max(sizes)
    if not lo <= sat.b_noise <= hi:
        return Determination(
            False,
            f"B_noise = {sig(sat.b_noise)} lies outside the batch sizes {sig(lo)}–{sig(hi)}",
        )
    return Determination(True)


@dataclass(frozen=True)
class GroupHeadline(Record):
    """The answer of one group of trials (``all`` when there is one group).

    ``value``/``ci`` are B_crit and its interval (kind ``b_crit``), or the lowest best
    objective over the points (kind ``objective``, with ``best_point`` and ``per_point``).
    """

    group: str
    value: float
    ci: tuple[float, float]
    n_points: int
    n_trials: int
    determination: Determination = field(metadata=OMIT)
    best_point: str = ""
    per_point: tuple[tuple[str, float], ...] = ()
    warnings: tuple[str, ...] = ()
    # B_crit at the study's other targets whose S(B) fit is well-posed and determined:
    # (target, B_crit, low, high), hardest target first
    at_targets: tuple[tuple[float, float, float, float], ...] = ()
    # the training seed's part (analysis.fits.seed_part; None: not measured): ``ci`` is then
    # the fit's own interval (``fit_ci``) and the seed's, joined
    fit_ci: tuple[float, float] | None = None
    seed_part: SeedPart | None = None

    def _json(self, fields: dict[str, Any]) -> dict[str, Any]:
        """Determined and why not before the best point (empty texts as null); the per-point
        and per-target answers as rows."""
        det = self.determination
        fields = insert_before(
            fields, "best_point", {"determined": det.determined, "reason": det.reason or None}
        )
        return fields | {
            "best_point": self.best_point or None,
            "per_point": [{"point": p, "best": v} for p, v in self.per_point],
            "at_targets": [
                {"target": t, "b_crit": v, "ci": (lo, hi)} for t, v, lo, hi in self.at_targets
            ],
        }


@dataclass(frozen=True)
class Headline(Record):
    """The study's answer: ``kind`` is ``b_crit`` or ``objective``."""

    study: str
    kind: str
    target: float | None
    batch_unit: str
    objective_kind: str = field(metadata=as_json("objective"))
    partial: bool
    groups: tuple[GroupHeadline, ...]
    learning: Verdict = field(default_factory=lambda: Verdict(()), metadata=OMIT)

    @property
    def trained(self) -> bool:
        """False only when the verdict is "not trained" (unknown counts as trained)."""
        return self.learning.trained is not False

    @property
    def determined(self) -> bool:
        """The study trained and every group's answer is determined."""
        return (
            self.trained
            and bool(self.groups)
            and all(g.determination.determined for g in self.groups)
        )

    def group_text(self, g: GroupHeadline) -> str:
        """One line: the answer of group ``g`` (or "not determined" and why) and its basis."""
        prefix = "" if g.group == "all" else f"{g.group}: "
        trials = f"{g.n_trials} trial{'s' if g.n_trials != 1 else ''}"
        if self.kind == "b_crit":
            basis = f"rests on {g.n_points} batch sizes reaching the target, {trials}"
            at = f" at eval loss < {self.target:g}" if self.target is not None else ""
            if not g.determination.determined:
                return f"{prefix}B_crit{at}: {NOT_DETERMINED} — {g.determination.reason} ({basis})"
            lo, hi = g.ci
            seed = f", {g.seed_part.text()}" if g.seed_part is not None else ""
            return (
                f"{prefix}B_crit{at} = {sig(g.value)} {self.batch_unit} "
                f"(95% interval {sig(lo)}–{sig(hi)}{seed}; {basis})"
            )
        basis = f"rests on {g.n_points} points, {trials}"
        if not g.determination.determined:
            return f"{prefix}best objective: {NOT_DETERMINED} — {g.determination.reason} ({basis})"
        return (
            f"{prefix}best {self.objective_kind or 'objective'} = {sig(g.value)} at "
            f"{g.best_point} ({basis})"
        )

    def lines(self) -> list[str]:
        """The headline as text lines: the verdict, then the answer per group (per point too
        for objective studies); only the verdict and the points when it did not train."""
        if not self.trained:
            out = [self.learning.line()]
            out += [f"  {p.point}: {p.text()}" for p in self.learning.points]
        elif not self.groups:
            out = ["no answer yet: no point has a finished trial with a usable objective"]
        else:
            out = [self.group_text(g) for g in self.groups]
        if self.partial:
            out[0] = "PARTIAL (the study is still running): " + out[0]
        if not self.trained:
            return out
        if self.kind == "objective":
            for g in self.groups:
                pre = "" if g.group == "all" else f"{g.group}: "
                out += [f"  {pre}{p}: best {sig(v)}" for p, v in g.per_point]
        for g in self.groups:
            if g.at_targets:
                pre = "" if g.group == "all" else f"{g.group}: "
                parts = [
                    f"< {t:g}: {sig(v)} ({sig(lo)}–{sig(hi)})" for t, v, lo, hi in g.at_targets
                ]
                out.append(f"  {pre}B_crit at other targets: {'; '.join(parts)}")
        if self.kind == "b_crit":
            out += [line for g in self.groups if (line := _seed_line(g))]
        if self.learning.points:
            out.append(self.learning.line())
        return out

    def _json(self, fields: dict[str, Any]) -> dict[str, Any]:
        """Determined and the verdict before the groups; the rules of "determined" last."""
        fields = insert_before(
            fields, "groups", {"determined": self.determined, "trained": self.learning}
        )
        return fields | {
            "rules": {
                "min_points": MIN_POINTS,
                "max_ci_factor": MAX_CI_FACTOR,
                "max_exponent_width": MAX_EXPONENT_WIDTH,
            }
        }


def _group_trials(a: StudyAnalysis, group: str) -> int:
    return sum(p.n_tune for p in a.points if p.group == group)


def _other_targets(
    g: GroupFits, primary: float | None
) -> tuple[tuple[float, float, float, float], ...]:
    """B_crit at the group's other well-posed, determined targets (hardest first)."""
    if g.at_targets is None:
        return ()
    out = []
    for t in g.at_targets.well_posed:
        fit = g.at_targets.fits[t]
        if t == primary or not steps_fit_determination(fit).determined:
            continue
        out.append((float(t), float(fit.b_crit), float(fit.b_crit_ci[0]), float(fit.b_crit_ci[1])))
    return tuple(out)


def _seed_line(g: GroupHeadline) -> str:
    """A line when the answer is not settled across training seeds (docs/report.md)."""
    if not g.determination.determined or g.seed_part is None or g.seed_part.settled:
        return ""
    pre = "" if g.group == "all" else f"{g.group}: "
    part = g.seed_part
    at = ", ".join(f"{sig(b)} at seed {k}" for k, b in zip(part.seeds, part.b_crits, strict=True))
    return (
        f"  {pre}NOT SETTLED ACROSS SEEDS: another training seed may move B_crit ×/÷ "
        f"{part.factor:.2f} (more than {SEED_SETTLED:g}; {at}); the interval includes it"
    )


def headline(a: StudyAnalysis) -> Headline:
    """The headline of a study's analysis (see the module docstring)."""
    groups: list[GroupHeadline] = []
    kind = "b_crit" if a.axes.batch is not None and a.target is not None else "objective"
    if kind == "b_crit":
        for g in a.groups:
            n_trials = _group_trials(a, g.group)
            fit = g.fit_at(a.target)
            if fit is None:
                reached = 0 if g.result is None else len(g.result.batch_sizes)
                why = g.steps_error or "no S(B) fit"
                groups.append(
                    GroupHeadline(
                        g.group,
                        math.nan,
                        (math.nan, math.nan),
                        reached,
                        n_trials,
                        Determination(False, f"S(B) not fitted: {why}"),
                    )
                )
                continue
            problem = g.problem_at(a.target)
            fit_ci = (float(fit.b_crit_ci[0]), float(fit.b_crit_ci[1]))
            part = g.seed_part
            groups.append(
                GroupHeadline(
                    g.group,
                    fit.b_crit,
                    part.joint_ci if part is not None else fit_ci,
                    fit.n_points,
                    n_trials,
                    steps_fit_determination(fit),
                    warnings=tuple(fit.warnings) + ((problem,) if problem else ()),
                    at_targets=_other_targets(g, a.target),
                    fit_ci=fit_ci,
                    seed_part=part,
                )
            )
    else:
        names = dict.fromkeys(p.group for p in a.points)
        for name in names:
            rows = [p for p in a.points if p.group == name]
            per = tuple((p.point, float(p.best_objective)) for p in rows)
            done = [(p, v) for p, v in per if math.isfinite(v)]
            n_trials = sum(p.n_tune for p in rows)
            if not done:
                det = Determination(False, "no point has a finished trial with a usable objective")
                groups.append(
                    GroupHeadline(name, math.nan, (math.nan, math.nan), 0, n_trials, det, "", per)
                )
                continue
            best_p, best_v = min(done, key=lambda pv: pv[1])
            missing = [p for p, v in per if not math.isfinite(v)]
            warn = (f"no usable objective at {', '.join(missing)}",) if missing else ()
            groups.append(
                GroupHeadline(
                    name,
                    best_v,
                    (math.nan, math.nan),
                    len(done),
                    n_trials,
                    Determination(True),
                    best_p,
                    per,
                    warn,
                )
            )
    return Headline(
        study=a.study,
        kind=kind,
        target=a.target,
        batch_unit=a.batch_unit,
        objective_kind=a.objective_kind,
        partial=a.partial,
        groups=tuple(groups),
        learning=a.learning,
    )


# ---------------------------------------------------------------------------- a ladder

LAW_SYMBOLS = {"lr": "η*", "batch": "B_opt", "loss": "L*", "bcrit": "B_crit"}


def interval_text(lo: float, hi: float) -> str:
    """An interval as "[lo, hi]" (`sig`), "—" when it has no finite end."""
    return f"[{sig(lo)}, {sig(hi)}]" if math.isfinite(lo) and math.isfinite(hi) else "—"


def law_determination(law: PowerLaw) -> Determination:
    """Is a ladder's law determined? Each exponent by `exponent_determination` (an interval
    wider than `MAX_EXPONENT_WIDTH`, or none: a law on as many rungs as parameters has no
    interval); the first exponent that is not names why. A law fitted without a bootstrap
    (``n_boot`` 0) is judged by the t interval of its least-squares exponents."""
    t = t_quantile(0.5 + law.confidence / 2, law.dof) if law.dof > 0 else math.nan
    for r in law.regressors:
        ci = law.ci[r]
        if not all(math.isfinite(v) for v in ci):
            a, half = law.exponents[r], t * law.se[r]
            ci = (a - half, a + half)
        det = exponent_determination(law.n, ci)
        if not det.determined:
            return Determination(False, f"{r} exponent: {det.reason}, {law.n} rungs")
    return Determination(True)


def ladder_laws_line(lad: LadderAnalysis) -> str | None:
    """The laws across the ladder in one line, each with its exponents' intervals and
    labelled "not determined" when `law_determination` says so (None: no law fitted)."""
    if lad.laws is None or not lad.laws.laws:
        return None
    parts = []
    for name, law in lad.laws.laws.items():
        exps = " · ".join(
            f"{r}^{law.exponents[r]:.3g} {interval_text(*law.ci[r])}" for r in law.regressors
        )
        det = law_determination(law)
        label = "" if det.determined else f" ({NOT_DETERMINED}, {det.reason})"
        parts.append(f"{LAW_SYMBOLS[name]} ∝ {exps}{label}")
    skipped = "; ".join(f"{LAW_SYMBOLS[k]} not fitted" for k in lad.laws.skipped)
    return (
        f"Laws across the ladder's {len(lad.rungs)} rungs (95% intervals): "
        + "; ".join(parts)
        + (f"; {skipped}" if skipped else "")
        + ' (section "Ladder: laws across scale").'
    )


def _span(values: Sequence[float]) -> str:
    v = [x for x in values if math.isfinite(x)]
    if not v:
        return "—"
    lo, hi = min(v), max(v)
    return sig(lo) if sig(lo) == sig(hi) else f"{sig(lo)}–{sig(hi)}"


def ladder_rungs_line(lad: LadderAnalysis) -> str:
    """The rungs' optima in one line: the ranges of B_opt, η* and L*, how many rungs have
    their best batch size at an end of the grid, and on how many a B_crit was fitted."""
    rungs = lad.rungs
    n_vals, d_vals = sorted({o.n for o in rungs}), sorted({o.d for o in rungs})
    edge = sum(o.b_at_edge for o in rungs)
    at_edge = f", at an end of the batch grid on {edge}" if edge else ""
    bcrit = [o.b_crit for o in rungs if math.isfinite(o.b_crit)]
    return (
        f"Rungs: N {_span(n_vals)} (non-embedding parameters) × D {_span(d_vals)} tokens; "
        f"B_opt {_span([o.b_opt for o in rungs])} {lad.batch_unit}{at_edge}; "
        f"η* {_span([o.lr_opt for o in rungs])}; L* {_span([o.loss_opt for o in rungs])}; "
        f"B_crit (steps to the smallest model's loss at D) fitted on {len(bcrit)} of "
        f"{len(rungs)} rungs (a point each; the law above says what they determine)."
    )


def answer_lines(a: StudyAnalysis) -> list[str]:
    """The answer as text lines, for the report's first screen and the end of `sweep run`:
    the headline's (`Headline.lines`); a ladder's that trained lead with has it trained?,
    has it predicted? (its largest rung held out), its laws and its rungs, and leave out
    each rung's S(B) at the study's one target (a loss every rung passes early; the
    ladder's B_crit targets the smallest model's loss at each D): those stay in the
    report's sections."""
    h = headline(a)
    lines = h.lines()
    lad = a.ladder
    if lad is None:
        return lines
    if not h.trained or not a.learning.points:
        return [*lines, lad.holdout.sentence()]
    partial = "PARTIAL (the study is still running): " if a.partial else ""
    return [
        partial + a.learning.line(),
        lad.holdout.sentence(),
        *filter(None, [ladder_laws_line(lad)]),
        ladder_rungs_line(lad),
    ]
