"""A fast preset composes its base preset through Hydra's defaults list and sets only what
differs: the composed configs are the base's but at those keys (a change to the base, e.g.
its LR range, reaches the fast preset too)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from omegaconf import OmegaConf

from stepscale.sweeps.study.compose import prepare_study

CONF = Path(__file__).resolve().parents[1] / "conf" / "conf"
# fast preset → (its base, the keys it sets itself)
FAST = {
    "batchsize_vs_steps_fast": (
        "batchsize_vs_steps",
        {"name", "scientific.batch_size.values", "scientific.batch_size.adaptive",
         "budget.trials_per_point", "budget.confirm_seeds", "sampler.transfer",
         "sampler.transfer_width"},
    ),
    "shakespeare_batchsize_fast": (
        "shakespeare_batchsize",
        {"name", "scientific.batch_size.values", "scientific.batch_size.adaptive",
         "budget.trials_per_point"},
    ),
}  # fmt: skip


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict) or not tree:
        return {prefix: tree}
    out: dict[str, Any] = {}
    for k, v in tree.items():
        out |= _flat(v, f"{prefix}.{k}" if prefix else str(k))
    return out


def _composed(conf: str) -> dict[str, Any]:
    raw, _, _ = prepare_study([f"conf={conf}"], None)
    return _flat(OmegaConf.to_container(raw, resolve=True))


def _differs(key: str, keys: set[str]) -> bool:
    return any(key == k or key.startswith(k + ".") for k in keys)


@pytest.mark.parametrize("fast", sorted(FAST))
def test_a_fast_preset_is_its_base_but_where_it_says(fast: str) -> None:
    base, own = FAST[fast]
    defaults = yaml.safe_load((CONF / f"{fast}.yaml").read_text())["defaults"]
    assert defaults[0] == base and "_self_" in defaults  # composed, not copied
    a, b = _composed(fast), _composed(base)
    assert set(a) - set(b) <= {k for k in a if _differs(k, own)}
    changed = {k for k in a.keys() & b.keys() if a[k] != b[k]}
    assert changed and all(_differs(k, own) for k in changed), changed
    assert a["scientific.batch_size.values"] == [] and a["scientific.batch_size.adaptive.low"]
