"""Tests of the networks: shapes, parameter counts, causality, training, precision,
the NQM's gradient statistics and config validation."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from stepscale.models.config import ModelConfig
from stepscale.models.data.base import DataInfo
from stepscale.models.errors import ConfigError
from stepscale.models.nets import (
    MODELS,
    PRESETS,
    build_model,
    count_params,
    flops_per_example,
    nqm_curvature,
    nqm_noise_trace,
    nqm_true_noise_scale,
    resolve,
)

LM = DataInfo(kind="lm", vocab_size=64, seq_len=64, tokens_per_example=64)
CLASSIFY = DataInfo(kind="classify", input_dim=16, n_classes=5)
NQM_INFO = DataInfo(kind="nqm", input_dim=100)
POS_EMBS = ("learned", "rotary")


def lm_batch(batch: int = 4, seq_len: int = 64, vocab: int = 64, seed: int = 0) -> dict:
    """Random tokens [batch, seq_len + 1]."""
    tokens = jax.random.randint(jax.random.key(seed), (batch, seq_len + 1), 0, vocab)
    return {"tokens": tokens.astype(jnp.int32)}


def classify_batch(batch: int = 32, seed: int = 0) -> dict:
    """Random inputs with labels from a fixed linear rule."""
    x = jax.random.normal(jax.random.key(seed), (batch, CLASSIFY.input_dim))
    y = jnp.argmax(x[:, : CLASSIFY.n_classes], axis=-1).astype(jnp.int32)
    return {"x": x, "y": y}


def n_params(model: nnx.Module) -> int:
    """Number of scalars in the model's Params."""
    return sum(leaf.size for leaf in jax.tree.leaves(nnx.state(model, nnx.Param)))


def jitted(model: nnx.Module, method: str = "__call__", **kwargs) -> Callable:
    """``model.method(x, **kwargs)`` compiled, through the trainer's split/merge form."""
    graphdef, params = nnx.split(model, nnx.Param)
    run = jax.jit(lambda p, x: getattr(nnx.merge(graphdef, p), method)(x, **kwargs))
    return lambda x: run(params, x)


def train_losses(model: nnx.Module, batch: dict, steps: int, lr: float) -> list[float]:
    """Adam on a fixed batch through the trainer's functional split/merge form."""
    graphdef, params = nnx.split(model, nnx.Param)
    opt = optax.adam(lr)
    opt_state = opt.init(params)

    @jax.jit
    def step(params, opt_state):
        loss, grads = jax.value_and_grad(lambda p: nnx.merge(graphdef, p).loss(batch))(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    losses = []
    for _ in range(steps):
        params, opt_state, loss = step(params, opt_state)
        losses.append(float(loss))
    return losses


# ---------------------------------------------------------------- parameter counts


@pytest.mark.parametrize(
    ("cfg", "info"),
    [
        (ModelConfig(), LM),
        (ModelConfig(size="small"), LM),
        (ModelConfig(pos_emb="rotary"), LM),
        (ModelConfig(tie_embeddings=True), LM),
        (ModelConfig(tie_embeddings=True, bias=False), LM),
        (ModelConfig(pos_emb="rotary", tie_embeddings=True, n_layers=1), LM),
        (ModelConfig(d_model=48, n_heads=3, n_layers=3, mlp_ratio=2.5, vocab_size=80), LM),
        (ModelConfig(max_seq_len=100, param_dtype="bfloat16"), LM),
        (ModelConfig(name="mlp"), CLASSIFY),
        (ModelConfig(name="mlp", size="small"), CLASSIFY),
        (ModelConfig(name="mlp", hidden=7, depth=0), CLASSIFY),
        (ModelConfig(name="nqm"), NQM_INFO),
        (ModelConfig(name="nqm", dim=37), DataInfo(kind="nqm")),
    ],
)
def test_count_params_matches_built_model(cfg: ModelConfig, info: DataInfo) -> None:
    model = nnx.eval_shape(lambda: build_model(cfg, info, nnx.Rngs(0)))  # no allocation
    assert count_params(cfg, info) == n_params(model)


def test_only_params_in_state() -> None:
    for cfg, info in [
        (ModelConfig(pos_emb="rotary"), LM),
        (ModelConfig(name="mlp"), CLASSIFY),
        (ModelConfig(name="nqm"), NQM_INFO),
    ]:
        model = nnx.eval_shape(lambda cfg=cfg, info=info: build_model(cfg, info, nnx.Rngs(0)))
        _, state = nnx.split(model)
        params = nnx.state(model, nnx.Param)
        assert jax.tree.structure(state) == jax.tree.structure(params)


def test_gpt_small_preset_size() -> None:
    n = count_params(ModelConfig(size="small"), dataclasses.replace(LM, seq_len=128))
    assert 350_000 <= n <= 700_000


def test_gpt_base_tied_matches_gpt2_small() -> None:
    info = DataInfo(kind="lm", vocab_size=50257, seq_len=1024, tokens_per_example=1024)
    assert count_params(ModelConfig(size="base", tie_embeddings=True), info) == 124_439_808


def test_bias_free_tied_gpt_matches_nanogpts_shakespeare_char_model() -> None:
    """nanoGPT's CPU Tiny Shakespeare model (4 x 128, 65 characters, context 64, bias=False)
    has 0.80M parameters without its position table: 795,904."""
    from stepscale.models.nets.gpt import gpt_param_counts
    from stepscale.models.nets.presets import resolve

    info = DataInfo(kind="lm", vocab_size=65, seq_len=64, tokens_per_example=64)
    cfg = ModelConfig(n_layers=4, d_model=128, n_heads=4, tie_embeddings=True, bias=False)
    counts = gpt_param_counts(resolve(cfg, info))
    assert sum(counts.values()) - counts["position"] == 795_904
    model = nnx.eval_shape(lambda: build_model(cfg, info, nnx.Rngs(0)))
    paths = jax.tree_util.tree_leaves_with_path(nnx.state(model))
    assert paths and not any("bias" in jax.tree_util.keystr(path) for path, _ in paths)


def test_every_preset_resolves() -> None:
    infos = {"gpt": LM, "mlp": CLASSIFY, "nqm": NQM_INFO}
    assert set(PRESETS) == set(MODELS)
    for name, sizes in PRESETS.items():
        for size in sizes:
            cfg = ModelConfig(name=name, size=size)
            assert resolve(cfg, infos[name]).size == size
            assert count_params(cfg, infos[name]) > 0


def test_explicit_fields_override_preset() -> None:
    spec = resolve(ModelConfig(size="small", n_layers=5, vocab_size=70), LM)
    assert (spec.n_layers, spec.d_model, spec.vocab_size, spec.max_seq_len) == (5, 128, 70, 64)
    assert spec.mlp_hidden == 4 * 128 and spec.head_dim == 32


# ---------------------------------------------------------------- flops


def test_flops_per_example() -> None:
    cfg = ModelConfig(n_layers=2, d_model=64, n_heads=4)
    d, layers, seq, vocab = 64, 2, LM.seq_len, LM.vocab_size
    non_embedding = layers * (12 * d * d + 13 * d) + 2 * d
    per_token = 6 * non_embedding + 6 * d * vocab + 12 * layers * seq * d
    assert flops_per_example(cfg, LM) == pytest.approx(seq * per_token)
    mlp = ModelConfig(name="mlp")
    assert flops_per_example(mlp, CLASSIFY) == 6 * count_params(mlp, CLASSIFY)
    assert flops_per_example(ModelConfig(name="nqm"), NQM_INFO) == pytest.approx(600.0)


# ---------------------------------------------------------------- gpt behaviour


@pytest.fixture(scope="module")
def tiny_gpts() -> dict[str, nnx.Module]:
    """The tiny GPT with each kind of positions, built once."""
    return {pos: build_model(ModelConfig(pos_emb=pos), LM, nnx.Rngs(0)) for pos in POS_EMBS}


@pytest.mark.parametrize("pos_emb", POS_EMBS)
def test_gpt_is_causal_and_uses_positions(tiny_gpts: dict, pos_emb: str) -> None:
    logits = jitted(tiny_gpts[pos_emb])
    tokens = lm_batch(batch=2)["tokens"][:, :-1]
    t = 40
    changed = tokens.at[:, t].set((tokens[:, t] + 1) % 64)
    before, after = logits(tokens), logits(changed)
    assert before.shape == (2, 64, 64) and before.dtype == jnp.float32
    np.testing.assert_allclose(before[:, :t], after[:, :t], atol=1e-6)
    assert not np.allclose(before[:, t:], after[:, t:])
    # Without positions attention is invariant to permuting the context: swapping two
    # earlier (distinct) tokens would leave later logits unchanged.
    tokens = tokens.at[:, 3].set(1).at[:, 5].set(2)
    swapped = tokens.at[:, 3].set(2).at[:, 5].set(1)
    assert not np.allclose(logits(tokens)[:, 20], logits(swapped)[:, 20], atol=1e-4)


@pytest.mark.parametrize("overrides", [{}, {"pos_emb": "rotary", "tie_embeddings": True}])
def test_gpt_tiny_trains(overrides: dict) -> None:
    model = build_model(ModelConfig(**overrides), LM, nnx.Rngs(0))
    losses = train_losses(model, lm_batch(batch=8), steps=30, lr=3e-3)
    assert losses[0] == pytest.approx(np.log(64), abs=0.3)  # near-uniform at init
    assert losses[-1] < losses[0] - 0.5


def test_gpt_bfloat16(tiny_gpts: dict) -> None:
    batch = lm_batch(batch=2, seq_len=32)
    loss32 = float(jitted(tiny_gpts["learned"], "loss")(batch))
    mixed = build_model(ModelConfig(dtype="bfloat16"), LM, nnx.Rngs(0))
    graphdef, params = nnx.split(mixed, nnx.Param)
    loss, grads = jax.jit(jax.value_and_grad(lambda p: nnx.merge(graphdef, p).loss(batch)))(params)
    assert loss.dtype == jnp.float32 and float(loss) == pytest.approx(loss32, abs=0.05)
    assert all(g.dtype == jnp.float32 and jnp.isfinite(g).all() for g in jax.tree.leaves(grads))
    low = build_model(ModelConfig(dtype="bfloat16", param_dtype="bfloat16"), LM, nnx.Rngs(0))
    assert all(p.dtype == jnp.bfloat16 for p in jax.tree.leaves(nnx.state(low, nnx.Param)))
    assert float(jitted(low, "loss")(batch)) == pytest.approx(loss32, abs=0.1)


def test_gpt_positions_average_first_targets(tiny_gpts: dict) -> None:
    model = tiny_gpts["rotary"]
    batch = lm_batch(seq_len=20)  # shorter than max_seq_len is fine
    tokens = batch["tokens"]
    per_position = optax.softmax_cross_entropy_with_integer_labels(
        jitted(model)(tokens[:, :-1]), tokens[:, 1:]
    )
    n = 7
    assert float(jitted(model, "loss", positions=n)(batch)) == pytest.approx(
        float(per_position[:, :n].mean()), rel=1e-5
    )
    assert float(jitted(model, "loss")(batch)) == pytest.approx(
        float(per_position.mean()), rel=1e-5
    )
    with pytest.raises(ConfigError) as err:
        model.loss(batch, positions=21)
    assert err.value.field == "train.eval_positions"


def test_init_is_deterministic_and_gpt2_style() -> None:
    a = nnx.state(build_model(ModelConfig(), LM, nnx.Rngs(3)), nnx.Param)
    b = nnx.state(build_model(ModelConfig(), LM, nnx.Rngs(3)), nnx.Param)
    c = nnx.state(build_model(ModelConfig(), LM, nnx.Rngs(4)), nnx.Param)
    jax.tree.map(np.testing.assert_array_equal, a, b)
    assert not np.array_equal(a["wte"][...], c["wte"][...])
    assert float(jnp.std(a["wte"][...])) == pytest.approx(0.02, rel=0.1)
    residual = a["blocks"][0]["mlp"]["out"][...]  # scaled by 1/sqrt(2 n_layers) = 1/2
    assert float(jnp.std(residual)) == pytest.approx(0.01, rel=0.1)


# ---------------------------------------------------------------- mlp


def test_mlp_trains() -> None:
    model = build_model(ModelConfig(name="mlp"), CLASSIFY, nnx.Rngs(0))
    batch = classify_batch()
    assert jitted(model)(batch["x"]).shape == (32, CLASSIFY.n_classes)
    losses = train_losses(model, batch, steps=30, lr=1e-2)
    assert losses[-1] < 0.5 * losses[0]


# ---------------------------------------------------------------- nqm


def test_nqm_losses() -> None:
    cfg = ModelConfig(name="nqm", dim=10, curvature_power=1.5, init_scale=2.0)
    model = build_model(cfg, DataInfo(kind="nqm", input_dim=10), nnx.Rngs(0))
    h = nqm_curvature(cfg)
    expected = 0.5 * np.sum(h * 4.0)
    z = jax.random.normal(jax.random.key(0), (8, 10))
    eval_loss = jitted(model, "loss", train=False)({"z": z})
    assert float(eval_loss) == pytest.approx(expected, rel=1e-6)
    noise = np.asarray(z) @ (np.sqrt(h) * 2.0)
    train_loss = jitted(model, "loss")({"z": z})
    assert float(train_loss) == pytest.approx(expected + noise.mean(), rel=1e-5)
    np.testing.assert_array_equal(model.theta[...], np.full(10, 2.0, np.float32))


def test_nqm_gradient_statistics() -> None:
    cfg = ModelConfig(name="nqm", noise_scale=2.0, curvature_power=1.0)
    model = build_model(cfg, NQM_INFO, nnx.Rngs(0))
    graphdef, params = nnx.split(model, nnx.Param)
    n = 50_000
    z = jax.random.normal(jax.random.key(1), (n, 1, cfg.dim))

    def grad_one(z_b):
        grads = jax.grad(lambda p: nnx.merge(graphdef, p).loss({"z": z_b}))(params)
        return grads["theta"][...]

    grads = np.asarray(jax.jit(jax.vmap(grad_one))(z), dtype=np.float64)
    h = nqm_curvature(cfg)
    true_grad = h * cfg.init_scale
    mean = grads.mean(axis=0)
    assert np.linalg.norm(mean - true_grad) / np.linalg.norm(true_grad) < 0.03
    trace = grads.var(axis=0, ddof=1).sum()
    assert trace == pytest.approx(nqm_noise_trace(cfg), rel=0.03)
    assert nqm_noise_trace(cfg) == pytest.approx(2.0 * np.sum(1.0 / np.arange(1, 101)))
    b_simple = nqm_true_noise_scale(cfg, np.ones(cfg.dim))
    assert b_simple == pytest.approx(nqm_noise_trace(cfg) / np.sum(h**2))
    assert nqm_true_noise_scale(cfg, 2 * np.ones(cfg.dim)) == pytest.approx(b_simple / 4)


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("cfg", "info", "field"),
    [
        (ModelConfig(name="resnet"), LM, "model.name"),
        (ModelConfig(size="huge"), LM, "model.size"),
        (ModelConfig(name="nqm", size="small"), NQM_INFO, "model.size"),
        (ModelConfig(name="gpt"), CLASSIFY, "model.name"),
        (ModelConfig(name="mlp"), LM, "model.name"),
        (ModelConfig(name="nqm"), CLASSIFY, "model.name"),
        (ModelConfig(n_layers=0), LM, "model.n_layers"),
        (ModelConfig(d_model=-4), LM, "model.d_model"),
        (ModelConfig(n_heads=0), LM, "model.n_heads"),
        (ModelConfig(mlp_ratio=0.0), LM, "model.mlp_ratio"),
        (ModelConfig(d_model=66, n_heads=4), LM, "model.d_model"),
        (ModelConfig(d_model=60, n_heads=4, pos_emb="rotary"), LM, "model.n_heads"),
        (ModelConfig(max_seq_len=32), LM, "data.seq_len"),
        (ModelConfig(vocab_size=32), LM, "model.vocab_size"),
        (ModelConfig(dtype="float64"), LM, "model.dtype"),
        (ModelConfig(param_dtype="int8"), LM, "model.param_dtype"),
        (ModelConfig(pos_emb="alibi"), LM, "model.pos_emb"),
        (ModelConfig(name="mlp", hidden=0), CLASSIFY, "model.hidden"),
        (ModelConfig(name="mlp", depth=-1), CLASSIFY, "model.depth"),
        (ModelConfig(name="nqm", dim=0), DataInfo(kind="nqm"), "model.dim"),
        (ModelConfig(name="nqm", noise_scale=-1.0), NQM_INFO, "model.noise_scale"),
        (ModelConfig(name="nqm", dim=50), NQM_INFO, "model.dim"),
    ],
)
def test_config_errors(cfg: ModelConfig, info: DataInfo, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_model(cfg, info, nnx.Rngs(0))
    assert err.value.field == field
    with pytest.raises(ConfigError):
        count_params(cfg, info)


def test_error_lists_allowed_values() -> None:
    with pytest.raises(ConfigError, match="tiny, small, base, medium, large"):
        resolve(ModelConfig(size="xl"), LM)
    with pytest.raises(ConfigError, match="gpt, mlp, nqm"):
        resolve(ModelConfig(name="cnn"), LM)
