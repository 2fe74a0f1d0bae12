"""`sweep report RUN_DIR`: files, fits against a known S(B), censoring, determinism,
partial studies, redaction, the CSV through `sweep fit steps`, ablations, bad input."""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
from pathlib import Path

import pytest
from run_dirs import Spec, make_run_dir

from stepscale.cli.fit import run_fit
from stepscale.cli.main import build_parser
from stepscale.cli.report import run_report
from stepscale.errors import UsageError
from stepscale.redact import redact

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
    p = build_parser()
    result = run_report(p.parse_args(["report", *argv]))
    json.dumps(result, allow_nan=False)
    return result


def fit_steps(*argv: str) -> dict:
    p = build_parser()
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
    pngs = [f for f in files if f.startswith("figures/") and f.endswith(".png")]
    assert len(pngs) >= 8 and all(files[f].startswith(b"\x89PNG") for f in pngs)
    svgs = [f for f in files if f.startswith("figures/") and f.endswith(".svg")]
    assert sorted(svgs) == sorted(f[: -len(".png")] + ".svg" for f in pngs)
    assert all(files[f].lstrip().startswith(b"<?xml") and b"<svg" in files[f] for f in svgs)
    assert set(summary["files"]) == set(files) - {f for f in files if f.startswith(".")}
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
    # SQLAlchemy's own rendering of a URL without its password agrees; the redactor also
    # finds URLs inside any text (configs, commands, messages), which make_url cannot.
    from sqlalchemy.engine import make_url

    for url in (
        "postgresql://user:secret@host",
        "postgresql+psycopg://u:p%40ss@h:5/db?x=1",
        "postgresql://stepscale:S3cr3t@127.0.0.1:1/db",
        "mysql+pymysql://a:b@c/d",
    ):
        assert redact(url) == make_url(url).render_as_string(hide_password=True)
        assert redact(f"url: {url}\n") == f"url: {redact(url)}\n"
    # Where make_url would leak, so the project keeps its own redactor: a raw "@" in the
    # password, and libpq's password= parameter.
    raw_at, query = "postgresql://u:p@ssw0rd@host/db", "postgresql://u@host/db?password=hunter2"
    assert "ssw0rd" in make_url(raw_at).render_as_string(hide_password=True)
    assert "hunter2" in make_url(query).render_as_string(hide_password=True)
    assert "ssw0rd" not in redact(raw_at) and "hunter2" not in redact(query)


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
    with pytest.raises(UsageError, match="does not exist"):
        report(str(tmp_path / "missing"))
    with pytest.raises(UsageError, match="no trials"):
        report(str(tmp_path))
    run = make_run_dir(tmp_path / "run", Spec(batches=(16, 32), horizon=200))
    (run / "run.json").write_text("{")
    with pytest.raises(UsageError, match=r"run\.json"):
        report(str(run))
    with pytest.raises(UsageError, match="finite"):
        report(str(run), "--target", "nan")


def test_the_parser_takes_repeated_targets() -> None:
    p = build_parser()
    args = p.parse_args(["report", "runs/x", "--target", "2.5", "--target", "3"])
    assert args.run_dir == ["runs/x"] and args.target == [2.5, 3.0]
    assert p.parse_args(["report", "runs/x"]).target == []


def test_re_rendering_a_copied_run_dir_gives_identical_bytes(
    known: tuple[Path, dict, dict[str, bytes]], tmp_path: Path
) -> None:
    """A second render, of a copy elsewhere: the same bytes (neither the render nor the
    run dir's place leaves a mark)."""
    run, _, first = known
    copy = tmp_path / "elsewhere"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("report"))
    report(str(copy))
    assert snapshot(copy / "report") == first


# ------------------------------------------- curves cut at the target (stop_at_target)

CUT_S_MIN, CUT_B_CRIT, CUT_TARGET, PLATEAU = 400.0, 64.0, 2.0, 2.4


def _cut_at_target(run: Path, spec: Spec) -> None:
    """Rewrite a synthetic run dir as a `stop_at_target: true` study with fast early loss.

    Every trial's loss drops from 4.0 at step 0 to the plateau 2.4 before its first
    evaluation, then falls linearly to the target 2.0 at τ = m·S_min(1 + B_crit/B), so
    steps to any L in (2.0, 2.4) are ∝ τ (B_crit = 64 there too) while every target
    above 2.4 is reached at the first evaluation at every batch size (S(B) flat: B_crit
    unidentified). Runs stop at their first evaluation below 2.0, as the trainer does.
    """
    study = json.loads((run / "study.json").read_text())
    study["objective"]["stop_at_target"] = True
    (run / "study.json").write_text(json.dumps(study, indent=2, sort_keys=True) + "\n")
    for tdir in sorted((run / "trials").glob("*/*")):
        info = json.loads((tdir / "trial.json").read_text())
        status = json.loads((tdir / "status.json").read_text())
        if status["state"] != "complete":
            continue
        batch = info["scientific"]["batch_size"]
        mult = spec.lr_multipliers[info["number"]]
        tau = (1 + 0.25 * math.log(mult) ** 2) * CUT_S_MIN * (1 + CUT_B_CRIT / batch)
        lines = []
        for line in (tdir / "metrics.jsonl").read_text().splitlines():
            rec = json.loads(line)
            if rec["step"] > 0 and rec.get("eval_loss") is not None:
                rec["eval_loss"] = PLATEAU - (PLATEAU - CUT_TARGET) * rec["step"] / tau
            lines.append(rec)
            if rec.get("eval_loss") is not None and rec["eval_loss"] < CUT_TARGET:
                break
        (tdir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
        last = lines[-1]
        evals = [r["eval_loss"] for r in lines if r.get("eval_loss") is not None]
        reached = last["eval_loss"] < CUT_TARGET
        status.update(
            steps_done=last["step"],
            steps_to_target=last["step"] if reached else None,
            best_eval_loss=min(evals),
            final_eval_loss=evals[-1],
            reason="target reached" if reached else "horizon reached",
        )
        (tdir / "status.json").write_text(json.dumps(status, indent=2, sort_keys=True) + "\n")
        info["objective"] = float(last["step"]) if reached else info["objective"]
        (tdir / "trial.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")


@pytest.fixture(scope="module")
def cut(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict[str, bytes]]:
    """The cut run dir (copied elsewhere before its report), its report's summary and files."""
    spec = Spec(s_min=CUT_S_MIN, b_crit=CUT_B_CRIT, target=CUT_TARGET)
    run = make_run_dir(tmp_path_factory.mktemp("cut") / "run", spec)
    _cut_at_target(run, spec)
    shutil.copytree(run, run.parent / "copy")
    summary = report(str(run))
    return run, summary, snapshot(run / "report")


@pytest.fixture
def cut_run(cut: tuple[Path, dict, dict[str, bytes]]) -> Path:
    return cut[0]


def test_cut_curves_keep_only_well_posed_automatic_targets(
    cut: tuple[Path, dict, dict[str, bytes]],
) -> None:
    _, summary, files = cut  # the report of the automatic targets, as first rendered
    f = json.loads(files["fits.json"])
    # Automatic candidates 2.1, 2.3, 2.6, 3: above the plateau (2.4) every batch size
    # reaches the target at its first evaluation, so S(B) is flat there.
    assert f["targets"] == summary["targets"] == [2.0, 2.1, 2.3]
    assert f["stop_at_target"] == {"losses": [2.0], "n_trials": 42 - 7}  # diverged ones ran on
    assert f["automatic_targets_kept"] == [2.1, 2.3]
    dropped = {d["target"]: d["reason"] for d in f["dropped_targets"]}
    assert set(dropped) == {2.6, 3.0}
    for reason in dropped.values():
        assert "first 2 evaluations at 7 of 7 batch sizes" in reason
        assert "not identified" in reason
    (g,) = f["bcrit_vs_target"]["groups"]
    rows = {r["target"]: r for r in g["targets"]}
    assert set(rows) == {2.0, 2.1, 2.3} and all(r["well_posed"] for r in rows.values())
    for r in rows.values():  # B_crit = 64 at every target between the plateau and 2.0
        assert r["b_crit"] == pytest.approx(CUT_B_CRIT, rel=0.15)
    skipped = {s["target"]: s for s in g["skipped"]}
    assert set(skipped) == {2.6, 3.0} and all(s["automatic"] for s in skipped.values())
    # B_crit(L) on the well-posed targets only: flat, as built (the dropped targets'
    # B_crit at the fit's lower bound would have made the slope ≪ −10).
    law = g["law"]
    assert law["targets"] == [2.0, 2.1, 2.3] and law["n_points"] == 3
    assert abs(law["slope"]) < 1.5
    md = files["report.md"].decode()
    assert "stop_at_target" in md and "no harder target can be measured" in md
    assert "dropped: reached within the first 2 evaluations" in md
    assert f["steps"]["groups"][0]["b_crit"] == pytest.approx(CUT_B_CRIT, rel=0.15)
    assert not f["warnings"]
    header = files["steps_to_target.csv"].decode().splitlines()[0]
    assert "steps_at_2.3" in header and "steps_at_2.6" not in header
    assert "bcrit_vs_target" in summary["figures"]


def test_too_few_well_posed_targets_give_no_law(cut_run: Path) -> None:
    summary = report(str(cut_run), "--target", "2.2", "--target", "3")
    f = fits(cut_run)
    assert f["automatic_targets"] is False and f["targets"] == [2.0, 2.2, 3.0]
    (g,) = f["bcrit_vs_target"]["groups"]
    assert g["well_posed_targets"] == [2.0, 2.2] and g["law"] is None
    assert "at least 3 targets with a well-posed S(B) fit; 2 here (2, 2.2)" in g["law_note"]
    md = (cut_run / "report" / "report.md").read_text()
    assert "B_crit(L) not fitted" in md and "α_B =" not in md
    assert "bcrit_vs_target" in summary["figures"]  # the two B_crit, without a law


def test_given_targets_on_cut_curves_are_reported_and_flagged(cut_run: Path) -> None:
    run = cut_run
    summary = report(str(run), "--target", "1.9", "--target", "3")
    f = fits(run)
    assert summary["targets"] == [1.9, 2.0, 3.0]  # given targets are never dropped
    (g,) = f["bcrit_vs_target"]["groups"]
    rows = {r["target"]: r for r in g["targets"]}
    skipped = {s["target"]: s for s in g["skipped"]}
    # Harder than the cut: the curves end before it, so steps to 1.9 are unknown.
    assert set(skipped) == {1.9} and not skipped[1.9]["automatic"]
    assert "stop_at_target" in skipped[1.9]["reason"] and "unknown" in skipped[1.9]["reason"]
    # Easier than the plateau: fitted, but flagged and kept out of the law.
    assert rows[3.0]["well_posed"] is False and rows[3.0]["automatic"] is False
    assert "first 2 evaluations" in rows[3.0]["problem"]
    assert rows[3.0]["b_crit"] < 1e-3  # the degenerate value is shown, flagged
    assert rows[2.0]["well_posed"] and g["well_posed_targets"] == [2.0]
    assert g["law"] is None and "1 here (2)" in g["law_note"]
    assert "bcrit_vs_target" not in summary["figures"]  # one well-posed B_crit: no figure
    md = (run / "report" / "report.md").read_text()
    assert "not well-posed: reached within the first 2 evaluations" in md
    assert "given (--target)" in md


def test_cut_report_renders_identically(cut: tuple[Path, dict, dict[str, bytes]]) -> None:
    run, _, first = cut
    copy = run.parent / "copy"  # copied before any report
    report(str(copy))
    assert snapshot(copy / "report") == first


def test_html_tables_align_numbers_right_and_text_left() -> None:
    from stepscale.analysis.report.blocks import numeric_columns, table, to_html, to_markdown

    t = table(
        ["point", "steps", "B_crit", "status"],
        [["b=4", "1,650", "27.5 [17.4, 42.5]", "well-posed"], ["b=8", "—", "—", "dropped"]],
    )
    assert numeric_columns(t.headers, t.rows) == (False, True, True, False)
    html = to_html([t, table(["", ""], [["command", "sweep run"]])], "t")
    assert '<td class="n">1,650</td>' in html and '<td class="s">well-posed</td>' in html
    assert "<th></th>" not in html  # a table without headers has no empty header row
    assert html.count('<div class="tbl"><table>') == 2  # wide tables scroll, not overflow
    assert "|---|--:|--:|---|" in to_markdown([t])
