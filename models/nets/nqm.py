"""Noisy quadratic model (Zhang et al. 2019) with a closed-form gradient noise scale.

θ ∈ R^dim, curvature h_i = i^(−curvature_power) (i = 1..dim), H = diag(h), per-example
gradient-noise covariance Σ = noise_scale·diag(h). With z ~ N(0, I) from the batch,

    ℓ(θ; z) = ½ Σ_i h_i θ_i² + θ · (sqrt(noise_scale·h) ⊙ z),

so ∇ℓ = Hθ + sqrt(Σ) z: unbiased with per-example covariance Σ. The expected loss is
½ θᵀHθ, and the simple noise scale at θ is B_simple = tr Σ / |Hθ|².
"""

from __future__ import annotations

from typing import Protocol

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from stepscale.models.nets.presets import ResolvedModel


class NQMShape(Protocol):
    """Anything carrying the NQM fields (a `ModelConfig` or a `ResolvedModel`)."""

    dim: int
    curvature_power: float
    noise_scale: float
    init_scale: float


class NQM(nnx.Module):
    """The noisy quadratic; its only state is the parameter ``theta`` (init_scale·ones).

    The curvature is recomputed from static floats at every call (XLA folds it into a
    constant), so it never appears in the model's state.
    """

    def __init__(self, spec: ResolvedModel, rngs: nnx.Rngs | None = None) -> None:
        del rngs  # deterministic initialisation
        self.theta = nnx.Param(jnp.full((spec.dim,), spec.init_scale, jnp.dtype(spec.param_dtype)))
        self.dim = spec.dim
        self.curvature_power = spec.curvature_power
        self.noise_scale = spec.noise_scale

    def curvature(self) -> jax.Array:
        """h_i = i^(−curvature_power), float32 [dim]."""
        return jnp.arange(1, self.dim + 1, dtype=jnp.float32) ** (-self.curvature_power)

    def loss(
        self, batch: dict[str, jax.Array], *, train: bool = True, positions: int | None = None
    ) -> jax.Array:
        """Training: the batch mean of ℓ(θ; z_b). Evaluation (``train=False``): the exact
        expected loss ½ Σ h_i θ_i², independent of the batch. Float32 scalar."""
        del positions
        theta = self.theta[...].astype(jnp.float32)
        h = self.curvature()
        expected = 0.5 * jnp.sum(h * jnp.square(theta))
        if not train:
            return expected
        noise_dir = jnp.sqrt(self.noise_scale * h) * theta
        noise = batch["z"].astype(jnp.float32) @ noise_dir
        return expected + noise.mean()


def nqm_curvature(cfg: NQMShape) -> np.ndarray:
    """h_i = i^(−curvature_power) for i = 1..dim, float64."""
    return np.arange(1, cfg.dim + 1, dtype=np.float64) ** (-float(cfg.curvature_power))


def nqm_initial_loss(cfg: NQMShape) -> float:
    """The expected loss at the starting point θ_i = init_scale: ½ Σ h_i · init_scale²."""
    return float(0.5 * nqm_curvature(cfg).sum() * float(cfg.init_scale) ** 2)


def nqm_noise_trace(cfg: NQMShape) -> float:
    """tr Σ = noise_scale · Σ_i h_i, the total per-example gradient variance."""
    return float(cfg.noise_scale * nqm_curvature(cfg).sum())


def nqm_true_noise_scale(cfg: NQMShape, theta: np.ndarray | jax.Array) -> float:
    """Closed-form simple noise scale at θ: B_simple = tr Σ / |Hθ|²."""
    grad = nqm_curvature(cfg) * np.asarray(theta, dtype=np.float64)
    return nqm_noise_trace(cfg) / float(grad @ grad)


def nqm_b_noise(cfg: NQMShape, theta: np.ndarray | jax.Array) -> float:
    """Closed-form noise scale with curvature (McCandlish et al. 2018, eq. 2.4) at θ:
    B_noise = tr(HΣ) / GᵀHG, G = Hθ, the critical batch of SGD's optimal step."""
    h = nqm_curvature(cfg)
    grad = h * np.asarray(theta, dtype=np.float64)
    return float(cfg.noise_scale * (h * h).sum() / (grad @ (h * grad)))
