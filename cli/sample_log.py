"""`sweep run conf=… --dry-run --sample-log FILE`: run the study's ``trainer.metrics`` over
a log the script printed before, and print the records a trial would give (one JSON object
a line on stdout, a summary on stderr), so a pattern is tested without launching a study.
A log that gives no record is refused as a trial would fail (exit 2, the last lines)."""

from __future__ import annotations

import sys
from pathlib import Path

from stepscale.errors import UsageError
from stepscale.reporters import dumps
from stepscale.sweeps.trainers.line_formats import EVAL_LOSS, parse_text
from stepscale.sweeps.trainers.metrics_file import MalformedRecord, parse_record
from stepscale.sweeps.trainers.patterns import PatternTimeout
from stepscale.sweeps.trainers.spec import COMMAND, TrainerSpec


def check_sample_log(trainer: TrainerSpec, path: str) -> int:
    """Print the records ``path`` gives with ``trainer``'s metrics settings; exit code 0."""
    if trainer.kind != COMMAND:
        raise UsageError("--sample-log: the study's trainer is not a command (trainer.command)")
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as exc:
        raise UsageError(f"--sample-log: cannot read {path}: {exc.strerror}") from None
    spec = trainer.metrics
    if not spec.parsed:
        try:
            records = [
                parse_record(line, n) for n, line in enumerate(text.splitlines(), 1) if line.strip()
            ]
        except MalformedRecord as exc:
            raise UsageError(f"--sample-log: {exc}") from None
        what, lines = "metrics.jsonl (trainer.metrics: jsonl)", len(records)
    else:
        try:
            records, stream = parse_text(spec, text)
        except PatternTimeout as exc:  # as a trial's attempt would fail
            raise UsageError(f"--sample-log {path}: {exc}") from None
        if not records:
            raise UsageError(f"--sample-log {path}: " + stream.no_record_message("sample log"))
        what, lines = f"format {spec.describe()}", stream.lines
    for record in records:
        print(dumps(record))
    evals = [r["step"] for r in records if EVAL_LOSS in r]
    keys = sorted({k for r in records for k in r} - {"step"})
    print(
        f"sweep: {path}: {len(records)} records from {lines} lines with {what}; metrics "
        f"{', '.join(keys)}; eval_loss at {len(evals)} steps"
        + (
            f" ({evals[0]}…{evals[-1]})"
            if evals
            else " — none: Optuna would hear nothing, "
            "map the script's eval loss with trainer.metrics.names"
        ),
        file=sys.stderr,
    )
    return 0


__all__ = ["check_sample_log"]
