"""Decoder-only transformer language model (GPT-2 style, pre-norm).

Parameters are stored in ``param_dtype`` and cast to the compute ``dtype`` at use;
LayerNorm statistics, attention softmax, logits and the loss are float32. The module holds
nothing but `nnx.Param`s (no dropout, no RNG state), so ``nnx.split(model, nnx.Param)``
captures the whole model and its forward is a pure function of the parameters.

Every projection is one 2-D matmul over the flattened tokens (`dense`), so its weight
gradient is a plain ``xᵀ·g`` with one contracting axis. Written as einsums over
``[B, T, …]`` (the form before), the gradients contracted two axes and XLA's CPU backend
transposed the residual stream's gradient for each of them, recomputing the whole chain of
LayerNorm backward terms inside every transpose: 60% of a training step of nanoGPT's
Shakespeare model (4 × 128, batch 12 × 64) went into those copies, 2.5× the CPU time per
step of this form (the parameters, their shapes and the numbers are the same up to the
order of floating-point sums).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from stepscale.models.errors import ConfigError
from stepscale.models.nets.presets import ResolvedModel

INIT_STD = 0.02
LN_EPS = 1e-5
ROPE_BASE = 10_000.0


class LayerNorm(nnx.Module):
    """LayerNorm with float32 statistics; the output is cast to the compute dtype. Without
    ``bias`` it has a scale only (nanoGPT's ``bias=False``)."""

    def __init__(
        self, dim: int, param_dtype: jnp.dtype, dtype: jnp.dtype, bias: bool = True
    ) -> None:
        self.scale = nnx.Param(jnp.ones((dim,), param_dtype))
        if bias:
            self.bias = nnx.Param(jnp.zeros((dim,), param_dtype))
        self.has_bias = bias
        self.dtype = dtype

    def __call__(self, x: jax.Array) -> jax.Array:
        """Normalise over the last axis."""
        x = x.astype(jnp.float32)
        mean = x.mean(-1, keepdims=True)
        var = jnp.square(x - mean).mean(-1, keepdims=True)
        y = (x - mean) * jax.lax.rsqrt(var + LN_EPS)
        y = y * self.scale[...].astype(jnp.float32)
        if self.has_bias:
            y = y + self.bias[...].astype(jnp.float32)
        return y.astype(self.dtype)


def rope_tables(length: int, head_dim: int) -> tuple[jax.Array, jax.Array]:
    """cos and sin tables [length, head_dim // 2] of rotary position embeddings."""
    inv_freq = ROPE_BASE ** (-jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim)
    angles = jnp.arange(length, dtype=jnp.float32)[:, None] * inv_freq[None, :]
    return jnp.cos(angles), jnp.sin(angles)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotate the two halves of the head dim of ``x`` [B, T, H, Dh] by position (NeoX layout)."""
    x32 = x.astype(jnp.float32)
    first, second = jnp.split(x32, 2, axis=-1)
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    rotated = jnp.concatenate([first * cos - second * sin, first * sin + second * cos], axis=-1)
    return rotated.astype(x.dtype)


def dense(x: jax.Array, w: jax.Array) -> jax.Array:
    """``x [..., k] @ w [k, n] -> [..., n]`` as one 2-D matmul over the flattened leading
    axes (see the module docstring: why not an einsum over them)."""
    lead = x.shape[:-1]
    return (x.reshape(-1, x.shape[-1]) @ w).reshape(*lead, w.shape[-1])


class CausalSelfAttention(nnx.Module):
    """Multi-head causal self-attention: 2-D matmul projections, einsums over heads."""

    def __init__(self, spec: ResolvedModel, rngs: nnx.Rngs) -> None:
        d, h, hd = spec.d_model, spec.n_heads, spec.head_dim
        pdt = jnp.dtype(spec.param_dtype)
        residual_std = INIT_STD / math.sqrt(2 * spec.n_layers)
        self.qkv = nnx.Param(_normal(rngs, (d, 3, h, hd), INIT_STD, pdt))
        self.proj = nnx.Param(_normal(rngs, (h, hd, d), residual_std, pdt))
        self.has_bias = bool(spec.bias)
        if self.has_bias:
            self.qkv_bias = nnx.Param(jnp.zeros((3, h, hd), pdt))
            self.proj_bias = nnx.Param(jnp.zeros((d,), pdt))
        self.rotary = spec.pos_emb == "rotary"
        self.dtype = jnp.dtype(spec.dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        """x [B, T, d] in the compute dtype -> [B, T, d]."""
        dt = self.dtype
        w = self.qkv[...].astype(dt)
        d, _, heads, head_dim = w.shape
        qkv = dense(x, w.reshape(d, 3 * heads * head_dim))
        qkv = qkv.reshape(*x.shape[:2], 3, heads, head_dim)
        if self.has_bias:
            qkv = qkv + self.qkv_bias[...].astype(dt)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        length = x.shape[1]
        if self.rotary:
            cos, sin = rope_tables(length, head_dim)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        scores = jnp.einsum("bqhe,bkhe->bhqk", q, k, preferred_element_type=jnp.float32)
        scores = scores / math.sqrt(head_dim)
        causal = jnp.tril(jnp.ones((length, length), dtype=bool))
        scores = jnp.where(causal, scores, jnp.finfo(jnp.float32).min)
        weights = jax.nn.softmax(scores, axis=-1).astype(dt)
        out = jnp.einsum("bhqk,bkhe->bqhe", weights, v).reshape(*x.shape[:2], heads * head_dim)
        out = dense(out, self.proj[...].astype(dt).reshape(heads * head_dim, d))
        return out + self.proj_bias[...].astype(dt) if self.has_bias else out


class FeedForward(nnx.Module):
    """Two-layer GELU MLP of width ``mlp_hidden``."""

    def __init__(self, spec: ResolvedModel, rngs: nnx.Rngs) -> None:
        d, f = spec.d_model, spec.mlp_hidden
        pdt = jnp.dtype(spec.param_dtype)
        residual_std = INIT_STD / math.sqrt(2 * spec.n_layers)
        self.fc = nnx.Param(_normal(rngs, (d, f), INIT_STD, pdt))
        self.out = nnx.Param(_normal(rngs, (f, d), residual_std, pdt))
        self.has_bias = bool(spec.bias)
        if self.has_bias:
            self.fc_bias = nnx.Param(jnp.zeros((f,), pdt))
            self.out_bias = nnx.Param(jnp.zeros((d,), pdt))
        self.dtype = jnp.dtype(spec.dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        """x [B, T, d] -> [B, T, d]."""
        dt = self.dtype
        hidden = dense(x, self.fc[...].astype(dt))
        if self.has_bias:
            hidden = hidden + self.fc_bias[...].astype(dt)
        out = dense(jax.nn.gelu(hidden), self.out[...].astype(dt))
        return out + self.out_bias[...].astype(dt) if self.has_bias else out


class Block(nnx.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, spec: ResolvedModel, rngs: nnx.Rngs) -> None:
        pdt, dt = jnp.dtype(spec.param_dtype), jnp.dtype(spec.dtype)
        bias = bool(spec.bias)
        self.ln_attn = LayerNorm(spec.d_model, pdt, dt, bias)
        self.attn = CausalSelfAttention(spec, rngs)
        self.ln_mlp = LayerNorm(spec.d_model, pdt, dt, bias)
        self.mlp = FeedForward(spec, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        """One residual block."""
        x = x + self.attn(self.ln_attn(x))
        return x + self.mlp(self.ln_mlp(x))


class GPT(nnx.Module):
    """Decoder-only transformer LM over batches ``{"tokens": int [B, L+1]}``."""

    def __init__(self, spec: ResolvedModel, rngs: nnx.Rngs) -> None:
        pdt, dt = jnp.dtype(spec.param_dtype), jnp.dtype(spec.dtype)
        d = spec.d_model
        self.wte = nnx.Param(_normal(rngs, (spec.vocab_size, d), INIT_STD, pdt))
        if spec.pos_emb == "learned":
            self.wpe = nnx.Param(_normal(rngs, (spec.max_seq_len, d), INIT_STD, pdt))
        self.blocks = nnx.List([Block(spec, rngs) for _ in range(spec.n_layers)])
        self.ln_f = LayerNorm(d, pdt, dt, bool(spec.bias))
        if not spec.tie_embeddings:
            self.head = nnx.Param(_normal(rngs, (d, spec.vocab_size), INIT_STD, pdt))
        self.learned_positions = spec.pos_emb == "learned"
        self.tied = spec.tie_embeddings
        self.dtype = dt

    def __call__(self, tokens: jax.Array) -> jax.Array:
        """Input tokens [B, T] -> float32 next-token logits [B, T, vocab]."""
        dt = self.dtype
        x = jnp.take(self.wte[...], tokens, axis=0).astype(dt)
        if self.learned_positions:
            x = x + self.wpe[...][: tokens.shape[1]].astype(dt)
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        if self.tied:
            return jnp.einsum(
                "btd,vd->btv", x, self.wte[...].astype(dt), preferred_element_type=jnp.float32
            )
        return jnp.einsum(
            "btd,dv->btv", x, self.head[...].astype(dt), preferred_element_type=jnp.float32
        )

    def loss(
        self, batch: dict[str, jax.Array], *, train: bool = True, positions: int | None = None
    ) -> jax.Array:
        """Mean next-token cross-entropy (nats, float32) over the targets ``tokens[:, 1:]``,
        or over the first ``positions`` targets only. ``train`` changes nothing (no dropout).

        Thanks to causality the first ``positions`` logits only depend on the first
        ``positions`` inputs, so the forward pass is run on those alone.
        """
        del train
        tokens = batch["tokens"]
        length = tokens.shape[1] - 1
        if positions is not None:
            if not 1 <= positions <= length:
                raise ConfigError(
                    "train.eval_positions", f"must be in [1, {length}], got {positions}"
                )
            tokens = tokens[:, : positions + 1]
        logits = self(tokens[:, :-1])
        losses = optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:])
        return losses.mean(dtype=jnp.float32)


def _normal(rngs: nnx.Rngs, shape: tuple[int, ...], std: float, dtype: jnp.dtype) -> jax.Array:
    """N(0, std²) initial values drawn from the params stream of ``rngs``."""
    return (std * jax.random.normal(rngs.params(), shape, jnp.float32)).astype(dtype)


def gpt_param_counts(spec: ResolvedModel) -> dict[str, int]:
    """Parameter counts by group: ``embedding`` (token table), ``position`` (learned table),
    ``blocks`` (all transformer blocks), ``final_norm`` and ``head`` (untied LM head)."""
    d, f, v = spec.d_model, spec.mlp_hidden, spec.vocab_size
    b = 1 if spec.bias is not False else 0  # biases of the linear layers and norms
    attention = 3 * d * d + b * 3 * d + d * d + b * d
    feed_forward = d * f + b * f + f * d + b * d
    norms = 2 * (1 + b) * d
    return {
        "embedding": v * d,
        "position": spec.max_seq_len * d if spec.pos_emb == "learned" else 0,
        "blocks": spec.n_layers * (attention + feed_forward + norms),
        "final_norm": (1 + b) * d,
        "head": 0 if spec.tie_embeddings else d * v,
    }


def gpt_flops_per_token(spec: ResolvedModel, seq_len: int) -> float:
    """Training FLOPs per token (forward + backward = 3 × forward):

        6·N_nonembedding + 6·d_model·vocab + 12·n_layers·seq_len·d_model

    N_nonembedding counts the blocks and final norm (Kaplan et al. 2020); the second term is
    the LM-head matmul (tied or not), which Kaplan omits but is large for small models; the
    third is attention's QKᵀ and AV matmuls (2·2·L·d forward per layer, no causal discount,
    as in PaLM / Chinchilla). Elementwise work (norms, softmax, GELU) is ignored.
    """
    counts = gpt_param_counts(spec)
    n_nonembedding = counts["blocks"] + counts["final_norm"]
    head = spec.d_model * spec.vocab_size
    attention = 12 * spec.n_layers * seq_len * spec.d_model
    return float(6 * n_nonembedding + 6 * head + attention)
