"""The corpus of issue 40 (tests/logs/corpus.yaml, README.md there): logs of 20 training
frameworks, real outputs and excerpts built from each framework's own format strings, each
read with a preset or a built-in format and no hand-written regex. Every one gives exactly
its expected records or is refused with a message naming the cause: no silently wrong step
or value."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from stepscale.sweeps.trainers.line_formats import read_metrics
from stepscale.sweeps.trainers.metrics_file import MalformedRecord
from stepscale.sweeps.trainers.suggest import read_file

LOGS = Path(__file__).parent / "logs"
CORPUS = yaml.safe_load((LOGS / "corpus.yaml").read_text())


def test_the_corpus_spans_25_logs_of_20_frameworks() -> None:
    assert len(CORPUS) >= 25 and len({e["framework"] for e in CORPUS}) >= 20
    readme = (LOGS / "README.md").read_text()
    assert all(e["file"] in readme for e in CORPUS)  # each file's source is documented


@pytest.mark.parametrize("entry", CORPUS, ids=[e["file"] for e in CORPUS])
def test_a_corpus_log_is_read_exactly_or_refused_naming_the_cause(entry: dict) -> None:
    reading = entry["reading"]
    assert "pattern" not in reading  # a preset or a built-in format, never a user's regex
    path = LOGS / entry["file"]
    spec = read_metrics({**reading, "source": str(path)})
    if "refused" in entry:
        with pytest.raises(MalformedRecord) as info:
            records, stream = read_file(spec, path, entry.get("settings"))
            if not records:  # a log with no usable record fails the attempt the same way
                raise MalformedRecord(0, "", stream.no_record_message("sample log"))
        assert entry["refused"] in str(info.value)
        return
    records, _ = read_file(spec, path, entry.get("settings"))
    keys = entry["keys"]
    got = [{"step": r["step"], **{k: r[k] for k in keys if k in r}} for r in records]
    got = [g for g in got if len(g) > 1]
    assert [g["step"] for g in got] == [e["step"] for e in entry["expect"]]
    for g, e in zip(got, entry["expect"], strict=True):
        assert g == pytest.approx(e, rel=1e-6, abs=1e-6)
