"""Scaling-law fits on synthetic data with known answers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from stepscale.analysis.fits import (
    bcrit_at_targets,
    first_crossing,
    fit_bcrit_vs_target,
    fit_hparam_laws,
    fit_lr_law,
    fit_steps,
    noise_scale_summary,
    optimal_lr,
    spread_over_seeds,
    steps_at_target,
    steps_to_result,
)
from stepscale.analysis.fits.steps import _profile_refit

B11 = np.geomspace(16, 16384, 11)
S_MIN, B_CRIT = 2000.0, 512.0


def s_of_b(b: np.ndarray, s_min: float = S_MIN, b_crit: float = B_CRIT) -> np.ndarray:
    return s_min * (1 + b_crit / b)


def strict_json(d: dict) -> str:
    return json.dumps(d, allow_nan=False)


# ------------------------------------------------------------------ steps to result


def test_steps_to_result_minimum_and_censoring() -> None:
    batch = [32, 32, 32, 64, 64, 128, 128, 256]
    steps = [900, 700, math.nan, None, math.inf, 400, 300, math.nan]
    horizon = [1000, 1000, 1000, 2000, 3000, 1000, 1000, math.nan]
    res = steps_to_result(batch, steps, horizon)
    assert res.batch_sizes == (32.0, 128.0)
    assert res.steps == (700.0, 300.0)
    assert res.n_rows == (3, 2)
    assert res.not_reached == (64.0, 256.0)
    assert res.censored_at == (3000.0, None)  # largest horizon; unknown when none given
    d = res.to_dict()
    assert d["not_reached"] == [64, 256] and isinstance(d["not_reached"][0], int)
    strict_json(d)


def test_steps_to_result_rejects_bad_batch_sizes() -> None:
    with pytest.raises(ValueError, match="positive"):
        steps_to_result([0, 16], [10, 10])
    with pytest.raises(ValueError, match="differ in length"):
        steps_to_result([8, 16], [10])


# ------------------------------------------------------------------------ S(B) fit


def test_fit_steps_recovers_exact_curve_and_derived_quantities() -> None:
    fit = fit_steps(B11, s_of_b(B11), overhead=0.1, n_boot=200)
    assert fit.s_min == pytest.approx(S_MIN, rel=1e-6)
    assert fit.b_crit == pytest.approx(B_CRIT, rel=1e-6)
    assert fit.e_min == pytest.approx(S_MIN * B_CRIT, rel=1e-6)
    assert fit.reference_batch == 16.0  # smallest batch measured
    assert fit.cbs == pytest.approx(1.1 * 16 + 0.1 * B_CRIT, rel=1e-6)
    assert fit.perfect_scaling_max_batch == pytest.approx(0.1 * B_CRIT, rel=1e-6)
    assert fit.max_parallelism_min_batch == pytest.approx(B_CRIT / 0.1, rel=1e-6)
    assert max(abs(r) for r in fit.residuals) < 1e-8
    assert fit.n_points == 11 and fit.not_reached == ()
    assert fit.warnings == ()
    # At B = B_crit a run costs 2·S_min steps.
    assert fit.predict([B_CRIT])[0] == pytest.approx(2 * S_MIN, rel=1e-6)
    d = fit.to_dict()
    strict_json(d)
    assert d["overhead"] == 0.1 and d["reference_batch"] == 16


def test_fit_steps_leaves_out_a_batch_size_that_needed_more_steps_than_a_smaller_one() -> None:
    # S(B) = 500 (1 + 128/B) exactly, but 1024 under-tuned: 2.5× the steps of 512 (which
    # needs 625). It is left out, and the fit is the exact curve's; 10% over a smaller
    # batch size's steps is within one evaluation's luck and stays in.
    batch = [16, 32, 64, 128, 256, 512, 1024]
    steps = [500 * (1 + 128 / b) for b in batch]
    bad = [*steps[:-1], 2.5 * steps[-2]]
    fit = fit_steps(batch, bad, n_boot=50)
    assert fit.under_tuned == (1024.0,) and 1024.0 not in fit.batch_sizes
    assert fit.b_crit == pytest.approx(128, rel=1e-6)
    assert "1024 needed 1562.5 steps, more than 1.25× the 625 of the smaller 512" in fit.warnings[0]
    assert fit.to_dict()["under_tuned"] == [1024]
    kept = fit_steps(batch, bad, n_boot=0, monotone=False)
    assert kept.under_tuned == () and kept.b_crit < 0.8 * 128  # one point tilts the curve
    near = fit_steps(batch, [*steps[:-1], 1.1 * steps[-2]], n_boot=0)
    assert near.under_tuned == () and 1024.0 in near.batch_sizes
    # with too few batch sizes left, the refusal names the one left out, not only the rest
    with pytest.raises(ValueError) as refused:
        fit_steps([16, 64, 256], [300.0, 250.0, 400.0], not_reached=[1024], n_boot=0)
    assert str(refused.value) == (
        "fitting S(B) needs at least 3 batch sizes that reached the target; got 2 ([16, 64]), "
        "not reached: [1024]; left out as under-tuned: 256 (needed 400 steps, more than 1.25× "
        "the 250 of the smaller 64)"
    )


def test_fit_steps_echoes_reference_batch() -> None:
    fit = fit_steps(B11, s_of_b(B11), reference_batch=100, overhead=0.2, n_boot=0)
    assert fit.reference_batch == 100
    assert fit.cbs == pytest.approx(1.2 * 100 + 0.2 * B_CRIT, rel=1e-6)
    assert fit.to_dict()["b_crit_ci"] == [None, None]  # no bootstrap → null, not NaN


def test_fit_steps_acceptance_accuracy_and_coverage() -> None:
    """100 noisy datasets: median |B_crit error| ≤ 5 %, 95 % intervals cover ≥ 85 %."""
    errors, covered, covered_s = [], 0, 0
    for seed in range(100):
        rng = np.random.default_rng(10_000 + seed)
        steps = s_of_b(B11) * np.exp(rng.normal(0.0, 0.05, B11.size))
        fit = fit_steps(B11, steps, n_boot=1000, seed=seed)
        errors.append(abs(fit.b_crit / B_CRIT - 1))
        covered += fit.b_crit_ci[0] <= B_CRIT <= fit.b_crit_ci[1]
        covered_s += fit.s_min_ci[0] <= S_MIN <= fit.s_min_ci[1]
    assert np.median(errors) <= 0.05
    assert covered >= 85
    assert covered_s >= 85
    # Not absurdly wide either: coverage must come from accuracy, not from huge intervals.
    assert fit.b_crit_ci[1] / fit.b_crit_ci[0] < 2.0


def test_bootstrap_refit_agrees_with_least_squares() -> None:
    rng = np.random.default_rng(3)
    steps = s_of_b(B11) * np.exp(rng.normal(0.0, 0.05, B11.size))
    fit = fit_steps(B11, steps, n_boot=0)
    x = np.log(B11)
    a, b = _profile_refit(x, np.log(steps)[None, :], math.log(B11[5]), x.min() - 14, x.max() + 14)
    assert math.exp(b[0]) == pytest.approx(fit.b_crit, rel=1e-6)
    assert math.exp(a[0]) == pytest.approx(fit.s_min, rel=1e-6)


def test_fit_steps_is_deterministic_for_a_seed() -> None:
    rng = np.random.default_rng(4)
    steps = s_of_b(B11) * np.exp(rng.normal(0.0, 0.05, B11.size))
    one = fit_steps(B11, steps, n_boot=300, seed=1)
    two = fit_steps(B11, steps, n_boot=300, seed=1)
    other = fit_steps(B11, steps, n_boot=300, seed=2)
    assert one.b_crit_ci == two.b_crit_ci
    assert one.b_crit_ci != other.b_crit_ci
    assert one.b_crit == other.b_crit


def test_batch_without_success_does_not_corrupt_fit() -> None:
    rng = np.random.default_rng(5)
    steps = s_of_b(B11) * np.exp(rng.normal(0.0, 0.05, B11.size))
    clean = fit_steps(B11, steps, n_boot=300)
    # An extra small batch size that never reached the target within 3000 steps, given
    # as a NaN row, plus one given through not_reached with its horizon.
    batch = [*B11, 8.0]
    with_nan = fit_steps(batch, [*steps, math.nan], n_boot=300, not_reached={4.0: 3000.0})
    assert with_nan.b_crit == clean.b_crit
    assert with_nan.b_crit_ci == clean.b_crit_ci
    assert with_nan.n_points == 11
    assert with_nan.not_reached == (4.0, 8.0)
    assert with_nan.censored_at == (3000.0, None)
    # The fit predicts S(4) ≈ 258k > 3000, consistent: no warning about it.
    assert not any("did not reach" in w for w in with_nan.warnings)
    assert with_nan.to_dict()["not_reached"] == [4, 8]


def test_censoring_contradiction_is_warned() -> None:
    fit = fit_steps(B11, s_of_b(B11), n_boot=0, not_reached={16384.0 * 2: 10_000.0})
    assert any("did not reach the target within 10000" in w for w in fit.warnings)


def test_duplicate_rows_use_minimum() -> None:
    batch = np.concatenate([B11, B11])
    steps = np.concatenate([s_of_b(B11), 1.5 * s_of_b(B11)])
    fit = fit_steps(batch, steps, n_boot=0)
    assert fit.b_crit == pytest.approx(B_CRIT, rel=1e-6)
    assert fit.n_points == 11


def test_too_few_points_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="at least 3 batch sizes"):
        fit_steps([16, 32, 64], [100, 60, math.nan])
    with pytest.raises(ValueError, match="overhead"):
        fit_steps(B11, s_of_b(B11), overhead=0)


def test_unidentified_bcrit_is_flagged() -> None:
    # S ∝ 1/B everywhere: perfect scaling over the measured range, B_crit unbounded.
    fit = fit_steps(B11, 1e7 / B11, n_boot=50)
    assert fit.warnings and "B_crit" in fit.warnings[0]
    assert fit.b_crit > B11.max()
    strict_json(fit.to_dict())


# ------------------------------------------------------------ B_crit vs target (Kaplan)


def test_fit_bcrit_vs_target_recovers_law() -> None:
    targets = np.array([2.0, 2.5, 3.0, 3.5, 4.0])
    b_star, alpha_b = 5000.0, 0.21
    rng = np.random.default_rng(0)
    bc = b_star / targets ** (1 / alpha_b) * np.exp(rng.normal(0, 0.02, targets.size))
    law = fit_bcrit_vs_target(targets, bc)
    assert law.alpha_b == pytest.approx(alpha_b, rel=0.05)
    assert law.slope_ci[0] <= -1 / alpha_b <= law.slope_ci[1]
    assert law.b_star == pytest.approx(b_star, rel=0.15)
    assert law.predict([3.0])[0] == pytest.approx(b_star / 3.0 ** (1 / alpha_b), rel=0.05)
    strict_json(law.to_dict())
    with pytest.raises(ValueError, match="2 distinct"):
        fit_bcrit_vs_target([2.0], [10.0])


def test_first_crossing_strict_and_log_linear() -> None:
    steps = np.array([0, 100, 200, 300])
    loss = np.exp(-0.01 * steps) * 4  # log-linear in step: interpolation is exact
    target = 4 * math.exp(-0.01 * 150)
    first, interp = first_crossing(steps, loss, target)
    assert first == 200
    assert interp == pytest.approx(150, rel=1e-9)
    # Equal to the target is not strictly below.
    assert first_crossing(steps, loss, float(loss[2]))[0] == 300
    # Already below at the first evaluation: the step itself.
    assert first_crossing(steps, loss, 10.0) == (0.0, 0.0)
    assert all(math.isnan(v) for v in first_crossing(steps, loss, 0.01))
    # Non-finite losses (diverged evals) are skipped; unsorted input is sorted.
    f2, i2 = first_crossing([300, 0, 100, 200], [loss[3], loss[0], math.nan, loss[2]], target)
    assert f2 == 200 and 0 < i2 < 200


def _synthetic_curves() -> tuple[dict, dict, float, float]:
    """Curves whose steps to L follow S_min(L)(1 + B_crit(L)/B), B_crit(L) = B*/L^(1/α_B)."""
    b_star, alpha_b = 100.0, 0.5
    levels = np.geomspace(4.0, 1.0, 400)  # loss values visited, decreasing
    curves, batch = {}, {}
    for i, b in enumerate([4, 8, 16, 32, 64, 128, 256, 512, 1024]):
        s_min = 200.0 / levels**2
        b_crit = b_star / levels ** (1 / alpha_b)
        steps = s_min * (1 + b_crit / b)
        curves[f"t{i}"] = (steps, levels)
        batch[f"t{i}"] = b
        # A second trial per batch size, worse (slower): the minimum must ignore it.
        curves[f"u{i}"] = (steps * 1.3, levels)
        batch[f"u{i}"] = b
    return curves, batch, b_star, alpha_b


def test_steps_at_target_and_bcrit_at_targets() -> None:
    curves, batch, b_star, alpha_b = _synthetic_curves()
    cs = steps_at_target(curves, batch, 2.0)
    res = cs.result(interpolated=True)
    expected = 200 / 4 * (1 + b_star / 2**2 / np.array(res.batch_sizes))
    np.testing.assert_allclose(res.steps, expected, rtol=2e-3)
    strict_json(cs.to_dict())
    # A target below every curve: all censored at each trial's last evaluated step.
    low = steps_at_target(curves, batch, 0.5).result()
    assert low.batch_sizes == () and len(low.not_reached) == 9
    out = bcrit_at_targets(curves, batch, [1.5, 2.0, 3.0, 0.5], interpolated=True, n_boot=100)
    assert set(out.fits) == {1.5, 2.0, 3.0}
    assert 0.5 in out.skipped
    assert out.fits[2.0].b_crit == pytest.approx(b_star / 4, rel=0.01)
    assert out.law is not None
    assert out.law.alpha_b == pytest.approx(alpha_b, rel=0.02)
    strict_json(out.to_dict())


def _evaluated(curves: dict, every: float, cut: float | None = None) -> dict:
    """The synthetic curves as a trainer logs them: evaluated every ``every`` steps from
    step 0 (loss 4), and with ``cut`` stopped at the first evaluation below it."""
    out = {}
    for trial, (steps, levels) in curves.items():
        at = np.arange(0.0, float(steps.max()), every)
        loss = np.interp(at, np.concatenate([[0.0], steps]), np.concatenate([[4.0], levels]))
        if cut is not None:
            below = np.flatnonzero(loss < cut)
            at, loss = at[: below[0] + 1], loss[: below[0] + 1]
        out[trial] = (at, loss)
    return out


def test_bcrit_at_targets_flags_targets_the_evaluations_cannot_resolve() -> None:
    curves, batch, _, alpha_b = _synthetic_curves()
    ev = _evaluated(curves, 10.0)
    out = bcrit_at_targets(ev, batch, [1.5, 2.0, 3.0, 3.9], interpolated=True, n_boot=200)
    # L = 3.9 is reached within 2 evaluations (≤ 20 steps) at most batch sizes.
    assert set(out.fits) == {1.5, 2.0, 3.0, 3.9} and set(out.flagged) == {3.9}
    assert "first 2 evaluations" in out.flagged[3.9]
    assert out.well_posed == (1.5, 2.0, 3.0)
    assert out.law is not None and out.law.targets == (1.5, 2.0, 3.0)
    assert out.law.alpha_b == pytest.approx(alpha_b, rel=0.1)
    d = out.to_dict()
    assert [f["well_posed"] for f in d["fits"]] == [True, True, True, False]
    strict_json(d)
    # With fewer well-posed targets than the law needs: no law, and a note saying so.
    two = bcrit_at_targets(ev, batch, [2.0, 3.0, 3.9], n_boot=200)
    assert two.law is None and "2 here (2, 3)" in (two.law_note or "")
    # Everything reached at the first evaluation (B ≥ 256: never evaluated after step 0):
    # flat S(B), B_crit at the bound of the fit.
    coarse = bcrit_at_targets(_evaluated(curves, 400.0), batch, [3.9], n_boot=0)
    problem = coarse.flagged[3.9]
    assert "at 6 of 6 batch sizes" in problem and "not identified" in problem


def test_bcrit_at_targets_with_curves_cut_at_a_target() -> None:
    curves, batch, _, _ = _synthetic_curves()
    cut = _evaluated(curves, 10.0, cut=2.0)
    stopped = dict.fromkeys(cut, 2.0)
    out = bcrit_at_targets(cut, batch, [1.5, 2.0, 3.0], cut_at=stopped, n_boot=100)
    # Below the cut every run is unknown (stopped), not censored: skipped, saying why.
    assert set(out.skipped) == {1.5} and "stop_at_target" in out.skipped[1.5]
    assert set(out.fits) == {2.0, 3.0} and not out.flagged
    # Without cut_at the same curves look censored at their last evaluation.
    assert "stop_at_target" not in bcrit_at_targets(cut, batch, [1.5], n_boot=0).skipped[1.5]


def test_spread_over_seeds_and_noise_scale_summary() -> None:
    spread = spread_over_seeds([64, 64, 64, 128, 128], [100, 120, math.nan, 50, 70])
    assert spread.batch_sizes == (64.0, 128.0)
    assert spread.n == (3, 2) and spread.n_reached == (2, 2)
    assert spread.mean == (110.0, 60.0)
    assert spread.std[0] == pytest.approx(math.sqrt(200))
    assert spread.min == (100.0, 50.0) and spread.max == (120.0, 70.0)
    strict_json(spread.to_dict())

    steps = np.arange(0, 1001, 10)
    b_simple = np.where(steps < 500, 1.0, 100.0)  # early transient, then settled
    b_simple[-1] = math.nan
    summ = noise_scale_summary(steps, b_simple)
    assert summ.median == 100.0 and summ.from_step == 500.0 and summ.n == 50
    strict_json(summ.to_dict())


# ------------------------------------------------------------------ optimal LR vs batch


def _lr_trials(alpha: float, seed: int, b: np.ndarray, c: float = 3e-4, n: int = 16):
    rng = np.random.default_rng(seed)
    lrs, objs, bs = [], [], []
    for size in b:
        eta = c * size**alpha
        x = rng.uniform(-2.5, 2.5, n)
        lrs += list(eta * np.exp(x))
        objs += list(2.0 + 0.05 * x**2 + rng.normal(0, 0.003, n))
        bs += [size] * n
    return np.array(lrs), np.array(objs), np.array(bs)


@pytest.mark.parametrize("alpha", [0.5, 1.0, 0.0])
def test_lr_law_acceptance(alpha: float) -> None:
    """Fitted α within 0.05 of the truth on synthetic tuned trials."""
    b = np.geomspace(8, 1024, 8)
    worst = 0.0
    for seed in range(10):
        lr, obj, bs = _lr_trials(alpha, seed, b)
        opt = optimal_lr(lr, obj, bs)
        assert opt.batch_sizes == tuple(b)
        assert not any(opt.at_edge)
        law = fit_lr_law(opt.batch_sizes, opt.lr_opt)
        worst = max(worst, abs(law.alpha - alpha))
    assert worst <= 0.05
    rules = {r.name: r for r in law.rules}
    truth = {0.5: "sqrt", 1.0: "linear", 0.0: "constant"}[alpha]
    assert law.closest_rule == truth
    assert rules[truth].inside_ci
    assert [r for r in rules.values() if r.inside_ci] == [rules[truth]]
    strict_json(law.to_dict())
    strict_json(opt.to_dict())


def test_optimal_lr_smooths_between_trials() -> None:
    # A grid that straddles the optimum: the best trial is off by a factor ~1.4, the
    # quadratic recovers the optimum itself.
    lr = np.geomspace(1e-4, 1e-1, 13)
    eta = 4.2e-3
    obj = 1.0 + 0.1 * np.log(lr / eta) ** 2
    opt = optimal_lr(lr, obj, np.full(lr.size, 64))
    assert opt.method == ("quadratic",)
    assert opt.lr_opt[0] == pytest.approx(eta, rel=1e-6)
    assert abs(math.log(opt.best_lr[0] / eta)) > 0.1


def test_optimal_lr_edge_flags() -> None:
    lr = np.geomspace(1e-4, 1e-2, 7)
    # Optimum beyond the largest LR tried.
    rising = optimal_lr(lr, 1.0 + 0.1 * np.log(lr / 1.0) ** 2, np.full(7, 32))
    assert rising.at_edge == (True,)
    assert rising.lr_opt[0] == pytest.approx(1e-2)
    inner = 1.0 + 0.1 * np.log(lr / 1e-3) ** 2
    assert optimal_lr(lr, inner, np.full(7, 32)).at_edge == (False,)
    # An interior optimum close to a given search bound is flagged.
    near = optimal_lr(lr, inner, np.full(7, 32), bounds=(9e-4, 1e-1))
    assert near.at_edge == (True,)
    with pytest.raises(ValueError, match="finite objective"):
        optimal_lr([1e-3, 1e-2], [math.nan, math.inf], [8, 8])


def test_optimal_lr_diverged_trial_extends_tried_range() -> None:
    lr = np.geomspace(1e-4, 1e-2, 7)
    obj = 1.0 + 0.1 * np.log(lr / 1e-1) ** 2  # best finite trial is the largest LR…
    alone = optimal_lr(lr, obj, np.full(7, 32))
    lr2 = np.append(lr, 3e-2)
    with_div = optimal_lr(lr2, np.append(obj, math.nan), np.full(8, 32))  # …but 3e-2 diverged
    assert alone.at_edge == (True,)
    assert with_div.at_edge == (False,)
    assert with_div.n_trials == (8,)


def test_fit_lr_law_b_max_and_saturating_form() -> None:
    b = np.geomspace(8, 8192, 11)
    eps_max, b_noise = 1e-2, 2000.0
    rng = np.random.default_rng(0)
    eps = eps_max / (1 + b_noise / b) * np.exp(rng.normal(0, 0.02, b.size))
    law = fit_lr_law(b, eps, b_max=200)
    # Far below B_noise ε ≈ ε_max·B/B_noise: α ≈ 1 on the small batch sizes.
    assert law.n_points == 5
    assert abs(law.alpha - 1.0) < 0.1
    everything = fit_lr_law(b, eps)
    assert everything.alpha < 0.8  # saturation bends the unrestricted power law
    sat = law.saturating
    assert sat is not None and sat.identified
    assert sat.b_noise == pytest.approx(b_noise, rel=0.15)
    assert sat.eps_max == pytest.approx(eps_max, rel=0.05)
    with pytest.raises(ValueError, match="at least 2"):
        fit_lr_law(b, eps, b_max=8)


# ---------------------------------------------------------------- hyperparameter laws


def _hparam_runs(seed: int, runs_per_cell: int = 80) -> dict[str, list[float]]:
    """lr* = 0.3·N^-0.25·D^0.1 and bs* = 0.5·D^0.3, with a loss bowl around them."""
    rng = np.random.default_rng(seed)
    cols: dict[str, list[float]] = {k: [] for k in ("loss", "lr", "bs", "N", "D")}
    for n_params in np.geomspace(1e6, 1e9, 5):
        for d in np.geomspace(1e8, 1e11, 5):
            lr_opt = 0.3 * n_params**-0.25 * d**0.1
            bs_opt = 0.5 * d**0.3
            floor = 1.5 + (n_params / 1e6) ** -0.3
            lr = lr_opt * np.exp(rng.uniform(-1, 1, runs_per_cell))
            bs = bs_opt * np.exp(rng.uniform(-1, 1, runs_per_cell))
            bowl = 1 + 0.02 * np.log(lr / lr_opt) ** 2 + 0.02 * np.log(bs / bs_opt) ** 2
            loss = floor * bowl + rng.normal(0, 3e-4, runs_per_cell)
            for k, v in zip(("loss", "lr", "bs"), (loss, lr, bs), strict=True):
                cols[k] += list(v)
            cols["N"] += [n_params] * runs_per_cell
            cols["D"] += [d] * runs_per_cell
    return cols


def test_hparam_laws_acceptance() -> None:
    truth = {"lr": {"N": -0.25, "D": 0.1}, "bs": {"N": 0.0, "D": 0.3}}
    worst = 0.0
    for seed in range(3):
        res = fit_hparam_laws(_hparam_runs(seed), "loss", ["lr", "bs"], ["N", "D"], n_boot=500)
        for h, exps in truth.items():
            for x, a in exps.items():
                worst = max(worst, abs(res.laws[h].exponents[x] - a))
    assert worst <= 0.05
    assert res.n_cells == 25 and res.n_runs == 2000
    assert 25 <= res.n_kept < 2000
    lo, hi = res.laws["lr"].ci["N"]
    assert lo < -0.25 < hi and hi - lo < 0.1
    assert res.laws["lr"].coefficient == pytest.approx(0.3, rel=0.5)
    d = res.to_dict()
    strict_json(d)
    assert set(d) >= {"band", "n_cells", "laws"}
    assert set(d["laws"]["lr"]) >= {"coefficient", "exponents", "ci"}


def test_hparam_laws_band_and_custom_regressors() -> None:
    rows = [
        # cell N=1: best 2.0; 2.004 is within 0.0025 (< 2.005), 2.005 is not (strict).
        {"N": 1.0, "D": 10.0, "loss": 2.0, "lr": 1.0},
        {"N": 1.0, "D": 10.0, "loss": 2.004, "lr": 1.0},
        {"N": 1.0, "D": 10.0, "loss": 2.005, "lr": 50.0},
        {"N": 1.0, "D": 10.0, "loss": math.nan, "lr": 50.0},
        {"N": 10.0, "D": 20.0, "loss": 1.0, "lr": 0.1},
        {"N": 100.0, "D": 40.0, "loss": 0.5, "lr": 0.01},
    ]
    res = fit_hparam_laws(rows, "loss", ["lr"], ["N", "D"], laws={"lr": ["N"]}, n_boot=100)
    assert res.n_cells == 3 and res.n_kept == 4
    law = res.laws["lr"]
    assert law.regressors == ("N",)
    assert law.exponents["N"] == pytest.approx(-1.0)
    assert law.coefficient == pytest.approx(1.0)
    # Band 0: only each cell's best.
    assert fit_hparam_laws(rows, "loss", ["lr"], ["N"], band=0.0, n_boot=0).n_kept == 3


def test_hparam_laws_errors() -> None:
    rows = {"loss": [1.0, 1.0], "lr": [0.1, 0.2], "N": [5.0, 5.0]}
    with pytest.raises(ValueError, match="single value"):
        fit_hparam_laws(rows, "loss", ["lr"], ["N"], band=0.1)
    with pytest.raises(ValueError, match="'wd' not found"):
        fit_hparam_laws(rows, "loss", ["wd"], ["N"])
    bad = {"loss": [1.0, 2.0, 3.0], "lr": [0.0, 0.1, 0.1], "N": [1.0, 2.0, 3.0]}
    with pytest.raises(ValueError, match="positive"):
        fit_hparam_laws(bad, "loss", ["lr"], ["N"])
    with pytest.raises(ValueError, match="not among"):
        fit_hparam_laws(rows, "loss", ["lr"], ["N"], laws={"wd": ["N"]})


def test_a_trial_that_ended_above_its_initial_loss_counts_as_diverged_for_eta(
    tmp_path: Path,
) -> None:
    """A finite loss far above where training started (an LR past the stability edge) is
    not fitted: one such trial bent the local quadratic to a negative loss at η*."""
    from run_dirs import START_LOSS, Spec, make_run_dir

    from stepscale.analysis import load
    from stepscale.analysis.analyze import analyze, usable_objective

    run = make_run_dir(tmp_path / "run", Spec(objective="final_eval_loss"))
    (blown,) = [
        p
        for p in (run / "trials" / "batch_size=64").glob("*/trial.json")
        if json.loads(p.read_text())["nuisance"]["lr"] == pytest.approx(1e-3 * 2 * 4.0)
    ]
    record = json.loads(blown.read_text())
    record["objective"] = 10 * START_LOSS
    blown.write_text(json.dumps(record))
    ds = load(run)
    (group,) = analyze(ds).groups
    opt = group.optimal_lr
    assert any("1 trial(s) ended with a loss above their initial loss" in n for n in group.notes)
    # The same η* as with that trial left out altogether.
    rows = (ds["point"].values == "batch_size=64") & (ds["kind"].values == "tune")
    rows &= ds["trial"].values != f"batch_size=64/{blown.parent.name}"
    lr = ds["param_lr"].values.astype(float)
    alone = optimal_lr(lr[rows], usable_objective(ds)[rows], np.full(rows.sum(), 64.0))
    i = opt.batch_sizes.index(64.0)
    assert opt.lr_opt[i] == pytest.approx(alone.lr_opt[0])
    assert opt.objective_opt[i] >= 0.99 * min(alone.best_objective)


def test_hparam_law_intervals_survive_degenerate_resamples_where_scipy_gives_nan() -> None:
    # Why the case bootstrap is ours and not scipy.stats.bootstrap: with few runs, some
    # resamples hold a single value of the regressor. Ours drops those replicates; scipy's
    # interval (any method) becomes NaN.
    import warnings

    from scipy import stats

    from stepscale.analysis.fits.hparams import _fit_law

    b = np.array([8.0, 8.0, 8.0, 16.0, 32.0])
    lr = 0.01 * b**0.5 * np.array([1.0, 1.05, 0.95, 1.0, 1.0])
    cols = {"lr": lr, "b": b}
    law = _fit_law("lr", ["b"], cols, np.ones(5, bool), 1000, np.random.default_rng(0), 0.95)
    lo, hi = law.ci["b"]
    assert math.isfinite(lo) and math.isfinite(hi) and lo <= 0.5 <= hi

    x, y = np.log(b), np.log(lr)

    def slope(i: np.ndarray, axis: int = -1) -> np.ndarray:
        xb, yb = x[i], y[i]
        xc = xb - xb.mean(axis=-1, keepdims=True)
        v = (xc**2).sum(-1)
        with np.errstate(all="ignore"):
            return np.where(v > 0, (xc * yb).sum(-1) / v, np.nan)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for method in ("percentile", "BCa"):
            ci = stats.bootstrap(
                (np.arange(5),), slope, vectorized=True, method=method, n_resamples=1000,
                random_state=0,
            ).confidence_interval  # fmt: skip
            assert math.isnan(ci.low) or math.isnan(ci.high), method
