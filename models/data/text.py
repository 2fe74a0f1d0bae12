"""``data.name: text``: a local text file at ``data.path`` (``.gz`` decompressed), read as
bytes or characters (``data.tokenizer``, models/data/tokenize.py). Its examples are
sequences of ``data.seq_len`` tokens."""

from __future__ import annotations

from stepscale.models.config import DataConfig, ModelConfig
from stepscale.models.data.files import FileSource, check_heldout
from stepscale.models.data.registry import SourcePlugin
from stepscale.models.data.tokenize import check_tokenizer


def check(cfg: DataConfig) -> None:
    """Tokenizer and held-out fraction; the file itself is checked when opened."""
    check_tokenizer(cfg.tokenizer)
    check_heldout(cfg)


def build(cfg: DataConfig, model: ModelConfig) -> FileSource:
    """The text file of a checked config."""
    return FileSource(cfg, text=True)


SOURCE = SourcePlugin("text", sequences=True, check=check, build=build)
