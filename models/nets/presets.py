"""Size presets and `resolve`: turn a `ModelConfig` plus the data's `DataInfo` into the
final, validated dimensions of a network (`ResolvedModel`) without allocating anything.

GPT presets (parameter counts with the default untied head and learned positions):

============  ========  ========  =======  ===========================================
preset        n_layers  d_model   n_heads  parameters
============  ========  ========  =======  ===========================================
``tiny``      2         64        4        ~0.11M at vocab 64, seq 64 (tests, CPU demos)
``small``     2         128       4        ~0.43M at vocab 64, seq 128 (CPU studies)
``base``      12        768       12       ~85M non-embedding (GPT-2 small shape)
``medium``    24        1024      16       ~302M non-embedding (GPT-2 medium shape)
``large``     36        1280      20       ~708M non-embedding (GPT-2 large shape)
============  ========  ========  =======  ===========================================

All GPT presets use ``mlp_ratio = 4``. MLP presets: ``tiny`` (hidden 64, depth 2),
``small`` (hidden 256, depth 3), ``base`` (hidden 1024, depth 4). The NQM has a single
preset ``tiny`` with no entries: its dimensions are the ``dim``/``curvature_power``/
``noise_scale``/``init_scale`` fields of the config, which always carry a value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stepscale.models.checks import positive
from stepscale.models.config import ModelConfig
from stepscale.models.data.base import DataInfo
from stepscale.models.errors import ConfigError

MODELS = ("gpt", "mlp", "nqm")
DTYPES = ("float32", "bfloat16", "float16")
POS_EMBS = ("learned", "rotary")
KINDS = {"gpt": "lm", "mlp": "classify", "nqm": "nqm"}

_GPT_RATIO = 4.0
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "gpt": {
        "tiny": {"n_layers": 2, "d_model": 64, "n_heads": 4, "mlp_ratio": _GPT_RATIO},
        "small": {"n_layers": 2, "d_model": 128, "n_heads": 4, "mlp_ratio": _GPT_RATIO},
        "base": {"n_layers": 12, "d_model": 768, "n_heads": 12, "mlp_ratio": _GPT_RATIO},
        "medium": {"n_layers": 24, "d_model": 1024, "n_heads": 16, "mlp_ratio": _GPT_RATIO},
        "large": {"n_layers": 36, "d_model": 1280, "n_heads": 20, "mlp_ratio": _GPT_RATIO},
    },
    "mlp": {
        "tiny": {"hidden": 64, "depth": 2},
        "small": {"hidden": 256, "depth": 3},
        "base": {"hidden": 1024, "depth": 4},
    },
    "nqm": {"tiny": {}},
}


@dataclass(frozen=True)
class ResolvedModel:
    """Every final dimension of one network; fields that do not apply to it are None."""

    name: str
    size: str
    param_dtype: str
    dtype: str
    # gpt
    n_layers: int | None = None
    d_model: int | None = None
    n_heads: int | None = None
    head_dim: int | None = None
    mlp_hidden: int | None = None
    vocab_size: int | None = None
    max_seq_len: int | None = None
    pos_emb: str | None = None
    tie_embeddings: bool | None = None
    bias: bool | None = None
    # mlp
    input_dim: int | None = None
    hidden: int | None = None
    depth: int | None = None
    n_classes: int | None = None
    # nqm
    dim: int | None = None
    curvature_power: float | None = None
    noise_scale: float | None = None
    init_scale: float | None = None


def resolve(cfg: ModelConfig, info: DataInfo) -> ResolvedModel:
    """Apply the preset named by ``cfg.size``, let explicit fields win, fill data-derived
    sizes from ``info`` and validate the result (raising `ConfigError`)."""
    if cfg.name not in MODELS:
        raise ConfigError("model.name", f"unknown model {cfg.name!r}; allowed: {', '.join(MODELS)}")
    sizes = PRESETS[cfg.name]
    if cfg.size not in sizes:
        raise ConfigError(
            "model.size",
            f"unknown size {cfg.size!r} for model {cfg.name!r}; allowed: {', '.join(sizes)}",
        )
    kind = KINDS[cfg.name]
    if info.kind != kind:
        raise ConfigError(
            "model.name",
            f"model {cfg.name!r} needs a data source of kind {kind!r}, "
            f"but the data source gives kind {info.kind!r}",
        )
    for key in ("param_dtype", "dtype"):
        value = getattr(cfg, key)
        if value not in DTYPES:
            raise ConfigError(
                f"model.{key}", f"unknown dtype {value!r}; allowed: {', '.join(DTYPES)}"
            )
    preset = sizes[cfg.size]
    resolver = {"gpt": _resolve_gpt, "mlp": _resolve_mlp, "nqm": _resolve_nqm}[cfg.name]
    return resolver(cfg, info, preset)


def _pick(cfg: ModelConfig, preset: dict[str, Any], key: str) -> Any:
    """The explicit config value if set, else the preset's."""
    value = getattr(cfg, key)
    return preset.get(key) if value is None else value


def _resolve_gpt(cfg: ModelConfig, info: DataInfo, preset: dict[str, Any]) -> ResolvedModel:
    """Dimensions of the transformer LM."""
    n_layers, d_model, n_heads, mlp_ratio = (
        _pick(cfg, preset, k) for k in ("n_layers", "d_model", "n_heads", "mlp_ratio")
    )
    vocab = cfg.vocab_size if cfg.vocab_size is not None else info.vocab_size
    max_seq = cfg.max_seq_len if cfg.max_seq_len is not None else info.seq_len
    for key, value in (
        ("n_layers", n_layers),
        ("d_model", d_model),
        ("n_heads", n_heads),
        ("mlp_ratio", mlp_ratio),
        ("vocab_size", vocab),
        ("max_seq_len", max_seq),
    ):
        positive(f"model.{key}", value)
    if d_model % n_heads:
        raise ConfigError(
            "model.d_model", f"d_model={d_model} is not divisible by n_heads={n_heads}"
        )
    head_dim = d_model // n_heads
    mlp_hidden = round(mlp_ratio * d_model)
    positive("model.mlp_ratio", mlp_hidden, "mlp_ratio * d_model must round to a positive width")
    if cfg.pos_emb not in POS_EMBS:
        raise ConfigError(
            "model.pos_emb", f"unknown pos_emb {cfg.pos_emb!r}; allowed: {', '.join(POS_EMBS)}"
        )
    if cfg.pos_emb == "rotary" and head_dim % 2:
        raise ConfigError(
            "model.n_heads",
            f"rotary embeddings need an even head dim, d_model/n_heads = {head_dim}",
        )
    if info.seq_len is not None and info.seq_len > max_seq:
        raise ConfigError(
            "data.seq_len",
            f"seq_len={info.seq_len} is longer than model.max_seq_len={max_seq}",
        )
    if info.vocab_size is not None and vocab < info.vocab_size:
        raise ConfigError(
            "model.vocab_size",
            f"vocab_size={vocab} is smaller than the data's vocabulary of {info.vocab_size}",
        )
    return ResolvedModel(
        name="gpt",
        size=cfg.size,
        param_dtype=cfg.param_dtype,
        dtype=cfg.dtype,
        n_layers=n_layers,
        d_model=d_model,
        n_heads=n_heads,
        head_dim=head_dim,
        mlp_hidden=mlp_hidden,
        vocab_size=vocab,
        max_seq_len=max_seq,
        pos_emb=cfg.pos_emb,
        tie_embeddings=cfg.tie_embeddings,
        bias=bool(cfg.bias),
    )


def _resolve_mlp(cfg: ModelConfig, info: DataInfo, preset: dict[str, Any]) -> ResolvedModel:
    """Dimensions of the classifier; ``depth = 0`` is a linear (softmax regression) model."""
    hidden, depth = _pick(cfg, preset, "hidden"), _pick(cfg, preset, "depth")
    positive("model.hidden", hidden)
    if depth is None or depth < 0:
        raise ConfigError("model.depth", f"must be >= 0, got {depth!r}")
    if not info.input_dim or not info.n_classes or info.n_classes < 2:
        raise ConfigError(
            "data.name",
            f"a classify source must define input_dim >= 1 and n_classes >= 2, "
            f"got input_dim={info.input_dim}, n_classes={info.n_classes}",
        )
    return ResolvedModel(
        name="mlp",
        size=cfg.size,
        param_dtype=cfg.param_dtype,
        dtype=cfg.dtype,
        input_dim=info.input_dim,
        hidden=hidden,
        depth=depth,
        n_classes=info.n_classes,
    )


def _resolve_nqm(cfg: ModelConfig, info: DataInfo, preset: dict[str, Any]) -> ResolvedModel:
    """Dimensions of the noisy quadratic model."""
    positive("model.dim", cfg.dim)
    if cfg.noise_scale < 0:
        raise ConfigError("model.noise_scale", f"must be >= 0, got {cfg.noise_scale!r}")
    if info.input_dim is not None and info.input_dim != cfg.dim:
        raise ConfigError(
            "model.dim",
            f"dim={cfg.dim} differs from the data's noise dimension {info.input_dim}",
        )
    return ResolvedModel(
        name="nqm",
        size=cfg.size,
        param_dtype=cfg.param_dtype,
        dtype=cfg.dtype,
        dim=cfg.dim,
        curvature_power=float(cfg.curvature_power),
        noise_scale=float(cfg.noise_scale),
        init_scale=float(cfg.init_scale),
    )
