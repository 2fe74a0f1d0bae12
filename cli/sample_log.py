"""`sweep run conf=… --dry-run --sample-log FILE`: run the study's ``trainer.metrics`` over
a log the script printed before (or a TensorBoard folder, a JSON document) and print the
records a trial would give (one JSON object a line on stdout, a summary on stderr), so a
reading is tested without launching a study. A log that gives no record, or records whose
step cannot be trusted, is refused as a trial would fail (exit 2, the lines). With no
metrics block (or a log that is not a metrics.jsonl), every preset and built-in format is
tried and the block that reads it is printed, ready to paste."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from stepscale.errors import UsageError
from stepscale.reporters import dumps
from stepscale.sweeps.trainers.arg_styles import flat_config
from stepscale.sweeps.trainers.line_formats import EVAL_LOSS
from stepscale.sweeps.trainers.metrics_file import MalformedRecord, UnreadableSource, parse_record
from stepscale.sweeps.trainers.patterns import PatternTimeout
from stepscale.sweeps.trainers.spec import COMMAND, TrainerSpec
from stepscale.sweeps.trainers.suggest import read_file, suggest


def check_sample_log(trainer: TrainerSpec, path: str) -> int:
    """Print the records ``path`` gives with ``trainer``'s metrics settings; exit code 0."""
    if trainer.kind != COMMAND:
        raise UsageError("--sample-log: the study's trainer is not a command (trainer.command)")
    place = Path(path)
    if not place.exists():
        raise UsageError(f"--sample-log: cannot read {path}: no such file or folder")
    spec = trainer.metrics
    settings = flat_config(trainer.config)
    if not spec.parsed:
        records = _jsonl_records(place)
        if records is None:
            return _suggest(place, settings)
        what, lines, notes = "metrics.jsonl (trainer.metrics: jsonl)", len(records), []
    else:
        try:
            records, stream = read_file(spec, place, settings)
        except (MalformedRecord, PatternTimeout, UnreadableSource) as exc:  # as a trial's would
            raise UsageError(f"--sample-log {path}: {exc}") from None
        except OSError as exc:
            raise UsageError(f"--sample-log: cannot read {path}: {exc.strerror}") from None
        if not records:
            raise UsageError(f"--sample-log {path}: " + stream.no_record_message("sample log"))
        what, lines, notes = f"{spec.describe()}", stream.lines, stream.notes()
    _print(path, records, what, lines, notes, spec.outputs() if spec.parsed else set())
    return 0


def _jsonl_records(place: Path) -> list[dict] | None:
    """The records of a metrics.jsonl, None when the file is not one (a printed log)."""
    if place.is_dir():
        return None
    text = place.read_bytes().decode("utf-8", errors="replace")
    try:
        return [parse_record(line, n) for n, line in enumerate(text.split("\n"), 1) if line.strip()]
    except MalformedRecord:
        return None


def _suggest(place: Path, settings: dict) -> int:
    readings = suggest(place, settings)
    if not readings:
        raise UsageError(
            f"--sample-log {place}: no preset ({', '.join(sorted(_presets()))}) nor built-in "
            "format reads a usable step from it: no reading gave two or more records at "
            "different steps that pass the step checks. Write a trainer.metrics block "
            "(docs/trainers.md, section 2b): a step derived from what it prints "
            "(step: 'epoch * steps_per_epoch + batch'), or counted (step_every: N)"
        )
    best = readings[0]
    for record in best.records:
        print(dumps(record))
    block = yaml.safe_dump({"trainer": {"metrics": best.block}}, sort_keys=False).rstrip()
    others = ", ".join(_label(r.block) for r in readings[1:4])
    steps = {tuple(r["step"] for r in best.records)}
    differ = [
        _label(r.block) for r in readings[1:] if tuple(x["step"] for x in r.records) not in steps
    ]
    print(
        f"sweep: {place} has no trainer.metrics block to check; this one reads it "
        f"({len(best.records)} records above):\n{block}"
        + (f"\n(also reading it: {others})" if others else "")
        + (
            f"\nCheck the steps: {', '.join(differ)} read other steps from it — pick the "
            "preset of the framework that wrote it (e.g. Lightning logs at its step - 1)"
            if differ
            else ""
        ),
        file=sys.stderr,
    )
    return 0


def _presets() -> list[str]:
    from stepscale.sweeps.trainers.presets import PRESETS

    return list(PRESETS)


def _label(block: dict) -> str:
    return f"preset {block['preset']}" if "preset" in block else f"format {block['format']}"


def _print(
    path: str, records: list[dict], what: str, lines: int, notes: list[str], outputs: set[str]
) -> None:
    for record in records:
        print(dumps(record))
    evals = [r["step"] for r in records if EVAL_LOSS in r]
    keys = sorted({k for r in records for k in r} - {"step"})
    if evals:
        tail = f" ({evals[0]}…{evals[-1]})"
    elif EVAL_LOSS in outputs:
        tail = " — none: the reading names an eval loss, but no line of this log gave it"
    else:
        tail = (
            " — none: Optuna would hear nothing, map the script's eval loss with "
            "trainer.metrics.names"
        )
    print(
        f"sweep: {path}: {len(records)} records from {lines} lines with {what}; metrics "
        f"{', '.join(keys)}; eval_loss at {len(evals)} steps{tail}"
        + "".join(f"; {n}" for n in notes),
        file=sys.stderr,
    )


__all__ = ["check_sample_log"]
