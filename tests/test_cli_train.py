"""`sweep train` and `sweep list` through the real entry point: outputs, resume, bad input."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import TEST_COMPILE_CACHE, read_jsonl, shadowing_packages, user_env, without_wall

from stepscale.cli.main import main

FAST = [
    "conf=train_smoke",
    "train.max_steps=20",
    "train.devices=1",
    f"train.compile_cache_dir={TEST_COMPILE_CACHE}",
]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run `sweep …` in this process; returns (exit code, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


PASSWORD = "S3cr3tPW"
# A storage URL means nothing to `sweep train`, but it is part of the config it writes.
PG_URL = f"storage.url=postgresql://user:{PASSWORD}@127.0.0.1:1/db"


@pytest.mark.slow  # over 10 s on 2 cores
def test_train_prints_status_and_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    code, out, err = run_cli(capsys, "train", *FAST, PG_URL, f"run_dir={run_dir}")
    assert code == 0
    streams = out + err
    status = json.loads(out)
    assert status["state"] == "complete" and status["steps_done"] == 20
    assert status == json.loads((run_dir / "status.json").read_text())
    assert "user:***@127.0.0.1" in (run_dir / "config.yaml").read_text()
    first = without_wall(read_jsonl(run_dir / "metrics.jsonl"))

    # same command: resume (the saved config, redacted, still matches)
    code, out, err = run_cli(capsys, "train", *FAST, PG_URL, f"run_dir={run_dir}")
    streams += out + err
    assert code == 0 and json.loads(out)["steps_done"] == 20
    assert without_wall(read_jsonl(run_dir / "metrics.jsonl")) == first

    code, out, err = run_cli(
        capsys, "train", *FAST[:1], "train.max_steps=30", *FAST[2:], PG_URL, f"run_dir={run_dir}"
    )
    streams += out + err
    assert code == 2  # a different run in the same dir is refused, nothing overwritten
    assert without_wall(read_jsonl(run_dir / "metrics.jsonl")) == first
    # The password is in no stream and no file (binary ones included).
    assert PASSWORD not in streams
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) >= 4 and not [p for p in written if PASSWORD.encode() in p.read_bytes()]


def test_cfg_of_train_and_run_hides_a_password(capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["train", "conf=train_smoke"], ["run", "conf=smoke"]):
        code, out, err = run_cli(capsys, *command, PG_URL, "--cfg")
        assert code == 0 and "url: postgresql://user:***@127.0.0.1:1/db" in out, out
        assert PASSWORD not in out + err


def test_cfg_and_list(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "train", "conf=train_smoke", "optimizer.lr=0.5", "--cfg")
    assert code == 0 and "lr: 0.5" in out and "name: train_smoke" in out
    code, out, _ = run_cli(capsys, "list")
    assert code == 0 and "train_smoke" in out and "train" in out


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


BAD_INPUTS = {
    "missing conf": ([], "conf"),
    "unknown preset": (["conf=nope"], "nope"),
    "unknown model group": (["model=resnet"], "resnet"),
    "unknown model name": (["model.name=resnet"], "model.name"),
    "unknown optimizer": (["optimizer.name=adamax"], "optimizer.name"),
    "unknown schedule": (["schedule.name=cyclic"], "schedule.name"),
    "unknown data": (["data.name=imagenet"], "data.name"),
    "typo'd key": (["data.global_bach=8"], "global_bach"),
    "wrong type": (["data.global_batch=many"], "data.global_batch"),
    "zero batch": (["data.global_batch=0"], "data.global_batch"),
    "negative sequence": (["data.seq_len=-4"], "data.seq_len"),
    "zero width": (["model.d_model=0"], "model.d_model"),
    "negative lr": (["optimizer.lr=-1"], "optimizer.lr"),
    "warmup longer than horizon": (["schedule.warmup_steps=50"], "schedule.warmup_steps"),
    "batch vs microbatch": (
        ["data.global_batch=6", "data.max_microbatch=4"],
        "data.max_microbatch",
    ),
    "batch vs devices": (["data.global_batch=6", "train.devices=4"], "data.global_batch"),
    "too many devices": (["train.devices=64"], "train.devices"),
    "sequence too long": (["data.seq_len=128", "model.max_seq_len=64"], "data.seq_len"),
    "model/data mismatch": (["model=mlp"], "model.name"),
    "tokens without path": (["data=tokens"], "data.path"),
    "missing token file": (["data=tokens", "data.path=/nonexistent/tokens.bin"], "data.path"),
    "target below floor": (["train.target_loss=0.5"], "train.target_loss"),
    "eval positions beyond the sequence": (["train.eval_positions=64"], "train.eval_positions"),
    "noise scale on an odd batch": (
        ["train.noise_scale=true", "data.global_batch=15"],
        "train.noise_scale",
    ),
    "zero horizon": (["train.max_steps=0"], "train.max_steps"),
    "added unknown key": (["+train.max_step=5"], "train.max_step"),
    "negative seed": (["train.seed=-1"], "train.seed"),
    "NaN learning rate": (["optimizer.lr=nan"], "optimizer.lr"),
    "wsd warmup into decay": (
        ["schedule=wsd", "schedule.warmup_steps=18"],
        "schedule.warmup_steps",
    ),
    "unwritable compile cache": (
        ["train.compile_cache_dir=/proc/stepscale"],
        "train.compile_cache_dir",
    ),
}


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_bad_input_exits_2_with_a_message(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    overrides, field = BAD_INPUTS[name]
    base = (
        ["conf=train_smoke"]
        if not any(o.startswith("conf=") for o in overrides) and name != "missing conf"
        else []
    )
    run_dir = tmp_path / "run"
    code, out, err = run_cli(capsys, "train", *base, *FAST[1:], *overrides, f"run_dir={run_dir}")
    assert code == 2, err
    assert field in err, err
    assert "Traceback" not in err and out == ""
    assert not run_dir.exists()  # stopped before anything was written or computed


def test_unreadable_saved_config_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("model: [unclosed\n")
    code, _, err = run_cli(capsys, "train", *FAST, f"run_dir={run_dir}")
    assert code == 2 and "unreadable" in err and "Traceback" not in err


@pytest.mark.slow  # two runs of sweep train, the second a program of its own: 18 s
def test_layout_changes_still_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "run"
    assert run_cli(capsys, "train", *FAST, f"run_dir={run_dir}")[0] == 0
    code, out, err = run_cli(capsys, "train", *FAST, "data.max_microbatch=8", f"run_dir={run_dir}/")
    assert code == 0, err
    assert json.loads(out)["steps_done"] == 20


def test_malformed_token_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    odd = _write(tmp_path / "odd.bin", b"\x01\x00\x02")  # 3 bytes: not whole uint16 tokens
    code, _, err = run_cli(
        capsys, "train", *FAST, "data=tokens", f"data.path={odd}", f"run_dir={tmp_path / 'r'}"
    )
    assert code == 2 and "data.path" in err and "Traceback" not in err


@pytest.mark.slow  # over 10 s on 2 cores
def test_tokens_file_trains(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tokens = tmp_path / "tokens.bin"
    np.random.default_rng(0).integers(0, 50, size=40_000, dtype=np.uint16).tofile(tokens)
    code, out, err = run_cli(
        capsys, "train", *FAST, "data=tokens", f"data.path={tokens}", "data.seq_len=32",
        "data.eval_examples=32", "data.eval_batch=16", f"run_dir={tmp_path / 'r'}",
    )  # fmt: skip
    assert code == 0, err
    status = json.loads(out)
    # uniform random tokens hold nothing to learn: a held-out loss that ends above its
    # start makes the run diverged (no progress), at the horizon all the same
    assert status["state"] in ("complete", "diverged")
    assert status["steps_done"] == status["horizon_steps"]


@pytest.mark.slow
def test_console_script_runs_from_a_directory_with_its_own_models_package(tmp_path: Path) -> None:
    shadowing_packages(tmp_path)
    env = user_env()
    sweep = Path(sys.executable).with_name("sweep")
    res = subprocess.run(
        [str(sweep), "train", *FAST, "run_dir=r"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["state"] == "complete"
    assert (tmp_path / "r" / "metrics.jsonl").exists()


@pytest.mark.slow
def test_ctrl_c_saves_and_the_same_command_resumes(tmp_path: Path) -> None:
    env = user_env()
    sweep = str(Path(sys.executable).with_name("sweep"))
    args = [
        "train",
        "conf=train_smoke",
        "train.max_steps=600",
        "train.checkpoint_every=200",
        "train.devices=1",
    ]
    args.append(f"train.compile_cache_dir={TEST_COMPILE_CACHE}")  # FAST's programs
    interrupted, straight = tmp_path / "interrupted", tmp_path / "straight"
    proc = subprocess.Popen(
        [sweep, *args, f"run_dir={interrupted}"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    metrics = interrupted / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 4:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err.decode()
    assert b"Traceback" not in err
    assert json.loads((interrupted / "status.json").read_text())["state"] == "running"
    resumed = subprocess.run(
        [sweep, *args, f"run_dir={interrupted}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr
    full = subprocess.run(
        [sweep, *args, f"run_dir={straight}"], env=env, capture_output=True, text=True, timeout=300
    )
    assert full.returncode == 0, full.stderr
    assert json.loads(resumed.stdout)["steps_done"] == 600
    a = without_wall(read_jsonl(straight / "metrics.jsonl"))
    b = without_wall(read_jsonl(interrupted / "metrics.jsonl"))
    assert a == b
