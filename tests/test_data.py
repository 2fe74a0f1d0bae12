"""Data sources: determinism, held-out sets, Markov loss floor, file windows, config errors."""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from stepscale.models.config import DataConfig, ModelConfig
from stepscale.models.data import DataSource, build_source, source_names, source_plugin
from stepscale.models.data.markov import MarkovSource, choose_successors
from stepscale.models.errors import ConfigError


def step_key(train_seed: int, step: int) -> jax.Array:
    """The trainer's per-step key."""
    return jax.random.fold_in(jax.random.fold_in(jax.random.key(train_seed), 1), step)


_JITTED: dict[int, tuple[DataSource, Callable[..., Any]]] = {}


def draw(src: DataSource, key: jax.Array, batch_size: int) -> dict[str, np.ndarray]:
    """A jitted device-side batch as numpy arrays (one jitted sampler per source)."""
    if id(src) not in _JITTED:
        _JITTED[id(src)] = (src, jax.jit(src.sample, static_argnums=2))
    arrays = {k: jnp.asarray(v) for k, v in src.device_arrays().items()}
    out = _JITTED[id(src)][1](arrays, key, batch_size)
    return {k: np.asarray(v) for k, v in out.items()}


def markov(**overrides: object) -> MarkovSource:
    """A Markov source built from the defaults plus ``overrides``."""
    src = build_source(DataConfig(name="markov", **overrides))  # type: ignore[arg-type]
    assert isinstance(src, MarkovSource)
    return src


def true_probs(src: MarkovSource) -> np.ndarray:
    """Dense P[context, token] recovered from the sampler's own tables."""
    p = np.diff(src.cumprobs.astype(np.float64), axis=1, prepend=0.0)
    dense = np.zeros((src.n_contexts, src.vocab))
    np.put_along_axis(dense, src.successors.astype(np.intp), p, axis=1)
    return dense


def token_losses(src: MarkovSource, tokens: np.ndarray) -> np.ndarray:
    """-log p of each target token under the true chain, [B, seq_len] (log V before k)."""
    dense = true_probs(src)
    k, v = src.order, src.vocab
    out = np.full((tokens.shape[0], tokens.shape[1] - 1), math.log(v))
    for t in range(k, tokens.shape[1]):
        ctx = np.zeros(tokens.shape[0], dtype=np.int64)
        for j in range(t - k, t):
            ctx = ctx * v + tokens[:, j]
        out[:, t - 1] = -np.log(dense[ctx, tokens[:, t]])
    return out


# ---------------------------------------------------------------- building


@pytest.mark.parametrize("name", source_names())
def test_build_every_source(name: str, tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    np.arange(4000, dtype=np.uint16).tofile(path)
    src = build_source(
        DataConfig(
            name=name,
            path=str(path) if name in ("tokens", "text") else "",
            seq_len=8,
            eval_examples=8,
            eval_batch=4,
        ),
        ModelConfig(dim=5),
    )
    batch = src.eval_set()
    assert all(v.shape[0] == 8 for v in batch.values())
    assert src.eval_set() is batch  # cached
    kind = {"teacher": "classify", "nqm": "nqm"}.get(name, "lm")
    assert src.info.kind == kind
    # what the plug-in declares without building: its examples are sequences (LM data)
    assert source_plugin(name).sequences == (kind == "lm")


def test_default_markov_is_cheap() -> None:
    t0 = time.perf_counter()
    src = markov(vocab_size=64, order=2, seq_len=1024)
    assert time.perf_counter() - t0 < 1.0
    assert src.position_losses.shape == (1024,)


# ---------------------------------------------------------------- markov


def test_markov_batch_is_deterministic_per_step() -> None:
    src = markov(vocab_size=16, seq_len=20)
    a, b, c = (draw(src, step_key(0, s), 32)["tokens"] for s in (3, 3, 4))
    assert a.shape == (32, 21) and a.dtype == np.int32
    assert ((a >= 0) & (a < 16)).all()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert not np.array_equal(a, draw(src, step_key(1, 3), 32)["tokens"])


def test_markov_tables_are_arguments_not_constants() -> None:
    a, b = markov(seed=1), markov(seed=2)
    assert not np.array_equal(a.successors, b.successors)
    key = step_key(0, 0)
    arrays_b = {k: jnp.asarray(v) for k, v in b.device_arrays().items()}
    fn = jax.jit(a.sample, static_argnums=2)  # a's program fed b's tables
    np.testing.assert_array_equal(
        np.asarray(fn(arrays_b, key, 8)["tokens"]), draw(b, key, 8)["tokens"]
    )


def test_markov_sample_inside_scan_matches_direct_call() -> None:
    src = markov(vocab_size=8, seq_len=10)
    arrays = {k: jnp.asarray(v) for k, v in src.device_arrays().items()}

    @jax.jit
    def run(arrays: dict[str, jax.Array]) -> jax.Array:
        def body(carry: None, step: jax.Array) -> tuple[None, jax.Array]:
            return carry, src.sample(arrays, step_key(0, step), 4)["tokens"]

        return lax.scan(body, None, jnp.arange(3))[1]

    scanned = np.asarray(run(arrays))
    for s in range(3):
        np.testing.assert_array_equal(scanned[s], draw(src, step_key(0, s), 4)["tokens"])


def test_markov_tokens_follow_allowed_successors() -> None:
    src = markov(vocab_size=12, order=2, branching=3, seq_len=40)
    tokens = draw(src, step_key(0, 0), 64)["tokens"]
    allowed = {(c, int(t)) for c in range(src.n_contexts) for t in src.successors[c]}
    for row in tokens:
        for t in range(2, len(row)):
            assert (int(row[t - 2]) * 12 + int(row[t - 1]), int(row[t])) in allowed
    assert all(len(set(r)) == 3 for r in src.successors.tolist())


def test_successors_are_distinct_in_both_regimes() -> None:
    rng = np.random.default_rng(0)
    for vocab, k in ((50, 4), (10, 9)):  # rejection sampling / partial sort
        succ = choose_successors(rng, 300, vocab, k)
        assert succ.shape == (300, k) and succ.min() >= 0 and succ.max() < vocab
        assert all(len(set(r)) == k for r in succ.tolist())


def test_markov_floor_matches_monte_carlo_bayes_loss() -> None:
    src = markov(vocab_size=16, order=2, branching=4, seq_len=32, concentration=0.5)
    tokens = draw(src, step_key(0, 0), 4096)["tokens"]
    losses = token_losses(src, tokens)
    assert np.isfinite(losses).all()  # every transition had non-zero probability
    assert losses.mean() == pytest.approx(src.info.loss_floor, rel=0.01)
    np.testing.assert_allclose(losses.mean(axis=0), src.position_losses, rtol=0.05)
    assert src.position_losses[0] == pytest.approx(math.log(16))
    assert src.position_losses[1] < math.log(4) + 1e-12


def test_markov_floor_is_exact_by_enumeration() -> None:
    src = markov(vocab_size=3, order=2, branching=2, seq_len=4)
    dense = true_probs(src)
    seqs = np.array(list(itertools.product(range(3), repeat=5)))
    prob = np.full(len(seqs), 1.0 / 9)
    for t in range(2, 5):
        prob *= dense[seqs[:, t - 2] * 3 + seqs[:, t - 1], seqs[:, t]]
    live = prob > 0
    losses = token_losses(src, seqs[live])
    exact = (prob[live, None] * losses).sum(axis=0)
    np.testing.assert_allclose(src.position_losses, exact, rtol=1e-12)
    assert src.position_losses[0] == pytest.approx(math.log(3), rel=1e-15)


def test_markov_order_three_floor_starts_at_log_v() -> None:
    src = markov(vocab_size=5, order=3, branching=2, seq_len=6)
    np.testing.assert_allclose(src.position_losses[:2], math.log(5))
    assert (src.position_losses[2:] <= math.log(2) + 1e-12).all()
    assert 0 < src.entropy_rate <= math.log(2)


def test_markov_eval_set_depends_only_on_data_config() -> None:
    a = markov(seq_len=16, eval_examples=32, eval_batch=8).eval_set()["tokens"]
    b = markov(seq_len=16, eval_examples=32, eval_batch=16).eval_set()["tokens"]
    c = markov(seq_len=16, eval_examples=32, eval_batch=8, seed=5).eval_set()["tokens"]
    assert a.shape == (32, 17) and isinstance(a, np.ndarray)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


# ---------------------------------------------------------------- teacher / nqm


def test_teacher_batches_and_floor() -> None:
    src = build_source(DataConfig(name="teacher", input_dim=6, n_classes=4))
    a, b = draw(src, step_key(0, 1), 64), draw(src, step_key(0, 1), 64)
    np.testing.assert_array_equal(a["y"], b["y"])
    assert a["x"].shape == (64, 6) and a["x"].dtype == np.float32
    assert a["y"].dtype == np.int32 and ((a["y"] >= 0) & (a["y"] < 4)).all()
    assert not np.array_equal(a["x"], draw(src, step_key(0, 2), 64)["x"])
    # the device sampler's labels have expected -log p(y|x) equal to the floor
    big = draw(src, step_key(0, 3), 40_000)
    w = {k: v.astype(np.float64) for k, v in src.device_arrays().items()}
    logits = np.tanh(big["x"] @ w["w1"] + w["b1"]) @ w["w2"]
    logp = logits - logits.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    nll = -logp[np.arange(len(logp)), big["y"]].mean()
    assert nll == pytest.approx(src.info.loss_floor, rel=0.02)
    assert 0 < src.info.loss_floor < math.log(4)


def test_teacher_and_nqm_eval_sets_depend_on_data_seed() -> None:
    for name in ("teacher", "nqm"):
        a = build_source(DataConfig(name=name, seed=0), ModelConfig(dim=3)).eval_set()
        b = build_source(
            DataConfig(name=name, seed=0, eval_batch=32), ModelConfig(dim=3)
        ).eval_set()
        c = build_source(DataConfig(name=name, seed=1), ModelConfig(dim=3)).eval_set()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
        first = next(iter(a))
        assert not np.array_equal(a[first], c[first])


def test_nqm_is_standard_normal() -> None:
    src = build_source(DataConfig(name="nqm"), ModelConfig(dim=50))
    assert src.info.input_dim == 50 and src.info.loss_floor == 0.0
    z = draw(src, step_key(0, 0), 2000)["z"]
    assert z.shape == (2000, 50) and z.dtype == np.float32
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01
    np.testing.assert_array_equal(z, draw(src, step_key(0, 0), 2000)["z"])


# ---------------------------------------------------------------- files


def token_file(tmp_path: Path, data: np.ndarray) -> str:
    """Write ``data`` raw to a temp file and return its path."""
    path = tmp_path / f"tokens.{data.dtype.name}"
    data.tofile(path)
    return str(path)


@pytest.mark.parametrize("dtype", ["uint16", "uint32"])
def test_token_windows_are_slices_and_splits_disjoint(tmp_path: Path, dtype: str) -> None:
    data = np.arange(10_000, dtype=dtype) * 3  # distinct: a token locates its position
    cfg = DataConfig(
        name="tokens",
        path=token_file(tmp_path, data),
        dtype=dtype,
        seq_len=15,
        heldout_frac=0.1,
        eval_examples=40,
        eval_batch=8,
    )
    src = build_source(cfg)
    assert src.info.vocab_size == int(data.max()) + 1 and src.info.loss_floor is None
    n_train = 9000
    batch = src.host_batch(7, 3, 256)["tokens"]
    assert batch.shape == (256, 16) and batch.dtype == np.int32
    starts = batch[:, 0] // 3
    np.testing.assert_array_equal(batch, data[starts[:, None] + np.arange(16)])
    assert (starts + 16 <= n_train).all()
    np.testing.assert_array_equal(batch, src.host_batch(7, 3, 256)["tokens"])
    assert not np.array_equal(batch, src.host_batch(7, 4, 256)["tokens"])
    assert not np.array_equal(batch, src.host_batch(8, 3, 256)["tokens"])
    ev = src.eval_set()["tokens"]
    np.testing.assert_array_equal(ev, data[n_train : n_train + 640].reshape(40, 16))
    # eval windows do not depend on the batch size or the seed of the run
    np.testing.assert_array_equal(
        ev,
        build_source(dataclasses.replace(cfg, global_batch=7, eval_batch=20)).eval_set()["tokens"],
    )


def test_text_source_reads_bytes(tmp_path: Path) -> None:
    path = tmp_path / "corpus.txt"
    text = "".join(f"line {i}: héllo wörld\n" for i in range(400)).encode()
    path.write_bytes(text)
    src = build_source(
        DataConfig(
            name="text", path=str(path), seq_len=31, eval_examples=4, eval_batch=2, dtype="uint32"
        )
    )  # dtype ignored for text
    assert src.info.vocab_size == 256
    n_train = int(len(text) * 0.95)
    for row in src.host_batch(0, 0, 64)["tokens"]:
        assert text[:n_train].find(bytes(row.astype(np.uint8))) >= 0
    ev = src.eval_set()["tokens"]
    assert bytes(ev.astype(np.uint8).ravel()) == text[n_train : n_train + 4 * 32]


# ---------------------------------------------------------------- errors


BAD_CONFIGS = [
    ({"name": "bogus"}, "data.name"),
    ({"seq_len": 0}, "data.seq_len"),
    ({"global_batch": -1}, "data.global_batch"),
    ({"max_microbatch": 0}, "data.max_microbatch"),
    ({"eval_examples": 0}, "data.eval_examples"),
    ({"eval_batch": 0}, "data.eval_batch"),
    ({"eval_examples": 100, "eval_batch": 64}, "data.eval_examples"),
    ({"seed": -1}, "data.seed"),
    ({"vocab_size": 1}, "data.vocab_size"),
    ({"vocab_size": 2.5}, "data.vocab_size"),
    ({"order": 0}, "data.order"),
    ({"vocab_size": 2048, "order": 3}, "data.order"),
    ({"branching": 0}, "data.branching"),
    ({"vocab_size": 64, "branching": 65}, "data.branching"),
    ({"vocab_size": 2048, "order": 2, "branching": 16}, "data.branching"),
    ({"concentration": 0.0}, "data.concentration"),
    ({"concentration": float("nan")}, "data.concentration"),
    ({"name": "teacher", "input_dim": 0}, "data.input_dim"),
    ({"name": "teacher", "n_classes": 1}, "data.n_classes"),
    ({"name": "teacher", "temperature": -1.0}, "data.temperature"),
    ({"name": "tokens", "dtype": "int8"}, "data.dtype"),
    ({"name": "tokens", "heldout_frac": 0.0}, "data.heldout_frac"),
    ({"name": "text", "heldout_frac": 1.0}, "data.heldout_frac"),
    ({"name": "tokens", "path": ""}, "data.path"),
    ({"name": "text", "path": "/nonexistent/file.txt"}, "data.path"),
]


@pytest.mark.parametrize(("overrides", "field"), BAD_CONFIGS)
def test_bad_config_raises_config_error(overrides: dict, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_source(DataConfig(**overrides))
    assert err.value.field == field


def test_unknown_source_message_lists_choices() -> None:
    with pytest.raises(
        ConfigError, match="choose one of markov, tokens, text, shakespeare_char, teacher, nqm"
    ):
        build_source(DataConfig(name="x"))


def test_bad_nqm_dim() -> None:
    with pytest.raises(ConfigError) as err:
        build_source(DataConfig(name="nqm"), ModelConfig(dim=0))
    assert err.value.field == "model.dim"


@pytest.mark.parametrize(
    ("content", "overrides", "field"),
    [
        (b"", {}, "data.path"),
        (b"\x01\x02\x03", {}, "data.path"),  # 3 bytes: not whole uint16 tokens
        (np.arange(30, dtype=np.uint16).tobytes(), {}, "data.path"),  # too short
        (np.arange(1000, dtype=np.uint16).tobytes(), {"eval_examples": 64}, "data.eval_examples"),
        (np.arange(10, dtype=np.uint32).tobytes(), {"dtype": "uint32"}, "data.path"),
    ],
)
def test_bad_token_file(tmp_path: Path, content: bytes, overrides: dict, field: str) -> None:
    path = tmp_path / "bad.bin"
    path.write_bytes(content)
    fields = {"seq_len": 15, "eval_examples": 2, "eval_batch": 1, **overrides}
    cfg = DataConfig(name="tokens", path=str(path), **fields)
    with pytest.raises(ConfigError) as err:
        build_source(cfg)
    assert err.value.field == field


def test_directory_is_not_a_token_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        build_source(DataConfig(name="tokens", path=str(tmp_path)))
    assert err.value.field == "data.path"


def test_device_and_host_methods_fail_on_the_wrong_side(tmp_path: Path) -> None:
    with pytest.raises(NotImplementedError):
        markov().host_batch(0, 0, 4)
    path = token_file(tmp_path, np.arange(5000, dtype=np.uint16))
    src = build_source(
        DataConfig(name="tokens", path=path, seq_len=8, eval_examples=8, eval_batch=8)
    )
    assert src.device_arrays() == {}
    with pytest.raises(NotImplementedError):
        src.sample({}, step_key(0, 0), 4)
