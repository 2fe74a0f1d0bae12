"""One serializer for the analysis records: a dataclass → its JSON-ready dict.

Every record the analysis writes (fit results, the headline, replay results, claims, health
checks, the report's summary …) is a dataclass whose ``to_dict()`` is :func:`record_dict`:
its fields in order, each made JSON-ready by :func:`json_ready` — floats that are NaN or
±inf → None, numpy scalars and arrays → Python numbers and lists, tuples → lists, mappings
→ dicts with text keys, nested records → their own dicts, paths → text.

Where a record's JSON differs from its fields, the field says so in its metadata
(:func:`as_json`): another key (or a key inside a nested dict), left out, or a batch size
(an int when integral: 64, not 64.0). What a record's JSON adds beyond its fields — derived
keys, rows built from columns, an order of its own — it says in one place, its ``_json``
hook (:class:`Record`), which gets the fields' dict and returns the record's.

Here, in ``analysis.fits``, because the fits' records use it and the orchestrator imports
only ``analysis.fits`` (docs/architecture.md).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any, TypeVar

import numpy as np

from stepscale.analysis.fits.arrays import batch_json

__all__ = [
    "BATCH",
    "OMIT",
    "Record",
    "as_json",
    "columns_to_rows",
    "insert_before",
    "json_ready",
    "record_dict",
    "rows_to_record",
]

R = TypeVar("R")

_META = "stepscale.json"  # the key of a field's metadata this module reads


@dataclasses.dataclass(frozen=True)
class _How:
    key: tuple[str, ...] | None = None
    omit: bool = False
    batch: bool = False


def as_json(*key: str, omit: bool = False, batch: bool = False) -> dict[str, Any]:
    """A field's metadata (``field(metadata=as_json(…))``): written under ``key`` (several
    names: nested, ``as_json("regions", "b")`` writes ``{"regions": {"b": …}}`` where the
    first field nested there stands), left out (``omit``), or a batch size or a sequence of
    them (``batch``: integral ones as ints)."""
    return {_META: _How(key or None, omit, batch)}


OMIT = as_json(omit=True)
BATCH = as_json(batch=True)


def json_ready(value: Any) -> Any:
    """``value`` as JSON-ready Python, recursively: non-finite floats → None, numpy scalars
    and arrays → Python numbers and lists, tuples → lists, mapping keys → text, dataclass
    records → :func:`record_dict`, paths → text."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return record_dict(value)
    if isinstance(value, Mapping):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [json_ready(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        return f if math.isfinite(f) else None
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, PurePath):
        return str(value)
    return value


def record_dict(record: Any) -> dict[str, Any]:
    """A dataclass record as a JSON-ready dict: its fields in order, under the keys their
    :func:`as_json` metadata gives, through the record's ``_json`` hook (:class:`Record`),
    then :func:`json_ready`."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(record):
        how: _How = f.metadata.get(_META, _How())
        if how.omit:
            continue
        value = getattr(record, f.name)
        if how.batch:
            value = _batches(value)
        *outer, last = how.key or (f.name,)
        into = out
        for k in outer:
            into = into.setdefault(k, {})
        into[last] = value
    if isinstance(record, Record):
        out = record._json(out)
    return json_ready(out)


def _batches(value: Any) -> Any:
    """A batch size, or each of a sequence of them, as :func:`batch_json` writes it."""
    if isinstance(value, (list, tuple, np.ndarray)):
        return [batch_json(b) for b in value]
    return batch_json(value)


class Record:
    """A dataclass whose JSON form is :func:`record_dict`; a subclass whose JSON adds to
    its fields overrides :meth:`_json`."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (:func:`record_dict`)."""
        return record_dict(self)

    def _json(self, fields: dict[str, Any]) -> dict[str, Any]:
        """The record's JSON from its fields' (keys as their metadata gives, values not yet
        JSON-ready): where a subclass adds derived keys, rows or an order of its own. By
        default the fields' dict as it is."""
        return fields


def insert_before(d: Mapping[str, Any], key: str, items: Mapping[str, Any]) -> dict[str, Any]:
    """``d`` with ``items`` placed just before ``key`` (a derived key where the JSON has
    always had it); KeyError when ``d`` has no ``key``."""
    if key not in d:
        raise KeyError(key)
    out: dict[str, Any] = {}
    for k, v in d.items():
        if k == key:
            out.update(items)
        out[k] = v
    return out


def columns_to_rows(columns: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Equal-length columns (name → values) as rows: one dict per index, keys in column
    order."""
    names = list(columns)
    return [dict(zip(names, row, strict=True)) for row in zip(*columns.values(), strict=True)]


def rows_to_record(cls: type[R], rows: Sequence[Mapping[str, Any]]) -> R:
    """A record of columns (every field a tuple, one entry per row) from its rows, each a
    mapping field → value: the inverse of :func:`columns_to_rows`."""
    return cls(**{f.name: tuple(r[f.name] for r in rows) for f in dataclasses.fields(cls)})
