"""The package list in pyproject.toml (explicit because the folders map to `stepscale.*`)
covers every package of the repository, and the Hydra tree ships with it."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_is_listed() -> None:
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(("stepscale", *p.parent.relative_to(ROOT).parts))
        for top in ("sweeps", "models", "analysis", "conf", "cli")
        for p in (ROOT / top).rglob("__init__.py")
    }
    assert found | {"stepscale"} == listed


def test_models_does_not_import_sweeps_or_analysis() -> None:
    for path in (ROOT / "models").rglob("*.py"):
        text = path.read_text()
        for other in ("sweeps", "analysis"):
            assert f"import {other}" not in text and f"from {other}" not in text, path


def test_analysis_does_not_import_models() -> None:
    for path in (ROOT / "analysis").rglob("*.py"):
        text = path.read_text()
        assert "import models" not in text and "from models" not in text, path


def test_conf_tree_is_found_through_the_package() -> None:
    from stepscale.sweeps.study.compose import conf_dir

    assert (conf_dir() / "config.yaml").exists()
    assert (conf_dir() / "conf" / "train_smoke.yaml").exists()
