"""Learning-rate schedules and the duration helper, on values worked out by hand."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from stepscale.models.durations import to_steps
from stepscale.models.errors import ConfigError
from stepscale.models.schedules import SCHEDULES, lr_at

HP = {
    "lr": jnp.float32(1.0),
    "warmup": jnp.float32(10.0),
    "horizon": jnp.float32(110.0),
    "final_lr_frac": jnp.float32(0.0),
    "decay_steps": jnp.float32(20.0),
}


def lrs(name: str, steps: list[int]) -> np.ndarray:
    return np.array([float(lr_at(name, jnp.int32(s), HP)) for s in steps])


def test_warmup_reaches_the_peak_at_the_end_of_warmup() -> None:
    for name in SCHEDULES[1:]:
        got = lrs(name, [0, 4, 9])
        np.testing.assert_allclose(got, [0.1, 0.5, 1.0], rtol=1e-6, err_msg=name)


def test_decay_shapes() -> None:
    np.testing.assert_allclose(lrs("constant", [0, 50, 109]), [1, 1, 1])
    np.testing.assert_allclose(lrs("warmup_constant", [10, 109]), [1, 1])
    # decay from the peak at update 10 (= warmup) towards 0 at update 110 (the horizon)
    np.testing.assert_allclose(lrs("warmup_cosine", [10, 60, 109]), [1.0, 0.5, 0.000247], atol=1e-5)
    np.testing.assert_allclose(lrs("warmup_linear", [10, 60, 109]), [1.0, 0.5, 0.01], atol=1e-6)
    # wsd: stable up to update 90, then linear towards 0 over the last 20 updates
    np.testing.assert_allclose(lrs("wsd", [50, 90, 100, 109]), [1.0, 1.0, 0.5, 0.05], atol=1e-6)


def test_to_steps_converts_every_unit() -> None:
    common = {"examples_per_step": 32, "tokens_per_step": 32 * 64, "horizon": 1000}
    assert to_steps("train.max", steps=500, **common) == 500
    assert to_steps("train.max", tokens=32 * 64 * 10 + 1, **common) == 11  # rounded up
    assert to_steps("train.max", examples=320, **common) == 10
    assert to_steps("schedule.warmup", fraction=0.05, **common) == 50
    assert to_steps("schedule.warmup", **common) is None
    with pytest.raises(ConfigError, match="give only one"):
        to_steps("train.max", steps=1, tokens=5, **common)
    with pytest.raises(ConfigError) as err:
        to_steps("schedule.warmup", fraction=1.5, **common)
    assert err.value.field == "schedule.warmup_frac"
