"""The `sweep` command line. Machine-readable output on stdout, progress on stderr.

Exit codes (`stepscale.sweeps.errors.exit_code`): 0 success; 2 bad input (config, override,
usage, unreadable file) with a message and no traceback; 130 on Ctrl-C (143 on SIGTERM) after
saving state; 1 internal or environment error with a clear message. No sub-command module
imports this one.
"""

from __future__ import annotations

import argparse
import sys

from stepscale import __version__
from stepscale.sweeps.errors import UsageError, exit_code
from stepscale.sweeps.overrides import MULTIRUN_FLAGS, multirun_message
from stepscale.sweeps.signals import sigterm_interrupts


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

    train = sub.add_parser("train", help="one training run at fixed values")
    train.add_argument("overrides", nargs="*", help="conf=NAME and key=value overrides")
    train.add_argument(
        "--config-dir", help="an extra directory of configs (its conf/ group adds presets)"
    )
    train.add_argument("--cfg", action="store_true", help="print the composed config and exit")

    run = sub.add_parser("run", help="run, resume or extend a study")
    run.add_argument("overrides", nargs="*", help="conf=NAME and key=value overrides")
    run.add_argument(
        "--config-dir", help="an extra directory of configs (its conf/ group adds studies)"
    )
    run.add_argument("--dry-run", action="store_true", help="print the plan and launch nothing")
    run.add_argument("--cfg", action="store_true", help="print the composed config and exit")
    run.add_argument(
        "--sample-log",
        metavar="FILE",
        help="with --dry-run: print the records trainer.metrics reads from FILE (a log the "
        "script printed) and launch nothing",
    )
    run.add_argument("--json", action="store_true", help="machine-readable output")
    run.add_argument(
        "--report",
        action="store_true",
        help="at the end, also write the report (as `sweep report RUN_DIR` would) and print "
        "where its index.html is",
    )
    run.add_argument(
        "--detach",
        action="store_true",
        help="launcher=slurm: run the orchestrator as a small SLURM job and return at once",
    )

    status = sub.add_parser("status", help="progress of a study, a row per point")
    status.add_argument("run_dir", help="the study's run dir (e.g. runs/smoke)")
    status.add_argument("--json", action="store_true", help="machine-readable output")

    stop = sub.add_parser("stop", help="end a study's orchestrators cleanly (trials resume later)")
    stop.add_argument("run_dir", help="the study's run dir (e.g. runs/smoke)")
    stop.add_argument(
        "--timeout", type=float, default=180.0, help="seconds to wait for them (default 180)"
    )

    from stepscale.sweeps.branch_args import add_branch_command

    add_branch_command(sub)

    lst = sub.add_parser("list", help="list built-in and --config-dir presets")
    lst.add_argument("--config-dir", help="also list the presets in DIR/conf/")

    from stepscale.sweeps.formats.cli import add_format_commands

    add_format_commands(sub)
    from stepscale.analysis.report_cli import add_report_command

    add_report_command(sub)
    from stepscale.analysis.replay_cli import add_replay_command

    add_replay_command(sub)
    try:
        from stepscale.analysis.fit_cli import add_fit_commands
    except ImportError:  # analysis not available in a trimmed install
        pass
    else:
        add_fit_commands(sub)
    return parser


def _dispatch(args: argparse.Namespace, argv_hint: list[str] | None = None) -> int:
    if args.command == "train":
        from stepscale.sweeps.train_cmd import run_train

        return run_train(args.overrides, args.config_dir, args.cfg)
    if args.command == "run":
        from stepscale.sweeps.run_cmd import run_study

        argv = sys.argv[1:] if argv_hint is None else argv_hint
        return run_study(
            args.overrides,
            args.config_dir,
            dry_run=args.dry_run,
            print_cfg=args.cfg,
            as_json=args.json,
            argv=argv,
            detach=args.detach,
            report=args.report,
            sample_log=args.sample_log,
        )
    if args.command == "status":
        from stepscale.sweeps.status_cmd import print_status

        return print_status(args.run_dir, args.json)
    if args.command == "stop":
        from stepscale.sweeps.stop_cmd import stop_study

        return stop_study(args.run_dir, args.timeout)
    if args.command == "report":
        import json

        from stepscale.analysis.report_cli import ReportInputError, run_report

        try:
            result = run_report(args)
        except ReportInputError as exc:
            raise UsageError(str(exc)) from None
        except MemoryError:
            return _out_of_memory("the report", "run it on a machine with more memory")
        print(json.dumps(result, indent=2, sort_keys=True, default=str))
        return 0
    if args.command == "replay":
        import json

        from stepscale.analysis.replay_cli import ReplayInputError, run_replay

        try:
            result = run_replay(args)
        except ReplayInputError as exc:
            raise UsageError(str(exc)) from None
        print(json.dumps(result, indent=2, sort_keys=True, allow_nan=False))
        return 0
    if args.command in ("export", "import"):
        from stepscale.sweeps.formats.cli import run_export, run_import

        return run_export(args) if args.command == "export" else run_import(args)
    if args.command == "branch":
        import json

        from stepscale.analysis.branching import summary
        from stepscale.sweeps.branch_args import request_from_args
        from stepscale.sweeps.branch_cmd import run_branch

        argv = sys.argv[1:] if argv_hint is None else argv_hint
        base = run_branch(args.run_dir, request_from_args(args), argv)
        print(json.dumps(summary(args.run_dir, base), indent=2, sort_keys=True))
        return 0
    if args.command == "list":
        from stepscale.sweeps.listing import print_presets

        return print_presets(args.config_dir)
    if args.command == "fit":
        import json

        from stepscale.analysis.fit_cli import FitInputError, run_fit

        try:
            result = run_fit(args)
        except FitInputError as exc:
            raise UsageError(str(exc)) from None
        except MemoryError:
            return _out_of_memory("the fit", "lower --n-boot or fit a smaller table")
        print(json.dumps(result, indent=2, sort_keys=True, allow_nan=False))
        return 0
    raise UsageError(f"unknown command {args.command}")


def _out_of_memory(what: str, advice: str) -> int:
    """An environment failure: print why and return exit code 1."""
    print(f"sweep: error: not enough memory for {what}; {advice}", file=sys.stderr)
    return 1


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
    return exit_code(lambda: _dispatch(args, argv))


if __name__ == "__main__":
    sys.exit(main())
