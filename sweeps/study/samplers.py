"""Optuna samplers and pruners from config.

Samplers are made afresh for every ask, seeded from (study seed, point, trial number),
so a study gives the same trials whether it ran in one go or was stopped and resumed.
Pruners compare trials of one point only, because each point is its own Optuna study.
"""

from __future__ import annotations

import hashlib
import itertools
from typing import Any

import optuna
import optuna.distributions as od

from stepscale.errors import UsageError
from stepscale.sweeps.study.ordered import HistoryPruner
from stepscale.sweeps.study.schema import PrunerConfig, SamplerConfig

SAMPLERS = ("tpe", "qmc", "random", "grid", "gp")
PRUNERS = ("none", "median", "successive_halving", "hyperband", "deadline")


def derived_seed(*parts: Any) -> int:
    """A stable 31-bit seed from any parts (independent of Python's hash randomisation)."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def startup_trials(cfg: SamplerConfig, trials_per_point: int) -> int:
    """Random start-up trials of TPE/GP: Optuna's 10 would leave a small budget untuned."""
    if cfg.n_startup_trials is not None:
        return cfg.n_startup_trials
    return max(1, min(10, trials_per_point // 2))


def grid_space(distributions: dict[str, od.BaseDistribution]) -> dict[str, list[Any]]:
    """Every value of every (categorical or stepped) distribution, for the grid sampler."""
    grid: dict[str, list[Any]] = {}
    for name, dist in distributions.items():
        if isinstance(dist, od.CategoricalDistribution):
            grid[name] = list(dist.choices)
        elif isinstance(dist, od.IntDistribution) and not dist.log:
            grid[name] = list(range(dist.low, dist.high + 1, dist.step))
        elif isinstance(dist, od.FloatDistribution) and dist.step is not None:
            n = round((dist.high - dist.low) / dist.step)
            grid[name] = [dist.low + i * dist.step for i in range(n + 1)]
        else:
            raise UsageError(
                f"sampler=grid: nuisance parameter {name!r} is continuous; give it choices or a step"
            )
    return grid


def grid_size(distributions: dict[str, od.BaseDistribution]) -> int:
    """Number of grid points."""
    sizes = [len(v) for v in grid_space(distributions).values()]
    return len(list(itertools.product(*[range(s) for s in sizes]))) if sizes else 1


class _GridSampler(optuna.samplers.GridSampler):
    """Optuna's grid sampler without its stop: once every grid point has been tried it
    calls ``study.stop()``, which raises outside ``study.optimize`` (the orchestrator asks
    and tells itself, and ends each point at its budget)."""

    def after_trial(self, *args: Any, **kwargs: Any) -> None:
        return None


def check_sampler(cfg: SamplerConfig) -> None:
    """Unknown names, or the GP sampler without its extra → UsageError."""
    if cfg.name not in SAMPLERS:
        raise UsageError(f"sampler.name: unknown {cfg.name!r}; choose one of {', '.join(SAMPLERS)}")
    if cfg.n_startup_trials is not None and cfg.n_startup_trials < 0:
        raise UsageError(
            f"sampler.n_startup_trials: must be ≥ 0 (or null: the default), "
            f"got {cfg.n_startup_trials}"
        )
    if cfg.lag < 0:
        raise UsageError(
            f"sampler.lag: must be ≥ 0 (trial n of a point is drawn and pruned from the "
            f"point's trials 0 … n − 1 − lag), got {cfg.lag}"
        )
    if cfg.name == "gp":
        try:
            import torch  # noqa: F401
        except ImportError:
            raise UsageError(
                "sampler=gp needs PyTorch: pip install 'stepscale[gp]' (or choose tpe, qmc, random)"
            ) from None


def make_sampler(
    cfg: SamplerConfig,
    seed: int,
    trials_per_point: int,
    distributions: dict[str, od.BaseDistribution],
) -> optuna.samplers.BaseSampler:
    """A sampler for one ask."""
    n_startup = startup_trials(cfg, trials_per_point)
    if cfg.name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup)
    if cfg.name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if cfg.name == "qmc":
        # One scrambled Sobol sequence per point: its seed must not change between asks.
        return optuna.samplers.QMCSampler(
            seed=seed,
            scramble=True,
            warn_asynchronous_seeding=False,
            warn_independent_sampling=False,
        )
    if cfg.name == "grid":
        return _GridSampler(grid_space(distributions), seed=seed)
    from optuna.samplers import GPSampler

    return GPSampler(seed=seed, n_startup_trials=n_startup)


def check_pruner(cfg: PrunerConfig) -> None:
    """Unknown names or bad numbers → UsageError."""
    if cfg.name not in PRUNERS:
        raise UsageError(f"pruner.name: unknown {cfg.name!r}; choose one of {', '.join(PRUNERS)}")
    for key in ("n_startup_trials", "n_warmup_steps"):
        if getattr(cfg, key) < 0:
            raise UsageError(f"pruner.{key}: must be ≥ 0, got {getattr(cfg, key)}")
    if cfg.min_resource is not None and cfg.min_resource < 1:
        raise UsageError(
            f"pruner.min_resource: must be ≥ 1 step (or null: chosen by the pruner), "
            f"got {cfg.min_resource}"
        )
    if cfg.reduction_factor < 2:
        raise UsageError(f"pruner.reduction_factor: must be ≥ 2, got {cfg.reduction_factor}")
    if not cfg.deadline_factor >= 1:
        raise UsageError(
            f"pruner.deadline_factor: must be ≥ 1 (a trial is stopped after this many times "
            f"its point's fewest steps to target), got {cfg.deadline_factor}"
        )


def make_pruner(cfg: PrunerConfig, horizon: int | None, lag: int = 0) -> optuna.pruners.BasePruner:
    """The pruner; resources are optimizer steps. It decides for trial n of a point from
    the point's trials 0 … n − 1 − ``lag`` alone (`sweeps.study.ordered`), Hyperband
    excepted (its brackets read the storage themselves)."""
    if cfg.name == "none":
        return optuna.pruners.NopPruner()
    if cfg.name == "deadline":
        return HistoryPruner(DeadlinePruner(cfg.deadline_factor, horizon), lag)
    if cfg.name == "median":
        median = optuna.pruners.MedianPruner(
            n_startup_trials=cfg.n_startup_trials, n_warmup_steps=cfg.n_warmup_steps
        )
        return HistoryPruner(median, lag)
    min_resource: Any = cfg.min_resource if cfg.min_resource is not None else "auto"
    if cfg.name == "successive_halving":
        halving = optuna.pruners.SuccessiveHalvingPruner(
            min_resource=min_resource, reduction_factor=cfg.reduction_factor
        )
        return HistoryPruner(halving, lag)
    return optuna.pruners.HyperbandPruner(
        min_resource=cfg.min_resource or 1,
        max_resource=horizon or "auto",
        reduction_factor=cfg.reduction_factor,
    )


class DeadlinePruner(optuna.pruners.BasePruner):
    """Stop a trial once it has trained ``factor`` × the fewest steps to target of any
    complete trial it sees (its point's history: `HistoryPruner`) (what Optuna was told: a reached target's step; a value
    above the horizon means not reached). Such a trial cannot become the point's steps to
    result, so with ``factor`` ≥ 1 the steps to result of the study are those it would
    have had without pruning; only what the sampler learns from the stopped trials
    differs. Used with ``stop_at_target`` (a trial that reaches the target ends there)."""

    def __init__(self, factor: float, horizon: int | None) -> None:
        self.factor = float(factor)
        self.horizon = horizon

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        """Whether ``trial`` has passed its point's deadline."""
        step = trial.last_step
        if step is None:
            return False
        limit = self.horizon if self.horizon is not None else float("inf")
        reached = [
            t.value
            for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
            if t.value is not None and t.value <= limit
        ]
        return bool(reached) and step > self.factor * min(reached)
