"""The whole report as a list of blocks: the summary first, the points, every section, the
figures, the files and the provenance."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

from stepscale.analysis import figures
from stepscale.analysis.report.blocks import (
    Block,
    code,
    fig,
    heading,
    para,
    table,
)
from stepscale.analysis.report.course import course_sections
from stepscale.analysis.report.numbers import interval, num
from stepscale.analysis.report.sections import (
    ablation_section,
    fit_section,
    lr_section,
    noise_section,
    points_table,
    seeds_section,
    targets_section,
)
from stepscale.analysis.report.tables import (
    csv_columns,
)
from stepscale.analysis.study import StudyAnalysis


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
        [
            "replay.json",
            "cheaper protocols replayed from the curves (`sweep replay`) and the health checks",
        ],
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
                    f"{'' if g.group == 'all' else g.group + ': '}B_crit = {num(f.b_crit)} "
                    f"{interval(f.b_crit_ci)} {a.batch_unit}, S_min = {num(f.s_min)} steps, E_min = "
                    f"{num(f.e_min)} {a.batch_unit} at eval loss < {a.target:g}."
                )
            )
    return out


def document(
    a: StudyAnalysis,
    ds: xr.Dataset,
    prov: Mapping[str, Any],
    pngs: Mapping[str, bytes],
    health: Sequence[Block] = (),
    cheaper: Sequence[Block] = (),
) -> list[Block]:
    """Every block of the report, in order; ``health`` (the health checks) follows the S(B)
    fit, ``cheaper`` (replay, adaptive batch sizes, transfer) the ablation."""
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
    blocks += [heading("Points"), points_table(a)]
    blocks += fit_section(a)
    blocks += health
    if pngs:
        blocks.append(heading("Figures"))
        for name, png in pngs.items():
            blocks.append(fig(name, figures.FIGURES[name][2], png))
    blocks += targets_section(a)
    blocks += lr_section(a)
    blocks += noise_section(a)
    blocks += course_sections(a, ds)
    blocks += seeds_section(a)
    blocks += ablation_section(a)
    blocks += cheaper
    blocks += _provenance_section(prov)
    blocks += _files_section(a.batch_unit)
    cfg = prov.get("config")
    if cfg is not None:
        blocks += [heading("Composed config", 3), code(json.dumps(cfg, indent=2, sort_keys=True))]
    return blocks
