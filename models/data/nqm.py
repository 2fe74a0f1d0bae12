"""Noisy quadratic model data: standard normal noise vectors z ~ N(0, I_dim).

The NQM model turns z into its per-example gradient noise; the data holds no tables.
Registered as ``data.name: nqm`` (`SOURCE`): one vector per example, of the model's
dimension (``model.dim``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from stepscale.models.checks import positive_int
from stepscale.models.config import DataConfig, ModelConfig
from stepscale.models.data.base import Batch, DataInfo
from stepscale.models.data.registry import SourcePlugin


def sample_noise(key: jax.Array, batch_size: int, dim: int) -> Batch:
    """Standard normal ``z`` float32 [batch_size, dim] (pure, jittable)."""
    return {"z": jax.random.normal(key, (batch_size, dim), dtype=jnp.float32)}


_sample_noise_jit = jax.jit(sample_noise, static_argnums=(1, 2))


class NQMSource:
    """Device-side source of ``z`` float32 [B, dim]; the loss floor of the NQM is 0.

    ``dim`` is the model's NQM dimension (``model.dim``). Build with
    ``models.data.build_source(cfg, model)``.
    """

    device_side = True

    def __init__(self, cfg: DataConfig, dim: int) -> None:
        self.dim = dim
        self._seed = cfg.seed
        self._eval_examples = cfg.eval_examples
        self._eval: Batch | None = None
        self.info = DataInfo(kind="nqm", input_dim=dim, loss_floor=0.0)

    def device_arrays(self) -> dict[str, np.ndarray]:
        """None: the noise has no parameters."""
        return {}

    def sample(self, arrays: dict[str, jax.Array], key: jax.Array, batch_size: int) -> Batch:
        """Standard normal ``z`` float32 [batch_size, dim]."""
        return sample_noise(key, batch_size, self.dim)

    def host_batch(self, seed: int, step: int, batch_size: int, rows: slice | None = None) -> Batch:
        """Not available: a device-side source is sampled inside the compiled step."""
        raise NotImplementedError("NQMSource is device-side; use sample()")

    def eval_set(self) -> Batch:
        """``eval_examples`` noise vectors drawn with a key from the data seed only."""
        if self._eval is None:
            key = jax.random.fold_in(jax.random.key(self._seed), 2)
            batch = _sample_noise_jit(key, self._eval_examples, self.dim)
            self._eval = {k: np.asarray(v) for k, v in batch.items()}
        return self._eval


def check(cfg: DataConfig) -> None:
    """Nothing of its own: the noise has no keys beyond those every source has."""


def build(cfg: DataConfig, model: ModelConfig) -> NQMSource:
    """Noise of the model's dimension (``model.dim``, a positive integer)."""
    positive_int("model.dim", model.dim)
    return NQMSource(cfg, model.dim)


SOURCE = SourcePlugin("nqm", sequences=False, check=check, build=build)
