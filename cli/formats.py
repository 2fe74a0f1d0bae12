"""`sweep export conf=NAME [k=v …] [--format F] [-o FILE]` and
`sweep import FILE --format F [-o FILE]`.

The text goes to stdout (or to ``-o FILE``); what a conversion cannot express, or what an
import had to add or leave out, is one warning line on stderr. Bad input raises
``UsageError`` (exit 2).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stepscale.errors import UsageError
from stepscale.sweeps.formats import FORMATS, FormatError, export_space, import_space, study_yaml


def export_arguments(export: argparse.ArgumentParser) -> None:
    """The arguments of ``sweep export``."""
    export.add_argument("overrides", nargs="*", help="conf=NAME and key=value overrides")
    export.add_argument(
        "--config-dir", help="an extra directory of configs (its conf/ group adds studies)"
    )
    export.add_argument(
        "--format",
        default="stepscale",
        metavar="F",
        help=f"one of {', '.join(FORMATS)} (default stepscale)",
    )
    export.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    export.add_argument("--force", action="store_true", help="let -o replace an existing file")


def import_arguments(imp: argparse.ArgumentParser) -> None:
    """The arguments of ``sweep import``."""
    imp.add_argument("file", help="the search-space file ('-' reads stdin)")
    imp.add_argument("--format", required=True, metavar="F", help=f"one of {', '.join(FORMATS)}")
    imp.add_argument("-o", "--output", metavar="FILE", help="write the conf YAML here")
    imp.add_argument("--force", action="store_true", help="let -o replace an existing file")
    imp.add_argument(
        "--trainer",
        metavar="SPEC",
        help="your own trainer ('module:function' or a command line): parameters keep the "
        "names the file gives them as keys of its config, none is left out",
    )


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise UsageError(f"--format: unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")


def _check_output(output: str | None, force: bool) -> None:
    """``-o FILE`` may replace a file only with ``--force`` (it may be a hand-written conf),
    and never a folder: checked before anything is read or written."""
    if output is None:
        return
    path = Path(output)
    if path.is_dir():
        raise UsageError(f"-o {output}: is a folder; give a file name")
    if path.exists() and not force:
        raise UsageError(
            f"-o {output}: the file exists and was left as it is; add --force to replace "
            "it, or give another file name"
        )


def _write(text: str, output: str | None) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    path = Path(output)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:
        raise UsageError(f"-o {output}: cannot write it ({exc.strerror})") from None


def run_export(args: argparse.Namespace) -> int:
    """`sweep export`: compose and validate the study, print its search space in
    ``args.format``; one warning line lists what the format cannot express."""
    from stepscale.sweeps.study.compose import prepare_study
    from stepscale.sweeps.study.space import build_space
    from stepscale.sweeps.study.space_doc import space_document
    from stepscale.sweeps.study.validate import check_study

    _check_format(args.format)
    _check_output(args.output, args.force)
    overrides = list(args.overrides)
    from stepscale.sweeps.study.overrides import check_overrides

    check_overrides(overrides, "export")  # a preset without conf=, Hydra's habits
    if not any(o.startswith("conf=") for o in overrides):
        raise UsageError("export needs conf=NAME (see `sweep list`)")
    from stepscale.sweeps.trainers.kinds import study_trainer

    _, cfg, _ = prepare_study(overrides, args.config_dir)
    build_space(
        cfg, study_trainer(cfg, args.config_dir)[1]
    )  # first: a training preset is told it has no scientific axis
    check_study(cfg)
    try:
        text, losses = export_space(space_document(cfg), args.format)
    except FormatError as exc:
        raise UsageError(str(exc)) from None
    _write(text, args.output)
    if losses:
        print(
            f"sweep: warning: the {args.format} format cannot express "
            f"{len(losses)} thing(s), left out or changed: {'; '.join(losses)}",
            file=sys.stderr,
        )
    return 0


def run_import(args: argparse.Namespace) -> int:
    """`sweep import`: read a search space in ``args.format`` and print a study conf
    (YAML) that `sweep run` accepts; one warning line lists what was added or ignored."""
    _check_format(args.format)
    _check_output(args.output, args.force)
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise UsageError(f"{args.file}: cannot read it ({reason})") from None
    try:
        doc, notes = import_space(text, args.format, own_keys=args.trainer is not None)
        conf, added = study_yaml(doc, args.format, trainer=args.trainer)
    except FormatError as exc:
        raise UsageError(f"{args.file}: {exc}") from None
    except RecursionError:  # a parser's recursion on hostile nesting ([[[[…]]]])
        raise UsageError(
            f"{args.file}: nested too deeply to be a search space (thousands of levels of "
            "lists or mappings); check the file"
        ) from None
    _write(conf, args.output)
    notes = [*notes, *added]
    if notes:
        print(f"sweep: warning: import from {args.format}: {'; '.join(notes)}", file=sys.stderr)
    if args.output is not None:
        print(f"wrote {args.output}; {run_command(Path(args.output))}", file=sys.stderr)
    return 0


def run_command(conf_file: Path) -> str:
    """How to run the study conf written at ``conf_file``: its presets folder must be the
    ``conf/`` of a ``--config-dir`` (or the packaged tree)."""
    from stepscale.sweeps.study.compose import conf_dir

    folder = conf_file.resolve().parent
    name = conf_file.stem
    if folder == conf_dir() / "conf":
        return f"run it with: sweep run conf={name}"
    if folder.name == "conf":
        return f"run it with: sweep run conf={name} --config-dir {_shown(folder.parent)}"
    return (
        f"to run it, move it to DIR/conf/{conf_file.name} and run: "
        f"sweep run conf={name} --config-dir DIR"
    )


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is below it."""
    try:
        return str(path.relative_to(Path.cwd().resolve())) or "."
    except ValueError:
        return str(path)
