"""A point's budget: whether it needs another tune or confirm trial, which point is
served next (fewest trials first, so early results cover every batch size), and whether
the whole study has run its budget.

The budget of a point counts trials in a final state (complete, pruned, diverged, failed)
plus those running; WAITING trials (enqueued, never asked) do not count.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from optuna.trial import FrozenTrial, TrialState

from stepscale.rundir import DIVERGED
from stepscale.sweeps.study.schema import BudgetConfig
from stepscale.sweeps.study.space import Point

# Optuna states of a trial that has ended.
FINAL = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
TrialsOf = Callable[[Point], list[FrozenTrial]]


def best_tune(tune: list[FrozenTrial]) -> FrozenTrial | None:
    """The best complete (not diverged) tune trial: the one a confirm seed repeats."""
    done = [
        t for t in tune if t.state == TrialState.COMPLETE and t.user_attrs.get("state") != DIVERGED
    ]
    return min(done, key=lambda t: (t.value, t.number)) if done else None


def needs(budget: BudgetConfig, trials: list[FrozenTrial]) -> str | None:
    """'tune' or 'confirm' if a point with these trials needs another trial now, else None."""
    tune = [
        t
        for t in trials
        if t.user_attrs.get("kind", "tune") == "tune" and t.state != TrialState.WAITING
    ]
    if len(tune) < budget.trials_per_point:
        return "tune"
    if budget.confirm_seeds <= 0 or any(t.state not in FINAL for t in tune):
        return None
    confirm = [
        t for t in trials if t.user_attrs.get("kind") == "confirm" and t.state != TrialState.WAITING
    ]
    if len(confirm) < budget.confirm_seeds and best_tune(tune) is not None:
        return "confirm"
    return None


def pick_point(
    points: Sequence[Point],
    trials_of: TrialsOf,
    budget: BudgetConfig,
    order: Callable[[Point], int] | None = None,
    ready: Callable[[Point], bool] | None = None,
) -> tuple[Point, str] | None:
    """The point with the fewest trials that still needs one (ties: grid order), and the
    kind of trial it needs. With ``order`` (transfer between points, `sweeps.run.transfer`)
    points are served in that order first, and only those ``ready`` says may start."""
    best: tuple[tuple[int, ...], Point, str] | None = None
    for point in points:
        trials = trials_of(point)
        kind = needs(budget, trials)
        if kind is None or (ready is not None and not ready(point)):
            continue
        key = (len([t for t in trials if t.state != TrialState.WAITING]), point.index)
        if order is not None:
            key = (order(point), *key)
        if best is None or key < best[0]:
            best = (key, point, kind)
    return (best[1], best[2]) if best else None


def all_done(points: Sequence[Point], trials_of: TrialsOf, budget: BudgetConfig) -> bool:
    """No trial of any point is running (in any orchestrator) and none needs another."""
    for point in points:
        trials = trials_of(point)
        if any(t.state == TrialState.RUNNING for t in trials) or needs(budget, trials) is not None:
            return False
    return True
