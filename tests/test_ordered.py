"""Decisions that do not depend on completion order (sweeps.study.ordered): the pruner and
the sampler read a trial's history alone (its point's trials 0 … n − 1 − lag), a point's
next trial waits for its history to end, a trial is never pruned at the evaluation where
it reached the target, and a shrunk copy of the fast demo gives the same trials and B_crit
at parallelism 1 and 3 while its processes are paused at random."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import threading
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
from stepscale.sweeps.study.compose import prepare_study
from stepscale.sweeps.study.files import fingerprint
from stepscale.sweeps.study.ordered import draw_from_history, history_ready
from stepscale.sweeps.study.samplers import make_pruner
from stepscale.sweeps.study.schema import PrunerConfig
from stepscale.trainer import Action
from tests.helpers import SWEEP, user_env

optuna.logging.set_verbosity(optuna.logging.WARNING)
TARGET = 1.0
DEADLINE = PrunerConfig(name="deadline", deadline_factor=2.0)


def _trial(study: optuna.Study, losses: dict[int, float], told: float | None = None) -> int:
    trial = study.ask()
    for step, loss in losses.items():
        trial.report(loss, step)
    if told is not None:
        study.tell(trial, told)
    return trial.number


def _frozen(
    study: optuna.Study, number: int, last: dict[int, float] | None = None
) -> optuna.trial.FrozenTrial:
    frozen = study.get_trials(deepcopy=True)[number]
    if last is not None:
        frozen.intermediate_values = last
    return frozen


def test_the_deadline_reads_the_trials_history_alone() -> None:
    study = optuna.create_study(direction="minimize")
    _trial(study, {10: 0.5}, told=10.0)  # trial 0 reached the target at step 10
    _trial(study, {4: 0.5}, told=4.0)  # trial 1 reached it at 4
    three = _trial(study, {25: 2.0})  # trial 2: with lag 1 it sees trial 0 alone
    _trial(study, {2: 0.5}, told=2.0)  # trial 3, higher-numbered: never seen by trial 2
    lag1, lag0 = make_pruner(DEADLINE, horizon=100, lag=1), make_pruner(DEADLINE, 100, lag=0)
    assert lag1.prune(study, _frozen(study, three))  # 25 > 2 × 10 (trial 0)
    assert not lag1.prune(study, _frozen(study, three, {20: 2.0}))  # 20 ≤ 2 × 10
    assert lag0.prune(study, _frozen(study, three, {20: 2.0}))  # lag 0: trial 1's 4 counts
    assert not lag0.prune(study, _frozen(study, three, {8: 2.0}))  # 8 ≤ 2 × 4: 3's 2 unseen


def test_the_median_reads_the_trials_history_alone() -> None:
    median = make_pruner(PrunerConfig(name="median", n_startup_trials=1), horizon=100, lag=1)
    study = optuna.create_study(direction="minimize")
    _trial(study, {5: 3.0}, told=3.0)  # trial 0
    _trial(study, {5: 0.1}, told=0.1)  # trial 1: not in trial 2's history at lag 1
    two = _trial(study, {5: 2.0})
    _trial(study, {5: 0.1}, told=0.1)  # trial 3: higher-numbered
    assert not median.prune(study, _frozen(study, two))  # 2.0 < trial 0's 3.0
    assert make_pruner(PrunerConfig(name="median", n_startup_trials=1), 100, lag=0).prune(
        study, _frozen(study, two)
    )  # lag 0: the median of trials 0 and 1 is below 2.0


def test_a_trial_is_never_pruned_at_the_evaluation_where_it_reached_the_target(
    tmp_path: Path,
) -> None:
    study = optuna.create_study(
        direction="minimize", pruner=make_pruner(DEADLINE, horizon=100, lag=0)
    )
    _trial(study, {5: 0.5}, told=5.0)  # the point's fewest steps to target: 5
    reporters = []
    for name in ("reached", "above"):
        folder = tmp_path / name
        folder.mkdir()
        trial = optuna.Trial(study, study.ask()._trial_id)
        reporter = TrialReporter(
            JsonlReporter(folder), trial, JobHeartbeat(folder, active=False), target=TARGET
        )
        reporter.begin(0)
        reporters.append(reporter)
    # step 20 > 2 × 5, but its loss is below the target: it reached it here
    assert reporters[0].report(20, {"eval_loss": 0.9}) == Action.CONTINUE
    assert reporters[1].report(20, {"eval_loss": 1.1}) == Action.PRUNE  # above it: pruned


def test_the_sampler_draws_from_its_history_alone_and_waits_for_it() -> None:
    dists = {"lr": od.FloatDistribution(1e-4, 1e-1, log=True)}
    study = optuna.create_study(direction="minimize")
    for i in range(6):
        study.tell(study.ask(dists), float(i))
    past = study.get_trials(deepcopy=False)
    running = study.ask(dists)  # trial 6, running: not part of any history

    def draw(trials: list[optuna.trial.FrozenTrial]) -> float:
        sampler = optuna.samplers.TPESampler(seed=3, n_startup_trials=2)
        return draw_from_history(sampler, trials, dists)["lr"]

    assert draw(past) == draw(past)
    assert draw(past) == draw([*past, study.get_trials(deepcopy=False)[running.number]])
    assert draw(past) != draw(past[:1])  # what it sees matters
    trials = study.get_trials(deepcopy=False)
    assert history_ready(trials, lag=1)  # trial 7 sees 0 … 5, all ended
    assert not history_ready(trials, lag=0)  # trial 7 would see trial 6, still running
    assert trials[-1].state == TrialState.RUNNING


def test_run_dirs_from_before_the_lag_resume_with_the_default_and_another_lag_is_refused() -> None:
    _, cfg, _ = prepare_study(["conf=smoke"], None)
    assert "lag" not in fingerprint(cfg)["sampler"]  # as in a run dir written before it
    _, lag0, _ = prepare_study(["conf=smoke", "sampler.lag=0"], None)
    assert fingerprint(lag0)["sampler"]["lag"] == 0  # a change the run dir check refuses


# A smoke-sized copy of batchsize_vs_steps_fast: adaptive batch sizes, transfer between
# points, deadline pruning, TPE, stop at target.
AXIS = "scientific.batch_size.adaptive"
SHRUNK = [
    "conf=smoke", "scientific.batch_size.values=[]", f"{AXIS}.low=4", f"{AXIS}.high=32",
    f"{AXIS}.max_points=3", "budget.trials_per_point=4", "budget.max_steps=30",
    "sampler.transfer=true", "objective.stop_at_target=true", "pruner.name=deadline",
    "pruner.deadline_factor=1.0", "train.eval_every=5", "train.devices=1",
    # a range wide enough for some trials to miss the target (the deadline prunes them), and
    # no no-progress rule, which would prune them first
    "nuisance.lr.low=1e-4", "budget.no_progress_by=null",
]  # fmt: skip


def _descendants(roots: list[int]) -> list[int]:
    """The processes of the trees under ``roots`` (themselves included), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        children.setdefault(int(stat[stat.rindex(")") + 2 :].split()[1]), []).append(int(entry))
    found, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


class _Stalls(threading.Thread):
    """Pauses one process of the studies at a time (SIGSTOP, 0.1-1 s, SIGCONT): what a loaded
    machine does to the order in which trials end, made harsher and at no CPU cost (a CPU
    burner beside a CPU-bound suite only slows the suite; benchmarks/repro_parallelism.py
    runs beside burners)."""

    def __init__(self, procs: list[subprocess.Popen[str]]) -> None:
        super().__init__(daemon=True)
        self.procs, self.stalls, self.done = procs, 0, threading.Event()
        self.rng = random.Random()

    def run(self) -> None:
        while not self.done.wait(self.rng.uniform(0.05, 0.3)):
            # Only under the studies still running: a finished one's pid is free, and with
            # pid_max 32768 a busy suite reuses it, so its "tree" would be another test's
            # processes (a stopped member of an orphaned process group gets SIGHUP: pausing
            # another test's double-forked daemon as its parent exits kills it).
            pids = _descendants([p.pid for p in self.procs if p.returncode is None])
            if not pids:
                continue
            victim = self.rng.choice(pids)
            try:
                os.kill(victim, signal.SIGSTOP)
            except ProcessLookupError:
                continue
            try:
                self.done.wait(self.rng.uniform(0.1, 1.0))
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(victim, signal.SIGCONT)
            self.stalls += 1


def _start(parallelism: int, run: Path) -> subprocess.Popen[str]:
    cmd = [SWEEP, "run", *SHRUNK, f"parallelism={parallelism}", f"run_dir={run}"]
    return subprocess.Popen(
        cmd, cwd=run.parent, env=user_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


@pytest.mark.slow
def test_the_same_trials_and_bcrit_at_parallelism_1_and_3_with_processes_paused_at_random(
    tmp_path: Path,
) -> None:
    # one job at a time, and as many at once as the study starts points (1, 2 and 4 before:
    # a third study's CPU for the same check)
    runs = {p: tmp_path / f"p{p}" for p in (1, 3)}
    procs = {p: _start(p, run) for p, run in runs.items()}
    stalls = _Stalls(list(procs.values()))
    stalls.start()
    try:
        for p, proc in procs.items():
            _, err = proc.communicate(timeout=540)
            assert proc.returncode == 0, (p, err[-3000:])
    finally:
        stalls.done.set()
        stalls.join()
    assert stalls.stalls >= 10  # the order of events was disturbed, many times over
    hashes = {p: params_hash(run) for p, run in runs.items()}
    assert len(set(hashes.values())) == 1, {p: trial_rows(r) for p, r in runs.items()}
    rows = trial_rows(runs[1])
    assert len(rows) >= 9 and any(r["state"] == "pruned" for r in rows), rows
    answers = {p: headline(analyze(load(run))).groups[0] for p, run in runs.items()}
    assert len({(a.value, tuple(a.ci)) for a in answers.values()}) == 1, answers
