"""Data sources, registered by name (``data.name``; the registry: models/data/registry.py).

Built in, a module each: ``markov`` (device-side sparse Markov chain, exact loss floor),
``tokens`` (binary token file), ``text`` (a text file read as bytes or characters:
``data.tokenizer``), ``shakespeare_char`` (the shipped Tiny Shakespeare, characters),
``teacher`` (device-side random teacher network labels) and ``nqm`` (device-side standard
normal noise). Adding a source: a module defining its `SourcePlugin` (its checks, whether
its examples are sequences, how it is built), ``conf/data/<name>.yaml``, and its plug-in in
`BUILT_IN` below (or `register` from your own code).
"""

from __future__ import annotations

from stepscale.models.data import markov, nqm, shakespeare_char, teacher, text, tokens
from stepscale.models.data.base import Batch, DataInfo, DataSource
from stepscale.models.data.registry import (
    SourcePlugin,
    build_source,
    register,
    source_names,
    source_plugin,
    unregister,
)

__all__ = [
    "BUILT_IN",
    "Batch",
    "DataInfo",
    "DataSource",
    "SourcePlugin",
    "build_source",
    "register",
    "source_names",
    "source_plugin",
    "unregister",
]

# In the order `data.name`'s choices are listed.
BUILT_IN = (
    markov.SOURCE,
    tokens.SOURCE,
    text.SOURCE,
    shakespeare_char.SOURCE,
    teacher.SOURCE,
    nqm.SOURCE,
)
for _plugin in BUILT_IN:
    register(_plugin)
