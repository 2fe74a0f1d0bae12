"""`sweep run --dry-run` needs neither the cluster nor the database: it contacts no
PostgreSQL server and no SLURM controller, and its plan names what it did not check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stepscale.cli.main import main

# Nothing answers on port 1; no sbatch on the PATH: a check that contacted either would fail.
DOWN = ["launcher=slurm", "storage=postgres", "storage.url=postgresql://u@127.0.0.1:1/db"]


def test_a_dry_run_contacts_no_database_and_no_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no sbatch, no scontrol
    run_dir = tmp_path / "r"
    args = ["run", "conf=smoke", *DOWN, f"run_dir={run_dir}", "--dry-run"]
    assert main(args) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "not checked by --dry-run (it contacts nothing): that the PostgreSQL server" in out
    assert "that launcher=slurm can submit jobs from here" in out
    assert main([*args, "--json"]) == 0
    unchecked = json.loads(capsys.readouterr().out)["not_checked"]
    assert len(unchecked) == 2 and "127.0.0.1:1" in unchecked[0]
    assert not run_dir.exists()
    # Without --dry-run the same command asks the server, which does not answer: exit 2.
    assert main(args[:-1]) == 2
    assert "storage: cannot reach" in capsys.readouterr().err and not run_dir.exists()


def test_a_local_dry_run_has_nothing_left_unchecked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "conf=smoke", f"run_dir={tmp_path / 'r'}", "--dry-run", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["not_checked"] == []
