"""`sweep report RUN_DIR`: fits, figures and provenance of a study → ``RUN_DIR/report/``.

- :mod:`.write` runs the analysis and writes the files (what each holds is listed there);
- :mod:`.page` assembles the report's blocks, :mod:`.sections` writes one section per fit,
  :mod:`.tables` the per-trial table, :mod:`.numbers` the way numbers are written;
- :mod:`.blocks` renders blocks to Markdown and to one self-contained HTML page.
"""

from stepscale.analysis.report.tables import CSV_COLUMNS, csv_columns, refit_command, steps_table
from stepscale.analysis.report.write import ReportResult, write_report

__all__ = [
    "CSV_COLUMNS",
    "ReportResult",
    "csv_columns",
    "refit_command",
    "steps_table",
    "write_report",
]
