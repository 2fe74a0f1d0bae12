"""Metric loggers (`stepscale.loggers`): TensorBoard, MLflow and W&B (offline) get exactly
the records of ``metrics.jsonl`` by step, for every kind of trainer, read back with each
real library; names, tags and hyperparameters of the logged runs; bad ``loggers`` values
and a missing library exit 2 before anything is written.

Tolerances: TensorBoard stores scalars as float32 (compared at float32 rounding); MLflow
and W&B store float64 (compared exactly)."""

from __future__ import annotations

import glob
import json
import math
import socket
import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import read_jsonl, run_sweep

from stepscale.cli.main import main
from stepscale.loggers import mlflow_uri

# A Python-function trainer: steps with eval losses, an integer token count, a value that is
# not finite (null in metrics.jsonl, left out by the loggers) and a second record at step 4.
# It checkpoints every 4 steps and, once, crashes at step ``crash_at``: the retry resumes
# from step 4 and logs steps 5 and 6 again.
TRAINER = """\
from pathlib import Path

def main(config, reporter, trial_dir):
    ckpt, crashed = Path(trial_dir) / "ckpt", Path(trial_dir) / "crashed"
    start = int(ckpt.read_text()) if ckpt.exists() else 0
    reporter.begin(start)
    if start == 0:
        reporter.report(0, {"eval_loss": 2.0})
    for step in range(start + 1, int(config.steps) + 1):
        loss = 2.0 / (1.0 + float(config.lr) * step)
        rec = {"train_loss": loss * 1.1, "tokens": 64 * step, "lr": float(config.lr)}
        if step == 3:
            rec["grad_norm"] = float("nan")
        reporter.report(step, rec)
        if step % 4 == 0:
            reporter.report(step, {"eval_loss": loss})
            ckpt.write_text(str(step))
        if step == int(config.crash_at) and not crashed.exists():
            crashed.write_text("")
            raise RuntimeError("a crash after step 6")
    return {"state": "complete", "steps_done": int(config.steps)}
"""

# The same records written by a command trainer (it appends to metrics.jsonl itself).
COMMAND = """\
import json, os
cfg = json.load(open(os.environ["STEPSCALE_CONFIG"]))
with open("metrics.jsonl", "a") as f:
    for step in range(int(cfg["steps"]) + 1):
        loss = 2.0 / (1.0 + float(cfg["lr"]) * step)
        f.write(json.dumps({"step": step, "eval_loss": loss, "tokens": 64 * step}) + "\\n")
        f.flush()
"""

STUDY = """\
# @package _global_
trainer:
  {trainer}
  config: {{width: 1, lr: 0.1, steps: 8, note: none, crash_at: 0}}
  keys: {{max_steps: steps}}
scientific:
  width: {{path: width, values: [2]}}
nuisance:
  lr: {{path: lr, type: float, low: 0.01, high: 1.0, scale: log}}
fixed:
  seed_note: {{path: note, value: fixed-note}}
budget: {{trials_per_point: 1, max_steps: 8}}
objective: {{kind: final_eval_loss}}
launcher: {{name: inline}}
"""


def _project(tmp_path: Path) -> Path:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "py.yaml").write_text(STUDY.format(trainer="target: pytrainer:main"))
    (tmp_path / "conf" / "cmd.yaml").write_text(
        STUDY.format(trainer=f'command: ["{sys.executable}", train.py]')
    )
    (tmp_path / "pytrainer.py").write_text(TRAINER)
    (tmp_path / "train.py").write_text(COMMAND)
    return tmp_path


def jsonl_series(path: Path) -> dict[str, list[tuple[int, float]]]:
    """metrics.jsonl as key → [(step, value)] of its finite numbers, in file order."""
    series: dict[str, list[tuple[int, float]]] = {}
    for rec in read_jsonl(path):
        for key, value in rec.items():
            if key == "step" or not isinstance(value, int | float) or not math.isfinite(value):
                continue
            series.setdefault(key, []).append((rec["step"], float(value)))
    return series


def tensorboard_series(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Scalars of the event files in ``folder``, read by TensorBoard's EventAccumulator."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def mlflow_run(folder: Path) -> tuple[Any, dict[str, list[tuple[int, float]]]]:
    """The one run of the MLflow file store in ``folder`` and its metric histories."""
    import os

    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_uri(folder))
    (experiment,) = [e for e in client.search_experiments() if e.name != "Default"]
    (run,) = client.search_runs([experiment.experiment_id])
    histories = {
        key: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]
        for key in run.data.metrics
    }
    return run, histories


def wandb_records(path: Path) -> list[Any]:
    """The records of a W&B offline run file, decoded with wandb's own protobuf messages.
    The file is W&B's 7-byte header, then LevelDB's log format: 32 KiB blocks of chunks,
    each a 7-byte header (checksum, length, type: 1 full, 2 first, 3 middle, 4 last)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    records, pos, block, chunk = [], 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _checksum, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:  # the zero padding of a block's end
            pos += left
            continue
        chunk += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunk)
            records.append(record)
            chunk = b""
    return records


def wandb_run(folder: Path) -> tuple[Any, dict[str, Any], dict[str, list[tuple[int, float]]]]:
    """The run record, config and history series of the W&B offline run in ``folder``."""
    paths = sorted(glob.glob(str(folder / "wandb" / "offline-run-*" / "run-*.wandb")))
    records = [r for path in paths for r in wandb_records(Path(path))]  # a job's run each
    run, config, series = None, {}, {}
    for record in records:
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run = record.run
            items = record.run.config.update
            config.update(
                {i.key or ".".join(i.nested_key): json.loads(i.value_json) for i in items}
            )
        elif kind == "history":
            items = record.history.item
            row = {i.key or ".".join(i.nested_key): json.loads(i.value_json) for i in items}
            step = row.pop("_step")
            for key, value in row.items():
                if not key.startswith("_"):
                    series.setdefault(key, []).append((step, float(value)))
    # One offline run folder per job, named by the second it started: two jobs of a resumed
    # trial can start within one second, so the folders' order is not the jobs' order. The
    # resumed job logs only steps after those already logged, so order by step.
    return run, config, {k: sorted(v) for k, v in series.items()}


def assert_same_series(
    got: dict[str, list[tuple[int, float]]],
    want: dict[str, list[tuple[int, float]]],
    float32: bool = False,
) -> None:
    """Same keys, same steps in order, same values (exactly, or at float32 rounding)."""
    assert sorted(got) == sorted(want)
    for key, points in want.items():
        assert [s for s, _ in got[key]] == [s for s, _ in points], key
        values = np.array([v for _, v in points])
        expected = values.astype(np.float32) if float32 else values
        np.testing.assert_array_equal(np.array([v for _, v in got[key]]), expected, err_msg=key)


def test_python_trainer_study_logs_every_record_to_all_three_loggers_across_a_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _project(tmp_path)
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    # A user's own settings must not send the trial's logs anywhere else.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9/")
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9/")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    for key in ("MLFLOW_ALLOW_FILE_STORE", "MLFLOW_DISABLE_TELEMETRY", "WANDB_DIR", "WANDB_SILENT"):
        monkeypatch.delenv(key, raising=False)  # the loggers set them in the job
    # No library looks up a network name from this process. (MLflow turns its usage telemetry
    # off under pytest by itself; outside, the job turns it off: MLFLOW_DISABLE_TELEMETRY.)
    lookups: list[Any] = []

    def no_lookup(*args: Any, **kwargs: Any) -> Any:
        lookups.append(args[:2])
        raise OSError("no network in tests")

    monkeypatch.setattr(socket, "getaddrinfo", no_lookup)
    code = main(
        ["run", "conf=py", "--config-dir", ".", "run_dir=run", "loggers=[tensorboard,mlflow,wandb]",
         "trainer.config.crash_at=6"]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0, err
    assert lookups == []
    trial = project / "run" / "trials" / "width=2" / "0"
    assert json.loads((trial / "trial.json").read_text())["attempts"] == 2  # resumed at 4
    want = jsonl_series(trial / "metrics.jsonl")
    assert [s for s, _ in want["eval_loss"]] == [0, 4, 8]
    assert "grad_norm" not in want  # NaN: null in metrics.jsonl, not logged
    assert len(want["train_loss"]) == 8

    assert_same_series(tensorboard_series(trial / "tensorboard"), want, float32=True)

    run, histories = mlflow_run(trial / "mlflow")
    assert_same_series(histories, want)
    lr = json.loads((trial / "config.json").read_text())["lr"]
    assert run.info.run_name == "py/width=2/0"
    assert run.data.tags["stepscale.point"] == "width=2"
    assert run.data.tags["stepscale.trial"] == "0"
    assert run.data.params["lr"] == str(lr) and run.data.params["note"] == "fixed-note"
    assert run.data.params["width"] == "2"

    wb, config, series = wandb_run(trial / "wandb")
    assert_same_series(series, want)
    assert wb.display_name == "py/width=2/0" and wb.run_group == "py"
    assert config["lr"] == {"value": lr} or config["lr"] == lr
    assert "point=width=2" in list(wb.tags)
    assert len(glob.glob(str(trial / "wandb" / "wandb" / "offline-run-*"))) == 2  # one a job


@pytest.mark.slow  # two `sweep run` processes (~5 s)
def test_command_trainer_records_reach_the_logger(tmp_path: Path) -> None:
    project = _project(tmp_path)
    res = run_sweep(
        "run", "conf=cmd", "--config-dir", ".", "run_dir=run", "loggers=[tensorboard]",
        cwd=project,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    trial = project / "run" / "trials" / "width=2" / "0"
    want = jsonl_series(trial / "metrics.jsonl")
    assert [s for s, _ in want["eval_loss"]] == list(range(9))
    assert_same_series(tensorboard_series(trial / "tensorboard"), want, float32=True)
    # Loggers change no trial: the study resumes with others (here none), nothing to run.
    res = run_sweep("run", "conf=cmd", "--config-dir", ".", "run_dir=run", cwd=project)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "[tensorbord]",
            "loggers: unknown logger 'tensorbord'; choose any of tensorboard, mlflow, wandb",
        ),
        ("[wandb]", "pip install 'stepscale[wandb]'"),
    ],
)
def test_bad_or_missing_logger_exits_2_before_anything_is_written(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    value: str,
    message: str,
) -> None:
    project = _project(tmp_path)
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    monkeypatch.setitem(sys.modules, "wandb", None)  # Python's "not installed" for imports
    for command in (
        ["run", "conf=py", "--config-dir", ".", "run_dir=run"],
        ["train", "conf=train_smoke", "run_dir=train"],
    ):
        code = main([*command, f"loggers={value}"])
        err = capsys.readouterr().err
        assert code == 2, err
        assert message in err and "Traceback" not in err
    assert not (project / "run").exists() and not (project / "train").exists()


@pytest.mark.slow  # the built-in trainer compiles its programs (NQM: the quickest)
def test_sweep_train_logs_the_builtin_trainer_to_mlflow(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    compile_cache: str,
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9/")  # must not be used
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    run_dir = tmp_path / "run"
    code = main(
        ["train", "conf=train_smoke", "model=nqm", "data=nqm", "train.max_steps=6", "train.log_every=2",
         "train.eval_every=3", "train.devices=1", f"train.compile_cache_dir={compile_cache}",
         f"run_dir={run_dir}", "loggers=[mlflow]"]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0, err
    want = jsonl_series(run_dir / "metrics.jsonl")
    assert {"train_loss", "eval_loss", "tokens"} <= set(want)
    run, histories = mlflow_run(run_dir / "mlflow")
    assert_same_series(histories, want)
    assert run.info.run_name == "train_smoke"
    assert run.data.params["train.max_steps"] == "6"
