"""Checks of a study's settings that need no trainer: the objective, the counts, the
horizon, the sampler and pruner, transfer, and where the storage goes, and that a grid
sampler's grid holds the budget. All of them run before the run dir is made."""

from __future__ import annotations

import math
from pathlib import Path

from stepscale.errors import UsageError
from stepscale.rundir import BATCH_PATH
from stepscale.sweeps.study.axes import batch_alias
from stepscale.sweeps.study.objective import OBJECTIVES
from stepscale.sweeps.study.samplers import check_pruner, check_sampler, grid_size
from stepscale.sweeps.study.schema import StudyConfig
from stepscale.sweeps.study.space import SearchSpace
from stepscale.sweeps.study.storage import StorageSpec
from stepscale.sweeps.trainers.kinds import BuiltinKind
from stepscale.sweeps.trainers.spec import BUILTIN, TrainerSpec

HORIZONS = ("max_steps", "max_tokens", "max_examples")

# Counts beyond these cannot be meant: Optuna's SQL storages number trials with 32-bit
# integers, and a million trials of one point is far past any tuning budget.
MAX_TRIALS_PER_POINT = 1_000_000
MAX_TRIALS = 2**31 - 1
MAX_PARALLELISM = 100_000


def check_study(cfg: StudyConfig) -> None:
    """Raise `UsageError` naming the first setting of ``cfg`` that cannot be run."""
    if cfg.objective.kind not in OBJECTIVES:
        raise UsageError(
            f"objective.kind: unknown {cfg.objective.kind!r}; choose one of {', '.join(OBJECTIVES)}"
        )
    if cfg.objective.kind == "steps_to_target" and cfg.objective.target_loss is None:
        raise UsageError("objective.target_loss: steps_to_target needs a target loss")
    if not 0 < cfg.objective.claim_level < 0.5:
        raise UsageError(
            f"objective.claim_level: must be in (0, 0.5), got {cfg.objective.claim_level}"
        )
    if cfg.parallelism < 1:
        raise UsageError(f"parallelism: must be ≥ 1, got {cfg.parallelism}")
    if cfg.retries < 0:
        raise UsageError(f"retries: must be ≥ 0, got {cfg.retries}")
    if cfg.budget.trials_per_point < 1:
        raise UsageError(f"budget.trials_per_point: must be ≥ 1, got {cfg.budget.trials_per_point}")
    if cfg.budget.confirm_seeds < 0:
        raise UsageError(f"budget.confirm_seeds: must be ≥ 0, got {cfg.budget.confirm_seeds}")
    by = cfg.budget.no_progress_by
    if by is not None and not 0 < by <= 1:
        raise UsageError(
            f"budget.no_progress_by: a fraction of the horizon in (0, 1] (or null: off), got {by}"
        )
    if not 0 <= cfg.budget.no_progress_min < 1:
        raise UsageError(
            f"budget.no_progress_min: a fraction of the way from the step-0 eval loss to the "
            f"target, in [0, 1), got {cfg.budget.no_progress_min}"
        )
    for key, value, cap in (
        ("budget.trials_per_point", cfg.budget.trials_per_point, MAX_TRIALS_PER_POINT),
        ("budget.confirm_seeds", cfg.budget.confirm_seeds, MAX_TRIALS_PER_POINT),
        ("parallelism", cfg.parallelism, MAX_PARALLELISM),
    ):
        if value > cap:
            raise UsageError(
                f"{key}={value} cannot be meant: at most {cap:,} (a study of that size is "
                "beyond what the storage and the scheduler are built for)"
            )
    if not cfg.nuisance and cfg.budget.trials_per_point > 1:
        raise UsageError(
            f"nuisance: nothing to tune, so the {cfg.budget.trials_per_point} trials of each point "
            f"({cfg.sampler.name} sampler) would all be the same run; add a range under "
            "nuisance.<name> (e.g. +nuisance.lr={path: optimizer.lr, type: float, low: 1e-4, "
            "high: 1e-1, scale: log}) or set budget.trials_per_point=1 (budget.confirm_seeds "
            "reruns a point with other seeds)"
        )
    horizons = [
        x
        for x in (cfg.budget.max_steps, cfg.budget.max_tokens, cfg.budget.max_examples)
        if x is not None
    ]
    if len(horizons) > 1:
        raise UsageError("budget: give the horizon once: max_steps, max_tokens or max_examples")
    if cfg.heartbeat_timeout_s <= 0:
        raise UsageError(f"heartbeat_timeout_s: must be > 0, got {cfg.heartbeat_timeout_s}")
    check_loggers_installed(cfg.loggers)
    check_sampler(cfg.sampler)
    check_pruner(cfg.pruner)
    check_transfer(cfg)
    _check_report_targets(cfg)
    if cfg.pruner.name == "deadline" and not (
        cfg.objective.kind == "steps_to_target" and cfg.objective.stop_at_target
    ):
        raise UsageError(
            "pruner=deadline stops trials that cannot become their point's fewest steps to "
            "target: it needs objective.kind=steps_to_target and objective.stop_at_target=true"
        )


def _check_report_targets(cfg: StudyConfig) -> None:
    """``objective.report_targets``: finite numbers; above ``target_loss`` when trials stop
    there (a curve cut at the target never reaches a harder one)."""
    o = cfg.objective
    for t in o.report_targets:
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
            raise UsageError(f"objective.report_targets: {t!r} is not a finite loss")
        if o.stop_at_target and o.target_loss is not None and t <= o.target_loss:
            raise UsageError(
                f"objective.report_targets: {t:g} is not above target_loss = {o.target_loss:g}; "
                "trials stop at target_loss (stop_at_target), so a harder target is never reached"
            )


def check_loggers_installed(names: list[str]) -> None:
    """``loggers``: known names whose libraries are installed, else `UsageError`."""
    from stepscale.loggers import LoggerUnavailable, check_loggers

    try:
        check_loggers(names)
    except LoggerUnavailable as exc:
        raise UsageError(str(exc)) from None


def check_grid(cfg: StudyConfig, space: SearchSpace) -> None:
    """With sampler=grid: every point's grid is finite (continuous parameters →
    `UsageError`) and holds ``budget.trials_per_point`` distinct trials."""
    if cfg.sampler.name != "grid":
        return
    for p in space.points:
        n = grid_size(space.distributions(p.label))  # continuous params → UsageError
        if cfg.budget.trials_per_point > n:
            raise UsageError(
                f"budget.trials_per_point={cfg.budget.trials_per_point}: the grid at "
                f"{p.label} has only {n} points, and further trials would repeat them; set "
                f"budget.trials_per_point={n} (or fewer, for a random subset of the grid)"
            )


def check_sizes(cfg: StudyConfig, n_points: int) -> None:
    """The study's whole size (points × trials per point) fits Optuna's storages."""
    per_point = cfg.budget.trials_per_point + cfg.budget.confirm_seeds
    if n_points * per_point > MAX_TRIALS:
        raise UsageError(
            f"budget.trials_per_point: {n_points} points × {per_point} trials is more trials "
            f"than Optuna's storage numbers ({MAX_TRIALS:,}); lower budget.trials_per_point "
            "or the number of scientific values"
        )


def check_storage_place(spec: StorageSpec, run_dir: Path) -> None:
    """A SQLite file outside the run dir needs an existing folder (`UsageError`); the run
    dir itself is made later."""
    if spec.name != "sqlite":
        return
    path = Path(spec.url.removeprefix("sqlite:///"))
    if run_dir.resolve() in path.parents:
        return
    if not path.parent.is_dir():
        raise UsageError(
            f"storage.url: the folder {path.parent} of the SQLite file does not exist; "
            "create it or leave storage.url unset (a file in the run dir)"
        )


def check_transfer(cfg: StudyConfig) -> None:
    """``sampler.transfer`` settings that cannot run → `UsageError` naming the key."""
    if not cfg.sampler.transfer:
        return
    if not cfg.sampler.transfer_width > 1:
        raise UsageError(
            f"sampler.transfer_width: must be > 1 (the narrowed LR range spans this factor "
            f"either side of the prediction), got {cfg.sampler.transfer_width}"
        )
    f = cfg.sampler.transfer_bracket
    if not (f == 0 or (math.isfinite(f) and f > 1)):
        raise UsageError(
            f"sampler.transfer_bracket: 0 (off) or a factor > 1 (the LRs enqueued either side "
            f"of the prediction), got {f}"
        )
    if cfg.sampler.name == "grid":
        raise UsageError(
            "sampler.transfer: not with sampler=grid (a predicted value and a narrowed range "
            "are not points of the grid); choose tpe, qmc, random or gp"
        )
    if batch_alias(cfg) is None:
        raise UsageError(
            f"sampler.transfer: predicts each point from the batch sizes already tuned, so "
            f"it needs a batch-size scientific axis (path {BATCH_PATH}, or quantity: "
            f"batch_size); this study has {', '.join(cfg.scientific) or 'none'}"
        )
    if not cfg.nuisance:
        raise UsageError("sampler.transfer: the study has no nuisance parameter to predict")


def check_horizon_set_once(cfg: StudyConfig, trainer: TrainerSpec) -> None:
    """Refuse a parameter (scientific, nuisance, fixed or derived) that sets the trainer's
    horizon key (the built-in trainer's ``train.max_steps``/``max_tokens``/``max_examples``,
    a user trainer's ``trainer.keys.max_steps``) while the budget gives the horizon: every
    trial's horizon would be the budget's, the parameter's value silently replaced. Without
    a budget horizon (``budget.max_steps=null``) the parameter sets each trial's horizon."""
    given = [k for k in HORIZONS if getattr(cfg.budget, k) is not None]
    if not given:
        return
    if trainer.kind == BUILTIN:
        paths = {BuiltinKind.KEYS[k] for k in HORIZONS}
    else:
        paths = {trainer.keys["max_steps"]} if "max_steps" in trainer.keys else set()
    for section in ("scientific", "nuisance", "fixed", "derived"):
        for name, p in getattr(cfg, section).items():
            if p.path is not None and p.path in paths:
                budget = f"budget.{given[0]}={getattr(cfg.budget, given[0])}"
                raise UsageError(
                    f"{section}.{name} sets {p.path}, the trials' horizon, which {budget} "
                    f"also sets for every trial (the budget's would win); give the horizon "
                    f"once: drop {section}.{name}, or set budget.{given[0]}=null so that "
                    f"{section}.{name} sets each trial's horizon"
                )
