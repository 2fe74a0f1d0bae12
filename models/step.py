"""The compiled training program: a pure step, scanned over a chunk of steps per call.

Everything that changes shapes or the program (model dimensions, optimizer and schedule
names, batch layout, chunk length) is static; every hyperparameter that does not (peak
LR, warmup, horizon, betas, eps, weight decay, clip, EMA decay) and the data tables arrive
as runtime arguments. Compiled programs are cached per static signature, so later runs in
the same process at the same shapes never retrace, and new processes load them from disk
(models/executables.py: a program compiles once per machine and shape).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import Mesh

from stepscale.models.batching import BatchPlan, batch_sharding, split_microbatches
from stepscale.models.executables import CachedProgram
from stepscale.models.optim import clip_updates, set_hyperparams
from stepscale.models.schedules import lr_at
from stepscale.models.sharding import constrain, gather

# How often each compiled function was traced (a retrace is a recompile). Tests read it.
TRACE_COUNTS: dict[str, int] = {"train_chunk": 0, "eval": 0, "init": 0}

# Stream ids folded into the train seed, so data order and init never share random bits.
DATA_STREAM = 1


@dataclass(frozen=True)
class StepSpec:
    """Everything static about a run's compiled programs (the cache key is its ``key``)."""

    key: str
    graphdef: Any
    tx: optax.GradientTransformation
    optimizer: str
    schedule: str
    plan: BatchPlan
    mesh: Mesh
    sample: Callable[..., Any] | None  # device-side data sampler, None for host-side data
    ema: bool
    noise_scale: bool
    eval_positions: int | None
    update_clip: bool = False  # the program clips updates per tensor (optimizer.update_clip)
    # fsdp (models/sharding.py): the layout of the state and of its parameters; None when
    # replicated (the program then carries no sharding annotations for the state at all).
    state_sharding: Any = None
    param_sharding: Any = None

    def gathered(self, params: Any) -> Any:
        """The parameters as the loss uses them: whole on every device (all-gathered under
        fsdp, with gradients reduce-scattered back to the shards)."""
        if self.param_sharding is None:
            return params
        return gather(self.param_sharding, self.mesh)(params)


def _tree_zeros(tree: Any) -> Any:
    return jax.tree.map(lambda x: jnp.zeros(x.shape, jnp.float32), tree)


def _sq_norm(tree: Any) -> jax.Array:
    return sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in jax.tree.leaves(tree))


def _gradients(
    spec: StepSpec, params: Any, batch: dict[str, Any]
) -> tuple[Any, jax.Array, jax.Array]:
    """Mean gradient and loss over the step's microbatches, and the mean squared norm of the
    microbatch gradients (for the noise scale)."""

    def loss_fn(p: Any, mb: dict[str, Any]) -> jax.Array:
        return nnx.merge(spec.graphdef, spec.gathered(p)).loss(mb, train=True)

    grad_fn = jax.value_and_grad(loss_fn)
    n = spec.plan.n_micro
    if n == 1:
        loss, grads = grad_fn(params, batch)
        return grads, loss, _sq_norm(grads)

    micro = split_microbatches(batch, spec.plan, spec.mesh)

    def accumulate(carry: Any, mb: dict[str, Any]) -> tuple[Any, None]:
        gsum, lsum, sqsum = carry
        loss, g = grad_fn(params, mb)
        gsum = jax.tree.map(lambda a, b: a + b.astype(jnp.float32), gsum, g)
        gsum = constrain(gsum, spec.param_sharding)  # the accumulator stays sharded
        return (gsum, lsum + loss, sqsum + _sq_norm(g)), None

    zeros = constrain(_tree_zeros(params), spec.param_sharding)
    init = (zeros, jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32))
    (gsum, lsum, sqsum), _ = jax.lax.scan(accumulate, init, micro)
    grads = jax.tree.map(lambda g, p: (g / n).astype(p.dtype), gsum, params)
    return grads, lsum / n, sqsum / n


def _noise_terms(
    plan: BatchPlan, small_sq: jax.Array, big_sq: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Unbiased estimates of |G|² and tr Σ from gradient norms at two batch sizes
    (McCandlish et al. 2018, App. A). B_simple = tr Σ / |G|², averaged separately."""
    b_big = float(plan.global_batch)
    b_small = b_big / plan.n_micro
    g2 = (b_big * big_sq - b_small * small_sq) / (b_big - b_small)
    trace = (small_sq - big_sq) / (1.0 / b_small - 1.0 / b_big)
    return g2, trace


def _train_step(
    spec: StepSpec,
    state: dict[str, Any],
    hp: dict[str, jax.Array],
    arrays: Any,
    key: jax.Array,
    batch: Any,
) -> tuple[dict[str, Any], dict[str, jax.Array]]:
    step = state["step"]
    if batch is None:
        # a spike restart's skipped batches shift the stream (models/restarts.py)
        index = step + hp["data_skip"].astype(jnp.int32)
        batch = spec.sample(arrays, jax.random.fold_in(key, index), spec.plan.global_batch)
        batch = jax.lax.with_sharding_constraint(batch, batch_sharding(spec.mesh))
    params = state["params"]
    grads, loss, small_sq = _gradients(spec, params, batch)
    grad_norm = optax.tree.norm(grads)
    clip = hp["clip"]
    scale = jnp.where(clip > 0, jnp.minimum(1.0, clip / (grad_norm + 1e-12)), 1.0)
    grads = jax.tree.map(lambda g: (g * scale).astype(g.dtype), grads)
    # lr_scale: a ramp stage's LR coupling (1 otherwise, which leaves the LR bit-exact)
    lr = lr_at(spec.schedule, step, hp) * hp["lr_scale"]
    opt_state = set_hyperparams(spec.optimizer, state["opt"], hp, lr)
    updates, opt_state = spec.tx.update(grads, opt_state, params)
    if spec.update_clip:
        updates = clip_updates(updates, grads, opt_state, hp)
    new_params = optax.apply_updates(params, updates)
    new_state = {"params": new_params, "opt": opt_state, "step": step + 1}
    if spec.ema:
        # The decay ramps up (TF-style) so early evaluations are not dominated by the init.
        t = step.astype(jnp.float32)
        decay = jnp.minimum(hp["ema_decay"], (1.0 + t) / (10.0 + t))
        new_state["ema"] = jax.tree.map(
            lambda e, p: (decay * e + (1.0 - decay) * p).astype(e.dtype), state["ema"], new_params
        )
    new_state = constrain(new_state, spec.state_sharding)
    metrics = {
        "loss": loss,
        "lr": lr,
        "grad_norm": grad_norm,
        "update_norm": optax.tree.norm(updates),
        "param_norm": optax.tree.norm(new_params),
    }
    if spec.noise_scale:
        metrics["ns_g2"], metrics["ns_trace"] = _noise_terms(spec.plan, small_sq, grad_norm**2)
    return new_state, metrics


_CHUNK_CACHE: dict[tuple[str, int, bool, bool], Callable[..., Any]] = {}
_EVAL_CACHE: dict[str, Callable[..., Any]] = {}
_INIT_CACHE: dict[str, Callable[..., Any]] = {}


def _devices(spec: StepSpec) -> list[Any]:
    return list(spec.mesh.devices.flat)


def forget_programs() -> None:
    """Forget the programs this process compiled or loaded, as a new process starts: the
    next run at a shape loads its programs from disk or traces them again."""
    for cache in (_CHUNK_CACHE, _EVAL_CACHE, _INIT_CACHE):
        cache.clear()


def _initial_state(
    spec: StepSpec, build: Callable[[jax.Array], nnx.Module], seed_key: jax.Array
) -> dict[str, Any]:
    params = nnx.state(build(seed_key), nnx.Param)
    state = {"params": params, "opt": spec.tx.init(params), "step": jnp.zeros((), jnp.int32)}
    if spec.ema:
        state["ema"] = jax.tree.map(jnp.copy, params)
    return state


def abstract_state(spec: StepSpec, build: Callable[[jax.Array], nnx.Module]) -> Any:
    """The shapes and dtypes of the training state (nothing is computed or allocated)."""
    seed_key = jax.ShapeDtypeStruct((2,), jnp.uint32)
    return jax.eval_shape(lambda k: _initial_state(spec, build, k), seed_key)


def init_fn(
    spec: StepSpec, build: Callable[[jax.Array], nnx.Module], sharding: Any
) -> Callable[..., Any]:
    """``f(seed_key) -> state``: builds the model and optimizer state inside one compiled
    program (eager initialisation would compile every init op separately), laid out as
    ``sharding`` (one sharding for all, or one per leaf)."""
    if spec.key in _INIT_CACHE:
        return _INIT_CACHE[spec.key]

    def run(seed_key: jax.Array) -> dict[str, Any]:
        TRACE_COUNTS["init"] += 1
        return _initial_state(spec, build, seed_key)

    fn = CachedProgram(jax.jit(run, out_shardings=sharding), f"init|{spec.key}", _devices(spec))
    _INIT_CACHE[spec.key] = fn
    return fn


def chunk_fn(
    spec: StepSpec, length: int, host_data: bool, counted: bool = False
) -> Callable[..., Any]:
    """``f(state, hp, arrays, key, batches) -> (state, metrics[length])``, compiled once per
    static signature. ``batches`` is ``[length, B, ...]`` host data, or None for device-side
    sampling. The state argument is donated.

    ``counted``: ``f(state, hp, arrays, key, batches, n)`` runs only the first ``n`` of its
    ``length`` steps (a runtime value; the rest are skipped inside the program and their
    metrics are zeros), so chunks of any length up to ``length`` share one program: a
    batch ramp compiles once per batch size, whatever its stage boundaries."""
    cache_key = (spec.key, length, host_data, counted)
    if cache_key in _CHUNK_CACHE:
        return _CHUNK_CACHE[cache_key]

    def run(state: Any, hp: Any, arrays: Any, key: jax.Array, batches: Any) -> Any:
        TRACE_COUNTS["train_chunk"] += 1

        def body(carry: Any, batch: Any) -> Any:
            return _train_step(spec, carry, hp, arrays, key, batch)

        return jax.lax.scan(body, state, batches, length=length)

    def run_counted(
        state: Any, hp: Any, arrays: Any, key: jax.Array, batches: Any, n: jax.Array
    ) -> Any:
        TRACE_COUNTS["train_chunk"] += 1

        def step(carry: Any, batch: Any) -> Any:
            return _train_step(spec, carry, hp, arrays, key, batch)

        def body(carry: Any, xs: Any) -> Any:
            i, batch = xs
            shapes = jax.eval_shape(step, carry, batch)[1]

            def skip(c: Any, b: Any) -> Any:
                return c, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

            return jax.lax.cond(i < n, step, skip, carry, batch)

        return jax.lax.scan(body, state, (jnp.arange(length), batches), length=length)

    fn_body = run_counted if counted else run
    if spec.state_sharding is None:
        jitted = jax.jit(fn_body, donate_argnums=(0,))
    else:  # the state keeps its layout from call to call (and its buffers are reused)
        replicated = jax.sharding.NamedSharding(spec.mesh, jax.sharding.PartitionSpec())
        jitted = jax.jit(
            fn_body, donate_argnums=(0,), out_shardings=(spec.state_sharding, replicated)
        )
    static = f"chunk|{spec.key}|length={length}|host={host_data}|counted={counted}"
    fn = CachedProgram(jitted, static, _devices(spec), code=(spec.sample,) if spec.sample else ())
    _CHUNK_CACHE[cache_key] = fn
    return fn


def eval_fn(spec: StepSpec) -> Callable[[Any, Any], jax.Array]:
    """``f(params, eval_batches[n, b, ...]) -> mean eval loss``, compiled once per spec."""
    if spec.key in _EVAL_CACHE:
        return _EVAL_CACHE[spec.key]

    def run(params: Any, batches: Any) -> jax.Array:
        TRACE_COUNTS["eval"] += 1
        model = nnx.merge(spec.graphdef, spec.gathered(params))
        losses = jax.lax.map(
            lambda b: model.loss(b, train=False, positions=spec.eval_positions), batches
        )
        return jnp.mean(losses)

    fn = CachedProgram(jax.jit(run), f"eval|{spec.key}", _devices(spec))
    _EVAL_CACHE[spec.key] = fn
    return fn
