"""End-to-end behaviour of the training loop on tiny configs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from helpers import CrashAt, read_jsonl, tiny_gpt, tiny_nqm, without_wall

from stepscale.models import checkpoint
from stepscale.models.nets.nqm import nqm_curvature, nqm_true_noise_scale
from stepscale.models.step import TRACE_COUNTS
from stepscale.models.train import train
from stepscale.reporters import JsonlReporter, NullReporter


def _final_arrays(run_dir: Path) -> dict[str, np.ndarray]:
    step = checkpoint.list_steps(run_dir / "checkpoints")[-1]
    with np.load(run_dir / "checkpoints" / f"step_{step:09d}" / "arrays.npz") as data:
        return {k: data[k] for k in data.files}


@pytest.mark.slow  # over 10 s on 2 cores
def test_metrics_files_follow_the_contract(tmp_path: Path) -> None:
    status = train(tiny_gpt(), JsonlReporter(tmp_path), run_dir=tmp_path)
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert records[0]["step"] == 0 and "eval_loss" in records[0]
    assert [r["step"] for r in records] == [0, 4, 8, 12, 16, 20, 24]
    logged = records[1]
    for key in (
        "train_loss",
        "lr",
        "grad_norm",
        "update_norm",
        "param_norm",
        "tokens",
        "examples",
        "wall_s",
        "steps_per_s",
    ):
        assert key in logged, key
    assert logged["tokens"] == 4 * 8 * 16 and logged["examples"] == 4 * 8
    assert [r["step"] for r in records if "eval_loss" in r] == [0, 8, 16, 24]
    on_disk = json.loads((tmp_path / "status.json").read_text())
    assert on_disk["state"] == "complete" and on_disk["steps_done"] == 24
    assert on_disk["final_eval_loss"] == pytest.approx(records[-1]["eval_loss"])
    assert status["params"] > 0 and status["tokens_done"] == 24 * 8 * 16
    assert records[-1]["eval_loss"] < records[0]["eval_loss"]


def test_same_seed_gives_identical_metrics(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    train(tiny_gpt(), JsonlReporter(a), run_dir=a)
    train(tiny_gpt(), JsonlReporter(b), run_dir=b)
    train(tiny_gpt(train__seed=1), JsonlReporter(c), run_dir=c)
    ra, rb, rc = (without_wall(read_jsonl(p / "metrics.jsonl")) for p in (a, b, c))
    assert ra == rb
    assert ra != rc


@pytest.mark.slow  # over 10 s on 2 cores
def test_resume_is_bit_identical(tmp_path: Path) -> None:
    cfg = tiny_gpt(train__max_steps=32, train__checkpoint_every=8, train__ema_decay=0.9)
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(cfg, JsonlReporter(straight), run_dir=straight)
    with pytest.raises(RuntimeError, match="simulated crash"):
        train(cfg, CrashAt(JsonlReporter(resumed), 20), run_dir=resumed)
    assert checkpoint.list_steps(resumed / "checkpoints")[-1] == 16
    train(cfg, JsonlReporter(resumed), run_dir=resumed)
    a = without_wall(read_jsonl(straight / "metrics.jsonl"))
    b = without_wall(read_jsonl(resumed / "metrics.jsonl"))
    assert [r["step"] for r in b] == [r["step"] for r in a]  # nothing lost or duplicated
    assert a == b
    pa, pb = _final_arrays(straight), _final_arrays(resumed)
    assert pa.keys() == pb.keys()
    for k in pa:
        np.testing.assert_array_equal(pa[k], pb[k])


def _damage(path: Path) -> None:
    """Overwrite bytes in the middle of a file, as a bad disk or a cut copy leaves it."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = b"\x00" * 64
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damaged", [[16], [8, 16]], ids=["newest", "all"])
def test_a_damaged_checkpoint_is_skipped_for_the_newest_valid_one(
    tmp_path: Path, damaged: list[int]
) -> None:
    cfg = tiny_gpt(train__max_steps=24, train__checkpoint_every=8, train__keep_checkpoints=3)
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(cfg, JsonlReporter(straight), run_dir=straight)
    with pytest.raises(RuntimeError, match="simulated crash"):
        train(cfg, CrashAt(JsonlReporter(resumed), 20), run_dir=resumed)
    for step in damaged:
        _damage(resumed / "checkpoints" / f"step_{step:09d}" / "arrays.npz")
    status = train(cfg, JsonlReporter(resumed), run_dir=resumed)
    events = read_jsonl(resumed / "events.jsonl")
    assert [(e["event"], e["step"]) for e in events] == [
        ("checkpoint_skipped", step) for step in reversed(damaged)
    ]
    assert "checksum" in events[0]["error"]
    assert status["resumed_from_step"] == (0 if damaged == [8, 16] else 8)
    a = without_wall(read_jsonl(straight / "metrics.jsonl"))
    b = without_wall(read_jsonl(resumed / "metrics.jsonl"))
    assert a == b  # the same run, from the checkpoint before the damaged one (or from 0)


def _losses(cfg) -> tuple[list[float], list[float]]:
    rep = NullReporter()
    train(cfg, rep)
    train_l = [r["train_loss"] for r in rep.records if "train_loss" in r]
    eval_l = [r["eval_loss"] for r in rep.records if "eval_loss" in r]
    return train_l, eval_l


@pytest.mark.slow
def test_devices_and_accumulation_give_the_same_curve() -> None:
    # the tiny GPT's own batch of 8: the reference is the program other tests use
    base = dict(train__max_steps=12, train__eval_every=4)
    ref = _losses(tiny_gpt(**base))
    variants = {
        "4 devices": tiny_gpt(**base, train__devices=4),
        "4 accumulation steps": tiny_gpt(**base, data__max_microbatch=2),
        "4 devices x 2 accumulation": tiny_gpt(**base, train__devices=4, data__max_microbatch=1),
    }
    for name, cfg in variants.items():
        got = _losses(cfg)
        np.testing.assert_allclose(got[0], ref[0], rtol=2e-4, err_msg=name)
        np.testing.assert_allclose(got[1], ref[1], rtol=2e-4, err_msg=name)


def test_runtime_hyperparameters_do_not_recompile() -> None:
    train(tiny_gpt(train__max_steps=8), NullReporter())
    before = dict(TRACE_COUNTS)
    changed = tiny_gpt(
        train__max_steps=8,
        optimizer__lr=1e-2,
        optimizer__b1=0.8,
        optimizer__b2=0.95,
        optimizer__eps=1e-6,
        optimizer__weight_decay=0.1,
        optimizer__clip=1.0,
        schedule__warmup_steps=2,
    )
    train(changed, NullReporter())
    assert before == TRACE_COUNTS
    # a new program is traced (and counted): the NQM at a dimension no other test uses, with
    # no programs on disk ("": where another test could have saved it), compiles in a second
    train(tiny_nqm(model__dim=24, train__compile_cache_dir=""), NullReporter())
    assert TRACE_COUNTS["train_chunk"] > before["train_chunk"]


def test_huge_lr_is_recorded_as_divergence(tmp_path: Path) -> None:
    # no warmup (a runtime value: the default tiny GPT's programs, compiled once a session)
    cfg = tiny_gpt(optimizer__lr=1e4, schedule__warmup_steps=0)
    status = train(cfg, JsonlReporter(tmp_path), run_dir=tmp_path)
    assert status["state"] == "diverged"
    assert 0 < status["diverged_step"] <= 24 and status["steps_done"] == status["diverged_step"]
    last = read_jsonl(tmp_path / "metrics.jsonl")[-1]
    assert last["step"] == status["diverged_step"]
    on_disk = json.loads((tmp_path / "status.json").read_text())
    assert on_disk["state"] == "diverged" and on_disk["final_eval_loss"] is None


def test_steps_to_target_is_the_first_eval_below_it() -> None:
    rep = NullReporter()
    status = train(tiny_nqm(train__target_loss=0.5, train__eval_every=5, train__log_every=5), rep)
    evals = [(r["step"], r["eval_loss"]) for r in rep.records if "eval_loss" in r]
    first = next(s for s, loss in evals if loss < 0.5)
    assert status["steps_to_target"] == first
    prev = max(s for s, _ in evals if s < first)
    assert prev <= status["steps_to_target_interp"] <= first
    stopped = train(
        tiny_nqm(
            train__target_loss=0.5,
            train__eval_every=5,
            train__log_every=5,
            train__stop_at_target=True,
        ),
        NullReporter(),
    )
    assert stopped["state"] == "complete" and stopped["steps_done"] == first


def test_noise_scale_matches_closed_form_on_frozen_nqm() -> None:
    cfg = tiny_nqm(
        optimizer__lr=0.0,
        train__noise_scale=True,
        train__max_steps=400,
        train__log_every=400,
        train__eval_every=400,
    )
    rep = NullReporter()
    train(cfg, rep)
    estimate = rep.records[-1]["noise_scale"]
    theta = np.full(cfg.model.dim, cfg.model.init_scale)
    truth = nqm_true_noise_scale(cfg.model, theta)
    assert nqm_curvature(cfg.model).shape == (cfg.model.dim,)
    assert math.isfinite(estimate)
    assert abs(estimate - truth) / truth < 0.2, (estimate, truth)


def test_a_finished_run_is_not_trained_further(tmp_path: Path) -> None:
    cfg = tiny_nqm(
        train__target_loss=0.5, train__eval_every=5, train__log_every=5, train__stop_at_target=True
    )
    first = train(cfg, JsonlReporter(tmp_path), run_dir=tmp_path)
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert first["steps_done"] < cfg.train.max_steps
    again = train(cfg, JsonlReporter(tmp_path), run_dir=tmp_path)
    assert again == first
    assert read_jsonl(tmp_path / "metrics.jsonl") == records
    steps = [r["step"] for r in records]
    assert len(steps) == len(set(steps))  # one record per logged step


def test_target_met_at_step_zero_stops_at_once() -> None:
    status = train(tiny_nqm(train__target_loss=100.0, train__stop_at_target=True), NullReporter())
    assert status["steps_to_target"] == 0 and status["steps_done"] == 0


def test_programs_are_not_shared_across_static_data_settings() -> None:
    from stepscale.models.plan import prepare

    base = dict(model__name="mlp", data__name="teacher")
    cold = prepare(tiny_gpt(**base, data__temperature=0.05)).static_key
    warm = prepare(tiny_gpt(**base, data__temperature=1.0)).static_key
    other_seed = prepare(tiny_gpt(**base, data__temperature=1.0, data__seed=3)).static_key
    assert cold != warm and warm == other_seed
