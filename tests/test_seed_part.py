"""The training seed's part of B_crit (analysis.fits.seed_part) on synthetic studies with a
known answer: a seed moves every batch size's steps together (a shift that grows toward the
small batch sizes, which moves B_crit) plus noise per batch size. Confirm seeds give that
spread back, the first screen's interval holds other seeds' B_crit about as often as it
says, and a confirm seed that missed the target somewhere is left out."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stepscale.analysis.fits.seed_part import joint_interval, seed_bcrits, seed_part
from stepscale.analysis.fits.steps import StepsFit, fit_steps

BATCH = np.array([4, 8, 16, 32, 64, 128, 256], dtype=float)
S_MIN, B_CRIT = 20.0, 24.0
TAU, SIGMA = 0.15, 0.03  # the seed's shared shift (at small batches), noise per batch size


def _steps(rng: np.random.Generator) -> np.ndarray:
    """Best steps to target per batch size at one training seed."""
    shared = TAU * rng.standard_normal() * (1 / (1 + BATCH / B_CRIT))
    return S_MIN * (1 + B_CRIT / BATCH) * np.exp(shared + SIGMA * rng.standard_normal(BATCH.size))


def _study(rng: np.random.Generator, confirm: int) -> tuple[StepsFit, np.ndarray, ...]:
    """The study at seed 0 (its fit) and its confirm runs at seeds 1 … confirm."""
    fit = fit_steps(BATCH, _steps(rng), n_boot=200, seed=0)
    runs = [(k, _steps(rng)) for k in range(1, confirm + 1)]
    batch = np.concatenate([BATCH for _ in runs]) if runs else np.array([])
    seed = np.concatenate([np.full(BATCH.size, k, float) for k, _ in runs]) if runs else batch
    steps = np.concatenate([s for _, s in runs]) if runs else batch
    return fit, batch, seed, steps


def _bcrit(steps: np.ndarray) -> float:
    return fit_steps(BATCH, steps, n_boot=0).b_crit


def test_confirm_seeds_give_the_seeds_spread_and_the_interval_holds_other_seeds() -> None:
    rng = np.random.default_rng(3)
    truth = np.std([math.log(_bcrit(_steps(rng))) for _ in range(400)])
    inside, fit_inside, sds = [], [], []
    for _ in range(120):
        fit, batch, seed, steps = _study(rng, confirm=4)
        part = seed_part(fit, 0, batch, seed, steps)
        assert part is not None and part.seeds == (0, 1, 2, 3, 4) and part.df == 4
        new = _bcrit(_steps(rng))  # another training seed's answer
        inside.append(part.joint_ci[0] <= new <= part.joint_ci[1])
        fit_inside.append(fit.b_crit_ci[0] <= new <= fit.b_crit_ci[1])
        sds.append(part.sd_log_bcrit)
    assert 0.7 * truth < float(np.median(sds)) < 1.3 * truth, (np.median(sds), truth)
    assert np.mean(inside) >= 0.9, np.mean(inside)  # a 95% interval for another seed
    assert np.mean(fit_inside) < 0.8, np.mean(fit_inside)  # the fit's own misses the seed


def test_the_seeds_part_joins_the_fits_interval_and_says_when_it_is_not_settled() -> None:
    fit, batch, seed, steps = _study(np.random.default_rng(0), confirm=2)
    part = seed_part(fit, 0, batch, seed, steps)
    assert part is not None and len(part.b_crits) == 3 and part.b_crits[0] == fit.b_crit
    lo, hi = part.joint_ci
    assert lo <= min(part.ci[0], fit.b_crit_ci[0]) and max(part.ci[1], fit.b_crit_ci[1]) <= hi
    assert 0 < part.share < 1
    # two seeds that agree exactly: settled; 3 seeds far apart: not (t on 2 degrees of freedom)
    same = seed_part(fit, 0, BATCH, np.ones(BATCH.size), fit.steps)
    assert same is not None and same.settled and same.factor == pytest.approx(1.0)
    lean = 0.3 / (1 + batch / B_CRIT)  # seed 1 much slower at small batches, seed 2 faster
    moved = np.asarray(fit.steps)[np.searchsorted(BATCH, batch)] * np.exp(
        np.where(seed == 1, lean, -lean)
    )
    far = seed_part(fit, 0, batch, seed, moved)
    assert far is not None and not far.settled and far.factor > 1.25
    assert far.b_crits[1] > fit.b_crit > far.b_crits[2]


def test_a_confirm_seed_that_missed_the_target_somewhere_is_left_out() -> None:
    fit, batch, seed, steps = _study(np.random.default_rng(1), confirm=2)
    steps = steps.copy()
    steps[(seed == 2) & (batch == 4)] = np.nan  # seed 2 did not reach the target at B = 4
    values, skipped = seed_bcrits(fit, batch, seed, steps)
    assert set(values) == {1} and skipped == [2]
    part = seed_part(fit, 0, batch, seed, steps)
    assert part is not None and part.seeds == (0, 1) and part.skipped == (2,)
    assert seed_part(fit, 0, batch[seed == 2], seed[seed == 2], steps[seed == 2]) is None


def test_joined_intervals_add_log_half_widths_in_quadrature() -> None:
    lo, hi = joint_interval(10.0, (10 / math.e**0.3, 10 * math.e**0.4), (10.0, 10.0))
    assert (lo, hi) == pytest.approx((10 / math.e**0.3, 10 * math.e**0.4))
    lo, _ = joint_interval(10.0, (10 / math.e**0.3, 10 * math.e**0.3), (10 / math.e**0.4, 10.0))
    assert lo == pytest.approx(10 / math.e**0.5)
