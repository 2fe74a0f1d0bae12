"""`sweep report RUN_DIR`: files, fits against a known S(B), censoring, determinism,
partial studies, redaction, the CSV through `sweep fit steps`, ablations, bad input."""

from __future__ import annotations

import argparse
import csv
import json
import re
import shutil
from pathlib import Path

import pytest
from run_dirs import Spec, make_run_dir

from analysis.fit_cli import add_fit_commands, run_fit
from analysis.provenance import redact
from analysis.report_cli import ReportInputError, add_report_command, run_report

FILES = (
    "index.html",
    "report.md",
    "fits.json",
    "results.nc",
    "steps_to_target.csv",
    "provenance.json",
)
SECRET = "hunter2"
URL = f"postgresql://alice:{SECRET}@db.example.com:5432/optuna"


def report(*argv: str) -> dict:
    p = argparse.ArgumentParser(prog="sweep")
    add_report_command(p.add_subparsers(dest="command", required=True))
    result = run_report(p.parse_args(["report", *argv]))
    json.dumps(result, allow_nan=False)
    return result


def fit_steps(*argv: str) -> dict:
    p = argparse.ArgumentParser(prog="sweep")
    add_fit_commands(p.add_subparsers(dest="command", required=True))
    return run_fit(p.parse_args(["fit", "steps", *argv]))


def snapshot(report_dir: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(report_dir)): p.read_bytes()
        for p in sorted(report_dir.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def known(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict[str, bytes]]:
    """Batch sizes 16…1024 with S(B) = 500 (1 + 128/B) at L = 2; batch 16 gets only 3000
    steps and never reaches the target; two confirm seeds per point."""
    run = make_run_dir(
        tmp_path_factory.mktemp("known") / "run", Spec(horizons={16: 3000}, confirm_seeds=2)
    )
    summary = report(str(run))
    return run, summary, snapshot(run / "report")


def fits(run: Path) -> dict:
    return json.loads((run / "report" / "fits.json").read_text())


def test_every_file_is_written(known: tuple[Path, dict, dict[str, bytes]]) -> None:
    run, summary, files = known
    assert summary["report_dir"] == str(run / "report") and summary["partial"] is False
    for name in FILES:
        assert name in files, name
    pngs = [f for f in files if f.startswith("figures/")]
    assert len(pngs) >= 8 and all(files[f].startswith(b"\x89PNG") for f in pngs)
    html = files["index.html"].decode()
    assert html.count('src="data:image/png;base64,') == len(pngs)
    assert "<style>" in html and not re.search(r"""(src|href)=["']?(https?:)?//""", html)
    md = files["report.md"].decode()
    assert all(f"]({f})" in md for f in pngs)


def test_fitted_bcrit_is_close_to_the_truth(known: tuple[Path, dict, dict[str, bytes]]) -> None:
    f = fits(known[0])
    (g,) = f["steps"]["groups"]
    assert g["group"] == "all"
    assert g["b_crit"] == pytest.approx(128, rel=0.1)
    assert g["s_min"] == pytest.approx(500, rel=0.1)
    for key in (
        "s_min",
        "e_min",
        "b_crit",
        "b_crit_ci",
        "cbs",
        "overhead",
        "reference_batch",
        "n_points",
        "not_reached",
    ):
        assert key in g, key
    lo, hi = g["b_crit_ci"]
    assert lo < g["b_crit"] < hi
    # B_crit at the other targets follows B_crit(L) ∝ L^-2.
    law = f["bcrit_vs_target"]["groups"][0]["law"]
    assert law["n_points"] >= 3 and law["slope"] == pytest.approx(-2.0, abs=0.3)
    # η*(B) ∝ B^0.5 below B_crit.
    assert f["lr_law"]["groups"][0]["alpha"] == pytest.approx(0.5, abs=0.1)
    assert f["lr_law"]["groups"][0]["closest_rule"] == "sqrt"
    assert f["seed_spread"]["groups"][0]["batch_sizes"][1]["n"] == 2


def test_a_batch_size_that_never_reached_the_target_is_reported(
    known: tuple[Path, dict, dict[str, bytes]],
) -> None:
    run = known[0]
    f = fits(run)
    g = f["steps"]["groups"][0]
    assert g["not_reached"] == [16] and g["censored_at"] == [3000.0]
    assert 16 not in g["batch_sizes"]
    res = f["steps_to_result"]["groups"][0]
    assert res["not_reached"] == [16] and 16 not in res["batch_sizes"]
    row = next(p for p in f["points"] if p["point"] == "batch_size=16")
    assert row["steps_to_target"] is None and row["censored_at"] == 3000.0
    assert row["n_reached"] == 0 and row["n_tune"] == 6
    md = (run / "report" / "report.md").read_text()
    assert "not reached within 3,000 steps" in md and "not reached in 3,000" in md
    with (run / "report" / "steps_to_target.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["batch"] == "16"]
    assert len(rows) == 6
    assert all(r["steps_to_target"] == "" and r["reached"] == "0" for r in rows)
    assert {r["horizon"] for r in rows if r["state"] == "complete"} == {"3000"}


def test_per_point_wall_time_and_flops_to_target(
    known: tuple[Path, dict, dict[str, bytes]],
) -> None:
    row = next(p for p in fits(known[0])["points"] if p["point"] == "batch_size=64")
    assert row["steps_to_target"] == 1520  # 500·(1 + 128/64) = 1500, evaluated every 20
    assert row["flops_to_target"] == pytest.approx(1520 * 6 * 100_000 * 64 * 64)
    assert row["examples_to_target"] == 1520 * 64
    assert row["wall_s_to_target"] == pytest.approx(1 + 1520e-3 * (1 + 64 / 256), rel=1e-3)


def test_re_rendering_gives_identical_bytes(known: tuple[Path, dict, dict[str, bytes]]) -> None:
    run, _, first = known
    report(str(run))
    assert snapshot(run / "report") == first


def test_steps_csv_round_trips_through_fit_steps(
    known: tuple[Path, dict, dict[str, bytes]],
) -> None:
    run = known[0]
    csv_path = str(run / "report" / "steps_to_target.csv")
    out = fit_steps(
        "--csv",
        csv_path,
        "--batch-col",
        "batch",
        "--steps-col",
        "steps_to_target",
        "--horizon-col",
        "horizon",
        "--group-col",
        "group",
    )
    f = fits(run)
    assert json.loads(json.dumps(out["groups"])) == f["steps"]["groups"]
    # Any other target of the report, from its own column.
    t = f["bcrit_vs_target"]["groups"][0]["targets"][-1]
    other = fit_steps(
        "--csv",
        csv_path,
        "--batch-col",
        "batch",
        "--steps-col",
        f"steps_at_{t['target']:g}",
        "--horizon-col",
        "horizon",
    )
    assert other["groups"][0]["b_crit"] == t["b_crit"]


def test_other_targets_from_the_stored_curves(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path / "run", Spec(horizon=3000))
    summary = report(str(run), "--target", "2.5", "--target", "3")
    assert summary["targets"] == [2.0, 2.5, 3.0]
    rows = {r["target"]: r for r in fits(run)["bcrit_vs_target"]["groups"][0]["targets"]}
    # B_crit(L) = 128 (L/2)^-2
    assert rows[2.5]["b_crit"] == pytest.approx(128 / 1.25**2, rel=0.12)
    assert rows[3.0]["b_crit"] == pytest.approx(128 / 1.5**2, rel=0.12)


def test_a_running_study_gives_a_partial_report_without_passwords(tmp_path: Path) -> None:
    spec = Spec(
        horizon=3000,
        running=2,
        storage=URL,
        command=("sweep", "run", "conf=x", f"storage.url={URL}"),
    )
    run = make_run_dir(tmp_path / "run", spec)
    summary = report(str(run))
    assert summary["partial"] is True
    out = run / "report"
    assert json.loads((out / "fits.json").read_text())["partial"] is True
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["partial"] is True and prov["ended"] is None
    assert prov["trials"]["by_state"]["running"] == 2
    md = (out / "report.md").read_text()
    assert md.splitlines()[2].startswith("> **PARTIAL:**") and "still running" in md
    assert '<p class="partial">PARTIAL: ' in (out / "index.html").read_text()
    assert prov["storage"] == "postgresql://alice:***@db.example.com:5432/optuna"
    assert prov["command"][-1] == "storage.url=postgresql://alice:***@db.example.com:5432/optuna"
    for path in out.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


def test_redact() -> None:
    assert redact("postgresql://user:secret@host") == "postgresql://user:***@host"
    assert (
        redact("postgresql+psycopg://u:p%40ss@h:5/db?x=1")
        == "postgresql+psycopg://u:***@h:5/db?x=1"
    )
    assert (
        redact("postgresql://host/db?password=abc&x=1") == "postgresql://host/db?password=***&x=1"
    )
    assert redact("journal:///runs/x/study.journal") == "journal:///runs/x/study.journal"
    assert redact("sqlite:////tmp/a.db") == "sqlite:////tmp/a.db"


def test_ablation_table_for_two_variants(tmp_path: Path) -> None:
    spec = Spec(
        variants=("adamw", "lion"),
        variant_truth={"adamw": (500.0, 128.0), "lion": (400.0, 64.0)},
        batches=(16, 32, 64, 128, 256),
        horizon=5000,
        fewer_trials={"lion": 1},
    )
    run = make_run_dir(tmp_path / "run", spec)
    report(str(run))
    f = fits(run)
    abl = f["ablation"]
    assert abl["axis"] == "optimizer" and len(abl["rows"]) == 5
    for row in abl["rows"]:
        names = [v["variant"] for v in row["variants"]]
        assert names == ["adamw", "lion"]
        assert [v["n_trials"] for v in row["variants"]] == [6, 5]
        (pair,) = row["p_beats"]
        assert pair["a"] == "adamw" and pair["b"] == "lion" and pair["p"] < 0.05  # lion faster
        assert row["equal_budget"] is False and "same tuning budget" in row["warning"]
        for v in row["variants"]:
            assert v["ci"][0] <= v["best"] <= v["ci"][1]
    groups = {g["group"]: g for g in f["steps"]["groups"]}
    assert set(groups) == {"optimizer=adamw", "optimizer=lion"}
    assert groups["optimizer=adamw"]["b_crit"] == pytest.approx(128, rel=0.15)
    assert groups["optimizer=lion"]["b_crit"] == pytest.approx(64, rel=0.15)
    assert (run / "report" / "figures" / "best_so_far.png").exists()
    md = (run / "report" / "report.md").read_text()
    assert "## Ablation: optimizer" in md and "P(adamw beats lion)" in md
    assert "did not get the same tuning budget" in md


def test_a_study_without_batch_axis_skips_those_fits(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path / "run", Spec(seq_lens=(64, 128, 256), horizon=4000))
    summary = report(str(run))
    assert "loss_steps_tokens" in summary["figures"]
    assert "steps_vs_batch" not in summary["figures"] and "lr_vs_batch" not in summary["figures"]
    f = fits(run)
    assert f["axes"]["batch"] is None and f["steps"]["groups"] == []
    assert any("no batch-size axis" in n for n in f["notes"])
    assert "no batch-size axis" in (run / "report" / "report.md").read_text()
    assert [p["point"] for p in f["points"]] == ["seq_len=64", "seq_len=128", "seq_len=256"]
    steps = [p["steps_to_target"] for p in f["points"]]
    assert all(steps) and steps == sorted(steps, reverse=True)  # longer sequences: fewer steps


def test_bad_input_is_a_report_input_error(tmp_path: Path) -> None:
    with pytest.raises(ReportInputError, match="does not exist"):
        report(str(tmp_path / "missing"))
    with pytest.raises(ReportInputError, match="no trials"):
        report(str(tmp_path))
    run = make_run_dir(tmp_path / "run", Spec(batches=(16, 32), horizon=200))
    (run / "run.json").write_text("{")
    with pytest.raises(ReportInputError, match=r"run\.json"):
        report(str(run))
    with pytest.raises(ReportInputError, match="finite"):
        report(str(run), "--target", "nan")
    assert issubclass(ReportInputError, ValueError)


def test_the_parser_takes_repeated_targets() -> None:
    p = argparse.ArgumentParser(prog="sweep")
    add_report_command(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(["report", "runs/x", "--target", "2.5", "--target", "3"])
    assert args.run_dir == "runs/x" and args.target == [2.5, 3.0]
    assert p.parse_args(["report", "runs/x"]).target == []


def test_a_copied_run_dir_renders_the_same(
    known: tuple[Path, dict, dict[str, bytes]], tmp_path: Path
) -> None:
    run, _, first = known
    copy = tmp_path / "elsewhere"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("report"))
    report(str(copy))
    assert snapshot(copy / "report") == first
