"""Sparse random Markov chains of order k: a synthetic language with an exact loss floor.

Each context (the k previous tokens, read as a base-V number) has ``branching`` distinct
successor tokens, chosen at random from the data seed, with probabilities drawn from a
symmetric Dirichlet(concentration). A sequence of ``seq_len + 1`` tokens starts with k
i.i.d. uniform tokens; every later token is drawn from the chain given the previous k.

Registered as ``data.name: markov`` (`SOURCE`): its examples are sequences.
"""

from __future__ import annotations

import math
from functools import cached_property

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from scipy import sparse

from stepscale.models.checks import int_at_least, positive_float
from stepscale.models.config import DataConfig, ModelConfig
from stepscale.models.data.base import Batch, DataInfo
from stepscale.models.data.registry import SourcePlugin
from stepscale.models.errors import ConfigError

# Propagating the context marginal stops once one step moves it by less than this (L1);
# the transition is L1-non-expansive, so later marginals stay within steps * tol of it.
_CONVERGED_L1 = 1e-13
_ENTROPY_RATE_STEPS = 10_000
MAX_CONTEXTS = 1 << 22  # vocab_size ** order
MAX_TABLE = 1 << 25  # vocab_size ** order * branching entries per Markov table


def choose_successors(rng: np.random.Generator, n_ctx: int, vocab: int, k: int) -> np.ndarray:
    """``k`` distinct tokens out of ``vocab`` for each of ``n_ctx`` contexts, int32 [n_ctx, k]."""
    out = np.empty((n_ctx, k), dtype=np.int32)
    # Rejection (draw with replacement, redraw rows with a repeat) accepts a row with
    # probability >= ~e^-1 when k^2 <= 2V; otherwise a partial sort of random keys is cheap.
    rejection = k * k <= 2 * vocab
    chunk = max(1, (1 << 22) // (k if rejection else vocab))
    for lo in range(0, n_ctx, chunk):
        rows = min(chunk, n_ctx - lo)
        if rejection:
            out[lo : lo + rows] = _distinct_by_rejection(rng, rows, vocab, k)
        else:
            keys = rng.random((rows, vocab))
            out[lo : lo + rows] = np.argpartition(keys, k - 1, axis=1)[:, :k]
    return out


def _distinct_by_rejection(rng: np.random.Generator, rows: int, vocab: int, k: int) -> np.ndarray:
    """Rows of ``k`` distinct tokens: redraw every row that contains a repeated token."""
    out = rng.integers(0, vocab, size=(rows, k), dtype=np.int32)
    bad = np.arange(rows)
    while True:
        srt = np.sort(out[bad], axis=1)
        bad = bad[(srt[:, 1:] == srt[:, :-1]).any(axis=1)]
        if bad.size == 0:
            return out
        out[bad] = rng.integers(0, vocab, size=(bad.size, k), dtype=np.int32)


class MarkovSource:
    """Device-side LM source: sequences from a seeded sparse order-k Markov chain.

    Attributes (numpy): ``successors`` int32 [V^k, branching], ``cumprobs`` float32
    [V^k, branching] (last column exactly 1), ``probs`` float64 [V^k, branching] (the
    probabilities the float32 ``cumprobs`` actually encode), ``context_entropy`` float64
    [V^k] and ``position_losses`` float64 [seq_len], the Bayes-optimal expected loss of
    each predicted position; ``info.loss_floor`` is their mean. Build with
    ``models.data.build_source`` (which validates the config).
    """

    device_side = True

    def __init__(self, cfg: DataConfig) -> None:
        self.vocab = cfg.vocab_size
        self.order = cfg.order
        self.seq_len = cfg.seq_len
        self.n_contexts = self.vocab**self.order
        self._seed = cfg.seed
        self._eval_examples = cfg.eval_examples
        self._eval: Batch | None = None
        rng = np.random.default_rng([cfg.seed, 1])
        self.successors = choose_successors(rng, self.n_contexts, self.vocab, cfg.branching)
        raw = rng.dirichlet(np.full(cfg.branching, cfg.concentration), size=self.n_contexts)
        cum = np.cumsum(raw, axis=1).astype(np.float32)
        cum[:, -1] = 1.0
        self.cumprobs = cum
        self.probs = np.diff(cum.astype(np.float64), axis=1, prepend=0.0)
        self.context_entropy = _entropy(self.probs)
        self.position_losses = self._position_losses()
        self.info = DataInfo(
            kind="lm",
            vocab_size=self.vocab,
            seq_len=self.seq_len,
            loss_floor=float(self.position_losses.mean()),
            tokens_per_example=self.seq_len,
            baseline_loss=math.log(self.vocab),
            baseline="log(vocabulary): the uniform prediction",
        )

    @cached_property
    def _transition(self) -> sparse.csc_matrix:
        """Sparse [next context, context] transition matrix of the k-tuples (float64)."""
        n, branching = self.probs.shape
        keep = self.vocab ** (self.order - 1)
        ctx = np.arange(n, dtype=np.int64)[:, None]
        nxt = (ctx % keep) * self.vocab + self.successors
        # column c holds its `branching` successors: CSC needs no sorting
        indptr = np.arange(0, n * branching + 1, branching, dtype=np.int64)
        return sparse.csc_matrix((self.probs.ravel(), nxt.ravel(), indptr), shape=(n, n))

    def _propagate(self, mu: np.ndarray) -> np.ndarray:
        """The marginal of the next k-tuple given the marginal ``mu`` of the current one."""
        return self._transition @ mu

    def _position_losses(self) -> np.ndarray:
        """Expected Bayes loss at target positions 1..seq_len (exact, float64)."""
        losses = np.full(self.seq_len, math.log(self.vocab))
        mu = np.full(self.n_contexts, 1.0 / self.n_contexts)
        # target position i >= k is predicted from the k-tuple starting at i - k
        for i in range(self.order, self.seq_len + 1):
            losses[i - 1] = mu @ self.context_entropy
            if i == self.seq_len:
                break
            nxt = self._propagate(mu)
            if np.abs(nxt - mu).sum() < _CONVERGED_L1:
                losses[i:] = nxt @ self.context_entropy
                break
            mu = nxt
        return losses

    @cached_property
    def entropy_rate(self) -> float:
        """Per-token entropy (nats) in the long run, starting from uniform contexts.

        The expected Bayes loss far from the start: the marginal is propagated until it
        stops moving (at most 10k steps, e.g. for a periodic chain, whose Cesàro average
        is then not taken).
        """
        mu = np.full(self.n_contexts, 1.0 / self.n_contexts)
        for _ in range(_ENTROPY_RATE_STEPS):
            nxt = self._propagate(mu)
            done = np.abs(nxt - mu).sum() < _CONVERGED_L1
            mu = nxt
            if done:
                break
        return float(mu @ self.context_entropy)

    def device_arrays(self) -> dict[str, np.ndarray]:
        """The chain's tables: ``successors`` and ``cumprobs``."""
        return {"successors": self.successors, "cumprobs": self.cumprobs}

    def sample(self, arrays: dict[str, jax.Array], key: jax.Array, batch_size: int) -> Batch:
        """``batch_size`` sequences of ``seq_len + 1`` tokens (int32), pure and jittable."""
        return sample_chain(
            arrays, key, batch_size, vocab=self.vocab, order=self.order, seq_len=self.seq_len
        )

    def host_batch(self, seed: int, step: int, batch_size: int, rows: slice | None = None) -> Batch:
        """Not available: a device-side source is sampled inside the compiled step."""
        raise NotImplementedError("MarkovSource is device-side; use sample()")

    def eval_set(self) -> Batch:
        """``eval_examples`` sequences drawn with a key derived from the data seed only."""
        if self._eval is None:
            key = jax.random.fold_in(jax.random.key(self._seed), 2)
            arrays = {k: jnp.asarray(v) for k, v in self.device_arrays().items()}
            batch = _sample_chain_jit(
                arrays,
                key,
                self._eval_examples,
                vocab=self.vocab,
                order=self.order,
                seq_len=self.seq_len,
            )
            self._eval = {k: np.asarray(v) for k, v in batch.items()}
        return self._eval


def sample_chain(
    arrays: dict[str, jax.Array],
    key: jax.Array,
    batch_size: int,
    *,
    vocab: int,
    order: int,
    seq_len: int,
) -> Batch:
    """Sequences of the chain whose tables are ``arrays``; everything but them is static."""
    succ, cum = arrays["successors"], arrays["cumprobs"]
    n_init = min(order, seq_len + 1)
    key_init, key_walk = jax.random.split(key)
    init = jax.random.randint(key_init, (batch_size, n_init), 0, vocab, dtype=jnp.int32)
    n_walk = seq_len + 1 - n_init
    if n_walk == 0:
        return {"tokens": init}
    ctx = init[:, 0]
    for j in range(1, order):
        ctx = ctx * vocab + init[:, j]
    keep = vocab ** (order - 1)
    u = jax.random.uniform(key_walk, (n_walk, batch_size), dtype=jnp.float32)

    def step(ctx: jax.Array, u_t: jax.Array) -> tuple[jax.Array, jax.Array]:
        slot = jnp.sum(u_t[:, None] >= cum[ctx, :-1], axis=1, dtype=jnp.int32)
        tok = jnp.take_along_axis(succ[ctx], slot[:, None], axis=1)[:, 0]
        return (ctx % keep) * vocab + tok, tok

    _, walk = lax.scan(step, ctx, u)
    return {"tokens": jnp.concatenate([init, walk.T], axis=1)}


# one compiled program per static shape, shared by every source (e.g. for eval sets)
_sample_chain_jit = jax.jit(
    sample_chain, static_argnames=("batch_size", "vocab", "order", "seq_len")
)


def _entropy(probs: np.ndarray) -> np.ndarray:
    """Shannon entropy (nats) of each row of ``probs``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(probs > 0, -probs * np.log(probs), 0.0)
    return terms.sum(axis=1)


def check(cfg: DataConfig) -> None:
    """Chain shape: V >= 2, order >= 1, V^order and the tables bounded, 1 <= branching <= V."""
    int_at_least("data.vocab_size", cfg.vocab_size, 2)
    int_at_least("data.order", cfg.order, 1)
    n_ctx = cfg.vocab_size**cfg.order
    if n_ctx > MAX_CONTEXTS:
        raise ConfigError(
            "data.order",
            f"vocab_size ** order = {cfg.vocab_size}**{cfg.order} = {n_ctx} contexts exceeds "
            f"2**22; lower data.order or data.vocab_size",
        )
    int_at_least("data.branching", cfg.branching, 1)
    if cfg.branching > cfg.vocab_size:
        raise ConfigError(
            "data.branching",
            f"{cfg.branching} successors per context but only {cfg.vocab_size} tokens; "
            f"choose 1 <= data.branching <= data.vocab_size",
        )
    if n_ctx * cfg.branching > MAX_TABLE:
        raise ConfigError(
            "data.branching",
            f"{n_ctx} contexts x {cfg.branching} successors exceeds 2**25 table entries; "
            "lower data.branching, data.order or data.vocab_size",
        )
    positive_float("data.concentration", cfg.concentration)


def build(cfg: DataConfig, model: ModelConfig) -> MarkovSource:
    """The chain of a checked config (the model plays no part)."""
    return MarkovSource(cfg)


SOURCE = SourcePlugin("markov", sequences=True, check=check, build=build)
