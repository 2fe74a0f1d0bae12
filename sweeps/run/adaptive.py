"""Adaptive batch sizes as a study runs (``scientific.<alias>.adaptive``).

The study starts with ``initial`` batch sizes spread in log B (`sweeps.study.adaptive_axis`).
Whenever every point it has is finished (all its trials in a final state), S(B) is fitted
to their steps to result and :func:`stepscale.analysis.fits.design.next_batch` decides:
add a batch size the fit needs around the B_crit estimate, else the candidate that narrows
the B_crit interval most per example, or stop (``max_points`` reached, the interval within
a factor ``ci_ratio`` with the estimate covered, no candidate left). Deciding only
between points keeps the decisions a function of finished results, whatever the
parallelism. A point added is an ordinary point: label ``batch_size=64``, its own Optuna
study, trials under ``trials/batch_size=64/``.

Each decision — the points it saw, the fit, the batch size added or why it stopped — is
appended to ``RUN_DIR/adaptive.json`` (the record every orchestrator of the study reads:
the points it lists are the study's), and ``study.json`` lists the points as they grow.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from stepscale.files import read_json, write_json_atomic
from stepscale.rundir import ADAPTIVE_JSON, STATUS_JSON, STUDY_JSON, trial_dir
from stepscale.sweeps.run import budget
from stepscale.sweeps.study.adaptive_axis import adaptive_alias, candidates, initial_values
from stepscale.sweeps.study.adaptive_record import (
    ADAPTIVE_SCHEMA,
    added_values,
    restore_points,
    saved_record,
)
from stepscale.sweeps.study.files import study_points
from stepscale.sweeps.study.schema import StudyConfig
from stepscale.sweeps.study.space import Point, SearchSpace
from stepscale.sweeps.study.trials import now_iso

TrialsOf = Callable[[Point], list[FrozenTrial]]


def point_finished(trials: list[FrozenTrial], cfg: StudyConfig) -> bool:
    """Every trial of the point is final and it needs no other (its budget is run)."""
    if any(t.state in (TrialState.RUNNING, TrialState.WAITING) for t in trials):
        return False
    return budget.needs(cfg.budget, trials) is None


def fewest_steps_to_target(run_dir: Path, point: Point, trials: list[FrozenTrial]) -> float | None:
    """The fewest steps to target of the point's tune trials (their status.json), or None
    when none reached it."""
    best: float | None = None
    for t in trials:
        if t.user_attrs.get("kind", "tune") != "tune" or t.state != TrialState.COMPLETE:
            continue
        status = read_json(trial_dir(run_dir, point.label, t.number) / STATUS_JSON, lenient=True)
        steps = (status or {}).get("steps_to_target")
        if isinstance(steps, (int, float)) and (best is None or steps < best):
            best = float(steps)
    return best


class AdaptiveRun:
    """The adaptive axis of one study in one run dir."""

    def __init__(self, cfg: StudyConfig, run_dir: Path) -> None:
        alias = adaptive_alias(cfg)
        assert alias is not None
        self.cfg = cfg
        self.alias = alias
        self.axis = cfg.scientific[alias].adaptive
        self.run_dir = run_dir
        self.file = run_dir / ADAPTIVE_JSON

    @classmethod
    def of(cls, cfg: StudyConfig, run_dir: Path) -> AdaptiveRun | None:
        """The study's adaptive axis, or None when it has none."""
        return cls(cfg, run_dir) if adaptive_alias(cfg) is not None else None

    # ------------------------------------------------------------------ the record
    def record(self) -> dict[str, Any]:
        """adaptive.json as it is, or the record of a study that has not decided yet."""
        saved = saved_record(self.run_dir)
        if saved is not None:
            return saved
        a = self.axis
        return {
            "schema": ADAPTIVE_SCHEMA,
            "axis": self.alias,
            "path": self.cfg.scientific[self.alias].path,
            "settings": {
                "low": a.low,
                "high": a.high,
                "ratio": a.ratio,
                "initial": a.initial,
                "max_points": a.max_points,
                "ci_ratio": a.ci_ratio,
            },
            "candidates": candidates(a),
            "initial": initial_values(a),
            "decisions": [],
            "stopped": None,
        }

    def added(self, record: dict[str, Any] | None = None) -> list[Any]:
        """The batch sizes the decisions so far added (in order)."""
        return added_values(self.record() if record is None else record)

    def restore(self, space: SearchSpace, record: dict[str, Any] | None = None) -> SearchSpace:
        """``space`` with the points added by earlier decisions (by any orchestrator)."""
        return restore_points(space, self.alias, self.record() if record is None else record)

    # ------------------------------------------------------------------ deciding
    def grow(self, space: SearchSpace, trials_of: TrialsOf) -> SearchSpace:
        """Decide once every point is finished; returns the space with any point added.
        Call under the run dir's lock (the decision reads and writes the record)."""
        rec = self.record()
        restored = self.restore(space, rec)
        if restored.points != space.points:  # another orchestrator added points
            return restored
        a = self.axis
        limits = {"max_points": a.max_points, "ci_ratio": a.ci_ratio}
        settings = rec.setdefault("settings", {})
        if not space.points or (
            rec.get("stopped") and all(settings.get(k) == v for k, v in limits.items())
        ):
            return space  # stopped under these limits (raised ones decide again)
        per_point = {p.label: trials_of(p) for p in space.points}
        if not all(point_finished(t, self.cfg) for t in per_point.values()):
            return space
        sizes, steps, missed = [], [], []
        for p in space.points:
            s = fewest_steps_to_target(self.run_dir, p, per_point[p.label])
            value = float(p.values[self.alias])
            if s is None:
                missed.append(value)
            else:
                sizes.append(value)
                steps.append(s)
        from stepscale.analysis.fits.design import next_batch  # numpy/scipy: only when used

        decision = next_batch(
            sizes,
            steps,
            [float(p.values[self.alias]) for p in space.candidates],
            max_points=a.max_points,
            ci_ratio=a.ci_ratio,
            not_reached=missed,
            seed=self.cfg.seed,
        )
        entry = {"decided": now_iso(), **decision.to_dict()}
        entry["steps_to_result"] = [
            {"batch": b, "steps": s} for b, s in zip(decision_batches(sizes), steps, strict=True)
        ]
        entry["not_reached"] = decision_batches(missed)
        rec["stopped"] = None
        if decision.batch is not None:
            chosen = next(
                p for p in space.candidates if float(p.values[self.alias]) == decision.batch
            )
            entry["batch"] = chosen.values[self.alias]
            entry["point"] = chosen.label
            space = space.with_point(chosen.label)
        else:
            rec["stopped"] = decision.reason
        settings.update(limits)
        rec["decisions"] = [*rec.get("decisions", []), entry]
        write_json_atomic(self.file, rec)
        self._record_points(space)
        return space

    def _record_points(self, space: SearchSpace) -> None:
        """study.json lists the points as they are now (``sweep status``, the analysis)."""
        study = read_json(self.run_dir / STUDY_JSON, lenient=True)
        if not isinstance(study, dict):
            return
        study["points"] = study_points(space)
        study.setdefault("scientific_values", {})[self.alias] = {
            "values": [p.values[self.alias] for p in space.points],
            "adaptive": True,
        }
        study["adaptive"] = ADAPTIVE_JSON
        write_json_atomic(self.run_dir / STUDY_JSON, study)


def decision_batches(values: list[float]) -> list[int | float]:
    """Batch sizes for JSON: whole numbers as ints."""
    return [int(v) if float(v).is_integer() else v for v in values]
