"""A new key of a mapping the schema declares needs no `+`: a whole parameter
(`nuisance.b2={…}`, also under scientific., fixed., derived.) and a key of a
`dict[str, …]` field (`launcher.resources.TPU=4`). A key a dataclass lacks stays a typo
(exit 2), and so does a new key inside a user trainer's free-form section, where Hydra
wants `+` (docs/running.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepscale.errors import UsageError
from stepscale.sweeps.study.compose import compose_config

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_a_whole_parameter_is_added_or_merged_without_plus() -> None:
    b2 = "nuisance.b2={path: optimizer.b2, type: float, low: 0.9, high: 0.999}"
    cfg, _ = compose_config(["conf=smoke", b2, "nuisance.lr={low: 1.0e-4}"])
    assert cfg.nuisance.b2.path == "optimizer.b2" and cfg.nuisance.b2.high == 0.999
    # lr exists in the preset: the keys given are set, the rest stays the preset's
    assert cfg.nuisance.lr.low == 1e-4 and cfg.nuisance.lr.high == 0.03
    assert cfg.nuisance.lr.path == "optimizer.lr"
    cfg, _ = compose_config(["conf=smoke", "fixed.wd={path: optimizer.weight_decay, value: 0.1}"])
    assert cfg.fixed.wd.value == 0.1


def test_a_new_key_of_a_declared_mapping_needs_no_plus() -> None:
    cfg, _ = compose_config(["conf=smoke", "launcher=ray", "launcher.resources.TPU=4"])
    assert cfg.launcher.resources == {"TPU": 4.0}


@pytest.mark.parametrize(
    "override",
    ["optimizer.lrr=1", "nuisance.lr.lowz=1", "budget.trialz=3"],
)
def test_a_key_a_dataclass_lacks_is_still_refused(override: str) -> None:
    with pytest.raises(UsageError, match=override.split("=")[0].split(".")[-1]):
        compose_config(["conf=smoke", override])


def test_a_new_key_in_a_user_trainers_section_still_wants_plus() -> None:
    args = ["conf=char_gpt_batchsize"]
    where = str(EXAMPLES / "char_gpt")
    with pytest.raises(UsageError, match=r"\+trainer\.metrics\.names\.x=y"):
        compose_config([*args, "trainer.metrics.names.x=y"], where)
    cfg, _ = compose_config([*args, "+trainer.metrics.names.x=y"], where)
    assert cfg.trainer.metrics.names.x == "y"
