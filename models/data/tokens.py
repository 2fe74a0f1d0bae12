"""``data.name: tokens``: a flat binary token file (``data.dtype`` uint16 or uint32) as
written by common LM pipelines, at ``data.path`` (models/data/files.py reads it). Its
examples are sequences of ``data.seq_len`` tokens."""

from __future__ import annotations

from stepscale.models.config import DataConfig, ModelConfig
from stepscale.models.data.files import FileSource, check_heldout, check_token_dtype
from stepscale.models.data.registry import SourcePlugin


def check(cfg: DataConfig) -> None:
    """Token dtype and held-out fraction; the file itself is checked when opened."""
    check_token_dtype(cfg.dtype)
    check_heldout(cfg)


def build(cfg: DataConfig, model: ModelConfig) -> FileSource:
    """The token file of a checked config."""
    return FileSource(cfg, text=False)


SOURCE = SourcePlugin("tokens", sequences=True, check=check, build=build)
