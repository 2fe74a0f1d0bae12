"""The `sweep` command line. Machine-readable output on stdout, progress on stderr.

Every sub-command is a row of :data:`COMMANDS`: its name, a one-line help, the function
that adds its arguments (light: the parser of every sub-command is built at each start)
and the function that runs it, imported only when it runs. Exit codes
(`stepscale.cli.exit_codes`): 0 success; 2 bad input (config, override, usage, unreadable
file) with a message and no traceback; 130 on Ctrl-C (143 on SIGTERM) after saving state;
1 internal or environment error with a clear message.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass

from stepscale import __version__
from stepscale.cli import arguments, branch, fit, formats, predict, replay, report
from stepscale.cli.exit_codes import exit_code
from stepscale.sweeps.run.signals import sigterm_interrupts
from stepscale.sweeps.study.overrides import MULTIRUN_FLAGS, multirun_message


@dataclass(frozen=True)
class Command:
    """One sub-command of `sweep`."""

    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    runs: str  # "module:function", called with the parsed arguments; returns the exit code


COMMANDS: tuple[Command, ...] = (
    Command(
        "train",
        "one training run at fixed values",
        arguments.train_arguments,
        "stepscale.cli.train:command",
    ),
    Command(
        "run", "run, resume or extend a study", arguments.run_arguments, "stepscale.cli.run:command"
    ),
    Command(
        "status",
        "progress of a study, a row per point",
        arguments.status_arguments,
        "stepscale.cli.status:command",
    ),
    Command(
        "stop",
        "end a study's orchestrators cleanly (trials resume later)",
        arguments.stop_arguments,
        "stepscale.cli.stop:command",
    ),
    Command(
        "branch",
        "branch a finished trial at k×B from its checkpoints: B_crit over training",
        branch.branch_arguments,
        "stepscale.cli.branch:command",
    ),
    Command(
        "list",
        "list built-in and --config-dir presets",
        arguments.list_arguments,
        "stepscale.cli.listing:command",
    ),
    Command(
        "export",
        "write a study's search space in a standard format",
        formats.export_arguments,
        "stepscale.cli.formats:run_export",
    ),
    Command(
        "import",
        "turn a search space of another tool into a study conf",
        formats.import_arguments,
        "stepscale.cli.formats:run_import",
    ),
    Command(
        "report",
        "fits, figures and provenance of a study → RUN_DIR/report/",
        report.report_arguments,
        "stepscale.cli.report:command",
    ),
    Command(
        "replay",
        "replay a finished study's curves under cheaper protocols (JSON)",
        replay.replay_arguments,
        "stepscale.cli.replay:command",
    ),
    Command(
        "fit",
        "fit scaling laws to any table (CSV) and print JSON",
        fit.fit_arguments,
        "stepscale.cli.fit:command",
    ),
    Command(
        "predict",
        "a ladder's laws at a target run: η*, B_opt, B_crit, the settings (JSON with --json)",
        predict.predict_arguments,
        "stepscale.cli.predict:command",
    ),
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 as well; keep its message short
        self.print_usage(sys.stderr)
        print(f"sweep: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every sub-command."""
    parser = _Parser(
        prog="sweep", description="Batch-size / learning-rate scaling studies, counted in steps."
    )
    parser.add_argument("--version", action="version", version=f"sweep (stepscale) {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for c in COMMANDS:
        c.arguments(sub.add_parser(c.name, help=c.help))
    return parser


def _run(args: argparse.Namespace) -> int:
    """Import the command's module and run it."""
    command = next(c for c in COMMANDS if c.name == args.command)
    module, function = command.runs.split(":")
    return int(getattr(importlib.import_module(module), function)(args))


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `sweep` console script."""
    sigterm_interrupts()  # a cluster's SIGTERM ends a command as Ctrl-C does (exit 143)
    parser = build_parser()
    given = sys.argv[1:] if argv is None else argv
    if given and given[0].startswith("-") and given[0] not in ("-h", "--help", "--version"):
        parser.error(f"unknown option {given[0]} (a command's options follow the command)")
    # Overrides may stand before and after options (`sweep run conf=x --dry-run k=v`).
    args, extra = parser.parse_known_args(argv)
    if extra:
        if any(e in MULTIRUN_FLAGS for e in extra):
            parser.error(multirun_message())
        if getattr(args, "overrides", None) is None or any(e.startswith("-") for e in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides = [*args.overrides, *extra]
    args.argv = list(given)  # the command line as typed (provenance of run and branch)
    return exit_code(lambda: _run(args))


if __name__ == "__main__":
    sys.exit(main())
