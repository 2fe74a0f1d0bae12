"""The PyTorch Lightning example (examples/lightning_char/): an unmodified Lightning script
(argparse flags, a LightningModule built from torch.nn, character ids of the shipped text,
its own last.ckpt and `trainer.fit(ckpt_path="last")`) runs as a study end to end, read from
the metrics.csv of Lightning's CSVLogger. One shared study (3 batch sizes × 2 trials, tens of
steps, one trial at a time, the deadline pruner) killed with its trainers once a trial has a
checkpoint and run again serves every check: a trial ends at the target (Lightning's
EarlyStopping threshold), a slower one is pruned by SIGTERM, the killed trial resumes from
last.ckpt with records continuous in step, and `sweep report` fits S(B)."""

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

pytestmark = pytest.mark.slow  # lightning comes with the dev extra: CI runs this

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "lightning_char"
# Two learning rates far apart, each tried once at every point (the grid sampler, in an order
# its seed fixes): where the larger runs first, the smaller is slower and pruned. Two
# learning rates close together (Sobol points) left the prune to chance: which of them
# reached the target first moved with the step at which the first trial was killed.
TINY = [
    "budget.trials_per_point=2",
    "sampler.lag=0",  # one trial at a time, each judged against every earlier one
    "sampler.name=grid",
    "nuisance.lr.type=categorical",
    "+nuisance.lr.choices=[0.02,0.004]",
]
TARGET = 2.75
EVERY = 10  # val_check_interval = log_every_n_steps = checkpoint_every


def test_the_script_never_mentions_stepscale() -> None:
    assert "stepscale" not in (EXAMPLE / "train.py").read_text().lower()


def checkpointed(trial: Path) -> bool:
    """Whether Lightning has written last.ckpt for ``trial`` (it saves to a temporary file
    and renames it)."""
    return (trial / "out" / "checkpoints" / "last.ckpt").is_file()


def checkpoint_step(trial: Path) -> int | None:
    """The optimizer steps done at Lightning's last.ckpt of ``trial`` (None without one)."""
    import torch  # the dev extra's; only this module needs it

    if not checkpointed(trial):
        return None
    try:
        state = torch.load(trial / "out/checkpoints/last.ckpt", weights_only=False)
    except (OSError, RuntimeError, EOFError):  # replaced meanwhile
        return None
    return int(state["global_step"])


def checkpointed_after_its_eval(trial: Path) -> bool:
    """A checkpoint at the step of the last record read, an eval: the moment to kill the
    study. Lightning saves `every_n_train_steps` checkpoints at the end of the training
    batch, before that step's validation, and a run resumed from one does not validate that
    step again: killed between the two, the eval is lost with the framework's own process
    (its CSVLogger starts the file again on resume), whatever reads it. A kill after the
    last eval but once the next step's checkpoint was written lost that eval too (records
    10, 20, 40); so the kill waits for a checkpoint at the step of the last eval read, one
    above the target (a trial whose records reached it is complete: the job does not
    resume it)."""
    rows = records(trial) if checkpointed(trial) else []
    if not rows or rows[-1].get("eval_loss") is None or rows[-1]["eval_loss"] < TARGET:
        return False
    return checkpoint_step(trial) == rows[-1]["step"]


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> FrameworkStudy:
    tmp = tmp_path_factory.mktemp("lightning")
    args = ["run", "conf=lightning_batchsize", "--config-dir", str(EXAMPLE), *TINY]
    args.append(f"run_dir={tmp / 'run'}")
    return run_killed_and_resumed(args, tmp, checkpointed_after_its_eval)


def test_every_trial_ends_and_one_stops_at_the_target(study: FrameworkStudy) -> None:
    complete = folders(study.run_dir, "complete")
    assert len(complete) + len(folders(study.run_dir, "pruned")) == 6, study.answer
    stopped = [
        t
        for t in complete
        if status(t)["steps_done"] < 200 and status(t)["steps_to_target"] is not None
    ]
    assert stopped, "no trial ended at the target"
    for trial in stopped:
        evals = [r for r in records(trial) if r.get("eval_loss") is not None]
        # the step is the optimizer steps done: Lightning's own counter is one behind
        assert [r["step"] for r in evals] == list(range(EVERY, evals[-1]["step"] + 1, EVERY))
        assert evals[-1]["eval_loss"] <= TARGET < min(r["eval_loss"] for r in evals[:-1])
        assert status(trial)["steps_done"] == evals[-1]["step"]
        assert "Stopping threshold reached" in logs(trial, "err")  # EarlyStopping's message


def test_a_slower_trial_is_pruned_by_sigterm(study: FrameworkStudy) -> None:
    pruned = folders(study.run_dir, "pruned")
    assert pruned, "no trial was pruned"
    for trial in pruned:
        steps = [r["step"] for r in records(trial)]
        assert status(trial)["state"] == "pruned" and status(trial)["steps_done"] == steps[-1]
        events = read_jsonl(trial / rundir.EVENTS_JSONL)
        assert {"event": "prune_signal", "signal": "SIGTERM"}.items() <= events[-1].items()


def test_the_killed_trial_resumes_from_last_ckpt(study: FrameworkStudy) -> None:
    resumed = [t for t in study.interrupted if checkpointed(t)]
    assert resumed, f"the kill found no trial with a checkpoint: {study.interrupted}"
    for trial in resumed:
        record = trial_record(trial)
        assert record["interruptions"] == 1 and record["attempts"] == 1, record
        events = [e["event"] for e in read_jsonl(trial / rundir.EVENTS_JSONL)]
        assert events[:2] == ["start", "resume"], events
        assert "Restoring states from the checkpoint path" in logs(trial, "err")
        steps = [r["step"] for r in records(trial)]
        assert steps == list(range(EVERY, steps[-1] + 1, EVERY)), steps  # once each, no gap
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
