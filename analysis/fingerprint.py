"""A study's trials as one comparable value: what each trial was (point, number, kind,
seed, its nuisance values) and how it ended (state, told objective, steps trained).
Two runs of one config and seed give the same fingerprint when their decisions do not
depend on completion order (docs/science.md, "The same trials at any parallelism");
`benchmarks/repro_parallelism.py` and the tests compare them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from stepscale.files import read_json
from stepscale.rundir import STATUS_JSON, TRIAL_JSON

# What a trial is and how it ended; not when, where or by whom it ran.
TRIAL_KEYS = ("point", "number", "kind", "seed", "nuisance", "state", "objective")


def trial_rows(run_dir: Path) -> list[dict[str, Any]]:
    """Per trial (sorted by point and number): its :data:`TRIAL_KEYS` and steps trained."""
    rows = []
    for path in sorted((Path(run_dir) / "trials").glob(f"*/*/{TRIAL_JSON}")):
        record = read_json(path, lenient=True) or {}
        status = read_json(path.with_name(STATUS_JSON), lenient=True) or {}
        row = {k: record.get(k) for k in TRIAL_KEYS}
        row["steps_done"] = status.get("steps_done")
        rows.append(row)
    return sorted(rows, key=lambda r: (str(r["point"]), int(r["number"] or 0)))


def params_hash(run_dir: Path) -> str:
    """A short hash of :func:`trial_rows` (nuisance values to 12 significant digits)."""

    def rounded(x: Any) -> Any:
        if isinstance(x, float):
            return float(f"{x:.12g}")
        if isinstance(x, dict):
            return {k: rounded(v) for k, v in x.items()}
        return x

    text = json.dumps([rounded(r) for r in trial_rows(run_dir)], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
