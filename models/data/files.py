"""Host-side LM sources read from local files: binary token files and text files.

A token file (and a plain text file read as bytes) is memory-mapped; a text file read as
characters, or a ``.gz`` file, is read whole and tokenized (models/data/tokenize.py). Its
first ``floor((1 - heldout_frac) * n)`` tokens are the training split and the rest the
held-out split (nanoGPT's rule: Tiny Shakespeare splits 1,003,854 / 111,540). A training batch is ``B`` windows of
``seq_len + 1`` consecutive tokens at uniform random starts inside the training split; the
held-out set is the first ``eval_examples`` non-overlapping windows of the held-out split.
The sources ``tokens``, ``text`` and ``shakespeare_char`` (a module each) are this reader
over their files.
"""

from __future__ import annotations

import os

import jax
import numpy as np

from stepscale.models.checks import is_real
from stepscale.models.config import DataConfig
from stepscale.models.data.base import Batch, DataInfo
from stepscale.models.data.tokenize import encode_file, unigram_entropy
from stepscale.models.errors import ConfigError

TOKEN_DTYPES = ("uint16", "uint32")
# Above this many tokens a uint16 file is not scanned for its largest id (vocab = 65536).
SCAN_LIMIT = 50_000_000
_SCAN_CHUNK = 1 << 24


class FileSource:
    """Host-side LM source over a token file, or a text file (``text=True``; ``path``: a
    file other than ``data.path``, such as the shipped corpus).

    Vocabulary: 256 for text read as bytes, the file's own characters for ``chars``. For token files it is the largest token id + 1,
    found by one chunked scan of the file, except for uint16 files of more than 50M tokens
    where it is 65536 without a scan; uint32 files are always scanned. ``data.vocab_size``
    is not used (it parametrises the Markov source); set ``model.vocab_size`` to pad the
    embedding. Build with ``models.data.build_source`` (which validates the config).
    """

    device_side = False

    def __init__(self, cfg: DataConfig, *, text: bool = False, path: str | None = None) -> None:
        self.path = path or cfg.path
        self.seq_len = cfg.seq_len
        self._eval_examples = cfg.eval_examples
        self._eval: Batch | None = None
        vocabulary: str | None = None
        self.tokenizer = cfg.tokenizer if text else None
        if text and (cfg.tokenizer != "bytes" or self.path.endswith(".gz")):
            encoded = encode_file(self.path, cfg.tokenizer)
            self.tokens: np.ndarray = encoded.ids
            vocab, vocabulary = encoded.vocab_size, encoded.vocabulary
        else:
            dtype = np.dtype(np.uint8 if text else _token_dtype(cfg.dtype))
            self.tokens = _open(self.path, dtype)
            vocab = 256 if text else _token_vocab(self.tokens)
        n = self.tokens.shape[0]
        self.n_train = int(n * (1.0 - cfg.heldout_frac))
        self.n_heldout = n - self.n_train
        self._check_splits(cfg)
        self.info = DataInfo(
            kind="lm",
            vocab_size=vocab,
            seq_len=self.seq_len,
            tokens_per_example=self.seq_len,
            baseline_loss=unigram_entropy(self.tokens[: self.n_train], vocab),
            baseline="unigram entropy of the training split",
            tokenizer=self.tokenizer,
            vocabulary=vocabulary,
        )

    def _check_splits(self, cfg: DataConfig) -> None:
        """Both splits must hold a window; the held-out one ``eval_examples`` of them."""
        window = self.seq_len + 1
        n = self.tokens.shape[0]
        if self.n_train < window or self.n_heldout < window:
            raise ConfigError(
                "data.path",
                f"{self.path} has {n} tokens: too short for one window of seq_len + 1 = "
                f"{window} tokens in both the training split ({self.n_train}) and the "
                f"held-out split ({self.n_heldout}); use a longer file, a smaller "
                "data.seq_len or another data.heldout_frac",
            )
        available = self.n_heldout // window
        if available < cfg.eval_examples:
            raise ConfigError(
                "data.eval_examples",
                f"the held-out split of {self.path} ({self.n_heldout} tokens) holds only "
                f"{available} windows of {window} tokens but data.eval_examples = "
                f"{cfg.eval_examples}; lower data.eval_examples or raise data.heldout_frac",
            )

    def device_arrays(self) -> dict[str, np.ndarray]:
        """None: the batches are made on the host."""
        return {}

    def sample(self, arrays: dict[str, jax.Array], key: jax.Array, batch_size: int) -> Batch:
        """Not available: a host-side source is read with ``host_batch``."""
        raise NotImplementedError("FileSource is host-side; use host_batch()")

    def host_batch(self, seed: int, step: int, batch_size: int, rows: slice | None = None) -> Batch:
        """Windows at ``batch_size`` random starts drawn from ``default_rng([seed, step])``;
        only the examples ``rows`` of them (a process's share) when given."""
        rng = np.random.default_rng([seed, step])
        starts = rng.integers(0, self.n_train - self.seq_len, size=batch_size)
        if rows is not None:
            starts = starts[rows]
        return {"tokens": self._windows(starts)}

    def eval_set(self) -> Batch:
        """The first ``eval_examples`` non-overlapping windows of the held-out split."""
        if self._eval is None:
            window = self.seq_len + 1
            starts = self.n_train + window * np.arange(self._eval_examples)
            self._eval = {"tokens": self._windows(starts)}
        return self._eval

    def _windows(self, starts: np.ndarray) -> np.ndarray:
        """int32 [len(starts), seq_len + 1]: the tokens from each start on."""
        idx = starts[:, None] + np.arange(self.seq_len + 1)
        return np.asarray(self.tokens[idx], dtype=np.int32)


def check_heldout(cfg: DataConfig) -> None:
    """ConfigError on ``data.heldout_frac`` unless it is a fraction in (0, 1)."""
    frac = cfg.heldout_frac
    if not is_real(frac) or not 0.0 < frac < 1.0:
        raise ConfigError("data.heldout_frac", f"must be a fraction in (0, 1), got {frac!r}")


def check_token_dtype(name: object) -> None:
    """ConfigError on ``data.dtype`` unless it names a token dtype (uint16, uint32)."""
    if name not in TOKEN_DTYPES:
        raise ConfigError(
            "data.dtype", f"unknown token dtype {name!r}; choose one of uint16, uint32"
        )


def _token_dtype(name: str) -> np.dtype:
    """The numpy dtype of a token file, or a ConfigError."""
    check_token_dtype(name)
    return np.dtype(name)


def _open(path: str, dtype: np.dtype) -> np.memmap:
    """Memory-map ``path`` as a flat array of ``dtype``, or a ConfigError saying why not."""
    if not path:
        raise ConfigError("data.path", "no file given; set data.path to a token or text file")
    try:
        size = os.path.getsize(path)
        if not os.path.isfile(path):
            raise ConfigError("data.path", f"{path} is not a regular file")
        if size == 0:
            raise ConfigError("data.path", f"{path} is empty")
        if size % dtype.itemsize:
            raise ConfigError(
                "data.path",
                f"{path} has {size} bytes, not a multiple of {dtype.itemsize} "
                f"({dtype.name}); check data.dtype (uint16 | uint32)",
            )
        return np.memmap(path, dtype=dtype, mode="r")
    except OSError as exc:
        raise ConfigError("data.path", f"cannot read {path}: {exc.strerror or exc}") from exc


def _token_vocab(tokens: np.ndarray) -> int:
    """Largest token id + 1 (chunked scan), or 65536 for large uint16 files."""
    if tokens.dtype == np.uint16 and tokens.shape[0] > SCAN_LIMIT:
        return 1 << 16
    top = 0
    for lo in range(0, tokens.shape[0], _SCAN_CHUNK):
        top = max(top, int(tokens[lo : lo + _SCAN_CHUNK].max()))
    if top > np.iinfo(np.int32).max - 1:
        raise ConfigError("data.path", f"token id {top} does not fit int32; is data.dtype right?")
    return top + 1
