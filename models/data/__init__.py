"""Data sources: validate a ``DataConfig`` and build the source it names.

Sources: ``markov`` (device-side sparse Markov chain, exact loss floor), ``tokens``
(binary token file), ``text`` (a text file read as bytes or characters:
``data.tokenizer``), ``shakespeare_char`` (the shipped Tiny Shakespeare, characters),
``teacher`` (device-side random teacher network labels) and ``nqm`` (device-side standard
normal noise).
"""

from __future__ import annotations

import math
from numbers import Integral, Real

from stepscale.models.config import DataConfig
from stepscale.models.data.base import Batch, DataInfo, DataSource
from stepscale.models.data.files import TOKEN_DTYPES, FileSource
from stepscale.models.data.markov import MarkovSource
from stepscale.models.data.nqm import NQMSource
from stepscale.models.data.teacher import TeacherSource
from stepscale.models.data.tokenize import SHAKESPEARE, check_tokenizer
from stepscale.models.errors import ConfigError

__all__ = ["SOURCES", "Batch", "DataInfo", "DataSource", "build_source"]

SOURCES = ("markov", "tokens", "text", "shakespeare_char", "teacher", "nqm")
TEXT_SOURCES = ("text", "shakespeare_char")
MAX_CONTEXTS = 1 << 22  # vocab_size ** order
MAX_TABLE = 1 << 25  # vocab_size ** order * branching entries per Markov table


def build_source(cfg: DataConfig, *, nqm_dim: int = 100) -> DataSource:
    """Validate ``cfg`` and build its source; ``nqm_dim`` is ``model.dim`` for ``nqm``.

    Raises ``ConfigError`` naming the offending key for any unusable value or file.
    """
    if cfg.name not in SOURCES:
        raise ConfigError(
            "data.name", f"unknown data source {cfg.name!r}; choose one of {', '.join(SOURCES)}"
        )
    _check_common(cfg)
    if cfg.name == "markov":
        _check_markov(cfg)
        return MarkovSource(cfg)
    if cfg.name == "shakespeare_char":
        _check_files(cfg)
        if cfg.path:
            raise ConfigError(
                "data.path",
                "shakespeare_char reads the text shipped with stepscale; for another file "
                "use data=text data.path=FILE (data.tokenizer=chars reads it the same way)",
            )
        return FileSource(cfg, text=True, path=str(SHAKESPEARE))
    if cfg.name in ("tokens", "text"):
        _check_files(cfg)
        return FileSource(cfg, text=cfg.name == "text")
    if cfg.name == "teacher":
        _check_teacher(cfg)
        return TeacherSource(cfg)
    _positive_int("model.dim", nqm_dim)
    return NQMSource(cfg, nqm_dim)


def _check_common(cfg: DataConfig) -> None:
    """Batch sizes, eval set and seed (and seq_len for language sources)."""
    _positive_int("data.global_batch", cfg.global_batch)
    if cfg.max_microbatch is not None:
        _positive_int("data.max_microbatch", cfg.max_microbatch)
    _positive_int("data.eval_examples", cfg.eval_examples)
    _positive_int("data.eval_batch", cfg.eval_batch)
    if cfg.eval_examples % cfg.eval_batch:
        raise ConfigError(
            "data.eval_examples",
            f"{cfg.eval_examples} is not a multiple of data.eval_batch = {cfg.eval_batch}",
        )
    if not _is_int(cfg.seed) or cfg.seed < 0:
        raise ConfigError("data.seed", f"must be an integer >= 0, got {cfg.seed!r}")
    if cfg.name in ("markov", "tokens", *TEXT_SOURCES):
        _positive_int("data.seq_len", cfg.seq_len)


def _check_markov(cfg: DataConfig) -> None:
    """Chain shape: V >= 2, order >= 1, V^order and the tables bounded, 1 <= branching <= V."""
    _int_at_least("data.vocab_size", cfg.vocab_size, 2)
    _int_at_least("data.order", cfg.order, 1)
    n_ctx = cfg.vocab_size**cfg.order
    if n_ctx > MAX_CONTEXTS:
        raise ConfigError(
            "data.order",
            f"vocab_size ** order = {cfg.vocab_size}**{cfg.order} = {n_ctx} contexts exceeds "
            f"2**22; lower data.order or data.vocab_size",
        )
    _int_at_least("data.branching", cfg.branching, 1)
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
    _positive_float("data.concentration", cfg.concentration)


def _check_files(cfg: DataConfig) -> None:
    """Token dtype, tokenizer and held-out fraction; the file itself is checked when opened."""
    if cfg.name in TEXT_SOURCES:
        check_tokenizer(cfg.tokenizer)
    if cfg.name == "tokens" and cfg.dtype not in TOKEN_DTYPES:
        raise ConfigError(
            "data.dtype", f"unknown token dtype {cfg.dtype!r}; choose one of uint16, uint32"
        )
    frac = cfg.heldout_frac
    if not _is_real(frac) or not 0.0 < frac < 1.0:
        raise ConfigError("data.heldout_frac", f"must be a fraction in (0, 1), got {frac!r}")


def _check_teacher(cfg: DataConfig) -> None:
    """Input dimension, number of classes (>= 2) and temperature (> 0)."""
    _positive_int("data.input_dim", cfg.input_dim)
    _int_at_least("data.n_classes", cfg.n_classes, 2)
    _positive_float("data.temperature", cfg.temperature)


def _is_int(value: object) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)


def _int_at_least(field: str, value: object, low: int) -> None:
    """ConfigError on ``field`` unless ``value`` is an integer >= ``low``."""
    if not _is_int(value) or value < low:  # type: ignore[operator]
        raise ConfigError(field, f"must be an integer >= {low}, got {value!r}")


def _positive_int(field: str, value: object) -> None:
    """ConfigError on ``field`` unless ``value`` is a positive integer."""
    _int_at_least(field, value, 1)


def _positive_float(field: str, value: object) -> None:
    """ConfigError on ``field`` unless ``value`` is a finite number > 0."""
    if not _is_real(value) or value <= 0:  # type: ignore[operator]
        raise ConfigError(field, f"must be a finite number > 0, got {value!r}")
