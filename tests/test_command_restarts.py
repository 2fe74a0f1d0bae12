"""A command trainer restarted before a loss spike (``train.on_spike.policy=restart`` with
``trainer.restart_args``; sweeps/job/command_restarts.py), end to end through `sweep run`.

The script is a one-weight regression whose data stream holds one poisoned batch (index
30): training on it throws the weight so far that the run cannot reach its target in its
horizon. Under the policy the job ends the script at the spike, runs it again from its
checkpoint at least R steps back with K batches skipped, and the trial reaches its target;
a job killed in the middle of that restart resumes to the same numbers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import output_of, read_jsonl, wait_for

SWEEP = str(Path(sys.executable).with_name("sweep"))

# A script nobody changed for stepscale beyond what a restartable trainer has: its data
# stream is a function of the step and the batches skipped, it checkpoints every
# --every steps and keeps them, and it resumes from a chosen checkpoint (--restart_step,
# dropping the later ones) or from its newest (--resume).
SCRIPT = """import glob, json, os, sys, time
args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
lr, steps, every = float(args["lr"]), int(args["steps"]), int(args["every"])
poison, skip = int(args["poison"]), int(args.get("skip", 0))

def batch(i):  # the data stream: batch i, a pure function of i
    x = 1.0 + 0.01 * (i * 7 % 10)
    return x, 2.0 * x + (1.0e4 if i == poison else 0.0)

def emit(step, **values):  # printed lines, or its own metrics.jsonl (METRICS_OUT=jsonl)
    if os.environ.get("METRICS_OUT") == "jsonl":
        with open("metrics.jsonl", "a") as f:
            f.write(json.dumps({"step": step, **values}) + "\\n")
    else:
        print(f"step={step} " + " ".join(f"{k}={v:.6g}" for k, v in values.items()), flush=True)

def save(step, w):
    with open(f"ckpt_{step}.json", "w") as f:
        json.dump({"step": step, "w": w}, f)

def saved():
    return sorted(int(p[5:-5]) for p in glob.glob("ckpt_*.json"))

start, w = 0, 0.0
if "restart_step" in args:
    start = int(args["restart_step"])
    for s in saved():
        if s > start:
            os.remove(f"ckpt_{s}.json")  # the abandoned path's checkpoints
    if os.path.exists(os.environ.get("HOLD_FILE", "/nonexistent")):
        time.sleep(60)  # the test kills the job here, in the middle of the restart
elif "resume" in args and saved():
    start = saved()[-1]
if start:
    with open(f"ckpt_{start}.json") as f:
        w = json.load(f)["w"]
else:
    save(0, w)
    emit(0, eval_loss=(w - 2.0) ** 2)
for u in range(start, steps):
    x, y = batch(u + skip)
    loss = (w * x - y) ** 2
    w -= lr * 2.0 * (w * x - y) * x
    s = u + 1
    emit(s, loss=loss)
    if s % 5 == 0:
        emit(s, eval_loss=(w - 2.0) ** 2)
    if s % every == 0:
        save(s, w)
"""

STUDY = """# @package _global_
trainer:
  command: ["{python}", train.py, "--steps={max_steps}", "--every=10", "--poison=30"]
  args: {style: "--key=value"}
  config: {lr: 0.02, steps: 100, unused: 0}
  keys: {max_steps: steps}
  metrics: {source: stdout, format: kv_equals}
  resume_args: ["--resume=1", "--skip={batches_skipped}"]
  restart_args: ["--restart_step={restart_step}", "--skip={batches_skipped}"]
  checkpoint_every: 10
scientific:
  lr: {path: lr, values: [0.02]}
nuisance:
  seed_only: {path: unused, type: categorical, choices: [0]}
train:
  spike_window: 10
  spike_factor: 3.0
  on_spike: {policy: restart, rewind_steps: 5, skip_batches: 15, max_restarts: 2}
budget: {trials_per_point: 1, max_steps: 100}
objective: {kind: steps_to_target, target_loss: 0.01}
sampler: {name: grid}
retries: 0
parallelism: 1
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("restarts")
    (root / "conf").mkdir()
    (root / "conf" / "restarts.yaml").write_text(STUDY)
    (root / "train.py").write_text(SCRIPT)
    return root


def _run(project: Path, run_dir: Path, *extra: str, **kw: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SWEEP, "run", "conf=restarts", "--config-dir", str(project),
         f"run_dir={run_dir}", *extra],
        cwd=project, capture_output=True, text=True, timeout=300, **kw,
    )  # fmt: skip


def _trial(run_dir: Path) -> Path:
    (folder,) = run_dir.glob("trials/*/0")
    return folder


@pytest.mark.slow
def test_a_poisoned_batch_is_skipped_by_a_restart_and_a_killed_restart_resumes_the_same(
    project: Path, tmp_path: Path
) -> None:
    # Off: the spike throws the weight away and the target is out of reach.
    off = tmp_path / "off"
    res = _run(project, off, "train.on_spike.policy=off")
    assert res.returncode == 0, res.stderr
    status = json.loads((_trial(off) / "status.json").read_text())
    losses = {
        r["step"]: r["loss"] for r in read_jsonl(_trial(off) / "metrics.jsonl") if "loss" in r
    }
    assert losses[31] > 1e6 and status["steps_to_target"] is None, status
    assert "spike_restarts" not in status or status["spike_restarts"] is None

    # On: the spike at step 31 (batch 30) sends the script back to its checkpoint of step
    # 20 (the newest at least R = 5 steps before) with K = 15 batches skipped (batches
    # 20…34, the poisoned one among them): it is never trained on again, and the target
    # is reached.
    on = tmp_path / "on"
    res = _run(project, on)
    assert res.returncode == 0, res.stderr
    folder = _trial(on)
    status = json.loads((folder / "status.json").read_text())
    assert status["state"] == "complete" and status["steps_to_target"] is not None, status
    assert status["spike_restarts"] == 1 and status["batches_skipped"] == 15
    assert status["steps_redone"] == 11 and status["steps_spent"] == status["steps_done"] + 11
    (restart,) = [e for e in read_jsonl(folder / "events.jsonl") if e["event"] == "spike_restart"]
    assert (restart["step"], restart["from_step"], restart["trigger"]) == (31, 20, "loss_spike")
    records = read_jsonl(folder / "metrics.jsonl")
    steps = [r["step"] for r in records]
    assert steps == sorted(steps) and max(r.get("loss", 0) for r in records) < 100, steps
    assert sorted(p.name for p in folder.glob("ckpt_*.json")) == sorted(
        f"ckpt_{s}.json" for s in range(0, 101, 10)
    )  # the abandoned path's checkpoint of step 30 was dropped, then saved again

    # Killed in the middle of the restart (the job has counted it, the script has not yet
    # run on): the same command resumes it, and the trial ends as the one never killed.
    killed = tmp_path / "killed"
    hold = tmp_path / "hold"
    hold.write_text("")
    proc = subprocess.Popen(
        [SWEEP, "run", "conf=restarts", "--config-dir", str(project),
         f"run_dir={killed}"],
        cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        env={**os.environ, "HOLD_FILE": str(hold)},
    )  # fmt: skip
    try:
        record = killed / "trials"
        wait_for(
            lambda: any(
                "pending_rewind" in p.read_text() for p in record.glob("*/0/spike_restarts.json")
            ),
            timeout=120,
        )
    except AssertionError:
        raise AssertionError(output_of(proc)[1][-3000:]) from None
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        hold.unlink()
    res = _run(project, killed)
    assert res.returncode == 0, res.stderr
    again = _trial(killed)
    assert (
        json.loads((again / "status.json").read_text())["steps_to_target"]
        == status["steps_to_target"]
    )
    strip = ("wall_s", "steps_per_s")
    assert [
        {k: v for k, v in r.items() if k not in strip} for r in read_jsonl(again / "metrics.jsonl")
    ] == [{k: v for k, v in r.items() if k not in strip} for r in records]
    (restart_again,) = [
        e for e in read_jsonl(again / "events.jsonl") if e["event"] == "spike_restart"
    ]
    assert restart_again["from_step"] == 20 and restart_again["restart"] == 1


@pytest.mark.slow
def test_a_script_that_writes_its_own_metrics_jsonl_is_restarted_the_same(
    project: Path, tmp_path: Path
) -> None:
    """The job cuts the script's own metrics.jsonl at the restart's step and reads it again
    from there: the same restart and records as a script that prints its metrics."""
    run = tmp_path / "jsonl"
    res = _run(project, run, "~trainer.metrics", env={**os.environ, "METRICS_OUT": "jsonl"})
    assert res.returncode == 0, res.stderr
    folder = _trial(run)
    status = json.loads((folder / "status.json").read_text())
    assert status["spike_restarts"] == 1 and status["steps_to_target"] is not None, status
    (restart,) = [e for e in read_jsonl(folder / "events.jsonl") if e["event"] == "spike_restart"]
    assert (restart["step"], restart["from_step"]) == (31, 20)
    steps = [r["step"] for r in read_jsonl(folder / "metrics.jsonl")]
    assert steps == list(range(101)), steps  # one record a step, the abandoned ones gone
    assert max(r.get("loss", 0) for r in read_jsonl(folder / "metrics.jsonl")) < 100


@pytest.mark.parametrize(
    ("override", "key"),
    [
        (
            'trainer.restart_args=["--restart_step={restart_step}","--x={nope}"]',
            "trainer.restart_args",
        ),
        ("trainer.restart_args=[]", "trainer.restart_args"),
        ("train.on_spike.rewind_steps=-1", "train.on_spike.rewind_steps"),
        ("train.on_spike.max_restarts=-2", "train.on_spike.max_restarts"),
        ("train.on_spike.lr_scale=0.5", "train.on_spike.lr_scale"),
        ("trainer.checkpoint_every=0", "trainer.checkpoint_every"),
    ],
)
def test_a_restart_policy_a_command_trainer_cannot_follow_exits_2_naming_the_key(
    project: Path, tmp_path: Path, override: str, key: str
) -> None:
    res = _run(project, tmp_path / "run", override, "--dry-run")
    assert res.returncode == 2, res.stderr
    assert key in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert not (tmp_path / "run").exists()
