"""The Flax example (examples/flax_user_trainer/): a user's own Python training function, in
a project folder with its own ``models/`` package, run by the real ``sweep`` CLI from a copy
outside the repository — the study gives a finite B_crit; bad trainer settings are refused
before anything runs; a trainer that breaks the interface fails its trial, not the study."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import user_env

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "flax_user_trainer"
SWEEP = Path(sys.executable).parent / "sweep"
STUDY = ["conf=flax_batchsize", "--config-dir", "."]

BAD_TRAINER = """\
def main(config, reporter, trial_dir):
    reporter.begin(0)
    reporter.report(1, {"eval_loss": 1.0})
    return {"steps_done": 1}
"""


def sweep(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """The real console script, with the environment a user has (no test-only XLA flags)."""
    env = user_env()
    return subprocess.run(
        [str(SWEEP), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the example project outside the repository: the working directory holds
    its own ``models/`` and ``mytrainer/`` packages."""
    copy = tmp_path_factory.mktemp("flax_example") / "project"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("runs", "outputs", "__pycache__"))
    assert (copy / "models" / "mlp.py").is_file() and ROOT.resolve() not in copy.resolve().parents
    return copy


def test_the_study_of_a_flax_function_gives_a_finite_bcrit(project: Path) -> None:
    cache = f"trainer.config.train.compile_cache_dir={project.parent / 'jax_cache'}"
    res = sweep("run", *STUDY, cache, cwd=project)
    assert res.returncode == 0, res.stderr
    run_dir = project / "runs" / "flax_batchsize"
    records = [json.loads(p.read_text()) for p in run_dir.glob("trials/*/*/trial.json")]
    assert len(records) == 25
    failed = [r for r in records if r["state"] not in ("complete", "pruned")]
    assert not failed, failed
    for folder in run_dir.glob("trials/*/*"):
        status = json.loads((folder / "status.json").read_text())
        assert status["horizon_steps"] == 300 and "steps_to_target" in status  # from validate
        assert (folder / "checkpoint.npz").is_file()  # the trainer kept its checkpoint there
    res = sweep("report", "runs/flax_batchsize", cwd=project)
    assert res.returncode == 0, res.stderr
    fits = json.loads((run_dir / "report" / "fits.json").read_text())
    fit = fits["steps"]["groups"][0]
    low, high = fit["b_crit_ci"]
    assert all(math.isfinite(v) for v in (low, fit["b_crit"], high)), fit
    assert 8 < low < fit["b_crit"] < high < 2048, fit


@pytest.mark.parametrize(
    ("override", "names"),
    [
        ("trainer.target=nosuchmod.train:main", ["trainer.target", "nosuchmod"]),
        ("trainer.target=mytrainer.train:nosuchfunction", ["trainer.target", "nosuchfunction"]),
        ("nuisance.lr.path=optim.nosuchkey", ["nuisance.lr.path", "optim.nosuchkey"]),
        (  # the trainer's validate refuses the point
            "scientific.batch_size.values=[0,32]",
            ["batch_size=0", "train.batch_size must be at least 1"],
        ),
    ],
    ids=["no-module", "no-function", "no-such-key", "validate-refuses"],
)
def test_bad_trainer_settings_exit_2_with_a_message_and_write_nothing(
    project: Path, override: str, names: list[str]
) -> None:
    res = sweep("run", *STUDY, override, "run_dir=runs/refused", cwd=project)
    assert res.returncode == 2, res.stderr
    message = res.stderr.strip()
    assert message and "\n\n" not in message and "Traceback" not in message, message
    assert all(name in message for name in names), message
    assert not (project / "runs" / "refused").exists()


def test_a_status_without_state_fails_the_trial_and_the_study_goes_on(project: Path) -> None:
    (project / "badtrainer.py").write_text(BAD_TRAINER)
    res = sweep(
        "run", *STUDY, "trainer.target=badtrainer:main", "scientific.batch_size.values=[32]",
        "budget.trials_per_point=1", "retries=0", "run_dir=runs/bad_status", cwd=project,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    trial = json.loads((project / "runs/bad_status/trials/batch_size=32/0/trial.json").read_text())
    assert trial["state"] == "failed"
    assert "not a status" in trial["error"] and "lacking state" in trial["error"], trial["error"]
