"""Student's t distribution, from `scipy.special` rather than `scipy.stats`.

The values are the very ones ``scipy.stats.t`` gives (its ``ppf``, ``cdf`` and ``sf`` call these
functions), but importing `scipy.stats` costs about half a second of CPU, which every command that
ends with an answer (``sweep run``, ``sweep status``, ``sweep report``) would pay for a few
quantiles.
"""

from __future__ import annotations

from scipy import special


def t_quantile(prob: float, dof: float) -> float:
    """The quantile of Student's t with ``dof`` degrees of freedom at ``prob``
    (``scipy.stats.t.ppf(prob, dof)``)."""
    return float(special.stdtrit(dof, prob))


def t_cdf(x: float, dof: float) -> float:
    """P(T ≤ x) for Student's t with ``dof`` degrees of freedom (``scipy.stats.t.cdf``)."""
    return float(special.stdtr(dof, x))


def t_sf(x: float, dof: float) -> float:
    """P(T > x) for Student's t with ``dof`` degrees of freedom (``scipy.stats.t.sf``)."""
    return float(special.stdtr(dof, -x))
