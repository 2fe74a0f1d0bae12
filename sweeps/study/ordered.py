"""Decisions that do not depend on completion order: the same config and seed give the
same trials at any parallelism, on a quiet or a loaded machine (docs/science.md, "The same
trials at any parallelism").

Every point is its own Optuna study, its trials numbered 0, 1, 2, … in the order they are
asked. Two decisions read other trials of the point, and both read exactly the same ones:
trial n's *history*, the point's trials 0 … n − 1 − ``sampler.lag``.

- **The point's trial n is asked only once its history has ended** (complete, pruned or
  failed), so up to ``lag`` + 1 trials of a point run at once, and what trial n sees is
  final when it starts, whatever ran beside it and whichever ended first.
- **The sampler** (TPE, GP: the samplers that learn from history) draws trial n from its
  history alone, in a private in-memory copy of it (:func:`draw_from_history`); the
  point's study then records the drawn values. Random, QMC and grid samplers draw from the
  trial's number alone.
- **The pruner** decides at trial n's evaluations from its history alone
  (:class:`HistoryPruner`): no running trial, no higher-numbered one. Nothing waits.

At parallelism 1 the trials of a point run one after another; there, with ``lag`` 0, every
decision sees every earlier trial, as an unordered study at parallelism 1 would. Hyperband
is the exception: its brackets read the storage themselves, so its decisions can depend on
completion order.

A trial's evaluation whose loss is below the target never prunes it (it reached the target
there: `sweeps.job.trial_job`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import optuna
import optuna.distributions as od
from optuna.trial import FrozenTrial, TrialState

# Samplers whose draw depends on the trials they see.
HISTORY_SAMPLERS = ("tpe", "gp")
FINAL = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


def next_number(trials: Sequence[FrozenTrial]) -> int:
    """The number the point's next ask gets: its oldest enqueued (WAITING) trial's, else
    a new one's."""
    waiting = [t.number for t in trials if t.state == TrialState.WAITING]
    return min(waiting) if waiting else len(trials)


def history(trials: Sequence[FrozenTrial], number: int, lag: int) -> list[FrozenTrial]:
    """Trial ``number``'s history: the point's asked trials numbered below number − lag."""
    return [t for t in trials if t.number < number - lag and t.state != TrialState.WAITING]


def history_ready(trials: Sequence[FrozenTrial], lag: int) -> bool:
    """Whether the point's next trial may be asked: its history has ended."""
    return all(t.state in FINAL for t in history(trials, next_number(trials), lag))


def draw_from_history(
    sampler: optuna.samplers.BaseSampler,
    past: Sequence[FrozenTrial],
    distributions: dict[str, od.BaseDistribution],
) -> dict[str, Any]:
    """The values ``sampler`` draws for a new trial that sees exactly ``past`` (a private
    in-memory study holding copies of its ended trials)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    study.add_trials([t for t in past if t.state in FINAL])
    return dict(study.ask(fixed_distributions=distributions).params)


def fixed_sampler(params: dict[str, Any], seed: int) -> optuna.samplers.BaseSampler:
    """A sampler that gives exactly ``params`` (drawn by :func:`draw_from_history`)."""
    with warnings.catch_warnings():  # "experimental" since Optuna 2.4; its use here is plain
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.PartialFixedSampler(params, optuna.samplers.RandomSampler(seed=seed))


class _HistoryView:
    """A study seen through trial n: its history (trials 0 … n − 1 − lag) and n itself."""

    def __init__(self, study: optuna.Study, number: int, lag: int) -> None:
        self._study = study
        self._keep = lambda t: t.number < number - lag or t.number == number

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def get_trials(self, *args: Any, **kwargs: Any) -> list[FrozenTrial]:
        return [t for t in self._study.get_trials(*args, **kwargs) if self._keep(t)]

    def _get_trials(self, *args: Any, **kwargs: Any) -> list[FrozenTrial]:
        return [t for t in self._study._get_trials(*args, **kwargs) if self._keep(t)]

    @property
    def trials(self) -> list[FrozenTrial]:
        return self.get_trials()


class HistoryPruner(optuna.pruners.BasePruner):
    """Any Optuna pruner, deciding for trial n from the point's trials 0 … n − 1 − ``lag``
    (ended before trial n was asked) and trial n itself."""

    def __init__(self, base: optuna.pruners.BasePruner, lag: int) -> None:
        self.base = base
        self.lag = lag

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        """The base pruner's verdict, on the trial's history."""
        view: Any = _HistoryView(study, trial.number, self.lag)
        return bool(self.base.prune(view, trial))
