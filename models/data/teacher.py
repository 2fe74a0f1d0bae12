"""Teacher-student classification: labels from a fixed random two-layer tanh network.

x ~ N(0, I_d); logits = tanh(x W1 + b1) W2 with W1 ~ N(0, 1/d), b1 ~ N(0, 0.25),
W2 ~ N(0, 16/h) (h = 64 hidden units; the gain 4 makes the task neither trivial nor
hopeless at temperature 1); y ~ Categorical(softmax(logits / temperature)).

Registered as ``data.name: teacher`` (`SOURCE`): one vector per example.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from stepscale.models.checks import int_at_least, positive_float, positive_int
from stepscale.models.config import DataConfig, ModelConfig
from stepscale.models.data.base import Batch, DataInfo
from stepscale.models.data.registry import SourcePlugin

HIDDEN = 64
LOGIT_GAIN = 4.0
FLOOR_SAMPLES = 100_000
_FLOOR_CHUNK = 10_000


class TeacherSource:
    """Device-side classification source labelled by a seeded random teacher network.

    ``info.loss_floor`` is a Monte Carlo *estimate* (100k fixed inputs from the data seed,
    float64; standard error about 1e-3 nats) of E_x[H(softmax(teacher(x) / T))], the
    expected cross-entropy of the Bayes predictor. Build with ``models.data.build_source``.
    """

    device_side = True

    def __init__(self, cfg: DataConfig) -> None:
        self.input_dim = cfg.input_dim
        self.n_classes = cfg.n_classes
        self.temperature = cfg.temperature
        self._seed = cfg.seed
        self._eval_examples = cfg.eval_examples
        self._eval: Batch | None = None
        self.weights = _teacher_weights(np.random.default_rng([cfg.seed, 1]), cfg)
        self.info = DataInfo(
            kind="classify",
            input_dim=self.input_dim,
            n_classes=self.n_classes,
            loss_floor=self._loss_floor(np.random.default_rng([cfg.seed, 3])),
            baseline_loss=math.log(self.n_classes),
            baseline="log(number of classes): the uniform prediction",
        )

    def _loss_floor(self, rng: np.random.Generator) -> float:
        """Monte Carlo estimate of the expected label entropy (nats), in float64."""
        w = {k: v.astype(np.float64) for k, v in self.weights.items()}
        total = 0.0
        for lo in range(0, FLOOR_SAMPLES, _FLOOR_CHUNK):
            n = min(_FLOOR_CHUNK, FLOOR_SAMPLES - lo)
            x = rng.standard_normal((n, self.input_dim))
            logits = np.tanh(x @ w["w1"] + w["b1"]) @ w["w2"] / self.temperature
            logp = logits - logits.max(axis=1, keepdims=True)
            logp -= np.log(np.exp(logp).sum(axis=1, keepdims=True))
            total += float(-(np.exp(logp) * logp).sum())
        return total / FLOOR_SAMPLES

    def device_arrays(self) -> dict[str, np.ndarray]:
        """The teacher's weights ``w1``, ``b1``, ``w2`` (float32)."""
        return dict(self.weights)

    def sample(self, arrays: dict[str, jax.Array], key: jax.Array, batch_size: int) -> Batch:
        """``x`` float32 [B, input_dim] and teacher-sampled labels ``y`` int32 [B]."""
        return sample_teacher(
            arrays, key, batch_size, input_dim=self.input_dim, temperature=self.temperature
        )

    def host_batch(self, seed: int, step: int, batch_size: int, rows: slice | None = None) -> Batch:
        """Not available: a device-side source is sampled inside the compiled step."""
        raise NotImplementedError("TeacherSource is device-side; use sample()")

    def eval_set(self) -> Batch:
        """``eval_examples`` labelled examples drawn with a key from the data seed only."""
        if self._eval is None:
            key = jax.random.fold_in(jax.random.key(self._seed), 2)
            arrays = {k: jnp.asarray(v) for k, v in self.device_arrays().items()}
            batch = _sample_teacher_jit(
                arrays,
                key,
                self._eval_examples,
                input_dim=self.input_dim,
                temperature=self.temperature,
            )
            self._eval = {k: np.asarray(v) for k, v in batch.items()}
        return self._eval


def sample_teacher(
    arrays: dict[str, jax.Array],
    key: jax.Array,
    batch_size: int,
    *,
    input_dim: int,
    temperature: float,
) -> Batch:
    """Inputs and labels of the teacher whose weights are ``arrays`` (pure, jittable)."""
    key_x, key_y = jax.random.split(key)
    x = jax.random.normal(key_x, (batch_size, input_dim), dtype=jnp.float32)
    # full precision so accelerators sample the same distribution the floor describes
    hidden = jnp.tanh(jnp.dot(x, arrays["w1"], precision=lax.Precision.HIGHEST) + arrays["b1"])
    logits = jnp.dot(hidden, arrays["w2"], precision=lax.Precision.HIGHEST)
    # inverse CDF rather than jax.random.categorical: same law, far cheaper to compile
    cum = jnp.cumsum(jax.nn.softmax(logits / temperature, axis=-1), axis=-1)
    u = jax.random.uniform(key_y, (batch_size, 1), dtype=jnp.float32)
    y = jnp.sum(u >= cum[:, :-1], axis=-1, dtype=jnp.int32)
    return {"x": x, "y": y}


_sample_teacher_jit = jax.jit(
    sample_teacher, static_argnames=("batch_size", "input_dim", "temperature")
)


def _teacher_weights(rng: np.random.Generator, cfg: DataConfig) -> dict[str, np.ndarray]:
    """The teacher's float32 weights, drawn from ``rng``."""
    d = cfg.input_dim
    w1 = rng.standard_normal((d, HIDDEN)) / np.sqrt(d)
    b1 = 0.5 * rng.standard_normal(HIDDEN)
    w2 = rng.standard_normal((HIDDEN, cfg.n_classes)) * (LOGIT_GAIN / np.sqrt(HIDDEN))
    return {k: v.astype(np.float32) for k, v in {"w1": w1, "b1": b1, "w2": w2}.items()}


def check(cfg: DataConfig) -> None:
    """Input dimension, number of classes (>= 2) and temperature (> 0)."""
    positive_int("data.input_dim", cfg.input_dim)
    int_at_least("data.n_classes", cfg.n_classes, 2)
    positive_float("data.temperature", cfg.temperature)


def build(cfg: DataConfig, model: ModelConfig) -> TeacherSource:
    """The teacher of a checked config (the model plays no part)."""
    return TeacherSource(cfg)


SOURCE = SourcePlugin("teacher", sequences=False, check=check, build=build)
