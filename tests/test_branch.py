"""The critical batch over training by branching (`sweep branch`): the matching rule on
constructed numbers, and on the noisy quadratic model, whose noise scale is known in closed
form, the branched B_crit at the start against the analytic B_noise."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from helpers import TEST_COMPILE_CACHE

from stepscale.analysis import load
from stepscale.analysis.analyze import analyze
from stepscale.analysis.branching import critical_batch, keeps_up, loss_at, progress_ratio
from stepscale.analysis.report.course import branch_section
from stepscale.cli.main import main
from stepscale.models.config import ModelConfig
from stepscale.models.nets.nqm import nqm_b_noise, nqm_true_noise_scale


def test_the_matching_rule_on_a_constructed_case() -> None:
    # the base goes from 2.0 to 1.0 over the window; a branch ending at 1.5 made half its
    # progress, which keeps up at tolerance 0.5 and not at 0.4
    assert progress_ratio(2.0, 1.5, 1.0) == 0.5
    assert keeps_up(0.5, 0.5) is True and keeps_up(0.5, 0.4) is False
    assert progress_ratio(2.0, math.inf, 1.0) == -math.inf  # a branch that blew up
    assert progress_ratio(2.0, 1.5, 2.1) is None and keeps_up(None, 0.5) is None
    # the base's loss at 300 examples, between evaluations at 200 (loss 4) and 400 (1):
    # log-linear, exact at the evaluations, unknown past the last one
    curve = [(0.0, 8.0), (200.0, 4.0), (400.0, 1.0)]
    assert loss_at(curve, 300.0) == pytest.approx(2.0)
    assert loss_at(curve, 400.0) == 1.0 and loss_at(curve, 401.0) is None
    # B_crit: the largest batch that keeps up together with every smaller one
    assert critical_batch([(8, True), (16, True), (32, False), (64, True)]) == (16.0, None)
    assert critical_batch([(8, True), (16, True)]) == (16.0, "above")
    assert critical_batch([(8, False), (16, True)]) == (None, "below")
    assert critical_batch([]) == (None, None)


@pytest.mark.slow
def test_branching_the_nqm_finds_its_noise_scale_at_the_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "base"
    code = main(
        ["run", "conf=branch_nqm", f"run_dir={run_dir}", "launcher=inline",
         "train.devices=1", f"train.compile_cache_dir={TEST_COMPILE_CACHE}", "budget.max_steps=128"]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    args = ["branch", str(run_dir), "--window-examples", "256", "--lr-rule", "linear"]
    code = main([*args, "--steps", "0,64", "--factors", "1,2,4,8,16,32,64"])
    out, err = capsys.readouterr()
    assert code == 0, err
    (m,) = json.loads(out)["measurements"]
    start, later = m["steps"]
    model = ModelConfig(name="nqm", dim=100, noise_scale=30.0)
    b_noise = nqm_b_noise(model, np.ones(100))  # θ0 = 1: 40.8
    b_simple = nqm_true_noise_scale(model, np.ones(100))  # 95.2
    assert start["step"] == 0 and start["censored"] is None and start["complete"]
    assert b_noise / 2 <= start["b_crit"] <= 2 * b_noise, (start["b_crit"], b_noise, b_simple)
    # k = 1 from a checkpoint continues the base exactly (same seed, batch and steps)
    (same,) = [b for b in later["branches"] if b["factor"] == 1]
    assert same["loss_end"] == same["loss_base"] and same["ratio"] == 1.0
    assert later["examples"] == 64 * 4 and later["branches"][0]["examples_end"] == 256 + 256
    folder = run_dir / "branches" / "batch_size=4_0"
    assert (folder / "branch.json").is_file()
    assert len(list((folder / "trials").glob("*/0/status.json"))) == 14
    # the report's section from the dataset
    ds = load(run_dir)
    blocks = branch_section(analyze(ds), ds)
    assert any("branching" in b.text for b in blocks)
    # a step without a checkpoint, and a bad tolerance, are refused (exit 2)
    assert main([*args, "--steps", "5"]) == 2
    assert "keep_checkpoints" in capsys.readouterr().err
    assert main([*args, "--tolerance", "1.5"]) == 2
