"""`sweep report` ends with the page to open, as its last line; the listing of what it wrote
is JSON only under --json (a comparison likewise)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_dirs import Spec, make_run_dir

from stepscale.cli.main import main


def test_the_last_line_is_the_page_to_open_and_json_is_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = make_run_dir(tmp_path / "run", Spec(batches=(16, 64), lr_multipliers=(0.5, 1.0)))
    other = make_run_dir(tmp_path / "other", Spec(batches=(16, 64), lr_multipliers=(0.5, 1.0)))
    assert main(["report", str(run)]) == 0
    lines = capsys.readouterr().out.splitlines()
    page = run / "report" / "index.html"
    assert lines[-1] == f"report: {page}" and page.is_file()
    assert lines[0].startswith("wrote the report of ") and str(run / "report") in lines[0]
    assert main(["report", str(run), "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert Path(listing["report_dir"]) == run / "report" and "index.html" in listing["files"]
    out = tmp_path / "cmp"
    assert main(["report", str(run), str(other), "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == f"report: {out / 'index.html'}" and (out / "index.html").is_file()
    assert lines[0].startswith("wrote the comparison of ")
