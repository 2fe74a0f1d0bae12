"""Scaling-law fits: steps to result and S(B), optimal LR vs batch size, hyperparameter laws.

Each fit is a pure function returning a frozen dataclass with a JSON-ready ``to_dict()``.
"""

from stepscale.analysis.fits.hparams import HparamLaw, HparamLaws, fit_hparam_laws
from stepscale.analysis.fits.lr import (
    LRLaw,
    OptimalLR,
    RuleComparison,
    SaturatingFit,
    fit_lr_law,
    optimal_lr,
)
from stepscale.analysis.fits.spread import (
    NoiseScaleSummary,
    SeedSpread,
    noise_scale_summary,
    spread_over_seeds,
)
from stepscale.analysis.fits.steps import StepsFit, StepsToResult, fit_steps, steps_to_result
from stepscale.analysis.fits.targets import (
    BcritAtTargets,
    BcritTargetLaw,
    CurveSteps,
    bcrit_at_targets,
    first_crossing,
    fit_bcrit_vs_target,
    steps_at_target,
    target_problems,
)

__all__ = [
    "BcritAtTargets",
    "BcritTargetLaw",
    "CurveSteps",
    "HparamLaw",
    "HparamLaws",
    "LRLaw",
    "NoiseScaleSummary",
    "OptimalLR",
    "RuleComparison",
    "SaturatingFit",
    "SeedSpread",
    "StepsFit",
    "StepsToResult",
    "bcrit_at_targets",
    "first_crossing",
    "fit_bcrit_vs_target",
    "fit_hparam_laws",
    "fit_lr_law",
    "fit_steps",
    "noise_scale_summary",
    "optimal_lr",
    "spread_over_seeds",
    "steps_at_target",
    "steps_to_result",
    "target_problems",
]
