"""Fully connected classifier for ``classify`` batches ``{"x": [B, d], "y": int [B]}``."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from stepscale.models.nets.presets import ResolvedModel


class MLP(nnx.Module):
    """``depth`` GELU hidden layers of width ``hidden``, then a linear layer to the class
    logits. Kernels use LeCun-normal initialisation, biases start at zero."""

    def __init__(self, spec: ResolvedModel, rngs: nnx.Rngs) -> None:
        widths = _widths(spec)
        pdt, dt = jnp.dtype(spec.param_dtype), jnp.dtype(spec.dtype)
        self.layers = nnx.List(
            [
                nnx.Linear(n_in, n_out, dtype=dt, param_dtype=pdt, rngs=rngs)
                for n_in, n_out in itertools.pairwise(widths)
            ]
        )
        self.dtype = dt

    def __call__(self, x: jax.Array) -> jax.Array:
        """Inputs [B, input_dim] -> float32 logits [B, n_classes]."""
        x = x.astype(self.dtype)
        for layer in self.layers[:-1]:
            x = jax.nn.gelu(layer(x))
        return self.layers[-1](x).astype(jnp.float32)

    def loss(
        self, batch: dict[str, jax.Array], *, train: bool = True, positions: int | None = None
    ) -> jax.Array:
        """Mean softmax cross-entropy (float32). ``train`` and ``positions`` are ignored."""
        del train, positions
        logits = self(batch["x"])
        losses = optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"])
        return losses.mean(dtype=jnp.float32)


def _widths(spec: ResolvedModel) -> list[int]:
    """Layer widths from the input to the logits."""
    return [spec.input_dim, *([spec.hidden] * spec.depth), spec.n_classes]


def mlp_param_count(spec: ResolvedModel) -> int:
    """Number of parameters (kernels and biases) of the classifier."""
    widths = _widths(spec)
    return sum(n_in * n_out + n_out for n_in, n_out in itertools.pairwise(widths))
