"""Small builders shared by the tests: tiny trainer configs, JSONL readers, and readers of
a study's trials (trial.json and Optuna's) with the exact-budget check."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from stepscale.models.config import TrainerConfig
from stepscale.reporters import Action, JsonlReporter, NullReporter

WALL_KEYS = ("wall_s", "steps_per_s")


# The test session's persistent compilation cache (set by conftest.py, one per worker).
TEST_COMPILE_CACHE = os.environ.get("STEPSCALE_TEST_COMPILE_CACHE", "")


def tiny_gpt(**overrides: Any) -> TrainerConfig:
    """A tiny GPT on the Markov source, one device, a few dozen steps."""
    cfg = TrainerConfig(name="t")
    cfg.model.size = "tiny"
    cfg.data.global_batch = 8
    cfg.data.seq_len = 16
    cfg.data.eval_examples = 32
    cfg.data.eval_batch = 16
    cfg.optimizer.lr = 3e-3
    cfg.schedule.warmup_steps = 4
    cfg.train.max_steps = 24
    cfg.train.log_every = 4
    cfg.train.eval_every = 8
    cfg.train.devices = 1
    cfg.train.compile_cache_dir = TEST_COMPILE_CACHE
    return _apply(cfg, overrides)


def tiny_nqm(**overrides: Any) -> TrainerConfig:
    """The noisy quadratic model with plain SGD."""
    cfg = TrainerConfig(name="nqm")
    cfg.model.name = "nqm"
    cfg.model.dim = 32
    cfg.data.name = "nqm"
    cfg.data.global_batch = 16
    cfg.data.eval_examples = 16
    cfg.data.eval_batch = 16
    cfg.optimizer.name = "sgd"
    cfg.optimizer.b1 = 0.0
    cfg.optimizer.lr = 0.5
    cfg.schedule.name = "constant"
    cfg.schedule.warmup_steps = None
    cfg.train.max_steps = 100
    cfg.train.log_every = 10
    cfg.train.eval_every = 10
    cfg.train.devices = 1
    cfg.train.compile_cache_dir = TEST_COMPILE_CACHE
    return _apply(cfg, overrides)


def shadowing_packages(folder: Path) -> Path:
    """Give ``folder`` its own ``models/``, ``analysis/`` and ``sweeps/`` packages that fail
    on import, as a user's project might have; returns ``folder``."""
    for name in ("models", "analysis", "sweeps"):
        (folder / name).mkdir(parents=True)
        (folder / name / "__init__.py").write_text(
            "raise ImportError('the user package shadowed ours')\n"
        )
    return folder


def _apply(cfg: TrainerConfig, overrides: dict[str, Any]) -> TrainerConfig:
    """Set ``section__field=value`` overrides (``data__global_batch=4``)."""
    for key, value in overrides.items():
        section, name = key.split("__")
        node = getattr(cfg, section)
        if not hasattr(node, name):
            raise AttributeError(key)
        setattr(node, name, value)
    return cfg


def job_events(folder: Path) -> list[str]:
    """The job events of a trial's events.jsonl (start, resume, stopped, …), without the
    training's own (loss and gradient-norm spikes)."""
    from stepscale.rundir import GRAD_NORM_SPIKE, LOSS_SPIKE

    records = read_jsonl(folder / "events.jsonl")
    return [r["event"] for r in records if r["event"] not in (LOSS_SPIKE, GRAD_NORM_SPIKE)]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every record of a metrics file."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def without_wall(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records with the wall-clock fields removed (they differ run to run)."""
    return [{k: v for k, v in r.items() if k not in WALL_KEYS} for r in records]


def trials_of(run_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """trial.json records by point."""
    out: dict[str, list[dict[str, Any]]] = {}
    for path in sorted((run_dir / "trials").glob("*/*/trial.json")):
        rec = json.loads(path.read_text())
        out.setdefault(rec["point"], []).append(rec)
    return out


def optuna_trials(run_dir: Path, name: str) -> dict[str, list[optuna.trial.FrozenTrial]]:
    """Optuna's trials by point label."""
    from optuna.storages.journal import JournalFileBackend

    storage = optuna.storages.JournalStorage(JournalFileBackend(str(run_dir / "study.journal")))
    out = {}
    for summary in optuna.get_all_study_summaries(storage):
        label = summary.study_name.split("/", 1)[1]
        out[label] = optuna.load_study(study_name=summary.study_name, storage=storage).get_trials()
    assert all(s.study_name.startswith(f"{name}/") for s in optuna.get_all_study_summaries(storage))
    return out


def assert_exact_budget(run_dir: Path, name: str, per_point: int, points: int) -> None:
    """Every point has exactly `per_point` final trials, each told once, none duplicated."""
    by_point = optuna_trials(run_dir, name)
    assert len(by_point) == points
    for label, trials in by_point.items():
        assert [t.number for t in trials] == list(range(per_point)), label
        assert all(
            t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL) for t in trials
        ), label
        records = trials_of(run_dir)[label]
        assert sorted(r["number"] for r in records) == list(range(per_point))
        assert all(r["state"] in ("complete", "pruned", "diverged", "failed") for r in records)


def wait_for(predicate: Any, timeout: float = 120.0) -> None:
    """Poll ``predicate`` until it holds (AssertionError after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


SWEEP = str(Path(sys.executable).with_name("sweep"))


def user_env() -> dict[str, str]:
    """The environment a user's shell has: no fake XLA devices, only the session's compile
    flags (tests/conftest.py: they change how fast a program compiles, not what it computes)."""
    return {**os.environ, "XLA_FLAGS": xla_flags()}


def xla_flags(devices: int | None = None) -> str:
    """``XLA_FLAGS`` for a process the tests start: ``devices`` fake CPU devices (XLA's
    default of one when None) and the session's compile flags (tests/conftest.py)."""
    fake = f"--xla_force_host_platform_device_count={devices} " if devices else ""
    return fake + os.environ.get("STEPSCALE_TEST_XLA_FLAGS", "")


def run_sweep(
    *args: str, cwd: Path, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The real `sweep` console script, to its end (``env``: added to the user's)."""
    return subprocess.run(
        [SWEEP, *args], cwd=cwd, env={**user_env(), **(env or {})}, capture_output=True,
        text=True, timeout=timeout,
    )  # fmt: skip


def start_sweep(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """The real `sweep` console script in its own process group (a kill of the group takes
    its workers and trainers along); ``env`` is added to the user's environment."""
    return subprocess.Popen(
        [SWEEP, *args], cwd=cwd, env={**user_env(), **(env or {})}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip


def output_of(proc: subprocess.Popen[str], timeout: float = 30) -> tuple[str, str]:
    """What ``proc`` printed, for an assertion's message, without ever waiting unboundedly:
    a process still running is SIGKILLed first (with its group, when it leads one), and a
    pipe that something it left behind still holds is read for at most ``timeout`` s."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # not a group leader: the process alone
            proc.kill()
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        return "", f"(its output was still held open {timeout} s after it ended)"


def reported(folder: Path, step: int) -> bool:
    """Has the trial in ``folder`` recorded ``step`` (or a later one) in metrics.jsonl?"""
    path = folder / "metrics.jsonl"
    return path.exists() and any(r["step"] >= step for r in read_jsonl(path))


class CrashAt(NullReporter):
    """A reporter that makes the run die (like a killed job) when it reaches ``step``;
    the steps before are written by ``inner``."""

    def __init__(self, inner: JsonlReporter, step: int) -> None:
        super().__init__()
        self.inner, self.step = inner, step

    def begin(self, step: int) -> None:
        self.inner.begin(step)

    def report(self, step: int, metrics: dict[str, Any]) -> Action:
        self.inner.report(step, metrics)
        if step >= self.step:
            raise RuntimeError("simulated crash")
        return Action.CONTINUE
