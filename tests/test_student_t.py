"""Student's t from `scipy.special` (analysis/fits/student_t.py) gives exactly the values
`scipy.stats.t` gives, which the fits' intervals and the claims' tests were built on."""

from __future__ import annotations

import numpy as np
from scipy import stats

from stepscale.analysis.fits.student_t import t_cdf, t_quantile, t_sf


def test_the_values_are_scipy_stats_ts_bit_for_bit() -> None:
    rng = np.random.default_rng(0)
    for dof in (1, 2, 3, 4.6, 7, 30, 1e4):
        for prob in (0.5, 0.8, 0.95, 0.975, 0.99, 0.995, 0.01):
            assert t_quantile(prob, dof) == stats.t.ppf(prob, dof), (prob, dof)
        for x in rng.normal(scale=3.0, size=10):
            assert t_cdf(x, dof) == stats.t.cdf(x, dof), (x, dof)
            assert t_sf(x, dof) == stats.t.sf(x, dof), (x, dof)
    assert abs(t_quantile(0.975, 10) - 2.228138851986) < 1e-9  # the textbook table's value
