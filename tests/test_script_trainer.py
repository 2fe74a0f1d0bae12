"""An existing script as a study's trainer, end to end through `sweep run` (a stdlib script, no
PyTorch): settings in its `--key=value` style reach it with the types it asserts (a float
stays a float when the value is a whole number), its printed lines become metrics.jsonl and
the status, a run whose output matched nothing fails its attempt quoting the pattern and the
last lines, `--dry-run --sample-log` tests a pattern, and bad settings exit 2 before
anything is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import output_of, read_jsonl, trials_of, user_env

from stepscale import rundir

SWEEP = str(Path(sys.executable).with_name("sweep"))

SCRIPT = """import os, sys
from ast import literal_eval
lr = 0.5
wd = 0.1
batch = 4
mode = "ok"
max_iters = 20
out_dir = "out"
for arg in sys.argv[1:]:
    key, val = arg[2:].split("=", 1)
    try:
        value = literal_eval(val)
    except (ValueError, SyntaxError):
        value = val
    assert type(value) is type(globals()[key]), f"--{key}={val}: not a {type(globals()[key]).__name__}"
    globals()[key] = value
os.makedirs(out_dir, exist_ok=True)
print("UserWarning: step 99 is a warning, not a step", file=sys.stderr)
loss = 4.0
for step in range(max_iters + 1):
    if mode == "ok" and step % 5 == 0:
        print(f"step {step}: train loss {loss:.4f}, val loss {loss + 0.1:.4f}", flush=True)
    print(f"\\r{step}/{max_iters} [00:00<00:00]", end="")
    loss *= 1 - 0.05 * lr
print(f"\\ndone lr={lr!r} wd={wd!r} in {os.path.basename(os.getcwd())}")
"""

STUDY = """# @package _global_
trainer:
  command: ["{python}", train.py, "--out_dir={trial_dir}/out"]
  cwd: scripts
  args: {style: "--key=value", names: {optim.lr: lr}}
  config: {optim: {lr: 0.5}, wd: 0.1, batch: 4, mode: ok, max_iters: 20}
  keys: {max_steps: max_iters}
  metrics:
    source: stdout
    format: regex
    pattern: 'step (?P<step>\\d+): train loss (?P<train_loss>\\S+), val loss (?P<val_loss>\\S+)'
    names: {val_loss: eval_loss}
scientific:
  mode: {path: mode, values: [ok, silent]}
nuisance:
  lr: {path: optim.lr, type: float, low: 1.0, high: 3.0, step: 1.0}
fixed:
  wd: {path: wd, value: 0}
budget: {trials_per_point: 1, max_steps: 20}
objective: {kind: steps_to_target, target_loss: 3.0}
retries: 0
launcher: {name: process}
"""

LOG = """Loading...
UserWarning: something
step 0: train loss 4.0000, val loss 4.1000
\r1/20 [..]\r2/20 [..]
step 5: train loss 3.1000, val loss nan
"""


def sweep(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real console script."""
    env = user_env()
    return subprocess.run(
        [SWEEP, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("script")
    (root / "conf").mkdir()
    (root / "conf" / "script.yaml").write_text(STUDY)
    (root / "scripts").mkdir()
    (root / "scripts" / "train.py").write_text(SCRIPT)
    return root


@pytest.mark.slow
def test_a_script_in_its_own_style_runs_as_a_study(project: Path) -> None:
    run_dir = project / "run"
    res = sweep(
        "run", "conf=script", "--config-dir", str(project), f"run_dir={run_dir}", cwd=project
    )
    assert res.returncode == 0, res.stderr
    trials = {label: rs[0] for label, rs in trials_of(run_dir).items()}
    ok = run_dir / "trials" / "mode=ok" / "0"
    assert trials["mode=ok"]["state"] == "complete", trials
    logs = b"".join(p.read_bytes() for p in (ok / "logs").glob("*.out")).decode()
    # the script asserted its types: the sampled whole-number lr and the YAML's 0 are floats
    lr = json.loads((ok / rundir.CONFIG_JSON).read_text())["optim"]["lr"]
    assert float(lr).is_integer() and f"done lr={lr!r} wd=0.0 in scripts" in logs
    assert "\r20/20" in logs  # the script's output is kept whole in the trial's logs
    records = read_jsonl(ok / rundir.METRICS_JSONL)  # written by the job from the lines
    assert [r["step"] for r in records] == [0, 5, 10, 15, 20]
    assert records[0] == {"step": 0, "train_loss": 4.0, "eval_loss": 4.1}
    status = json.loads((ok / rundir.STATUS_JSON).read_text())
    assert status["steps_done"] == 20 and status["steps_to_target"] is not None
    assert (ok / "out").is_dir()  # {trial_dir} filled in the command
    silent = trials["mode=silent"]  # matched no line: the attempt fails, saying why
    assert silent["state"] == "failed"
    assert "no line of the trainer's stdout gave a record" in silent["error"]
    assert "regex 'step (?P<step>" in silent["error"] and "done lr=" in silent["error"]


def test_a_sample_log_shows_the_records_a_trial_would_give(project: Path) -> None:
    (project / "sample.log").write_text(LOG)
    args = ["run", "conf=script", "--config-dir", str(project), "--dry-run"]
    res = sweep(*args, "--sample-log", "sample.log", cwd=project)
    assert res.returncode == 0, res.stderr
    records = [json.loads(line) for line in res.stdout.splitlines()]
    assert records == [
        {"step": 0, "train_loss": 4.0, "eval_loss": 4.1},
        {"step": 5, "train_loss": 3.1, "eval_loss": None},
    ]
    # the progress bar's redraws are one line (a carriage return is no line break)
    assert "2 records from 5 lines" in res.stderr and "eval_loss at 2 steps" in res.stderr
    (project / "other.log").write_text("loss=1.0\n")
    res = sweep(*args, "--sample-log", "other.log", cwd=project)
    assert res.returncode == 2 and "loss=1.0" in res.stderr and "Traceback" not in res.stderr


def test_bad_script_settings_exit_2_naming_the_key(project: Path) -> None:
    # (every refusal is unit-tested in test_script_output.py; two through the CLI here)
    cases = {
        "trainer.metrics.pattern": ["trainer.metrics.pattern='(?P<step>\\d+'"],
        "trainer.cwd: 'nowhere'": ["trainer.cwd=nowhere"],
    }
    for message, extra in cases.items():
        run_dir = project / "bad"
        res = sweep(
            "run", "conf=script", "--config-dir", str(project), f"run_dir={run_dir}", *extra,
            cwd=project,
        )  # fmt: skip
        assert res.returncode == 2, (message, res.stderr)
        assert message in res.stderr and "Traceback" not in res.stderr
        assert not run_dir.exists()


# ------------------------------------------------- a retried trial, in the job itself

RESUMABLE = """import os, sys
fail_at, resume = 99, False
for arg in sys.argv[1:]:
    key, val = arg[2:].split("=", 1)
    globals()[key] = int(val) if key == "fail_at" else val == "True"
attempt = int(os.environ["STEPSCALE_ATTEMPT"])
with open(os.path.join(os.environ["STEPSCALE_TRIAL_DIR"], "resume_step.txt"), "a") as f:
    f.write(os.environ["STEPSCALE_RESUME_STEP"] + "\\n")  # where stepscale says it resumes
start = 10 if resume else 0  # its own checkpoint is at step 10
print("resumed from 10" if resume else "from scratch")
for step in range(start, 21, 5):
    print(f"step {step}: val loss {3 - step / 10 + attempt / 1000:.3f}", flush=True)
    if attempt == 1 and step == fail_at:
        sys.exit(3)
"""


def run_job(
    folder: Path, attempt: int, resume_args: list[str], target_loss: float | None = None
) -> dict:
    """One attempt of a trial, run by the trial job's own code (no orchestrator); with
    ``target_loss``, of a study that ends trials there (stop_at_target)."""
    from stepscale.sweeps.job.spec import TrialSpec
    from stepscale.sweeps.job.trial_job import run_trial
    from stepscale.sweeps.study.storage import StorageSpec
    from stepscale.sweeps.trainers.spec import read_trainer

    metrics = {
        "source": "stdout",
        "format": "regex",
        "pattern": r"step (?P<step>\d+): val loss (?P<eval_loss>\S+)",
    }
    trainer = read_trainer(
        {
            "command": ["{python}", "train.py"],
            "args": "--key=value",
            "metrics": metrics,
            "resume_args": resume_args,
        },
        [folder.parent],
    )
    spec = TrialSpec(
        trial="p/0", study_name="s/p", trial_id=0, number=0, trial_dir=str(folder), config={},
        storage=StorageSpec("journal", str(folder / "unused.journal")), trainer=trainer, seed=0,
        target_loss=target_loss, pruner=None, horizon=20, attempt=attempt,
        settings={"fail_at": 10}, stop_at_target=target_loss is not None,
    )  # fmt: skip
    saved = dict(os.environ)
    try:
        return run_trial(spec)
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.mark.parametrize("resume_args", [[], ["--resume=True"]])
def test_a_retried_trial_resumes_with_resume_args_or_starts_again(
    tmp_path: Path, resume_args: list[str]
) -> None:
    from stepscale.sweeps.job.command import CommandFailed

    (tmp_path / "train.py").write_text(RESUMABLE)
    folder = tmp_path / "trial"
    folder.mkdir()
    with pytest.raises(
        CommandFailed,
        match=r"(?s)exited with code 3; its stdout ends:\n.*step 10: val loss 2.001",
    ):
        run_job(folder, 1, resume_args)
    assert [r["eval_loss"] for r in read_jsonl(folder / rundir.METRICS_JSONL)] == [
        3.001,
        2.501,
        2.001,
    ]
    status = run_job(folder, 2, resume_args)
    assert status["state"] == "complete" and status["steps_done"] == 20
    losses = [r["eval_loss"] for r in read_jsonl(folder / rundir.METRICS_JSONL)]
    events = [e["event"] for e in read_jsonl(folder / rundir.EVENTS_JSONL)]
    told = (folder / "resume_step.txt").read_text().split()
    if resume_args:  # the records before its checkpoint are kept, the rest replaced
        assert losses == [3.001, 2.501, 2.002, 1.502, 1.002] and events == ["start", "resume"]
        assert told == ["0", "10"]  # STEPSCALE_RESUME_STEP: the last step recorded
    else:  # no way to resume: it starts again from step 0, its records replace the old ones
        assert losses == [3.002, 2.502, 2.002, 1.502, 1.002] and events == ["start", "start"]
        assert told == ["0", "0"]  # … and is told it starts from 0


def test_a_trial_killed_after_its_records_reached_the_target_is_not_trained_again(
    tmp_path: Path,
) -> None:
    """Its first attempt read an eval below the target (step 10) and died before the
    script ended; the next attempt ends the trial there, complete, without running it."""
    from stepscale.sweeps.job.command import CommandFailed

    (tmp_path / "train.py").write_text(RESUMABLE)
    folder = tmp_path / "trial"
    folder.mkdir()
    with pytest.raises(CommandFailed):
        run_job(folder, 1, ["--resume=True"], target_loss=2.2)
    status = run_job(folder, 2, ["--resume=True"], target_loss=2.2)
    assert status["state"] == "complete", status
    assert status["steps_to_target"] == status["steps_done"] == 10, status
    assert (folder / "resume_step.txt").read_text().split() == ["0"]  # not started again
    events = read_jsonl(folder / rundir.EVENTS_JSONL)
    assert [(e["event"], e["step"]) for e in events] == [("start", 0), ("at_target", 10)]
    assert [r["eval_loss"] for r in read_jsonl(folder / rundir.METRICS_JSONL)] == [
        3.001,
        2.501,
        2.001,
    ]


# ------------------------------------------------- a stop reaches the script as its signal

STOPPABLE = """import os, signal, sys, time
out_dir = "."
for arg in sys.argv[1:]:
    key, val = arg[2:].split("=", 1)
    globals()[key] = val
os.makedirs(out_dir, exist_ok=True)

def note(signum, frame):
    with open(os.path.join(out_dir, "signal.txt"), "a") as f:
        f.write(signal.Signals(signum).name + "\\n")
    sys.exit(0)  # stopped early: the trial is not finished

signal.signal(signal.SIGINT, note)
signal.signal(signal.SIGTERM, note)
for step in range(0, 1000, 10):
    print(f"step {step}: train loss 3.0, val loss {3 - step / 1000}", flush=True)
    time.sleep(0.1)
"""


@pytest.mark.slow
def test_sweep_stop_sends_the_scripts_stop_signal(project: Path) -> None:
    from helpers import wait_for

    (project / "scripts" / "stoppable.py").write_text(STOPPABLE)
    run_dir = project / "stopped"
    args = [
        "run", "conf=script", "--config-dir", str(project), f"run_dir={run_dir}",
        "trainer.command=['{python}',stoppable.py,'--out_dir={trial_dir}/out']",
        "trainer.args=none", "+trainer.stop_signal=SIGINT", "scientific.mode.values=[ok]",
        "budget.max_steps=990", "launcher.name=local",
    ]  # fmt: skip
    env = user_env()
    proc = subprocess.Popen(
        [SWEEP, *args], cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    trial = run_dir / "trials" / "mode=ok" / "0"
    try:
        metrics = trial / rundir.METRICS_JSONL
        wait_for(
            lambda: proc.poll() is not None or (metrics.exists() and len(read_jsonl(metrics)) >= 3),
            120,
        )
        assert proc.poll() is None, output_of(proc)
        stop = sweep("stop", str(run_dir), cwd=project)
        assert stop.returncode == 0, stop.stderr
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    assert proc.returncode == 0 and "stopped on request" in err, err
    assert (trial / "out" / "signal.txt").read_text() == "SIGINT\n"  # not SIGTERM
    record = json.loads((trial / rundir.TRIAL_JSON).read_text())
    assert record["state"] not in ("failed", "complete"), record  # resumes next time
