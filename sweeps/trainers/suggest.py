"""A metrics block from a log: every preset and built-in format is tried on a log a script
printed (or a TensorBoard folder, or a JSON document), and the readings that give checked
records with a step are ranked (an eval loss first, then more records, then more metrics).
Used by ``sweep run … --dry-run --sample-log FILE`` when the study has no metrics block."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepscale.sweeps.trainers.line_formats import EVAL_LOSS, MetricsSpec, read_metrics
from stepscale.sweeps.trainers.metrics_file import MalformedRecord
from stepscale.sweeps.trainers.presets import PRESETS
from stepscale.sweeps.trainers.record_stream import RecordStream, parse_text
from stepscale.sweeps.trainers.structured_sources import JsonDocumentSource, TensorBoardSource

# The names of the built-in formats' tries: common spellings of a step and an eval loss.
COMMON_NAMES = {
    "iter": "step",
    "iteration": "step",
    "global_step": "step",
    "num_updates": "step",
    "val_loss": "eval_loss",
    "valid_loss": "eval_loss",
    "validation_loss": "eval_loss",
    "eval/loss": "eval_loss",
    "val/loss": "eval_loss",
}
LINE_FORMATS = ("kv_colon", "kv_equals", "kv_pipes", "json", "csv")


@dataclass
class Reading:
    """One block that reads the log, and what it gives."""

    block: dict[str, Any]
    records: list[dict[str, Any]]

    def rank(self) -> tuple[int, int, int]:
        evals = sum(EVAL_LOSS in r for r in self.records)
        keys = len({k for r in self.records for k in r})
        return (evals > 0, len(self.records), keys)


def read_file(
    spec: MetricsSpec, path: Path, settings: dict[str, Any] | None = None
) -> tuple[list[dict[str, Any]], Any]:
    """Every record ``path`` gives with ``spec`` (a log, a TensorBoard folder or event file,
    a JSON document), checked (`UnreliableStep`), and the stream."""
    stream = RecordStream(spec, settings)
    if spec.format == "tensorboard":
        root = path if path.is_dir() else path.parent
        source = TensorBoardSource(spec, root, stream)
        source.files = {}  # a sample: every file is read
        return source.final(), stream
    if spec.format == "json_document":
        source = JsonDocumentSource(spec, path, stream)
        source.seen = 0
        return source.final(), stream
    text = path.read_bytes().decode("utf-8", errors="replace")  # \r kept: bars are bars
    return parse_text(spec, text, settings)


def _candidates(path: Path) -> list[dict[str, Any]]:
    out = [{"preset": name} for name in PRESETS]
    if path.is_file():
        try:
            doc = json.loads(path.read_bytes())
        except ValueError:
            doc = None
        if isinstance(doc, dict | list):
            keys = (
                [k for k, v in doc.items() if isinstance(v, list)]
                if isinstance(doc, dict)
                else [None]
            )
            for key in keys:
                block: dict[str, Any] = {"source": str(path), "format": "json_document"}
                if key is not None:
                    block["records"] = key
                block["names"] = dict(COMMON_NAMES)
                out.append(block)
    out += [{"source": "stdout", "format": f, "names": dict(COMMON_NAMES)} for f in LINE_FORMATS]
    return out


def suggest(path: Path, settings: dict[str, Any] | None = None) -> list[Reading]:
    """The readings of ``path`` that give ≥ 2 checked records, best first."""
    out = []
    for block in _candidates(path):
        try:
            spec = read_metrics(block)
            if spec.format in ("tensorboard",) and not (path.is_dir() or "tfevents" in path.name):
                continue
            records, _ = read_file(spec, path, settings)
        except (MalformedRecord, ValueError, OSError):
            continue
        if len(records) >= 2 and len({r["step"] for r in records}) >= 2:
            if "names" in block and "preset" not in block:
                seen = {k for r in records for k in r} | _given_keys(spec, path, settings)
                block["names"] = {k: v for k, v in block["names"].items() if k in seen} or {}
                if not block["names"]:
                    del block["names"]
            out.append(Reading(block, records))
    return sorted(out, key=lambda r: r.rank(), reverse=True)


def _given_keys(spec: MetricsSpec, path: Path, settings: dict[str, Any] | None) -> set[str]:
    """The script's own names the log has (before mapping), to keep only the names used."""
    raw = MetricsSpec(spec.source, spec.format, spec.patterns, {}, records=spec.records)
    try:
        records, _ = read_file(raw, path, settings)
    except (MalformedRecord, ValueError, OSError):
        return set(spec.names)
    return {k for r in records for k in r} | {"step"}


__all__ = ["Reading", "read_file", "suggest"]
