"""Two `sweep run` of one study at once (e.g. from two login nodes): together they run
exactly the budget, no trial twice, and neither re-runs the other's live trial."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers import job_events
from test_study import FAST, SWEEP, _env, assert_exact_budget, trials_of


@pytest.mark.slow
def test_two_orchestrators_share_one_study(tmp_path: Path, compile_cache):
    run_dir = tmp_path / "run"
    args = [
        SWEEP,
        "run",
        "conf=smoke",
        "budget.trials_per_point=4",
        "parallelism=2",
        f"run_dir={run_dir}",
        *FAST,
        f"train.compile_cache_dir={compile_cache}",
    ]
    procs = [
        subprocess.Popen(
            args, env=_env(compile_cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    assert_exact_budget(run_dir, "smoke", per_point=4, points=2)
    # Every trial ran once: one job start each, never a second run of a live trial.
    for records in trials_of(run_dir).values():
        for rec in records:
            folder = run_dir / "trials" / rec["point"] / str(rec["number"])
            assert job_events(folder) == ["start"], rec["trial"]
            assert rec["attempts"] == 1
    owners = {rec["orchestrator"] for recs in trials_of(run_dir).values() for rec in recs}
    assert 1 <= len(owners) <= 2
    assert not list((run_dir / "orchestrators").glob("*.json"))  # both unregistered
