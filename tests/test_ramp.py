"""Batch ramp-up in the built-in trainer: MaxText's stages, the batch of every step in
metrics.jsonl, exact examples, one program per batch, resume mid-ramp, fsdp, LR coupling,
and every new key refused with its name."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from helpers import CrashAt, read_jsonl, tiny_gpt, tiny_nqm, without_wall
from scipy import stats

from stepscale.analysis.course import ramp_comparison
from stepscale.cli.main import main
from stepscale.models import checkpoint
from stepscale.models.config import DataConfig
from stepscale.models.errors import ConfigError
from stepscale.models.plan import prepare
from stepscale.models.ramp import BatchStage, batch_schedule
from stepscale.models.step import TRACE_COUNTS
from stepscale.models.train import train
from stepscale.reporters import JsonlReporter, NullReporter
from stepscale.sweeps.formats import FORMATS, export_space, import_space, validate_document
from stepscale.sweeps.study.space_doc import SCHEMA_TAG


def _data(**rampup: object) -> DataConfig:
    data = DataConfig(global_batch=32)
    for k, v in rampup.items():
        setattr(data.rampup, k, v)
    return data


def test_maxtext_stages_match_a_hand_computed_schedule() -> None:
    # start 8, increment 8 to 32: n = 3 stages of 200 / 3 = 66.7 samples each, counted
    # afresh per stage: ceil(66.7 / 8) = 9, ceil(66.7 / 16) = 5, ceil(66.7 / 24) = 3 steps.
    s = batch_schedule(_data(start=8, increment=8, samples=200))
    assert s.stages == (BatchStage(0, 8), BatchStage(9, 16), BatchStage(14, 24), BatchStage(17, 32))
    assert [s.batch_at(u) for u in (0, 8, 9, 13, 14, 16, 17, 99)] == [8, 8, 16, 16, 24, 24, 32, 32]
    assert s.examples_before(17) == 9 * 8 + 5 * 16 + 3 * 24 == 224
    assert s.examples_before(20) == 224 + 3 * 32
    assert s.steps_for_examples(224) == 17 and s.steps_for_examples(225) == 18
    assert s.rampup_steps == 17 and s.next_change(9) == 14 and s.next_change(17) is None
    custom = batch_schedule(_data(schedule=[[0, 4], [6, 8], [11, 32]]))
    assert custom.stages == (BatchStage(0, 4), BatchStage(6, 8), BatchStage(11, 32))
    assert batch_schedule(_data(start=8, increment=8, samples=0)).stages == (BatchStage(0, 32),)


def test_a_ramp_run_logs_the_batch_of_every_step_and_resumes_bit_identically(
    tmp_path: Path,
) -> None:
    # SGD with momentum (optimizer state to resume); dim 48 appears in no other test, so
    # the programs compiled here are this test's own.
    cfg = tiny_nqm(
        model__dim=48, optimizer__b1=0.9, optimizer__lr=0.05, data__global_batch=32,
        train__max_steps=24, train__log_every=4, train__eval_every=8, train__checkpoint_every=8,
    )  # fmt: skip
    cfg.data.rampup.start, cfg.data.rampup.increment, cfg.data.rampup.samples = 8, 8, 200
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    before = TRACE_COUNTS["train_chunk"]
    status = train(cfg, JsonlReporter(straight), run_dir=straight)
    assert TRACE_COUNTS["train_chunk"] - before == 4  # one program per batch size
    records = read_jsonl(straight / "metrics.jsonl")
    logged = [r for r in records if "step_batch" in r]
    # every stage's last step is logged: the batch of update u is that of the first
    # record after it
    batch_of = [next(r["step_batch"] for r in logged if r["step"] > u) for u in range(24)]
    assert batch_of == [8] * 9 + [16] * 5 + [24] * 3 + [32] * 7
    expected = np.cumsum([0, *batch_of])
    assert all(r["examples"] == expected[r["step"]] for r in records)
    assert all(r["tokens"] == r["examples"] for r in records)
    assert status["examples_done"] == expected[-1] == 448 and status["rampup_steps"] == 17
    assert status["batch_stages"] == [[0, 8], [9, 16], [14, 24], [17, 32]]

    with pytest.raises(RuntimeError, match="simulated crash"):
        train(cfg, CrashAt(JsonlReporter(resumed), 14), run_dir=resumed)
    assert checkpoint.list_steps(resumed / "checkpoints") == [8]  # mid-ramp (batch 8)
    before = TRACE_COUNTS["train_chunk"]
    train(cfg, JsonlReporter(resumed), run_dir=resumed)
    assert TRACE_COUNTS["train_chunk"] == before  # the programs are reused
    assert without_wall(read_jsonl(resumed / "metrics.jsonl")) == without_wall(records)
    a = np.load(straight / "checkpoints" / "step_000000024" / "arrays.npz")
    b = np.load(resumed / "checkpoints" / "step_000000024" / "arrays.npz")
    for k in a.files:
        np.testing.assert_array_equal(a[k], b[k])


def test_a_ramp_under_fsdp_matches_replicated_and_couples_the_lr() -> None:
    # 2048 NQM parameters are split over the 2 devices under fsdp.
    runs = {}
    for sharding in ("replicated", "fsdp"):
        cfg = tiny_nqm(
            model__dim=2048,
            data__global_batch=16,
            optimizer__lr=0.2,
            train__max_steps=20,
            train__log_every=5,
            train__devices=2,
            train__sharding=sharding,
        )
        cfg.data.rampup.schedule = [[0, 4], [7, 8], [13, 16]]
        cfg.data.rampup.lr_coupling = "sqrt"
        rep = NullReporter()
        runs[sharding] = (train(cfg, rep), rep.records)
    status, records = runs["fsdp"]
    assert status["sharding"] == "fsdp" and status["examples_done"] == 7 * 4 + 6 * 8 + 7 * 16
    by_step = {r["step"]: r for r in records if "lr" in r}
    # the LR of a stage: lr × sqrt(batch / final); logged at each stage's last step
    assert by_step[7]["step_batch"] == 4 and by_step[7]["lr"] == pytest.approx(0.2 * 0.5)
    assert by_step[13]["step_batch"] == 8 and by_step[13]["lr"] == pytest.approx(0.2 * 0.5**0.5)
    assert by_step[20]["step_batch"] == 16 and by_step[20]["lr"] == pytest.approx(0.2)
    replicated = runs["replicated"][1]
    assert [r["step"] for r in records] == [r["step"] for r in replicated]
    for a, b in zip(records, replicated, strict=True):
        if "eval_loss" in a:
            assert a["eval_loss"] == pytest.approx(b["eval_loss"], rel=1e-5)


BAD_KEYS = {
    "data.rampup.start": {"samples": 100, "start": 0, "increment": 8},
    "data.rampup.increment": {"samples": 100, "start": 8, "increment": 5},
    "data.rampup.samples": {"samples": -1},
    "data.rampup.schedule": {"schedule": [[0, 8], [4, 16]]},  # does not end at 32
    "data.rampup.lr_coupling": {"lr_coupling": "cubic"},
}


@pytest.mark.parametrize("key", BAD_KEYS)
def test_a_bad_ramp_is_refused_naming_its_key(key: str) -> None:
    cfg = tiny_gpt(data__global_batch=32)
    for k, v in BAD_KEYS[key].items():
        setattr(cfg.data.rampup, k, v)
    with pytest.raises(ConfigError) as err:
        prepare(cfg)
    assert err.value.field == key


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("optimizer.update_clip", -1.0),
        ("train.spike_window", -3),
        ("train.spike_factor", 1.0),
        ("train.grad_norm_spike_factor", float("nan")),
        ("train.init_from", "/no/such/checkpoints/step_000000010"),
    ],
)
def test_the_other_new_keys_are_refused_naming_themselves(key: str, value: object) -> None:
    cfg = tiny_gpt()
    section, name = key.split(".")
    setattr(getattr(cfg, section), name, value)
    with pytest.raises(ConfigError) as err:
        prepare(cfg)
    assert err.value.field == key
    cfg = tiny_gpt(optimizer__name="lion", optimizer__update_clip=1.0)
    with pytest.raises(ConfigError, match=r"optimizer\.update_clip"):
        prepare(cfg)


RAMP_TUNED = """\
# @package _global_
# The smoke study with the ramp's length tuned per point.
defaults:
  - smoke
  - _self_
data: {rampup: {start: 4, increment: 4}}
nuisance:
  ramp: {path: data.rampup.samples, type: int, low: 0, high: 256, unit: examples}
"""


def test_a_ramp_is_a_parameter_of_a_study_and_a_bad_one_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "ramp_tuned.yaml").write_text(RAMP_TUNED)
    # every point checked by the trainer at both ends of the ramp's range
    code = main(["run", "conf=ramp_tuned", "--config-dir", str(tmp_path), "--dry-run"])
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    # 4 devices: the ramp's first batch of 6 does not split over them
    code = main(
        ["run", "conf=smoke", "--dry-run", "data.rampup.samples=64", "data.rampup.start=6",
         "data.rampup.increment=2", "scientific.batch_size.values=[16]"]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "data.rampup.start" in err and "Traceback" not in err


NEW_KEYS_DOC = {
    "schema": SCHEMA_TAG,
    "name": "ramp",
    "parameters": [
        {"name": "batch_size", "path": "data.global_batch", "role": "scientific",
         "type": "int", "values": [8, 16]},
        {"name": "rampup_samples", "path": "data.rampup.samples", "role": "nuisance",
         "type": "int", "low": 0, "high": 4096, "scale": "linear"},
        {"name": "rampup_lr_coupling", "path": "data.rampup.lr_coupling", "role": "nuisance",
         "type": "categorical", "choices": ["none", "sqrt", "linear"]},
        {"name": "update_clip", "path": "optimizer.update_clip", "role": "nuisance",
         "type": "float", "low": 0.5, "high": 2.0, "scale": "linear"},
        {"name": "spike_factor", "path": "train.spike_factor", "role": "fixed",
         "type": "float", "value": 2.0},
        {"name": "rampup_start", "path": "data.rampup.start", "role": "fixed",
         "type": "int", "value": 4},
    ],
}  # fmt: skip


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_new_keys_go_through_every_search_space_format(fmt: str) -> None:
    validate_document(NEW_KEYS_DOC)
    text, _ = export_space(NEW_KEYS_DOC, fmt)
    back, _ = import_space(text, fmt)
    paths = {p["name"]: p["path"] for p in back["parameters"]}
    # Optuna's format holds the tuned parameters only
    kept = [p for p in NEW_KEYS_DOC["parameters"] if fmt != "optuna" or p["role"] == "nuisance"]
    assert {p["name"]: p["path"] for p in kept} == paths


def _ramp_dataset() -> xr.Dataset:
    """A ramp study's Dataset with known numbers: per point one tune trial and three
    confirm seeds, crossing the target at the given steps with the given examples."""
    steps = {"c": [31.0, 30.0, 31.0, 32.0], "r": [37.0, 36.0, 37.0, 38.0]}
    examples = {"c": [64 * s for s in steps["c"]], "r": [1040.0, 1000.0, 1040.0, 1080.0]}
    ids, point, kind, cross, rate, ramp = [], [], [], [], [], []
    for p, samples in (("c", 0), ("r", 1024)):
        for n in range(4):
            ids.append(f"rampup_samples={samples}/{n}")
            point.append(f"rampup_samples={samples}")
            kind.append("tune" if n == 0 else "confirm")
            cross.append(steps[p][n])
            rate.append(examples[p][n] / steps[p][n])
            ramp.append(0 if p == "c" else 41)
    grid = np.arange(0, 60, 10)
    meta = [{"name": "rampup_samples", "coord": "rampup_samples", "role": "scientific",
             "path": "data.rampup.samples", "quantity": None}]  # fmt: skip
    return xr.Dataset(
        coords={
            "trial": ("trial", ids),
            "step": ("step", grid),
            "point": ("trial", point),
            "kind": ("trial", kind),
            "rampup_samples": ("trial", [0] * 4 + [1024] * 4),
            "rampup_steps": ("trial", np.array(ramp, float)),
            "steps_to_target_interp": ("trial", cross),
            "examples": (("trial", "step"), np.outer(rate, grid)),
        },
        attrs={"parameters": json.dumps(meta), "target_loss": 1.1},
    )


def test_the_ramp_comparison_says_what_a_ramp_saved_with_intervals_from_confirm_seeds() -> None:
    ds = _ramp_dataset()
    rec = ramp_comparison(ds, {"rampup_samples=0": 0, "rampup_samples=1024": 4}, "sequences")
    constant, ramp = rec.arms
    assert not constant.ramped and ramp.ramped and ramp.reference == "rampup_samples=0"
    assert constant.steps.mean == 31 and constant.examples.mean == 64 * 31
    # Welch: d = 37 − 31 = 6, se = sqrt(2/3), 4 degrees of freedom
    half = stats.t.ppf(0.975, 4) * math.sqrt(2 / 3)
    assert ramp.d_steps.mean == pytest.approx(6.0)
    assert (ramp.d_steps.lo, ramp.d_steps.hi) == pytest.approx((6 - half, 6 + half))
    assert ramp.d_examples.mean == pytest.approx(1040 - 64 * 31)
    assert rec.verdicts == (
        f"rampup_samples=1024 vs rampup_samples=0: cost steps: +6 steps [{6 - half:.4g}, "
        f"{6 + half:.4g}]; saved examples: -944 sequences [{ramp.d_examples.lo:.4g}, "
        f"{ramp.d_examples.hi:.4g}].",
    )
    constant_only = ds.where(ds["rampup_steps"] == 0, drop=True)
    assert ramp_comparison(constant_only, {}, "sequences") is None
