"""`sweep report RUN_A RUN_B … --out DIR`: several studies side by side.

S(B) (steps to each study's target vs batch size) and η*(B) (optimal LR vs batch size) of
every study are overlaid, each series labelled by study name (and group when a study has
several); a table gives each study's answer (analysis.headline), and another each study at
each point: its β2, the best tuned steps and LR, the confirm seeds' steps and the loss and
gradient-norm spikes of its trials (analysis.course.spike_table). Fits that are not
determined are labelled so and drawn without a line. Every study needs a batch-size axis
and all must count batch sizes in the same unit (else `UsageError`, exit 2,
nothing written). Written into ``DIR``: index.html, report.md, comparison.json and
figures/{steps_vs_batch,lr_vs_batch}.{png,svg}; the same run dirs give the same bytes.
The first study is tested against each other one at every batch size where both ran
confirm seeds to the same target: "fewer steps" by a one-sided Welch t-test
(analysis.claims, at the first study's ``objective.claim_level``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from stepscale.analysis.analyze import analyze
from stepscale.analysis.claims import DEFAULT_LEVEL, Claim, claim, claim_level
from stepscale.analysis.course import spike_table
from stepscale.analysis.fits.lr import LRLaw
from stepscale.analysis.fits.records import BATCH, OMIT, Record, as_json
from stepscale.analysis.fits.steps import StepsFit
from stepscale.analysis.headline import (
    NOT_DETERMINED,
    Determination,
    headline,
    lr_law_determination,
    sig,
    steps_fit_determination,
)
from stepscale.analysis.load import load
from stepscale.analysis.study import StudyAnalysis
from stepscale.errors import UsageError

if TYPE_CHECKING:
    import xarray as xr

__all__ = [
    "ArmRow",
    "ComparedSeries",
    "Comparison",
    "arm_rows",
    "comparison",
    "draw_lr",
    "draw_steps",
    "write_comparison",
]


@dataclass(frozen=True)
class ComparedSeries:
    """One study (one group of it): S(B) and η*(B), with its fits when determined."""

    label: str
    target: float | None
    batch: tuple[float, ...]
    steps: tuple[float, ...]
    fit_grid: tuple[float, ...]
    fit_steps: tuple[float, ...]  # empty when the S(B) fit is not determined or absent
    fit_note: str  # "" when drawn; else why not
    lr_batch: tuple[float, ...]
    lr_opt: tuple[float, ...]
    law_grid: tuple[float, ...]
    law_lr: tuple[float, ...]  # empty when η*(B) is not determined or absent
    law_note: str


@dataclass(frozen=True)
class ArmRow(Record):
    """One study (one group of it) at one point: what it set, found and counted there."""

    study: str
    point: str
    batch: float = field(metadata=BATCH)
    b2: str  # Adam's β2 at the point (a derived one to 4 digits), "tuned" or "—"
    best_steps: float  # the best tune trial's steps to the study's target (NaN: none reached)
    best_lr: float  # the LR of the best tune trial (the one confirm seeds repeat)
    seeds: tuple[float, ...]  # each confirm seed's steps (interpolated crossing; NaN: not reached)
    trials: int  # tune and confirm trials that counted spikes
    with_loss_spikes: int  # trials with a loss spike
    loss_spikes: int
    grad_norm_spikes: int
    diverged: int
    # train.on_spike (-1: no trial of the point ran a restart policy)
    restarts: int = -1
    steps_redone: int = 0
    steps_done: int = 0  # of the paths kept by the trials that ran the policy

    def _json(self, fields: dict[str, Any]) -> dict[str, Any]:
        """The seeds' mean and how many reached the target beside their values."""
        reached = [v for v in self.seeds if math.isfinite(v)]
        mean = sum(reached) / len(reached) if reached else None
        return fields | {"seeds_mean": mean, "seeds_reached": len(reached)}


@dataclass(frozen=True)
class DivergedTest(Record):
    """Diverged trials of the first study against another's, at one batch size (NaN: all
    batch sizes), with the one-sided p of Fisher's exact test of "fewer diverge"."""

    first: str
    other: str
    batch: float = field(metadata=BATCH)
    diverged: int
    trials: int
    other_diverged: int
    other_trials: int
    p: float
    level: float

    def sentence(self, unit: str) -> str:
        """The test in words: the fractions, p, and whether it reaches the level."""
        where = "all batch sizes" if math.isnan(self.batch) else f"batch {self.batch:g} {unit}"
        verdict = (
            f"{self.first} has fewer diverged trials (p < {self.level:g})"
            if self.p < self.level
            else f"fewer diverged trials not shown at p < {self.level:g}"
        )
        return (
            f"{where}: {self.diverged}/{self.trials} diverged in {self.first}, "
            f"{self.other_diverged}/{self.other_trials} in {self.other}; one-sided Fisher "
            f"p = {self.p:.3g}: {verdict}."
        )


def diverged_tests(arms: Sequence[ArmRow], level: float) -> list[DivergedTest]:
    """The first study's diverged fraction against each other study's, per batch size both
    ran and over all of them (one-sided Fisher exact test, `scipy.stats.fisher_exact`)."""
    from scipy import stats

    studies = list(dict.fromkeys(r.study for r in arms))
    if len(studies) < 2:
        return []
    first = studies[0]
    out = []
    for other in studies[1:]:
        mine = {r.batch: r for r in arms if r.study == first and r.trials}
        theirs = {r.batch: r for r in arms if r.study == other and r.trials}
        shared = sorted(set(mine) & set(theirs))
        if not shared:
            continue
        for b in [*shared, math.nan]:
            picked = shared if math.isnan(b) else [b]
            d1 = sum(mine[x].diverged for x in picked)
            n1 = sum(mine[x].trials for x in picked)
            d2 = sum(theirs[x].diverged for x in picked)
            n2 = sum(theirs[x].trials for x in picked)
            table = [[d1, n1 - d1], [d2, n2 - d2]]
            p = float(stats.fisher_exact(table, alternative="less").pvalue)
            out.append(DivergedTest(first, other, b, d1, n1, d2, n2, p, level))
    return out


@dataclass(frozen=True)
class Comparison(Record):
    """The overlay of several studies; ``rows`` is the table of their answers (its JSON:
    comparison.json)."""

    batch_unit: str
    series: tuple[ComparedSeries, ...]
    rows: tuple[tuple[str, ...], ...] = field(metadata=as_json("answers"))
    # "the first study reaches the target in fewer steps than each other one", per batch
    # size both ran confirm seeds at, to the same target (analysis.claims)
    claims: tuple[tuple[float, Claim], ...] = ()
    claim_notes: tuple[str, ...] = field(default=(), metadata=OMIT)
    # each study at each point (only when the datasets were given: spikes need them)
    arms: tuple[ArmRow, ...] = ()
    # "the first study has fewer diverged trials than each other one", per batch size and
    # over all (Fisher's exact test, one-sided; only with the datasets)
    diverged_tests: tuple[DivergedTest, ...] = ()

    def _json(self, fields: dict[str, Any]) -> dict[str, Any]:
        """Each claim with the batch size it was tested at."""
        return fields | {"claims": [{"batch": b, **c.to_dict()} for b, c in self.claims]}


def _curve(
    fit: StepsFit | LRLaw | None, det: Determination | None, grid: np.ndarray, missing: str
) -> tuple[tuple[float, ...], str]:
    """A fit's curve on ``grid`` when it is determined (else none: no line is drawn for
    it), and why not ("" when drawn; ``missing`` without a fit)."""
    if fit is None or det is None:
        return (), missing
    if not det.determined:
        return (), det.reason
    return tuple(fit.predict(grid).tolist()), ""


def _grid(values: Sequence[float]) -> np.ndarray:
    v = [x for x in values if math.isfinite(x) and x > 0]
    return np.geomspace(min(v) / 1.3, max(v) * 1.3, 120) if v else np.array([])


def _claims(
    studies: Sequence[tuple[str, StudyAnalysis]], level: float
) -> tuple[list[tuple[float, Claim]], list[str]]:
    """The first study (group) against each other at every batch size where both ran
    confirm seeds to the same target: "fewer steps", by a one-sided Welch test."""
    arms = [
        (label if g.group == "all" else f"{label}: {g.group}", a.target, g.seeds)
        for label, a in studies
        for g in a.groups
    ]
    out: list[tuple[float, Claim]] = []
    notes: list[str] = []
    first, target, seeds = arms[0]
    for other, other_target, other_seeds in arms[1:]:
        if seeds is None or other_seeds is None:
            notes.append(f"{first} vs {other}: no claim tested (a side ran no confirm seeds)")
            continue
        if target != other_target:
            notes.append(
                f"{first} vs {other}: no claim tested (targets differ: {target} vs "
                f"{other_target}; pass --target to give both one)"
            )
            continue
        mine = dict(zip(seeds.batch_sizes, seeds.values, strict=False))
        theirs = dict(zip(other_seeds.batch_sizes, other_seeds.values, strict=False))
        for b in sorted(set(mine) & set(theirs)):
            c = claim(first, mine[b], other, theirs[b], "steps", "steps", level)
            out.append((b, c))
    return out, notes


def arm_rows(label: str, a: StudyAnalysis, ds: xr.Dataset) -> list[ArmRow]:
    """Each point of one study (``a``, analysed from ``ds``) as an `ArmRow`, in study order;
    a study with several groups gets its group after its label, as in the overlays."""
    spikes = spike_table(ds)
    by_point = {r.point: r for r in spikes.rows} if spikes is not None else {}
    seeds = {g.group: g.seeds for g in a.groups}
    lr = np.asarray(ds[a.axes.lr.coord].values, dtype=float) if a.axes.lr is not None else None
    out = []
    for row in a.points:
        sp = by_point.get(row.point)
        spread = seeds.get(row.group)
        values: tuple[float, ...] = ()
        if spread is not None and row.x in spread.batch_sizes:
            values = tuple(spread.values[spread.batch_sizes.index(row.x)])
        best = a.best.get(row.point)
        out.append(
            ArmRow(
                study=label if row.group == "all" else f"{label}: {row.group}",
                point=row.point,
                batch=row.x,
                b2=sp.b2 if sp is not None else "—",
                best_steps=row.steps_to_target,
                best_lr=float(lr[best]) if lr is not None and best is not None else math.nan,
                seeds=values,
                trials=sp.trials if sp is not None else 0,
                with_loss_spikes=sp.with_loss_spikes if sp is not None else 0,
                loss_spikes=sp.loss_spikes if sp is not None else 0,
                grad_norm_spikes=sp.grad_norm_spikes if sp is not None else 0,
                diverged=sp.diverged if sp is not None else 0,
                **(
                    {
                        "restarts": sp.restarts,
                        "steps_redone": sp.steps_redone or 0,
                        "steps_done": sp.steps_done or 0,
                    }
                    if sp is not None and sp.restarts is not None
                    else {}
                ),
            )
        )
    return out


def comparison(
    studies: Sequence[tuple[str, StudyAnalysis]],
    level: float = DEFAULT_LEVEL,
    datasets: Sequence[xr.Dataset] = (),
) -> Comparison:
    """The comparison record of ``(label, analysis)`` pairs (pure; see the module docstring);
    with the studies' ``datasets`` (in the same order) also each study at each point."""
    if len(studies) < 2:
        raise UsageError("a comparison needs at least two run dirs")
    for label, a in studies:
        if a.axes.batch is None:
            raise UsageError(
                f"{label} has no batch-size axis (a scientific parameter with path "
                "data.global_batch, or quantity: batch_size): S(B) and η*(B) cannot be "
                "overlaid; compare batch-size studies only"
            )
    units = {a.batch_unit for _, a in studies}
    if len(units) > 1:
        raise UsageError(
            "the studies count batch sizes in different units ("
            + ", ".join(f"{label}: {a.batch_unit}" for label, a in studies)
            + "): their S(B) cannot share an axis"
        )
    series: list[ComparedSeries] = []
    rows: list[tuple[str, ...]] = []
    for label, a in studies:
        h = headline(a)
        for g, gh in zip(a.groups, h.groups, strict=True):
            name = label if g.group == "all" else f"{label}: {g.group}"
            res = g.result
            batch = res.batch_sizes if res is not None else ()
            steps = res.steps if res is not None else ()
            fit = g.fit_at(a.target)
            grid = _grid(batch)
            fit_det = None if fit is None else steps_fit_determination(fit)
            fit_steps, fit_note = _curve(fit, fit_det, grid, "no S(B) fit")
            o, law = g.optimal_lr, g.lr_law
            lr_b = o.batch_sizes if o is not None else ()
            lr_grid = _grid(lr_b)
            law_det = None if law is None else lr_law_determination(law)
            law_lr, law_note = _curve(law, law_det, lr_grid, "no η*(B) law")
            law_text = "—"
            if law is not None and law_det is not None:
                lo, hi = law.alpha_ci
                law_text = (
                    f"α = {sig(law.alpha)} [{sig(lo)}, {sig(hi)}]"
                    if law_det.determined
                    else f"{NOT_DETERMINED} ({law_det.reason})"
                )
            series.append(
                ComparedSeries(
                    name,
                    a.target,
                    tuple(batch),
                    tuple(steps),
                    tuple(grid.tolist()),
                    fit_steps,
                    fit_note,
                    tuple(lr_b),
                    tuple(o.lr_opt) if o is not None else (),
                    tuple(lr_grid.tolist()),
                    law_lr,
                    law_note,
                )
            )
            rows.append((name, h.group_text(gh), law_text))
    claims, notes = _claims(studies, level)
    arms = [
        r for (label, a), ds in zip(studies, datasets, strict=False) for r in arm_rows(label, a, ds)
    ]
    arms.sort(key=lambda r: r.batch)  # stable: the studies' order within a batch size
    return Comparison(
        units.pop(),
        tuple(series),
        tuple(rows),
        tuple(claims),
        tuple(notes),
        tuple(arms),
        tuple(diverged_tests(arms, level)),
    )


# What one study draws in an overlay: points (x, y) and their label, the fitted line
# (x, y; empty when not determined) and the legend note saying so.
_Drawn = tuple[tuple[float, ...], tuple[float, ...], str, tuple[float, ...], tuple[float, ...], str]


def draw_steps(rec: Comparison) -> Any:
    """Steps to each study's target vs batch size, one colour per study, fits solid."""

    def drawn(s: ComparedSeries) -> _Drawn:
        tgt = f" (L < {s.target:g})" if s.target is not None else ""
        note = f"{s.label}: S(B) fit {NOT_DETERMINED}"
        return s.batch, s.steps, f"{s.label}{tgt}", s.fit_grid, s.fit_steps, note

    return _overlay(
        rec,
        drawn,
        "steps to each study's target (steps)",
        "S(B) of each study (lines: determined fits)",
    )


def draw_lr(rec: Comparison) -> Any:
    """Optimal LR vs batch size, one colour per study, laws solid where determined."""

    def drawn(s: ComparedSeries) -> _Drawn | None:
        if not s.lr_batch:
            return None
        note = f"{s.label}: η*(B) law {NOT_DETERMINED}"
        return s.lr_batch, s.lr_opt, s.label, s.law_grid, s.law_lr, note

    return _overlay(
        rec,
        drawn,
        "optimal peak learning rate η*",
        "η*(B) of each study (lines: determined laws)",
    )


def _overlay(
    rec: Comparison,
    drawn: Callable[[ComparedSeries], _Drawn | None],
    ylabel: str,
    title: str,
) -> Any:
    """One log–log panel against batch size, a colour per study: its points, and its line
    where determined (else a legend note saying it is not; nothing for a study ``drawn``
    skips or with no points)."""
    from stepscale.analysis.figures import style

    fig, axes = style.figure(height=4.6)
    ax = axes[0][0]
    for i, s in enumerate(rec.series):
        got = drawn(s)
        if got is None:
            continue
        x, y, label, line_x, line_y, note = got
        c = style.color(i)
        ax.plot(x, y, "o", color=c, label=label)
        if line_y:
            ax.plot(line_x, line_y, "-", color=c, lw=1.3)
        elif x:
            ax.plot([], [], " ", label=note)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(style.batch_label(rec.batch_unit))
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    style.legend(fig, ax, True)
    return fig


def _claim_blocks(rec: Comparison, level: float) -> list[Any]:
    """The claims section: the rule, then one sentence per batch size and pair."""
    from stepscale.analysis.report.blocks import heading, para

    if not rec.claims and not rec.claim_notes:
        return []
    out = [
        heading("Claims"),
        para(
            f"At each batch size both studies ran confirm seeds at, the first study is tested "
            f'against each other: a one-sided Welch t-test of "fewer steps to the target" '
            f"over the seeds, shown at p < {level:g} (docs/science.md). A claim that does not "
            "reach the level is not shown with that many seeds, not a result."
        ),
    ]
    unit = rec.batch_unit
    out += [para(f"batch {b:g} {unit}: {c.sentence()}") for b, c in rec.claims]
    out += [para(n, "note") for n in rec.claim_notes]
    return out


def _arm_blocks(rec: Comparison, target_text: str) -> list[Any]:
    """The table of each study at each point (nothing without rows)."""
    from stepscale.analysis.report.blocks import heading, table
    from stepscale.analysis.report.numbers import batch_text, num

    if not rec.arms:
        return []
    rows: list[list[Any]] = []
    restarts = any(r.restarts >= 0 for r in rec.arms)
    for r in rec.arms:
        reached = [v for v in r.seeds if math.isfinite(v)]
        mean = num(sum(reached) / len(reached)) if reached else "—"
        seeds = f"{mean} ({len(reached)}/{len(r.seeds)})" if r.seeds else "—"
        rows.append(
            [
                batch_text(r.batch),
                r.study,
                r.b2,
                num(r.best_steps),
                num(r.best_lr),
                seeds,
                *(
                    (r.trials, r.with_loss_spikes, r.loss_spikes, r.grad_norm_spikes, r.diverged)
                    if r.trials
                    else ("—",) * 5  # no trial of the point counted spikes
                ),
                *(_restart_cells(r) if restarts else ()),
            ]
        )
    return [
        heading("Each study at each batch size"),
        table(
            [
                f"batch ({rec.batch_unit})",
                "study",
                "β2",
                "best tuned steps",
                "its LR",
                "confirm seeds: mean steps (reached/run)",
                "trials",
                "trials with a loss spike",
                "loss spikes",
                "grad-norm spikes",
                "diverged",
                *(("spike restarts", "steps redone (share of steps kept)") if restarts else ()),
            ],
            [[str(c) for c in row] for row in rows],
            f"Steps to the target{target_text}: the fewest of the tuned trials (at an "
            "evaluation) and the mean of the confirm seeds at the interpolated crossing (what "
            "the claims test). Spikes are counted over all trials of the point, tuned and "
            "confirm (the rule: each study's own report)."
            + (
                " Spike restarts (train.on_spike) and the steps they redid: compute spent, "
                "not counted in steps to the target."
                if restarts
                else ""
            ),
        ),
        *_diverged_blocks(rec),
    ]


def _restart_cells(r: ArmRow) -> tuple[str, str]:
    """A row's restarts and redone steps ("—": its study ran no restart policy)."""
    if r.restarts < 0:
        return ("—", "—")
    share = f" ({100 * r.steps_redone / r.steps_done:.1f}%)" if r.steps_done else ""
    return (str(r.restarts), f"{r.steps_redone}{share}")


def _diverged_blocks(rec: Comparison) -> list[Any]:
    """The diverged fractions and their one-sided tests (nothing without tests)."""
    from stepscale.analysis.report.blocks import para

    if not rec.diverged_tests:
        return []
    level = rec.diverged_tests[0].level
    out = [
        para(
            "Diverged trials, tuned and confirm: the first study against each other by a "
            f'one-sided Fisher exact test of "fewer diverge", shown at p < {level:g}.'
        )
    ]
    return out + [para(t.sentence(rec.batch_unit)) for t in rec.diverged_tests]


def _target_text(analyses: Sequence[StudyAnalysis]) -> str:
    """ " (L < t)" when every study has the one target t, else the targets per study."""
    targets = {a.target for a in analyses}
    if len(targets) == 1 and None not in targets:
        return f" (eval loss < {targets.pop():g})"
    return " of each study (" + ", ".join(f"{a.study}: {a.target}" for a in analyses) + ")"


def _labels(run_dirs: Sequence[Path], names: Sequence[str]) -> list[str]:
    """Study names, with the run dir added where two studies share a name."""
    return [
        n if names.count(n) == 1 else f"{n} ({d})" for d, n in zip(run_dirs, names, strict=True)
    ]


def write_comparison(
    run_dirs: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    targets: Sequence[float] = (),
) -> dict[str, Any]:
    """Compare the studies of ``run_dirs`` into ``out`` (see the module docstring); returns
    {report_dir, files, studies}. Raises `UsageError` or
    :class:`analysis.load.RunDirError` for bad input, before anything is written."""
    from stepscale.analysis.figures import style
    from stepscale.analysis.report.blocks import fig, heading, para, table, to_html, to_markdown
    from stepscale.files import write_text_atomic
    from stepscale.redact import redact

    dirs = [Path(d) for d in run_dirs]
    outdir = Path(out)
    if outdir.exists() and not outdir.is_dir():
        raise UsageError(f"--out {outdir} exists and is not a directory")
    datasets = [load(d) for d in dirs]
    analyses = [analyze(ds, targets) for ds in datasets]
    labels = _labels(dirs, [a.study or d.name for a, d in zip(analyses, dirs, strict=True)])
    level = claim_level(datasets[0].attrs)  # the first study's objective.claim_level
    rec = comparison(list(zip(labels, analyses, strict=True)), level, datasets)
    figdir = outdir / "figures"
    figdir.mkdir(parents=True, exist_ok=True)
    pngs: dict[str, bytes] = {}
    captions = {
        "steps_vs_batch": "Steps to each study's target vs batch size; lines are S(B) fits "
        "that are determined (fits not determined are named in the legend, not drawn).",
        "lr_vs_batch": "Optimal LR η* per batch size of each study; lines are η*(B) = c·B^α "
        "laws that are determined.",
    }
    with style.context():
        for name, draw in (("steps_vs_batch", draw_steps), ("lr_vs_batch", draw_lr)):
            figure = draw(rec)
            for ax in figure.axes:
                style.plain_ticks(ax)
            pngs[name] = style.save_png(figure, figdir / f"{name}.png")
            style.save_svg(figure, figdir / f"{name}.svg")
    blocks = [
        heading("Comparison: " + ", ".join(labels), 1),
        table(["study", "answer", "η*(B) = c·B^α"], rec.rows, "Each study's answer"),
        *(fig(n, captions[n], png) for n, png in pngs.items()),
        *_arm_blocks(rec, _target_text(analyses)),
        *_claim_blocks(rec, level),
        heading("Run dirs"),
        table(["study", "run dir"], [[lb, str(d)] for lb, d in zip(labels, dirs, strict=True)]),
        para(
            "Each study's own report: `sweep report RUN_DIR`. A fit is not determined when it "
            "rests on fewer than 3 points or its interval is too wide (docs/report.md).",
            "note",
        ),
    ]
    write_text_atomic(outdir / "report.md", redact(to_markdown(blocks)))
    write_text_atomic(outdir / "index.html", redact(to_html(blocks, "stepscale comparison")))
    write_text_atomic(
        outdir / "comparison.json",
        json.dumps(
            {**rec.to_dict(), "run_dirs": [str(d) for d in dirs]},
            indent=2,
            sort_keys=True,
            ensure_ascii=False,
        )
        + "\n",
    )
    files = ["index.html", "report.md", "comparison.json"]
    files += [f"figures/{n}.{ext}" for n in pngs for ext in ("png", "svg")]
    return {"report_dir": str(outdir), "files": files, "studies": labels}
