"""Instability as data: the spike rule on constructed series, update clipping against a
constructed large gradient, and a run that ends above its initial loss counted diverged
(by the built-in trainer and for a user trainer's status)."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr
from helpers import CrashAt, read_jsonl, tiny_nqm

from stepscale.analysis.course import spike_table
from stepscale.models.config import OptimizerConfig
from stepscale.models.optim import clip_updates, make_optimizer, set_hyperparams
from stepscale.models.spikes import SpikeDetector, find_spikes
from stepscale.models.train import train
from stepscale.reporters import JsonlReporter, NullReporter
from stepscale.sweeps.study.objective import objective_value
from stepscale.sweeps.trainers.final_status import complete_status


def test_the_spike_rule_gives_the_exact_steps_of_a_constructed_series() -> None:
    rng = np.random.default_rng(0)
    loss = 2.0 + 0.05 * rng.standard_normal(60)  # steps 1..60
    loss[9] = 9.0  # step 10: the window (5 steps) is full since step 6
    loss[24:27] = [4.0, 5.0, 4.5]  # steps 25-27: one spike, counted at its first step
    loss[39] = np.nan  # step 40: not finite, never a spike, not in the window
    loss[40] = 2.9  # step 41: 1.45 × the median, below the factor 1.5
    loss[49] = 3.2  # step 50
    loss[2] = 50.0  # step 3: before the window is full
    assert find_spikes(loss, window=5, factor=1.5) == [10, 25, 50]
    # fed chunk by chunk, with the state saved and restored in between (a resume)
    found, det = [], SpikeDetector(5, 1.5)
    for start in range(0, 60, 7):
        found += [s for s, _, _ in det.scan(start + 1, loss[start : start + 7])]
        saved = det.to_json()
        det = SpikeDetector(5, 1.5)
        det.load(saved)
    assert found == [10, 25, 50]
    assert find_spikes(loss, window=0, factor=1.5) == []


def _adam_run(update_clip: float) -> list[float]:
    """Losses 1 + ½|w|² under Adam (β1 = 0, β2 = 0.999) on gradients w + small noise, with
    one huge gradient at update 100 — the trainer's own optimizer update, update clipping
    included. β2 close to 1 keeps v̂ small after many small gradients, so the big one's
    update g/√v̂ is ~30 × the LR in every coordinate."""
    tx = make_optimizer(OptimizerConfig(name="adamw"))
    hp = {
        "b1": 0.0, "b2": 0.999, "eps": 1e-8, "weight_decay": 0.0, "update_clip": update_clip,
    }  # fmt: skip
    hp = {k: jnp.float32(v) for k, v in hp.items()}
    rng = np.random.default_rng(1)
    noise = 0.01 * rng.standard_normal((140, 64))
    noise[100] += 300.0 * rng.standard_normal(64)

    def step(carry: tuple, g_noise: jnp.ndarray) -> tuple:
        w, state = carry
        grads = {"w": w["w"] + g_noise}
        state = set_hyperparams("adamw", state, hp, jnp.float32(0.02))
        updates, state = tx.update(grads, state, w)
        updates = clip_updates(updates, grads, state, hp)
        loss = 1.0 + 0.5 * jnp.sum(w["w"] ** 2)
        return (jax.tree.map(lambda p, u: p + u, w, updates), state), loss

    w = {"w": jnp.ones(64) * 0.5}
    _, losses = jax.lax.scan(step, (w, tx.init(w)), jnp.asarray(noise, jnp.float32))
    return np.asarray(losses).tolist()


def test_update_clipping_removes_the_spike_of_a_large_gradient() -> None:
    plain, clipped = _adam_run(0.0), _adam_run(1.0)
    # the loss of update u is that of step u + 1; the big gradient's update shows at 102
    assert find_spikes(plain, window=20, factor=1.5) == [102]
    assert find_spikes(clipped, window=20, factor=1.5) == []
    assert max(clipped[100:]) < 1.1 * clipped[99] and max(plain[100:]) > 2 * plain[99]


def test_a_run_that_ends_above_its_initial_loss_is_diverged() -> None:
    # Batch 2 with a noise scale of 100: SGD's noise floor lies above the starting loss
    cfg = tiny_nqm(
        model__dim=100, model__noise_scale=100.0, data__global_batch=2, optimizer__lr=0.05,
        train__max_steps=40,
    )  # fmt: skip
    rep = NullReporter()
    status = train(cfg, rep)
    evals = [r["eval_loss"] for r in rep.records if "eval_loss" in r]
    assert evals[-1] > evals[0] and status["state"] == "diverged"
    assert status["final_eval_loss"] == evals[-1] and status["diverged_step"] == 40
    assert objective_value("steps_to_target", {**status, "target_loss": 1.0}, evals[0]) == 80
    # the same for a user trainer's status, completed from its eval losses
    records = [{"step": 0, "eval_loss": 2.0}, {"step": 10, "eval_loss": 1.5}]
    records.append({"step": 20, "eval_loss": 2.5})
    full = complete_status({"state": "complete", "steps_done": 20}, records, 20, None)
    assert full["state"] == "diverged" and full["diverged_step"] == 20
    assert objective_value("steps_to_target", {**full, "target_loss": 1.0}, 2.0) == 40
    records[-1]["eval_loss"] = 1.9
    kept = complete_status({"state": "complete", "steps_done": 20}, records, 20, None)
    assert kept["state"] == "complete"


def test_a_run_records_its_spikes_as_events_and_counts_and_resumes_them(tmp_path: Path) -> None:
    # Adam on the NQM: near the minimum its per-batch training loss swings (the noise term
    # is as large as the loss), which this short window flags
    cfg = tiny_nqm(
        optimizer__name="adamw", optimizer__b1=0.9, optimizer__b2=0.95, optimizer__lr=0.1,
        data__global_batch=4, train__max_steps=60, train__spike_window=10,
        train__checkpoint_every=20,
    )  # fmt: skip
    straight, resumed = tmp_path / "a", tmp_path / "b"
    status = train(cfg, JsonlReporter(straight), run_dir=straight)
    steps = status["loss_spike_steps"]
    assert status["loss_spikes"] == len(steps) >= 3
    events = [e for e in read_jsonl(straight / "events.jsonl") if e["event"] == "loss_spike"]
    assert [e["step"] for e in events] == steps
    assert all(e["value"] > 1.5 * e["median"] for e in events)
    with pytest.raises(RuntimeError, match="simulated crash"):
        train(cfg, CrashAt(JsonlReporter(resumed), 50), run_dir=resumed)
    again = train(cfg, JsonlReporter(resumed), run_dir=resumed)  # from step 40
    assert (
        again["loss_spike_steps"] == steps
        and again["grad_norm_spikes"] == status["grad_norm_spikes"]
    )
    events = [e for e in read_jsonl(resumed / "events.jsonl") if e["event"] == "loss_spike"]
    assert [e["step"] for e in events] == steps  # none lost, none twice


def test_the_spike_table_counts_per_point_with_the_lrs_of_spiking_trials() -> None:
    meta = [
        {"name": "b2", "coord": "b2", "role": "scientific", "path": "optimizer.b2",
         "quantity": None},
        {"name": "lr", "coord": "param_lr", "role": "nuisance", "path": "optimizer.lr",
         "quantity": "learning_rate"},
    ]  # fmt: skip
    ds = xr.Dataset(
        coords={
            "trial": ("trial", ["b2=0.95/0", "b2=0.95/1", "b2=0.999/0", "b2=0.999/1"]),
            "point": ("trial", ["b2=0.95", "b2=0.95", "b2=0.999", "b2=0.999"]),
            "state": ("trial", ["complete", "diverged", "complete", "complete"]),
            "b2": ("trial", [0.95, 0.95, 0.999, 0.999]),
            "param_lr": ("trial", [0.01, 0.5, 0.01, 0.3]),
            "loss_spikes": ("trial", [0.0, 3.0, 0.0, 0.0]),
            "grad_norm_spikes": ("trial", [0.0, 1.0, 0.0, 4.0]),
        },
        attrs={"parameters": json.dumps(meta)},
    )
    rec = spike_table(ds)
    low, high = rec.rows
    assert (low.point, low.b2, low.trials, low.with_loss_spikes, low.loss_spikes) == (
        "b2=0.95", "0.95", 2, 1, 3,
    )  # fmt: skip
    assert (low.grad_norm_spikes, low.diverged, low.lr_spiking, low.lr_quiet) == (1, 1, 0.5, 0.01)
    assert (high.with_loss_spikes, high.grad_norm_spikes, high.lr_spiking) == (0, 4, 0.3)
    assert rec.total_loss_spikes == 3 and rec.total_grad_norm_spikes == 5
