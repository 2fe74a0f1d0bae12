"""Laws across a ladder of studies: the optimum of each rung, power laws of the optima in
the model size N and the training horizon D, and the check of their prediction on a rung
held out of the fit (docs/science.md, "A ladder of studies").

A *rung* is one (N, D) of the ladder: every trial of it trained a model of N parameters
for D tokens, at some batch size B and learning rate η. Its optimum:

- **B_opt(N, D)**: the batch size of lowest final loss at the rung's token budget
  (StepFun 2025, DeepSeek 2024), refined by a parabola in log B through the best batch
  size and its two neighbours when it is not at an end of the grid;
- **η*(N, D)**: the learning rate of lowest loss at B_opt, read off the rung's η*(B) line:
  each batch size's η* (a local parabola in log η through its best trials), log η* linear
  in log B with one slope for the whole ladder (η* ∝ B^γ), the rung's intercept the mean
  over its batch sizes, evaluated at B_opt. One batch size's handful of trials places η*
  within a factor ~1.4 in a flat landscape; the line uses every trial of the rung;
- **L*(N, D)**: the lowest final loss of the rung;
- **B_crit(N, D)** (Zhang et al. 2024): from the steps each batch size needs to reach a
  target, S(B) = S_min(1 + B_crit/B), where the target at horizon D is the loss the
  reference rung (the smallest model at D) reaches at D, loosened by ``margin``.

Everything here is a pure function of arrays (tested on synthetic ladders with known
laws: tests/test_ladder.py); `stepscale.analysis.ladder` reads them from a run dir.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stepscale.analysis.fits.powerlaw import PowerLaw, Prediction, fit_power_law
from stepscale.analysis.fits.records import OMIT, Record
from stepscale.analysis.fits.student_t import t_sf

__all__ = [
    "AXES",
    "LAWS",
    "BcritClaim",
    "HoldoutCheck",
    "LadderLaws",
    "LadderTrials",
    "RungOptimum",
    "bcrit_claim",
    "fit_ladder_laws",
    "holdout_check",
    "loss_at",
    "rung_optima",
    "smoothed_best",
]

N, D = "N", "D"
AXES = (N, D)
# law name → what it predicts
LAWS = {
    "lr": "η*, the learning rate of lowest loss",
    "batch": "B_opt, the batch size of lowest loss at the token budget",
    "loss": "L*, the loss at the optimum",
    "bcrit": "B_crit, the critical batch size (steps to the reference rung's loss at D)",
}
DEFAULT_MARGIN = 0.02  # the B_crit target: the reference rung's loss at D, 2% looser
NEAREST = 5  # trials of a local parabola in log η


@dataclass(frozen=True)
class LadderTrials:
    """Every finished trial of a ladder, aligned arrays: model size, horizon in tokens,
    batch size (in the ladder's batch unit), learning rate, final loss; optionally each
    trial's eval curve (steps, losses) for B_crit."""

    n: np.ndarray
    d: np.ndarray
    b: np.ndarray
    lr: np.ndarray
    loss: np.ndarray
    curves: tuple[tuple[np.ndarray, np.ndarray], ...] | None = None

    @classmethod
    def of(cls, n: Any, d: Any, b: Any, lr: Any, loss: Any, curves: Any = None) -> LadderTrials:
        """Arrays from any sequences (floats)."""
        arrs = [np.asarray(v, dtype=float) for v in (n, d, b, lr, loss)]
        if len({a.size for a in arrs}) != 1:
            raise ValueError("ladder columns differ in length")
        return cls(*arrs, curves=None if curves is None else tuple(curves))

    def rung_mask(self, n: float, d: float) -> np.ndarray:
        """The trials of rung (n, d)."""
        return (self.n == n) & (self.d == d)

    def rungs(self) -> list[tuple[float, float]]:
        """Distinct (N, D) with a finite loss, by compute N·D (then N)."""
        ok = np.isfinite(self.loss)
        pairs = {(float(a), float(b)) for a, b in zip(self.n[ok], self.d[ok], strict=True)}
        return sorted(pairs, key=lambda p: (p[0] * p[1], p[0]))


@dataclass(frozen=True)
class RungOptimum(Record):
    """The optimum of one rung."""

    n: float
    d: float
    b_opt: float
    lr_opt: float
    loss_opt: float
    b_at_edge: bool  # the best batch size is the smallest or largest of the grid
    lr_at_edge: bool  # the best LR is the smallest or largest tried at that batch size
    n_trials: int
    batch_sizes: tuple[float, ...]
    best_loss_by_batch: tuple[float, ...]
    b_crit: float = math.nan
    target: float = math.nan
    lr_slope: float = 0.0  # γ of the ladder's η* ∝ B^γ (the same for every rung)
    lr_batches: int = 1  # the batch sizes whose η* the rung's η* pools


def _vertex(x: np.ndarray, y: np.ndarray, beyond: float = 0.0) -> float | None:
    """The minimum of the least-squares parabola through (x, y); None unless it is convex
    with its vertex within [min x − beyond, max x + beyond]."""
    if np.unique(x).size < 3:
        return None
    a, b, _ = np.polyfit(x, y, 2)
    if not a > 0:
        return None
    v = -b / (2 * a)
    return float(v) if x.min() - beyond <= v <= x.max() + beyond else None


def _best_lr(lr: np.ndarray, loss: np.ndarray) -> tuple[float, bool]:
    """The LR of lowest loss, refined by a parabola in log η through the trials nearest
    the best; and whether the best trial's LR is an end of those tried."""
    ok = np.isfinite(loss) & (lr > 0)
    lr, loss = lr[ok], loss[ok]
    i = int(np.argmin(loss))
    x = np.log(lr)
    edge = bool(lr.size > 1 and (x[i] <= x.min() or x[i] >= x.max()))
    near = np.argsort(np.abs(x - x[i]))[:NEAREST]
    # At an end of the LRs tried the vertex may lie up to one mean spacing beyond it (the
    # rung is flagged ``lr_at_edge`` then).
    spacing = float(np.ptp(x[near]) / max(1, near.size - 1)) if edge else 0.0
    v = _vertex(x[near], loss[near], spacing)
    return (math.exp(v) if v is not None else float(lr[i])), edge


def _lr_slope(per_batch: Sequence[Sequence[tuple[float, float, bool]]]) -> float:
    """γ of log η* = α_rung + γ·log B, by least squares within rungs (each rung's own
    intercept: the fixed-effects slope), over each rung's `_pooled` points; 0 when no rung
    has two batch sizes."""
    sxy = sxx = 0.0
    for points in per_batch:
        use = _pooled(points)
        if len(use) < 2:
            continue
        x = np.log([b for b, _, _ in use])
        y = np.log([lr for _, lr, _ in use])
        sxy += float(((x - x.mean()) * (y - y.mean())).sum())
        sxx += float(((x - x.mean()) ** 2).sum())
    return sxy / sxx if sxx > 0 else 0.0


def _pooled(points: Sequence[tuple[float, float, bool]]) -> list[tuple[float, float, bool]]:
    """A rung's (batch, η*, at an end) points that its η* pools: those whose η* is not at
    an end of the LRs tried (a bound, not an optimum), or all of them when fewer than two
    are not."""
    inner = [p for p in points if not p[2]]
    return inner if len(inner) >= 2 else list(points)


def rung_optima(trials: LadderTrials) -> list[RungOptimum]:
    """Each rung's optimum (`RungOptimum`), rungs by compute. η* pools the rung's batch
    sizes along the ladder's η*(B) line (the module docstring); the slope is fitted over
    every rung of ``trials``."""
    rows = []
    for n, d in trials.rungs():
        m = trials.rung_mask(n, d) & np.isfinite(trials.loss)
        b, lr, loss = trials.b[m], trials.lr[m], trials.loss[m]
        grid = np.unique(b)
        best = np.array([loss[b == g].min() for g in grid])
        points = []
        for g in grid:
            at = b == g
            if np.any((lr[at] > 0) & np.isfinite(loss[at])):
                lr_g, edge_g = _best_lr(lr[at], loss[at])
                points.append((float(g), lr_g, edge_g))
        rows.append((n, d, grid, best, points, int(m.sum())))
    slope = _lr_slope([r[4] for r in rows])
    out = []
    for n, d, grid, best, points, count in rows:
        i = int(np.argmin(best))
        b_opt = float(grid[i])
        if 0 < i < grid.size - 1:
            v = _vertex(np.log(grid[i - 1 : i + 2]), best[i - 1 : i + 2])
            b_opt = math.exp(v) if v is not None else b_opt
        use = _pooled(points)
        level = float(np.mean([math.log(lr) - slope * math.log(g) for g, lr, _ in use]))
        lr_edge = next((e for g, _, e in points if g == grid[i]), False)
        out.append(
            RungOptimum(
                n=n,
                d=d,
                b_opt=b_opt,
                lr_opt=math.exp(level + slope * math.log(b_opt)),
                loss_opt=float(best.min()),
                b_at_edge=bool(grid.size > 1 and i in (0, grid.size - 1)),
                lr_at_edge=bool(lr_edge),
                n_trials=count,
                batch_sizes=tuple(float(g) for g in grid),
                best_loss_by_batch=tuple(float(v) for v in best),
                lr_slope=slope,
                lr_batches=len(use),
            )
        )
    return out


def _nearest(x: np.ndarray, lx: np.ndarray) -> np.ndarray:
    """For each log LR of ``lx``, the indices (ascending) of the `NEAREST` trials of ``x``
    nearest it: the trials its parabola passes through."""
    dist = np.abs(x[None, :] - lx[:, None])
    return np.sort(np.argsort(dist, axis=1, kind="stable")[:, :NEAREST], axis=1)


def _loss_at_lrs(x: np.ndarray, y: np.ndarray, lx: np.ndarray) -> np.ndarray:
    """The loss at each log LR of ``lx`` (clamped to the LRs tried) from one batch size's
    trials (log LRs ``x``, losses ``y``): a parabola through the `NEAREST` trials nearest
    it, never below the best of all of them; linear between them when fewer than 3 LRs
    differ. One fit serves every ``lx`` with the same nearest trials."""
    lx = np.clip(lx, x.min(), x.max())
    sets, inverse = np.unique(_nearest(x, lx), axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    out = np.empty(lx.size)
    for k, near in enumerate(sets):
        rows = inverse == k
        if np.unique(x[near]).size >= 3:
            c = np.polyfit(x[near], y[near], 2)
            out[rows] = np.maximum(np.polyval(c, lx[rows]), y.min())
        else:
            order = np.argsort(x[near])
            out[rows] = np.interp(lx[rows], x[near][order], y[near][order])
    return out


def loss_at(trials: LadderTrials, n: float, d: float, b: float, lr: float) -> tuple[float, bool]:
    """The rung (n, d)'s final loss estimated at batch ``b`` and LR ``lr`` from its
    trials: at each grid batch size, a local parabola in log η through the `NEAREST`
    trials nearest ``lr``; between grid batch sizes, linear in log B. Returns (loss,
    extrapolated): extrapolated when ``b`` or ``lr`` lies outside what was tried (the
    nearest end is used then)."""
    m = trials.rung_mask(n, d) & np.isfinite(trials.loss)
    grid = np.unique(trials.b[m])
    lb = math.log(b)
    lg = np.log(grid)
    out_b = lb < lg.min() - 1e-9 or lb > lg.max() + 1e-9
    lb = min(max(lb, float(lg.min())), float(lg.max()))
    j = int(np.searchsorted(lg, lb))
    pair = [j] if j < lg.size and abs(lg[j] - lb) < 1e-12 else [max(j - 1, 0), min(j, lg.size - 1)]
    values, out_lr = [], False
    lx = math.log(lr)
    for k in dict.fromkeys(pair):
        at = m & (trials.b == grid[k])
        x = np.log(trials.lr[at])
        out_lr |= lx < x.min() - 1e-9 or lx > x.max() + 1e-9
        values.append(float(_loss_at_lrs(x, trials.loss[at], np.array([lx]))[0]))
    if len(values) == 2:
        w = (lb - lg[pair[0]]) / (lg[pair[1]] - lg[pair[0]])
        est = (1 - w) * values[0] + w * values[1]
    else:
        est = values[0]
    return float(est), bool(out_b or out_lr)


SMOOTHED_LRS = 257  # log-spaced LRs per batch size at which `smoothed_best` evaluates


def smoothed_best(trials: LadderTrials, n: float, d: float) -> tuple[float, float, float]:
    """The rung (n, d)'s best loss as `loss_at` estimates losses: its minimum over the
    rung's grid batch sizes and, at each, the LRs tried there (between grid batch sizes
    `loss_at` is linear, so its minimum lies on one). Returns (loss, B, η) of that minimum.

    The regret compares the loss at the predicted settings with this, not with the best
    trial: the best of ~25 noisy trials is the lowest draw, below the mean loss of its own
    settings by about one run's noise (the winner's curse), so against it even a perfect
    prediction would show that much regret. Both sides estimated by one smoother, a
    prediction that hits the smoother's optimum shows none, and one at the true optimum
    shows what the smoother's own choice among batch sizes and LRs leaves: about half the
    best trial's bias (200 synthetic rungs with a noise of 0.56%: a mean regret of 0.22% vs
    0.41% of the loss, a median of 0.12% vs 0.33%; tests/test_ladder.py)."""
    m = trials.rung_mask(n, d) & np.isfinite(trials.loss) & (trials.lr > 0)
    best = (math.inf, math.nan, math.nan)
    for g in np.unique(trials.b[m]):
        at = m & (trials.b == g)
        x, y = np.log(trials.lr[at]), trials.loss[at]
        grid = np.union1d(np.linspace(x.min(), x.max(), SMOOTHED_LRS), x)
        values = _loss_at_lrs(x, y, grid)
        i = int(np.argmin(values))
        if values[i] < best[0]:
            best = (float(values[i]), float(g), math.exp(float(grid[i])))
    return best


# --------------------------------------------------------------------- B_crit per rung


def _first_below(steps: np.ndarray, losses: np.ndarray, target: float) -> float:
    hit = np.flatnonzero(losses <= target)
    return float(steps[hit[0]]) if hit.size else math.nan


def rung_bcrit(
    trials: LadderTrials, optima: Sequence[RungOptimum], margin: float = DEFAULT_MARGIN
) -> list[RungOptimum]:
    """The optima with B_crit filled in where the rung's S(B) can be fitted (3 or more
    batch sizes reach the target): the target at D is (1 + ``margin``) × the smallest
    model's best loss at D (Zhang et al. 2024's reference rung)."""
    from dataclasses import replace

    from stepscale.analysis.fits.steps import fit_steps

    if trials.curves is None:
        return list(optima)
    ref: dict[float, float] = {}
    for o in sorted(optima, key=lambda o: o.n):
        ref.setdefault(o.d, o.loss_opt)
    out = []
    for o in optima:
        target = ref[o.d] * (1 + margin)
        idx = np.flatnonzero(trials.rung_mask(o.n, o.d))
        steps = {}
        for i in idx:
            s, y = trials.curves[i]
            v = _first_below(np.asarray(s, float), np.asarray(y, float), target)
            if math.isfinite(v):
                b = float(trials.b[i])
                steps[b] = min(steps.get(b, math.inf), v)
        b_crit = math.nan
        if len(steps) >= 3:
            bs = sorted(steps)
            try:
                fit = fit_steps(bs, [steps[b] for b in bs], n_boot=0)
                b_crit = fit.b_crit
            except ValueError:
                pass
        out.append(replace(o, b_crit=b_crit, target=target))
    return out


# ------------------------------------------------------------------------------ laws


@dataclass(frozen=True)
class LadderLaws(Record):
    """The laws fitted on the rungs, the range they were fitted over, and the unit of B."""

    laws: Mapping[str, PowerLaw]
    n_range: tuple[float, float]
    d_range: tuple[float, float]
    rungs: tuple[tuple[float, float], ...]
    batch_unit: str
    tokens_per_example: float  # tokens per element of a batch (the sequence length)
    skipped: Mapping[str, str]  # law → why it was not fitted
    lr_slope: float = 0.0  # γ of η* ∝ B^γ within a rung (`rung_optima`)

    def varied(self) -> tuple[str, ...]:
        """The axes (N, D) the fitted rungs took more than one value of."""
        out = []
        if self.n_range[1] > self.n_range[0]:
            out.append(N)
        if self.d_range[1] > self.d_range[0]:
            out.append(D)
        return tuple(out)


def _varied(optima: Sequence[RungOptimum]) -> tuple[str, ...]:
    out = []
    if len({o.n for o in optima}) > 1:
        out.append(N)
    if len({o.d for o in optima}) > 1:
        out.append(D)
    return tuple(out)


def default_regressors(varied: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Each law's axes: every axis the ladder varied (B_opt and B_crit in D first)."""
    both = tuple(a for a in AXES if a in varied)
    return {"lr": both, "batch": both, "loss": both, "bcrit": both}


def check_regressors(
    regressors: Mapping[str, Sequence[str]], varied: Sequence[str]
) -> dict[str, tuple[str, ...]]:
    """The laws' axes, checked: a known law, known axes, each varied by the ladder;
    `ValueError` naming the first that is not."""
    out = {}
    for law, axes in regressors.items():
        if law not in LAWS:
            raise ValueError(f"unknown law {law!r}; the laws are {', '.join(LAWS)}")
        for a in axes:
            if a not in AXES:
                raise ValueError(f"law {law!r}: unknown axis {a!r}; the axes are N and D")
            if a not in varied:
                raise ValueError(
                    f"law {law!r} in {a}: the ladder did not vary {a} "
                    f"(it varied {', '.join(varied) or 'nothing'}), so no law in {a} can be fitted"
                )
        if not axes:
            raise ValueError(f"law {law!r} names no axis")
        out[law] = tuple(dict.fromkeys(axes))
    return out


def fit_ladder_laws(
    optima: Sequence[RungOptimum],
    *,
    regressors: Mapping[str, Sequence[str]] | None = None,
    batch_unit: str = "sequences",
    tokens_per_example: float = 1.0,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> LadderLaws:
    """Fit η*, B_opt, L* (and B_crit where rungs have it) as power laws in the axes the
    ladder varied (or ``regressors``: law → axes; `ValueError` for an axis it did not
    vary). A law that cannot be fitted (too few rungs) is listed in ``skipped``."""
    if len(optima) < 2:
        raise ValueError(f"a ladder needs 2 or more rungs (distinct N, D); it has {len(optima)}")
    varied = _varied(optima)
    if not varied:
        raise ValueError("the rungs share one N and one D; nothing to fit a law in")
    regs = default_regressors(varied)
    if regressors:
        regs |= check_regressors(regressors, varied)
    laws: dict[str, PowerLaw] = {}
    skipped: dict[str, str] = {}
    for law, axes in regs.items():
        use = [o for o in optima if law != "bcrit" or math.isfinite(o.b_crit)]
        if law == "bcrit" and not use:
            skipped[law] = "no rung has a B_crit (3 or more batch sizes reaching its target)"
            continue
        if law == "batch":  # a best batch at an end of the grid is a bound, not a B_opt
            use = [o for o in optima if not o.b_at_edge]
            if len(use) < len(axes) + 1:
                skipped[law] = (
                    f"B_opt is at an end of the batch grid on {len(optima) - len(use)} of "
                    f"{len(optima)} rungs (a bound, not an optimum): widen the grid"
                )
                continue
        y = [
            {"lr": o.lr_opt, "batch": o.b_opt, "loss": o.loss_opt, "bcrit": o.b_crit}[law]
            for o in use
        ]
        xs = {a: [o.n if a == N else o.d for o in use] for a in axes}
        try:
            laws[law] = fit_power_law(law, y, xs, n_boot=n_boot, seed=seed, confidence=confidence)
        except ValueError as exc:
            skipped[law] = str(exc)
    return LadderLaws(
        laws=laws,
        n_range=(min(o.n for o in optima), max(o.n for o in optima)),
        d_range=(min(o.d for o in optima), max(o.d for o in optima)),
        rungs=tuple((o.n, o.d) for o in optima),
        batch_unit=batch_unit,
        tokens_per_example=float(tokens_per_example),
        skipped=skipped,
        lr_slope=optima[0].lr_slope,
    )


# --------------------------------------------------------------- B_crit: D, not N


@dataclass(frozen=True)
class BcritClaim(Record):
    """ "B_crit depends on D, not N": the exponents of B_crit = c·N^a·D^b, the one-sided
    t-tests of b > 0 and of b > |a| (b − a > 0 and b + a > 0, the larger p), and the
    verdict at ``level``."""

    exponent_d: float
    exponent_n: float
    ci_d: tuple[float, float]
    ci_n: tuple[float, float]
    p_d_positive: float
    p_d_exceeds_n: float
    level: float
    n_rungs: int
    shown: bool
    sentence: str


def _p_diff(law: PowerLaw, sign: float) -> float:
    """One-sided p of exponent_D + sign·exponent_N > 0."""
    i, j = law.regressors.index(N) + 1, law.regressors.index(D) + 1
    v = np.asarray(law.xtx_inv)
    var = v[j, j] + v[i, i] + 2 * sign * v[i, j]
    se = law.residual_std * math.sqrt(max(var, 0.0))
    if law.dof <= 0 or not (se > 0):
        return math.nan
    est = law.exponents[D] + sign * law.exponents[N]
    return t_sf(est / se, law.dof)


def bcrit_claim(laws: LadderLaws, level: float = 0.01) -> BcritClaim | None:
    """The claim, when B_crit was fitted in both N and D; else None."""
    law = laws.laws.get("bcrit")
    if law is None or set(law.regressors) != {N, D}:
        return None
    p_d = law.exponent_p_greater(D)
    p_dn = max(_p_diff(law, -1.0), _p_diff(law, +1.0))
    shown = bool(p_d < level and p_dn < level)
    a, b = law.exponents[N], law.exponents[D]
    nums = (
        f"B_crit ∝ D^{b:.3g} [{law.ci[D][0]:.3g}, {law.ci[D][1]:.3g}] · N^{a:.3g} "
        f"[{law.ci[N][0]:.3g}, {law.ci[N][1]:.3g}] over {law.n} rungs; one-sided t-tests: "
        f"D exponent > 0 p = {p_d:.2g}, D exponent > |N exponent| p = {p_dn:.2g}"
    )
    verdict = (
        f"shown at p < {level:g}"
        if shown
        else f"not shown with {law.n} rungs (p ≥ {level:g})"
        if math.isfinite(p_d) and math.isfinite(p_dn)
        else "not tested (no residual degrees of freedom)"
    )
    return BcritClaim(
        exponent_d=b,
        exponent_n=a,
        ci_d=law.ci[D],
        ci_n=law.ci[N],
        p_d_positive=p_d,
        p_d_exceeds_n=p_dn,
        level=level,
        n_rungs=law.n,
        shown=shown,
        sentence=f"B_crit depends on D, not N: {verdict}; {nums}.",
    )


# ---------------------------------------------------------------- has it predicted?

LR_FACTOR = 1.5  # the held-out η* within this factor of the predicted one
LOSS_TOLERANCE = 0.01  # the loss at the predicted settings within 1% of the rung's best


@dataclass(frozen=True)
class HoldoutCheck(Record):
    """The laws fitted without the held-out rung, their prediction of it and what it
    measured. ``regret``: relative loss above the rung's best at the predicted settings,
    both estimated by one smoother from the rung's trials (`loss_at`, `smoothed_best`);
    ``regret_smallest``: the same at the smallest rung's optimum settings, reused.
    ``loss_best_trial`` is the rung's best single trial, shown beside them."""

    verdict: str  # predicted | not predicted | not determined
    reasons: tuple[str, ...]
    held_n: float
    held_d: float
    fitted_rungs: int
    lr_predicted: Prediction | None
    lr_measured: float
    lr_ratio: float  # measured / predicted
    lr_in_interval: bool
    batch_predicted: Prediction | None
    batch_measured: float
    batch_ratio: float
    loss_predicted: Prediction | None
    loss_best: float
    loss_at_predicted: float
    regret: float
    loss_at_smallest: float
    regret_smallest: float
    extrapolated: bool  # the predicted settings lie outside what the rung tried
    settings_predicted: tuple[float, float] = (math.nan, math.nan)  # (B, η) checked
    settings_smallest: tuple[float, float] = (math.nan, math.nan)  # the smallest rung's (B, η)
    loss_best_trial: float = math.nan  # the lowest final loss of the rung's trials
    settings_best: tuple[float, float] = (math.nan, math.nan)  # (B, η) of ``loss_best``
    laws: LadderLaws | None = field(default=None, metadata=OMIT)

    def sentence(self) -> str:
        """The verdict with its numbers, in one paragraph."""
        if self.verdict == "not determined":
            return f"Has it predicted? Not determined: {'; '.join(self.reasons)}."
        lr = self.lr_predicted
        assert lr is not None
        parts = [
            f"held-out rung N = {self.held_n:.3g}, D = {self.held_d:.3g} tokens, laws from "
            f"{self.fitted_rungs} smaller rungs",
            f"η* measured {self.lr_measured:.3g}, predicted {lr.value:.3g} {_interval(lr)} "
            f"(ratio {self.lr_ratio:.2f})",
        ]
        b = self.batch_predicted
        if b is not None:
            parts.append(
                f"B_opt measured {self.batch_measured:.3g}, predicted {b.value:.3g} {_interval(b)} "
                f"(ratio {self.batch_ratio:.2f})"
            )
        elif math.isfinite(self.settings_predicted[0]):
            parts.append(
                f"B_opt measured {self.batch_measured:.3g}; no B_opt law, so the batch size "
                f"checked, {self.settings_predicted[0]:.3g}, is the nearest fitted rung's in D"
            )
        parts.append(
            f"loss at the predicted settings {self.loss_at_predicted:.4g} vs the rung's best "
            f"{self.loss_best:.4g} (regret {100 * self.regret:.2f}%; both smoothed over the "
            f"rung's trials, its best single trial {self.loss_best_trial:.4g}), reusing the smallest "
            f"rung's settings {self.loss_at_smallest:.4g} (regret {100 * self.regret_smallest:.2f}%)"
        )
        head = "Has it predicted? " + ("Yes" if self.verdict == "predicted" else "No")
        why = f" ({'; '.join(self.reasons)})" if self.reasons else ""
        return f"{head}{why}: " + "; ".join(parts) + "."


def _interval(p: Prediction) -> str:
    return f"[{p.lo:.3g}, {p.hi:.3g}]" if math.isfinite(p.lo) else "(no interval)"


def _not_determined(held: tuple[float, float], n_fit: int, why: str) -> HoldoutCheck:
    nan = math.nan
    return HoldoutCheck(
        "not determined", (why,), held[0], held[1], n_fit,
        None, nan, nan, False, None, nan, nan, None, nan, nan, nan, nan, nan, False,
    )  # fmt: skip


def _without(trials: LadderTrials, key: tuple[float, float]) -> LadderTrials:
    """``trials`` without those of rung ``key``."""
    keep = ~trials.rung_mask(*key)
    curves = (
        None
        if trials.curves is None
        else tuple(c for c, k in zip(trials.curves, keep, strict=True) if k)
    )
    return LadderTrials(
        trials.n[keep], trials.d[keep], trials.b[keep], trials.lr[keep], trials.loss[keep], curves
    )


def _nearest_in_d(rungs: Sequence[RungOptimum], to: RungOptimum) -> RungOptimum:
    """The rung nearest ``to`` in log D, then in log N (ties: the larger compute)."""
    return min(
        rungs,
        key=lambda o: (
            round(abs(math.log(o.d / to.d)), 9),
            round(abs(math.log(o.n / to.n)), 9),
            -o.n * o.d,
        ),
    )


def holdout_check(
    trials: LadderTrials,
    *,
    held: tuple[float, float] | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    batch_unit: str = "sequences",
    tokens_per_example: float = 1.0,
) -> HoldoutCheck:
    """Hold out ``held`` (default: the rung of largest compute N·D), fit the laws on the
    other rungs, predict the held-out rung's η*, B_opt and loss, and compare: η* within a
    factor `LR_FACTOR` and inside its prediction interval, the loss at the predicted
    settings within `LOSS_TOLERANCE` of the rung's best (both estimated by the same
    smoother: `loss_at`, `smoothed_best`), and less regret than reusing the smallest
    rung's settings."""
    optima = rung_optima(trials)
    if not optima:
        return _not_determined((math.nan, math.nan), 0, "no rung has a finished trial")
    by_key = {(o.n, o.d): o for o in optima}
    key = held if held is not None else (optima[-1].n, optima[-1].d)
    if key not in by_key:
        raise ValueError(f"no rung N = {key[0]:g}, D = {key[1]:g} in the ladder")
    target = by_key[key]
    # The laws never see the held-out rung's trials, not even through the η*(B) slope.
    rest = rung_optima(_without(trials, key))
    try:
        laws = fit_ladder_laws(
            rest,
            batch_unit=batch_unit,
            tokens_per_example=tokens_per_example,
            n_boot=n_boot,
            seed=seed,
            confidence=confidence,
        )
    except ValueError as exc:
        return _not_determined(key, len(rest), f"the laws cannot be fitted without it: {exc}")
    missing = [a for a in AXES if a not in laws.varied()]
    varies_here = {N: target.n not in {o.n for o in rest}, D: target.d not in {o.d for o in rest}}
    if any(varies_here[a] for a in missing):
        return _not_determined(
            key, len(rest), "the held-out rung lies on an axis the other rungs do not vary"
        )
    if "lr" not in laws.laws:
        return _not_determined(key, len(rest), f"η* law: {laws.skipped.get('lr')}")
    at = {N: target.n, D: target.d}
    lr_law = laws.laws["lr"]
    lr_pred = lr_law.predict(**{a: at[a] for a in lr_law.regressors})
    b_law = laws.laws.get("batch")
    b_pred = b_law.predict(**{a: at[a] for a in b_law.regressors}) if b_law else None
    l_law = laws.laws.get("loss")
    l_pred = l_law.predict(**{a: at[a] for a in l_law.regressors}) if l_law else None
    # Without a B_opt law (B_opt at an end of the grid on too many rungs), the B_opt of the
    # fitted rung nearest in D, then in N: B_opt depends on the data, hardly on the model
    # (StepFun 2025; Bergsma et al. 2025). Never the held-out rung's own.
    b_use = b_pred.value if b_pred is not None else _nearest_in_d(rest, target).b_opt
    loss_pred, ext = loss_at(trials, target.n, target.d, b_use, lr_pred.value)
    smallest = rest[0] if rest else optima[0]
    loss_small, _ = loss_at(trials, target.n, target.d, smallest.b_opt, smallest.lr_opt)
    best, b_best, lr_best = smoothed_best(trials, target.n, target.d)
    regret = max(0.0, loss_pred - best) / abs(best)
    regret_small = max(0.0, loss_small - best) / abs(best)
    ratio = target.lr_opt / lr_pred.value
    reasons = []
    if not (1 / LR_FACTOR <= ratio <= LR_FACTOR):
        reasons.append(f"η* off by a factor {max(ratio, 1 / ratio):.2f} (> {LR_FACTOR})")
    if not lr_pred.contains(target.lr_opt) and math.isfinite(lr_pred.lo):
        reasons.append("measured η* outside its prediction interval")
    if regret > LOSS_TOLERANCE:
        reasons.append(f"regret {100 * regret:.2f}% > {100 * LOSS_TOLERANCE:g}%")
    if regret > regret_small:
        reasons.append("more regret than reusing the smallest rung's settings")
    if target.b_at_edge:
        reasons.append("the rung's best batch size is at an end of its grid")
    strict = [r for r in reasons if not r.startswith("the rung's best batch")]
    verdict = "not predicted" if strict else "predicted"
    return HoldoutCheck(
        verdict=verdict,
        reasons=tuple(reasons),
        held_n=target.n,
        held_d=target.d,
        fitted_rungs=len(rest),
        lr_predicted=lr_pred,
        lr_measured=target.lr_opt,
        lr_ratio=ratio,
        lr_in_interval=lr_pred.contains(target.lr_opt),
        batch_predicted=b_pred,
        batch_measured=target.b_opt,
        batch_ratio=target.b_opt / b_pred.value if b_pred is not None else math.nan,
        loss_predicted=l_pred,
        loss_best=best,
        loss_at_predicted=loss_pred,
        regret=regret,
        loss_at_smallest=loss_small,
        regret_smallest=regret_small,
        extrapolated=ext,
        settings_predicted=(float(b_use), float(lr_pred.value)),
        settings_smallest=(float(smallest.b_opt), float(smallest.lr_opt)),
        loss_best_trial=target.loss_opt,
        settings_best=(b_best, lr_best),
        laws=laws,
    )


def laws_from_dict(d: Mapping[str, Any]) -> LadderLaws:
    """`LadderLaws` from its JSON dict (``to_dict()``: the report's ``fits.json`` →
    ``ladder.laws``, or ``sweep predict --json`` → ``laws``); `ValueError` naming what is
    missing or malformed."""
    from stepscale.analysis.fits.powerlaw import power_law_from_dict

    try:
        laws = {str(k): power_law_from_dict(v) for k, v in dict(d["laws"]).items()}
        unknown = sorted(set(laws) - set(LAWS))
        if unknown:
            raise ValueError(f"unknown law {unknown[0]!r}; the laws are {', '.join(LAWS)}")
        n_range = (float(d["n_range"][0]), float(d["n_range"][1]))
        d_range = (float(d["d_range"][0]), float(d["d_range"][1]))
        out = LadderLaws(
            laws=laws,
            n_range=n_range,
            d_range=d_range,
            rungs=tuple((float(a), float(b)) for a, b in d.get("rungs", [])),
            batch_unit=str(d.get("batch_unit", "sequences")),
            tokens_per_example=float(d.get("tokens_per_example", 1.0)),
            skipped=dict(d.get("skipped", {})),
            lr_slope=float(d.get("lr_slope", 0.0)),
        )
    except (KeyError, TypeError, IndexError, ValueError) as exc:
        raise ValueError(f"not a ladder's laws: {type(exc).__name__}: {exc}") from None
    if not math.isfinite(out.lr_slope):
        raise ValueError(f"lr_slope (η* ∝ B^γ) must be a finite number, got {out.lr_slope}")
    for law in out.laws.values():
        for r in law.regressors:
            if r not in AXES:
                raise ValueError(f"law {law.name!r}: unknown axis {r!r}")
    if not laws:
        raise ValueError("the file holds no law")
    return out
