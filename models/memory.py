"""Will a run fit in memory? A lower bound of the bytes one device needs, from the plan
alone, checked against what the device has, so that a run that cannot fit is refused before
anything is written instead of failing at its first allocation.

The bound counts only what must be alive at once, so it never refuses a run that fits:
the parameters and their gradients, the held-out set's share of the device, and the
largest single activation of one forward pass — of a training microbatch or of an
evaluation batch (a GPT's attention scores ``heads × L × L`` and logits ``L × vocab`` are
float32). Optimizer state, the other activations and XLA's workspace come on top.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import jax

from stepscale.models.batching import BatchPlan
from stepscale.models.config import TrainerConfig
from stepscale.models.data.base import DataInfo
from stepscale.models.errors import ConfigError
from stepscale.models.nets.presets import ResolvedModel

_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
_F32 = 4
_TOKEN = 4  # int32 token ids and labels


@dataclass(frozen=True)
class Need:
    """One term of the bound: its bytes per device, what it is and the keys that shrink it."""

    bytes: int
    what: str
    fields: tuple[str, ...]


def _largest_activation(model: ResolvedModel, info: DataInfo) -> tuple[int, str]:
    """Bytes of the largest single activation of one example, and what it is."""
    if model.name == "gpt":
        seq = info.seq_len or model.max_seq_len or 1
        scores = (model.n_heads or 1) * seq * seq * _F32
        logits = seq * (model.vocab_size or 1) * _F32
        if scores >= logits:
            return scores, f"attention scores {model.n_heads} heads × {seq}² positions × 4 B"
        return logits, f"logits {seq} positions × {model.vocab_size} tokens × 4 B"
    width = model.hidden if model.name == "mlp" else model.dim
    return (width or 1) * _F32, f"a layer of {width} floats"


def needs(
    cfg: TrainerConfig, info: DataInfo, model: ResolvedModel, batch: BatchPlan, n_params: int
) -> list[Need]:
    """The terms of the lower bound of one device's memory (bytes each)."""
    devices = batch.devices
    per_example, what = _largest_activation(model, info)
    eval_batch = cfg.data.eval_batch
    eval_per_device = eval_batch // devices if eval_batch % devices == 0 else eval_batch
    example_bytes = max(info.tokens_per_example + 1, info.input_dim or 1) * _TOKEN
    return [
        Need(
            2 * n_params * _BYTES.get(model.param_dtype, _F32),
            f"{n_params:,} parameters and their gradients",
            ("model.size",),
        ),
        Need(
            batch.microbatch * per_example,
            f"one training microbatch of {batch.microbatch}: {what}",
            ("data.seq_len", "data.max_microbatch"),
        ),
        Need(
            eval_per_device * per_example,
            f"one evaluation batch of {eval_per_device}: {what}",
            ("data.seq_len", "data.eval_batch"),
        ),
        Need(
            cfg.data.eval_examples * example_bytes // devices,
            f"the held-out set of {cfg.data.eval_examples} examples",
            ("data.eval_examples",),
        ),
    ]


def device_bytes(devices: int) -> int | None:
    """Memory of one device: an accelerator's own limit, or for CPU devices the host's
    physical memory shared by the ``devices`` in use; None when unknown."""
    device = jax.local_devices()[0]
    try:
        stats = device.memory_stats() or {}
    except Exception:  # not every backend implements it
        stats = {}
    if stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    if device.platform != "cpu":
        return None
    try:
        host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    return host // max(1, devices)


def check_fits(
    cfg: TrainerConfig, info: DataInfo, model: ResolvedModel, batch: BatchPlan, n_params: int
) -> None:
    """Raise `ConfigError` when the lower bound of one device's memory exceeds what the
    device has, naming the largest term and the keys that shrink it."""
    available = device_bytes(batch.devices)
    if available is None:
        return
    terms = needs(cfg, info, model, batch, n_params)
    # The two activations never live at once: a step trains or it evaluates.
    train, evaluate = terms[1], terms[2]
    alive = [terms[0], max(train, evaluate, key=lambda n: n.bytes), terms[3]]
    total = sum(n.bytes for n in alive)
    if total <= available:
        return
    top = max(alive, key=lambda n: n.bytes)
    raise ConfigError(
        top.fields[0],
        f"the run needs at least {_size(total)} per device, and a device here has "
        f"{_size(available)}: {top.what} alone takes {_size(top.bytes)}. Lower "
        f"{' or '.join(top.fields)}",
    )


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000:
            return f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} TB"
