"""Optimizers (optax) whose hyperparameters are runtime state, not compile-time constants.

Each optimizer is wrapped in ``optax.inject_hyperparams`` so its learning rate, betas, eps
and weight decay live in the optimizer state; the training step writes the current values
into that state every update. Trials that differ only in these values therefore run the
same compiled program. Gradient clipping is done by the step itself (it needs the global
norm for logging anyway), with the clip threshold a runtime value as well.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from stepscale.models.config import OptimizerConfig

OPTIMIZERS = ("adamw", "sgd", "lars", "lamb", "lion")

# Names of the runtime hyperparameters each optimizer keeps in its state, mapped from the
# keys of the step's hyperparameter dict.
_RUNTIME_KEYS: dict[str, dict[str, str]] = {
    "adamw": {
        "learning_rate": "lr",
        "b1": "b1",
        "b2": "b2",
        "eps": "eps",
        "weight_decay": "weight_decay",
    },
    "sgd": {"learning_rate": "lr", "momentum": "b1", "weight_decay": "weight_decay"},
    "lars": {"learning_rate": "lr", "momentum": "b1", "weight_decay": "weight_decay", "eps": "eps"},
    "lamb": {
        "learning_rate": "lr",
        "b1": "b1",
        "b2": "b2",
        "eps": "eps",
        "weight_decay": "weight_decay",
    },
    "lion": {"learning_rate": "lr", "b1": "b1", "b2": "b2", "weight_decay": "weight_decay"},
}


_NO_DECAY = ("bias", "scale", "norm", "ln_")


def decay_mask(params: Any) -> Any:
    """Weight decay (and LARS trust ratios) apply to weight matrices and embeddings only:
    not to biases or normalisation parameters (whatever their rank) nor to vectors."""

    def decays(path: tuple[Any, ...], p: Any) -> bool:
        name = jax.tree_util.keystr(path).lower()
        return p.ndim >= 2 and not any(tag in name for tag in _NO_DECAY)

    return jax.tree_util.tree_map_with_path(decays, params)


def _sgd(
    learning_rate: float, momentum: float, weight_decay: float, *, nesterov: bool
) -> optax.GradientTransformation:
    # optax.sgd drops its momentum buffer when momentum is None/0 at build time; a fixed
    # buffer keeps the state shape independent of the runtime momentum value.
    return optax.chain(
        optax.add_decayed_weights(weight_decay, mask=decay_mask),
        optax.trace(decay=momentum, nesterov=nesterov),
        optax.scale_by_learning_rate(learning_rate),
    )


def _factory(cfg: OptimizerConfig) -> Callable[..., optax.GradientTransformation]:
    name = cfg.name
    if name == "adamw":
        return lambda learning_rate, b1, b2, eps, weight_decay: optax.adamw(
            learning_rate, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay, mask=decay_mask
        )
    if name == "sgd":
        return lambda learning_rate, momentum, weight_decay: _sgd(
            learning_rate, momentum, weight_decay, nesterov=cfg.nesterov
        )
    if name == "lars":
        return lambda learning_rate, momentum, weight_decay, eps: optax.lars(
            learning_rate,
            weight_decay=weight_decay,
            weight_decay_mask=decay_mask,
            trust_coefficient=cfg.trust_coefficient,
            eps=eps,
            trust_ratio_mask=decay_mask,
            momentum=momentum,
            nesterov=cfg.nesterov,
        )
    if name == "lamb":
        return lambda learning_rate, b1, b2, eps, weight_decay: optax.lamb(
            learning_rate, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay, mask=decay_mask
        )
    if name == "lion":
        return lambda learning_rate, b1, b2, weight_decay: optax.lion(
            learning_rate, b1=b1, b2=b2, weight_decay=weight_decay, mask=decay_mask
        )
    raise ValueError(f"unknown optimizer {name!r}")


def make_optimizer(cfg: OptimizerConfig) -> optax.GradientTransformation:
    """The optimizer named in ``cfg`` with every numeric hyperparameter injected as state."""
    initial = {k: 0.0 for k in _RUNTIME_KEYS[cfg.name]}
    return optax.inject_hyperparams(_factory(cfg))(**initial)


def set_hyperparams(name: str, opt_state: Any, hp: dict[str, jnp.ndarray], lr: jnp.ndarray) -> Any:
    """Return ``opt_state`` with the runtime hyperparameters for this update written in."""
    values = {
        inner: (lr if outer == "lr" else hp[outer]) for inner, outer in _RUNTIME_KEYS[name].items()
    }
    new = {k: jnp.asarray(values[k], dtype=v.dtype) for k, v in opt_state.hyperparams.items()}
    return opt_state._replace(hyperparams=new)


CLIPPED_OPTIMIZERS = ("adamw", "lamb")  # the optimizers with Adam's second moment v


def _adam_moments(opt_state: Any) -> tuple[jnp.ndarray, Any]:
    """(updates counted, second moment ``nu``) of the Adam state inside ``opt_state``."""
    count = next(
        leaf
        for path, leaf in optax.tree_utils.tree_get_all_with_path(opt_state, "count")
        if any(getattr(k, "tuple_name", "") == "ScaleByAdamState" for k in path)
    )
    return count, optax.tree_utils.tree_get(opt_state, "nu")


def clip_updates(updates: Any, grads: Any, opt_state: Any, hp: dict[str, jnp.ndarray]) -> Any:
    """Per-tensor update clipping (AdaFactor; StableAdamW, Wortsman et al. 2023): with
    v̂ the bias-corrected second moment after this step's gradient g, a tensor's update is
    divided by max(1, RMS / d), RMS = sqrt(mean(g² / v̂)) over the tensor and
    d = ``hp["update_clip"]`` (0 = off). RMS is about 1 while v̂ tracks g²; a gradient
    much larger than its history (what β2 close to 1 lets through) makes it large."""
    count, nu = _adam_moments(opt_state)
    threshold = hp["update_clip"]
    correction = jnp.maximum(1.0 - hp["b2"] ** count.astype(jnp.float32), 1e-30)
    floor = jnp.maximum(jnp.square(hp["eps"]), 1e-30)

    def clip(u: jnp.ndarray, g: jnp.ndarray, v: jnp.ndarray) -> jnp.ndarray:
        v_hat = v.astype(jnp.float32) / correction
        rms = jnp.sqrt(jnp.mean(jnp.square(g.astype(jnp.float32)) / jnp.maximum(v_hat, floor)))
        scale = 1.0 / jnp.maximum(1.0, rms / jnp.maximum(threshold, 1e-30))
        return (u * jnp.where(threshold > 0, scale, 1.0)).astype(u.dtype)

    return jax.tree.map(clip, updates, grads, nu)
