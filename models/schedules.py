"""Learning-rate schedules as pure functions of (step, runtime hyperparameters).

The schedule *name* selects the program; warmup length, horizon and decay length are
runtime values, so trials differing only in them share one compiled step.
"""

from __future__ import annotations

import jax.numpy as jnp

SCHEDULES = ("constant", "warmup_constant", "warmup_cosine", "warmup_linear", "wsd")


def _warmup_factor(step: jnp.ndarray, warmup: jnp.ndarray) -> jnp.ndarray:
    # Linear ramp reaching the peak at the end of step `warmup` (step counts updates done,
    # so the first update uses lr/warmup rather than 0).
    return jnp.where(warmup > 0, jnp.minimum(1.0, (step + 1.0) / jnp.maximum(warmup, 1.0)), 1.0)


def lr_at(name: str, step: jnp.ndarray, hp: dict[str, jnp.ndarray]) -> jnp.ndarray:
    """Learning rate used by update number ``step`` (0-based).

    ``hp`` holds ``lr`` (peak), ``warmup``, ``horizon``, ``final_lr_frac`` and
    ``decay_steps`` (wsd) as float32 scalars.
    """
    step = jnp.asarray(step, jnp.float32)
    peak, warmup, horizon = hp["lr"], hp["warmup"], hp["horizon"]
    final = hp["final_lr_frac"]
    if name == "constant":
        return peak * jnp.ones_like(step)
    ramp = _warmup_factor(step, warmup)
    if name == "warmup_constant":
        return peak * ramp
    # Decay runs from the peak at update `warmup` towards final_lr_frac at the horizon (the
    # last update still has a little learning rate, as in optax's decay schedules).
    span = jnp.maximum(horizon - warmup, 1.0)
    progress = jnp.clip((step - warmup) / span, 0.0, 1.0)
    if name == "warmup_cosine":
        decay = final + (1.0 - final) * 0.5 * (1.0 + jnp.cos(jnp.pi * progress))
    elif name == "warmup_linear":
        decay = final + (1.0 - final) * (1.0 - progress)
    elif name == "wsd":
        decay_steps = jnp.maximum(hp["decay_steps"], 1.0)
        start = horizon - decay_steps
        frac = jnp.clip((step - start) / decay_steps, 0.0, 1.0)
        decay = final + (1.0 - final) * (1.0 - frac)
    else:
        raise ValueError(f"unknown schedule {name!r}")
    return peak * jnp.where(step < warmup, ramp, decay)
