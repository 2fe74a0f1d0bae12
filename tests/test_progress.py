"""The live progress of a study counts what is trained: a running trial's steps as it reports
them (not only when its 5-second heartbeat comes), and a bar whose total drops the steps a
trial did not need (it reached the target or was pruned early)."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
from optuna.trial import TrialState

from stepscale.rundir import METRICS_JSONL, STATUS_JSON, trial_dir
from stepscale.sweeps.run.point_stats import point_stats
from stepscale.sweeps.study.space import Point
from stepscale.sweeps.trainers.metrics_file import tail_step


def _lines(*steps: int) -> str:
    return "".join(json.dumps({"step": s, "train_loss": 1.0}) + "\n" for s in steps)


def test_the_tail_step_is_the_last_whole_record(tmp_path: Path) -> None:
    path = tmp_path / METRICS_JSONL
    assert tail_step(path) == 0  # no file yet
    path.write_text(_lines(0, 5, 10) + '{"step": 15, "train_lo')  # a line being written
    assert tail_step(path) == 10
    path.write_text(_lines(*range(0, 5000, 5)))  # longer than the tail that is read
    assert tail_step(path, tail_bytes=256) == 4995


def test_running_steps_count_as_reported_and_the_total_drops_unneeded_steps(
    tmp_path: Path,
) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study()
    point = Point(0, "batch_size=8", {"batch_size": 8})
    finished = study.ask()
    study.tell(finished, 10.0)  # reached the target at step 10 of a 40-step horizon
    running = study.ask()
    done_dir = trial_dir(tmp_path, point.label, finished.number)
    done_dir.mkdir(parents=True)
    (done_dir / STATUS_JSON).write_text(json.dumps({"state": "complete", "steps_done": 10}))
    run_dir = trial_dir(tmp_path, point.label, running.number)
    run_dir.mkdir(parents=True)
    (run_dir / METRICS_JSONL).write_text(_lines(0, 5, 7))  # reported; no heartbeat yet
    trials = study.get_trials(deepcopy=False)
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.RUNNING]

    (st,) = point_stats([point], lambda p: trials, tmp_path, {point.label: 40}, budget=4)
    assert st.steps == 10 + 7
    assert st.expected == 10 + 40 + 2 * 40  # the finished trial's own steps, the rest's horizon
    assert st.consumed == 40 + 7  # the budget view is unchanged
