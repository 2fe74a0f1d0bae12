"""Reporters (`stepscale.trainer.Reporter`): where a trainer's records go.

`JsonlReporter` is the default: it writes
``metrics.jsonl`` (one JSON object per logged step) and ``status.json`` in the run dir,
as docs/run-dir.md describes (names and keys: `stepscale.rundir`). Other reporters
(Optuna's, in `sweeps/`) wrap or replace it.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from stepscale import rundir
from stepscale.files import write_json_atomic, write_text_atomic
from stepscale.trainer import Action, Reporter

__all__ = ["Action", "JsonlReporter", "NullReporter", "Reporter", "dumps", "truncate_jsonl"]


def finite_or_none(value: Any) -> Any:
    """JSON has no NaN/inf: non-finite floats become None (the run's state says why)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def dumps(record: dict[str, Any]) -> str:
    """One record as a compact JSON line with non-finite numbers written as null."""
    clean = {k: finite_or_none(v) for k, v in record.items()}
    return json.dumps(clean, separators=(",", ":"), allow_nan=False)


def truncate_jsonl(path: Path, last_step: int) -> None:
    """Keep only the records of ``path`` with ``step`` ≤ ``last_step`` (resume)."""
    if not path.exists():
        return
    kept = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:  # a line cut short by a crash
                continue
            if rec.get("step", 0) <= last_step:
                kept.append(line)
    write_text_atomic(path, "".join(k + "\n" for k in kept))


class JsonlReporter:
    """Writes ``metrics.jsonl`` and ``status.json`` into ``run_dir``."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(run_dir)
        self.metrics_path = self.run_dir / rundir.METRICS_JSONL
        self.status_path = self.run_dir / rundir.STATUS_JSON
        self._file: Any = None

    def begin(self, step: int) -> None:
        """Open the metrics file, dropping records after ``step`` when resuming."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if step > 0:
            truncate_jsonl(self.metrics_path, step)
        elif self.metrics_path.exists():
            self.metrics_path.unlink()
        self._file = open(self.metrics_path, "a")  # noqa: SIM115  (kept open across reports)
        write_json_atomic(self.status_path, {"state": rundir.RUNNING, "steps_done": step})

    def rewind(self, step: int) -> None:
        """Forget the records after ``step`` (a spike restart went back to it)."""
        if self._file is not None:
            self._file.close()
        truncate_jsonl(self.metrics_path, step)
        self._file = open(self.metrics_path, "a")  # noqa: SIM115  (kept open across reports)

    def report(self, step: int, metrics: dict[str, Any]) -> Action:
        """Append one line; never asks to stop."""
        self._file.write(dumps({"step": step, **metrics}) + "\n")
        self._file.flush()
        return Action.CONTINUE

    def finish(self, status: dict[str, Any]) -> None:
        """Close the metrics file and write the final status."""
        if self._file is not None:
            self._file.close()
            self._file = None
        write_json_atomic(self.status_path, {k: finite_or_none(v) for k, v in status.items()})


class NullReporter:
    """Keeps records in memory (tests, benchmarks, programmatic use)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.status: dict[str, Any] | None = None

    def begin(self, step: int) -> None:
        """Forget records after ``step``."""
        self.records = [r for r in self.records if r["step"] <= step]

    def rewind(self, step: int) -> None:
        """Forget records after ``step`` (a spike restart went back to it)."""
        self.records = [r for r in self.records if r["step"] <= step]

    def report(self, step: int, metrics: dict[str, Any]) -> Action:
        """Remember the record."""
        self.records.append({"step": step, **metrics})
        return Action.CONTINUE

    def finish(self, status: dict[str, Any]) -> None:
        """Remember the status."""
        self.status = status
