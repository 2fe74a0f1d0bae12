"""A plain multilayer perceptron in Flax NNX: the user's own model code."""

from __future__ import annotations

from itertools import pairwise

import jax
from flax import nnx


class MLP(nnx.Module):
    """``depth`` hidden layers of ``width`` units (GELU), then a linear read-out."""

    def __init__(self, d_in: int, width: int, depth: int, d_out: int, *, rngs: nnx.Rngs) -> None:
        sizes = [d_in] + [width] * depth
        self.hidden = nnx.List(nnx.Linear(a, b, rngs=rngs) for a, b in pairwise(sizes))
        self.out = nnx.Linear(sizes[-1], d_out, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        for layer in self.hidden:
            x = nnx.gelu(layer(x))
        return self.out(x)
