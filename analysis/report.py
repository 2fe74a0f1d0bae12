"""`sweep report RUN_DIR`: fits, figures and provenance of a study → ``RUN_DIR/report/``.

Files written (the same run dir always gives the same bytes: no render timestamps, sorted
JSON keys, repr floats, fixed bootstrap seeds, deterministic PNGs):

- ``index.html``: the whole report on one self-contained page (inline CSS, base64 PNGs);
- ``report.md``: the same report in Markdown, linking ``figures/*.png``;
- ``fits.json``: every fit; ``steps`` has the shape and field names of `sweep fit steps`;
- ``results.nc``: the Dataset of :func:`analysis.load.load` (NetCDF, h5netcdf);
- ``steps_to_target.csv``: one row per tune trial (columns in :data:`CSV_COLUMNS`);
  `sweep fit steps --csv steps_to_target.csv --batch-col batch --steps-col
  steps_to_target --horizon-col horizon --group-col group --batch-unit UNIT` reproduces
  ``fits.json``'s ``steps``;
- ``provenance.json``: command, config, search space, seeds, versions, git, devices,
  storage (password redacted), times, trial counts;
- ``figures/<name>.png``.

A study with running trials, or whose run.json has no end time, gives a partial report,
marked as such at the top of every human-readable file and by ``"partial": true``.

Batch sizes, examples, B_crit, E_min and B_simple are labelled with the study's batch unit
(``StudyAnalysis.batch_unit``: the unit space.json gives the batch axis, e.g. sequences
for a language model, examples for the noisy quadratic model), also written as
``batch_unit`` in fits.json.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from stepscale.analysis import figures
from stepscale.analysis.document import Block, code, fig, heading, para, table, to_html, to_markdown
from stepscale.analysis.load import load, parameters, save
from stepscale.analysis.provenance import provenance
from stepscale.analysis.study import DROPPED, FitSettings, StudyAnalysis, analyze
from stepscale.files import write_text_atomic
from stepscale.redact import redact

__all__ = [
    "CSV_COLUMNS",
    "ReportResult",
    "csv_columns",
    "refit_command",
    "steps_table",
    "write_report",
]

REFIT = (
    "sweep fit steps --csv report/steps_to_target.csv --batch-col batch "
    "--steps-col steps_to_target --horizon-col horizon --group-col group"
)
# Stands for the study's batch unit in CSV_COLUMNS (see csv_columns).
BATCH_UNIT = "the study's batch unit"

CSV_COLUMNS: tuple[tuple[str, str], ...] = (
    ("trial", "trial id `<point label>/<n>`"),
    ("point", "point label"),
    (
        "group",
        "values of the scientific axes other than the batch size (`all` when none); "
        "`--group-col group` fits each group apart, as the report does",
    ),
    ("seed", "train.seed of the trial"),
    ("state", "complete, pruned, diverged, failed or running"),
    ("batch", f"batch size in {BATCH_UNIT} (the data.global_batch axis, else examples per step)"),
    ("target", "the primary target loss of steps_to_target"),
    (
        "steps_to_target",
        "first evaluated step with eval loss strictly below target; empty "
        "when not reached (right-censored at horizon)",
    ),
    ("steps_to_target_interp", "the crossing interpolated log-linearly between evaluations"),
    ("reached", "1 when the target was reached, else 0"),
    ("horizon", "last evaluated step (steps): how far the trial ran; the censoring horizon"),
    ("examples_to_target", f"steps_to_target × examples per step ({BATCH_UNIT})"),
    ("tokens_to_target", "steps_to_target × tokens per step (tokens)"),
    ("flops_to_target", "steps_to_target × FLOPs per step"),
    ("wall_s_to_target", "logged wall time at steps_to_target (s)"),
    ("objective", "the value told to the sampler (penalised when censored or diverged)"),
    ("best_eval_loss", "lowest eval loss of the trial"),
    ("final_eval_loss", "last eval loss of the trial"),
    ("steps_done", "optimizer steps the trial ran"),
    ("examples_per_step", f"{BATCH_UNIT} per step"),
    ("tokens_per_step", "tokens per step"),
    ("flops_per_step", "FLOPs per step"),
)


def csv_columns(batch_unit: str) -> tuple[tuple[str, str], ...]:
    """:data:`CSV_COLUMNS` with the study's batch unit (``sequences``, ``examples`` …) in
    place of :data:`BATCH_UNIT`."""
    return tuple((c, d.replace(BATCH_UNIT, batch_unit)) for c, d in CSV_COLUMNS)


def refit_command(batch_unit: str) -> str:
    """The `sweep fit steps` command that refits ``fits.json``'s ``steps`` from
    steps_to_target.csv, with the study's batch unit."""
    return f"{REFIT} --batch-unit {shlex.quote(batch_unit)}"


# ------------------------------------------------------------------------ formatting


def _fin(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and math.isfinite(float(x))


def _g(x: Any, digits: int = 4) -> str:
    return f"{float(x):.{digits}g}" if _fin(x) else "—"


def _n(x: Any) -> str:
    return f"{float(x):,.0f}" if _fin(x) else "—"


def _ci(ci: Sequence[float], digits: int = 4) -> str:
    return f"[{_g(ci[0], digits)}, {_g(ci[1], digits)}]" if all(_fin(c) for c in ci) else "—"


def _csv_num(x: Any) -> str:
    if isinstance(x, str):
        return x
    if not _fin(x):
        return ""
    f = float(x)
    return str(int(f)) if f.is_integer() and abs(f) < 2**53 else repr(f)


def _batch(x: float) -> str:
    return _g(x, 8)


# ------------------------------------------------------------------ the trial table


def _column_name(alias: str, taken: set[str]) -> str:
    name = alias if alias not in taken else f"param_{alias}"
    taken.add(name)
    return name


def steps_table(ds: xr.Dataset, a: StudyAnalysis) -> tuple[list[str], list[list[str]]]:
    """Header and rows of steps_to_target.csv: one row per tune trial, in trial order."""
    tune = np.flatnonzero(ds["kind"].values == "tune")
    if tune.size == 0:
        tune = np.arange(ds.sizes["trial"])
    t = a.target
    ts = a.trial_steps
    n = ds.sizes["trial"]

    def num(name: str) -> np.ndarray:
        if name not in ds.coords:
            return np.full(n, np.nan)
        v = ds[name].values
        return v.astype(float) if v.dtype.kind in "iuf" else np.full(n, np.nan)

    eps, tps, fps = num("examples_per_step"), num("tokens_per_step"), num("flops_per_step")
    batch = num(a.axes.batch.coord) if a.axes.batch is not None else eps
    steps = ts.steps[t] if t is not None else np.full(n, np.nan)
    interp = ts.interp[t] if t is not None else np.full(n, np.nan)
    wall = np.full(n, np.nan)
    if "wall_s" in ds:
        wv, st = ds["wall_s"].values, ds["step"].values
        for i in np.flatnonzero(np.isfinite(steps)):
            ok = np.isfinite(wv[i])
            if ok.any():
                wall[i] = np.interp(steps[i], st[ok], wv[i][ok])
    cols: dict[str, Any] = {
        "trial": ds["trial"].values,
        "point": ds["point"].values,
        "group": a.trial_group,
        "seed": ds["seed"].values,
        "state": ds["state"].values,
        "batch": batch,
        "target": np.full(n, np.nan if t is None else t),
        "steps_to_target": steps,
        "steps_to_target_interp": interp,
        "reached": np.isfinite(steps).astype(int),
        "horizon": ts.horizon,
        "examples_to_target": steps * eps,
        "tokens_to_target": steps * tps,
        "flops_to_target": steps * fps,
        "wall_s_to_target": wall,
        "objective": num("objective"),
        "best_eval_loss": num("best_eval_loss"),
        "final_eval_loss": num("final_eval_loss"),
        "steps_done": num("steps_done"),
        "examples_per_step": eps,
        "tokens_per_step": tps,
        "flops_per_step": fps,
    }
    taken = set(cols)
    for meta in parameters(ds):
        cols[_column_name(meta["name"], taken)] = ds[meta["coord"]].values
    for target in a.targets:
        cols[_column_name(f"steps_at_{target:g}", taken)] = ts.steps[target]
    header = list(cols)
    rows = [[_csv_num(_item(cols[c][i])) for c in header] for i in tune]
    return header, rows


def _item(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


def _csv_text(header: list[str], rows: list[list[str]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


# ------------------------------------------------------------------- the document


def _group_name(g: str) -> str:
    return "" if g == "all" else f" — {g}"


def _points_table(a: StudyAnalysis) -> Block:
    t = "target" if a.target is None else f"L < {a.target:g}"
    headers = [
        "point",
        "trials (tune+confirm)",
        "states",
        "reached",
        f"steps to {t}",
        f"examples to target ({a.batch_unit})",
        "tokens to target (tokens)",
        "FLOPs to target",
        "wall to target (s)",
        "best objective",
        "best eval loss",
        "steps spent",
        "FLOPs spent",
        "wall spent (s)",
    ]
    rows = []
    for p in a.points:
        steps = (
            _n(p.steps_to_target)
            if _fin(p.steps_to_target)
            else (f"not reached in {_n(p.censored_at)}" if _fin(p.censored_at) else "not reached")
        )
        rows.append(
            [
                p.point,
                f"{p.n_tune}+{p.n_confirm}",
                ", ".join(f"{k} {v}" for k, v in sorted(p.states.items())),
                f"{p.n_reached}/{p.n_tune}",
                steps,
                _n(p.examples_to_target),
                _n(p.tokens_to_target),
                _g(p.flops_to_target, 3),
                _g(p.wall_s_to_target, 4),
                _g(p.best_objective, 5),
                _g(p.best_eval_loss, 5),
                _n(p.steps_spent),
                _g(p.flops_spent, 3),
                _g(p.wall_s_spent, 4),
            ]
        )
    return table(
        headers,
        rows,
        "Per point: steps to result is the fewest steps of any tune "
        "trial; wall time and FLOPs are those of that trial to the target.",
    )


def _fit_section(a: StudyAnalysis) -> list[Block]:
    if a.target is None or a.axes.batch is None:
        return []
    out = [heading(f"S(B) fit at eval loss < {a.target:g}")]
    headers = [
        "group",
        "S_min (steps)",
        f"E_min ({a.batch_unit})",
        f"B_crit ({a.batch_unit})",
        "CBS (r, B0)",
        "perfect scaling B ≤",
        "max parallelism B ≥",
        "batch sizes fitted",
        "not reached (censored at)",
        "residual sd (log)",
    ]
    rows = []
    for g in a.groups:
        f = g.fit_at(a.target)
        nr = []
        if g.result is not None:
            nr = [
                f"{_batch(b)} ({_n(c) if c is not None else '?'})"
                for b, c in zip(g.result.not_reached, g.result.censored_at, strict=True)
            ]
        if f is None:
            rows.append(
                [
                    g.group,
                    "—",
                    "—",
                    "—",
                    "—",
                    "—",
                    "—",
                    "—",
                    "; ".join(nr) or "—",
                    f"not fitted: {g.steps_error or 'no data'}",
                ]
            )
            continue
        rows.append(
            [
                g.group,
                f"{_g(f.s_min)} {_ci(f.s_min_ci)}",
                f"{_g(f.e_min)} {_ci(f.e_min_ci)}",
                f"{_g(f.b_crit)} {_ci(f.b_crit_ci)}",
                f"{_g(f.cbs)} (r={_g(f.overhead)}, B0={_batch(f.reference_batch)})",
                _g(f.perfect_scaling_max_batch),
                _g(f.max_parallelism_min_batch),
                ", ".join(_batch(b) for b in f.batch_sizes),
                "; ".join(nr) or "none",
                _g(f.residual_std, 3),
            ]
        )
    out.append(
        table(
            headers,
            rows,
            "S(B) = S_min (1 + B_crit/B), least squares in log space; "
            "[95% residual-bootstrap intervals]. Batch sizes that never reached the "
            "target are censored, not fitted, and listed.",
        )
    )
    out.append(para(f"Refit from the table: `{refit_command(a.batch_unit)}`", "note"))
    rows = []
    for g in a.groups:
        if g.result is None:
            continue
        r = g.result
        for b, s, k in zip(r.batch_sizes, r.steps, r.n_rows, strict=True):
            rows.append([g.group, _batch(b), _n(s), str(k), "reached"])
        for b, c in zip(r.not_reached, r.censored_at, strict=True):
            rows.append([g.group, _batch(b), "—", "", f"not reached within {_n(c)} steps"])
    if rows:
        out.append(
            table(
                ["group", "batch size", "steps to result", "tune trials", "status"],
                rows,
                "Steps to result per batch size",
            )
        )
    return out


def _target_kind(a: StudyAnalysis, t: float) -> str:
    if t == a.target:
        return "study target" if a.target not in a.automatic else "primary (automatic)"
    return "automatic" if t in a.automatic else "given (--target)"


def _targets_section(a: StudyAnalysis) -> list[Block]:
    rows: list[tuple[str, float, list[str]]] = []
    laws = []
    for g in a.groups:
        at = g.at_targets
        if at is None:
            continue
        for t, f in at.fits.items():
            problem = at.flagged.get(t)
            rows.append(
                (
                    g.group,
                    t,
                    [
                        g.group,
                        _g(t),
                        _target_kind(a, t),
                        _g(f.b_crit),
                        _ci(f.b_crit_ci),
                        _g(f.s_min),
                        str(f.n_points),
                        ", ".join(_batch(b) for b in f.not_reached) or "none",
                        "well-posed" if problem is None else f"not well-posed: {problem}",
                    ],
                )
            )
        for t, reason in at.skipped.items():
            status = (
                f"dropped: {reason[len(DROPPED) :]}"
                if reason.startswith(DROPPED)
                else f"not fitted: {reason}"
            )
            rows.append(
                (g.group, t, [g.group, _g(t), _target_kind(a, t), "—", "—", "—", "—", "—", status])
            )
        prefix = "" if g.group == "all" else f"{g.group}: "
        law = at.law
        if law is not None:
            laws.append(
                para(
                    f"{prefix}B_crit(L) = B*·L^slope with B* = {_g(law.b_star)}, slope = "
                    f"{_g(law.slope, 3)} {_ci(law.slope_ci, 3)}, α_B = {_g(law.alpha_b, 3)} "
                    f"(fitted on the {law.n_points} well-posed targets "
                    f"{', '.join(_g(t) for t in law.targets)})."
                )
            )
        elif at.law_note:
            laws.append(para(prefix + at.law_note + ".", "note"))
    if not rows:
        return []
    rows.sort(key=lambda r: (r[0], r[1]))
    out = [heading("B_crit vs target loss")]
    if a.n_cut:
        out.append(
            para(
                f"The curves were cut at the target: {a.n_cut} trials stopped on reaching eval "
                f"loss {', '.join(_g(c) for c in a.cut_at)} (stop_at_target), so no harder "
                f"target can be measured; only easier targets are available here.",
                "warning",
            )
        )
    out += [
        table(
            [
                "group",
                "target",
                "kind",
                f"B_crit ({a.batch_unit})",
                "95% interval",
                "S_min (steps)",
                "batch sizes fitted",
                "not reached",
                "status",
            ],
            [r[2] for r in rows],
            "S(B) refitted at each target from the stored eval-loss curves. Only well-posed "
            "fits enter the figure and B_crit(L): at least 3 batch sizes reaching the target "
            "after their 2nd evaluation, B_crit not at the bound of the fit, a 95% interval "
            "within a factor 10, curves not cut before the target. Automatic targets that "
            "fail are dropped, given ones are flagged.",
        ),
        *laws,
    ]
    return out


def _lr_section(a: StudyAnalysis) -> list[Block]:
    rows = []
    laws = []
    for g in a.groups:
        o = g.optimal_lr
        if o is None:
            continue
        for i, b in enumerate(o.batch_sizes):
            rows.append(
                [
                    g.group,
                    _batch(b),
                    _g(o.lr_opt[i]),
                    o.method[i],
                    "yes" if o.at_edge[i] else "no",
                    _g(o.best_lr[i]),
                    _g(o.objective_opt[i], 5),
                    str(o.n_trials[i]),
                ]
            )
        law = g.lr_law
        if law is not None:
            rules = "; ".join(
                f"{r.name} rule α={_g(r.alpha, 2)}: {'inside' if r.inside_ci else 'outside'} "
                f"the interval"
                for r in law.rules
            )
            below = "all batch sizes" if law.b_max is None else f"B ≤ {_g(law.b_max)}"
            sat = ""
            if law.saturating is not None and law.saturating.identified:
                sat = (
                    f" Saturating form ε_max/(1 + B_noise/B): ε_max = "
                    f"{_g(law.saturating.eps_max)}, B_noise = {_g(law.saturating.b_noise)}."
                )
            laws.append(
                para(
                    f"{g.group}: η*(B) = {_g(law.c)}·B^α with α = {_g(law.alpha, 3)} "
                    f"{_ci(law.alpha_ci, 3)} fitted on {below} ({law.n_points} batch sizes); "
                    f"closest rule: {law.closest_rule} ({rules}).{sat}"
                )
            )
    if not rows:
        return []
    return [
        heading("Optimal learning rate"),
        table(
            [
                "group",
                "batch size",
                "η*",
                "method",
                "at range edge",
                "best trial LR",
                "objective at η*",
                "trials",
            ],
            rows,
            "η* per batch size: minimum of a local quadratic in log LR over the tuned "
            "trials (method 'best': the best trial's LR)",
        ),
        *laws,
    ]


def _noise_section(a: StudyAnalysis) -> list[Block]:
    rows = []
    for g in a.groups:
        f = g.fit_at(a.target)
        for p, s in g.noise.items():
            rows.append(
                [
                    g.group,
                    p,
                    _g(s.median),
                    f"[{_g(s.q25)}, {_g(s.q75)}]",
                    str(s.n),
                    _n(s.from_step),
                    _g(f.b_crit) if f is not None else "—",
                ]
            )
    if not rows:
        return []
    return [
        heading("Gradient noise scale"),
        table(
            [
                "group",
                "point",
                f"B_simple median ({a.batch_unit})",
                "quartiles",
                "values",
                "from step",
                "B_crit at target",
            ],
            rows,
            "B_simple of each point's best trial over the second half of training, beside "
            "the fitted B_crit",
        ),
    ]


def _seeds_section(a: StudyAnalysis) -> list[Block]:
    rows = []
    for g in a.groups:
        s = g.seeds
        if s is None:
            continue
        for i, b in enumerate(s.batch_sizes):
            rows.append(
                [
                    g.group,
                    _batch(b),
                    str(s.n[i]),
                    str(s.n_reached[i]),
                    _g(s.mean[i]),
                    _g(s.std[i]),
                    _g(s.min[i]),
                    _g(s.max[i]),
                ]
            )
    if not rows:
        return []
    what = "steps to target" if a.target is not None else "objective"
    return [
        heading("Spread over confirm seeds"),
        table(
            [
                "group",
                a.axes.x.name if a.axes.x else "x",
                "runs",
                "reached",
                "mean",
                "std",
                "min",
                "max",
            ],
            rows,
            f"{what} of the confirm runs (best parameters, other seeds)",
        ),
    ]


def _ablation_section(a: StudyAnalysis) -> list[Block]:
    abl = a.ablation
    if abl is None:
        return []
    out = [heading(f"Ablation: {abl.axis}")]
    for row in abl.rows:
        title = "all" if math.isnan(row.batch) else f"batch size {_batch(row.batch)}"
        rows = [
            [v.variant, str(v.n_trials), _g(v.best, 5), _ci(v.ci, 5), v.best_trial or "—"]
            for v in row.variants
        ]
        out.append(
            table(
                [abl.axis, "finished trials", "best objective", "95% interval", "best trial"],
                rows,
                title,
            )
        )
        probs = "; ".join(f"P({x} beats {y}) = {p:.3f}" for x, y, p in row.p_beats)
        if probs:
            out.append(para(f"{title}: {probs} (bootstrap over each variant's trials)."))
        if row.warning:
            out.append(para(row.warning, "warning"))
    return out


def _commit(git: Mapping[str, Any]) -> str:
    """'<commit>[ (dirty)][ in <checkout>]' of a run.json git record."""
    text = str(git.get("commit") or "—") + (" (dirty)" if git.get("dirty") else "")
    return text + (f" in {git['path']}" if git.get("path") else "")


def _provenance_section(prov: Mapping[str, Any]) -> list[Block]:
    git = prov.get("git") or {}
    command = prov.get("command")
    versions = prov.get("versions") or {}
    seeds = prov.get("seeds") or {}
    trials = prov.get("trials") or {}
    rows = [
        ["command", shlex.join(map(str, command)) if isinstance(command, list) else "—"],
        ["started", str(prov.get("started") or "—")],
        ["ended", str(prov.get("ended") or "— (not ended)")],
        ["stepscale commit", _commit(git)],
        *([["working-dir commit", _commit(git["workdir"])]] if git.get("workdir") else []),
        ["versions", ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) or "—"],
        ["devices", ", ".join(map(str, prov.get("devices") or [])) or "—"],
        ["platform / host", f"{prov.get('platform') or '—'} / {prov.get('host') or '—'}"],
        ["storage", str(prov.get("storage") or "—")],
        [
            "seeds",
            f"sampler {seeds.get('sampler')}, train {seeds.get('train')}, tune trials "
            f"{seeds.get('tune_trials')}, confirm {seeds.get('confirm_trials')}",
        ],
        [
            "trials by state",
            ", ".join(f"{k} {v}" for k, v in sorted((trials.get("by_state") or {}).items())),
        ],
    ]
    out = [heading("Provenance"), table(["", ""], rows)]
    if prov.get("missing_files"):
        out.append(
            para("missing from the run directory: " + ", ".join(prov["missing_files"]), "warning")
        )
    return out


def _files_section(batch_unit: str) -> list[Block]:
    files = [
        ["index.html", "this report, self-contained"],
        ["report.md", "the same in Markdown"],
        ["fits.json", "every fit (`steps` has the fields of `sweep fit steps`)"],
        ["results.nc", "all trials' metrics by step (xarray / NetCDF, h5netcdf)"],
        ["steps_to_target.csv", "one row per tune trial (columns below)"],
        ["provenance.json", "command, config, search space, seeds, versions, git, devices"],
        ["figures/*.png", "the figures"],
    ]
    cols = [[c, d] for c, d in csv_columns(batch_unit)] + [
        [
            "<alias>",
            "each scientific, nuisance and fixed parameter (`param_<alias>` if the name is taken)",
        ],
        ["steps_at_<L>", "steps to each target L of the report, from the stored curves"],
    ]
    return [
        heading("Files"),
        table(["file", "content"], files),
        table(["steps_to_target.csv column", "meaning"], cols),
    ]


def _summary(a: StudyAnalysis, ds: xr.Dataset) -> list[Block]:
    states = ds["state"].values
    uniq, counts = np.unique(states, return_counts=True)
    by_state = ", ".join(f"{k} {v}" for k, v in zip(uniq.tolist(), counts.tolist(), strict=True))
    tgt = "none" if a.target is None else f"{a.target:g}"
    dropped = ""
    if a.dropped:
        dropped = (
            f" (automatic targets {', '.join(f'{t:g}' for t in sorted(a.dropped))} dropped: "
            f"S(B) not well-posed there)"
        )
    out = [
        para(
            f"Objective: {a.objective_kind or '—'}; target eval loss {tgt}; "
            f"{len(a.points)} points, {ds.sizes['trial']} trials ({by_state}). "
            f"Targets analysed: {', '.join(f'{t:g}' for t in a.targets) or 'none'}{dropped}."
        )
    ]
    for g in a.groups:
        f = g.fit_at(a.target)
        if f is not None:
            out.append(
                para(
                    f"{'' if g.group == 'all' else g.group + ': '}B_crit = {_g(f.b_crit)} "
                    f"{_ci(f.b_crit_ci)} {a.batch_unit}, S_min = {_g(f.s_min)} steps, E_min = "
                    f"{_g(f.e_min)} {a.batch_unit} at eval loss < {a.target:g}."
                )
            )
    return out


def document(
    a: StudyAnalysis,
    ds: xr.Dataset,
    prov: Mapping[str, Any],
    pngs: Mapping[str, bytes],
) -> list[Block]:
    """Every block of the report, in order."""
    blocks = [heading(f"Study {a.study}: scaling report", 1)]
    if a.partial:
        n_run = int(ds.attrs.get("n_running", 0))
        parts = [f"{n_run} trial(s) have no final state"] if n_run else []
        if not ds.attrs.get("run_ended"):
            parts.append("no end time is recorded in run.json")
        why = "; ".join(parts)
        blocks.append(
            para(
                f"This study is still running ({why}). This is a partial report: every number "
                f"will change as trials finish.",
                "partial",
            )
        )
    blocks += _summary(a, ds)
    for w in a.warnings:
        blocks.append(para(w, "warning"))
    for n in [*a.notes, *(n for g in a.groups for n in g.notes)]:
        blocks.append(para(n, "note"))
    blocks += [heading("Points"), _points_table(a)]
    blocks += _fit_section(a)
    if pngs:
        blocks.append(heading("Figures"))
        for name, png in pngs.items():
            blocks.append(fig(name, figures.FIGURES[name][2], png))
    blocks += _targets_section(a)
    blocks += _lr_section(a)
    blocks += _noise_section(a)
    blocks += _seeds_section(a)
    blocks += _ablation_section(a)
    blocks += _provenance_section(prov)
    blocks += _files_section(a.batch_unit)
    cfg = prov.get("config")
    if cfg is not None:
        blocks += [heading("Composed config", 3), code(json.dumps(cfg, indent=2, sort_keys=True))]
    return blocks


# ------------------------------------------------------------------------ writing


def _json_text(obj: Any) -> str:
    return (
        json.dumps(_strict(obj), indent=2, sort_keys=True, allow_nan=False, ensure_ascii=False)
        + "\n"
    )


def _strict(obj: Any) -> Any:
    """Non-finite floats → None, numpy scalars → Python (JSON must be strict)."""
    if isinstance(obj, Mapping):
        return {str(k): _strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _redact_block(b: Block) -> Block:
    """A block with passwords redacted from its text (never from PNG bytes)."""
    return replace(
        b,
        text=redact(b.text),
        headers=tuple(map(redact, b.headers)),
        rows=tuple(tuple(map(redact, r)) for r in b.rows),
    )


@dataclass(frozen=True)
class ReportResult:
    """What `sweep report` wrote."""

    report_dir: Path
    files: tuple[str, ...]
    figures: tuple[str, ...]
    partial: bool
    n_trials: int
    targets: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {
            "report_dir": str(self.report_dir),
            "files": list(self.files),
            "figures": list(self.figures),
            "partial": self.partial,
            "n_trials": self.n_trials,
            "targets": list(self.targets),
        }


def write_report(
    run_dir: str | os.PathLike[str],
    targets: Sequence[float] = (),
    settings: FitSettings | None = None,
) -> ReportResult:
    """Load a run directory, fit, draw and write ``RUN_DIR/report/`` (see the module
    docstring). Raises :class:`analysis.load.RunDirError` for unusable input."""
    root = Path(run_dir)
    ds = load(root)
    a = analyze(ds, targets, settings)
    out = root / "report"
    figdir = out / "figures"
    figdir.mkdir(parents=True, exist_ok=True)
    records = figures.build(a, ds)
    pngs = figures.render(records, figdir)
    for stale in figdir.glob("*.png"):
        if stale.stem not in pngs:
            stale.unlink()
    save(ds, out / "results.nc")
    write_text_atomic(out / "fits.json", _json_text(a.to_dict()))
    header, rows = steps_table(ds, a)
    write_text_atomic(out / "steps_to_target.csv", redact(_csv_text(header, rows)))
    prov = provenance(
        root,
        ds,
        {"targets": list(a.targets), "target": a.target, "settings": a.settings.to_dict()},
    )
    write_text_atomic(out / "provenance.json", _json_text(prov))
    blocks = [_redact_block(b) for b in document(a, ds, prov, pngs)]
    write_text_atomic(out / "report.md", to_markdown(blocks))
    write_text_atomic(out / "index.html", to_html(blocks, redact(f"{a.study}: stepscale report")))
    files = (
        "index.html",
        "report.md",
        "fits.json",
        "results.nc",
        "steps_to_target.csv",
        "provenance.json",
        *(f"figures/{n}.png" for n in pngs),
    )
    return ReportResult(out, files, tuple(pngs), a.partial, int(ds.sizes["trial"]), a.targets)
