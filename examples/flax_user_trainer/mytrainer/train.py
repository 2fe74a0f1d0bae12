"""A Flax NNX MLP fitted to a random teacher network: a stepscale Python-function trainer.

stepscale calls ``main(config, reporter, trial_dir)`` in each trial's job, ``config`` being
this project's own config tree (the study's ``trainer.config``, with the trial's batch size,
learning rate, horizon and seed written into it), and ``validate(config)`` on every point's
config before the study starts. All data come from fixed seeds here: nothing is downloaded.

The data: x ~ N(0, I), y = teacher(x) + noise, the teacher a random one-hidden-layer tanh
network (outputs scaled to unit variance), so the best possible eval loss is noise². Batches
are drawn with replacement from a finite training set; ``eval_loss`` is the mean squared
error on a fixed held-out set. The model is ``models.mlp.MLP``, from this project's own
``models/`` package.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from models.mlp import MLP  # this project's models/, not stepscale's (stepscale.models)
from omegaconf import OmegaConf

from stepscale.trainer import Action

CHECKPOINT = "checkpoint.npz"


def validate(config: Any) -> dict[str, Any]:
    """Refuse a config that cannot be trained (stepscale names the point and this message,
    and runs nothing); tell stepscale the point's horizon and sizes."""
    config = OmegaConf.create(config)  # attribute access, whether given a dict or a DictConfig
    batch, n_train = int(config.train.batch_size), int(config.data.n_train)
    if batch < 1:
        raise ValueError(f"train.batch_size must be at least 1, got {batch}")
    if batch > n_train:
        raise ValueError(f"train.batch_size {batch} is larger than the data set ({n_train})")
    if float(config.optim.lr) <= 0:
        raise ValueError(f"optim.lr must be positive, got {config.optim.lr}")
    d, w, depth = int(config.data.dim), int(config.model.width), int(config.model.depth)
    return {
        "horizon_steps": int(config.train.steps),
        "examples_per_step": batch,
        "params": (d + 1) * w + (depth - 1) * (w + 1) * w + (w + 1),
    }


def make_data(cfg: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The training and held-out sets, the same in every trial (``data.seed``)."""
    rng = np.random.default_rng(int(cfg.seed))
    dim, n_train = int(cfg.dim), int(cfg.n_train)
    w1 = rng.normal(size=(dim, int(cfg.teacher_width))) / np.sqrt(dim)
    w2 = rng.normal(size=(int(cfg.teacher_width), 1))
    x = rng.normal(size=(n_train + int(cfg.n_eval), dim))
    clean = np.tanh(x @ w1) @ w2
    y = (clean - clean.mean()) / clean.std() + float(cfg.noise) * rng.normal(size=clean.shape)
    x, y = x.astype(np.float32), y.astype(np.float32)
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def main(config: Any, reporter: Any, trial_dir: Path) -> dict[str, Any]:
    """Train with Adam for ``train.steps`` steps, reporting ``eval_loss`` every
    ``train.eval_every`` steps; checkpoint into ``trial_dir`` and resume from there."""
    d, m, o, t = config.data, config.model, config.optim, config.train
    if t.get("compile_cache_dir"):  # compiled programs reused by the next trials: faster starts
        jax.config.update("jax_compilation_cache_dir", os.path.expanduser(t.compile_cache_dir))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    x_train, y_train, x_eval, y_eval = make_data(d)
    # Built under jit: one compiled program instead of one per initializer op.
    model = nnx.jit(lambda: MLP(d.dim, m.width, m.depth, 1, rngs=nnx.Rngs(t.seed)))()
    graphdef, params = nnx.split(model)
    tx = optax.scale_by_adam()  # the learning rate is applied in the step: a runtime argument
    opt_state = tx.init(params)

    def loss_fn(params: Any, x: jax.Array, y: jax.Array) -> jax.Array:
        return jnp.mean((nnx.merge(graphdef, params)(x) - y) ** 2)

    @jax.jit
    def train_step(params: Any, opt_state: Any, lr: Any, x: Any, y: Any) -> tuple[Any, Any, Any]:
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = jax.tree.map(lambda p, u: p - lr * u, params, updates)
        return params, opt_state, loss

    evaluate = jax.jit(loss_fn)

    step, (params, opt_state) = restore(trial_dir, (params, opt_state))
    reporter.begin(step)
    if step == 0:  # the initial loss: what a diverged trial is scored with
        reporter.report(0, {"eval_loss": float(evaluate(params, x_eval, y_eval))})
    lr, batch, steps = np.float32(o.lr), int(t.batch_size), int(t.steps)
    try:
        while step < steps:
            # A step's batch depends on the seed and the step only: a resumed trial sees
            # the batches it would have seen.
            idx = np.random.default_rng([int(t.seed), step]).integers(len(x_train), size=batch)
            params, opt_state, loss = train_step(params, opt_state, lr, x_train[idx], y_train[idx])
            step += 1
            if step % int(t.eval_every) and step < steps:
                continue
            eval_loss = float(evaluate(params, x_eval, y_eval))
            action = reporter.report(step, {"eval_loss": eval_loss, "train_loss": float(loss)})
            if not np.isfinite(eval_loss):
                return {"state": "diverged", "steps_done": step}
            if step % int(t.checkpoint_every) == 0:
                save(trial_dir, step, (params, opt_state))
            if action is Action.PRUNE:
                return {"state": "pruned", "steps_done": step}
            if action is Action.STOP:
                break
    except KeyboardInterrupt:  # a stop request: keep the work done; the next job resumes
        save(trial_dir, step, (params, opt_state))
        raise
    return {"state": "complete", "steps_done": step}


def save(trial_dir: Path, step: int, state: Any) -> None:
    """The training state's arrays and its step, written atomically into the trial folder."""
    arrays = {f"a{i}": np.asarray(leaf) for i, leaf in enumerate(jax.tree.leaves(state))}
    tmp = Path(trial_dir) / f"{CHECKPOINT}.tmp.npz"
    np.savez(tmp, step=step, **arrays)
    tmp.replace(Path(trial_dir) / CHECKPOINT)


def restore(trial_dir: Path, state: Any) -> tuple[int, Any]:
    """The newest checkpoint's step and state (shaped like ``state``), else (0, ``state``)."""
    path = Path(trial_dir) / CHECKPOINT
    if not path.exists():
        return 0, state
    leaves, treedef = jax.tree.flatten(state)
    with np.load(path) as saved:
        step = int(saved["step"])
        arrays = [jnp.asarray(saved[f"a{i}"]) for i in range(len(leaves))]
    return step, jax.tree.unflatten(treedef, arrays)
