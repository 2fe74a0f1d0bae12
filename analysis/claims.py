"""Claims with statistics: does arm A reach the target in fewer steps (or examples) than
arm B? From the confirm seeds of each arm (docs/science.md):

- the difference of the means A − B with its two-sided (1 − 2·level) Welch interval, so
  the interval lies below 0 exactly when the one-sided test is significant;
- the one-sided Welch t-test p-value of "A < B" (t = (mean A − mean B) / se, with
  Welch–Satterthwaite degrees of freedom, p = P(T_dof ≤ t)), as
  ``scipy.stats.ttest_ind(a, b, equal_var=False, alternative="less")``;
- a verdict: the claim is *shown* when p < level (default 0.01, the bar of the
  modded-nanogpt speedrun records); otherwise it reads "not shown with N seeds", never as
  a result; and, when it is not shown but points the claimed way, how many seeds per arm
  would show a difference of the size observed (80% power, from the seeds' spread).

Seeds that never reached the target are left out of the means (the claim says how many).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stepscale.analysis.fits.records import OMIT, Record
from stepscale.analysis.fits.student_t import t_cdf, t_quantile

DEFAULT_LEVEL = 0.01
POWER = 0.8  # of the seeds-needed estimate
MAX_SEEDS = 1000  # the estimate gives up beyond this many seeds per arm


@dataclass(frozen=True)
class WelchTest:
    """mean(a) − mean(b), its interval, and the one-sided p-value of mean(a) < mean(b)."""

    diff: float
    lo: float
    hi: float
    p_less: float
    dof: float
    n_a: int
    n_b: int


def _finite(values: Sequence[float]) -> np.ndarray:
    return np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)


def welch_test(
    a: Sequence[float], b: Sequence[float], level: float = DEFAULT_LEVEL
) -> WelchTest | None:
    """The Welch test of ``a`` against ``b`` (non-finite values dropped); None when a side
    has fewer than 2 values. The interval is two-sided at 1 − 2·``level``; a difference
    with no spread on either side gets p = 0 or 1 (or 0.5 when the means are equal)."""
    x, y = _finite(a), _finite(b)
    if x.size < 2 or y.size < 2:
        return None

    d = float(x.mean() - y.mean())
    vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    se = math.sqrt(vx + vy)
    if se == 0:
        p = 0.0 if d < 0 else 1.0 if d > 0 else 0.5
        return WelchTest(d, d, d, p, math.inf, int(x.size), int(y.size))
    dof = (vx + vy) ** 2 / (vx**2 / (x.size - 1) + vy**2 / (y.size - 1))
    p = t_cdf(d / se, dof)
    half = t_quantile(1 - level, dof) * se
    return WelchTest(d, d - half, d + half, p, float(dof), int(x.size), int(y.size))


def seeds_needed(
    a: Sequence[float], b: Sequence[float], level: float = DEFAULT_LEVEL, power: float = POWER
) -> int | None:
    """Seeds per arm for the one-sided Welch test to show a difference of the size
    observed at ``level`` with probability ``power``, from the seeds' spread: the least n
    with (t_{1−level} + t_{power}) · sqrt((s_a² + s_b²) / n) ≤ |mean a − mean b| (dof of n
    seeds a side). None with fewer than 2 seeds a side, no difference, or beyond
    `MAX_SEEDS`."""
    x, y = _finite(a), _finite(b)
    if x.size < 2 or y.size < 2:
        return None

    d = abs(float(x.mean() - y.mean()))
    s2 = float(x.var(ddof=1) + y.var(ddof=1))
    if d == 0:
        return None
    if s2 == 0:
        return 2
    for n in range(2, MAX_SEEDS + 1):
        va, vb = x.var(ddof=1) / n, y.var(ddof=1) / n
        dof = (va + vb) ** 2 / (va**2 / (n - 1) + vb**2 / (n - 1)) if va + vb > 0 else n - 1
        need = (t_quantile(1 - level, dof) + t_quantile(power, dof)) * math.sqrt(s2 / n)
        if need <= d:
            return n
    return None


@dataclass(frozen=True)
class Claim(Record):
    """ "``a`` reaches the target in fewer ``what`` than ``b``", tested."""

    a: str
    b: str
    what: str  # steps | examples
    unit: str
    level: float
    n_a: int  # seeds that reached the target
    n_b: int
    seeds_a: int = field(metadata=OMIT)  # seeds run
    seeds_b: int = field(metadata=OMIT)
    test: WelchTest | None = field(metadata=OMIT)
    # seeds per arm that would show a difference this size
    needed: int | None = field(metadata=OMIT)

    @property
    def shown(self) -> bool:
        """Whether the test reached the level."""
        return self.test is not None and self.test.p_less < self.level

    @property
    def reverse_shown(self) -> bool:
        """Whether the opposite claim (``b`` fewer than ``a``) reached the level."""
        return self.test is not None and 1 - self.test.p_less < self.level

    def sentence(self) -> str:
        """The claim, its numbers and its verdict, in one sentence."""
        claim = (
            f"{self.a} reaches the target in fewer {self.what} than {self.b}"
            if self.what in ("steps", "examples", "tokens")
            else f"{self.a} has a lower {self.what.replace('_', ' ')} than {self.b}"
        )
        n = f"n = {self.n_a} vs {self.n_b} seeds"
        lost = (self.seeds_a - self.n_a) + (self.seeds_b - self.n_b)
        if lost:
            n += f"; {lost} seed(s) never reached the target, left out"
        t = self.test
        if t is None:
            return (
                f"{claim}: not tested, the test needs 2 or more seeds a side that reached "
                f"the target ({n})."
            )
        conf = 100 * (1 - 2 * self.level)
        nums = (
            f"Δ = {t.diff:+.4g}{' ' + self.unit if self.unit else ''} [{conf:g}%: {t.lo:.4g}, {t.hi:.4g}], one-sided "
            f"Welch p = {_p(t.p_less)} ({n})"
        )
        if self.shown:
            return f"{claim}: shown at p < {self.level:g}; {nums}."
        out = (
            f"{claim}: not shown with {min(self.n_a, self.n_b)} seeds (p ≥ {self.level:g}); {nums}"
        )
        if self.reverse_shown:
            out += f"; the opposite ({self.b} fewer than {self.a}) is shown, p = {_p(1 - t.p_less)}"
        elif t.diff == 0:
            out += "; the arms do not differ"
        elif t.diff > 0:
            out += f"; the difference points the other way ({self.a} is not faster here)"
        elif self.needed is not None:
            out += f"; about {self.needed} seeds per arm would show a difference this size"
        return out + "."

    def _json(self, fields: dict[str, Any]) -> dict[str, Any]:
        """The claim in one line, its arms and seeds, the test's numbers (null when not
        tested), the verdict and its sentence."""
        t = self.test
        return {
            "claim": f"{self.a} < {self.b} in {self.what}",
            **fields,
            "diff": None if t is None else t.diff,
            "interval": None if t is None else [t.lo, t.hi],
            "p": None if t is None else t.p_less,
            "shown": self.shown,
            "seeds_needed": self.needed,
            "sentence": self.sentence(),
        }


def _p(p: float) -> str:
    return f"{p:.2g}" if p >= 1e-4 else f"{p:.1e}"


def claim(
    a: str,
    a_values: Sequence[float],
    b: str,
    b_values: Sequence[float],
    what: str,
    unit: str,
    level: float = DEFAULT_LEVEL,
) -> Claim:
    """Test "``a`` reaches the target in fewer ``what`` than ``b``" on the values of each
    arm's seeds (NaN: a seed that never reached the target)."""
    if not 0 < level < 0.5:
        raise ValueError(f"claim level must be in (0, 0.5), got {level}")
    test = welch_test(a_values, b_values, level)
    needed = None if test is None else seeds_needed(a_values, b_values, level)
    return Claim(
        a, b, what, unit, level,
        int(_finite(a_values).size), int(_finite(b_values).size),
        len(a_values), len(b_values), test, needed,
    )  # fmt: skip


def claim_level(attrs: Any) -> float:
    """The level of a study's claims: its ``claim_level`` (study.json, from the config's
    ``claim_level``) or `DEFAULT_LEVEL`."""
    value = attrs.get("claim_level") if hasattr(attrs, "get") else None
    try:
        level = float(value) if value is not None else DEFAULT_LEVEL
    except (TypeError, ValueError):
        return DEFAULT_LEVEL
    return level if 0 < level < 0.5 else DEFAULT_LEVEL
