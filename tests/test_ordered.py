"""Decisions that do not depend on completion order (sweeps.study.ordered): the deadline
pruner reads only lower-numbered trials and waits only while its answer is unknown, a
trial is never pruned at the evaluation where it reached the target, the sampler draws
from a fixed history, and a shrunk copy of the fast demo gives the same trials and
B_crit at parallelism 1, 2 and 4 beside a CPU burner."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import optuna.distributions as od
import pytest
from optuna.trial import TrialState

from stepscale.analysis.analyze import analyze
from stepscale.analysis.fingerprint import params_hash, trial_rows
from stepscale.analysis.headline import headline
from stepscale.analysis.load import load
from stepscale.reporters import JsonlReporter
from stepscale.sweeps.job.heartbeat import JobHeartbeat
from stepscale.sweeps.job.trial_job import TrialReporter
from stepscale.sweeps.study.ordered import DeadlinePruner, draw_from_history, history_ready
from stepscale.trainer import Action
from tests.helpers import SWEEP, user_env

optuna.logging.set_verbosity(optuna.logging.WARNING)
TARGET = 1.0


def _study(pruner: optuna.pruners.BasePruner | None = None) -> optuna.Study:
    return optuna.create_study(direction="minimize", pruner=pruner)


def _running(study: optuna.Study, losses: dict[int, float]) -> optuna.Trial:
    trial = study.ask()
    for step, loss in losses.items():
        trial.report(loss, step)
    return trial


def test_the_deadline_reads_only_lower_numbered_trials() -> None:
    pruner = DeadlinePruner(2.0, horizon=100, target=TARGET)
    study = _study()
    low = _running(study, {10: 0.5})
    study.tell(low, 10.0)  # trial 0: reached at step 10
    mid = _running(study, {10: 2.0, 25: 2.0})
    late = _running(study, {5: 0.5})
    study.tell(late, 5.0)  # trial 2 reached at 5, but it is not below trial 1
    frozen = study.get_trials(deepcopy=False)[mid.number]
    assert pruner.prune(study, frozen)  # 25 > 2 × 10 (trial 0), whatever trial 2 did
    at_20 = study.get_trials(deepcopy=True)[mid.number]
    at_20.intermediate_values = {10: 2.0, 20: 2.0}
    assert not pruner.prune(study, at_20)  # 20 ≤ 2 × 10: trial 2's 5 does not count


def test_a_running_lower_trial_bounds_the_deadline_and_the_trial_waits_only_when_unknown() -> None:
    study = _study()
    _running(study, {4: 2.0})  # trial 0: running, above the target at step 4
    trial = _running(study, {8: 2.0})
    frozen = study.get_trials(deepcopy=False)[trial.number]
    pruner = DeadlinePruner(2.0, horizon=100, target=TARGET)
    assert not pruner.prune(study, frozen)  # 8 ≤ 2 × 5: trial 0 cannot reach before 5
    study2 = _study()
    low2 = _running(study2, {4: 2.0})
    trial2 = _running(study2, {20: 2.0})  # 20 > 2 × 5, but trial 0 may never reach: unknown
    frozen2 = study2.get_trials(deepcopy=False)[trial2.number]
    stopped = DeadlinePruner(2.0, horizon=100, target=TARGET, stopping=lambda: True)
    assert not stopped.prune(study2, frozen2)  # a stop signal: give up waiting, go on

    def finish() -> None:
        time.sleep(0.5)
        low2.report(0.5, 8)
        study2.tell(low2, 8.0)

    threading.Thread(target=finish).start()
    start = time.monotonic()
    assert DeadlinePruner(2.0, horizon=100, target=TARGET).prune(study2, frozen2)
    assert time.monotonic() - start >= 0.4  # it waited for trial 0 to end (20 > 2 × 8)


def test_a_running_lower_trial_that_reached_the_target_sets_the_deadline() -> None:
    study = _study()
    low = _running(study, {4: 2.0, 6: 0.5})  # reached at 6, not told yet
    trial = _running(study, {13: 2.0})
    pruner = DeadlinePruner(2.0, horizon=100, target=TARGET, stopping=lambda: True)
    # M ≥ 6 (a lower bound) but no ended trial gives M ≤ 12: not known yet, the stop says go on
    assert not pruner.prune(study, study.get_trials(deepcopy=False)[trial.number])
    study.tell(low, 6.0)
    assert pruner.prune(study, study.get_trials(deepcopy=False)[trial.number])


def test_a_trial_is_never_pruned_at_the_evaluation_where_it_reached_the_target(
    tmp_path: Path,
) -> None:
    study = _study(DeadlinePruner(1.0, horizon=100, target=TARGET))
    first = study.ask()
    first.report(0.5, 5)
    study.tell(first, 5.0)  # the point's fewest steps to target: 5
    trial = optuna.Trial(study, study.ask()._trial_id)
    folder = tmp_path / "trial"
    folder.mkdir()
    reporter = TrialReporter(
        JsonlReporter(folder), trial, JobHeartbeat(folder, active=False), target=TARGET
    )
    reporter.begin(0)
    # step 10 > 1 × 5, but its loss is below the target: it reached it here
    assert reporter.report(10, {"eval_loss": 0.9}) == Action.CONTINUE
    other = optuna.Trial(study, study.ask()._trial_id)
    reporter2 = TrialReporter(
        JsonlReporter(tmp_path), other, JobHeartbeat(tmp_path, active=False), target=TARGET
    )
    reporter2.begin(0)
    assert reporter2.report(10, {"eval_loss": 1.1}) == Action.PRUNE  # above it: pruned


def test_the_sampler_draws_from_its_history_alone() -> None:
    dists = {"lr": od.FloatDistribution(1e-4, 1e-1, log=True)}
    study = _study()
    for i in range(6):
        t = study.ask(dists)
        study.tell(t, float(i))
    past = study.get_trials(deepcopy=False)
    running = study.ask(dists)  # a running trial is not part of the history

    def draw(trials: list[optuna.trial.FrozenTrial]) -> float:
        sampler = optuna.samplers.TPESampler(seed=3, n_startup_trials=2)
        return draw_from_history(sampler, trials, dists)["lr"]

    assert draw(past) == draw(past)
    assert draw(past) == draw([*past, study.get_trials(deepcopy=False)[running.number]])
    assert history_ready(study.get_trials(deepcopy=False), lag=1)  # trial 7 sees 0 … 5
    assert not history_ready(study.get_trials(deepcopy=False), lag=0)
    assert study.get_trials(deepcopy=False)[-1].state == TrialState.RUNNING


# A smoke-sized copy of batchsize_vs_steps_fast: adaptive batch sizes, transfer between
# points, deadline pruning, TPE, stop at target.
AXIS = "scientific.batch_size.adaptive"
SHRUNK = [
    "conf=smoke", "scientific.batch_size.values=[]", f"{AXIS}.low=4", f"{AXIS}.high=32",
    f"{AXIS}.max_points=4", "budget.trials_per_point=3", "budget.max_steps=30",
    "sampler.transfer=true", "objective.stop_at_target=true", "pruner.name=deadline",
    "pruner.deadline_factor=1.0", "train.eval_every=5", "train.devices=1",
]  # fmt: skip
BURNER = "import time\nend = time.time() + 600\nwhile time.time() < end: pass\n"


def _start(parallelism: int, run: Path) -> subprocess.Popen[str]:
    cmd = [SWEEP, "run", *SHRUNK, f"parallelism={parallelism}", f"run_dir={run}"]
    return subprocess.Popen(
        cmd, cwd=run.parent, env=user_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


@pytest.mark.slow
def test_the_same_trials_and_bcrit_at_parallelism_1_2_and_4_beside_a_cpu_burner(
    tmp_path: Path,
) -> None:
    burner = subprocess.Popen([sys.executable, "-c", BURNER])
    try:
        runs = {p: tmp_path / f"p{p}" for p in (1, 2, 4)}
        procs = {p: _start(p, run) for p, run in runs.items()}
        for p, proc in procs.items():
            _, err = proc.communicate(timeout=900)
            assert proc.returncode == 0, (p, err[-3000:])
    finally:
        burner.kill()
        burner.wait()
    hashes = {p: params_hash(run) for p, run in runs.items()}
    assert len(set(hashes.values())) == 1, {p: trial_rows(r) for p, r in runs.items()}
    rows = trial_rows(runs[1])
    assert len(rows) == 12 and any(r["state"] == "pruned" for r in rows)
    answers = {p: headline(analyze(load(run))).groups[0] for p, run in runs.items()}
    assert len({(a.value, tuple(a.ci)) for a in answers.values()}) == 1, answers
