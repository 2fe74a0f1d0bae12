"""The presets (``trainer.metrics.preset``): registered plug-ins, each with a framework's
argument style and names and a reading that the corpus (tests/logs) checks on a log built
from that framework's own format strings; keys beside ``preset:`` override it."""

from __future__ import annotations

from pathlib import Path

import yaml

from stepscale.sweeps.trainers.arg_styles import STYLES, ArgsSpec
from stepscale.sweeps.trainers.line_formats import read_metrics
from stepscale.sweeps.trainers.presets import PRESETS, STUDY_SETTINGS, Preset, register_preset

CORPUS = yaml.safe_load((Path(__file__).parent / "logs" / "corpus.yaml").read_text())
AGREED = {"hf_trainer", "lightning", "keras", "megatron", "torchtitan", "maxtext", "nanogpt"}
AGREED |= {"fairseq", "tensorboard"}


def test_every_agreed_preset_is_registered_and_read_by_the_corpus() -> None:
    assert set(PRESETS) >= AGREED
    in_corpus = {e["reading"]["preset"] for e in CORPUS if "preset" in e["reading"]}
    assert set(PRESETS) <= in_corpus  # each preset has its framework's log in the corpus
    for preset in PRESETS.values():
        assert preset.arg_style in STYLES and set(preset.keys) <= set(STUDY_SETTINGS)
        assert len(preset.description) > 100  # what it reads and assumes
        read_metrics({"preset": preset.name})  # its block is a valid reading


def test_keys_beside_a_preset_override_it_and_a_new_preset_is_one_registration() -> None:
    spec = read_metrics({"preset": "lightning", "format": "csv", "source": "m.csv"})
    assert (spec.format, spec.source, spec.step, spec.preset) == (
        "csv",
        "m.csv",
        "step + 1",
        "lightning",
    )
    register_preset(
        Preset("mine", {"source": "stdout", "format": "kv_equals"}, "-key value", {"lr": "lr"}, "x")
    )
    try:
        assert read_metrics({"preset": "mine"}).format == "kv_equals"
        style = PRESETS["mine"].arg_style  # single-dash frameworks
        assert ArgsSpec(style).render({"lr": 0.5}, {}) == ["-lr", "0.5"]
        assert ArgsSpec("-key=value").render({"lr": 1.0}, {}) == ["-lr=1.0"]
    finally:
        del PRESETS["mine"]
