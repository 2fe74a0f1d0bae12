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
- ``replay.json``: the study replayed under cheaper protocols (:mod:`analysis.replay`, as
  `sweep replay` prints it) and the health checks (:mod:`analysis.health`, also in
  ``fits.json``);
- ``figures/<name>.png`` and ``figures/<name>.svg`` (the same figure as a vector file).

The page opens with a summary box (the answer of :mod:`analysis.headline`, what it rests
on, health warnings) and at once the S(B) figure, then a table of contents; the composed
config is folded away at the end (docs/report.md).

A study with running trials, or whose run.json has no end time, gives a partial report,
marked as such at the top of every human-readable file and by ``"partial": true``.

Batch sizes, examples, B_crit, E_min and B_simple are labelled with the study's batch unit
(``StudyAnalysis.batch_unit``: the unit space.json gives the batch axis, e.g. sequences
for a language model, examples for the noisy quadratic model), also written as
``batch_unit`` in fits.json.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from stepscale.analysis import figures
from stepscale.analysis.analyze import analyze
from stepscale.analysis.figures.replay import replay_figure
from stepscale.analysis.fits.records import Record, json_ready
from stepscale.analysis.health import S_OF_B_CHECKS, health_checks
from stepscale.analysis.load import RunDirError, load, save
from stepscale.analysis.provenance import provenance
from stepscale.analysis.replay import ReplayError, ReplayResult, replay
from stepscale.analysis.report.blocks import (
    Block,
    to_html,
    to_markdown,
)
from stepscale.analysis.report.cheap import (
    adaptive_section,
    health_section,
    replay_section,
    transfer_section,
)
from stepscale.analysis.report.page import document
from stepscale.analysis.report.tables import (
    csv_text,
    steps_table,
)
from stepscale.analysis.study import FitSettings
from stepscale.files import read_json, write_text_atomic
from stepscale.redact import redact
from stepscale.rundir import ADAPTIVE_JSON, REPORT_DIR, SPACE_JSON, TRANSFER_JSON

T = TypeVar("T")

# Draws of each random protocol in the report's replay (`sweep replay` defaults to more).
REPORT_DRAWS = 50


def _json_text(obj: Any) -> str:
    return (
        json.dumps(json_ready(obj), indent=2, sort_keys=True, allow_nan=False, ensure_ascii=False)
        + "\n"
    )


def _redact_block(b: Block) -> Block:
    """A block with passwords redacted from its text (never from PNG bytes)."""
    return replace(
        b,
        text=redact(b.text),
        headers=tuple(map(redact, b.headers)),
        rows=tuple(tuple(map(redact, r)) for r in b.rows),
    )


@dataclass(frozen=True)
class ReportResult(Record):
    """What `sweep report` wrote."""

    report_dir: Path
    files: tuple[str, ...]
    figures: tuple[str, ...]
    partial: bool
    n_trials: int
    targets: tuple[float, ...]


def write_report(
    run_dir: str | os.PathLike[str],
    targets: Sequence[float] = (),
    settings: FitSettings | None = None,
) -> ReportResult:
    """Load a run directory, fit, draw and write ``RUN_DIR/report/`` (see the module
    docstring). Raises :class:`analysis.load.RunDirError` for unusable input and
    :class:`ReportWriteError` when the report cannot be written.

    The report is written whole into a folder beside ``report/`` that then takes its place:
    a failure (a read-only run dir, a full disk) leaves the previous report as it was and
    nothing partial behind."""
    root = Path(run_dir)
    out = root / REPORT_DIR
    if out.exists() and not out.is_dir():
        raise RunDirError(f"{out} exists and is not a directory; move it away")
    if root.is_dir() and not os.access(root, os.W_OK):  # told before any work
        raise _cannot_write(root, "not writable", root)
    ds = load(root)
    a = analyze(ds, targets, settings)
    tmp = root / f".{REPORT_DIR}.{os.getpid()}.tmp"
    try:
        shutil.rmtree(tmp, ignore_errors=True)  # left by a killed process of this pid
        pngs = _writing(lambda: _write_files(tmp, root, ds, a), root, out)
        _writing(lambda: _replace_dir(tmp, out), root, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    files = (
        "index.html",
        "report.md",
        "fits.json",
        "results.nc",
        "steps_to_target.csv",
        "provenance.json",
        "replay.json",
        *(f"figures/{n}.{ext}" for n in pngs for ext in ("png", "svg")),
    )
    return ReportResult(out, files, tuple(pngs), a.partial, int(ds.sizes["trial"]), a.targets)


class ReportWriteError(RunDirError):
    """The report could not be written (the run dir is read-only, …); nothing was."""


def _writing(write: Callable[[], T], root: Path, out: Path) -> T:
    """``write()``, with a failure to write told as `ReportWriteError` (a full disk stays
    an `OSError`: the command line says "disk full", exit 1)."""
    try:
        return write()
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise
        raise _cannot_write(root, exc.strerror or str(exc), exc.filename or out) from None


def _cannot_write(root: Path, reason: str, where: Any) -> ReportWriteError:
    return ReportWriteError(
        f"cannot write the report into {root} ({reason}: {where}); nothing was written. "
        "The run dir must be writable: copy it elsewhere to report on it"
    )


def _write_files(out: Path, root: Path, ds: Any, a: Any) -> dict[str, bytes]:
    """Every file of the report into the new folder ``out``; returns the figures' PNGs."""
    figdir = out / "figures"
    figdir.mkdir(parents=True)
    rep, rep_note = _replay(ds, a)
    checks = health_checks(a, ds, read_json(root / SPACE_JSON, lenient=True), rep)
    records = figures.build(a, ds)
    if rep is not None and (rec := replay_figure(rep)) is not None:
        records["replay"] = rec
    pngs = figures.render(records, figdir)
    save(ds, out / "results.nc")
    write_text_atomic(
        out / "fits.json",
        _json_text({**a.to_dict(), "health": checks}),
    )
    replay_doc = {"health": checks, "note": rep_note}
    if rep is not None:
        replay_doc |= rep.to_dict()
    write_text_atomic(out / "replay.json", _json_text(replay_doc))
    header, rows = steps_table(ds, a)
    write_text_atomic(out / "steps_to_target.csv", redact(csv_text(header, rows)))
    prov = provenance(
        root,
        ds,
        {"targets": list(a.targets), "target": a.target, "settings": a.settings.to_dict()},
    )
    write_text_atomic(out / "provenance.json", _json_text(prov))
    cheaper = [
        *replay_section(rep, rep_note),
        *adaptive_section(read_json(root / ADAPTIVE_JSON, lenient=True)),
        *transfer_section(read_json(root / TRANSFER_JSON, lenient=True)),
    ]
    # A ladder's answer is its laws: the S(B) checks of its rungs at the study's one target
    # stay in the health section, out of the answer box.
    skip = S_OF_B_CHECKS if a.ladder is not None else ()
    warns = [f"{c.name}: {c.message}" for c in checks if not c.ok and c.name not in skip]
    blocks = document(a, ds, prov, pngs, health_section(checks), cheaper, warns)
    blocks = [_redact_block(b) for b in blocks]
    write_text_atomic(out / "report.md", to_markdown(blocks))
    write_text_atomic(out / "index.html", to_html(blocks, redact(f"{a.study}: stepscale report")))
    return pngs


def _replace_dir(new: Path, out: Path) -> None:
    """Put the folder ``new`` at ``out``, replacing the old one (put back on failure)."""
    if not out.exists():
        os.rename(new, out)
        return
    old = out.with_name(f".{out.name}.{os.getpid()}.old")
    os.rename(out, old)
    try:
        os.rename(new, out)
    except OSError:
        os.rename(old, out)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _replay(ds: Any, a: Any) -> tuple[ReplayResult | None, str | None]:
    """The replay of the study's default protocols at its primary target, or why not."""
    if a.target is None or a.axes.batch is None:
        return None, None
    if a.partial:
        return None, "the study is still running: the replay of cheaper protocols waits for its end"
    try:
        return replay(ds, target=a.target, draws=REPORT_DRAWS, seed=a.settings.seed), None
    except ReplayError as exc:
        return None, f"cheaper protocols not replayed: {exc}"
