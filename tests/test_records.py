"""The one serializer of the analysis records (analysis/fits/records.py): its conversion
rules, the field metadata, the per-record hook, and the key order of the JSON that
`sweep fit` prints unsorted."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stepscale.analysis.fits.hparams import fit_hparam_laws
from stepscale.analysis.fits.records import (
    BATCH,
    OMIT,
    Record,
    as_json,
    columns_to_rows,
    insert_before,
    json_ready,
    rows_to_record,
)
from stepscale.analysis.fits.steps import fit_steps


def test_json_ready_makes_strict_json_of_numpy_nan_tuples_and_paths() -> None:
    value = {
        1: (np.float64(1.5), np.int64(3), np.bool_(True), math.nan, -math.inf),
        "a": np.array([[1.0, np.nan]]),
        "p": Path("/x/y"),
        "s": np.str_("t"),
    }
    out = json_ready(value)
    assert out == {"1": [1.5, 3, True, None, None], "a": [[1.0, None]], "p": "/x/y", "s": "t"}
    assert [type(v) for v in out["1"][:3]] == [float, int, bool]
    json.dumps(out, allow_nan=False)


@dataclass(frozen=True)
class _Inner:
    name: str
    hidden: int = field(metadata=OMIT)


@dataclass(frozen=True)
class _Outer(Record):
    batch: float = field(metadata=BATCH)
    sizes: tuple[float, ...] = field(metadata=as_json("batch_sizes", batch=True))
    lo: float = field(metadata=as_json("range", "lo"))
    hi: float = field(metadata=as_json("range", "hi"))
    inner: _Inner
    pairs: tuple[tuple[str, float], ...]

    def _json(self, fields: dict[str, Any]) -> dict[str, Any]:
        fields = insert_before(fields, "inner", {"n": len(self.sizes)})
        return fields | {"pairs": [{"k": k, "v": v} for k, v in self.pairs]}


def test_record_dict_follows_the_field_metadata_and_the_hook() -> None:
    rec = _Outer(64.0, (16.0, 24.5), 0.5, math.nan, _Inner("x", 3), (("a", math.inf),))
    d = rec.to_dict()
    assert d == {
        "batch": 64,
        "batch_sizes": [16, 24.5],
        "range": {"lo": 0.5, "hi": None},
        "n": 2,
        "inner": {"name": "x"},
        "pairs": [{"k": "a", "v": None}],
    }
    assert list(d) == ["batch", "batch_sizes", "range", "n", "inner", "pairs"]
    assert type(d["batch"]) is int
    with pytest.raises(KeyError):
        insert_before({"a": 1}, "b", {"c": 2})


@dataclass(frozen=True)
class _Columns:
    x: tuple[float, ...]
    y: tuple[str, ...]


def test_rows_and_columns_are_inverse() -> None:
    rec = rows_to_record(_Columns, [{"x": 1.0, "y": "a"}, {"x": 2.0, "y": "b"}])
    assert rec == _Columns((1.0, 2.0), ("a", "b"))
    assert columns_to_rows({"x": rec.x, "y": rec.y}) == [{"x": 1.0, "y": "a"}, {"x": 2.0, "y": "b"}]
    assert rows_to_record(_Columns, []) == _Columns((), ())


def test_sweep_fit_keys_keep_their_order() -> None:
    # `sweep fit` prints its JSON without sorting keys: the records' field order is it.
    batch = [16, 32, 64, 128, 256]
    fit = fit_steps(batch, [500 * (1 + 128 / b) for b in batch], n_boot=20)
    assert list(fit.to_dict()) == [
        "s_min", "e_min", "b_crit", "b_crit_ci", "s_min_ci", "e_min_ci", "cbs", "cbs_ci",
        "overhead", "reference_batch", "regions", "n_points", "not_reached", "censored_at",
        "batch_sizes", "steps", "fitted_steps", "residuals", "residual_std", "confidence",
        "n_boot", "seed", "warnings", "under_tuned",
    ]  # fmt: skip
    assert list(fit.to_dict()["regions"]) == [
        "perfect_scaling_max_batch",
        "max_parallelism_min_batch",
    ]
    rows = [
        {"n": n, "lr": lr, "loss": (math.log(lr) - math.log(1e-3 * n**-0.5)) ** 2}
        for n in (1.0, 4.0, 16.0)
        for lr in (1e-4, 3e-4, 1e-3, 3e-3)
    ]
    laws = fit_hparam_laws(rows, "loss", ["lr"], ["n"], band=0.5, n_boot=20).to_dict()
    assert list(laws) == [
        "band",
        "n_cells",
        "n_runs",
        "n_kept",
        "laws",
        "confidence",
        "n_boot",
        "seed",
    ]
    assert list(laws["laws"]["lr"]) == [
        "coefficient", "exponents", "ci", "coefficient_ci", "regressors", "n_runs", "residual_std",
    ]  # fmt: skip
