"""An adaptive batch-size axis in the config (``scientific.<alias>.adaptive``): its checks,
its candidate batch sizes and the ones a study starts with. What happens as the study
runs is `stepscale.sweeps.run.adaptive`; the rule that picks the next batch size is
:func:`stepscale.analysis.fits.design.next_batch`."""

from __future__ import annotations

import math

from stepscale.errors import UsageError
from stepscale.rundir import BATCH_PATH, BATCH_SIZE
from stepscale.sweeps.study.schema import AdaptiveAxis, ScientificParam, StudyConfig


def adaptive_alias(cfg: StudyConfig) -> str | None:
    """The alias of the study's adaptive axis, or None."""
    return next((a for a, p in cfg.scientific.items() if p.adaptive.enabled), None)


def candidates(a: AdaptiveAxis) -> list[int | float]:
    """low·ratio^k for k = 0, 1, … up to high (whole numbers when low and ratio are)."""
    assert a.low is not None and a.high is not None
    whole = float(a.low).is_integer() and float(a.ratio).is_integer()
    out: list[int | float] = []
    k = 0
    while True:
        v = a.low * a.ratio**k
        if v > a.high * (1 + 1e-9):
            break
        value: int | float = round(v) if whole else float(f"{v:.12g}")
        if value not in out:
            out.append(value)
        k += 1
    return out


def initial_values(a: AdaptiveAxis) -> list[int | float]:
    """The ``initial`` candidates a study starts with, spread evenly in log B (both ends
    included)."""
    from stepscale.analysis.fits.design import initial_batches  # the one definition

    grid = candidates(a)
    chosen = set(initial_batches(grid, a.initial))
    return [v for v in grid if float(v) in chosen]


def check_adaptive(cfg: StudyConfig) -> None:
    """An adaptive axis that cannot run → `UsageError` naming the key."""
    alias = adaptive_alias(cfg)
    if alias is None:
        return
    p: ScientificParam = cfg.scientific[alias]
    a = p.adaptive
    key = f"scientific.{alias}.adaptive"
    others = [x for x in cfg.scientific if x != alias]
    if others:
        raise UsageError(
            f"{key}: adaptive batch sizes need the batch size to be the study's only "
            f"scientific axis (also found: {', '.join(others)})"
        )
    if p.values:
        raise UsageError(
            f"{key}: give scientific.{alias}.values or adaptive, not both (adaptive "
            f"chooses the values)"
        )
    if p.path != BATCH_PATH and p.quantity != BATCH_SIZE:
        raise UsageError(
            f"{key}: only a batch-size axis can be adaptive (path {BATCH_PATH}, or "
            f"quantity: batch_size); {p.path} is not one"
        )
    if cfg.objective.kind != "steps_to_target":
        raise UsageError(
            f"{key}: adaptive batch sizes fit S(B), which needs objective.kind="
            f"steps_to_target (got {cfg.objective.kind})"
        )
    if a.low is None or a.high is None:
        raise UsageError(f"{key}: give low and high (the range of batch sizes it may try)")
    if not (math.isfinite(a.low) and math.isfinite(a.high)) or a.low <= 0:
        raise UsageError(f"{key}.low: must be a positive number, got {a.low}")
    if a.low >= a.high:
        raise UsageError(f"{key}: needs low < high, got low={a.low:g}, high={a.high:g}")
    if not a.ratio > 1:
        raise UsageError(f"{key}.ratio: must be > 1 (candidates are low·ratio^k), got {a.ratio}")
    if a.max_points < 3:
        raise UsageError(
            f"{key}.max_points: must be ≥ 3 (S(B) has two parameters: its fit needs 3 batch "
            f"sizes), got {a.max_points}"
        )
    if not 3 <= a.initial <= a.max_points:
        raise UsageError(
            f"{key}.initial: must be between 3 and max_points={a.max_points}, got {a.initial}"
        )
    if not a.ci_ratio > 1:
        raise UsageError(
            f"{key}.ci_ratio: must be > 1 (the factor hi/lo of the B_crit interval at which it "
            f"stops), got {a.ci_ratio}"
        )
    grid = candidates(a)
    if len(grid) < a.initial:
        raise UsageError(
            f"{key}: low={a.low:g}, high={a.high:g} and ratio={a.ratio:g} give only "
            f"{len(grid)} candidate batch sizes ({grid}); initial={a.initial} needs more"
        )
