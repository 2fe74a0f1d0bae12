"""Reading stored results: datasets, fits, figures and reports."""
