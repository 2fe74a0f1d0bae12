"""The unit of the batch axis, from the study to every label of the report.

space.json states it (the study's own ``unit``, else sequences for sequence data and
examples otherwise); ``analysis.load`` carries it; every figure, table and sentence of
the report names it. A noisy quadratic model counts examples, a GPT sequences.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import TEST_COMPILE_CACHE
from run_dirs import Spec, make_run_dir

from stepscale.analysis import figures, load
from stepscale.analysis.analyze import analyze
from stepscale.cli.fit import run_fit
from stepscale.cli.main import build_parser, main
from stepscale.cli.report import run_report
from stepscale.sweeps.study.compose import prepare_study
from stepscale.sweeps.study.space_doc import space_document

# Records of the figures whose axes or legends show batch sizes, B_crit or examples.
BATCH_FIGURES = (
    "steps_vs_batch",
    "steps_vs_examples",
    "bcrit_vs_target",
    "noise_scale",
    "lr_heatmap",
    "lr_vs_batch",
)


# A synthetic study small enough to report in a few seconds, with every figure.
SMALL: dict[str, Any] = {
    "batches": (16, 64, 256, 1024),
    "lr_multipliers": (0.5, 1.0, 2.0, 16.0),
    "horizon": 4000,
}


def report(run: Path) -> Path:
    p = build_parser()
    run_report(p.parse_args(["report", str(run)]))
    return run / "report"


def batch_param(space: dict[str, Any]) -> dict[str, Any]:
    (param,) = [p for p in space["parameters"] if p["path"] == "data.global_batch"]
    return param


def figure_texts(fig: Any) -> list[str]:
    """Every label, title, tick label and legend entry of a matplotlib figure."""
    texts = [t.get_text() for t in fig.findobj(lambda o: hasattr(o, "get_text"))]
    for ax in fig.axes:
        texts += [ax.get_xlabel(), ax.get_ylabel(), ax.get_title()]
    return [t for t in texts if t]


def check_report(run: Path, unit: str, other: str, expect: tuple[str, ...] = BATCH_FIGURES) -> None:
    """The report of ``run`` labels batch sizes in ``unit`` everywhere, never in ``other``;
    the figures ``expect`` (of BATCH_FIGURES) exist and name ``unit``."""
    out = report(run)
    ds = load(run)
    assert ds.attrs["batch_unit"] == unit
    assert ds["examples"].attrs["units"] == ds["examples_per_step"].attrs["units"] == unit
    assert ds["batch_size"].attrs["units"] == unit
    fits = json.loads((out / "fits.json").read_text())
    assert fits["batch_unit"] == fits["steps"]["batch_unit"] == unit
    for name in ("report.md", "index.html", "steps_to_target.csv", "fits.json"):
        assert other not in (out / name).read_text(), name
    md = (out / "report.md").read_text()
    for label in (
        f"examples to target ({unit})",
        f"E_min ({unit})",
        f"B_crit ({unit})",
        f"| batch | batch size in {unit} (",
        f"| examples_to_target | steps_to_target × examples per step ({unit}) |",
        f"| examples_per_step | {unit} per step |",
        f"--batch-unit {unit}`",
    ):
        assert label in md, label
    a = analyze(ds)
    assert a.batch_unit == unit
    recs = figures.build(a, ds)
    for name, rec in recs.items():
        texts = figure_texts(figures.draw(name, rec))
        assert not [t for t in texts if other in t], (name, texts)
        if name in BATCH_FIGURES:
            assert rec.batch_unit == unit, name
            assert any(f"({unit})" in t for t in texts), (name, texts)
    assert set(expect) <= set(recs), set(recs)
    lr_vs_batch = figures.draw("lr_vs_batch", recs["lr_vs_batch"])
    assert lr_vs_batch.axes[0].get_xlabel() == f"batch size ({unit})"


def test_nqm_study_run_end_to_end_says_examples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The built-in NQM study (lr_vs_batchsize), cut to 2 batch sizes × 2 LRs × 20 steps:
    space.json, the Dataset, report.md, index.html, fits.json and every figure count
    examples, and nothing says sequences."""
    run = tmp_path / "nqm"
    code = main(
        [
            "run",
            "conf=lr_vs_batchsize",
            "scientific.batch_size.values=[4,64]",
            "nuisance.lr.choices=[0.25,1.0]",
            "budget.trials_per_point=2",
            "budget.max_steps=20",
            "parallelism=1",
            "launcher=inline",
            "train.devices=1",
            f"train.compile_cache_dir={TEST_COMPILE_CACHE}",
            f"run_dir={run}",
        ]
    )
    capsys.readouterr()
    assert code == 0
    assert batch_param(json.loads((run / "space.json").read_text()))["unit"] == "examples"
    # Two batch sizes and no noise_scale metric: no B_crit-vs-target or B_simple figure.
    check_report(run, "examples", "sequences", ("steps_vs_batch", "lr_heatmap", "lr_vs_batch"))


@pytest.mark.parametrize(
    ("data", "unit", "other"),
    [("nqm", "examples", "sequences"), ("markov", "sequences", "(examples)")],
)
def test_every_figure_names_the_unit(tmp_path: Path, data: str, unit: str, other: str) -> None:
    """Synthetic studies with every figure (B_crit vs target, B_simple …): an NQM one is
    labelled in examples throughout, a markov (GPT) one in sequences."""
    check_report(make_run_dir(tmp_path / data, Spec(data=data, unit=unit, **SMALL)), unit, other)


def test_the_stated_unit_wins(tmp_path: Path) -> None:
    """A study stating examples is in examples though its data are sequences: the unit is
    read from space.json, not guessed."""
    stated = load(make_run_dir(tmp_path / "stated", Spec(unit="examples", **SMALL)))
    assert stated.attrs["batch_unit"] == stated["examples"].attrs["units"] == "examples"
    assert analyze(stated).batch_unit == "examples"


@pytest.mark.parametrize(
    ("spec", "unit"),
    [
        (Spec(data="nqm"), "examples"),
        (Spec(data="teacher"), "examples"),
        (Spec(data="markov"), "sequences"),
        (Spec(), "sequences"),  # no data.name, but a seq_len: sequences
    ],
)
def test_run_dirs_without_a_stated_unit_get_the_default(
    tmp_path: Path, spec: Spec, unit: str
) -> None:
    """Old run dirs (no unit in space.json): the default of the trials' data section."""
    run = make_run_dir(tmp_path / "run", spec)
    assert "unit" not in batch_param(json.loads((run / "space.json").read_text()))
    ds = load(run)
    assert ds.attrs["batch_unit"] == unit and ds["examples"].attrs["units"] == unit
    # A Dataset saved before it had the attribute still has its units.
    del ds.attrs["batch_unit"]
    assert analyze(ds).batch_unit == unit


@pytest.mark.parametrize(
    ("study", "unit"),
    [
        ("lr_vs_batchsize", "examples"),  # nqm
        ("smoke", "sequences"),  # gpt on markov
        ("batchsize_vs_steps", "sequences"),
    ],
)
def test_space_json_states_the_default_when_the_study_does_not(study: str, unit: str) -> None:
    _, stated, _ = prepare_study([f"conf={study}"], None)
    assert batch_param(space_document(stated))["unit"] == unit
    _, cfg, _ = prepare_study([f"conf={study}", "scientific.batch_size.unit=null"], None)
    assert cfg.scientific["batch_size"].unit is None  # the config stays as written
    assert batch_param(space_document(cfg))["unit"] == unit
    _, mlp, _ = prepare_study(
        [f"conf={study}", "scientific.batch_size.unit=null", "model=mlp", "data=teacher"], None
    )
    assert batch_param(space_document(mlp))["unit"] == "examples"


def test_fit_steps_batch_unit_option(tmp_path: Path) -> None:
    table = tmp_path / "t.csv"
    rows = [(b, 500 * (1 + 128 / b)) for b in (16, 32, 64, 128, 256, 512)]
    table.write_text("batch,steps\n" + "".join(f"{b},{s}\n" for b, s in rows))
    p = build_parser()
    argv = ["fit", "steps", "--csv", str(table), "--batch-col", "batch", "--steps-col", "steps"]
    assert run_fit(p.parse_args(argv))["batch_unit"] == "examples"  # the neutral default
    out = run_fit(p.parse_args([*argv, "--batch-unit", "tokens", "--n-boot", "10"]))
    assert out["batch_unit"] == "tokens" and out["groups"][0]["b_crit"] == pytest.approx(128)


def test_the_built_in_trainer_asks_its_data_source() -> None:
    """The built-in trainer's batch unit is its source's: sequences when the plug-in says
    its examples are sequences, as built (DataInfo.kind "lm", seq_len tokens an example)."""
    from stepscale.models.config import DataConfig
    from stepscale.models.data import build_source, source_names, source_plugin
    from stepscale.sweeps.trainers import builtin

    assert source_names()
    for name in source_names():
        unit = builtin.batch_unit(DataConfig(name=name))
        assert unit == ("sequences" if source_plugin(name).sequences else "examples"), name
    for name in ("markov", "nqm", "teacher"):  # the file sources need a file
        info = build_source(DataConfig(name=name, seq_len=8)).info
        sequences = info.kind == "lm" and info.tokens_per_example == 8
        assert builtin.batch_unit(DataConfig(name=name)) == (
            "sequences" if sequences else "examples"
        )


def test_a_run_dir_without_a_unit_counts_by_its_steps() -> None:
    """The rule for run dirs whose space.json states no unit names no source: a step of
    more tokens than examples counts sequences (the built-in trainer writes seq_len tokens
    an example for LM data, one for nqm and teacher), else examples."""
    from stepscale.rundir import unit_of_counts

    assert unit_of_counts([(32 * 64.0, 32.0)]) == "sequences"
    assert unit_of_counts([(32.0, 32.0), (float("nan"), 4.0)]) == "examples"
    assert unit_of_counts([]) == "examples"  # nothing said: the neutral word
