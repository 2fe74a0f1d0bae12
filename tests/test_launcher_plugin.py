"""A launcher of one's own is one module: a `Launcher` subclass with its config schema (a
`LauncherConfig` subclass holding its own keys), one `register_launcher`, and its
``launcher/<name>.yaml`` (``defaults: [<name>_schema, _self_]``). Here the test registers a
toy launcher that runs each trial as a plain subprocess (no submitit), runs a small study
of the NumPy example through it, and the exact budget is met; the toy's own key composes,
another launcher's key is refused naming both."""

from __future__ import annotations

import pickle
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import assert_exact_budget, read_jsonl, trials_of

from stepscale.cli.main import main
from stepscale.sweeps.launch import registry
from stepscale.sweeps.launch.base import Launcher
from stepscale.sweeps.launch.registry import register_launcher
from stepscale.sweeps.study import launcher_schema
from stepscale.sweeps.study.launcher_schema import LauncherConfig

ROOT = Path(__file__).resolve().parents[1]

# The job's side: unpickle ``fn, args``, run it, leave the outcome where submitit would.
_JOB = """
import pickle, sys, traceback
with open(sys.argv[1], "rb") as f:
    fn, args = pickle.load(f)
try:
    outcome = ("success", fn(*args))
except BaseException:
    traceback.print_exc()
    outcome = ("error", traceback.format_exc())
with open(sys.argv[2], "wb") as f:
    pickle.dump(outcome, f)
"""


@dataclass
class ToyLauncherConfig(LauncherConfig):
    """The toy's schema: the shared keys and one of its own."""

    name: str = "toy"
    label: str = "toy"  # written into each job's log, to show the key reached the launcher


class ToyHandle:
    """A trial's subprocess."""

    index = None

    def __init__(self, proc: subprocess.Popen[bytes], logs: Path, job_id: str) -> None:
        self.proc, self.files, self.job_id = proc, logs, job_id
        self.log = logs / f"{job_id}_0_log.err"
        self.result = logs / f"{job_id}_0_result.pkl"

    def done(self) -> bool:
        return self.proc.poll() is not None

    def outcome(self) -> tuple[bool, Any]:
        self.proc.wait()
        try:
            kind, payload = pickle.loads(self.result.read_bytes())
        except OSError:
            return False, RuntimeError(f"the job ended with code {self.proc.returncode}")
        return (True, payload) if kind == "success" else (False, RuntimeError(payload))

    def cancel(self) -> None:
        self.proc.terminate()


class ToyLauncher(Launcher):
    """Each trial in a subprocess of its own, started in the trial's folder."""

    name = "toy"
    config = ToyLauncherConfig
    child_jobs = True

    def submit(
        self,
        folder: Path,
        fn: Callable[..., Any],
        *args: Any,
        name: str = "stepscale",
        key: str | None = None,
    ) -> ToyHandle:
        logs = folder / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        job_id = f"toy{len(list(logs.glob('*.job')))}"
        (logs / f"{job_id}.job").write_bytes(pickle.dumps((fn, args)))
        err = logs / f"{job_id}_0_log.err"
        with open(logs / f"{job_id}_0_log.out", "w") as out, open(err, "w") as errors:
            out.write(f"{self.cfg.label}\n")
            out.flush()
            argv = [sys.executable, "-c", _JOB, str(logs / f"{job_id}.job")]
            proc = subprocess.Popen(
                [*argv, str(logs / f"{job_id}_0_result.pkl")], cwd=folder, stdout=out,
                stderr=errors,
            )  # fmt: skip
        return ToyHandle(proc, logs, job_id)


@pytest.fixture
def toy_registered() -> Iterator[None]:
    """Register the toy launcher for one test (the registries as they were afterwards)."""
    launchers = dict(registry.REGISTERED)
    schemas = dict(launcher_schema._SCHEMAS)
    register_launcher(ToyLauncher)  # the one registration
    try:
        yield
    finally:
        registry.REGISTERED.clear()
        registry.REGISTERED.update(launchers)
        launcher_schema._SCHEMAS.clear()
        launcher_schema._SCHEMAS.update(schemas)


def _config_dir(tmp_path: Path) -> Path:
    """The NumPy example's folder plus the toy's group file."""
    folder = tmp_path / "numpy_regression"
    shutil.copytree(ROOT / "examples" / "numpy_regression", folder)
    (folder / "launcher").mkdir()
    (folder / "launcher" / "toy.yaml").write_text(
        "# A subprocess per trial (tests/test_launcher_plugin.py).\n"
        "defaults:\n  - toy_schema\n  - _self_\n\nname: toy\n"
    )
    return folder


def test_a_launcher_registered_by_a_test_runs_a_study_to_its_exact_budget(
    tmp_path: Path, toy_registered: None, capsys: pytest.CaptureFixture[str]
) -> None:
    config_dir = _config_dir(tmp_path)
    run_dir = tmp_path / "run"
    args = [
        "run", "conf=numpy_batchsize", "--config-dir", str(config_dir), "launcher=toy",
        "launcher.label=from-the-config", "scientific.batch_size.values=[8,32]",
        "budget.trials_per_point=2", "budget.max_steps=40", "parallelism=2",
        f"run_dir={run_dir}",
    ]  # fmt: skip

    assert main([*args, "--cfg"]) == 0
    shown = capsys.readouterr().out
    assert "label: from-the-config" in shown and "pin_cpus" not in shown

    assert main(args) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert_exact_budget(run_dir, "numpy_batchsize", per_point=2, points=2)
    records = [r for rs in trials_of(run_dir).values() for r in rs]
    assert len(records) == 4 and all(r["job_id"].startswith("toy") for r in records)
    for r in records:
        folder = run_dir / "trials" / r["point"] / str(r["number"])
        assert (folder / "logs" / f"{r['job_id']}_0_log.out").read_text() == "from-the-config\n"
        assert read_jsonl(folder / "metrics.jsonl")  # the trainer ran in the trial's folder

    # Another launcher's key is refused before anything is written, naming both.
    refused = tmp_path / "refused"
    code = main([*args[:-1], "launcher.partition=gpu", f"run_dir={refused}"])
    err = capsys.readouterr().err
    assert code == 2 and "launcher.partition" in err and "launcher=toy" in err, err
    assert "launcher=slurm" in err and not refused.exists()


def test_queues_asked_of_a_one_trial_per_job_launcher_run_as_jobs_of_their_own(
    tmp_path: Path,
) -> None:
    """The interface's default `submit_queues`: each queued trial is its own job, and the
    handles come back in the queues' shape, each job having run its own call."""
    from stepscale.sweeps.launch.base import JobRequest

    launcher = ToyLauncher(ToyLauncherConfig())
    queues = [
        [JobRequest(tmp_path / f"q{q}t{t}", print, (f"q{q}t{t}",)) for t in range(n)]
        for q, n in enumerate((2, 1))
    ]
    handles = launcher.submit_queues(queues, tmp_path / "jobs")
    assert [len(h) for h in handles] == [2, 1]
    for queue, queue_handles in zip(queues, handles, strict=True):
        for request, handle in zip(queue, queue_handles, strict=True):
            ok, _ = handle.outcome()
            assert ok and handle.files == request.folder / "logs"
