"""The training seed's part of B_crit's interval (analysis.fits.seed_part): the delta
method's spread matches refits of curves moved by a known seed noise, and a study with
confirm seeds shows the joint interval and the seed's part on its first screen and in its
health checks."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from run_dirs import Spec, make_run_dir

from stepscale.analysis import load
from stepscale.analysis.analyze import analyze
from stepscale.analysis.fits.seed_part import joint_interval, seed_part, seed_sigma
from stepscale.analysis.fits.spread import spread_over_seeds
from stepscale.analysis.fits.steps import fit_steps
from stepscale.analysis.headline import headline
from stepscale.analysis.health import health_checks

BATCHES = np.array([4.0, 8, 16, 32, 64, 128, 256])
S_MIN, B_CRIT = 20.0, 24.0


def test_the_seed_part_matches_refits_of_curves_moved_by_a_known_noise() -> None:
    steps = S_MIN * (1 + B_CRIT / BATCHES)
    sigma = 0.1
    rng = np.random.default_rng(0)
    # 30 confirm seeds per batch size: σ is estimated closely
    batch = np.repeat(BATCHES, 30)
    seeds = np.repeat(steps, 30) * np.exp(sigma * rng.standard_normal(batch.size))
    spread = spread_over_seeds(batch, seeds)
    est, df, most = seed_sigma(spread)
    assert df == 7 * 29 and most == 30 and est == pytest.approx(sigma, rel=0.1)
    fit = fit_steps(BATCHES, steps, n_boot=50)
    part = seed_part(fit, spread)
    assert part is not None and part.sigma == est
    # the spread of log B_crit over studies whose S(B) the seed moved by σ
    draws = [
        math.log(
            fit_steps(BATCHES, steps * np.exp(sigma * rng.standard_normal(7)), n_boot=0).b_crit
        )
        for _ in range(120)
    ]
    assert part.sd_log_bcrit / est * sigma == pytest.approx(float(np.std(draws)), rel=0.25)
    lo, hi = part.ci
    assert lo < fit.b_crit < hi and math.isclose(lo * hi, fit.b_crit**2, rel_tol=1e-9)
    assert part.joint_ci[0] <= min(lo, fit.b_crit_ci[0]) and part.joint_ci[1] >= max(
        hi, fit.b_crit_ci[1]
    )


def test_joint_intervals_add_log_half_widths_in_quadrature() -> None:
    lo, hi = joint_interval(
        10.0, (10 / math.e**0.3, 10 * math.e**0.3), (10 / math.e**0.4, 10 * math.e**0.4)
    )
    assert math.log(10 / lo) == pytest.approx(0.5) and math.log(hi / 10) == pytest.approx(0.5)


def test_a_study_with_confirm_seeds_shows_the_seeds_part_on_its_first_screen(
    tmp_path: Path,
) -> None:
    spec = Spec(batches=(16, 32, 64, 128, 256, 512, 1024), confirm_seeds=3, jitter=0.05, seed=3)
    run = make_run_dir(tmp_path / "run", spec)
    ds = load(run)
    a = analyze(ds)
    h = headline(a)
    g = h.groups[0]
    assert g.seed_part is not None and g.fit_ci is not None
    assert g.ci == g.seed_part.joint_ci and g.ci[0] <= g.fit_ci[0] and g.ci[1] >= g.fit_ci[1]
    assert "of which the training seed's ×/÷" in h.lines()[0]
    check = next(c for c in health_checks(a, ds) if c.name == "training seed")
    assert "the training seed alone moves B_crit" in check.message
    assert check.ok == g.seed_part.settled
    assert h.to_dict()["groups"][0]["seed_part"]["sigma"] == pytest.approx(g.seed_part.sigma)
