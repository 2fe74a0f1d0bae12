"""What Hydra users type works as they expect: group overrides win over a preset, and a
whole parameter can be added from the command line. (Habits that `sweep` refuses — multirun,
``hydra.*``, a preset without ``conf=`` — are cases of test_bad_inputs.py.) And every option says what it does."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_formats import builtin_studies

from stepscale.sweeps.study.compose import prepare_study


@pytest.mark.parametrize("study", builtin_studies())
def test_group_overrides_win_over_every_builtin_preset(study: str) -> None:
    # A preset that sets `sampler: {name: tpe}` instead of `override /sampler: tpe` would
    # silently turn `sampler=random` back into TPE.
    for sampler, pruner in (("random", "hyperband"), ("qmc", "none")):
        _, cfg, _ = prepare_study([f"conf={study}", f"sampler={sampler}", f"pruner={pruner}"], None)
        assert (cfg.sampler.name, cfg.pruner.name) == (sampler, pruner)


def test_a_whole_parameter_is_added_from_the_command_line() -> None:
    _, cfg, _ = prepare_study(
        [
            "conf=smoke",
            "+nuisance.b2={path: optimizer.b2, type: float, low: 0.9, high: 0.999}",
            "++scientific.seq={path: data.seq_len, values: [16, 32]}",
            "+fixed.wd={path: optimizer.weight_decay, value: 0.1}",
        ],
        None,
    )
    b2 = cfg.nuisance["b2"]
    assert (b2.path, b2.type, b2.low, b2.high) == ("optimizer.b2", "float", 0.9, 0.999)
    assert cfg.scientific["seq"].values == [16, 32]
    assert cfg.fixed["wd"].value == 0.1
    assert "lr" in cfg.nuisance and "batch_size" in cfg.scientific  # the preset's stay


def test_every_option_of_every_command_has_help_text() -> None:
    import argparse

    from stepscale.cli.main import build_parser

    missing = []

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*path, name])
            elif not action.help:
                missing.append(
                    f"sweep {' '.join(path)} {'/'.join(action.option_strings) or action.dest}"
                )

    walk(build_parser(), [])
    assert missing == []


def test_an_imported_conf_says_how_to_run_it_from_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from stepscale.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["export", "conf=smoke", "--format", "optuna"]) == 0
    Path("space.json").write_text(capsys.readouterr().out)
    assert main(["import", "space.json", "--format", "optuna", "-o", "conf/conf/x.yaml"]) == 0
    assert "sweep run conf=x --config-dir conf" in capsys.readouterr().err
    assert main(["run", "conf=x", "--dry-run"]) == 2  # not in the packaged presets …
    assert "add --config-dir conf" in capsys.readouterr().err  # … but the message finds it
    assert main(["run", "conf=x", "--config-dir", "conf", "--dry-run"]) == 0
