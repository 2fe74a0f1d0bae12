"""Claims with statistics (analysis.claims): the one-sided Welch test against scipy on
constructed data, the verdict's wording, the seeds-needed estimate, and the claims of
the ramp comparison and the ablation."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import xarray as xr
from run_dirs import Spec, make_run_dir
from scipy import stats

from stepscale.analysis.ablation import ablation_table, confirm_claims
from stepscale.analysis.claim_estimate import confirm_estimates
from stepscale.analysis.claims import claim, seeds_needed, welch_test
from stepscale.analysis.compare import write_comparison
from stepscale.analysis.course import ramp_comparison
from stepscale.analysis.report.blocks import to_markdown
from stepscale.analysis.report.course import ramp_section

# Constructed arms: A is 5 steps faster on average (means 30.9 and 35.9), unequal spread.
A = [30.0, 31.0, 29.0, 33.0, 31.5]
B = [35.0, 37.0, 33.0, 38.0, 36.5]


def test_the_one_sided_welch_p_value_matches_scipy_to_1e_6() -> None:
    t = welch_test(A, B)
    assert t is not None and t.diff == pytest.approx(-5.0) and (t.n_a, t.n_b) == (5, 5)
    want = stats.ttest_ind(A, B, equal_var=False, alternative="less")
    assert abs(t.p_less - want.pvalue) < 1e-6
    assert t.dof == pytest.approx(want.df, rel=1e-9)
    # by hand: se² = var(A)/5 + var(B)/5, p = P(T_dof ≤ −5 / se)
    se = math.sqrt(np.var(A, ddof=1) / 5 + np.var(B, ddof=1) / 5)
    assert t.p_less == pytest.approx(stats.t.cdf(-5.0 / se, t.dof), abs=1e-12)
    # the 98% interval (level 0.01) lies below 0 exactly because p < 0.01
    assert t.p_less < 0.01 and t.hi < 0
    assert (t.lo, t.hi) == pytest.approx(
        (-5 - stats.t.ppf(0.99, t.dof) * se, -5 + stats.t.ppf(0.99, t.dof) * se)
    )
    reverse = welch_test(B, A)
    assert reverse is not None
    greater = stats.ttest_ind(B, A, equal_var=False, alternative="less").pvalue
    assert abs(reverse.p_less - greater) < 1e-6 and reverse.p_less > 0.99


def test_a_shown_claim_states_p_and_seeds_and_a_weak_one_is_not_shown() -> None:
    shown = claim("ramp", A, "constant", B, "steps", "steps")
    assert shown.shown
    text = shown.sentence()
    assert text.startswith(
        "ramp reaches the target in fewer steps than constant: shown at p < 0.01"
    )
    assert f"one-sided Welch p = {shown.test.p_less:.2g}" in text and "n = 5 vs 5 seeds" in text
    weak = claim("ramp", A[:3], "constant", [31.0, 32.0, 28.5], "steps", "steps")
    assert not weak.shown
    assert ": not shown with 3 seeds (p ≥ 0.01)" in weak.sentence()
    assert "seeds per arm would show a difference this size" in weak.sentence()
    lost = claim("ramp", [*A, math.nan], "constant", B, "steps", "steps", level=0.05)
    assert "n = 5 vs 5 seeds; 1 seed(s) never reached the target, left out" in lost.sentence()
    assert "p < 0.05" in lost.sentence()
    one = claim("ramp", [30.0], "constant", B, "steps", "steps")
    assert one.test is None and "not tested" in one.sentence()


def test_the_seeds_needed_are_the_fewest_that_reach_the_level_with_80_percent_power() -> None:
    a, b = [30.0, 32.0, 29.0], [31.0, 33.5, 30.0]  # Δ = 1.17, sd ≈ 1.5 a side
    n = seeds_needed(a, b, 0.01)
    assert n is not None and n > 3
    d = abs(np.mean(a) - np.mean(b))
    s2 = np.var(a, ddof=1) + np.var(b, ddof=1)

    def power_met(k: int) -> bool:
        va, vb = np.var(a, ddof=1) / k, np.var(b, ddof=1) / k
        dof = (va + vb) ** 2 / (va**2 / (k - 1) + vb**2 / (k - 1))
        return bool((stats.t.ppf(0.99, dof) + stats.t.ppf(0.8, dof)) * math.sqrt(s2 / k) <= d)

    assert power_met(n) and not power_met(n - 1)


def _ramp_dataset() -> xr.Dataset:
    """A constant batch and a ramp, one tune trial and 4 confirm seeds each, crossing the
    target at known steps (the ramp 5 steps faster on average)."""
    steps = {"c": [40.0, *B[:4]], "r": [30.0, *A[:4]]}
    ids, point, kind, cross, ramp = [], [], [], [], []
    for p, samples in (("c", 0), ("r", 1024)):
        for n in range(5):
            ids.append(f"rampup_samples={samples}/{n}")
            point.append(f"rampup_samples={samples}")
            kind.append("tune" if n == 0 else "confirm")
            cross.append(steps[p][n])
            ramp.append(0 if p == "c" else 20)
    grid = np.arange(0, 60, 10)
    meta = [{"name": "rampup_samples", "coord": "rampup_samples", "role": "scientific",
             "path": "data.rampup.samples", "quantity": None}]  # fmt: skip
    return xr.Dataset(
        coords={
            "trial": ("trial", ids),
            "step": ("step", grid),
            "point": ("trial", point),
            "kind": ("trial", kind),
            "rampup_samples": ("trial", [0] * 5 + [1024] * 5),
            "rampup_steps": ("trial", np.array(ramp, float)),
            "steps_to_target_interp": ("trial", cross),
            "examples": (("trial", "step"), np.outer(np.full(10, 64.0), grid)),
        },
        attrs={"parameters": json.dumps(meta), "target_loss": 1.1, "claim_level": 0.01},
    )


class _Analysis:
    """What the ramp section reads of a StudyAnalysis: the best trials and the unit."""

    best: ClassVar[dict[str, int]] = {"rampup_samples=0": 0, "rampup_samples=1024": 5}
    batch_unit = "sequences"


def test_the_ramp_report_states_each_claim_with_its_p_value_and_seeds() -> None:
    ds = _ramp_dataset()
    rec = ramp_comparison(ds, dict(_Analysis.best), "sequences")
    steps, examples = rec.claims
    assert (steps.a, steps.b, steps.what) == ("rampup_samples=1024", "rampup_samples=0", "steps")
    want = stats.ttest_ind(A[:4], B[:4], equal_var=False, alternative="less").pvalue
    assert abs(steps.test.p_less - want) < 1e-6 and steps.shown
    assert examples.what == "examples" and examples.unit == "sequences"
    text = to_markdown(ramp_section(_Analysis(), ds))  # type: ignore[arg-type]
    assert "one-sided Welch t-test at p < 0.01" in text
    assert f"p = {steps.test.p_less:.2g} (n = 4 vs 4 seeds)" in text
    assert "rampup_samples=1024 reaches the target in fewer examples than rampup_samples=0" in text


def test_the_ablation_claims_the_best_tuned_variant_against_each_other() -> None:
    # tune trials: adamw best (20) ahead of lion (25) and sgd (40) at batch 8
    table = ablation_table(
        ["adamw", "lion", "sgd"] * 2, [8.0] * 6, [20.0, 25.0, 40.0, 22.0, 27.0, 44.0],
        [f"t{i}" for i in range(6)], n_boot=50,
    )  # fmt: skip
    confirm_variant = ["adamw"] * 3 + ["lion"] * 3 + ["sgd"] * 3
    confirm_steps = [21.0, 22.0, 20.5, 21.5, 23.0, 22.0, 41.0, 45.0, 43.0]
    with_claims = confirm_claims(table, confirm_variant, [8.0] * 9, confirm_steps)
    (row,) = with_claims.rows
    lion, sgd = row.claims
    assert (lion.a, lion.b, sgd.b) == ("adamw", "lion", "sgd")
    for c, other in ((lion, confirm_steps[3:6]), (sgd, confirm_steps[6:])):
        want = stats.ttest_ind(confirm_steps[:3], other, equal_var=False, alternative="less")
        assert abs(c.test.p_less - want.pvalue) < 1e-6
    assert sgd.shown and not lion.shown and "not shown with 3 seeds" in lion.sentence()
    assert row.to_dict()["claims"][1]["p"] == pytest.approx(sgd.test.p_less)


def test_sweep_report_a_b_tests_the_first_study_against_the_second_per_batch_size(
    tmp_path: Path,
) -> None:
    # Two synthetic studies with known S(B): "fast" needs 0.6× the steps of "slow".
    small = {"batches": (16, 64, 256), "lr_multipliers": (0.5, 1.0, 2.0), "horizon": 8000}
    fast = make_run_dir(
        tmp_path / "fast", Spec(name="fast", s_min=300.0, confirm_seeds=4, jitter=0.05, **small)
    )
    slow = make_run_dir(
        tmp_path / "slow",
        Spec(name="slow", s_min=500.0, confirm_seeds=4, jitter=0.05, seed=1, **small),
    )
    out = write_comparison([fast, slow], tmp_path / "cmp")
    claims = json.loads((tmp_path / "cmp" / "comparison.json").read_text())["claims"]
    assert [c["batch"] for c in claims] == [16, 64, 256]

    def seeds(run: Path, batch: int) -> list[float]:
        folder = run / "trials" / f"batch_size={batch}"
        kinds = {d: json.loads((d / "trial.json").read_text())["kind"] for d in folder.iterdir()}
        return [
            float(json.loads((d / "status.json").read_text())["steps_to_target_interp"])
            for d, kind in sorted(kinds.items())
            if kind == "confirm"
        ]

    for c in claims:
        a, b = seeds(fast, int(c["batch"])), seeds(slow, int(c["batch"]))
        want = stats.ttest_ind(a, b, equal_var=False, alternative="less").pvalue
        assert (c["a"], c["b"], c["n_a"], c["n_b"]) == ("fast", "slow", 4, 4)
        assert abs(c["p"] - want) < 1e-6 and c["shown"]
    report = (Path(out["report_dir"]) / "report.md").read_text()
    assert (
        "batch 16 sequences: fast reaches the target in fewer steps than slow: shown at p < 0.01"
        in report
    )


def test_the_dry_run_estimate_lists_each_ablation_claim_with_the_seeds_it_needs(
    tmp_path: Path,
) -> None:
    # adamw needs 0.97× lion's steps: too close for 3 seeds at 5% jitter; sgd is far behind.
    truth = {"adamw": (300.0, 128.0), "lion": (310.0, 128.0), "sgd": (600.0, 128.0)}
    spec = Spec(
        variants=("adamw", "lion", "sgd"), variant_truth=truth, batches=(32, 128),
        lr_multipliers=(0.5, 1.0, 2.0), horizon=8000, confirm_seeds=3, jitter=0.05,
    )  # fmt: skip
    found = confirm_estimates(make_run_dir(tmp_path / "abl", spec))
    assert len(found) == 4  # per batch size: adamw vs lion, adamw vs sgd
    by = {(c["a"], c["b"]): c for c in found[:2]}
    sgd, lion = by["adamw", "sgd"], by["adamw", "lion"]
    assert sgd["shown"]
    assert sgd["estimate"].startswith("adamw fewer steps than sgd at batch 32 sequences: shown")
    assert not lion["shown"] and "not shown with 3 seeds" in lion["estimate"]
    # the difference points the claimed way: the seeds that would show one this size
    assert lion["diff"] < 0 and lion["seeds_needed"] > 3
    assert lion["estimate"].endswith(f"budget.confirm_seeds={lion['seeds_needed']}")
