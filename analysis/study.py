"""The typed record of every fit of a study (docs/science.md), as
:func:`stepscale.analysis.analyze.analyze` returns it, and its JSON form (fits.json).

Per group of trials (the values of the scientific axes other than the batch size):
steps to result per batch size at the primary target (censored trials censored, batch
sizes that never got there listed, never dropped), the S(B) fit and its redo at every
target with B_crit(L), the optimal LR per batch size and η*(B) = c·B^α below B_crit,
the gradient noise scale B_simple of each point's best trial, and the spread of steps
to target over confirm seeds. An ablation table compares the variants of a categorical
scientific axis. Fits a study cannot support are skipped with a note saying why. Batch
sizes, B_crit, E_min and B_simple are in the study's batch unit (``batch_unit``:
sequences, examples …), which the record carries for every label drawn from it.

B_crit vs target uses only targets whose S(B) fit is well-posed
(:func:`analysis.fits.targets.target_problems`): automatic targets that are not are dropped
(listed with the reason), given ones are kept and flagged. Trials stopped at a target
(``stop_at_target``) have curves that end there: harder targets are unknown on them.

The S(B) fits use the same defaults as ``sweep fit steps`` (overhead 0.2, 1000 bootstrap
replicates, seed 0, smallest batch size as B0), so ``steps_to_target.csv`` gives the
same numbers through that command.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stepscale.analysis.ablation import AblationTable
from stepscale.analysis.dataset import (
    PointRow,
    StudyAxes,
    TrialSteps,
)
from stepscale.analysis.fits.lr import LRLaw, OptimalLR
from stepscale.analysis.fits.records import Record
from stepscale.analysis.fits.seed_part import SeedPart
from stepscale.analysis.fits.spread import (
    NoiseScaleSummary,
    SeedSpread,
)
from stepscale.analysis.fits.steps import StepsFit, StepsToResult
from stepscale.analysis.fits.targets import BcritAtTargets
from stepscale.analysis.ladder import LadderAnalysis
from stepscale.analysis.verdict import Verdict

__all__ = ["FitSettings", "GroupFits", "StudyAnalysis"]

SCHEMA = "stepscale.fits/v1"


@dataclass(frozen=True)
class FitSettings(Record):
    """Options shared by the fits (the defaults of ``sweep fit steps``)."""

    overhead: float = 0.2
    n_boot: int = 1000
    seed: int = 0
    confidence: float = 0.95


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
    # the training seed's part of B_crit's interval at the study's target (None: not measured)
    seed_part: SeedPart | None = None

    def fit_at(self, target: float | None) -> StepsFit | None:
        """The S(B) fit at ``target`` (None if not fitted there)."""
        if self.at_targets is None or target is None:
            return None
        return self.at_targets.fits.get(float(target))

    def problem_at(self, target: float | None) -> str | None:
        """Why the S(B) fit at ``target`` is not well-posed (None if it is, or if not fitted)."""
        if self.at_targets is None or target is None:
            return None
        return self.at_targets.flagged.get(float(target))


@dataclass(frozen=True)
class StudyAnalysis(Record):
    """Everything the report shows, computed from one Dataset."""

    study: str
    objective_kind: str
    target: float | None
    targets: tuple[float, ...]
    auto_targets: bool
    automatic: tuple[float, ...]
    dropped: Mapping[float, str]
    cut_at: tuple[float, ...]
    n_cut: int
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
    batch_unit: str  # what batch sizes, B_crit, E_min and B_simple count
    learning: Verdict = field(default_factory=lambda: Verdict(()))  # has it trained?
    # a ladder of studies (model size and/or horizon axes): laws and has it predicted?
    ladder: LadderAnalysis | None = None

    @property
    def warnings(self) -> tuple[str, ...]:
        """Warnings of every fit (S(B) at the primary target, ablation budgets)."""
        out: list[str] = []
        for g in self.groups:
            fit = g.fit_at(self.target)
            prefix = "" if g.group == "all" else f"{g.group}: "
            if fit is not None:
                out += [prefix + w for w in fit.warnings]
                problem = g.problem_at(self.target)
                if problem:
                    out.append(
                        f"{prefix}the S(B) fit at the target {self.target:g} is not "
                        f"well-posed: {problem}"
                    )
        if self.ablation is not None:
            out += list(self.ablation.warnings)
        return tuple(out)

    def _json(self, fields: dict[str, Any]) -> dict[str, Any]:
        """The content of fits.json (``steps`` has the shape of ``sweep fit steps``): every
        fit per group, beside the study's targets, points and notes."""
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
            "batch_unit": self.batch_unit,
            "partial": self.partial,
            "objective": {"kind": self.objective_kind},
            "axes": self.axes,
            "target": t,
            "targets": self.targets,
            "automatic_targets": self.auto_targets,
            "automatic_targets_kept": [t for t in self.automatic if t in self.targets],
            "dropped_targets": [
                {"target": t, "reason": r} for t, r in sorted(self.dropped.items())
            ],
            "stop_at_target": (
                {"losses": self.cut_at, "n_trials": self.n_cut} if self.n_cut else None
            ),
            "settings": self.settings,
            "points": self.points,
            "steps": {"target": t, "batch_unit": self.batch_unit, "groups": steps_groups},
            "steps_to_result": {"target": t, "groups": self._per_group("result")},
            "bcrit_vs_target": {
                "groups": [
                    _targets_dict(g, self.automatic)
                    for g in self.groups
                    if g.at_targets is not None
                ]
            },
            "optimal_lr": {"groups": self._per_group("optimal_lr")},
            "lr_law": {"groups": self._per_group("lr_law")},
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
                "groups": self._per_group("seeds"),
            },
            "ablation": self.ablation,
            "trained": self.learning,
            "notes": list(self.notes) + [n for g in self.groups for n in g.notes],
            "warnings": self.warnings,
        } | ({"ladder": self.ladder} if self.ladder is not None else {})

    def _per_group(self, name: str) -> list[dict[str, Any]]:
        """Each group's record ``name`` (a field of `GroupFits`) with the group's name, for
        the groups that have one."""
        return [
            {"group": g.group, **rec.to_dict()}
            for g in self.groups
            if (rec := getattr(g, name)) is not None
        ]


def _targets_dict(g: GroupFits, automatic: Sequence[float]) -> dict[str, Any]:
    """B_crit at each target of group ``g`` (values made JSON-ready with the record's)."""
    at = g.at_targets
    assert at is not None
    rows = [
        {
            "target": t,
            "b_crit": f.b_crit,
            "b_crit_ci": f.b_crit_ci,
            "s_min": f.s_min,
            "e_min": f.e_min,
            "n_points": f.n_points,
            "not_reached": f.to_dict()["not_reached"],
            "automatic": t in automatic,
            "well_posed": t not in at.flagged,
            "problem": at.flagged.get(t),
        }
        for t, f in at.fits.items()
    ]
    return {
        "group": g.group,
        "targets": rows,
        "skipped": [
            {"target": t, "reason": r, "automatic": t in automatic} for t, r in at.skipped.items()
        ],
        "well_posed_targets": at.well_posed,
        "law": at.law,
        "law_note": at.law_note,
    }
