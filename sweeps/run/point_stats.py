"""Per-point counts by state, best objective and steps spent, read from Optuna and the
trials' files: what the progress display and the final summary show."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from optuna.trial import FrozenTrial, TrialState

from stepscale.files import read_json
from stepscale.rundir import (
    COMPLETE,
    DIVERGED,
    FAILED,
    METRICS_JSONL,
    PRUNED,
    RUNNING,
    STATUS_JSON,
    TRAINER_FINAL_STATES,
    trial_dir,
)
from stepscale.sweeps.job import heartbeat
from stepscale.sweeps.study.space import Point
from stepscale.sweeps.trainers.metrics_file import tail_step

TRIAL_STATES = (*TRAINER_FINAL_STATES, FAILED)


@dataclass
class PointStats:
    """What the progress display shows for a point."""

    label: str
    budget: int
    counts: dict[str, int] = field(default_factory=dict)
    best: float | None = None
    steps: int = 0  # optimizer steps trained (a running trial's: its last reported step)
    consumed: int = (
        0  # budget used: a finished trial uses its whole horizon, however early it ended
    )
    expected: int = 0  # steps the point will have trained: ended trials' own, the rest's horizon


def point_stats(
    points: Sequence[Point],
    trials_of: Callable[[Point], list[FrozenTrial]],
    run_dir: Path,
    horizons: dict[str, int],
    budget: int,
) -> list[PointStats]:
    """The stats of every point; ``budget`` is a point's number of trials."""
    out = []
    for point in points:
        st = PointStats(point.label, budget, {s: 0 for s in (RUNNING, *TRIAL_STATES)})
        horizon = horizons[point.label]
        started = 0
        for t in trials_of(point):
            if t.state == TrialState.WAITING:
                continue
            started += 1
            folder = trial_dir(run_dir, point.label, t.number)
            if t.state == TrialState.RUNNING:
                st.counts[RUNNING] += 1
                step = max(tail_step(folder / METRICS_JSONL), heartbeat.job_step(folder))
                st.steps += step
                st.consumed += step
                st.expected += max(horizon, step)
                continue
            state = {TrialState.PRUNED: PRUNED, TrialState.FAIL: FAILED}.get(
                t.state, t.user_attrs.get("state", COMPLETE)
            )
            st.counts[state] = st.counts.get(state, 0) + 1
            status = read_json(folder / STATUS_JSON, lenient=True) or {}
            done = int(status.get("steps_done") or 0)
            st.steps += done
            st.expected += done
            st.consumed += horizon
            if (
                t.state == TrialState.COMPLETE
                and state != DIVERGED
                and (st.best is None or t.value < st.best)
            ):
                st.best = t.value
        st.expected += max(budget - started, 0) * horizon
        out.append(st)
    return out
