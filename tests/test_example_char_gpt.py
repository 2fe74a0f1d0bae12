"""The character-level GPT example (examples/char_gpt/): a plain PyTorch script that knows
nothing of stepscale runs as a study unmodified. One tiny study (3 batch sizes × 2 trials,
a 1-layer model, 60 steps, median pruning, one trial at a time so the second trial of a
point is compared with the first) serves every check: the settings arrive as the script's
typed `--key=value`, its `step N: train loss X, val loss Y` lines become the curves, a
pruned trial's process is sent SIGTERM and the trial is recorded as pruned, and `sweep
report` fits S(B) from the parsed curves."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import read_jsonl, trials_of, user_env

from stepscale import rundir

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "char_gpt"
SWEEP = str(Path(sys.executable).with_name("sweep"))
TINY = [
    "scientific.batch_size.values=[4,8,16]",
    "budget.trials_per_point=2",
    "sampler.lag=0",  # one trial at a time, each judged against every earlier one
    "budget.max_steps=60",
    "trainer.config.eval_interval=10",
    "trainer.config.eval_iters=4",
    "trainer.config.warmup_iters=5",
    "trainer.config.n_layer=1",
    "trainer.config.n_embd=32",
    "trainer.config.block_size=16",
    "nuisance.lr.low=3.0e-3",
    "objective.target_loss=3.4",
    "pruner.n_warmup_steps=0",
    "parallelism=1",
]


def sweep(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real console script."""
    env = user_env()
    return subprocess.run(
        [SWEEP, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_the_script_never_mentions_stepscale() -> None:
    assert "stepscale" not in (EXAMPLE / "train.py").read_text().lower()
    assert (ROOT / "models" / "data" / "corpora" / "tinyshakespeare.txt.gz").is_file()


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("char_gpt")
    run_dir = tmp / "run"
    args = ["run", "conf=char_gpt_batchsize", "--config-dir", str(EXAMPLE), *TINY]
    res = sweep(*args, f"run_dir={run_dir}", cwd=tmp)
    assert res.returncode == 0, res.stderr
    return run_dir


@pytest.mark.slow
def test_the_script_trains_as_a_study_with_its_own_arguments(study: Path) -> None:
    records = [r for rs in trials_of(study).values() for r in rs]
    assert len(records) == 6 and {r["state"] for r in records} <= {"complete", "pruned"}
    trial = study / "trials" / "batch_size=8" / "0"
    logs = "".join(p.read_text() for p in (trial / "logs").glob("*.out"))
    lr = json.loads((trial / rundir.CONFIG_JSON).read_text())["learning_rate"]
    # the script's own override lines: each type asserted by the script itself
    assert "Overriding: batch_size = 8\n" in logs and f"Overriding: learning_rate = {lr}\n" in logs
    assert "Overriding: max_iters = 60\n" in logs and "Overriding: n_layer = 1\n" in logs
    curve = read_jsonl(trial / rundir.METRICS_JSONL)
    assert [r["step"] for r in curve] == list(range(0, 61, 10))
    assert set(curve[0]) == {"step", "train_loss", "eval_loss"}
    assert curve[-1]["eval_loss"] < curve[0]["eval_loss"]
    assert (trial / "out" / "ckpt.pt").is_file()  # {trial_dir} in the command


@pytest.mark.slow
def test_a_pruned_trials_process_gets_sigterm_and_the_trial_is_pruned(study: Path) -> None:
    pruned = [
        study / "trials" / label / str(r["number"])
        for label, rs in trials_of(study).items()
        for r in rs
        if r["state"] == "pruned"
    ]
    assert pruned, "no trial was pruned"
    for trial in pruned:
        status = json.loads((trial / rundir.STATUS_JSON).read_text())
        steps = [r["step"] for r in read_jsonl(trial / rundir.METRICS_JSONL)]
        assert status["state"] == "pruned" and status["steps_done"] == steps[-1] < 60
        events = read_jsonl(trial / rundir.EVENTS_JSONL)
        assert {"event": "prune_signal", "signal": "SIGTERM", "step": steps[-1]}.items() <= (
            events[-1].items()
        )
        err = "".join(p.read_text() for p in (trial / "logs").glob("*.err"))
        assert "pruned; the trainer command was killed by SIGTERM" in err


@pytest.mark.slow
def test_the_report_fits_s_of_b_from_the_parsed_curves(study: Path) -> None:
    res = sweep("report", str(study), cwd=study.parent)
    assert res.returncode == 0, res.stderr
    fits = json.loads((study / "report" / "fits.json").read_text())
    assert fits["batch_unit"] == "sequences"
    fit = fits["steps"]["groups"][0]
    assert fit["batch_sizes"] == [4, 8, 16]
    assert math.isfinite(fit["b_crit"]) and math.isfinite(fit["s_min"]) and fit["s_min"] > 0
