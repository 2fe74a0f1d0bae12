"""``train.on_spike``: a data stream with one poisoned batch spikes a run without the
policy; with it the run goes back to a checkpoint before the batch, skips it, reaches the
target, says so in events.jsonl and status.json, and does the same again when rerun or
killed and resumed mid-restart (models/restarts.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import read_jsonl, without_wall

from stepscale.models import checkpoint
from stepscale.models.config import DataConfig, ModelConfig, TrainerConfig
from stepscale.models.data import Batch, DataInfo, SourcePlugin, register, unregister
from stepscale.models.errors import ConfigError
from stepscale.models.restarts import restart_point
from stepscale.models.train import train
from stepscale.reporters import Action, JsonlReporter

POISONED = 30  # the batch index (0-based update) whose inputs are scaled up
SCALE = 1e3


class PoisonedClasses:
    """Host-side toy classification (x ~ N(0, I), y = argmax of fixed projections) whose
    batch ``POISONED`` has its inputs × ``SCALE``."""

    device_side = False

    def __init__(self, cfg: DataConfig) -> None:
        self.w = np.random.default_rng([cfg.seed, 5]).standard_normal((cfg.input_dim, 3))
        self.input_dim, self.seed, self.n_eval = cfg.input_dim, cfg.seed, cfg.eval_examples
        self.info = DataInfo(kind="classify", input_dim=cfg.input_dim, n_classes=3)

    def _draw(self, rng: np.random.Generator, n: int) -> Batch:
        x = rng.standard_normal((n, self.input_dim))
        return {"x": x.astype(np.float32), "y": np.argmax(x @ self.w, axis=-1).astype(np.int32)}

    def device_arrays(self) -> dict[str, np.ndarray]:
        """None: the batches come from the host."""
        return {}

    def sample(self, arrays: Any, key: Any, batch_size: int) -> Batch:
        """Not available: host-side."""
        raise NotImplementedError

    def host_batch(self, seed: int, step: int, batch_size: int, rows: slice | None = None) -> Batch:
        """The batch of stream index ``step`` (poisoned at `POISONED`)."""
        batch = self._draw(np.random.default_rng([self.seed, seed, step]), batch_size)
        if step == POISONED:
            batch["x"] = batch["x"] * np.float32(SCALE)
        return {k: v[rows] if rows is not None else v for k, v in batch.items()}

    def eval_set(self) -> Batch:
        """A fixed held-out set."""
        return self._draw(np.random.default_rng([self.seed, 99]), self.n_eval)


SOURCE = SourcePlugin(
    "poisoned_classes",
    sequences=False,
    check=lambda cfg: None,
    build=lambda cfg, model: PoisonedClasses(cfg),
)


@pytest.fixture(scope="module", autouse=True)
def registered() -> Iterator[None]:
    register(SOURCE)
    try:
        yield
    finally:
        unregister(SOURCE.name)


def config(policy: str = "restart", **on_spike: Any) -> TrainerConfig:
    """A tiny MLP on the poisoned stream, 60 steps, a checkpoint every 10."""
    cfg = TrainerConfig(name="poisoned", model=ModelConfig(name="mlp", size="tiny"))
    cfg.data.name = "poisoned_classes"
    cfg.data.input_dim, cfg.data.global_batch = 8, 16
    cfg.data.eval_examples, cfg.data.eval_batch = 64, 64
    cfg.optimizer.name, cfg.optimizer.b1, cfg.optimizer.lr = "sgd", 0.0, 0.1
    cfg.schedule.name, cfg.schedule.warmup_steps = "constant", None
    t = cfg.train
    t.max_steps, t.log_every, t.eval_every, t.checkpoint_every = 60, 5, 10, 10
    t.spike_window, t.spike_factor, t.target_loss = 5, 3.0, 0.6
    t.devices, t.compile_cache_dir = 1, ""
    t.on_spike.policy = policy
    t.on_spike.rewind_steps, t.on_spike.skip_batches = 5, 15
    for key, value in on_spike.items():
        setattr(t.on_spike, key, value)
    return cfg


def run(cfg: TrainerConfig, folder: Path, reporter: Any = None) -> dict[str, Any]:
    return train(cfg, reporter or JsonlReporter(folder), run_dir=folder)


def restarts_in(folder: Path) -> list[dict[str, Any]]:
    return [e for e in read_jsonl(folder / "events.jsonl") if e["event"] == "spike_restart"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The run without the policy, with it, and with it again (one of each)."""
    root = tmp_path_factory.mktemp("spikes")
    out = {}
    for name, policy in (("off", "off"), ("on", "restart"), ("again", "restart")):
        out[name] = root / name
        run(config(policy), out[name])
    return out


def status(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "status.json").read_text())


def test_without_the_policy_the_poisoned_batch_spikes_the_run(runs: dict[str, Path]) -> None:
    s = status(runs["off"])
    assert POISONED + 1 in s["loss_spike_steps"]  # its loss belongs to step u + 1
    assert s["steps_to_target"] is None or s["state"] == "diverged"
    assert s["spike_restarts"] is None and s["steps_redone"] is None  # no policy ran


def test_with_it_the_run_restarts_before_the_batch_skips_it_and_reaches_the_target(
    runs: dict[str, Path],
) -> None:
    s, events = status(runs["on"]), restarts_in(runs["on"])
    assert s["state"] == "complete" and s["steps_to_target"] is not None
    assert s["spike_restarts"] == 1 and s["batches_skipped"] == 15
    [event] = events
    # the spike at step 31 is found at the end of its chunk (step 35); the newest
    # checkpoint at least R = 5 steps before it is step 20
    assert event["step"] == POISONED + 1 and event["from_step"] == 20
    assert event["batches_skipped"] == 15 and event["trigger"] == "loss_spike"
    assert event["steps_redone"] == 15 and s["steps_redone"] == 15
    assert s["steps_spent"] == s["steps_done"] + 15
    # compute spent counts the redone steps; the path's records do not
    assert s["examples_done"] == (s["steps_done"] + 15) * 16
    records = read_jsonl(runs["on"] / "metrics.jsonl")
    steps = [r["step"] for r in records]
    assert steps == sorted(set(steps))  # the abandoned path's records are gone
    assert records[-1]["examples"] == s["steps_done"] * 16
    assert POISONED + 1 not in s["loss_spike_steps"]  # the path kept has no spike there
    assert not [e for e in read_jsonl(runs["on"] / "events.jsonl") if e["event"] == "loss_spike"]


def test_a_rerun_makes_the_same_restarts_and_numbers(runs: dict[str, Path]) -> None:
    a, b = status(runs["on"]), status(runs["again"])
    assert {k: v for k, v in a.items() if k != "wall_s"} == {
        k: v for k, v in b.items() if k != "wall_s"
    }
    drop = ("time", "host", "job_id")
    ea = [{k: v for k, v in e.items() if k not in drop} for e in restarts_in(runs["on"])]
    eb = [{k: v for k, v in e.items() if k not in drop} for e in restarts_in(runs["again"])]
    assert ea == eb
    assert without_wall(read_jsonl(runs["on"] / "metrics.jsonl")) == without_wall(
        read_jsonl(runs["again"] / "metrics.jsonl")
    )


class CrashAfterRestart(JsonlReporter):
    """Dies (like a killed job) at the first record at or past ``step`` after a restart."""

    def __init__(self, folder: Path, step: int) -> None:
        super().__init__(folder)
        self.step, self.restarted = step, False

    def rewind(self, step: int) -> None:
        super().rewind(step)
        self.restarted = True

    def report(self, step: int, metrics: dict[str, Any]) -> Action:
        super().report(step, metrics)
        if self.restarted and step >= self.step:
            raise RuntimeError("simulated crash")
        return Action.CONTINUE


def test_a_run_killed_mid_restart_resumes_to_the_same_result(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    folder = tmp_path / "killed"
    with pytest.raises(RuntimeError, match="simulated crash"):
        run(config(), folder, CrashAfterRestart(folder, 25))  # back at 20, before step 31
    assert checkpoint.list_steps(folder / "checkpoints")[-1] == 20
    resumed = run(config(), folder)
    assert resumed["resumed_from_step"] == 20
    straight = status(runs["on"])
    same = {k: v for k, v in straight.items() if k not in ("wall_s", "resumed_from_step")}
    assert {k: v for k, v in resumed.items() if k in same} == same
    assert len(restarts_in(folder)) == 1
    assert without_wall(read_jsonl(folder / "metrics.jsonl")) == without_wall(
        read_jsonl(runs["on"] / "metrics.jsonl")
    )


def test_after_a_restart_the_pruner_judges_the_new_path_not_the_spike(tmp_path: Path) -> None:
    """Optuna keeps the first value reported at a step: the abandoned path's evaluations
    are overwritten as the new path redoes them, and the pruner is not asked while a
    later one (the spike) still stands. (Pruners that judge a trial at its last reported
    step, as the deadline pruner and Optuna's threshold pruner do, saw the spike, and the
    abandoned path's step, until the new path got past it.)"""
    import optuna

    from stepscale.sweeps.job.heartbeat import JobHeartbeat
    from stepscale.sweeps.job.trial_job import TrialReporter

    study = optuna.create_study(
        storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(tmp_path / "journal"))
        ),
        pruner=optuna.pruners.ThresholdPruner(upper=3.0),
    )
    trial = study.ask()
    folder = tmp_path / "trial"
    folder.mkdir()
    reporter = TrialReporter(JsonlReporter(folder), trial, JobHeartbeat(folder, active=False))
    reporter.begin(0)
    verdicts = [reporter.report(step, {"eval_loss": v}) for step, v in ((10, 0.9), (20, 0.95))]
    assert verdicts == [Action.CONTINUE] * 2
    assert reporter.report(30, {"eval_loss": 4.0}) == Action.PRUNE  # the spike
    reporter.rewind(10)  # the restart goes back before it
    verdicts = [reporter.report(step, {"eval_loss": v}) for step, v in ((20, 0.85), (30, 0.8))]
    assert verdicts == [Action.CONTINUE] * 2
    stored = study._storage.get_trial(trial._trial_id).intermediate_values
    assert stored == {10: 0.9, 20: 0.85, 30: 0.8}
    assert [r["step"] for r in read_jsonl(folder / "metrics.jsonl")] == [10, 20, 30]
    assert reporter.report(40, {"eval_loss": 5.0}) == Action.PRUNE  # asked again beyond it


def test_restarts_used_up_end_the_run_as_diverged(tmp_path: Path) -> None:
    s = run(config(max_restarts=0), tmp_path)
    assert s["state"] == "diverged" and s["diverged_step"] == POISONED + 1
    assert s["spike_restarts"] == 0 and "after 0 restarts" in s["reason"]


def test_the_restart_point_is_the_newest_checkpoint_far_enough_back() -> None:
    assert restart_point([0, 10, 20, 30], 31, 5) == 20
    assert restart_point([0, 10, 20, 30], 35, 5) == 30
    assert restart_point([10, 20], 12, 5) == 10  # none far enough: the oldest before it
    assert restart_point([20], 12, 5) is None


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("rewind_steps", -1),
        ("skip_batches", -1),
        ("max_restarts", -1),
        ("lr_scale", 0.0),
        ("policy", "sometimes"),
    ],
)
def test_bad_values_name_their_key(key: str, value: Any, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=rf"train\.on_spike\.{key}"):
        run(config(**{key: value}), tmp_path)


def test_a_policy_needs_checkpoints(tmp_path: Path) -> None:
    cfg = config()
    cfg.train.checkpoint_every = 0
    with pytest.raises(ConfigError, match=r"train\.checkpoint_every"):
        run(cfg, tmp_path)


def test_the_spike_table_counts_restarts_and_what_they_cost() -> None:
    import xarray as xr

    from stepscale.analysis.course import spike_table
    from stepscale.analysis.report.course import spikes_section

    ds = xr.Dataset(
        coords={
            "trial": ("trial", ["b=8/0", "b=8/1", "b=64/0", "b=64/1"]),
            "point": ("trial", ["b=8", "b=8", "b=64", "b=64"]),
            "state": ("trial", ["complete", "complete", "complete", "diverged"]),
            "steps_done": ("trial", [100.0, 100.0, 50.0, 40.0]),
            "loss_spikes": ("trial", [0.0, 0.0, 0.0, 1.0]),
            "grad_norm_spikes": ("trial", [0.0, 0.0, 1.0, 1.0]),
            "spike_restarts": ("trial", [0.0, 0.0, 1.0, 3.0]),
            "steps_redone": ("trial", [0.0, 0.0, 15.0, 30.0]),
        },
        attrs={"parameters": "[]"},
    )
    rec = spike_table(ds)
    assert rec is not None
    small, large = rec.rows
    assert (small.restarts, small.with_restarts, small.steps_redone) == (0, 0, 0)
    assert (large.restarts, large.with_restarts, large.steps_redone, large.steps_done) == (
        4, 2, 45, 90,
    )  # fmt: skip
    assert (rec.total_restarts, rec.total_steps_redone) == (4, 45)
    text = " ".join(str(b) for b in spikes_section(ds))
    assert "45 (50.0%)" in text and "Restarts: 4 in all, which redid 45 steps" in text


def test_diverged_fractions_are_tested_one_sided_with_fishers_exact_test() -> None:
    from stepscale.analysis.compare import ArmRow, diverged_tests

    def arm(study: str, batch: float, diverged: int) -> ArmRow:
        return ArmRow(study, f"b={batch:g}", batch, "—", 1.0, 0.1, (), 8, 0, 0, 0, diverged)

    arms = [arm("on", 64, 0), arm("off", 64, 4), arm("on", 256, 1), arm("off", 256, 1)]
    at_64, at_256, pooled = diverged_tests(arms, 0.05)
    # P(X <= 0) for X ~ Hypergeometric(16 trials, 4 diverged, 8 drawn) = C(12,8) / C(16,8)
    assert at_64.p == pytest.approx(495 / 12870)
    assert "on has fewer diverged trials (p < 0.05)" in at_64.sentence("sequences")
    # 1 of 8 against 1 of 8: P(X <= 1) = 1 - P(X = 2) = 1 - C(8,2) / C(16,2)
    assert at_256.p == pytest.approx(1 - 28 / 120)
    assert "not shown" in at_256.sentence("sequences")
    assert (pooled.diverged, pooled.trials, pooled.other_diverged, pooled.other_trials) == (
        1, 16, 5, 16,
    )  # fmt: skip
    assert "all batch sizes" in pooled.sentence("sequences")


# --- the study arm on real text: conf/conf/shakespeare_spikes.yaml --------------------------

TEXT = "shakespeare_spikes"
OFF_ARM = [f"name={TEXT}_off", "train.on_spike.policy=off"]  # the preset's second command


@pytest.mark.slow  # two shrunk studies and their comparison through the CLI
def test_the_real_text_arms_differ_by_the_policy_and_the_report_counts_restarts(
    tmp_path: Path,
) -> None:
    from helpers import TEST_COMPILE_CACHE

    from stepscale.cli.main import main

    shrink = [
        "scientific.batch_size.values=[16,64]", "nuisance.lr.by=null",
        "nuisance.lr.choices=[0.01]", "budget.trials_per_point=1", "budget.confirm_seeds=2",
        'derived.horizon.expr="20"', 'derived.eval_every.expr="10"',
        'derived.log_every.expr="10"', "schedule.warmup_steps=1", "objective.target_loss=4.1",
        "data.eval_examples=8", "data.eval_batch=8", "model.n_layers=1", "parallelism=1",
        "launcher=inline", "train.devices=1", f"train.compile_cache_dir={TEST_COMPILE_CACHE}",
    ]  # fmt: skip
    on, off, cmp = tmp_path / TEXT, tmp_path / f"{TEXT}_off", tmp_path / "cmp"
    assert main(["run", f"conf={TEXT}", f"run_dir={on}", *shrink]) == 0
    assert main(["run", f"conf={TEXT}", f"run_dir={off}", *OFF_ARM, *shrink]) == 0
    assert main(["report", str(on), str(off), "--out", str(cmp)]) == 0
    for run, policy in ((on, "restart"), (off, "off")):
        for folder in sorted((run / "trials").glob("*/*")):
            config = json.loads((folder / "config.json").read_text())
            assert config["train"]["on_spike"]["policy"] == policy
            assert config["train"]["checkpoint_every"] == 10 and config["optimizer"]["b2"] == 0.99
            s = status(folder)
            assert (s["spike_restarts"] is None) == (policy == "off")
    doc = json.loads((cmp / "comparison.json").read_text())
    arms = {(r["study"], r["batch"]): r for r in doc["arms"]}
    assert all(arms[TEXT, b]["restarts"] >= 0 for b in (16, 64))
    assert all(arms[f"{TEXT}_off", b]["restarts"] == -1 for b in (16, 64))
    tests = doc["diverged_tests"]
    assert [t["batch"] for t in tests][:2] == [16, 64] and len(tests) == 3
    report = (cmp / "report.md").read_text()
    assert "spike restarts" in report and "one-sided Fisher p =" in report
