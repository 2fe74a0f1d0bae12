"""Transfer between points (``sampler.transfer: true``): each point starts from the
nuisance optimum predicted from the points already tuned.

Order (:func:`stepscale.analysis.fits.transfer.transfer_order`): within a group (the
points that share every scientific value but the batch size) the smallest batch size and
the one nearest the middle of the range in log B run first (the *anchors*, tuned over the
declared ranges), then the largest (extrapolated from the anchors: tuned from scratch with
a few trials it found a best too far above its optimum and pulled B_crit low), then the one
farthest (in log B) from those already ordered, ties to the smaller, so every later point
lies between tuned neighbours. A point other than the anchors starts only once every point
before it in that order has finished, so its prediction is a function of finished results.

Prediction (:func:`stepscale.analysis.fits.transfer.predict_nuisance`): the LR from the
η*(B) law of the finished points of the group (interpolated in log–log between the two
tuned neighbours; for the largest, η*(B) = c·B^α fitted on the tuned points, extrapolated),
every other nuisance parameter from the best trial of the nearest tuned batch size. The
prediction is enqueued as the point's first trial.

No progress at the anchors: when every trial of both anchors of a group has ended by the
no-progress rule (`sweeps.job.no_progress`: stuck at its step-0 loss), the declared ranges did
not learn at two batch sizes, and the rest of the group is not run (a prediction from trials
that learned nothing would be noise); the study's answer is then "not trained" in the time of
the anchors. No other point of the group has started by then (they wait for the anchors), so
this is the same at any parallelism. Recorded in ``transfer.json`` under ``not_learning``.

Across rungs (a ladder: scientific axes of ``quantity: model_size`` or ``horizon_tokens``
beside the batch size): the groups that differ only in those axes are *rungs*, tuned in
the order of :func:`stepscale.analysis.fits.rung_transfer.rung_order` (the smallest model at
the shortest horizon first). A later rung's anchors are not tuned from scratch: each waits
until the same batch size has finished on every rung before it, and starts from the η* law
fitted across those rungs (:func:`~stepscale.analysis.fits.rung_transfer.predict_across_rungs`),
narrowed like any prediction. The first rung's anchors use the declared ranges.

Bracket (``sampler.transfer_bracket`` = f > 1): the predicted LR is enqueued with η̂/f and
η̂·f beside it (inside the narrowed range), so the point's first trials already bracket its
optimum and the local parabola of the analysis is determined however few trials follow.

Narrowing: the LR range of a predicted point becomes [η̂/w, η̂·w] within the declared
range, w = max(``sampler.transfer_width``, exp(2·sd)) where sd is the residual standard
deviation of log η* about one power law over the tuned points (so a law that fits badly
keeps a wider range). Other parameters keep their declared ranges. Predictions and ranges
are recorded in ``RUN_DIR/transfer.json`` (a resumed study reuses them).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
import optuna.distributions as od
from optuna.trial import FrozenTrial, TrialState

from stepscale.files import read_json, write_json_atomic
from stepscale.rundir import (
    DIVERGED,
    STATUS_JSON,
    TRANSFER_JSON,
    trial_dir,
)
from stepscale.sweeps.job.no_progress import NO_PROGRESS
from stepscale.sweeps.run.adaptive import AdaptiveRun, point_finished
from stepscale.sweeps.study.axes import batch_alias, ladder_axes, lr_alias
from stepscale.sweeps.study.schema import StudyConfig
from stepscale.sweeps.study.space import Nuisance, Point, SearchSpace
from stepscale.sweeps.study.trials import now_iso

if TYPE_CHECKING:
    from stepscale.analysis.fits.rung_transfer import RungPrediction
    from stepscale.analysis.fits.transfer import Prediction, TrialObservation

SCHEMA = "stepscale.transfer/v1"
TrialsOf = Callable[[Point], list[FrozenTrial]]


class TransferRun:
    """Transfer between the points of one study in one run dir."""

    def __init__(self, cfg: StudyConfig, run_dir: Path) -> None:
        alias = batch_alias(cfg)
        assert alias is not None
        self.cfg = cfg
        self.batch = alias
        self.lr = lr_alias(cfg)
        self.run_dir = run_dir
        self.file = run_dir / TRANSFER_JSON
        self._ranges: dict[str, dict[str, list[float]]] = {}
        self.ladder = ladder_axes(cfg)
        self._across: dict[str, list[Point]] | None = None

    @classmethod
    def of(cls, cfg: StudyConfig, run_dir: Path) -> TransferRun | None:
        """The study's transfer, or None when ``sampler.transfer`` is off."""
        return cls(cfg, run_dir) if cfg.sampler.transfer else None

    # ------------------------------------------------------------------ order
    def _group(self, point: Point) -> tuple[tuple[str, str], ...]:
        return tuple((k, repr(v)) for k, v in point.values.items() if k != self.batch)

    def _rung(self, point: Point) -> dict[str, float]:
        return {k: float(point.values[k]) for k in self.ladder}

    def across(self, points: tuple[Point, ...], point: Point) -> list[Point]:
        """The points ``point`` is predicted from across rungs: the same batch size (and every
        other value but the ladder's axes) on the rungs before its own in
        `rung_order`; empty when the study is not a ladder or ``point`` is not an anchor."""
        return self._across_map(points).get(point.label, [])

    def _across_map(self, points: tuple[Point, ...]) -> dict[str, list[Point]]:
        if self._across is not None:
            return self._across
        self._across = {}
        if not self.ladder:
            return self._across
        from stepscale.analysis.fits.rung_transfer import rung_order

        orders = self.orders(points)
        families: dict[tuple[tuple[str, str], ...], list[Point]] = {}
        for p in points:
            key = tuple((k, repr(v)) for k, v in p.values.items() if k not in self.ladder)
            families.setdefault(key, []).append(p)
        for members in families.values():
            rungs = sorted({tuple(self._rung(p).values()) for p in members})
            place = {rungs[i]: k for k, i in enumerate(rung_order(rungs))}

            def place_of(q: Point, place: dict[tuple[float, ...], int] = place) -> int:
                return place[tuple(self._rung(q).values())]

            for p in members:
                if [q.label for q in orders[p.label]].index(p.label) >= 2:
                    continue  # predicted within its rung, from its anchors
                earlier = [q for q in members if place_of(q) < place_of(p)]
                self._across[p.label] = sorted(earlier, key=place_of)
        return self._across

    def orders(self, points: tuple[Point, ...]) -> dict[str, list[Point]]:
        """Point label → the points of its group in transfer order (computed once for
        all points: a grid of many groups stays cheap to serve)."""
        from stepscale.analysis.fits.transfer import transfer_order  # numpy: when used

        groups: dict[tuple[tuple[str, str], ...], list[Point]] = {}
        for p in points:
            groups.setdefault(self._group(p), []).append(p)
        out: dict[str, list[Point]] = {}
        grown = self._adaptive()
        for group in groups.values():
            group.sort(key=lambda p: (float(p.values[self.batch]), p.index))
            b = [float(p.values[self.batch]) for p in group]
            head = [i for i, v in enumerate(b) if grown is None or v in grown[0]]
            ranked = [group[head[i]] for i in transfer_order([b[i] for i in head])]
            if grown is not None:  # an adaptive axis: the points it added, in their order
                added = grown[1]
                rest = [i for i in range(len(group)) if i not in head]
                rest.sort(key=lambda i: (added.index(b[i]) if b[i] in added else len(added), i))
                ranked += [group[i] for i in rest]
            out.update({p.label: ranked for p in ranked})
        return out

    def _adaptive(self) -> tuple[set[float], list[float]] | None:
        """An adaptive axis's initial batch sizes and the ones it added, in order (its
        record): the anchors are chosen among the initial ones, so the order stays the same
        as the axis grows; None for a fixed axis."""
        run = AdaptiveRun.of(self.cfg, self.run_dir)
        if run is None or run.alias != self.batch:
            return None
        rec = run.record()
        return {float(v) for v in rec.get("initial", [])}, [float(v) for v in run.added(rec)]

    def rank(self, points: tuple[Point, ...], point: Point) -> int:
        """Where ``point`` comes in its group's order (0 and 1: the anchors)."""
        return [p.label for p in self.orders(points)[point.label]].index(point.label)

    def serving(self, points: tuple[Point, ...], trials_of: TrialsOf) -> dict[str, Any]:
        """The order and readiness `sweeps.run.budget.pick_point` serves points by."""
        orders = self.orders(points)
        rank = {label: [p.label for p in ranked].index(label) for label, ranked in orders.items()}
        skipped = self.not_learning(points, trials_of)
        self._across_map(points)
        return {
            "order": lambda p: rank[p.label],
            "ready": lambda p: (
                p.label not in skipped and self._ready(orders[p.label], p, trials_of)
            ),
        }

    def not_learning(self, points: tuple[Point, ...], trials_of: TrialsOf) -> set[str]:
        """Labels of the points whose group's anchors all ended without progress (see the
        module docstring); recorded in transfer.json the first time."""
        out: set[str] = set()
        for ranked in {id(r): r for r in self.orders(points).values()}.values():
            anchors = ranked[:2]
            if len(ranked) <= 2 or not all(point_finished(trials_of(p), self.cfg) for p in anchors):
                continue
            if all(self._no_progress(p, trials_of(p)) for p in anchors):
                out.update(p.label for p in ranked[2:])
        if out:
            rec = self._record()
            if sorted(out) != rec.get("not_learning", {}).get("skipped"):
                rec["not_learning"] = {
                    "skipped": sorted(out),
                    "reason": "every trial of the anchors ended without progress (no_progress)",
                    "decided": now_iso(),
                }
                write_json_atomic(self.file, rec)
        return out

    def _no_progress(self, point: Point, trials: list[FrozenTrial]) -> bool:
        tune = [t for t in trials if t.user_attrs.get("kind", "tune") == "tune"]
        if not tune:
            return False
        for t in tune:
            status = read_json(
                trial_dir(self.run_dir, point.label, t.number) / STATUS_JSON, lenient=True
            )
            if (status or {}).get("ended_by") != NO_PROGRESS:
                return False
        return True

    def ready(self, points: tuple[Point, ...], point: Point, trials_of: TrialsOf) -> bool:
        """Whether ``point`` may be served: it has started already, is an anchor, or every
        point before it in its group's order has finished (an anchor of a later rung: once
        the points it is predicted from across rungs have)."""
        self._across_map(points)
        return self._ready(self.orders(points)[point.label], point, trials_of)

    def _ready(self, ranked: list[Point], point: Point, trials_of: TrialsOf) -> bool:
        if any(t.state != TrialState.WAITING for t in trials_of(point)):
            return True
        i = [p.label for p in ranked].index(point.label)
        if i < 2:  # an anchor: on a later rung, once the earlier rungs have this batch size
            before = (self._across or {}).get(point.label, [])
            return all(point_finished(trials_of(p), self.cfg) for p in before)
        return all(point_finished(trials_of(p), self.cfg) for p in ranked[:i])

    # ------------------------------------------------------------------ the record
    def _record(self) -> dict[str, Any]:
        saved = read_json(self.file, lenient=True)
        if isinstance(saved, dict) and saved.get("schema") == SCHEMA:
            return saved
        return {"schema": SCHEMA, "width": self.cfg.sampler.transfer_width, "points": {}}

    def distributions(
        self, label: str, declared: dict[str, od.BaseDistribution]
    ) -> dict[str, od.BaseDistribution]:
        """The point's distributions with its recorded narrowed ranges (declared ones when
        it has none)."""
        if label not in self._ranges:
            entry = self._record()["points"].get(label)
            if entry is None:
                return declared
            self._ranges[label] = entry.get("ranges") or {}
        out = dict(declared)
        for name, (low, high) in self._ranges[label].items():
            d = declared[name]
            assert isinstance(d, od.FloatDistribution)
            out[name] = od.FloatDistribution(low, high, log=d.log)
        return out

    # ------------------------------------------------------------------ a point's start
    def start(
        self,
        space: SearchSpace,
        point: Point,
        study: optuna.Study,
        trials_of: TrialsOf,
        run_dir: Path,
    ) -> None:
        """At a point's first ask: predict, record, and enqueue the prediction as its first
        trial (once: a resumed study finds the record). Call under the run dir's lock."""
        rec = self._record()
        if point.label in rec["points"]:
            return
        ranked = self.orders(space.points)[point.label]
        rank = [p.label for p in ranked].index(point.label)
        entry: dict[str, Any] = {"rank": rank, "decided": now_iso(), "ranges": {}}
        sources = [
            p for p in ranked if p.label != point.label and point_finished(trials_of(p), self.cfg)
        ]
        prediction: Prediction | RungPrediction | None = None
        across = [
            p for p in self.across(space.points, point) if point_finished(trials_of(p), self.cfg)
        ]
        if rank >= 2 and sources:
            prediction = self._predict(space, point, sources, trials_of)
        elif rank < 2 and across:
            prediction = self._predict_across(space, point, across, trials_of)
            entry["across_rungs"] = [p.label for p in across]
        if prediction is None:
            entry["prediction"] = None
            entry["reason"] = (
                "anchor (the smallest or the middle batch size): tuned over the declared ranges"
                if rank < 2
                else "no tuned neighbour with a usable trial: tuned over the declared ranges"
            )
        else:
            nuisance = {n.name: n for n in space.nuisance[point.label]}
            width = self.cfg.sampler.transfer_width
            lr = nuisance.get(self.lr) if self.lr is not None else None
            bracket: list[float] = []
            if lr is not None and lr.step is None and self.lr in prediction.values:
                sd = prediction.log_sd
                w = max(width, math.exp(2 * sd)) if math.isfinite(sd) else width
                n = lr
                assert n.low is not None and n.high is not None
                eta = min(max(float(prediction.values[self.lr]), n.low), n.high)
                low, high = max(n.low, eta / w), min(n.high, eta * w)
                entry["ranges"][n.optuna_name] = [low, high]
                entry["lr_width"] = w
                f = self.cfg.sampler.transfer_bracket
                if f > 1 and n.scale != "reverse_log":
                    bracket = [min(max(eta / f, low), high), min(max(eta * f, low), high)]
            params = {
                nuisance[k].optuna_name: _sampled(nuisance[k], v, entry["ranges"])
                for k, v in prediction.values.items()
                if k in nuisance
            }
            entry["prediction"] = prediction.to_dict()
            entry["enqueued"] = params
            study.enqueue_trial(params, user_attrs={"kind": "tune", "transfer": True})
            if bracket and lr is not None:
                name = lr.optuna_name
                # distinct from the prediction and each other, and never more trials than
                # the point has (a waiting trial left over would keep it from finishing)
                room = max(0, self.cfg.budget.trials_per_point - 1)
                others = [v for v in dict.fromkeys(bracket) if v != params.get(name)][:room]
                entry["bracket"] = others
                for v in others:
                    study.enqueue_trial(
                        params | {name: v}, user_attrs={"kind": "tune", "transfer": True}
                    )
        rec["points"][point.label] = entry
        write_json_atomic(self.file, rec)

    def _observations(
        self, space: SearchSpace, label: str, batch: float, trials: list[FrozenTrial]
    ) -> list[TrialObservation]:
        from stepscale.analysis.fits.transfer import TrialObservation

        obs = []
        for t in trials:
            if t.user_attrs.get("kind", "tune") != "tune" or t.state != TrialState.COMPLETE:
                continue
            ok = t.user_attrs.get("state") != DIVERGED and t.value is not None
            obs.append(
                TrialObservation(
                    batch=batch,
                    values=space.trainer_values(label, t.params),
                    objective=float(t.value) if ok else math.nan,  # type: ignore[arg-type]
                )
            )
        return obs

    def _predict_across(
        self, space: SearchSpace, point: Point, sources: list[Point], trials_of: TrialsOf
    ) -> RungPrediction | None:
        from stepscale.analysis.fits.rung_transfer import RungSource, predict_across_rungs

        batch = float(point.values[self.batch])
        rungs = [
            RungSource(self._rung(p), self._observations(space, p.label, batch, trials_of(p)))
            for p in sources
        ]
        names = [n.name for n in space.nuisance[point.label]]
        return predict_across_rungs(rungs, self._rung(point), batch, names, lr_name=self.lr)

    def _predict(
        self, space: SearchSpace, point: Point, sources: list[Point], trials_of: TrialsOf
    ) -> Prediction | None:
        from stepscale.analysis.fits.transfer import predict_nuisance

        obs = [
            o
            for p in sources
            for o in self._observations(space, p.label, float(p.values[self.batch]), trials_of(p))
        ]
        names = [n.name for n in space.nuisance[point.label]]
        return predict_nuisance(obs, float(point.values[self.batch]), names, lr_name=self.lr)


def _sampled(n: Nuisance, value: Any, ranges: dict[str, list[float]]) -> Any:
    """The Optuna value of a predicted trainer value, inside the point's (narrowed) range."""
    if n.type == "categorical":
        return value
    low, high = ranges.get(n.optuna_name, (n.low, n.high))
    assert low is not None and high is not None
    if n.scale == "reverse_log":  # sampled as 1 − x
        return min(max(1.0 - float(value), 1.0 - n.high), 1.0 - n.low)  # type: ignore[operator]
    v = min(max(float(value), low), high)
    if n.type == "int":
        step = int(n.step or 1)
        return int(low + round((v - low) / step) * step)
    if n.step is not None:
        return low + round((v - low) / n.step) * n.step
    return v
