"""Real text: the shipped Tiny Shakespeare (sha256, vocabulary, split, baseline), the
``chars`` tokenizer on a user's file, and every bad text input exiting 2 naming its key."""

from __future__ import annotations

import gzip
import hashlib
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from stepscale.models.config import DataConfig
from stepscale.models.data import build_source
from stepscale.models.data.tokenize import SHAKESPEARE
from stepscale.models.errors import ConfigError
from stepscale.sweeps.cli import main

SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
FAST = ["conf=train_smoke", "train.max_steps=20", "train.devices=1", "train.compile_cache_dir="]


@pytest.fixture(scope="module")
def shakespeare() -> tuple[str, object]:
    text = gzip.decompress(SHAKESPEARE.read_bytes())
    assert hashlib.sha256(text).hexdigest() == SHA256
    src = build_source(DataConfig(name="shakespeare_char", heldout_frac=0.1, tokenizer="chars"))
    return text.decode("utf-8"), src


def test_shipped_text_its_vocabulary_and_split(shakespeare: tuple[str, object]) -> None:
    text, src = shakespeare
    assert len(text) == 1_115_394
    assert src.info.vocab_size == 65 and src.info.vocabulary == "".join(sorted(set(text)))
    assert (src.n_train, src.n_heldout) == (1_003_854, 111_540)
    # ids decode back to the text, in order: training split first, held-out split after it
    vocab = np.array(list(src.info.vocabulary))
    assert "".join(vocab[src.tokens[:200]]) == text[:200]
    assert "".join(vocab[src.tokens[src.n_train : src.n_train + 50]]) == text[1_003_854:1_003_904]
    # the baseline is the unigram entropy of the training split
    counts = Counter(text[:1_003_854])
    p = np.array(list(counts.values())) / 1_003_854
    assert src.info.baseline_loss == pytest.approx(float(-(p * np.log(p)).sum()), rel=1e-9)
    assert 3.2 < src.info.baseline_loss < math.log(65)
    ev = src.eval_set()["tokens"]
    assert ev.shape == (256, 65)
    assert "".join(vocab[ev[0]]) == text[1_003_854 : 1_003_854 + 65]


def test_the_shipped_text_ships_with_the_package() -> None:
    import tomllib

    root = Path(__file__).resolve().parent.parent
    data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    shipped = data["package-data"]["stepscale.models.data"]
    corpora = root / "models" / "data"
    assert SHAKESPEARE in {p for pattern in shipped for p in corpora.glob(pattern)}
    assert SHA256 in (corpora / "corpora" / "README.md").read_text()


def _text_file(tmp_path: Path, n_lines: int = 300) -> Path:
    path = tmp_path / "story.txt"
    path.write_text("".join(f"Ünïcode line {i % 17}: the cat sat.\n" for i in range(n_lines)))
    return path


def test_chars_reads_a_users_file_like_the_shipped_one(tmp_path: Path) -> None:
    path = _text_file(tmp_path)
    text = path.read_text()
    src = build_source(
        DataConfig(name="text", path=str(path), tokenizer="chars", heldout_frac=0.1,
                   seq_len=16, eval_examples=8, eval_batch=4)
    )  # fmt: skip
    assert src.info.vocabulary == "".join(sorted(set(text)))  # "Ü" and "ï" are one token each
    vocab = np.array(list(src.info.vocabulary))
    n_train = int(len(text) * 0.9)
    for row in src.host_batch(0, 1, 8)["tokens"]:
        assert "".join(vocab[row]) in text[:n_train]


@pytest.mark.slow  # over 10 s on 2 cores
def test_sweep_train_on_a_text_file_with_chars_records_the_vocabulary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _text_file(tmp_path, 1200)
    run_dir = tmp_path / "run"
    code = main(["train", *FAST, "data=text", "data.tokenizer=chars", f"data.path={path}",
                 "data.seq_len=32", "data.eval_examples=32", "data.eval_batch=16",
                 "optimizer.lr=0.01", f"run_dir={run_dir}"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    status = json.loads((run_dir / "status.json").read_text())
    assert json.loads(out)["steps_done"] == 20
    assert status["tokenizer"] == "chars"
    assert status["vocabulary"] == "".join(sorted(set(path.read_text())))
    assert status["vocab_size"] == len(status["vocabulary"])
    assert status["final_eval_loss"] < status["baseline_loss"]  # a repetitive text is learnt


BAD_TEXT = {
    "missing file": (lambda d: d / "nope.txt", [], "data.path"),
    "empty file": (lambda d: _raw(d, b""), [], "data.path"),
    "empty gz file": (lambda d: _raw(d, gzip.compress(b""), "e.txt.gz"), [], "data.path"),
    "too short for a training window": (lambda d: _raw(d, b"x" * 40), [], "data.path"),
    "held-out split too short": (
        lambda d: _raw(d, b"abcdefgh" * 60),
        ["data.heldout_frac=0.01"],
        "data.path",
    ),
    "not UTF-8 with chars": (lambda d: _raw(d, b"ab\xff\xfe" * 400), [], "data.tokenizer"),
    "unknown tokenizer": (lambda d: _text_file(d), ["data.tokenizer=words"], "data.tokenizer"),
    "a path for the shipped text": (
        lambda d: _text_file(d),
        ["data=shakespeare_char"],
        "data.path",
    ),
}


def _raw(folder: Path, data: bytes, name: str = "t.txt") -> Path:
    path = folder / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("name", list(BAD_TEXT))
def test_bad_text_input_exits_2_naming_the_key(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, extra, key = BAD_TEXT[name]
    path = make(tmp_path)
    run_dir = tmp_path / "run"
    code = main(["train", *FAST, "data=text", "data.tokenizer=chars", "data.seq_len=32",
                 "data.eval_examples=2", "data.eval_batch=2", *extra, f"data.path={path}",
                 f"run_dir={run_dir}"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 2, err
    assert key in err and "Traceback" not in err and out == ""
    assert not run_dir.exists()


def test_bad_tokenizer_is_refused_when_building() -> None:
    with pytest.raises(ConfigError) as err:
        build_source(DataConfig(name="text", path="x", tokenizer="bpe"))
    assert err.value.field == "data.tokenizer" and "bytes, chars" in str(err.value)


@pytest.mark.slow
def test_the_nanogpt_preset_is_deterministic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two runs of `sweep train conf=train_shakespeare_char` (shortened to 20 steps, evaluated
    every 10) give identical losses; the full run is benchmarks/shakespeare_char.py."""
    short = ["train.max_steps=20", "train.eval_every=10", "train.log_every=10", "schedule.warmup_steps=5",
             f"train.compile_cache_dir={tmp_path / 'cache'}"]  # fmt: skip
    curves = []
    for i in range(2):
        run_dir = tmp_path / f"run{i}"
        assert main(["train", "conf=train_shakespeare_char", *short, f"run_dir={run_dir}"]) == 0
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        curves.append(
            [(r["step"], r.get("eval_loss"), r.get("train_loss")) for r in map(json.loads, lines)]
        )
    capsys.readouterr()
    assert curves[0] == curves[1] and len(curves[0]) == 3
    status = json.loads((tmp_path / "run0" / "status.json").read_text())
    assert status["params"] == 795_904 + 64 * 128 and status["vocab_size"] == 65
