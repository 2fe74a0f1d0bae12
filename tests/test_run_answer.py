"""`sweep run` ends with the study's answer and the `sweep report` command; `--report`
renders the report at once (a real study of the NumPy command trainer, no JAX)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from helpers import run_sweep

ROOT = Path(__file__).resolve().parents[1]
NUMPY = (
    "conf=numpy_batchsize",
    "--config-dir",
    str(ROOT / "examples" / "numpy_regression"),
    "scientific.batch_size.values=[4,16,64]",
    "budget.trials_per_point=3",
)


@pytest.mark.slow
def test_sweep_run_ends_with_the_answer_and_the_report_command(tmp_path: Path) -> None:
    run_dir = tmp_path / "my run"
    res = run_sweep("run", *NUMPY, f"run_dir={run_dir}", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    table = out.index("answer:")
    assert out[table - 2].lstrip().startswith("batch_size=64")  # after the per-point table
    # … and the time: the wall time and, beside it, the time to the first trained step
    time_line = out[table - 1]
    assert time_line.startswith("  time: ") and " wall; first progress after " in time_line
    assert out[table + 1].lstrip().startswith("B_crit at eval loss < 0.2")
    assert "rests on" in out[table + 1] and "trials" in out[table + 1]
    assert out[-1] == f"report: sweep report {shlex.quote(str(run_dir))}"
    assert not (run_dir / "report").exists()

    # The same command again (nothing left to run) with --report --json: the report at once.
    res = run_sweep("run", *NUMPY, f"run_dir={run_dir}", "--report", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    assert summary["report"] == str(run_dir / "report" / "index.html")
    assert (run_dir / "report" / "index.html").is_file()
    assert summary["report_command"] == f"sweep report {shlex.quote(str(run_dir))}"
    times = summary["time"]
    assert times["wall_s"] > 0 and times["first_progress_s"] is None  # no trial ran this time
    h = summary["headline"]
    assert h["kind"] == "b_crit" and h["target"] == 0.2 and h["groups"][0]["n_trials"] == 9
    assert h["rules"] == {"max_ci_factor": 10.0, "max_exponent_width": 1.0, "min_points": 3}
    html = (run_dir / "report" / "index.html").read_text()
    assert 'id="summary"' in html and "B_crit at eval loss &lt; 0.2" in html


def test_report_with_detach_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    res = run_sweep(
        "run", *NUMPY, f"run_dir={tmp_path / 'run'}", "launcher=slurm", "--detach", "--report",
        cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "--report" in res.stderr and "sweep report RUN_DIR" in res.stderr
    assert not (tmp_path / "run").exists()
