"""The live progress of a study counts what is trained: a running trial's steps as it reports
them (not only when its 5-second heartbeat comes), and a bar whose total drops the steps a
trial did not need (it reached the target or was pruned early). `sweep run` ends with its
wall time and the time to its first trained step."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from helpers import SWEEP, TEST_COMPILE_CACHE, user_env
from optuna.trial import TrialState

from stepscale.cli.run import _time_text, _times
from stepscale.rundir import METRICS_JSONL, STATUS_JSON, trial_dir
from stepscale.sweeps.run.display import StudyProgress, duration_text, process_started
from stepscale.sweeps.run.point_stats import PointStats, point_stats
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


def _stats(steps: int) -> list[PointStats]:
    return [PointStats("batch_size=8", 4, {"running": 1}, None, steps, steps, 40)]


def test_the_clock_starts_at_the_first_import_of_stepscale() -> None:
    """The command's clock starts when its Python imports stepscale: what the process did
    before (here a 0.5 s sleep; a shell's commands before `exec sweep`) is not counted, the
    imports after it are."""
    code = (
        "import time; before = time.monotonic(); time.sleep(0.5)\n"
        "from stepscale.sweeps.run.display import process_started\n"
        "print(process_started() - before, time.monotonic() - process_started())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    after_sleep, since = (float(x) for x in out.stdout.split())
    assert after_sleep >= 0.5 and since > 0  # the display's own imports (rich) count


@pytest.mark.slow
def test_a_shell_that_execs_sweep_run_is_not_counted(tmp_path: Path) -> None:
    """`bash -c 'sleep 5 && exec sweep run …'`: the end-of-run wall time leaves the shell's
    5 s out (the kernel's start time of the process is the shell's, so that clock would not)."""
    args = [
        "conf=smoke", f"run_dir={tmp_path / 'run'}", "launcher=inline", "budget.trials_per_point=1",
        "scientific.batch_size.values=[8]", "budget.max_steps=10", "--json",
        f"train.compile_cache_dir={TEST_COMPILE_CACHE}",
    ]  # fmt: skip
    script = "sleep 5 && exec " + shlex.join([SWEEP, "run", *args])
    t0 = time.monotonic()
    res = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=user_env(), capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    elapsed = time.monotonic() - t0
    assert res.returncode == 0, res.stderr
    wall = json.loads(res.stdout)["time"]["wall_s"]
    assert 0 < wall <= elapsed - 5 + 0.1  # 0.1: the summary rounds to 0.1 s


def test_first_progress_is_the_first_step_trained_by_this_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The clock starts at the process's start; steps already trained (a resumed study) are
    not progress; on a non-terminal the first progress prints a line at once."""
    started = process_started()
    assert started <= time.monotonic()
    progress = StudyProgress("s", {"total_budget_steps": 160}, every_s=3600, started=started)
    with progress:
        progress(_stats(30))  # 30 steps from an earlier run: the baseline
        progress(_stats(30))
        assert progress.first_progress is None
        progress(_stats(35))
        first = progress.first_progress
        assert first is not None and 0 <= first <= progress.elapsed()
        progress(_stats(40))
        assert progress.first_progress == first  # the first one stays
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and "35/" in lines[1]  # the start, then the first progress at once


def test_the_summary_gives_the_wall_time_and_the_time_to_the_first_progress() -> None:
    times = _times(151.04, 14.26)
    assert times == {"wall_s": 151.0, "first_progress_s": 14.3}
    text = _time_text(times)
    assert text.startswith("  time: 2 min 31 s wall; first progress after 14.3 s")
    assert "compiles included" in text
    assert _time_text(_times(3.2, None)) == "  time: 3.2 s wall (no step trained by this command)"
    assert [duration_text(s) for s in (9.94, 60, 3725)] == ["9.9 s", "1 min 0 s", "1 h 2 min"]
