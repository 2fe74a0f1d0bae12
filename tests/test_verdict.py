"""Has it trained? (analysis.verdict): each built-in source's baseline has its known value
and a short real run beats it while a run that did not move does not; a command trainer
that reports no progress gets "not trained" and no B_crit from `sweep run` and the report,
one that beats its own step-0 loss but not its stated baseline too; a trial that cannot
learn ends early by the no-progress rule (sweeps.job.no_progress) and is counted as such."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from helpers import TEST_COMPILE_CACHE
from run_dirs import Spec, make_run_dir

from stepscale.analysis import load
from stepscale.analysis.analyze import analyze
from stepscale.analysis.headline import headline
from stepscale.analysis.verdict import MARGIN, NOT_TRAINED, PointLearning, learned
from stepscale.cli.main import main
from stepscale.events import record_event
from stepscale.models.config import TrainerConfig
from stepscale.models.nets import nqm_initial_loss
from stepscale.models.plan import prepare
from stepscale.models.train import train
from stepscale.sweeps.job.no_progress import NO_PROGRESS, NoProgressRule, earlier_stop


def test_the_margin_rule_with_known_numbers() -> None:
    # reference 3, floor 1: the margin is 5% of 2 = 0.1 below 3
    assert learned(2.89, 3.0, 1.0) and not learned(2.91, 3.0, 1.0)
    # no floor known: 0 (cross-entropy), 5% of 3 = 0.15
    assert learned(2.84, 3.0) and not learned(2.86, 3.0)
    assert learned(math.nan, 3.0) is None and learned(1.0, math.nan) is None
    p = PointLearning("b=8", "b=8/0", final=2.0, initial=4.0, baseline=3.0, floor=1.0,
                      baseline_kind="unigram")  # fmt: skip
    assert p.learned and p.progress == pytest.approx(0.5)
    assert "50% of the way" in p.text() and "baseline 3 (unigram)" in p.text()
    # without a baseline the step-0 loss is the reference
    q = PointLearning("b=8", "b=8/0", 3.9, 4.0, math.nan, math.nan, "")
    assert q.reference == 4.0 and q.learned is False
    # a model that starts below the baseline must beat its start, not only the baseline
    r = PointLearning("c", "c/0", final=2.22, initial=2.23, baseline=2.30, floor=1.0,
                      baseline_kind="log(classes)")  # fmt: skip
    assert r.reference == 2.23 and r.learned is False
    assert MARGIN == 0.05


def _text_file(tmp_path: Path) -> str:
    path = tmp_path / "t.txt"
    path.write_text("".join(f"the quick brown fox {i % 7} jumps.\n" for i in range(800)))
    return str(path)


def _config(source: str, tmp_path: Path) -> TrainerConfig:
    cfg = TrainerConfig(name=f"verdict-{source}")
    cfg.data.name = source
    cfg.data.global_batch = 16
    cfg.data.eval_examples = 32
    cfg.data.eval_batch = 32
    cfg.train.max_steps = 60
    cfg.train.log_every = 60
    cfg.train.eval_every = 60
    cfg.train.compile_cache_dir = str(tmp_path.parent / "cache")
    cfg.train.devices = 1  # data parallelism over the fake devices is not what this tests
    cfg.optimizer.lr = 0.02
    if source in ("markov", "tokens", "text", "shakespeare_char"):
        cfg.model.name = "gpt"
        cfg.model.n_layers, cfg.model.d_model = 1, 32
        cfg.data.seq_len = 16
        cfg.data.vocab_size, cfg.data.order = 8, 1
        # the three file sources share one compiled program (same shapes)
        cfg.model.vocab_size = 256 if source != "markov" else None
    if source == "tokens":
        path = tmp_path / "tokens.bin"
        np.tile(np.arange(40, dtype=np.uint16) % 11, 500).tofile(path)
        cfg.data.path = str(path)
    if source == "text":
        cfg.data.path, cfg.data.tokenizer = _text_file(tmp_path), "chars"
    if source == "shakespeare_char":  # real text: past the unigram level takes longer
        cfg.data.tokenizer, cfg.data.heldout_frac = "chars", 0.1
        cfg.train.max_steps = cfg.train.log_every = cfg.train.eval_every = 200
        cfg.optimizer.lr = 0.03
    if source == "teacher":
        cfg.model.name = "mlp"
        cfg.data.global_batch = 64
    if source == "nqm":
        cfg.model.name = "nqm"
        cfg.optimizer.name, cfg.optimizer.lr = "sgd", 0.5
    return cfg


def _known_baseline(source: str, cfg: TrainerConfig, plan: object) -> float:
    if source == "markov":
        return math.log(8)
    if source == "teacher":
        return math.log(10)
    if source == "nqm":
        return nqm_initial_loss(cfg.model)
    tokens = np.asarray(plan.source.tokens[: plan.source.n_train])  # type: ignore[attr-defined]
    counts = np.bincount(tokens)
    p = counts[counts > 0] / tokens.size
    return float(-(p * np.log(p)).sum())


SOURCES = ["markov", "tokens", "text", "shakespeare_char", "teacher", "nqm"]


@pytest.mark.parametrize("source", SOURCES)
def test_every_built_in_source_states_its_baseline(source: str, tmp_path: Path) -> None:
    cfg = _config(source, tmp_path)
    plan = prepare(cfg)
    assert plan.info.baseline_loss == pytest.approx(_known_baseline(source, cfg, plan), rel=1e-9)
    assert plan.info.baseline


@pytest.mark.slow
@pytest.mark.parametrize("source", SOURCES)
def test_on_every_built_in_source_a_run_learns_and_one_that_did_not_move_did_not(
    source: str, tmp_path: Path
) -> None:
    cfg = _config(source, tmp_path)
    status = train(cfg)
    baseline = status["baseline_loss"]
    floor = status["loss_floor"] if status["loss_floor"] is not None else math.nan
    start, final = status["initial_eval_loss"], status["final_eval_loss"]
    learning = PointLearning("p", "p/0", final, start, baseline, floor, status["baseline"])
    assert learning.learned, learning.text()
    # a run that did not move ends at its step-0 loss: not learned
    still = PointLearning("p", "p/0", start, start, baseline, floor, status["baseline"])
    assert still.learned is False, still.text()


# ------------------------------------------------------- command trainers, end to end

FLAT_TRAINER = """import json, os
# a trainer that reports no progress: the same eval loss at every evaluation
start = 5.0
with open("metrics.jsonl", "a") as f:
    for step in range(0, 11, 5):
        rec = {"step": step, "eval_loss": start - 0.001 * step}
        if os.environ.get("BASELINE"):
            rec["baseline_loss"] = float(os.environ["BASELINE"])
        f.write(json.dumps(rec) + "\\n")
"""

STUDY = """# @package _global_
trainer:
  command: ["{python}", "flat.py"]
  config: {lr: 0.1, batch: 4}
scientific:
  batch_size: {path: batch, values: [4, 8, 16], quantity: batch_size, unit: examples}
nuisance:
  lr: {path: lr, type: float, low: 0.01, high: 1.0, scale: log}
budget: {trials_per_point: 1, max_steps: 10}
objective: {kind: steps_to_target, target_loss: 1.0}
parallelism: 2
"""


def _study(tmp_path: Path, trainer: str) -> Path:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "flat.yaml").write_text(STUDY)
    (tmp_path / "flat.py").write_text(trainer)
    return tmp_path


def test_a_command_trainer_that_makes_no_progress_is_not_trained(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _study(tmp_path, FLAT_TRAINER)
    monkeypatch.chdir(folder)
    run_dir = folder / "run"
    code = main(["run", "conf=flat", "--config-dir", str(folder), f"run_dir={run_dir}"])
    out, err = capsys.readouterr()
    assert code == 0, err
    answer = out[out.index("answer:") :]
    assert NOT_TRAINED.upper() in answer and "B_crit" not in answer, answer
    assert "final eval loss 4.99" in answer and "step-0 eval loss 5" in answer
    h = headline(analyze(load(run_dir)))
    assert h.learning.trained is False and not h.determined
    assert set(h.learning.not_learned) == {"batch_size=4", "batch_size=8", "batch_size=16"}
    # the report says it too, and flags every point
    assert main(["report", str(run_dir)]) == 0
    md = (run_dir / "report" / "report.md").read_text()
    assert "Has it trained?" in md and "did not learn: batch_size=4" in md
    fits = json.loads((run_dir / "report" / "fits.json").read_text())
    assert fits["trained"]["trained"] is False


def test_a_stated_baseline_wins_over_the_step_0_loss(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Falling from 5 to 3.5 beats the start, but not a reported baseline of 3.6."""
    trainer = FLAT_TRAINER.replace("start - 0.001 * step", "start - 0.15 * step")
    folder = _study(tmp_path, trainer)
    monkeypatch.chdir(folder)
    monkeypatch.setenv("BASELINE", "3.6")
    run_dir = folder / "run"
    assert main(["run", "conf=flat", "--config-dir", str(folder), f"run_dir={run_dir}"]) == 0
    v = analyze(load(run_dir)).learning
    assert v.trained is False and v.best is not None
    assert (v.best.baseline, v.best.initial, v.best.final) == (3.6, 5.0, pytest.approx(3.5))
    capsys.readouterr()


def test_synthetic_study_that_learned_says_so_with_its_bcrit(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path / "run", Spec(batches=(16, 32, 64, 128)))
    h = headline(analyze(load(run)))
    assert h.learning.trained and h.lines()[0].startswith("B_crit")
    assert h.lines()[-1].startswith("trained: best trial ")


@pytest.mark.slow
def test_the_real_text_study_with_a_learning_rate_too_low_to_learn_is_not_trained(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """shakespeare_batchsize, shrunk, with the LR pinned at 1e-8: "not trained", no B_crit."""
    run_dir = tmp_path / "run"
    code = main([
        "run", "conf=shakespeare_batchsize", "nuisance.lr.low=1e-8", "nuisance.lr.high=2e-8",
        "scientific.batch_size.values=[8,16,32]", "budget.trials_per_point=1",
        "budget.max_steps=20", "nuisance.warmup.high=5", "data.eval_examples=32", "data.eval_batch=32",
        "launcher=inline", "train.devices=1", f"train.compile_cache_dir={TEST_COMPILE_CACHE}",
        f"run_dir={run_dir}",
    ])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    answer = out[out.index("answer:") :]
    assert NOT_TRAINED.upper() in answer and "B_crit" not in answer, answer
    assert "unigram entropy of the training split" in answer
    v = analyze(load(run_dir)).learning
    assert v.trained is False and v.best is not None
    assert v.best.baseline == pytest.approx(3.309, abs=1e-3)
    # Each trial ended at its first evaluation past a tenth of its horizon (step 10 of 20):
    # pruned by the no-progress rule, not diverged, and the verdict says so. Both anchors
    # (8 and 16) learned nothing, so the largest batch size never ran.
    statuses = sorted(run_dir.glob("trials/*/*/status.json"))
    assert [p.parent.parent.name for p in statuses] == ["batch_size=16", "batch_size=8"]
    transfer = json.loads((run_dir / "transfer.json").read_text())
    assert transfer["not_learning"]["skipped"] == ["batch_size=32"]
    for status_file in statuses:
        status = json.loads(status_file.read_text())
        assert (status["state"], status["ended_by"], status["steps_done"]) == (
            "pruned", "no_progress", 10,
        )  # fmt: skip
        assert status["progress_at_end"] < 0.05
        events = status_file.with_name("events.jsonl").read_text()
        assert '"no_progress"' in events
    assert v.no_progress == 2 and "2 trials ended early, no progress" in answer


def _rule_stops_at(curve: list[tuple[int, float]], horizon: int, target: float) -> int | None:
    """The step where the default rule (a tenth of the horizon, 5% of the way) stops it."""
    rule = NoProgressRule(0.1, 0.05, horizon, target)
    for step, loss in curve:
        rule.seen(step, loss)
        if step > 0 and rule.stops(step):
            return step
    return None


def test_the_no_progress_rule_stops_a_flat_curve_and_spares_slow_starters() -> None:
    flat = [(s, 4.17 - 1e-5 * s) for s in range(0, 801, 10)]
    assert _rule_stops_at(flat, 800, 2.4) == 80  # the first evaluation at 10% of 800 steps
    # A slow starter (a long warmup): 6% of the way (4.17 → 4.06) by step 80, then learning
    slow = [
        (s, 4.17 - 0.11 * s / 80 if s <= 80 else 4.06 - (s - 80) / 400) for s in range(0, 801, 10)
    ]
    assert _rule_stops_at(slow, 800, 2.4) is None
    # The demo's slowest trial (batch 4, LR 2e-3, eval every 10 of 200 steps): 42% by step 10
    demo = [(0, 2.81), (10, 2.09), (20, 1.66), (30, 1.42)]
    assert _rule_stops_at(demo, 200, 1.10) is None
    # Rising (an LR too high): left to the divergence rule; starts below the target: never
    assert _rule_stops_at([(0, 2.8), (5, 3.1), (10, 3.0)], 30, 2.0) is None
    assert _rule_stops_at([(0, 2.8), (5, 2.81), (10, 2.8)], 30, 2.0) == 5  # stuck: stopped
    assert _rule_stops_at([(0, 1.0), (10, 1.0), (20, 1.0)], 100, 2.0) is None


def test_a_job_resumed_after_the_no_progress_stop_still_says_why(tmp_path: Path) -> None:
    assert earlier_stop(tmp_path) == {}
    record_event(tmp_path, "start", 0)
    rule = NoProgressRule(0.1, 0.05, 100, 2.0)
    for step, loss in [(0, 2.8), (10, 2.8)]:
        rule.seen(step, loss)
    assert rule.stops(10)
    record_event(tmp_path, NO_PROGRESS, 10, **rule.ended)  # as the job does; then it dies
    record_event(tmp_path, "resume", 10)
    assert earlier_stop(tmp_path) == rule.ended and rule.ended["ended_by_step"] == 10
