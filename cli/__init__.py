"""The `sweep` command: the one floor above the orchestrator (`stepscale.sweeps`) and the
analysis (`stepscale.analysis`), and the only package that imports both."""
