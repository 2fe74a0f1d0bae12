"""adaptive.json as the study's files read it: the batch sizes an adaptive axis has added so
far, and the space with their points (the decisions themselves are made as the study runs,
`stepscale.sweeps.run.adaptive`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stepscale.files import read_json
from stepscale.rundir import ADAPTIVE_JSON
from stepscale.sweeps.study.adaptive_axis import adaptive_alias
from stepscale.sweeps.study.schema import StudyConfig
from stepscale.sweeps.study.space import SearchSpace, point_label

ADAPTIVE_SCHEMA = "stepscale.adaptive/v1"  # the format of adaptive.json


def saved_record(run_dir: Path) -> dict[str, Any] | None:
    """adaptive.json of a run dir, or None when there is none (or not of this format)."""
    saved = read_json(run_dir / ADAPTIVE_JSON, lenient=True)
    return saved if isinstance(saved, dict) and saved.get("schema") == ADAPTIVE_SCHEMA else None


def added_values(record: dict[str, Any]) -> list[Any]:
    """The batch sizes a record's decisions added (in order)."""
    return [d["batch"] for d in record.get("decisions", []) if d.get("batch") is not None]


def restore_points(space: SearchSpace, alias: str, record: dict[str, Any]) -> SearchSpace:
    """``space`` with the points a record's decisions added (by any orchestrator)."""
    left = {p.label for p in space.candidates}
    for value in added_values(record):
        label = point_label({alias: value})
        if label in left:
            space = space.with_point(label)
            left.discard(label)
    return space


def restored_space(cfg: StudyConfig, run_dir: Path, space: SearchSpace) -> SearchSpace:
    """The study's space as its run dir knows it: with the points an adaptive axis has
    added so far (``space`` itself for a study without one, or before any decision)."""
    alias = adaptive_alias(cfg)
    record = saved_record(run_dir) if alias is not None else None
    return space if alias is None or record is None else restore_points(space, alias, record)
