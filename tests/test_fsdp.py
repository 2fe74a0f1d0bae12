"""``train.sharding=fsdp``: parameters and optimizer state sharded over the data axis.

One set of runs (a module fixture) serves the slow tests: on the session's 4 fake CPU
devices a replicated and an fsdp run of 50 steps, an fsdp run killed at step 30 and resumed,
and the resumes of checkpoints written under another layout; beside them, in a process with
8 fake devices (this file is also its worker: ``python tests/test_fsdp.py SPEC.json``), the
same pair of runs and an fsdp run killed at step 30. The model is an MLP that compiles in
seconds, with tensors that shard and tensors that stay whole.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import TEST_COMPILE_CACHE, read_jsonl, tiny_gpt, tiny_nqm, without_wall, xla_flags
from jax.sharding import PartitionSpec

from stepscale.models import checkpoint
from stepscale.models.config import TrainerConfig
from stepscale.models.errors import ConfigError, ConfigWarning
from stepscale.models.sharding import MIN_SHARD_ELEMENTS, fsdp_dim, partition_spec
from stepscale.reporters import Action, JsonlReporter

STEPS = 50
CRASH_AT = 30  # a killed run dies here, after its checkpoint at step 20
RTOL = 1e-5  # fsdp vs replicated: only the order of floating-point sums differs
# The noise scale is a ratio of differences of squared norms, which magnifies that order's
# ~1e-7 differences; another device count changes the per-device sums as well.
RTOL_NOISE_SCALE = 1e-4
RTOL_OTHER_DEVICES = 1e-4
TIMEOUT_S = 300


def fsdp_config(devices: int, sharding: str, **extra: Any) -> TrainerConfig:
    """The MLP on teacher data (its two weight matrices shard over 4 and 8 devices; its
    biases and 64 x 10 head stay whole), global batch 32 in microbatches of 2 per device
    (so a step accumulates gradients and the noise scale comes free), EMA and clipping on;
    every step logged, evaluations every 10 steps and checkpoints every 20."""
    overrides: dict[str, Any] = dict(
        model__name="mlp",
        data__name="teacher",
        data__global_batch=32,
        data__max_microbatch=2,
        optimizer__clip=1.0,
        train__ema_decay=0.9,
        train__max_steps=STEPS,
        train__log_every=1,
        train__eval_every=10,
        train__checkpoint_every=20,
        train__devices=devices,
        train__sharding=sharding,
    )
    return tiny_gpt(**(overrides | extra))


class _CrashAt(JsonlReporter):
    """The run's files; the run dies (like a killed job) once it reports ``step``."""

    def __init__(self, run_dir: Path, step: int) -> None:
        super().__init__(run_dir)
        self.step = step

    def report(self, step: int, metrics: dict[str, Any]) -> Action:
        super().report(step, metrics)
        if step >= self.step:
            raise RuntimeError("simulated crash")
        return Action.CONTINUE


def run(cfg: TrainerConfig, run_dir: Path, crash_at: int | None = None) -> dict[str, Any] | None:
    """Train into ``run_dir``; the status, or None when the run was made to crash."""
    from stepscale.models.train import train

    if crash_at is None:
        return train(cfg, JsonlReporter(run_dir), run_dir=run_dir)
    try:
        train(cfg, _CrashAt(run_dir, crash_at), run_dir=run_dir)
    except RuntimeError as exc:
        assert "simulated crash" in str(exc)
        return None
    raise AssertionError("the run did not crash")


def records(run_dir: Path) -> list[dict[str, Any]]:
    return without_wall(read_jsonl(run_dir / "metrics.jsonl"))


def final_arrays(run_dir: Path) -> dict[str, np.ndarray]:
    """Every array of the last checkpoint (whole, as stored), by its tree path."""
    step = checkpoint.list_steps(run_dir / "checkpoints")[-1]
    folder = run_dir / "checkpoints" / f"step_{step:09d}"
    paths = json.loads((folder / "host.json").read_text())["dtypes"]
    with np.load(folder / "arrays.npz") as data:
        return {paths[f"{k}/path"]: data[k] for k in data.files}


def assert_same_curve(
    got: list[dict[str, Any]], want: list[dict[str, Any]], rtol: float, skip: tuple[str, ...] = ()
) -> None:
    """Same steps and keys, integers equal, floats within ``rtol`` (the noise scale within
    `RTOL_NOISE_SCALE` or ``rtol``, whichever is looser); the values of ``skip`` unchecked."""
    assert [r["step"] for r in got] == [r["step"] for r in want]
    for g, w in zip(got, want, strict=True):
        assert g.keys() == w.keys(), (g, w)
        for k, v in w.items():
            if k in skip:
                continue
            if isinstance(v, float):
                tol = max(rtol, RTOL_NOISE_SCALE) if k == "noise_scale" else rtol
                np.testing.assert_allclose(g[k], v, rtol=tol, err_msg=f"{k} at {w['step']}")
            else:
                assert g[k] == v, (k, w["step"])


def assert_bytes_rule(status: dict[str, Any], replicated: dict[str, Any], run_dir: Path) -> None:
    """Per-device bytes of the state under fsdp (from the arrays' shardings) ≤ 1/N of the
    replicated state + the tensors the documented rule keeps whole."""
    n = status["devices"]
    arrays = final_arrays(run_dir)
    total = sum(a.nbytes for a in arrays.values())
    whole = sum(a.nbytes for a in arrays.values() if fsdp_dim(a.shape, n) is None)
    assert replicated["state_bytes_per_device"] == total
    assert whole < total  # the rule shards something and keeps something whole
    assert status["state_bytes_per_device"] <= total / n + whole
    assert (status["sharding"], replicated["sharding"]) == ("fsdp", "replicated")


# ------------------------------------------------------------------ the runs, once
def _start_worker(tmp_path: Path) -> subprocess.Popen:
    """The 8-device runs in another process (XLA's device count is fixed per process)."""
    spec = tmp_path / "spec8.json"
    spec.write_text(json.dumps({"root": str(tmp_path / "d8")}))
    env = {
        **os.environ,
        "XLA_FLAGS": xla_flags(8),
        "JAX_PLATFORMS": "cpu",
    }
    with open(tmp_path / "worker8.log", "w") as log:
        return subprocess.Popen(
            [sys.executable, __file__, str(spec)], env=env, stdout=log, stderr=subprocess.STDOUT
        )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("fsdp")
    t0 = time.perf_counter()
    worker = _start_worker(tmp)
    d4 = tmp / "d4"
    out: dict[str, Any] = {"d4": d4, "d8": tmp / "d8"}
    out["replicated"] = run(fsdp_config(4, "replicated"), d4 / "replicated")
    out["fsdp"] = run(fsdp_config(4, "fsdp"), d4 / "fsdp")
    run(fsdp_config(4, "fsdp"), d4 / "resumed", crash_at=CRASH_AT)
    # the killed run's checkpoint, to be resumed as replicated too
    shutil.copytree(d4 / "resumed", d4 / "to_replicated")
    out["resumed"] = run(fsdp_config(4, "fsdp"), d4 / "resumed")
    out["to_replicated"] = run(fsdp_config(4, "replicated"), d4 / "to_replicated")
    try:
        worker.wait(timeout=TIMEOUT_S)
    finally:
        worker.kill()
    log = (tmp / "worker8.log").read_text()
    assert worker.returncode == 0, log[-3000:]
    out["worker"] = json.loads((tmp / "d8" / "out.json").read_text())
    out["seconds"] = time.perf_counter() - t0
    return out


# ------------------------------------------------------------------------ the tests
@pytest.mark.slow
def test_fsdp_trains_like_replicated_on_4_and_8_devices(runs: dict[str, Any]) -> None:
    for n in (4, 8):
        root = runs[f"d{n}"]
        got, want = records(root / "fsdp"), records(root / "replicated")
        assert [r["step"] for r in got if "eval_loss" in r] == list(range(0, STEPS + 1, 10))
        assert {"noise_scale", "grad_norm", "update_norm", "param_norm"} <= got[-1].keys()
        assert_same_curve(got, want, RTOL)
        statuses = (runs["fsdp"], runs["replicated"]) if n == 4 else runs["worker"]["statuses"]
        fsdp, replicated = statuses
        assert fsdp["state"] == "complete" and fsdp["steps_done"] == STEPS
        assert (fsdp["devices"], fsdp["accum_steps"]) == (n, 32 // n // 2)
        assert_bytes_rule(fsdp, replicated, root / "fsdp")
    print(f"fsdp runs and the 8-device worker took {runs['seconds']:.1f} s")


@pytest.mark.slow
def test_a_checkpoint_written_under_fsdp_resumes_bit_identically(runs: dict[str, Any]) -> None:
    d4 = runs["d4"]
    assert runs["resumed"]["resumed_from_step"] == 20
    assert runs["resumed"]["resharded_from"] is None  # same layout: nothing to say
    assert records(d4 / "resumed") == records(d4 / "fsdp")
    straight, resumed = final_arrays(d4 / "fsdp"), final_arrays(d4 / "resumed")
    assert straight.keys() == resumed.keys()
    for k in straight:
        np.testing.assert_array_equal(resumed[k], straight[k], err_msg=k)


@pytest.mark.slow
def test_resume_on_another_device_count_or_sharding_works_and_says_so(
    runs: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d4 = runs["d4"]
    status = runs["to_replicated"]  # written under fsdp, resumed replicated
    assert status["resharded_from"] == {"devices": 4, "processes": 1, "sharding": "fsdp"}
    assert status["steps_done"] == STEPS and status["sharding"] == "replicated"
    assert_same_curve(records(d4 / "to_replicated"), records(d4 / "fsdp"), RTOL)

    # killed at step 30 on 8 devices; resumed here on 4
    run_dir = tmp_path / "from8"
    shutil.copytree(runs["d8"] / "killed", run_dir)
    with caplog.at_level(logging.WARNING, logger="stepscale.models.train"):
        status = run(fsdp_config(4, "fsdp"), run_dir)
    assert status is not None and status["state"] == "complete"
    assert status["resumed_from_step"] == 20 and status["steps_done"] == STEPS
    assert status["resharded_from"] == {"devices": 8, "processes": 1, "sharding": "fsdp"}
    assert "written on 8 devices (sharding fsdp)" in caplog.text
    assert "this run uses 4 devices (sharding fsdp)" in caplog.text
    # (the noise scale's two batch sizes are the global batch and a microbatch's, and a
    # microbatch is 2 x 8 examples on 8 devices but 2 x 4 on 4: another estimate)
    want = records(d4 / "fsdp")
    assert_same_curve(records(run_dir), want, RTOL_OTHER_DEVICES, skip=("noise_scale",))
    on_disk = json.loads((run_dir / "status.json").read_text())
    assert on_disk["resharded_from"]["devices"] == 8


@pytest.mark.slow
def test_divergence_is_seen_at_the_same_step(runs: dict[str, Any]) -> None:
    from stepscale.models.train import train

    statuses = []
    for mode in ("replicated", "fsdp"):  # runtime values only: the programs of `runs`
        cfg = fsdp_config(4, mode, optimizer__lr=1e4, schedule__warmup_steps=0)
        reporter = JsonlReporter(runs["d4"] / f"diverged-{mode}")
        statuses.append(train(cfg, reporter))
    replicated, fsdp = statuses
    assert replicated["state"] == fsdp["state"] == "diverged"
    assert fsdp["diverged_step"] == replicated["diverged_step"] < STEPS
    assert fsdp["reason"] == replicated["reason"]


def test_the_layout_rule() -> None:
    n = 4
    assert MIN_SHARD_ELEMENTS == 1024
    assert fsdp_dim((64, 256), n) == 1  # the largest dimension divisible by N
    assert fsdp_dim((256, 64), n) == 0
    assert fsdp_dim((64, 64), n) == 0  # the first of equal ones
    assert fsdp_dim((6, 1022), n) is None  # nothing divisible: replicated
    assert fsdp_dim((3, 4, 16), n) is None  # small: replicated
    assert fsdp_dim((1024,), n) == 0 and fsdp_dim((1023,), n) is None
    assert fsdp_dim((), n) is None  # step counters, the optimizer's scalars
    assert fsdp_dim((64, 256), 1) is None  # one device: nothing to split
    assert fsdp_dim((96, 40), 8) == 0 and fsdp_dim((96, 40), 5) == 1
    assert partition_spec((64, 3, 4, 16), n) == PartitionSpec("data", None, None, None)
    assert partition_spec((3, 4, 16), n) == PartitionSpec()


def test_bad_and_unhelpful_sharding_values() -> None:
    from stepscale.models.plan import prepare

    with pytest.raises(ConfigError, match=r"train\.sharding: unknown value 'zero3'"):
        prepare(tiny_gpt(train__sharding="zero3"))
    # every tensor of the NQM (one vector of 32) is too small to shard: a warning, no error
    with pytest.warns(ConfigWarning, match=r"train\.sharding=fsdp shards nothing here"):
        plan = prepare(tiny_nqm(train__sharding="fsdp", train__devices=4))
    assert plan.horizon == 100
    with pytest.warns(ConfigWarning, match="the 1 device"):  # one device shards nothing
        prepare(tiny_gpt(train__sharding="fsdp"))


def test_sweep_train_rejects_an_unknown_sharding_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from stepscale.cli.main import main

    run_dir = tmp_path / "run"
    code = main(["train", "conf=train_smoke", "train.sharding=zero3", f"run_dir={run_dir}"])
    err = capsys.readouterr().err
    assert code == 2 and "train.sharding" in err and "zero3" in err, err
    assert "Traceback" not in err and not run_dir.exists()
    # Another sharding (or device count) is not another run: the same run dir resumes.
    from stepscale.cli.train import _comparable

    def saved(sharding: str, devices: int) -> dict[str, Any]:
        return {"train": {"sharding": sharding, "devices": devices, "max_steps": 60}}

    assert _comparable(saved("fsdp", 8)) == _comparable(saved("replicated", 4))


# ------------------------------------------------------------------- in a study
_STUDY = """# @package _global_
nuisance:
  lr: {path: optimizer.lr, type: categorical, choices: [0.003], low: null, high: null}
sampler: {name: grid}
budget: {trials_per_point: 1, max_steps: 10}
objective: {kind: final_eval_loss}
parallelism: 1
"""
# Every static setting as in `fsdp_config(4, …)`, so that the trials reuse the programs the
# module's runs compiled (when those ran first in this process).
_AS_FSDP_CONFIG = """defaults:
  - override /model: mlp
  - override /data: teacher
data: {global_batch: 32, seq_len: 16, eval_examples: 32, eval_batch: 16, max_microbatch: 2}
schedule: {warmup_steps: 4}
optimizer: {clip: 1.0}
train: {log_every: 1, eval_every: 10, checkpoint_every: 20, ema_decay: 0.9, devices: 4}
"""


def _study(tmp_path: Path, body: str) -> list[str]:
    """`_STUDY` plus ``body`` as the user's study ``mine`` in a --config-dir."""
    folder = tmp_path / "conf" / "conf"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mine.yaml").write_text(_STUDY + body)
    return ["conf=mine", "--config-dir", str(tmp_path / "conf")]


def _sweep_run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    from stepscale.cli.main import main

    code = main(["run", *args, "launcher=inline", f"train.compile_cache_dir={TEST_COMPILE_CACHE}"])
    out, err = capsys.readouterr()
    return code, out, err


FIXED = (
    "scientific:\n  batch_size: {path: data.global_batch, values: [16, 32]}\n"
    "fixed:\n  layout: {path: train.sharding, value: %s}\n"
)
SCIENTIFIC = "scientific:\n  layout: {path: train.sharding, values: [replicated, %s]}\n"


def test_a_study_validates_sharding_as_fixed_or_scientific_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for body in (FIXED, SCIENTIFIC):
        code, out, err = _sweep_run(capsys, *_study(tmp_path, body % "fsdp"), "--dry-run", "--json")
        assert code == 0, err
        labels = [p["point"] for p in json.loads(out)["points"]]
        scientific = ["layout=replicated", "layout=fsdp"]
        assert labels == (scientific if body is SCIENTIFIC else ["batch_size=16", "batch_size=32"])
        bad = tmp_path / "bad"
        code, _, err = _sweep_run(capsys, *_study(tmp_path, body % "zero3"), f"run_dir={bad}")
        assert code == 2 and "train.sharding" in err and "zero3" in err, err
        assert "Traceback" not in err and not bad.exists()


@pytest.mark.slow
def test_a_study_ablates_sharding(
    runs: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from stepscale.analysis import load
    from stepscale.analysis.provenance import provenance

    run_dir = tmp_path / "study"
    code, _, err = _sweep_run(
        capsys, *_study(tmp_path, _AS_FSDP_CONFIG + SCIENTIFIC % "fsdp"), f"run_dir={run_dir}"
    )
    assert code == 0, err
    status = {
        p.parent.parent.name: json.loads(p.read_text())
        for p in (run_dir / "trials").glob("*/*/status.json")
    }
    fsdp, replicated = status["layout=fsdp"], status["layout=replicated"]
    assert (fsdp["sharding"], replicated["sharding"]) == ("fsdp", "replicated")
    assert fsdp["state"] == replicated["state"] == "complete"
    assert fsdp["state_bytes_per_device"] < replicated["state_bytes_per_device"]
    np.testing.assert_allclose(fsdp["final_eval_loss"], replicated["final_eval_loss"], rtol=RTOL)
    ds = load(run_dir)
    assert sorted(ds["sharding"].values.tolist()) == ["fsdp", "replicated"]
    recorded = provenance(run_dir, ds, {})["sharding"]
    assert recorded == {"config": "replicated", "by_trial": {"fsdp": 1, "replicated": 1}}


# ------------------------------------------------------------------------- the worker
def _worker(spec_path: str) -> None:
    """The 8-device runs: replicated and fsdp, and an fsdp run killed at `CRASH_AT`."""
    import jax

    assert jax.device_count() == 8
    root = Path(json.loads(Path(spec_path).read_text())["root"])
    statuses = [run(fsdp_config(8, mode), root / mode) for mode in ("fsdp", "replicated")]
    run(fsdp_config(8, "fsdp"), root / "killed", crash_at=CRASH_AT)
    (root / "out.json").write_text(json.dumps({"statuses": statuses}))


if __name__ == "__main__":
    _worker(sys.argv[1])
