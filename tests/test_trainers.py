"""Any training code as a trainer: the built-in one unchanged, command trainers in any
language (the NumPy example, shell scripts), the pieces the job completes a trainer's
status with, and the errors a bad trainer setting gets."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import assert_exact_budget, read_jsonl, trials_of, user_env, wait_for

from stepscale import rundir
from stepscale.errors import UsageError
from stepscale.sweeps.job.command import override_value
from stepscale.sweeps.trainers.final_status import complete_status, crossing
from stepscale.sweeps.trainers.metrics_file import (
    MalformedRecord,
    MetricsTail,
    last_step,
    normalized_records,
    parse_record,
)
from stepscale.sweeps.trainers.spec import COMMAND, read_trainer

ROOT = Path(__file__).resolve().parent.parent
SWEEP = str(Path(sys.executable).with_name("sweep"))
GOLDEN = ROOT / "tests" / "golden" / "smoke" / "trials.json"
NUMPY = ROOT / "examples" / "numpy_regression"


def sweep(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The real console script."""
    env = user_env()
    return subprocess.run(
        [SWEEP, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


# ---------------------------------------------------------------- status from eval losses


def test_the_status_is_completed_from_eval_losses_and_keeps_what_the_trainer_gave() -> None:
    records = [
        {"step": 0, "eval_loss": 4.0},
        {"step": 5, "train_loss": 3.0},
        {"step": 10, "eval_loss": 2.0},
        {"step": 20, "eval_loss": 0.5},
        {"step": 30, "eval_loss": 0.7},
    ]
    full = complete_status({"state": "complete", "steps_done": 30}, records, 40, 1.0)
    assert full["steps_to_target"] == 20
    # log-linear between (10, 2.0) and (20, 0.5): log 2 / log 4 of the way
    assert full["steps_to_target_interp"] == pytest.approx(15.0)
    assert full["best_eval_loss"] == 0.5 and full["final_eval_loss"] == 0.7
    assert full["horizon_steps"] == 40 and full["target_loss"] == 1.0
    assert full["diverged_step"] is None and full["state"] == "complete"
    given = {"state": "complete", "steps_done": 30, "steps_to_target": 7, "horizon_steps": 99}
    kept = complete_status(given, records, 40, 1.0)
    assert kept["steps_to_target"] == 7 and kept["horizon_steps"] == 99


def test_a_non_finite_eval_loss_is_a_divergence_and_never_reaches_the_target() -> None:
    records = [{"step": 0, "eval_loss": 4.0}, {"step": 10, "eval_loss": None}]
    full = complete_status({"state": "complete", "steps_done": 10}, records, 40, 1.0)
    assert full["state"] == "diverged" and full["diverged_step"] == 10
    assert full["steps_to_target"] is None and full["best_eval_loss"] == 4.0
    assert crossing([(0, 4.0), (10, math.nan), (20, 0.1)], 1.0) == (None, None)
    assert crossing([(0, 0.5)], 1.0) == (0, 0.0)


# -------------------------------------------------------------------- metrics.jsonl


def test_a_resumed_run_replaces_the_records_it_redoes_and_one_step_is_one_record(
    tmp_path: Path,
) -> None:
    path = tmp_path / "metrics.jsonl"
    lines = [
        {"step": 0, "eval_loss": 3},
        {"step": 10, "train_loss": 2},
        {"step": 10, "eval_loss": 2.5},  # a second report of step 10
        {"step": 20, "eval_loss": 2},
        {"step": 30, "eval_loss": 1},  # lost: the run resumes from its checkpoint at 20
        {"step": 30, "eval_loss": 1.5},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"step": 40, "ev')
    records = normalized_records(path, rewrite=True)
    assert [r["step"] for r in records] == [0, 10, 20, 30]
    assert records[1] == {"step": 10, "train_loss": 2, "eval_loss": 2.5}
    assert records[3]["eval_loss"] == 1.5
    assert read_jsonl(path) == records and last_step(path) == 30
    lines = [{"step": 0}, {"step": 10}, {"step": 20}, {"step": 5, "eval_loss": 9}]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert [r["step"] for r in normalized_records(path)] == [0, 5]


def test_the_tail_follows_a_growing_file_and_names_a_malformed_line(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    tail = MetricsTail(path)
    assert tail.read_new() == []
    with open(path, "a") as f:
        f.write('{"step": 1}\n{"step": 2, "eval')
    assert tail.read_new() == [{"step": 1}]
    with open(path, "a") as f:
        f.write('_loss": 1.0}\n')
    assert tail.read_new() == [{"step": 2, "eval_loss": 1.0}]
    replaced = tmp_path / "new"
    replaced.write_text('{"step": 1}\n')
    os.replace(replaced, path)  # a trainer that resumed and rewrote the file
    assert tail.read_new() == [{"step": 1}]
    with open(path, "a") as f:
        f.write("loss 0.5\n")
    with pytest.raises(MalformedRecord, match="line 2: not JSON") as err:
        tail.read_new()
    assert err.value.lineno == 2
    for bad in ('{"eval_loss": 1}', '{"step": "3"}', "[1, 2]", '{"step": true}'):
        with pytest.raises(MalformedRecord, match="line 7"):
            parse_record(bad, 7)


# ---------------------------------------------------------------- the trainer setting


def test_command_trainer_settings_are_read_and_checked(tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    spec = read_trainer({"command": ["train.sh", "--fast"], "config": {"a": 1}}, [tmp_path])
    assert spec.kind == COMMAND and spec.command == (str(script), "--fast")
    spec = read_trainer({"command": ["{python}", "train.sh"]}, [tmp_path])
    assert spec.command == (sys.executable, str(script))
    script.chmod(0o644)
    with pytest.raises(UsageError, match="not executable"):
        read_trainer({"command": ["train.sh"]}, [tmp_path])
    with pytest.raises(UsageError, match="not a program on PATH"):
        read_trainer({"command": ["no-such-program-xyz"]}, [tmp_path])
    with pytest.raises(UsageError, match="exactly one of"):
        read_trainer({"command": ["sh"], "target": "a:b"}, [tmp_path])
    with pytest.raises(UsageError, match=r"trainer\.keys: unknown lr"):
        read_trainer({"target": "a:b", "keys": {"lr": "x"}}, [tmp_path])
    assert read_trainer(None).kind == "builtin"
    assert read_trainer("models.train:train").kind == "builtin"  # run dirs of old versions


def test_overrides_are_written_as_hydra_reads_them() -> None:
    values = [0.001, 3, True, None, "adamw", "a b", [1, 2], {"x": 1}]
    got = [override_value(v) for v in values]
    assert got == ["0.001", "3", "true", "null", "adamw", "'a b'", "[1,2]", '{"x":1}']


# --------------------------------------------------------------- the built-in trainer


@pytest.mark.slow
def test_the_built_in_smoke_study_gives_the_trials_recorded_before_the_trainer_interface(
    tmp_path: Path,
) -> None:
    # Recorded from `sweep run conf=smoke parallelism=1` before any trainer could be plugged
    # in: the same trials, the same values, the same steps; the same losses up to float drift.
    # XLA compiles for the host CPU's instruction set, so two machines of one kind (AVX2 vs
    # AVX-512) give losses that differ in the last bits, and 30 steps at a high LR grow that
    # to ~1% (measured: 1.3284 vs 1.3101 final eval loss, the same trial, the same code).
    # On one machine a re-run is bit-identical (test_train.py checks that).
    # sampler.lag=0: each trial drawn from every earlier trial of its point, as then.
    run = ("run", "conf=smoke", "parallelism=1", "sampler.lag=0", f"run_dir={tmp_path / 'run'}")
    res = sweep(*run, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    expected = json.loads(GOLDEN.read_text())
    got = {}
    for folder in sorted((tmp_path / "run" / "trials").glob("*/*")):
        record = json.loads((folder / "trial.json").read_text())
        status = json.loads((folder / "status.json").read_text())
        got[record["trial"]] = record, status
    assert sorted(got) == sorted(expected)
    for trial, want in expected.items():
        record, status = got[trial]
        assert record["nuisance"]["lr"] == pytest.approx(want["nuisance"]["lr"], rel=1e-12)
        assert (record["state"], record["objective"]) == (want["state"], want["objective"])
        assert status["steps_done"] == want["steps_done"]
        for key in ("steps_to_target_interp", "final_eval_loss"):
            expect = None if want[key] is None else pytest.approx(want[key], rel=0.05)
            assert status[key] == expect, (trial, key)


# ------------------------------------------------------------ command trainers in studies


NUMPY_SMALL = (
    "conf=numpy_batchsize",
    "--config-dir",
    str(NUMPY),
    "scientific.batch_size.values=[4,16,64,256]",
    "budget.trials_per_point=5",
)


@pytest.mark.slow
def test_numpy_command_trainer_study_survives_a_kill_and_reports_bcrit(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = [SWEEP, "run", *NUMPY_SMALL, f"run_dir={run_dir}"]
    proc = subprocess.Popen(
        args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    wait_for(lambda: len(list(run_dir.glob("trials/*/*/status.json"))) >= 6)
    os.killpg(proc.pid, signal.SIGKILL)  # the orchestrator and its trainer processes at once
    proc.wait()
    res = sweep("run", *NUMPY_SMALL, f"run_dir={run_dir}", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert_exact_budget(run_dir, "numpy_batchsize", per_point=5, points=4)
    records = [r for rs in trials_of(run_dir).values() for r in rs]
    # no trial failed; a too-high LR ends above its first loss: diverged (told 2 × horizon)
    assert {r["state"] for r in records} <= {"complete", "pruned", "diverged"}, records
    for folder in run_dir.glob("trials/*/*"):
        steps = [r["step"] for r in read_jsonl(folder / rundir.METRICS_JSONL)]
        assert steps == sorted(set(steps)), folder  # a killed trial resumed cleanly
        status = json.loads((folder / rundir.STATUS_JSON).read_text())
        assert status["horizon_steps"] == 300 and "steps_to_target" in status
    res = sweep("report", str(run_dir), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    fits = json.loads((run_dir / "report" / "fits.json").read_text())
    assert fits["batch_unit"] == "examples"
    fit = fits["steps"]["groups"][0]
    low, high = fit["b_crit_ci"]
    assert math.isfinite(low) and math.isfinite(high) and low < fit["b_crit"] < high


@pytest.mark.slow
def test_a_pruned_command_trainer_stops_early(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    res = sweep(
        "run", *NUMPY_SMALL[:3], "scientific.batch_size.values=[16]", "budget.trials_per_point=6",
        "sampler.name=random", "pruner.name=median", "pruner.n_startup_trials=1",
        "trainer.config.train.sleep_s=0.01",  # 3 s a trial: time to hear the pruner
        "parallelism=1", f"run_dir={run_dir}", cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    pruned = [r for r in trials_of(run_dir)["batch_size=16"] if r["state"] == "pruned"]
    assert pruned, "no trial was pruned"
    for record in pruned:
        folder = run_dir / "trials" / "batch_size=16" / str(record["number"])
        status = json.loads((folder / rundir.STATUS_JSON).read_text())
        steps = [r["step"] for r in read_jsonl(folder / rundir.METRICS_JSONL)]
        assert status["state"] == "pruned" and status["steps_done"] == steps[-1] < 300
        assert json.loads((folder / rundir.CONTROL_JSON).read_text())["action"] == "prune"


SHELL_TRAINER = """#!/bin/sh
# A trainer in shell: it reads its settings as key=value arguments and appends JSON lines.
for arg in "$@"; do case "$arg" in mode=*) mode="${arg#mode=}";; lr=*) lr="${arg#lr=}";; esac; done
if [ "$mode" = fail_once ] && [ "$STEPSCALE_ATTEMPT" = 1 ]; then echo "crash" >&2; exit 3; fi
echo '{"step": 0, "eval_loss": 2.0}' >> metrics.jsonl
if [ "$mode" = garbage ]; then echo 'loss=1.0' >> metrics.jsonl; sleep 30; fi
echo '{"step": 5, "eval_loss": 1.0}' >> metrics.jsonl
echo '{"step": 10, "eval_loss": 0.4}' >> metrics.jsonl
"""

SHELL_STUDY = """# @package _global_
trainer:
  command: [train.sh]
  config: {mode: ok, lr: 0.1}
scientific:
  mode: {path: mode, values: [ok, garbage, fail_once]}
nuisance:
  lr: {path: lr, type: float, low: 0.01, high: 1.0, scale: log}
budget: {trials_per_point: 1, max_steps: 10}
objective: {kind: steps_to_target, target_loss: 0.5}
retries: 1
"""


@pytest.mark.slow
def test_a_shell_trainer_a_malformed_record_and_a_crash_are_handled(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "shell.yaml").write_text(SHELL_STUDY)
    script = tmp_path / "train.sh"
    script.write_text(SHELL_TRAINER)
    script.chmod(0o755)
    run_dir = tmp_path / "run"
    res = sweep("run", "conf=shell", "--config-dir", ".", f"run_dir={run_dir}", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    trials = {label: rs[0] for label, rs in trials_of(run_dir).items()}
    ok = run_dir / "trials" / "mode=ok" / "0"
    assert trials["mode=ok"]["state"] == "complete"
    status = json.loads((ok / rundir.STATUS_JSON).read_text())
    assert status["steps_done"] == 10 and status["steps_to_target"] == 10
    assert status["steps_to_target_interp"] == pytest.approx(5 + 5 * math.log(2) / math.log(2.5))
    assert json.loads((ok / rundir.CONFIG_JSON).read_text())["mode"] == "ok"
    bad = trials["mode=garbage"]  # the study went on; the trial names the line
    assert bad["state"] == "failed" and "metrics.jsonl line 2: not JSON" in bad["error"]
    retried = trials["mode=fail_once"]  # a non-zero exit is a failed attempt, retried
    assert retried["state"] == "complete" and retried["attempts"] == 2
    assert "exited with code 3" in retried["failures"][0]


def test_bad_command_trainer_settings_exit_2_and_write_nothing(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "shell.yaml").write_text(SHELL_STUDY)
    (tmp_path / "train.sh").write_text(SHELL_TRAINER)  # not executable
    cases = {
        "not executable": [],
        "unknown trainer key 'nosuch'": ["nuisance.lr.path=nosuch"],
        "is not a program on PATH": ["trainer.command=[no-such-trainer-xyz]"],
    }
    for message, extra in cases.items():
        if message != "not executable":
            (tmp_path / "train.sh").chmod(0o755)
        run_dir = tmp_path / "run"
        res = sweep(
            "run", "conf=shell", "--config-dir", ".", f"run_dir={run_dir}", *extra, cwd=tmp_path
        )
        assert res.returncode == 2, (message, res.stderr)
        assert message in res.stderr and "Traceback" not in res.stderr
        assert not run_dir.exists()


WANDB_SWEEP = """method: bayes
parameters:
  optim.learning_rate: {distribution: log_uniform_values, min: 0.0001, max: 0.1}
  batch_size: {values: [16, 32, 64]}
  dropout: {distribution: uniform, min: 0.0, max: 0.5}
"""


def test_an_import_for_your_own_trainer_keeps_every_parameter_at_its_own_key(
    tmp_path: Path,
) -> None:
    (tmp_path / "sweep.yaml").write_text(WANDB_SWEEP)
    (tmp_path / "conf").mkdir()
    conf = tmp_path / "conf" / "imported.yaml"
    res = sweep(
        "import", "sweep.yaml", "--format", "wandb", "--trainer", "{python} train.py",
        "-o", str(conf), cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "left out" not in res.stderr
    (tmp_path / "train.py").write_text("")
    res = sweep(
        "run", "conf=imported", "--config-dir", ".", "budget.max_steps=10", "--dry-run",
        "--json", cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert [p["point"] for p in plan["points"]] == [
        "batch_size=16",
        "batch_size=32",
        "batch_size=64",
    ]
    space = sweep("export", "conf=imported", "--config-dir", ".", cwd=tmp_path)
    assert space.returncode == 0, space.stderr
    params = {p["name"]: p for p in json.loads(space.stdout)["parameters"]}
    assert params["optim_learning_rate"]["path"] == "optim.learning_rate"
    assert params["optim_learning_rate"]["quantity"] == "learning_rate"
    assert params["batch_size"]["quantity"] == "batch_size"
    assert params["dropout"]["path"] == "dropout"
