"""The networks: a GPT language model, an MLP classifier and the noisy quadratic model.

Every model is an `nnx.Module` holding only `nnx.Param`s, with
``loss(batch, *, train=True, positions=None) -> float32 scalar``. The trainer uses it in
functional form::

    graphdef, params = nnx.split(build_model(cfg, info, nnx.Rngs(seed)), nnx.Param)
    loss = nnx.merge(graphdef, params).loss(batch)   # inside jit, differentiable in params

`count_params` and `flops_per_example` are pure functions of the config (nothing is
allocated), so sweeps can size runs before building anything.
"""

from __future__ import annotations

from flax import nnx

from stepscale.models.config import ModelConfig
from stepscale.models.data.base import DataInfo
from stepscale.models.nets.gpt import GPT, gpt_flops_per_token, gpt_param_counts
from stepscale.models.nets.mlp import MLP, mlp_param_count
from stepscale.models.nets.nqm import (
    NQM,
    nqm_curvature,
    nqm_initial_loss,
    nqm_noise_trace,
    nqm_true_noise_scale,
)
from stepscale.models.nets.presets import MODELS, PRESETS, ResolvedModel, resolve

__all__ = [
    "GPT",
    "MLP",
    "MODELS",
    "NQM",
    "PRESETS",
    "ResolvedModel",
    "build_model",
    "count_nonembedding_params",
    "count_params",
    "flops_per_example",
    "nqm_curvature",
    "nqm_initial_loss",
    "nqm_noise_trace",
    "nqm_true_noise_scale",
    "resolve",
]

NQM_FLOPS_PER_DIM = 6.0  # forward ≈ 2·dim (θ·v_z and the quadratic), ×3 for training


def build_model(cfg: ModelConfig, info: DataInfo, rngs: nnx.Rngs) -> nnx.Module:
    """Resolve and validate ``cfg`` against ``info`` and build the network; initial values
    are a deterministic function of ``rngs`` (the NQM ignores it)."""
    spec = resolve(cfg, info)
    module = {"gpt": GPT, "mlp": MLP, "nqm": NQM}[spec.name]
    return module(spec, rngs)


def count_params(cfg: ModelConfig, info: DataInfo) -> int:
    """Exact number of scalar parameters of ``build_model(cfg, info, ...)``."""
    spec = resolve(cfg, info)
    if spec.name == "gpt":
        return sum(gpt_param_counts(spec).values())
    if spec.name == "mlp":
        return mlp_param_count(spec)
    return spec.dim


def count_nonembedding_params(cfg: ModelConfig, info: DataInfo) -> int:
    """The parameters outside the embeddings (Kaplan et al. 2020's N, the N of a ladder's
    laws): a GPT's blocks and final norm, without the token and position tables and an
    untied head; an MLP's or NQM's every parameter."""
    spec = resolve(cfg, info)
    if spec.name == "gpt":
        counts = gpt_param_counts(spec)
        return counts["blocks"] + counts["final_norm"]
    return count_params(cfg, info)


def flops_per_example(cfg: ModelConfig, info: DataInfo) -> float:
    """Training FLOPs (forward + backward ≈ 3 × forward) per example.

    gpt: ``seq_len × (6·N_nonembedding + 6·d_model·vocab + 12·n_layers·seq_len·d_model)``
    (see `models.nets.gpt.gpt_flops_per_token`); mlp: ``6·N``; nqm: ``6·dim``.
    """
    spec = resolve(cfg, info)
    if spec.name == "gpt":
        seq_len = info.seq_len if info.seq_len is not None else spec.max_seq_len
        return seq_len * gpt_flops_per_token(spec, seq_len)
    if spec.name == "mlp":
        return 6.0 * mlp_param_count(spec)
    return NQM_FLOPS_PER_DIM * spec.dim
