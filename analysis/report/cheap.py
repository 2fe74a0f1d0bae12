"""The report's sections on spending less: health checks, the replay of cheaper protocols,
and what an adaptive or transferring study decided (``adaptive.json``, ``transfer.json``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from stepscale.analysis.health import HealthCheck
from stepscale.analysis.replay import ReplayResult
from stepscale.analysis.report.blocks import Block, heading, para, table
from stepscale.analysis.report.numbers import interval, num

__all__ = ["adaptive_section", "health_section", "replay_section", "transfer_section"]


def health_section(checks: Sequence[HealthCheck]) -> list[Block]:
    if not checks:
        return []
    rows = [[c.name, "ok" if c.ok else "WARNING", c.message] for c in checks]
    out = [heading("Health checks"), table(["check", "status", "finding"], rows)]
    bad = [c for c in checks if not c.ok]
    for c in bad:
        out.append(para(f"{c.name}: {c.message}", "warning"))
    return out


def _pct(x: Any) -> str:
    return "—" if not isinstance(x, (int, float)) or x != x or x == float("inf") else f"{x:.0%}"


def replay_section(rep: ReplayResult | None, note: str | None) -> list[Block]:
    if rep is None:
        return [heading("Replay: cheaper protocols"), para(note, "note")] if note else []
    rows = []
    for r in rep.results:
        ex = r.examples
        frac = f"{num(ex['median'], 3)}"
        if r.draws > 1:
            frac += f" [{num(ex['q10'], 3)}, {num(ex['q90'], 3)}]"
        bc = num(r.b_crit["median"])
        if r.draws > 1:
            bc += f" [{num(r.b_crit['q10'])}, {num(r.b_crit['q90'])}]"
        elif r.b_crit_ci is not None:
            bc += f" {interval(r.b_crit_ci)}"
        rows.append(
            [
                r.protocol if r.group == "all" else f"{r.group}: {r.protocol}",
                str(r.draws),
                frac,
                num(r.steps["median"], 3),
                bc,
                num(r.s_min["median"]),
                _pct(r.error["median"]),
                _pct(r.error["p90"]),
                str(r.failed),
            ]
        )
    ref = "; ".join(
        f"{'' if g == 'all' else g + ': '}B_crit = {num(r.b_crit['median'])} "
        f"{interval(r.b_crit_ci or (float('nan'),) * 2)}"
        for g, r in rep.reference.items()
    )
    out = [
        heading("Replay: cheaper protocols"),
        para(
            f"What cheaper protocols would have spent and found, replayed from the stored curves "
            f"at eval loss < {rep.target:g} (`sweep replay` prints the same as JSON; the study "
            f"itself: {ref}). Random protocols: median [10–90%] over {rep.draws} draws."
        ),
        table(
            [
                "protocol",
                "draws",
                "examples (fraction)",
                "steps (fraction)",
                f"B_crit ({rep.batch_unit})",
                "S_min",
                "error (median)",
                "error (p90)",
                "failed fits",
            ],
            rows,
            "first:K = first K trials per point in sampler order; random:K = K at random; "
            "deadline:F = stop at F × the point's fewest steps so far; median = Optuna's median "
            "pruner; adaptive:N = batch sizes chosen by the adaptive rule (up to N); spread:K = K "
            "drawn as if spread evenly in log LR; transfer = each point after the two anchors (the "
            "smallest and the middle batch size) starts from the predicted LR; evals:K = "
            "every K-th evaluation. error = |B_crit / B_crit,full − 1|.",
        ),
    ]
    out += [para(n, "note") for n in rep.notes]
    return out


def adaptive_section(record: Mapping[str, Any] | None) -> list[Block]:
    if not record:
        return []
    rows = []
    for d in record.get("decisions", []):
        measured = ", ".join(str(b) for b in d.get("measured", []))
        fit = "—"
        if d.get("b_crit") is not None:
            ci = d.get("b_crit_ci") or [None, None]
            fit = f"{num(d['b_crit'])} {interval([_f(ci[0]), _f(ci[1])])}"
        rows.append(
            [
                measured,
                fit,
                "stop" if d.get("batch") is None else str(d["batch"]),
                str(d.get("reason", "")),
            ]
        )
    s = record.get("settings") or {}
    out = [
        heading("Adaptive batch sizes"),
        para(
            f"The study started with batch sizes {', '.join(map(str, record.get('initial', [])))} "
            f"of the candidates {', '.join(map(str, record.get('candidates', [])))} "
            f"(max_points {s.get('max_points')}, stop at an interval within a factor "
            f"{s.get('ci_ratio')}). After each round of points it fitted S(B) and added first "
            f"the batch sizes the fit needs around the B_crit estimate (one within a factor 2 "
            f"on each side, two beyond that on each side), then the candidate that narrows the "
            f"B_crit interval most per example it costs (recorded in adaptive.json)."
        ),
        table(["batch sizes measured", "B_crit then [95%]", "added", "why"], rows),
    ]
    if record.get("stopped"):
        out.append(para(f"Stopped: {record['stopped']}", "note"))
    return out


def _f(x: Any) -> float:
    return float(x) if isinstance(x, (int, float)) else float("nan")


def transfer_section(record: Mapping[str, Any] | None) -> list[Block]:
    if not record:
        return []
    rows = []
    points = record.get("points") or {}
    for label, e in sorted(points.items(), key=lambda kv: kv[1].get("rank", 0)):
        pred = e.get("prediction")
        if pred is None:
            rows.append([label, str(e.get("rank")), "—", "—", str(e.get("reason", ""))])
            continue
        values = ", ".join(f"{k} = {_short(v)}" for k, v in (pred.get("values") or {}).items())
        ranges = ", ".join(
            f"{k} ∈ [{num(lo)}, {num(hi)}]" for k, (lo, hi) in (e.get("ranges") or {}).items()
        )
        how = "; ".join(f"{k}: {v}" for k, v in (pred.get("how") or {}).items())
        if e.get("bracket"):
            values += " (then " + ", ".join(num(v) for v in e["bracket"]) + ")"
        rows.append([label, str(e.get("rank")), values, ranges or "declared", how])
    across = any(e.get("across_rungs") for e in points.values())
    text = (
        "Each point after the two anchors (the smallest and the middle batch size, tuned from "
        "scratch) started from the nuisance values predicted from the points already tuned "
        "(its first trial; the largest extrapolated from them), with its LR range "
        f"narrowed to a factor {record.get('width')} either side of the prediction "
        "(recorded in transfer.json)."
    )
    if across:
        text = (
            "A ladder, tuned across its rungs: only the first rung's anchors (its smallest and "
            "middle batch size) searched the declared ranges. A later rung's anchors started "
            "from the η* law of the rungs before it at the same batch size, every other point "
            "from its rung's anchors (the largest extrapolated from them); each prediction was "
            "its first trial (a bracket beside it where shown), its LR range narrowed to a "
            f"factor {record.get('width')} either side (recorded in transfer.json)."
        )
    return [
        heading("Transfer between points"),
        para(text),
        table(["point", "order", "first trial", "narrowed range", "how"], rows),
    ]


def _short(v: Any) -> str:
    return num(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else json.dumps(v)
