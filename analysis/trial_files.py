"""One trial's files (trial.json, status.json, metrics.jsonl) → a typed record of arrays;
many trials are parsed in worker processes. `stepscale.analysis.load` builds the Dataset
from these records."""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from stepscale import files, rundir
from stepscale.errors import UsageError

if TYPE_CHECKING:
    pass

# Below this many trials a process pool costs more than it saves.
_PARALLEL_MIN_TRIALS = 200


class RunDirError(UsageError, ValueError):
    """A run directory that is missing, holds no trials, or has an unreadable file (bad
    input: a command exits 2 with the message)."""


def read_json(path: Path, *, required: bool = False) -> Any:
    """A JSON file's content; None when absent and not ``required``; RunDirError if bad."""
    return files.read_json(path, required=required, error=RunDirError)


# --------------------------------------------------------------------- metrics.jsonl


def _parse_lines(path: Path, text: str) -> list[dict[str, Any]]:
    """Line-by-line parse; a cut-short last line (a live or crashed writer) is skipped."""
    lines = [(n, ln.strip()) for n, ln in enumerate(text.splitlines(), 1) if ln.strip()]
    out = []
    for k, (n, line) in enumerate(lines):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if k == len(lines) - 1:
                break
            raise RunDirError(f"{path}, line {n}: not valid JSON") from None
        if not isinstance(rec, dict):
            raise RunDirError(f"{path}, line {n}: not a JSON object")
        out.append(rec)
    return out


def _read_records(path: Path) -> list[Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise RunDirError(f"cannot read {path}: {exc}") from None
    body = text.strip()
    if not body:
        return []
    try:
        # One parse of the whole file as a JSON array is several times faster than one
        # json.loads per line; anything unusual falls back to the careful path.
        return json.loads("[" + body.replace("\n", ",") + "]")
    except json.JSONDecodeError:
        return _parse_lines(path, text)


def _metric_columns(path: Path) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(sorted unique steps, metric → float values at those steps) of one metrics file."""
    recs = _read_records(path)
    if not all(map(dict.__instancecheck__, recs)):
        recs = _parse_lines(path, path.read_text(encoding="utf-8"))
    if not recs:
        return np.empty(0, np.int64), {}
    # Records of one writer share a few key layouts: convert each layout as one 2-D array.
    layouts = list(map(tuple, recs))
    codes = {lay: k for k, lay in enumerate(dict.fromkeys(layouts))}
    code = np.fromiter(map(codes.__getitem__, layouts), dtype=np.int64, count=len(layouts))
    n = len(recs)
    cols: dict[str, np.ndarray] = {}
    for keys, k in codes.items():
        idx = np.flatnonzero(code == k)
        rows = list(map(tuple, map(dict.values, map(recs.__getitem__, idx.tolist()))))
        try:
            block = np.array(rows, dtype=float)
        except (TypeError, ValueError):
            block = _safe_block(rows, len(keys))
        for j, key in enumerate(keys):
            if key not in cols:
                cols[key] = np.full(n, np.nan)
            cols[key][idx] = block[:, j]
    steps = cols.pop("step", np.full(n, np.nan))
    keep = np.isfinite(steps)
    if not keep.any():
        return np.empty(0, np.int64), {}
    # The last record of a step wins (a resumed writer never duplicates, but be safe).
    pos = np.flatnonzero(keep)
    uniq, first_in_reversed = np.unique(steps[pos][::-1], return_index=True)
    pick = pos[::-1][first_in_reversed]
    out = {k: v[pick] for k, v in cols.items() if not np.isnan(v).all() or _numeric(recs, k)}
    return uniq.astype(np.int64), out


def _safe_block(rows: list[tuple[Any, ...]], width: int) -> np.ndarray:
    """Rows with non-numeric cells: those cells become NaN."""
    block = np.full((len(rows), width), np.nan)
    for i, row in enumerate(rows):
        for j, v in enumerate(row):
            if isinstance(v, (int, float)):
                block[i, j] = v
    return block


def _numeric(recs: list[dict[str, Any]], key: str) -> bool:
    """Whether any record holds ``key`` as a number or null (an all-null metric is kept)."""
    return any(key in r and (r[key] is None or isinstance(r[key], (int, float))) for r in recs)


# -------------------------------------------------------------------------- trials


@dataclass
class TrialRecord:
    id: str
    point: str
    number: int
    info: dict[str, Any]
    status: dict[str, Any]
    steps: np.ndarray
    metrics: dict[str, np.ndarray]


def trial_dirs(root: Path) -> list[Path]:
    trials = root / rundir.TRIALS_DIR
    if not trials.is_dir():
        return []
    out = []
    for point in trials.iterdir():
        if not point.is_dir():
            continue
        for tdir in point.iterdir():
            if tdir.is_dir() and any((tdir / f).exists() for f in rundir.TRIAL_FILES):
                out.append(tdir)
    return out


def _read_trial(tdir: Path) -> TrialRecord:
    info = read_json(tdir / rundir.TRIAL_JSON) or {}
    status = read_json(tdir / rundir.STATUS_JSON) or {}
    if not isinstance(info, dict) or not isinstance(status, dict):
        raise RunDirError(f"{tdir}: trial.json and status.json must hold JSON objects")
    point = str(info.get("point") or tdir.parent.name)
    number = info.get("number")
    if not isinstance(number, int):
        try:
            number = int(tdir.name)
        except ValueError:
            raise RunDirError(f"{tdir}: no trial number in trial.json or folder name") from None
    steps, metrics = _metric_columns(tdir / rundir.METRICS_JSONL)
    tid = str(info.get("trial") or f"{point}/{number}")
    return TrialRecord(tid, point, number, info, status, steps, metrics)


def _read_chunk(dirs: list[Path]) -> list[TrialRecord]:
    return [_read_trial(d) for d in dirs]


def read_trials(dirs: list[Path]) -> list[TrialRecord]:
    """Read every trial; many trials are parsed in forked worker processes.

    Parsing JSON dominates loading; forked workers share nothing but the list of folders.
    Fork is only used when this process runs a single thread (forking a threaded
    process can deadlock); otherwise, or when no pool can be made, parse here.
    """
    workers = min(os.cpu_count() or 1, 8)
    # JAX (if something in this process imported it) runs native threads that
    # threading.active_count() does not see; forking then risks a deadlock.
    threaded = threading.active_count() > 1 or "jax" in sys.modules
    if len(dirs) < _PARALLEL_MIN_TRIALS or workers < 2 or threaded:
        return _read_chunk(dirs)
    try:
        ctx = multiprocessing.get_context("fork")
    except ValueError:
        return _read_chunk(dirs)
    n_chunks = workers * 4
    chunks = [dirs[i::n_chunks] for i in range(n_chunks)]
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            parts = list(pool.map(_read_chunk, chunks))
    except (OSError, BrokenProcessPool):
        return _read_chunk(dirs)
    return [t for part in parts for t in part]


def trial_state(t: TrialRecord) -> str:
    state = t.info.get("state") or t.status.get("state") or "running"
    return str(state)


def per_step_count(t: TrialRecord, status_key: str, metric: str) -> float:
    """A per-step count from status.json, else inferred from the logged running total."""
    v = t.status.get(status_key)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    total = t.metrics.get(metric)
    if total is None:
        return math.nan
    ok = (t.steps > 0) & np.isfinite(total)
    if not ok.any():
        return math.nan
    i = np.flatnonzero(ok)[-1]
    return float(total[i] / t.steps[i])
