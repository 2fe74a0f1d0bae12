"""The critical batch size over training from `sweep branch`'s branches (Merrill et al. 2025).

A branch leaves the base run at step t (examples e_t, eval loss L_t) with batch k·B and runs
for a window of W examples, ending at examples e. The base run, at batch B, reaches loss
L_base(e) at the same examples (its eval curve, log loss interpolated linearly in examples
between evaluations). The branch **keeps up** when it made at least (1 − tolerance) of the
base's progress over the window:

    (L_t − L_branch) ≥ (1 − tolerance) · (L_t − L_base(e)).

With several LR multipliers per batch the best one counts. **B_crit(t)** is the largest
tested k·B that keeps up together with every smaller tested batch (a lucky large branch
after a failed smaller one does not count). When all keep up, B_crit(t) ≥ the largest
tested batch (censored above); when the smallest does not, B_crit(t) < it (censored below).
The default tolerance ½ is McCandlish et al.'s definition: at B = B_crit a run needs twice
the minimal examples, i.e. makes half the progress per example.

Pure functions (:func:`progress_ratio`, :func:`critical_batch`, :func:`loss_at`) judge the
numbers; :func:`measurements` reads ``RUN_DIR/branches/*/`` (``branch.json``, the branches'
and the base trial's files).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepscale import files, rundir
from stepscale.analysis.fits.records import Record

ABOVE, BELOW = "above", "below"


@dataclass(frozen=True)
class Branch:
    """One branch as judged: its batch, LR, end and progress relative to the base."""

    label: str
    step: int
    factor: float
    batch: int
    lr: float
    lr_multiplier: float
    state: str | None  # the branch trial's state (None: not run yet)
    examples_end: int | None
    loss_start: float | None
    loss_end: float | None
    loss_base: float | None
    ratio: float | None  # None: not judged (running, or the base made no progress)
    keeps_up: bool | None


@dataclass(frozen=True)
class StepResult:
    """B_crit at one branch step."""

    step: int
    examples: int
    tokens: int
    base_batch: int
    b_crit: float | None
    censored: str | None  # above | below | None
    tested: tuple[int, ...]  # the batch sizes judged at this step
    complete: bool  # every branch of the step is judged
    branches: tuple[Branch, ...] = field(default=())


@dataclass(frozen=True)
class Measurement(Record):
    """One `sweep branch` measurement: the base trial and B_crit at each step."""

    base: str
    window_examples: int
    lr_rule: str
    tolerance: float
    tokens_per_example: int
    steps: tuple[StepResult, ...]
    # the base's B_simple as (step, examples, value), when it logged one
    noise_scale: tuple[tuple[int, int, float], ...]


# ------------------------------------------------------------------- the rule


def loss_at(curve: Sequence[tuple[float, float]], x: float) -> float | None:
    """The loss of a curve of (x, loss) points at ``x``: exact at a point, log-linear
    between the two around it (linear when a loss is not positive); None outside."""
    pts = sorted((float(a), float(b)) for a, b in curve if math.isfinite(b))
    for (x0, l0), (x1, l1) in itertools.pairwise(pts):
        if x0 <= x <= x1:
            if x1 == x0 or x == x0:
                return l0
            frac = (x - x0) / (x1 - x0)
            if l0 > 0 and l1 > 0:
                return math.exp(math.log(l0) + frac * (math.log(l1) - math.log(l0)))
            return l0 + frac * (l1 - l0)
    if pts and pts[-1][0] == x:
        return pts[-1][1]
    return None


def progress_ratio(loss_start: float, loss_branch: float, loss_base: float) -> float | None:
    """The branch's progress over the window as a fraction of the base's; −inf for a
    branch whose loss is not finite, None when the base made no progress to compare with."""
    if not math.isfinite(loss_base) or loss_start - loss_base <= 0:
        return None
    if not math.isfinite(loss_branch):
        return -math.inf
    return (loss_start - loss_branch) / (loss_start - loss_base)


def keeps_up(ratio: float | None, tolerance: float) -> bool | None:
    """Whether a branch with this progress ratio keeps up with the base."""
    return None if ratio is None else ratio >= 1.0 - tolerance


def critical_batch(judged: Sequence[tuple[int, bool]]) -> tuple[float | None, str | None]:
    """(B_crit, censoring) from (batch, keeps up) pairs: the largest batch that keeps up with
    every smaller one; (largest, "above") when all do; (None, "below") when the smallest
    does not."""
    ordered = sorted(judged)
    if not ordered:
        return None, None
    best = None
    for batch, ok in ordered:
        if not ok:
            break
        best = batch
    if best is None:
        return None, BELOW
    return float(best), ABOVE if best == ordered[-1][0] else None


# ------------------------------------------------------------------- the files


def measurements(run_dir: str | Path) -> list[Measurement]:
    """Every `sweep branch` measurement of a run dir (none: an empty list)."""
    root = Path(run_dir) / rundir.BRANCHES_DIR
    out = []
    for folder in sorted(root.glob("*")) if root.is_dir() else []:
        record = files.read_json(folder / rundir.BRANCH_JSON, lenient=True)
        if isinstance(record, dict) and record.get("points"):
            out.append(_measure(Path(run_dir), folder, record))
    return out


def _records(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and "step" in rec:
            out.append(rec)
    return out


def _eval_curve(records: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(examples, eval loss) of every evaluation with a finite loss."""
    return [
        (float(r["examples"]), float(r["eval_loss"]))
        for r in records
        if r.get("eval_loss") is not None and r.get("examples") is not None
    ]


def _measure(run_dir: Path, folder: Path, record: dict[str, Any]) -> Measurement:
    base_id = str(record["base"])
    base_dir = run_dir / rundir.TRIALS_DIR / base_id
    base_records = _records(base_dir / rundir.METRICS_JSONL)
    base_curve = _eval_curve(base_records)
    base_status = files.read_json(base_dir / rundir.STATUS_JSON, lenient=True) or {}
    tpe = _tokens_per_example(base_status)
    tolerance = float(record.get("tolerance", 0.5))
    by_step: dict[int, list[Branch]] = {}
    starts: dict[int, tuple[int, int]] = {}
    for p in record["points"]:
        step = int(p["step"])
        starts[step] = (int(p["base_examples"]), int(p["base_batch"]))
        by_step.setdefault(step, []).append(
            _judge(folder, p, base_curve, tolerance, int(p["base_examples"]))
        )
    steps = []
    for step in sorted(by_step):
        branches = by_step[step]
        best: dict[int, Branch] = {}
        for b in branches:  # the best LR multiplier of each batch
            if b.keeps_up is None:
                continue
            if b.batch not in best or (b.ratio or -math.inf) > (best[b.batch].ratio or -math.inf):
                best[b.batch] = b
        judged = [(batch, bool(b.keeps_up)) for batch, b in best.items()]
        b_crit, censored = critical_batch(judged)
        examples, base_batch = starts[step]
        steps.append(
            StepResult(
                step=step,
                examples=examples,
                tokens=examples * tpe,
                base_batch=base_batch,
                b_crit=b_crit,
                censored=censored,
                tested=tuple(sorted(best)),
                complete=all(b.keeps_up is not None for b in branches),
                branches=tuple(sorted(branches, key=lambda b: (b.batch, b.lr_multiplier))),
            )
        )
    noise = tuple(
        (int(r["step"]), int(r.get("examples") or 0), float(r["noise_scale"]))
        for r in base_records
        if isinstance(r.get("noise_scale"), int | float) and math.isfinite(r["noise_scale"])
    )
    return Measurement(
        base=base_id,
        window_examples=int(record.get("window_examples", 0)),
        lr_rule=str(record.get("lr_rule", "")),
        tolerance=tolerance,
        tokens_per_example=tpe,
        steps=tuple(steps),
        noise_scale=noise,
    )


def _tokens_per_example(status: dict[str, Any]) -> int:
    tokens, examples = status.get("tokens_per_step"), status.get("examples_per_step")
    if isinstance(tokens, int | float) and isinstance(examples, int | float) and examples:
        return max(1, round(tokens / examples))
    return 1


def _judge(
    folder: Path,
    p: dict[str, Any],
    base_curve: list[tuple[float, float]],
    tolerance: float,
    start_examples: int,
) -> Branch:
    """One branch against the base: its end (final evaluation), the base at the same
    examples, and the progress ratio."""
    trial = folder / rundir.TRIALS_DIR / str(p["label"]) / "0"
    status = files.read_json(trial / rundir.STATUS_JSON, lenient=True) or {}
    state = status.get("state")
    final = state in rundir.TRAINER_FINAL_STATES
    curve = _eval_curve(_records(trial / rundir.METRICS_JSONL))
    examples_end = status.get("examples_done") if final else None
    loss_end: float | None = None
    if final:
        last = curve[-1] if curve else None
        nonfinite = state == rundir.DIVERGED and status.get("final_eval_loss") is None
        loss_end = math.inf if nonfinite or last is None else last[1]
    loss_start = loss_at(base_curve, start_examples)
    loss_base = loss_at(base_curve, float(examples_end)) if examples_end is not None else None
    ratio = None
    if final and loss_start is not None and loss_base is not None and loss_end is not None:
        ratio = progress_ratio(loss_start, loss_end, loss_base)
    return Branch(
        label=str(p["label"]),
        step=int(p["step"]),
        factor=float(p["factor"]),
        batch=int(p["batch"]),
        lr=float(p["lr"]),
        lr_multiplier=float(p.get("lr_multiplier", 1.0)),
        state=state if isinstance(state, str) else None,
        examples_end=int(examples_end) if examples_end is not None else None,
        loss_start=loss_start,
        loss_end=loss_end,
        loss_base=loss_base,
        ratio=ratio,
        keeps_up=keeps_up(ratio, tolerance),
    )


def summary(run_dir: str | Path, base: str | None = None) -> dict[str, Any]:
    """JSON of the measurements of a run dir (of one base trial's, given ``base``): what
    `sweep branch` prints."""
    found = [m for m in measurements(run_dir) if base is None or m.base == base]
    return {"run_dir": str(run_dir), "measurements": [m.to_dict() for m in found]}


def dataset_attr(run_dir: str | Path) -> str | None:
    """The measurements as a JSON string for the Dataset's ``branches`` attribute (None:
    the run dir has none)."""
    found = measurements(run_dir)
    if not found:
        return None
    return json.dumps([m.to_dict() for m in found], sort_keys=True, allow_nan=False)


def from_dataset(attr: str | None) -> list[dict[str, Any]]:
    """The measurements a Dataset's ``branches`` attribute holds (plain dicts)."""
    if not attr:
        return []
    try:
        value = json.loads(attr)
    except ValueError:
        return []
    return value if isinstance(value, list) else []
