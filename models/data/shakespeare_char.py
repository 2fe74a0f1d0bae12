"""``data.name: shakespeare_char``: Tiny Shakespeare, shipped with stepscale
(models/data/corpora/), read as text (conf/data/shakespeare_char.yaml: characters, 10%
held out). Its examples are sequences of ``data.seq_len`` characters."""

from __future__ import annotations

from stepscale.models.config import DataConfig, ModelConfig
from stepscale.models.data.files import FileSource, check_heldout
from stepscale.models.data.registry import SourcePlugin
from stepscale.models.data.tokenize import SHAKESPEARE, check_tokenizer
from stepscale.models.errors import ConfigError


def check(cfg: DataConfig) -> None:
    """Tokenizer and held-out fraction; no ``data.path`` (the corpus is the shipped one)."""
    check_tokenizer(cfg.tokenizer)
    check_heldout(cfg)
    if cfg.path:
        raise ConfigError(
            "data.path",
            "shakespeare_char reads the text shipped with stepscale; for another file "
            "use data=text data.path=FILE (data.tokenizer=chars reads it the same way)",
        )


def build(cfg: DataConfig, model: ModelConfig) -> FileSource:
    """The shipped corpus, read with the config's tokenizer."""
    return FileSource(cfg, text=True, path=str(SHAKESPEARE))


SOURCE = SourcePlugin("shakespeare_char", sequences=True, check=check, build=build)
