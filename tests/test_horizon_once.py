"""A trial's horizon is given once: a parameter that sets the trainer's horizon key while the
budget gives the horizon is refused naming both (the budget's would silently win); without
a budget horizon the parameter sets each trial's horizon, and the plan counts it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stepscale.cli.main import main

HORIZON = '+derived.h={path: train.max_steps, expr: "batch_size * 4", type: int}'


def test_a_derived_horizon_beside_the_budgets_is_refused_naming_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "r"
    assert main(["run", "conf=smoke", HORIZON, f"run_dir={run_dir}", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "derived.h sets train.max_steps" in err and "budget.max_steps=40" in err
    assert "budget.max_steps=null" in err and "Traceback" not in err
    args = ["run", "conf=smoke", HORIZON, "budget.max_steps=null", f"run_dir={run_dir}"]
    assert main([*args, "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert [p["horizon_steps"] for p in plan["points"]] == [32, 64]  # 4 × batch 8 and 16
    assert not run_dir.exists()
