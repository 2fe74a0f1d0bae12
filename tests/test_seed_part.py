"""The training seed's part of B_crit (analysis.fits.seed_part) on synthetic studies with a
known answer: trials whose log steps to target are a parabola in log LR around S(B) plus
the seed's noise σ. The scatter gives σ back, and the seed's sd of log B_crit matches the
spread of B_crit over many simulated training seeds of the same study."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stepscale.analysis.fits.seed_part import joint_interval, scatter_sigma, seed_part
from stepscale.analysis.fits.steps import StepsFit, fit_steps

BATCH = np.array([4, 8, 16, 32, 64, 128, 256], dtype=float)
S_MIN, B_CRIT, SIGMA, TRIALS = 100.0, 24.0, 0.12, 8


def _study(seed: int, lrs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One training seed: the same trials (``lrs`` per batch size), new noise."""
    rng = np.random.default_rng(1000 + seed)
    b = np.repeat(BATCH, TRIALS)
    x = lrs.ravel()
    curve = np.log(S_MIN * (1 + B_CRIT / b)) + 0.8 * (np.log(x) - np.log(3e-3)) ** 2
    steps = np.exp(curve + SIGMA * rng.standard_normal(b.size))
    return b, x, steps


def _fit(b: np.ndarray, steps: np.ndarray, n_boot: int = 200) -> StepsFit:
    best = np.array([steps[b == size].min() for size in BATCH])
    return fit_steps(BATCH, best, n_boot=n_boot, seed=0)


def test_the_scatter_gives_the_seeds_noise_back() -> None:
    lrs = np.exp(np.random.default_rng(7).uniform(np.log(1e-3), np.log(1e-2), (7, TRIALS)))
    b, lr, steps = _study(0, lrs)
    sigma, df, fitted = scatter_sigma(b, lr, steps, BATCH)
    assert df == 7 * (5 - 3)  # 7 batch sizes, windows of 5 trials, a quadratic each
    assert sigma == pytest.approx(SIGMA, rel=0.4)
    assert set(fitted) == set(BATCH.tolist())
    steps[b == 4] = np.nan  # nothing reached the target at B = 4: that batch size is left out
    assert scatter_sigma(b, lr, steps, BATCH)[1] == 6 * 2


def test_the_seeds_part_matches_the_spread_over_training_seeds() -> None:
    lrs = np.exp(np.random.default_rng(7).uniform(np.log(1e-3), np.log(1e-2), (7, TRIALS)))
    b, lr, steps = _study(0, lrs)
    fit = _fit(b, steps)
    part = seed_part(fit, b, lr, steps)
    assert part is not None
    others = [math.log(_fit(*_study(s, lrs)[::2], n_boot=0).b_crit) for s in range(1, 60)]
    spread = float(np.std(others))
    assert 0.6 * spread < part.sd_log_bcrit < 1.7 * spread, (part.sd_log_bcrit, spread)
    lo, hi = part.joint_ci
    assert lo <= part.ci[0] and part.ci[1] <= hi  # the joint interval holds the seed's
    assert lo <= fit.b_crit_ci[0] and fit.b_crit_ci[1] <= hi  # and the fit's
    inside = np.mean([lo <= math.exp(v) <= hi for v in others])
    assert inside >= 0.85, inside  # the joint interval holds most other seeds' answers
    assert 0 < part.share < 1


def test_without_scatter_to_measure_there_is_no_seed_part() -> None:
    b = np.repeat(BATCH, 3)  # 3 trials per batch size: no degree of freedom left
    lr = np.tile([1e-3, 3e-3, 1e-2], BATCH.size)
    steps = S_MIN * (1 + B_CRIT / b) * np.exp(0.5 * np.log(lr / 3e-3) ** 2)
    assert seed_part(_fit(b, steps), b, lr, steps) is None


def test_joined_intervals_add_log_half_widths_in_quadrature() -> None:
    lo, hi = joint_interval(10.0, (10 / math.e**0.3, 10 * math.e**0.4), (10 / 1.0, 10 * 1.0))
    assert (lo, hi) == pytest.approx((10 / math.e**0.3, 10 * math.e**0.4))
    lo, hi = joint_interval(10.0, (10 / math.e**0.3, 10 * math.e**0.3), (10 / math.e**0.4,) * 2)
    assert lo == pytest.approx(10 / math.e**0.5)
