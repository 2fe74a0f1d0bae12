"""Reading stored results: datasets, fits, figures and reports.

``load(run_dir)`` reads a run directory into an ``xarray.Dataset`` (dims trial × step);
``load_table(csv, …)`` reads any CSV table for reanalysis with the fits.
"""

from stepscale.analysis.load import load
from stepscale.analysis.table import load_table

__all__ = ["load", "load_table"]
