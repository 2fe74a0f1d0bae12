"""Tokenizers of the ``text`` sources: how a text file becomes token ids.

- ``bytes``: every byte is a token (vocabulary 256, any file);
- ``chars``: every Unicode character is a token; the vocabulary is the file's own set of
  characters, sorted by code point (Tiny Shakespeare: 65). The file must be UTF-8.

Files whose name ends in ``.gz`` are decompressed first (the shipped corpus is).
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stepscale.models.errors import ConfigError

# The shipped corpora (models/data/corpora/, package data).
CORPORA = Path(__file__).resolve().parent / "corpora"
SHAKESPEARE = CORPORA / "tinyshakespeare.txt.gz"
# Above this many training tokens, the unigram baseline is counted on the first ones only.
UNIGRAM_LIMIT = 100_000_000
_CHUNK = 1 << 24


@dataclass(frozen=True)
class Encoded:
    """Token ids of a text, its vocabulary size and, for ``chars``, the characters in id
    order (None for ``bytes``)."""

    ids: np.ndarray
    vocab_size: int
    vocabulary: str | None


def read_raw(path: str) -> bytes:
    """The bytes of ``path`` (decompressed if it ends in ``.gz``), or a ConfigError."""
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                return f.read()
        return Path(path).read_bytes()
    except (OSError, EOFError, zlib.error) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        raise ConfigError("data.path", f"cannot read {path}: {why}") from None


def encode_bytes(raw: bytes, path: str) -> Encoded:
    """One token per byte."""
    return Encoded(np.frombuffer(raw, dtype=np.uint8), 256, None)


def encode_chars(raw: bytes, path: str) -> Encoded:
    """One token per character, ids in code-point order of the characters present."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            "data.tokenizer",
            f"chars needs UTF-8 text, but {path} has a byte that is not UTF-8 at offset "
            f"{exc.start}; use data.tokenizer=bytes or re-encode the file as UTF-8",
        ) from None
    points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    chars, ids = np.unique(points, return_inverse=True)
    dtype = np.uint16 if chars.size <= 1 << 16 else np.uint32
    return Encoded(ids.astype(dtype), int(chars.size), "".join(map(chr, chars.tolist())))


TOKENIZERS: dict[str, Callable[[bytes, str], Encoded]] = {
    "bytes": encode_bytes,
    "chars": encode_chars,
}


def check_tokenizer(name: object) -> None:
    """ConfigError on ``data.tokenizer`` unless it names a registered tokenizer."""
    if name not in TOKENIZERS:
        raise ConfigError(
            "data.tokenizer",
            f"unknown tokenizer {name!r}; choose one of {', '.join(TOKENIZERS)}",
        )


def check_file(path: str) -> None:
    """ConfigError on ``data.path`` unless it names a non-empty regular file."""
    if not path:
        raise ConfigError("data.path", "no file given; set data.path to a token or text file")
    if not os.path.exists(path):
        raise ConfigError("data.path", f"cannot read {path}: No such file or directory")
    if not os.path.isfile(path):
        raise ConfigError("data.path", f"{path} is not a regular file")
    if os.path.getsize(path) == 0:
        raise ConfigError("data.path", f"{path} is empty")


def encode_file(path: str, tokenizer: str) -> Encoded:
    """Read ``path`` and tokenize it; ConfigError naming the key for any unusable input."""
    check_tokenizer(tokenizer)
    check_file(path)
    raw = read_raw(path)
    if not raw:
        raise ConfigError("data.path", f"{path} holds no text")
    return TOKENIZERS[tokenizer](raw, path)


def unigram_entropy(ids: np.ndarray, vocab_size: int) -> float | None:
    """Entropy (nats) of the token frequencies of ``ids``: the loss of the best prediction
    that ignores the context. Counted on the first :data:`UNIGRAM_LIMIT` tokens; None when
    the vocabulary is too large to count (more than 2**24 ids)."""
    if vocab_size > 1 << 24 or ids.shape[0] == 0:
        return None
    counts = np.zeros(vocab_size, dtype=np.int64)
    n = min(int(ids.shape[0]), UNIGRAM_LIMIT)
    for lo in range(0, n, _CHUNK):
        chunk = np.asarray(ids[lo : min(lo + _CHUNK, n)])
        counts += np.bincount(chunk, minlength=vocab_size)[:vocab_size]
    p = counts[counts > 0] / n
    return float(-(p * np.log(p)).sum()) if p.size > 1 else 0.0
