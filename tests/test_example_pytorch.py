"""The PyTorch example (examples/pytorch_mlp/): its batch-size study runs end to end and
reports a critical batch size, and a trial whose trainer is killed with SIGKILL is retried
and resumes from its checkpoint to the same result as a run that was never killed."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import read_jsonl, trials_of, user_env, wait_for

from stepscale import rundir

pytestmark = pytest.mark.slow  # torch comes with the dev extra: CI runs this

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "pytorch_mlp"
TRAIN_PY = EXAMPLE / "train.py"
SWEEP = str(Path(sys.executable).parent / "sweep")
STUDY = ["run", "conf=pytorch_batchsize", "--config-dir", str(EXAMPLE)]


def _env() -> dict[str, str]:
    return user_env()


def sweep(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The real console script."""
    return subprocess.run(
        [SWEEP, *args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout
    )


def test_the_study_runs_and_reports_a_critical_batch_size(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    # the preset's 4 batch sizes with 3 of its 6 trials each: the same answer for half the
    # suite's time (the full preset is what README's table times)
    res = sweep(*STUDY, "budget.trials_per_point=3", f"run_dir={run_dir}", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    records = [r for rs in trials_of(run_dir).values() for r in rs]
    assert len(records) == 12
    # A learning rate too high for the smallest batch may diverge: a result, not a failure.
    assert {r["state"] for r in records} <= {"complete", "pruned", "diverged"}, records
    assert all(any(r["state"] == "complete" for r in rs) for rs in trials_of(run_dir).values())
    res = sweep("report", str(run_dir), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    fits = json.loads((run_dir / "report" / "fits.json").read_text())
    fit = fits["steps"]["groups"][0]
    assert fit["not_reached"] == []  # every batch size reached the target
    low, high = fit["b_crit_ci"]
    assert math.isfinite(low) and math.isfinite(high) and low < fit["b_crit"] < high
    assert min(fit["batch_sizes"]) < fit["b_crit"] < max(fit["batch_sizes"])


def trainer_pid(trial: Path) -> int | None:
    """The process of the example's train.py that runs in ``trial`` (its cwd), if any."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if (
                str(TRAIN_PY).encode() in argv
                and Path(os.readlink(proc / "cwd")) == trial.resolve()
            ):
                return int(proc.name)
        except OSError:  # gone, or not ours to read
            continue
    return None


def test_a_killed_trainer_is_retried_and_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    trial = run_dir / "trials" / "batch_size=16" / "0"
    overrides = [
        "scientific.batch_size.values=[16]",
        "budget.trials_per_point=1",
        "parallelism=1",
        "trainer.config.train.sleep_s=0.01",  # ~4 s of training: time to kill it midway
        f"run_dir={run_dir}",
    ]
    output = tmp_path / "sweep.log"
    with open(output, "w") as out:
        proc = subprocess.Popen(
            [SWEEP, *STUDY, *overrides],
            cwd=tmp_path,
            env=_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: cleaned up at once on failure
        )
    try:
        wait_for(lambda: (trial / "checkpoints" / "last.pt").exists(), timeout=60)
        pid = trainer_pid(trial)
        assert pid is not None, "the trainer process was not found"
        os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, output.read_text()

    record = json.loads((trial / rundir.TRIAL_JSON).read_text())
    assert record["state"] == "complete" and record["attempts"] == 2, record
    assert len(record["failures"]) == 1  # the killed attempt
    events = read_jsonl(trial / rundir.EVENTS_JSONL)
    assert [e["event"] for e in events] == ["start", "resume"]
    assert events[1]["step"] > 0
    logs = "".join(p.read_text() for p in (trial / "logs").glob("*.out"))
    assert "resuming from the checkpoint of step" in logs
    metrics = read_jsonl(trial / rundir.METRICS_JSONL)
    steps = [r["step"] for r in metrics]
    assert steps == list(range(0, 401))  # strictly increasing, no duplicates, none missing

    # The resumed run is the run that was never killed: same eval losses at every step.
    alone = tmp_path / "alone"
    alone.mkdir()
    config = json.loads((trial / rundir.CONFIG_JSON).read_text())
    config["train"]["sleep_s"] = 0.0
    (alone / rundir.CONFIG_JSON).write_text(json.dumps(config))
    env = {k: v for k, v in _env().items() if not k.startswith("STEPSCALE_")}
    res = subprocess.run(
        [sys.executable, str(TRAIN_PY)], cwd=alone, env=env, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    expected = read_jsonl(alone / rundir.METRICS_JSONL)
    assert [r.get("eval_loss") for r in metrics] == [r.get("eval_loss") for r in expected]
