"""The study's headline and "not determined" (analysis.headline) on synthetic data with a
known answer: B_crit with its interval, the objective's best per point, and fits that rest
on too few points or too wide an interval labelled "not determined" in the report's text,
tables and figures (no line drawn)."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from run_dirs import Spec, make_run_dir

from stepscale.analysis import figures, load
from stepscale.analysis.analyze import analyze
from stepscale.analysis.fits.lr import fit_lr_law
from stepscale.analysis.headline import (
    MAX_CI_FACTOR,
    MAX_EXPONENT_WIDTH,
    NOT_DETERMINED,
    exponent_determination,
    headline,
    lr_law_determination,
    scale_determination,
    sig,
)
from stepscale.analysis.health import health_checks
from stepscale.analysis.report import write_report
from stepscale.analysis.report.blocks import to_markdown
from stepscale.analysis.report.page import document
from stepscale.analysis.report.sections import fit_section, lr_law_text
from stepscale.cli.main import build_parser
from stepscale.cli.report import run_report
from stepscale.errors import UsageError

# The demo's η*(B) of issue 18: η* = 0.0028·B^0.715 on 3 batch sizes whose optima go up
# then down, so α's 95% interval is [−6.3, 7.8] (a bump of 0.666 in log η* at the middle).
BUMP = 0.666
DEMO_LR_FACTORS = {16: math.exp(-BUMP / 3), 32: math.exp(2 * BUMP / 3), 64: math.exp(-BUMP / 3)}


def demo_spec() -> Spec:
    """7 batch sizes with B_crit = 72 (η*(B) is fitted on the 3 below it: the demo's case)."""
    return Spec(
        b_crit=72.0,
        lr0=0.0028 * 16**0.715,
        lr_alpha=0.715,
        lr_factors=DEMO_LR_FACTORS,
    )


def test_sig_writes_three_significant_figures() -> None:
    assert [sig(v) for v in (0.0028123, 70.876, 2763.9, 1.85e13, math.nan, None)] == [
        "0.00281",
        "70.9",
        "2,760",
        "1.85e+13",
        "—",
        "—",
    ]


def test_determination_rules_with_known_answers() -> None:
    assert scale_determination(3, (50.0, 400.0)).determined
    assert not scale_determination(2, (50.0, 60.0)).determined  # too few points
    wide = scale_determination(5, (10.0, 10.0 * MAX_CI_FACTOR * 1.01))
    assert not wide.determined and "factor" in wide.reason
    assert not scale_determination(5, (math.nan, 60.0)).determined
    assert exponent_determination(4, (0.3, 0.3 + MAX_EXPONENT_WIDTH * 0.99)).determined
    assert not exponent_determination(4, (0.0, MAX_EXPONENT_WIDTH * 1.01)).determined
    assert not exponent_determination(2, (0.4, 0.6)).determined


def test_the_demo_lr_law_is_not_determined() -> None:
    b = np.array([16.0, 32.0, 64.0])
    lr = 0.0028 * b**0.715 * np.array([DEMO_LR_FACTORS[int(x)] for x in b])
    law = fit_lr_law(b, lr)
    assert law.c == pytest.approx(0.0028) and law.alpha == pytest.approx(0.715)
    assert law.alpha_ci == pytest.approx((-6.33, 7.76), abs=0.02)
    assert not lr_law_determination(law).determined
    text = lr_law_text("all", law, tuple(b))
    assert NOT_DETERMINED in text and "closest rule" not in text and "0.715" not in text


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo-like run dir and its report (shared with tests/test_report_page.py's checks)."""
    run = make_run_dir(tmp_path_factory.mktemp("demo") / "run", demo_spec())
    write_report(run)
    return run


def test_headline_gives_bcrit_with_its_interval_and_basis(demo: Path) -> None:
    h = headline(analyze(load(demo)))
    assert h.kind == "b_crit" and h.determined
    g = h.groups[0]
    assert g.value == pytest.approx(72.0, rel=0.05)
    assert g.ci[0] < g.value < g.ci[1] and g.ci[1] / g.ci[0] < MAX_CI_FACTOR
    assert (g.n_points, g.n_trials) == (7, 42)
    assert h.lines()[0].startswith(f"B_crit at eval loss < 2 = {sig(g.value)} sequences")
    assert "rests on 7 batch sizes reaching the target, 42 trials" in h.lines()[0]


def test_the_report_labels_the_demo_lr_law_not_determined(demo: Path) -> None:
    md = (demo / "report" / "report.md").read_text()
    html = (demo / "report" / "index.html").read_text()
    for text in (md, html):
        assert "η*(B) = c·B^α: not determined" in text
        assert "closest rule" not in text and "0.0028·B" not in text
    rec = figures.build(analyze(load(demo)), load(demo))["lr_vs_batch"]
    assert rec.series[0].not_determined
    fig = figures.draw("lr_vs_batch", rec)
    labels = [ln.get_label() for ln in fig.axes[0].get_lines()]
    assert not any(lb.startswith("η* = ") for lb in labels)  # no law drawn
    assert any(NOT_DETERMINED in lb for lb in labels)  # but labelled


def test_an_under_tuned_batch_size_is_named_and_left_out_in_the_report(tmp_path: Path) -> None:
    # Steps 3660, 1060, 1480, 900: batch 64 needed 1.4× the steps of 32, so the fit rests on
    # 16, 32 and 128, and the report says why 64 is missing.
    spec = Spec(batches=(16, 32, 64, 128), jitter=0.4, seed=2, lr_multipliers=(0.5, 1.0, 2.0))
    a = analyze(load(make_run_dir(tmp_path / "run", spec)))
    fit = a.groups[0].fit_at(a.target)
    assert fit is not None and fit.under_tuned == (64.0,)
    assert fit.batch_sizes == (16.0, 32.0, 128.0)
    md = to_markdown(fit_section(a))
    assert "| all | 64 | 1,480 | 3 | reached; under-tuned, left out of the fit |" in md
    assert any("batch size 64 needed 1480 steps" in w for w in a.warnings)


def test_a_wide_bcrit_is_not_determined_and_not_drawn(tmp_path: Path) -> None:
    # Steps 4400, 1720, 1320, 840: falling (no batch size left out as under-tuned), but so
    # noisy that the interval spans a factor 18.
    spec = Spec(batches=(16, 32, 64, 128), jitter=0.5, seed=7, lr_multipliers=(0.5, 1.0, 2.0))
    run = make_run_dir(tmp_path / "run", spec)
    ds = load(run)
    a = analyze(ds)
    h = headline(a)
    assert not h.determined and NOT_DETERMINED in h.lines()[0] and "= " not in h.lines()[0]
    rec = figures.build(a, ds)["steps_vs_batch"]
    assert rec.series[0].fit is not None and rec.series[0].fit.not_determined
    labels = [ln.get_label() for ln in figures.draw("steps_vs_batch", rec).axes[0].get_lines()]
    assert not any("B_crit=" in lb for lb in labels)
    assert any(NOT_DETERMINED in lb for lb in labels)
    # The report opens with the summary box: the answer ("not determined") and the health
    # warnings (here: B_crit's interval).
    checks = health_checks(a, ds, json.loads((run / "space.json").read_text()))
    bad = [f"{c.name}: {c.message}" for c in checks if not c.ok]
    assert bad
    blocks = document(a, ds, {}, {}, (), (), bad)
    box = next(b for b in blocks if b.kind == "summary")
    assert blocks.index(box) == 1  # right after the title
    lines, warns = box.rows
    assert NOT_DETERMINED in lines[0] and set(bad) <= set(warns)
    assert "**Warning:** " + bad[0] in to_markdown(blocks)


def test_too_few_batch_sizes_are_not_determined(tmp_path: Path) -> None:
    spec = Spec(batches=(16, 32, 64), horizons={64: 200}, lr_multipliers=(0.5, 1.0, 2.0))
    h = headline(analyze(load(make_run_dir(tmp_path / "run", spec))))
    assert not h.determined and h.groups[0].n_points == 2
    assert "needs at least 3 batch sizes" in h.groups[0].determination.reason


def test_a_study_without_batch_axis_gives_the_best_per_point(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path / "run", Spec(seq_lens=(32, 64), lr_multipliers=(0.5, 1.0, 2.0)))
    a = analyze(load(run))
    h = headline(a)
    assert h.kind == "objective" and h.determined
    best = {p.point: p.best_objective for p in a.points}
    g = h.groups[0]
    assert g.best_point == min(best, key=best.__getitem__) and g.value == min(best.values())
    assert [f"  {p}: best {sig(v)}" for p, v in best.items()] == h.lines()[1:-1]
    assert h.lines()[-1].startswith("trained: best trial ")
    shutil.rmtree(run)


# Height (px) of main's report (before issue 18) of the demo-like run dir above, measured
# once in the same headless Chromium at 1280×1000: the folded page must be under half of it.
HEIGHT_BEFORE = 9837
MEASURE = """
window.addEventListener('load', function () {
  function box(el) { if (!el) return null; var r = el.getBoundingClientRect();
    return {top: r.top + window.scrollY, bottom: r.bottom + window.scrollY}; }
  var out = {summary: box(document.getElementById('summary')),
             figure: box(document.getElementById('steps_vs_batch')),
             height: document.documentElement.scrollHeight};
  document.querySelectorAll('details').forEach(function (d) { d.open = true; });
  out.unfolded = document.documentElement.scrollHeight;
  var pre = document.createElement('pre'); pre.id = 'measured';
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
});
"""


def chromium() -> str:
    """The headless browser, or a skip (a failure under CI, which installs it)."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed (CI installs it: apt-get install chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return exe


def test_the_answer_is_on_the_first_screen_in_chromium(demo: Path, tmp_path: Path) -> None:
    """The summary box and the S(B) figure end within the first 1,000 px; the page with
    its reference tables and config folded is under half its height before."""
    exe = chromium()
    page = tmp_path / "measure.html"
    html = (demo / "report" / "index.html").read_text()
    page.write_text(html.replace("</body>", f"<script>{MEASURE}</script></body>"))
    out = subprocess.run(
        [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1280,1000",
            "--virtual-time-budget=10000",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    found = re.search(r'<pre id="measured">([^<]*)</pre>', out)
    assert found, out[-2000:]
    m = json.loads(found.group(1))
    assert m["summary"] is not None and m["figure"] is not None
    assert m["summary"]["bottom"] <= m["figure"]["top"] <= m["figure"]["bottom"] <= 1000
    assert m["height"] < HEIGHT_BEFORE / 2, m
    assert m["unfolded"] > m["height"]  # the folded parts are there, one click away


# ------------------------------------------------------------------- comparison mode


def report_cli(*argv: str) -> dict:
    p = build_parser()
    return run_report(p.parse_args(["report", *argv]))


def test_a_comparison_overlays_the_studies_by_name(demo: Path, tmp_path: Path) -> None:
    other = make_run_dir(
        tmp_path / "other", Spec(name="wider", b_crit=256.0, lr_multipliers=(0.5, 1.0, 2.0))
    )
    out = tmp_path / "cmp"
    result = report_cli(str(demo), str(other), "--out", str(out))
    assert result["studies"] == ["synthetic", "wider"]
    for f in result["files"]:
        assert (out / f).is_file(), f
    data = json.loads((out / "comparison.json").read_text())
    labels = [s["label"] for s in data["series"]]
    assert labels == ["synthetic", "wider"]
    synthetic, wider = data["series"]
    assert synthetic["law_note"] and not synthetic["law_lr"]  # the demo's η*(B): not drawn
    assert wider["fit_steps"] and not wider["fit_note"]  # a determined S(B): drawn
    md = (out / "report.md").read_text()
    assert "synthetic" in md and "wider" in md and NOT_DETERMINED in md
    assert "B_crit at eval loss < 2 = 2" in md  # wider's B_crit ≈ 256 (3 figures: 25x)
    before = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    report_cli(str(demo), str(other), "--out", str(out))
    assert before == {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}


def test_bad_comparisons_are_input_errors_and_write_nothing(demo: Path, tmp_path: Path) -> None:
    seq = make_run_dir(tmp_path / "seq", Spec(seq_lens=(32, 64), lr_multipliers=(0.5, 1.0, 2.0)))
    out = tmp_path / "cmp"
    with pytest.raises(UsageError, match="no batch-size axis"):
        report_cli(str(demo), str(seq), "--out", str(out))
    with pytest.raises(UsageError, match="needs --out DIR"):
        report_cli(str(demo), str(demo))
    with pytest.raises(UsageError, match="missing does not exist"):
        report_cli(str(demo), str(tmp_path / "missing"), "--out", str(out))
    with pytest.raises(UsageError, match="--out is for comparisons"):
        report_cli(str(demo), "--out", str(out))
    assert not out.exists()


def test_a_bcrit_outside_the_measured_batch_sizes_is_not_determined() -> None:
    # lr_vs_batchsize's curves fitted B_crit = 4e-06 [4e-06, 8.3e-06] examples over batch
    # sizes 4…512: a narrow interval, but an extrapolation of the fit's form.
    from types import SimpleNamespace

    from stepscale.analysis.headline import steps_fit_determination

    sizes = (4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0)
    below = SimpleNamespace(n_points=8, b_crit_ci=(4e-06, 8.34e-06), batch_sizes=sizes)
    det = steps_fit_determination(below)  # type: ignore[arg-type]
    assert not det.determined and "outside the batch sizes measured" in det.reason
    inside = SimpleNamespace(n_points=8, b_crit_ci=(17.4, 42.5), batch_sizes=sizes)
    assert steps_fit_determination(inside).determined  # type: ignore[arg-type]
    above = SimpleNamespace(n_points=8, b_crit_ci=(600.0, 1500.0), batch_sizes=sizes)
    assert not steps_fit_determination(above).determined  # type: ignore[arg-type]
    # optimizer_ablation's SGD: 9.14 [9.14, 9.14] on 3 points, every resample the same fit.
    flat = SimpleNamespace(n_points=3, b_crit_ci=(9.14, 9.14), batch_sizes=(8.0, 32.0, 128.0))
    det = steps_fit_determination(flat)  # type: ignore[arg-type]
    assert not det.determined and "no width" in det.reason


def test_a_studys_report_targets_are_fitted_beside_its_target(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path / "run", Spec(batches=(16, 32, 64, 128)))
    study = json.loads((run / "study.json").read_text())
    study["objective"]["report_targets"] = [2.5, 3.0]
    (run / "study.json").write_text(json.dumps(study))
    a = analyze(load(run))
    assert a.target == 2.0 and a.targets == (2.0, 2.5, 3.0) and not a.automatic
    h = headline(a)
    others = h.groups[0].at_targets
    assert [t for t, *_ in others] == [2.5, 3.0]
    for t, value, low, high in others:  # B_crit(L) = 128·(L/2)^-2 in the synthetic study
        assert low < value < high and value == pytest.approx(128 * (t / 2) ** -2, rel=0.2)
    assert any(line.startswith("  B_crit at other targets: < 2.5: ") for line in h.lines())


def test_report_targets_harder_than_a_stopping_target_are_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from stepscale.cli.main import main

    code = main(
        ["run", "conf=shakespeare_batchsize", "objective.report_targets=[2.3]", "--dry-run"]
    )
    assert code == 2 and "objective.report_targets" in capsys.readouterr().err
