"""`sweep replay`: a finished study replayed from its stored curves under cheaper protocols.

A protocol is one or more parts joined by ``+`` (e.g. ``first:8+deadline:3``):

- ``full`` — every tune trial as it ran (the reference);
- ``first:K`` — the first K tune trials of each point, in the order the sampler proposed
  them (trial number);
- ``random:K`` — K tune trials of each point drawn at random (a new draw each time);
- ``spread:K`` — K tune trials drawn at random as if their LRs were spread evenly in log LR
  (each trial drawn with the weight of the log-LR interval nearer it than any other trial,
  the ends' intervals mirrored): a live study of K trials, whose sampler has seen too little
  to concentrate, rather than K of a dense study's trials, which its sampler put mostly near
  the optimum;
- ``batches:B1,B2,…`` — only these batch sizes;
- ``adaptive:N[:I]`` — the batch sizes an adaptive study would have chosen among the
  study's (:func:`analysis.fits.design.next_batch`: I = 3 spread in log B to start, up to
  N points, stop at an interval within a factor 2);
- ``transfer[:W]`` — transfer between points (``sampler.transfer``) as far as a replay can
  run it: the batch sizes are measured in transfer's order (the smallest and the middle,
  then the largest, then bisecting log B: :func:`analysis.fits.transfer.transfer_order`; an
  adaptive protocol: its initial ones so, then each one it adds), and at every one after the
  two anchors the LR is predicted from the trials replayed so far
  (:func:`analysis.fits.transfer.predict_nuisance`); the study's trial nearest the
  prediction (in log LR) runs first, and the others are drawn
  (``random:K``, or taken in order with ``first:K``) from its trials inside the narrowed
  range [η̂/w, η̂·w], w = max(W, exp(2·sd)) (W = 3, sd the spread of η* about one power
  law). It can only pick among the LRs the study ran;
- ``deadline:F`` — a trial ends at the target, or at its first evaluation past F × the
  fewest steps to target of the trials before it at its point (``pruner=deadline``);
- ``median[:S]`` — Optuna's median pruner (after S complete trials; default 2): a trial
  ends at the first evaluation where its best loss so far is worse than the median of the
  complete trials before it at that step;
- ``evals:K`` — only every K-th evaluation is kept (steps to target coarsened; a trial
  with ``stop_at_target`` runs on to its next kept evaluation, which a curve cut at the
  target does not have: such a study cannot be replayed with it).

Per protocol the replay reports the compute spent — steps, examples (steps × batch) and
FLOPs of the trials it ran, as fractions of the study's tune trials — and the B_crit and
S_min it would have fitted at the target (the study's fit: S(B) in log space), with the
spread over draws for random protocols and the error |B_crit / B_crit,full − 1|.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import xarray as xr

from stepscale.analysis.dataset import (
    choose_targets,
    cut_levels,
    dataset_batch_unit,
    study_axes,
    trial_groups,
)
from stepscale.analysis.fits.arrays import batch_json
from stepscale.analysis.fits.design import initial_batches, next_batch
from stepscale.analysis.fits.records import Record, as_json
from stepscale.analysis.fits.steps import fit_steps
from stepscale.analysis.fits.transfer import TrialObservation, predict_nuisance, transfer_order
from stepscale.errors import UsageError

__all__ = [
    "DEFAULT_DRAWS",
    "Protocol",
    "ReplayError",
    "ReplayResult",
    "default_protocols",
    "parse_protocol",
    "replay",
]

SCHEMA = "stepscale.replay/v1"
DEFAULT_DRAWS = 200


class ReplayError(UsageError, ValueError):
    """A study or protocol that cannot be replayed (bad input: `sweep replay` exits 2 with the
    message)."""


# ----------------------------------------------------------------------- protocols


@dataclass(frozen=True)
class Protocol:
    """A parsed protocol (see the module docstring); ``name`` is its text."""

    name: str
    first: int | None = None
    random: int | None = None
    spread: int | None = None
    batches: tuple[float, ...] | None = None
    adaptive: tuple[int, int] | None = None  # (max points, initial)
    deadline: float | None = None
    transfer: float | None = None  # the width W of the narrowed LR range
    median: int | None = None  # n_startup_trials
    evals: int = 1

    @property
    def stochastic(self) -> bool:
        """Whether each draw differs (random subsets)."""
        return self.random is not None or self.spread is not None


_PART = re.compile(
    r"^(full|first|random|spread|batches|adaptive|transfer|deadline|median|evals)(?::(.+))?$"
)


def parse_protocol(text: str) -> Protocol:
    """A protocol from its text; a bad one → :class:`ReplayError` naming the part."""
    fields: dict[str, Any] = {}
    parts = [p.strip() for p in text.split("+")]
    for part in parts:
        m = _PART.match(part)
        if m is None:
            raise ReplayError(
                f"--protocol {text!r}: unknown part {part!r}; parts are full, first:K, "
                f"random:K, spread:K, batches:B1,B2,…, adaptive:N[:I], transfer[:W], "
                f"deadline:F, median[:S], evals:K (joined by +)"
            )
        kind, arg = m.group(1), m.group(2)
        picks = {"first", "random", "spread"}
        if kind in fields or (kind in picks and (picks & set(fields))):
            raise ReplayError(
                f"--protocol {text!r}: {kind} given twice or with first/random/spread"
            )
        try:
            if kind == "full":
                if arg is not None or len(parts) > 1:
                    raise ValueError("full stands alone")
                fields["full"] = True
            elif kind in ("first", "random", "spread", "evals"):
                fields[kind] = int(arg or "")
                if fields[kind] < 1:
                    raise ValueError("must be ≥ 1")
            elif kind == "batches":
                fields[kind] = tuple(sorted(float(v) for v in (arg or "").split(",")))
                if not fields[kind] or min(fields[kind]) <= 0:
                    raise ValueError("positive batch sizes")
            elif kind == "adaptive":
                nums = [int(v) for v in (arg or "").split(":")]
                n, init = nums[0], (nums[1] if len(nums) > 1 else 3)
                if len(nums) > 2 or n < 3 or not 3 <= init <= n:
                    raise ValueError("adaptive:N[:I] needs 3 ≤ I ≤ N")
                fields[kind] = (n, init)
            elif kind == "deadline":
                fields[kind] = float(arg or "")
                if not fields[kind] >= 1:
                    raise ValueError("the factor must be ≥ 1")
            elif kind == "transfer":
                fields[kind] = float(arg) if arg is not None else 3.0
                if not fields[kind] >= 1:
                    raise ValueError("the width must be ≥ 1")
            else:  # median
                fields[kind] = int(arg) if arg is not None else 2
                if fields[kind] < 0:
                    raise ValueError("must be ≥ 0")
        except ValueError as exc:
            raise ReplayError(f"--protocol {text!r}: bad {part!r} ({exc})") from None
    fields.pop("full", None)
    return Protocol(name=text.strip(), **fields)


# ----------------------------------------------------------------------- the data


@dataclass(frozen=True)
class _Trial:
    """What a replay needs of one tune trial."""

    id: str
    point: str
    batch: float
    number: int
    eval_steps: np.ndarray  # steps with a finite eval loss, ascending
    loss: np.ndarray
    ran: float  # steps it trained
    cut: float  # the loss it was stopped at on reaching (stop_at_target), else NaN
    examples_per_step: float
    flops_per_step: float
    lr: float = math.nan  # the learning rate it ran at (NaN: the study tunes none)


@dataclass(frozen=True)
class _Outcome:
    ran: float
    crossing: float  # steps to target (NaN: not reached)


@dataclass(frozen=True)
class _Group:
    name: str
    trials: tuple[_Trial, ...]
    batches: tuple[float, ...]  # ascending

    def of(self, batch: float) -> list[_Trial]:
        return sorted((t for t in self.trials if t.batch == batch), key=lambda t: t.number)


def _groups(ds: xr.Dataset, target: float) -> list[_Group]:
    axes = study_axes(ds)
    if axes.batch is None:
        raise ReplayError(
            "replay needs a batch-size axis (a scientific parameter at data.global_batch or "
            "with quantity: batch_size): it refits S(B)"
        )
    if "eval_loss" not in ds:
        raise ReplayError("replay needs eval-loss curves: the study logged no eval_loss")
    final = ~ds["running"].values & (ds["kind"].values == "tune")
    if not final.any():
        raise ReplayError(
            "replay needs finished trials: this run dir has no tune trial in a final state"
        )
    groups = trial_groups(ds, axes)
    steps = ds["step"].values.astype(float)
    loss = ds["eval_loss"].values
    batch = ds[axes.batch.coord].values.astype(float)
    cut = cut_levels(ds)

    def col(name: str) -> np.ndarray:
        if name not in ds.coords or ds[name].values.dtype.kind not in "iuf":
            return np.full(ds.sizes["trial"], np.nan)
        return ds[name].values.astype(float)

    done, eps, fps = col("steps_done"), col("examples_per_step"), col("flops_per_step")
    lrs = col(axes.lr.coord) if axes.lr is not None else np.full(ds.sizes["trial"], np.nan)
    out: dict[str, list[_Trial]] = {}
    for i in np.flatnonzero(final):
        ok = np.isfinite(loss[i])
        ev = steps[ok]
        ran = done[i] if np.isfinite(done[i]) else (float(ev.max()) if ev.size else 0.0)
        per = eps[i] if np.isfinite(eps[i]) else batch[i]
        out.setdefault(str(groups[i]), []).append(
            _Trial(
                id=str(ds["trial"].values[i]),
                point=str(ds["point"].values[i]),
                batch=float(batch[i]),
                number=int(ds["number"].values[i]),
                eval_steps=ev,
                loss=loss[i][ok],
                ran=float(ran),
                cut=float(cut[i]),
                examples_per_step=float(per),
                flops_per_step=float(fps[i]),
                lr=float(lrs[i]),
            )
        )
    result = []
    for name, trials in out.items():
        for t in trials:
            if (
                math.isfinite(t.cut)
                and target < t.cut
                and not (t.loss.size and t.loss[-1] < target)
            ):
                raise ReplayError(
                    f"the curves were cut at the target: trial {t.id} stopped on reaching eval "
                    f"loss {t.cut:g} (stop_at_target), so its steps to {target:g} are unknown; "
                    f"replay at a target of {t.cut:g} or easier"
                )
        result.append(_Group(name, tuple(trials), tuple(sorted({t.batch for t in trials}))))
    return result


def _eval_interval(groups: Sequence[_Group]) -> int:
    """The study's evaluation interval in steps (gcd of the evaluated steps)."""
    g = 0
    for grp in groups:
        for t in grp.trials:
            for s in t.eval_steps.astype(int):
                g = math.gcd(g, int(s))
    return max(g, 1)


# ----------------------------------------------------------------------- one replay


def _crossing(steps: np.ndarray, loss: np.ndarray, target: float) -> float:
    below = np.flatnonzero(loss < target)
    return float(steps[below[0]]) if below.size else math.nan


def _run_point(
    trials: list[_Trial], p: Protocol, target: float, keep_every: int, horizon_stop: bool
) -> list[_Outcome]:
    """Each trial's steps run and steps to target under the protocol's evaluation and
    pruning rules, in trial order (earlier trials decide the pruning of later ones)."""
    out: list[_Outcome] = []
    complete: list[tuple[_Trial, np.ndarray, np.ndarray]] = []  # for the median rule
    for t in trials:
        steps, loss = t.eval_steps, t.loss
        if p.evals > 1:
            kept = (steps.astype(int) % keep_every) == 0
            if math.isfinite(t.cut) and steps.size and not kept[-1]:
                raise ReplayError(
                    f"the curves were cut at the target: evals:{p.evals} keeps every "
                    f"{keep_every}th step, and trial {t.id} stopped at step {int(steps[-1])} on "
                    f"reaching eval loss {t.cut:g} (stop_at_target); its loss at the next kept "
                    f"evaluation is unknown"
                )
            steps, loss = steps[kept], loss[kept]
        crossing = _crossing(steps, loss, target)
        ran = t.ran
        if horizon_stop and math.isfinite(crossing):
            ran = min(ran, crossing)
        stop = math.inf
        if p.deadline is not None:
            reached = [o.crossing for o in out if math.isfinite(o.crossing)]
            if reached:
                limit = p.deadline * min(reached)
                past = steps[steps > limit]
                if past.size:
                    stop = float(past[0])
        if p.median is not None and len(complete) >= max(p.median, 1):
            best = np.minimum.accumulate(loss) if loss.size else loss
            for j, s in enumerate(steps):
                if s >= stop:
                    break
                values = [lc[np.flatnonzero(sc == s)[0]] for _, sc, lc in complete if s in sc]
                if values and best[j] > float(np.median(values)):
                    stop = float(s)
                    break
        pruned = stop < ran and not (math.isfinite(crossing) and crossing <= stop)
        if pruned:
            ran, crossing = stop, math.nan
        out.append(_Outcome(ran, crossing))
        if not pruned:
            complete.append((t, steps, loss))
    return out


def _spread_weights(trials: Sequence[_Trial]) -> np.ndarray | None:
    """Per trial, the share of the log-LR range nearer it than any other trial (the ends'
    cells mirrored inward); None (equal weights) without usable LRs or with one trial."""
    x = np.log(np.asarray([t.lr for t in trials], dtype=float))
    if x.size < 2 or not np.isfinite(x).all():
        return None
    order = np.argsort(x, kind="stable")
    xs = x[order]
    gaps = np.diff(xs)
    cell = np.empty_like(xs)
    cell[1:-1] = (gaps[:-1] + gaps[1:]) / 2
    cell[0], cell[-1] = gaps[0], gaps[-1]
    if not cell.sum() > 0:
        return None
    w = np.empty_like(cell)
    w[order] = cell
    return w / w.sum()


@dataclass
class _Draw:
    steps: float = 0.0
    examples: float = 0.0
    flops: float = 0.0
    batches: tuple[float, ...] = ()
    b_crit: float = math.nan
    b_crit_ci: tuple[float, float] = (math.nan, math.nan)
    s_min: float = math.nan
    error: str | None = None


def _one_draw(
    g: _Group,
    p: Protocol,
    target: float,
    keep_every: int,
    rng: np.random.Generator,
    n_boot: int,
    seed: int,
) -> _Draw:
    batches = list(g.batches if p.batches is None else [b for b in g.batches if b in p.batches])
    horizon_stop = p.deadline is not None
    results: dict[float, tuple[float, list[_Outcome], list[_Trial]]] = {}

    def select(b: float) -> list[_Trial]:
        trials = g.of(b)
        k = min(p.first or p.random or p.spread or len(trials), len(trials))
        eta = _transferred_lr(b) if p.transfer is not None else None
        if eta is not None:  # the prediction first, then K − 1 inside the narrowed range
            lr, w = eta
            first = min(trials, key=lambda t: (abs(math.log(t.lr / lr)), t.number))
            trials = [t for t in trials if t is not first and lr / w <= t.lr <= lr * w]
            k -= 1
        else:
            first = None
        if p.random is not None or p.spread is not None:
            weights = _spread_weights(trials) if p.spread is not None else None
            size = min(k, len(trials), np.count_nonzero(weights) if weights is not None else k)
            pick = sorted(rng.choice(len(trials), size=size, replace=False, p=weights))
            trials = [trials[i] for i in pick]
        else:
            trials = trials[:k]
        return trials if first is None else [first, *trials]

    def _transferred_lr(b: float) -> tuple[float, float] | None:
        """The LR predicted at ``b`` from the batch sizes measured so far and the width of
        its range; None at an anchor or without a usable source."""
        if b in anchors or not results:
            return None
        if not all(math.isfinite(t.lr) and t.lr > 0 for t in g.of(b)):
            return None
        obs = [
            TrialObservation(batch=src, values={"lr": t.lr}, objective=o.crossing)
            for src, (_, outs, trials) in results.items()
            for o, t in zip(outs, trials, strict=True)
            if math.isfinite(t.lr) and t.lr > 0
        ]
        pred = predict_nuisance(obs, b, ["lr"], lr_name="lr")
        if pred is None or "lr" not in pred.values:
            return None
        assert p.transfer is not None
        sd = pred.log_sd
        width = max(p.transfer, math.exp(2 * sd)) if math.isfinite(sd) else p.transfer
        return float(pred.values["lr"]), width

    def measure(b: float) -> tuple[float, list[_Outcome], list[_Trial]]:
        if b not in results:
            trials = select(b)
            outs = _run_point(trials, p, target, keep_every, horizon_stop)
            reached = [o.crossing for o in outs if math.isfinite(o.crossing)]
            results[b] = (min(reached) if reached else math.nan, outs, trials)
        return results[b]

    anchors: set[float] = set()  # tuned from scratch: the first two in transfer's order

    def in_transfer_order(sizes: Sequence[float]) -> None:
        """Transfer measures the smallest and the middle first (the anchors), then the
        largest, then the one farthest from those measured (`transfer_order`)."""
        ordered = sorted(sizes)
        order = transfer_order(ordered)
        anchors.update(ordered[i] for i in order[:2])
        for i in order:
            measure(ordered[i])

    if p.adaptive is not None:
        n_max, n_init = p.adaptive
        chosen = list(initial_batches(batches, n_init))
        if p.transfer is not None:
            in_transfer_order(chosen)
        while True:
            sizes = [b for b in chosen if math.isfinite(measure(b)[0])]
            decision = next_batch(
                sizes,
                [measure(b)[0] for b in sizes],
                batches,
                max_points=n_max,
                not_reached=[b for b in chosen if b not in sizes],
                n_boot=200,
                seed=seed,
            )
            if decision.batch is None:
                break
            chosen.append(decision.batch)
        batches = sorted(chosen)
    elif p.transfer is not None:
        in_transfer_order(batches)
    d = _Draw(batches=tuple(batches))
    sizes, steps, missed = [], [], []
    for b in batches:
        s, outs, trials = measure(b)
        for o, t in zip(outs, trials, strict=True):
            d.steps += o.ran
            d.examples += o.ran * t.examples_per_step
            d.flops += o.ran * t.flops_per_step
        if math.isfinite(s):
            sizes.append(b)
            steps.append(s)
        else:
            missed.append(b)
    try:
        fit = fit_steps(sizes, steps, not_reached=missed, n_boot=n_boot, seed=seed)
    except ValueError as exc:
        d.error = str(exc)
    else:
        d.b_crit, d.b_crit_ci, d.s_min = fit.b_crit, fit.b_crit_ci, fit.s_min
    return d


# ----------------------------------------------------------------------- results


def _quantile(values: np.ndarray, q: float) -> float:
    return float(np.quantile(values, q, method="inverted_cdf"))


def _spread(values: Sequence[float]) -> dict[str, float]:
    v = np.asarray([x for x in values if math.isfinite(x)], dtype=float)
    if v.size == 0:
        return {"median": math.nan, "q10": math.nan, "q90": math.nan}
    q10, q50, q90 = np.quantile(v, [0.1, 0.5, 0.9])
    return {"median": float(q50), "q10": float(q10), "q90": float(q90)}


@dataclass(frozen=True)
class ProtocolResult(Record):
    """One protocol replayed (``draws`` times when random) in one group."""

    protocol: str
    group: str
    draws: int
    steps: Mapping[str, float]  # fraction of the study's steps: median, q10, q90
    examples: Mapping[str, float]
    flops: Mapping[str, float]
    b_crit: Mapping[str, float]
    s_min: Mapping[str, float]
    error: Mapping[str, float]  # |B_crit / B_crit,full − 1|: median, p90, max
    failed: int  # draws whose S(B) could not be fitted
    b_crit_ci: tuple[float, float] | None  # bootstrap interval (one-draw protocols)
    batch_sizes: tuple[float, ...]  # of the first draw (adaptive: the ones chosen)
    failure: str | None = None  # why the (first) failed draw could not be fitted

    def _json(self, fields: dict[str, Any]) -> dict[str, Any]:
        """Medians over draws, with their 10–90% range when random."""
        out: dict[str, Any] = {
            "protocol": self.protocol,
            "group": self.group,
            "draws": self.draws,
            "compute_fraction": {
                "steps": self.steps["median"],
                "examples": self.examples["median"],
                "flops": self.flops["median"],
            },
            "b_crit": self.b_crit["median"],
            "s_min": self.s_min["median"],
            "b_crit_error": dict(self.error),
            "failed_fits": self.failed,
            "failure": self.failure,
            "batch_sizes": [batch_json(b) for b in self.batch_sizes],
        }
        if self.b_crit_ci is not None:
            out["b_crit_ci"] = self.b_crit_ci
        if self.draws > 1:
            out["spread_q10_q90"] = {
                "examples": (self.examples["q10"], self.examples["q90"]),
                "b_crit": (self.b_crit["q10"], self.b_crit["q90"]),
                "s_min": (self.s_min["q10"], self.s_min["q90"]),
            }
            out["batch_sizes_first_draw"] = out.pop("batch_sizes")
        return out


@dataclass(frozen=True)
class ReplayResult(Record):
    """Every protocol replayed on a study."""

    study: str
    target: float
    batch_unit: str
    draws: int
    seed: int
    # group → steps/examples/flops/trials
    totals: Mapping[str, Mapping[str, float]] = field(metadata=as_json("study_compute"))
    reference: Mapping[str, ProtocolResult]  # group → the full study
    results: tuple[ProtocolResult, ...] = field(metadata=as_json("protocols"))
    notes: tuple[str, ...] = field(default=())

    def _json(self, fields: dict[str, Any]) -> dict[str, Any]:
        """What `sweep replay` prints: the schema first."""
        return {"schema": SCHEMA, **fields}


def _replay_one(
    g: _Group,
    p: Protocol,
    target: float,
    keep_every: int,
    draws: int,
    seed: int,
    n_boot: int,
    totals: Mapping[str, float],
    ref_b_crit: float,
) -> ProtocolResult:
    n = draws if p.stochastic else 1
    rng = np.random.default_rng(seed)
    runs = [
        _one_draw(g, p, target, keep_every, rng, n_boot if n == 1 else 0, seed) for _ in range(n)
    ]

    def frac(key: str) -> dict[str, float]:
        total = totals[key]
        vals = [getattr(r, key) / total if total > 0 else math.nan for r in runs]
        return _spread(vals)

    errors = [abs(r.b_crit / ref_b_crit - 1) if math.isfinite(r.b_crit) else math.inf for r in runs]
    fin = np.asarray(errors)
    failed = [r for r in runs if r.error is not None]
    return ProtocolResult(
        protocol=p.name,
        group=g.name,
        draws=n,
        steps=frac("steps"),
        examples=frac("examples"),
        flops=frac("flops") if math.isfinite(totals["flops"]) else _spread([]),
        b_crit=_spread([r.b_crit for r in runs]),
        s_min=_spread([r.s_min for r in runs]),
        # Failed fits count as infinitely wrong; quantiles without interpolation (inf − inf).
        error={
            "median": _quantile(fin, 0.5) if math.isfinite(ref_b_crit) else math.nan,
            "p90": _quantile(fin, 0.9) if math.isfinite(ref_b_crit) else math.nan,
            "max": float(fin.max()) if math.isfinite(ref_b_crit) else math.nan,
        },
        failed=len(failed),
        b_crit_ci=runs[0].b_crit_ci if n == 1 else None,
        batch_sizes=runs[0].batches,
        failure=failed[0].error if failed else None,
    )


def default_protocols(ds: xr.Dataset) -> list[str]:
    """The protocols `sweep replay` runs when none is given: fewer trials per point (in
    sampler order and at random), the deadline and median pruning rules, adaptive batch
    sizes, and coarser evaluation when the curves allow it."""
    counts = ds["point"].values[(ds["kind"].values == "tune") & ~ds["running"].values]
    _, n_per = np.unique(counts, return_counts=True)
    n = int(n_per.min()) if n_per.size else 0
    ks = sorted({k for k in (n // 4, n // 2, (3 * n) // 4) if 1 <= k < n})
    out = ["full"]
    out += [f"first:{k}" for k in ks] + [f"random:{k}" for k in ks]
    out += ["deadline:3", "median"]
    axes = study_axes(ds)
    if axes.batch is not None:
        nb = np.unique(ds[axes.batch.coord].values).size
        if nb >= 5:
            out.append(f"adaptive:{nb - 2}")
            if ks:
                out.append(f"adaptive:{nb - 2}+first:{ks[len(ks) // 2]}+median")
    if not np.isfinite(cut_levels(ds)).any():
        out.append("evals:2")
    return out


def replay(
    ds: xr.Dataset,
    protocols: Sequence[str] = (),
    *,
    target: float | None = None,
    draws: int = DEFAULT_DRAWS,
    seed: int = 0,
    n_boot: int = 1000,
) -> ReplayResult:
    """Replay the study ``ds`` (:func:`analysis.load.load`) under ``protocols`` (default:
    :func:`default_protocols`) at ``target`` (default: the study's). Raises
    :class:`ReplayError` for a study or protocol that cannot be replayed."""
    if draws < 1:
        raise ReplayError(f"--draws must be ≥ 1, got {draws}")
    if target is None:
        target, _, _ = choose_targets(ds, study_axes(ds), ())
        if target is None:
            raise ReplayError("the study has no target loss: give one with --target L")
    parsed = [parse_protocol(p) for p in (protocols or default_protocols(ds))]
    if any(p.transfer is not None for p in parsed) and study_axes(ds).lr is None:
        raise ReplayError(
            "transfer predicts the learning rate: this study tunes none (a nuisance parameter "
            "at optimizer.lr or with quantity: learning_rate)"
        )
    groups = _groups(ds, float(target))
    interval = _eval_interval(groups)
    totals: dict[str, dict[str, float]] = {}
    reference: dict[str, ProtocolResult] = {}
    results: list[ProtocolResult] = []
    notes: list[str] = []
    if (ds["kind"].values == "confirm").any():
        notes.append("confirm seeds are not part of the replay (nor of the study's compute)")
    for g in groups:
        tot = {
            "trials": float(len(g.trials)),
            "steps": sum(t.ran for t in g.trials),
            "examples": sum(t.ran * t.examples_per_step for t in g.trials),
            "flops": sum(t.ran * t.flops_per_step for t in g.trials),
        }
        totals[g.name] = tot
        full = _replay_one(
            g, parse_protocol("full"), target, interval, 1, seed, n_boot, tot, math.nan
        )
        ref = full.b_crit["median"]
        zero = {"median": 0.0, "p90": 0.0, "max": 0.0} if math.isfinite(ref) else full.error
        reference[g.name] = replace(full, error=zero)
        for p in parsed:
            results.append(
                _replay_one(g, p, target, interval * p.evals, draws, seed, n_boot, tot, ref)
            )
        if not math.isfinite(ref):
            notes.append(
                f"{g.name}: the full study's S(B) could not be fitted ({full.failure}); errors "
                f"are not defined"
            )
    return ReplayResult(
        study=str(ds.attrs.get("study", "")),
        target=float(target),
        batch_unit=dataset_batch_unit(ds),
        draws=draws,
        seed=seed,
        totals=totals,
        reference=reference,
        results=tuple(results),
        notes=tuple(notes),
    )
