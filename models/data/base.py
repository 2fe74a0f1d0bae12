"""What every data source provides to the trainer.

A batch is a dict of arrays whose leading axis is the example axis. The batch used at
optimizer step ``s`` is a pure function of (data seed, train seed, s, global batch,
sequence length): a resumed run and a run split over devices see the same examples.

Two kinds of sources exist:
- device-side (``device_side = True``): ``sample`` is a pure, jittable function and runs
  inside the compiled training step (synthetic generators: no host round trip);
- host-side (``device_side = False``): ``host_batch`` reads files with numpy and the trainer
  feeds the arrays to the compiled step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import jax
import numpy as np

Batch = dict[str, Any]


@dataclass(frozen=True)
class DataInfo:
    """Static facts about a source that models and validation need."""

    kind: str  # "lm" (tokens [B, L+1]) | "classify" (x [B, d], y [B]) | "nqm" (z [B, d])
    vocab_size: int | None = None  # lm
    seq_len: int | None = None  # lm: positions predicted per example
    input_dim: int | None = None  # classify / nqm
    n_classes: int | None = None  # classify
    loss_floor: float | None = None  # exact minimum of the expected eval loss, if known
    tokens_per_example: int = 1  # lm: seq_len; others: 1
    # The trivial baseline: the eval loss of a model that learned nothing useful (unigram
    # entropy of the training split for text and tokens, log(classes), log(vocab) of the
    # Markov chain), and what it is; None = not known from the data alone.
    baseline_loss: float | None = None
    baseline: str | None = None
    tokenizer: str | None = None  # text: bytes | chars
    vocabulary: str | None = None  # chars: the characters, in id order


class DataSource(Protocol):
    """A seeded source of training batches and a fixed held-out set."""

    info: DataInfo
    device_side: bool

    def device_arrays(self) -> dict[str, np.ndarray]:
        """Tables the device-side sampler needs, passed to the compiled step as arguments
        (so sources that differ only in their tables share one compiled program)."""
        ...

    def sample(self, arrays: dict[str, jax.Array], key: jax.Array, batch_size: int) -> Batch:
        """Device-side: a batch of ``batch_size`` examples drawn with ``key`` (pure, jittable)."""
        ...

    def host_batch(self, seed: int, step: int, batch_size: int, rows: slice | None = None) -> Batch:
        """Host-side: the batch of optimizer step ``step`` as numpy arrays; with ``rows``
        only those examples of it (what one process's devices hold in a multi-process
        run), computed without reading the others."""
        ...

    def eval_set(self) -> Batch:
        """The fixed held-out set as numpy arrays, leading axis ``eval_examples``; the same
        whatever the global batch, seed of the run or number of devices."""
        ...
