"""The Hugging Face Transformers example (examples/hf_trainer/): an unmodified `Trainer`
script (HfArgumentParser flags, a GPT-2 built from a config, character ids of the shipped
text, its own checkpoints and resume) runs as a study end to end, read from the Trainer's
TensorBoard event files. One shared study (3 batch sizes × 2 trials, tens of steps, one trial
at a time, the deadline pruner) killed with its trainers once a trial has a checkpoint and
run again serves every check: a trial ends at the target (the script's own early stop), a
slower one is pruned by SIGTERM, the killed trial resumes from the Trainer's checkpoint with
records continuous in step, and `sweep report` fits S(B)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from framework_study import (
    FrameworkStudy,
    folders,
    logs,
    records,
    run_killed_and_resumed,
    status,
    trial_record,
)
from helpers import read_jsonl, run_sweep

from stepscale import rundir

pytestmark = pytest.mark.slow  # transformers comes with the dev extra: CI runs this

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "hf_trainer"
# Two learning rates far apart, each tried once at every point (the grid sampler, in an order
# its seed fixes): where the larger runs first, the smaller is slower and pruned. Sampled
# learning rates close together left the prune to an evaluation at which the slower trial
# also reached the target, where no trial is pruned (docs/science.md).
TINY = [
    "budget.trials_per_point=2",
    "sampler.lag=0",  # one trial at a time, each judged against every earlier one
    "sampler.name=grid",
    "nuisance.lr.type=categorical",
    "+nuisance.lr.choices=[0.01,0.001]",
]
TARGET = 3.0
EVERY = 10  # eval_steps = save_steps


def test_the_script_never_mentions_stepscale() -> None:
    assert "stepscale" not in (EXAMPLE / "train.py").read_text().lower()


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> FrameworkStudy:
    tmp = tmp_path_factory.mktemp("hf")
    args = ["run", "conf=hf_batchsize", "--config-dir", str(EXAMPLE), *TINY]
    args.append(f"run_dir={tmp / 'run'}")
    return run_killed_and_resumed(args, tmp, checkpointed)


def checkpointed(trial: Path) -> bool:
    """Whether the Trainer has written a checkpoint of ``trial`` whole (its state, written
    last, reads)."""
    try:
        return bool(
            json.loads((trial / "out" / f"checkpoint-{EVERY}" / "trainer_state.json").read_text())
        )
    except (OSError, ValueError):
        return False


def test_every_trial_ends_and_one_stops_at_the_target(study: FrameworkStudy) -> None:
    states = [trial_record(t)["state"] for t in folders(study.run_dir, "complete")]
    pruned = folders(study.run_dir, "pruned")
    assert len(states) + len(pruned) == 6, study.answer
    stopped = [
        t
        for t in folders(study.run_dir, "complete")
        if status(t)["steps_done"] < 200 and status(t)["steps_to_target"] is not None
    ]
    assert stopped, "no trial ended at the target"
    for trial in stopped:
        curve = records(trial)
        evals = [r for r in curve if r.get("eval_loss") is not None]
        assert evals[0]["step"] == 0  # eval_on_start: the initial loss
        assert evals[-1]["eval_loss"] <= TARGET < min(r["eval_loss"] for r in evals[:-1])
        assert status(trial)["steps_done"] == evals[-1]["step"]
        assert "stopping" in logs(trial, "out")  # the script's own callback


def test_a_slower_trial_is_pruned_by_sigterm(study: FrameworkStudy) -> None:
    pruned = folders(study.run_dir, "pruned")
    assert pruned, "no trial was pruned"
    for trial in pruned:
        steps = [r["step"] for r in records(trial)]
        assert status(trial)["state"] == "pruned" and status(trial)["steps_done"] == steps[-1]
        events = read_jsonl(trial / rundir.EVENTS_JSONL)
        assert {"event": "prune_signal", "signal": "SIGTERM"}.items() <= events[-1].items()


def test_the_killed_trial_resumes_from_the_trainers_checkpoint(study: FrameworkStudy) -> None:
    resumed = [t for t in study.interrupted if (t / "out" / f"checkpoint-{EVERY}").is_dir()]
    assert resumed, f"the kill found no trial with a checkpoint: {study.interrupted}"
    for trial in resumed:
        record = trial_record(trial)
        assert record["interruptions"] == 1 and record["attempts"] == 1, record
        events = [e["event"] for e in read_jsonl(trial / rundir.EVENTS_JSONL)]
        assert events[:2] == ["start", "resume"], events
        assert "resuming from" in logs(trial, "out")  # the Trainer loaded checkpoint-N
        assert len(list((trial / "out" / "runs").iterdir())) == 2  # one per process
        steps = [r["step"] for r in records(trial)]
        assert steps == list(range(0, steps[-1] + 1, EVERY)), steps  # once each, no gap
        assert all(r.get("eval_loss") is not None for r in records(trial))


def test_the_report_fits_s_of_b(study: FrameworkStudy) -> None:
    assert "B_crit" in study.answer
    res = run_sweep("report", str(study.run_dir), cwd=study.run_dir.parent)
    assert res.returncode == 0, res.stderr
    fits = json.loads((study.run_dir / "report" / "fits.json").read_text())
    assert fits["batch_unit"] == "sequences"
    fit = fits["steps"]["groups"][0]
    assert fit["batch_sizes"] == [8, 16, 32] and fit["not_reached"] == []
    assert math.isfinite(fit["b_crit"]) and fit["s_min"] > 0
