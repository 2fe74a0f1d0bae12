"""Launchers: how trial jobs start (warm workers, a process per trial, SLURM, inline), are
watched and are found again; the detached orchestrator."""
