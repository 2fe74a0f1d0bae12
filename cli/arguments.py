"""The arguments of the study and training commands (`train`, `run`, `status`, `stop`,
`list`). Light on purpose: the parser of every sub-command is built at each start of
`sweep`, and what a command runs is imported only when it runs."""

from __future__ import annotations

import argparse


def _config_dir(p: argparse.ArgumentParser, adds: str) -> None:
    p.add_argument(
        "--config-dir", help=f"an extra directory of configs (its conf/ group adds {adds})"
    )


def train_arguments(p: argparse.ArgumentParser) -> None:
    """``sweep train conf=NAME [overrides] [--config-dir DIR] [--cfg]``."""
    p.add_argument("overrides", nargs="*", help="conf=NAME and key=value overrides")
    _config_dir(p, "presets")
    p.add_argument("--cfg", action="store_true", help="print the composed config and exit")


def run_arguments(p: argparse.ArgumentParser) -> None:
    """``sweep run conf=NAME [overrides] [--dry-run] [--cfg] [--json] [--report] …``."""
    p.add_argument("overrides", nargs="*", help="conf=NAME and key=value overrides")
    _config_dir(p, "studies")
    p.add_argument("--dry-run", action="store_true", help="print the plan and launch nothing")
    p.add_argument("--cfg", action="store_true", help="print the composed config and exit")
    p.add_argument(
        "--sample-log",
        metavar="FILE",
        help="with --dry-run: print the records trainer.metrics reads from FILE (a log the "
        "script printed) and launch nothing",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--report",
        action="store_true",
        help="at the end, also write the report (as `sweep report RUN_DIR` would) and print "
        "where its index.html is",
    )
    p.add_argument(
        "--detach",
        action="store_true",
        help="launcher=slurm: run the orchestrator as a small SLURM job and return at once",
    )


def status_arguments(p: argparse.ArgumentParser) -> None:
    """``sweep status RUN_DIR [--json]``."""
    p.add_argument("run_dir", help="the study's run dir (e.g. runs/smoke)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def stop_arguments(p: argparse.ArgumentParser) -> None:
    """``sweep stop RUN_DIR [--timeout S]``."""
    p.add_argument("run_dir", help="the study's run dir (e.g. runs/smoke)")
    p.add_argument(
        "--timeout", type=float, default=180.0, help="seconds to wait for them (default 180)"
    )


def list_arguments(p: argparse.ArgumentParser) -> None:
    """``sweep list [--config-dir DIR]``."""
    p.add_argument("--config-dir", help="also list the presets in DIR/conf/")
