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
from stepscale.analysis.headline import answer_lines, headline
from stepscale.analysis.report.blocks import (
    Block,
    end_fold,
    fig,
    fold,
    folded,
    heading,
    para,
    summary_box,
    table,
    toc,
)
from stepscale.analysis.report.course import course_sections
from stepscale.analysis.report.ladder import ladder_section
from stepscale.analysis.report.learning import learning_section
from stepscale.analysis.report.sections import (
    ablation_section,
    fit_section,
    lr_law_text,
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

# Shown right after the summary box (when the study has it).
FIRST_FIGURE = "steps_vs_batch"


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


def _basis(a: StudyAnalysis, ds: xr.Dataset) -> str:
    """What the study rests on: objective, target, points and trials by state."""
    states = ds["state"].values
    uniq, counts = np.unique(states, return_counts=True)
    by_state = ", ".join(f"{k} {v}" for k, v in zip(uniq.tolist(), counts.tolist(), strict=True))
    if a.ladder is not None:  # its B_crit targets are per D (the rungs line); no one target
        rungs = len(a.ladder.rungs)
        return (
            f"Objective: {a.objective_kind or '—'}; {len(a.points)} points ({rungs} rungs × "
            f"their batch sizes), {ds.sizes['trial']} trials ({by_state})."
        )
    tgt = "none" if a.target is None else f"{a.target:g}"
    dropped = ""
    if a.dropped:
        dropped = (
            f" (automatic targets {', '.join(f'{t:g}' for t in sorted(a.dropped))} dropped: "
            f"S(B) not well-posed there)"
        )
    return (
        f"Objective: {a.objective_kind or '—'}; target eval loss {tgt}; "
        f"{len(a.points)} points, {ds.sizes['trial']} trials ({by_state}). "
        f"Targets analysed: {', '.join(f'{t:g}' for t in a.targets) or 'none'}{dropped}."
    )


def fold_tables(blocks: Sequence[Block], keep: int = 0) -> list[Block]:
    """``blocks`` with every table after the first ``keep`` folded away (``<details>``
    titled by its caption): reference tables stay one click away, the page stays short."""
    out: list[Block] = []
    seen = 0
    for b in blocks:
        if b.kind == "table":
            seen += 1
            if seen > keep:
                title = f"table: {b.text}" if b.text else f"table ({len(b.rows)} rows)"
                if len(title) > 100:
                    title = title[:99].rstrip() + "…"
                out += [fold(title), b, end_fold()]
                continue
        out.append(b)
    return out


def summary_lines(a: StudyAnalysis, ds: xr.Dataset) -> list[str]:
    """The answer (`analysis.headline.answer_lines`), the η*(B) law when there is one (not
    for a ladder: its rungs' η*(B) are in the optimal-LR section), and the basis."""
    lines = answer_lines(a)
    if a.ladder is None:
        for g in a.groups:
            if g.lr_law is not None and g.optimal_lr is not None:
                lines.append(lr_law_text(g.group, g.lr_law, g.optimal_lr.batch_sizes))
    lines.append(_basis(a, ds))
    return lines


def document(
    a: StudyAnalysis,
    ds: xr.Dataset,
    prov: Mapping[str, Any],
    pngs: Mapping[str, bytes],
    health: Sequence[Block] = (),
    cheaper: Sequence[Block] = (),
    health_warnings: Sequence[str] = (),
) -> list[Block]:
    """Every block of the report, in order: the summary box (the answer, what it rests on,
    ``health_warnings``) and at once the S(B) figure, the contents, then every section;
    ``health`` (the health checks) follows the S(B) fit, ``cheaper`` (replay, adaptive
    batch sizes, transfer) the ablation; the composed config comes last, folded."""
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
    warns = [*health_warnings]
    # A ladder's answer is its laws: its rungs' S(B) at the study's one target warn under
    # "Notes and warnings", not in the answer box.
    for g in headline(a).groups if a.ladder is None else ():
        warns += [w for w in g.warnings if w not in warns]
    blocks.append(summary_box("Answer", summary_lines(a, ds), warns))
    first = FIRST_FIGURE if FIRST_FIGURE in pngs else None
    if first is not None:
        blocks.append(fig(first, figures.FIGURES[first][2], pngs[first]))
    blocks.append(toc())
    notes = [*a.notes, *(n for g in a.groups for n in g.notes)]
    if a.warnings or notes:
        blocks.append(heading("Notes and warnings"))
    blocks += [para(w, "warning") for w in a.warnings]
    blocks += [para(n, "note") for n in notes]
    blocks += [heading("Points"), points_table(a)]
    blocks += fold_tables(learning_section(a))
    blocks += fold_tables(fit_section(a), keep=1)
    blocks += fold_tables(ladder_section(a), keep=2)
    blocks += fold_tables(health)
    if set(pngs) - {first}:
        blocks.append(heading("Figures"))
        for name, png in pngs.items():
            if name != first:
                blocks.append(fig(name, figures.FIGURES[name][2], png))
    blocks += fold_tables(targets_section(a))
    blocks += fold_tables(lr_section(a))
    blocks += fold_tables(noise_section(a))
    blocks += course_sections(a, ds)
    blocks += fold_tables(seeds_section(a))
    blocks += ablation_section(a)
    blocks += fold_tables(cheaper)
    blocks += fold_tables(_provenance_section(prov))
    blocks += fold_tables(_files_section(a.batch_unit))
    cfg = prov.get("config")
    if cfg is not None:
        blocks += [
            heading("Composed config"),
            folded("the composed config (JSON)", json.dumps(cfg, indent=2, sort_keys=True)),
        ]
    return blocks
