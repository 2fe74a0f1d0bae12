"""The registry of data sources: ``data.name`` → the source's plug-in.

A plug-in (`SourcePlugin`) says what the rest of the trainer and the orchestrator need of a
source without building it: its name, whether its examples are sequences (then a batch
counts sequences and ``data.seq_len`` must be a positive integer; else it counts examples),
how it checks its own keys of `DataConfig` and how it is built. Each source is a module of
`stepscale.models.data` that defines its plug-in; `stepscale.models.data` registers the
built-in ones, and a test or a program may `register` its own. Nothing outside a source's
module tests its name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from stepscale.models.checks import is_int, positive_int
from stepscale.models.config import DataConfig, ModelConfig
from stepscale.models.data.base import DataSource
from stepscale.models.errors import ConfigError


@dataclass(frozen=True)
class SourcePlugin:
    """A data source as a plug-in: ``check`` raises `ConfigError` naming the key for any
    unusable value of the source's own keys (the keys every source shares are checked
    before it); ``build`` makes the source from a checked config and the model's config
    (a source whose shape is the model's, like ``nqm``, reads it there)."""

    name: str  # data.name
    sequences: bool  # examples are sequences: the batch counts sequences, seq_len applies
    check: Callable[[DataConfig], None]
    build: Callable[[DataConfig, ModelConfig], DataSource]


_SOURCES: dict[str, SourcePlugin] = {}


def register(plugin: SourcePlugin) -> SourcePlugin:
    """Add ``plugin`` under its name (a name already taken → ValueError); returns it."""
    if plugin.name in _SOURCES:
        raise ValueError(f"a data source named {plugin.name!r} is already registered")
    _SOURCES[plugin.name] = plugin
    return plugin


def unregister(name: str) -> None:
    """Remove the source ``name`` (a test's own source, when the test ends)."""
    _SOURCES.pop(name, None)


def source_names() -> tuple[str, ...]:
    """The registered sources' names, in the order they were registered."""
    return tuple(_SOURCES)


def source_plugin(name: object) -> SourcePlugin:
    """The plug-in registered as ``name``; ConfigError on ``data.name`` listing the
    registered ones otherwise."""
    plugin = _SOURCES.get(name) if isinstance(name, str) else None
    if plugin is None:
        raise ConfigError(
            "data.name",
            f"unknown data source {name!r}; choose one of {', '.join(_SOURCES)}",
        )
    return plugin


def build_source(cfg: DataConfig, model: ModelConfig | None = None) -> DataSource:
    """Validate ``cfg`` and build the source it names; ``model`` is the run's model config
    (default: `ModelConfig`'s defaults). Raises ``ConfigError`` naming the offending key
    for any unusable value or file."""
    plugin = source_plugin(cfg.name)
    check_shared(cfg, sequences=plugin.sequences)
    plugin.check(cfg)
    return plugin.build(cfg, model if model is not None else ModelConfig())


def check_shared(cfg: DataConfig, *, sequences: bool) -> None:
    """The keys every source has: batch sizes, eval set and seed, and ``seq_len`` for a
    source whose examples are sequences."""
    positive_int("data.global_batch", cfg.global_batch)
    if cfg.max_microbatch is not None:
        positive_int("data.max_microbatch", cfg.max_microbatch)
    positive_int("data.eval_examples", cfg.eval_examples)
    positive_int("data.eval_batch", cfg.eval_batch)
    if cfg.eval_examples % cfg.eval_batch:
        raise ConfigError(
            "data.eval_examples",
            f"{cfg.eval_examples} is not a multiple of data.eval_batch = {cfg.eval_batch}",
        )
    if not is_int(cfg.seed) or cfg.seed < 0:
        raise ConfigError("data.seed", f"must be an integer >= 0, got {cfg.seed!r}")
    if sequences:
        positive_int("data.seq_len", cfg.seq_len)
