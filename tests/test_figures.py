"""Figures: typed records from a study with a known S(B), labelled axes, stable PNG bytes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from run_dirs import Spec, make_run_dir

from stepscale.analysis import figures, load
from stepscale.analysis.analyze import analyze
from stepscale.analysis.figures import style
from stepscale.analysis.figures.ablation import BestSoFarFigure
from stepscale.analysis.figures.curves import LossStepsTokens
from stepscale.analysis.figures.steps import StepsVsBatch
from stepscale.analysis.study import StudyAnalysis

BATCH_STUDY = {
    "steps_vs_batch",
    "steps_vs_examples",
    "bcrit_vs_target",
    "best_curves",
    "noise_scale",
    "objective_vs_lr",
    "lr_heatmap",
    "lr_vs_batch",
}


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[StudyAnalysis, xr.Dataset]:
    run = make_run_dir(
        tmp_path_factory.mktemp("fig") / "run",
        Spec(horizon=4000, horizons={16: 2000}, confirm_seeds=1),
    )
    ds = load(run)
    return analyze(ds), ds


def test_records_of_a_batch_size_study(study: tuple[StudyAnalysis, xr.Dataset]) -> None:
    a, ds = study
    recs = figures.build(a, ds)
    assert set(recs) == BATCH_STUDY
    for rec in recs.values():
        assert dataclasses.is_dataclass(rec) and rec.__dataclass_params__.frozen
    sb: StepsVsBatch = recs["steps_vs_batch"]
    (series,) = sb.series
    assert series.fit is not None and series.fit.b_crit == pytest.approx(128, rel=0.1)
    assert series.censored_batch == (16.0,) and series.censored_at == (2000.0,)
    assert 16.0 not in series.batch and len(series.seed_batch) == 6
    # Records are pure: building twice gives equal data.
    assert figures.build(a, ds)["lr_vs_batch"] == recs["lr_vs_batch"]


def _labels(fig: object) -> list[tuple[str, str]]:
    return [(ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes if ax.get_visible()]  # type: ignore[attr-defined]


def test_every_axis_is_labelled_with_units(study: tuple[StudyAnalysis, xr.Dataset]) -> None:
    a, ds = study
    recs = figures.build(a, ds)
    units = {
        "steps_vs_batch": ("(sequences)", "(steps)"),
        "steps_vs_examples": ("(sequences)", "(steps)"),
        "bcrit_vs_target": ("loss", "(sequences)"),
        "best_curves": ("steps", "loss"),
        "noise_scale": ("steps", "(sequences)"),
        "objective_vs_lr": ("learning rate", "(steps)"),
        "lr_heatmap": ("learning rate", "(sequences)"),
        "lr_vs_batch": ("(sequences)", "learning rate"),
    }
    for name, rec in recs.items():
        fig = figures.draw(name, rec)
        x_unit, y_unit = units[name]
        main = _labels(fig)[0]
        assert x_unit in main[0] and y_unit in main[1], (name, main)
        assert fig.axes[0].get_title(), name
    heat = figures.draw("lr_heatmap", recs["lr_heatmap"])
    assert "steps" in heat.axes[-1].get_ylabel()  # the colour bar


def test_png_bytes_are_deterministic(
    study: tuple[StudyAnalysis, xr.Dataset], tmp_path: Path
) -> None:
    a, ds = study
    recs = figures.build(a, ds)
    first = figures.render(recs, tmp_path / "a")
    # every figure drawn again from records built again: the same PNG bytes (its SVG's
    # bytes: tests/test_report.py, test_re_rendering_a_copied_run_dir_gives_identical_bytes)
    again = figures.build(a, ds)
    assert {name: style.to_png(figures.draw(name, rec)) for name, rec in again.items()} == first
    for name, data in first.items():
        assert (tmp_path / "a" / f"{name}.png").read_bytes() == data
        assert b"matplotlib" not in data.lower()  # no Software tag
    assert style.DPI == 110


def test_sequence_length_study_draws_loss_vs_steps_and_tokens(tmp_path: Path) -> None:
    ds = load(make_run_dir(tmp_path / "run", Spec(seq_lens=(64, 256), horizon=1500)))
    a = analyze(ds)
    recs = figures.build(a, ds)
    assert "steps_vs_batch" not in recs and "lr_vs_batch" not in recs
    rec: LossStepsTokens = recs["loss_steps_tokens"]
    assert [c.label for c in rec.by_steps] == ["seq_len=64", "seq_len=256"]
    # Same curves, tokens = steps × batch × sequence length.
    assert np.allclose(np.asarray(rec.by_tokens[1].x), np.asarray(rec.by_steps[1].x) * 32 * 256)
    fig = figures.draw("loss_steps_tokens", rec)
    assert [x for x, _ in _labels(fig)] == ["steps", "tokens"]


def test_ablation_best_so_far(tmp_path: Path) -> None:
    spec = Spec(variants=("adamw", "lion"), batches=(32, 64, 128), horizon=3000)
    ds = load(make_run_dir(tmp_path / "run", spec))
    a = analyze(ds)
    rec: BestSoFarFigure = figures.build(a, ds)["best_so_far"]
    assert rec.axis == "optimizer" and [p[0] for p in rec.panels] == [32.0, 64.0, 128.0]
    for _, lines in rec.panels:
        assert [ln.variant for ln in lines] == ["adamw", "lion"]
        for ln in lines:
            best = np.asarray(ln.best)
            assert ln.n == tuple(range(1, 7))
            assert np.all(np.diff(best[np.isfinite(best)]) <= 0)
            assert np.all(np.asarray(ln.lo) <= np.asarray(ln.hi))
    fig = figures.draw("best_so_far", rec)
    assert all(x == "trials" for x, _ in _labels(fig))


def test_long_legends_do_not_cover_the_data(study: tuple[StudyAnalysis, xr.Dataset]) -> None:
    a, ds = study
    recs = figures.build(a, ds)
    # One line per point fills the noise-scale axes: its legend goes below them.
    fig = figures.draw("noise_scale", recs["noise_scale"])
    assert fig.axes[0].get_legend() is None and len(fig.legends) == 1
    # The optimal-LR axis covers the measured optima, not the reference rules' extremes.
    lr = figures.draw("lr_vs_batch", recs["lr_vs_batch"])
    lo, hi = lr.axes[0].get_ylim()
    opt = [v for s in recs["lr_vs_batch"].series for v in s.lr_opt]
    assert lo <= min(opt) and hi >= max(opt) and hi / lo <= 9 * max(opt) / min(opt) * 1.001
