"""A new data source is one module (its source, checks and plug-in), its config
(``conf/data/<name>.yaml``) and one registration: a toy source defined and registered here
trains through the built-in trainer (`sweep train`), checks its own keys and says its batch
unit, with nothing else of stepscale changed."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import TEST_COMPILE_CACHE, read_jsonl

from stepscale.cli.main import main
from stepscale.models.checks import int_at_least, positive_int
from stepscale.models.config import DataConfig, ModelConfig
from stepscale.models.data import (
    Batch,
    DataInfo,
    SourcePlugin,
    build_source,
    register,
    source_names,
    unregister,
)
from stepscale.models.errors import ConfigError
from stepscale.sweeps.trainers import builtin

# ------------------------------------------------- the new source's module (as it would be)


class LinearClasses:
    """Device-side toy classification: x ~ N(0, I_input_dim), labelled by the largest of
    ``n_classes`` fixed random projections (a linear boundary the MLP can learn)."""

    device_side = True

    def __init__(self, cfg: DataConfig) -> None:
        rng = np.random.default_rng([cfg.seed, 5])
        self.w = rng.standard_normal((cfg.input_dim, cfg.n_classes)).astype(np.float32)
        self.input_dim = cfg.input_dim
        self._seed, self._eval_examples = cfg.seed, cfg.eval_examples
        self.info = DataInfo(
            kind="classify",
            input_dim=cfg.input_dim,
            n_classes=cfg.n_classes,
            baseline_loss=math.log(cfg.n_classes),
            baseline="log(number of classes)",
        )

    def device_arrays(self) -> dict[str, np.ndarray]:
        """The projections."""
        return {"w": self.w}

    def sample(self, arrays: dict[str, jax.Array], key: jax.Array, batch_size: int) -> Batch:
        """``x`` float32 [B, input_dim] and its class ``y`` int32 [B]."""
        x = jax.random.normal(key, (batch_size, self.input_dim), dtype=jnp.float32)
        return {"x": x, "y": jnp.argmax(x @ arrays["w"], axis=-1).astype(jnp.int32)}

    def host_batch(self, seed: int, step: int, batch_size: int, rows: slice | None = None) -> Batch:
        """Not available: sampled inside the compiled step."""
        raise NotImplementedError

    def eval_set(self) -> Batch:
        """``eval_examples`` examples drawn with a key of the data seed."""
        key = jax.random.fold_in(jax.random.key(self._seed), 2)
        arrays = {"w": jnp.asarray(self.w)}
        return {k: np.asarray(v) for k, v in self.sample(arrays, key, self._eval_examples).items()}


def check(cfg: DataConfig) -> None:
    """Its own keys: input dimension and classes."""
    positive_int("data.input_dim", cfg.input_dim)
    int_at_least("data.n_classes", cfg.n_classes, 2)


def build(cfg: DataConfig, model: ModelConfig) -> LinearClasses:
    """The source of a checked config."""
    return LinearClasses(cfg)


SOURCE = SourcePlugin("linear_classes", sequences=False, check=check, build=build)

# its config: conf/data/linear_classes.yaml (here in a --config-dir of the test's own)
CONFIG = "name: linear_classes\ninput_dim: 8\nn_classes: 3\nglobal_batch: 16\n"

# --------------------------------------------------------------------------- the tests


@pytest.fixture
def registered() -> Iterator[SourcePlugin]:
    """The toy source registered for one test (the one registration)."""
    register(SOURCE)
    try:
        yield SOURCE
    finally:
        unregister(SOURCE.name)


def test_a_registered_source_trains_through_sweep_train(
    registered: SourcePlugin, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "conf_dir"
    (conf / "data").mkdir(parents=True)
    (conf / "data" / "linear_classes.yaml").write_text(CONFIG)
    run_dir = tmp_path / "run"
    code = main(
        [
            "train", "--config-dir", str(conf), "conf=train_smoke", "model=mlp",
            "data=linear_classes", "data.eval_examples=64", "data.eval_batch=32",
            "optimizer.lr=0.01", "train.max_steps=40", "train.eval_every=20",
            "train.devices=1", f"train.compile_cache_dir={TEST_COMPILE_CACHE}",
            f"run_dir={run_dir}",
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    status = json.loads(out)
    assert status["state"] == "complete" and status["steps_done"] == 40
    # one example a vector: a step holds as many tokens as examples (the batch counts examples)
    assert status["tokens_per_step"] == status["examples_per_step"] == 16
    evals = [r["eval_loss"] for r in read_jsonl(run_dir / "metrics.jsonl") if "eval_loss" in r]
    assert evals[-1] < evals[0] < math.log(3) + 0.5  # it learns the boundary


def test_a_registered_source_checks_its_keys_and_says_its_unit(
    registered: SourcePlugin,
) -> None:
    assert SOURCE.name in source_names()
    with pytest.raises(ConfigError) as err:
        build_source(DataConfig(name="linear_classes", n_classes=1))
    assert err.value.field == "data.n_classes"
    with pytest.raises(ConfigError) as err:  # the keys every source has are checked first
        build_source(DataConfig(name="linear_classes", eval_batch=0))
    assert err.value.field == "data.eval_batch"
    # not a sequence source: seq_len is not its key, and its batch counts examples
    assert build_source(DataConfig(name="linear_classes", seq_len=0)).info.kind == "classify"
    assert builtin.batch_unit(DataConfig(name="linear_classes")) == "examples"
    assert "linear_classes" in builtin.trainer_choices()["data.name"]
    with pytest.raises(ValueError, match="already registered"):
        register(SOURCE)


def test_an_unregistered_source_is_unknown() -> None:
    with pytest.raises(ConfigError, match="unknown data source 'linear_classes'") as err:
        build_source(DataConfig(name="linear_classes"))
    assert err.value.field == "data.name"
