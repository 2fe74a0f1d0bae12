"""optuna-dashboard, pointed at a study's journal, tells a measured value from a penalty:
every told trial carries ``reached``, ``censored``, ``diverged`` and the units as user
attributes (docs/run-dir.md). The real dashboard runs on 127.0.0.1 and is asked through
its own HTTP API."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import run_sweep, trials_of

# eval loss 2 / (1 + lr·step): lr = 1 goes below 0.5 at step 4, lr = 0.01 never does.
TRAINER = """\
def main(config, reporter, trial_dir):
    reporter.begin(0)
    for step in range(int(config.steps) + 1):
        reporter.report(step, {"eval_loss": 2.0 / (1.0 + float(config.lr) * step)})
    return {"state": "complete", "steps_done": int(config.steps)}
"""

STUDY = """\
# @package _global_
trainer:
  target: dashtrainer:main
  config: {w: 1, lr: 0.1, steps: 10}
  keys: {max_steps: steps}
scientific:
  w: {path: w, values: [1]}
nuisance:
  lr: {path: lr, type: categorical, choices: [1.0, 0.01]}
sampler: {name: grid}
budget: {trials_per_point: 2, max_steps: 10}
objective: {kind: steps_to_target, target_loss: 0.5}
launcher: {name: inline}
parallelism: 1
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return json.loads(r.read())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.slow
def test_optuna_dashboard_shows_reached_false_on_a_censored_trial(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "dash.yaml").write_text(STUDY)
    (tmp_path / "dashtrainer.py").write_text(TRAINER)
    res = run_sweep("run", "conf=dash", "--config-dir", ".", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    run_dir = tmp_path / "runs" / "dash"
    records = [r for rs in trials_of(run_dir).values() for r in rs]
    assert sorted(r["objective"] for r in records) == [4.0, 10.0 * (1 + 1)]  # 4 and the penalty

    port = _free_port()
    exe = Path(sys.executable).with_name("optuna-dashboard")
    server = subprocess.Popen(
        [str(exe), str(run_dir / "study.journal"), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        studies = _get(f"http://127.0.0.1:{port}/api/studies")["study_summaries"]
        assert len(studies) == 1
        study = _get(f"http://127.0.0.1:{port}/api/studies/{studies[0]['study_id']}?after=0")
    finally:
        server.terminate()
        server.wait(30)
    by_value = {
        t["values"][0]: {a["key"]: a["value"] for a in t["user_attrs"]} for t in study["trials"]
    }
    assert set(by_value) == {4.0, 20.0}
    measured, penalty = by_value[4.0], by_value[20.0]
    assert measured["reached"] == "True" and measured["censored"] == "False"
    assert penalty["reached"] == "False" and penalty["censored"] == "True"
    assert penalty["state"] == "complete" and penalty["diverged"] == "False"
    assert measured["objective_unit"] == "steps" and measured["intermediate_unit"] == "eval loss"


def test_outcome_attributes_say_what_each_told_value_is() -> None:
    from stepscale.sweeps.study.objective import outcome_attrs

    reached = {"steps_to_target": 40, "horizon_steps": 100, "target_loss": 1.0}
    assert outcome_attrs("steps_to_target", "complete", reached) == {
        "reached": True,
        "censored": False,
        "diverged": False,
        "objective_unit": "steps",
        "intermediate_unit": "eval loss",
    }
    diverged = outcome_attrs("steps_to_target", "diverged", {**reached, "steps_to_target": None})
    assert (diverged["reached"], diverged["censored"], diverged["diverged"]) == (False, True, True)
    pruned = outcome_attrs("steps_to_target", "pruned", None)
    assert (pruned["reached"], pruned["censored"]) == (False, True)
    loss = outcome_attrs("final_eval_loss", "complete", {"final_eval_loss": 1.2})
    assert "reached" not in loss and loss["censored"] is False
    assert loss["objective_unit"] == "eval loss"
    nan = outcome_attrs("final_eval_loss", "complete", {"final_eval_loss": float("nan")})
    assert nan["censored"] is True
