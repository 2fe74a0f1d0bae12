"""Decisions that do not depend on completion order: the same config and seed give the
same trials at any parallelism, on a quiet or a loaded machine (docs/science.md,
"The same trials at any parallelism").

Every point is its own Optuna study, its trials numbered 0, 1, 2, … in the order they are
asked. Two decisions read other trials of the point, and both read only lower-numbered
ones, in their final state:

- **The sampler** (TPE, GP: the samplers that learn from history) draws trial n from the
  finished trials 0 … n − 1 − ``sampler.lag`` of its point, and nothing else (no running
  trial, no higher-numbered one). Trial n is asked only once those have ended, so up to
  ``lag`` + 1 trials of a point run at once. The draw happens in a private in-memory copy
  of that history (:func:`draw_from_history`); the point's study then records the drawn
  values. Random, QMC and grid samplers draw from the trial's number alone and never wait.
- **The pruner** decides at trial n's evaluation at step s from trials 0 … n − 1 of its
  point. The deadline pruner stops the trial iff s > factor × M, M the fewest steps to
  target of those trials once all have ended; a lower trial still running bounds M from
  below (it has not reached the target by its last evaluation), so the trial waits only
  when the answer is not yet known (:class:`DeadlinePruner`). Other pruners wait until
  every lower trial has ended and then see only those (:class:`OrderedPruner`).

At parallelism 1 the trials of a point run one after another, so there the pruning rule
is the one it always was; the sampler's rule differs by its lag.

A trial's evaluation whose loss is below the target never prunes it (it reached the
target there: `sweeps.job.trial_job`).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import optuna
import optuna.distributions as od
from optuna.trial import FrozenTrial, TrialState

# Samplers whose draw depends on the trials they see.
HISTORY_SAMPLERS = ("tpe", "gp")
FINAL = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
# How often a trial waiting for lower-numbered trials of its point reads the storage again.
WAIT_POLL_S = 0.2


def next_number(trials: Sequence[FrozenTrial]) -> int:
    """The number the point's next ask gets: its oldest enqueued (WAITING) trial's, else
    a new one's."""
    waiting = [t.number for t in trials if t.state == TrialState.WAITING]
    return min(waiting) if waiting else len(trials)


def history(trials: Sequence[FrozenTrial], number: int, lag: int) -> list[FrozenTrial]:
    """The trials trial ``number`` is drawn from: numbers < number − lag (asked ones)."""
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
    in-memory study holding copies of them: no running trial, no later one)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    study.add_trials([t for t in past if t.state in FINAL])
    return dict(study.ask(fixed_distributions=distributions).params)


def fixed_sampler(params: dict[str, Any], seed: int) -> optuna.samplers.BaseSampler:
    """A sampler that gives exactly ``params`` (drawn by :func:`draw_from_history`)."""
    with warnings.catch_warnings():  # "experimental" since Optuna 2.4; its use here is plain
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.PartialFixedSampler(params, optuna.samplers.RandomSampler(seed=seed))


Stopping = Callable[[], bool]


def _never() -> bool:
    return False


def _lower(study: optuna.Study, trial: FrozenTrial) -> list[FrozenTrial]:
    return [
        t
        for t in study.get_trials(deepcopy=False)
        if t.number < trial.number and t.state != TrialState.WAITING
    ]


def _first_reached(t: FrozenTrial, target: float | None) -> int | None:
    """The first reported step whose value is below ``target`` (a running trial's)."""
    if target is None:
        return None
    below = [s for s, v in t.intermediate_values.items() if v < target]
    return min(below) if below else None


class DeadlinePruner(optuna.pruners.BasePruner):
    """Stop trial n at step s once s > ``factor`` × M, M the fewest steps to target of its
    point's trials 0 … n − 1 (what Optuna was told: a reached target's step; a value above
    the horizon means not reached). Such a trial cannot become the point's steps to
    result, so with ``factor`` ≥ 1 the steps to result of the study are those it would
    have had without pruning. Used with ``stop_at_target``.

    A lower trial still running has not reached the target before its first evaluation
    below it (or, with none, after its last one): M is at least that. The trial goes on
    when s ≤ factor × (that lower bound), stops when s > factor × (the fewest of the ended
    ones), and otherwise waits for the running ones (``stopping``: give up waiting, go on)."""

    def __init__(
        self,
        factor: float,
        horizon: int | None,
        target: float | None = None,
        stopping: Stopping = _never,
    ) -> None:
        self.factor = float(factor)
        self.horizon = horizon
        self.target = target
        self.stopping = stopping

    def _bounds(self, lower: list[FrozenTrial]) -> tuple[float, float]:
        """(a lower bound of M, M's value if no running trial reaches sooner)."""
        limit = self.horizon if self.horizon is not None else math.inf
        ended, floor = math.inf, math.inf
        for t in lower:
            if t.state == TrialState.COMPLETE:
                if t.value is not None and t.value <= limit:
                    ended = min(ended, float(t.value))
            elif t.state == TrialState.RUNNING:
                reached = _first_reached(t, self.target)
                last = t.last_step if t.last_step is not None else 0
                floor = min(floor, float(reached if reached is not None else last + 1))
        return min(ended, floor), ended

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        """Whether ``trial`` has passed its point's deadline (waits while unknown)."""
        step = trial.last_step
        if step is None:
            return False
        while True:
            low, ended = self._bounds(_lower(study, trial))
            if step > self.factor * ended:
                return True
            if step <= self.factor * low or self.stopping():
                return False
            time.sleep(WAIT_POLL_S)


class _LowerTrials:
    """A study seen through trial n: only its trials 0 … n − 1 (and n itself)."""

    def __init__(self, study: optuna.Study, number: int) -> None:
        self._study = study
        self._number = number

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def get_trials(self, *args: Any, **kwargs: Any) -> list[FrozenTrial]:
        return [t for t in self._study.get_trials(*args, **kwargs) if t.number <= self._number]

    def _get_trials(self, *args: Any, **kwargs: Any) -> list[FrozenTrial]:
        trials = self._study._get_trials(*args, **kwargs)
        return [t for t in trials if t.number <= self._number]

    @property
    def trials(self) -> list[FrozenTrial]:
        return self.get_trials()


class OrderedPruner(optuna.pruners.BasePruner):
    """Any Optuna pruner, deciding for trial n from its point's trials 0 … n − 1 once all
    have ended (it waits for them; ``stopping``: give up waiting, go on)."""

    def __init__(self, base: optuna.pruners.BasePruner, stopping: Stopping = _never) -> None:
        self.base = base
        self.stopping = stopping

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        """The base pruner's verdict on the lower-numbered trials."""
        while any(t.state not in FINAL for t in _lower(study, trial)):
            if self.stopping():
                return False
            time.sleep(WAIT_POLL_S)
        view: Any = _LowerTrials(study, trial.number)
        return bool(self.base.prune(view, trial))
