"""`sweep run conf=NAME [overrides] [--dry-run] [--cfg] [--json] [--report]`: run, resume or
extend a study; it ends with the study's answer and the `sweep report` command.

Everything is validated before anything launches: the space, the sampler and pruner,
every point's trainer config (at the ends of the nuisance ranges), the storage, the run
dir, and — when the run dir exists — that the study did not change in a way that would
mix incompatible trials (exit 2: use a new `name`). This module runs those steps in order;
each lives in its own module.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from stepscale.cli.dry_run import not_contacted, print_dry_run, with_existing
from stepscale.cli.exit_codes import exit_code
from stepscale.errors import UsageError
from stepscale.redact import redact
from stepscale.sweeps.launch.checks import check_launch, check_run_dir, check_submission
from stepscale.sweeps.launch.launchers import launcher_class
from stepscale.sweeps.run.runlock import RunLock
from stepscale.sweeps.study.compose import prepare_study
from stepscale.sweeps.study.files import check_unchanged, make_run_dir, write_study_files
from stepscale.sweeps.study.plan import plan_points, plan_summary
from stepscale.sweeps.study.provenance import finish_provenance, write_provenance
from stepscale.sweeps.study.space import build_space
from stepscale.sweeps.study.storage import check_storage, open_storage, resolve
from stepscale.sweeps.study.validate import (
    check_grid,
    check_horizon_set_once,
    check_sizes,
    check_storage_place,
    check_study,
)
from stepscale.sweeps.trainers.kinds import kind_of, study_trainer
from stepscale.sweeps.trainers.trial_paths import check_trial_paths

__all__ = ["prepare_study", "run_orchestrator", "run_study"]


def run_study(
    overrides: list[str],
    config_dir: str | None,
    *,
    dry_run: bool,
    print_cfg: bool,
    as_json: bool,
    argv: list[str],
    detach: bool = False,
    report: bool = False,
    sample_log: str | None = None,
) -> int:
    """The `sweep run` command; returns the exit code. At its end it prints the study's
    answer (analysis.headline) and the `sweep report` command; ``report`` renders the
    report at once; ``sample_log`` (with ``dry_run``): the records the trainer's metrics
    settings read from that log (`cli.sample_log`), instead of the plan."""
    if sample_log is not None and not dry_run:
        raise UsageError(
            "--sample-log checks the metrics settings on a log: give it with --dry-run"
        )
    raw, cfg, choices = prepare_study(overrides, config_dir)
    if print_cfg:
        print(redact(OmegaConf.to_yaml(raw)), end="")
        return 0
    if not (cfg.scientific or cfg.nuisance or cfg.fixed):
        raise UsageError(
            f"conf={choices['conf']} is a training preset (no scientific, nuisance or fixed "
            f"parameters): train it with `sweep train conf={choices['conf']}`, or add the "
            "parameters a study compares (scientific.*) and tunes (nuisance.*)"
        )
    if report and detach:
        raise UsageError(
            "--report renders the report when the study ends, which --detach does not wait "
            "for: run `sweep report RUN_DIR` once `sweep status RUN_DIR` shows it finished"
        )
    check_study(cfg)
    check_launch(cfg, detach=detach)
    trainer, settable = study_trainer(cfg, config_dir)
    check_horizon_set_once(cfg, trainer)
    if sample_log is not None:
        from stepscale.cli.sample_log import check_sample_log

        return check_sample_log(trainer, sample_log)
    space = build_space(cfg, settable)
    sizes = plan_points(cfg, space, trainer, here=launcher_class(cfg.launcher.name).on_this_machine)
    check_grid(cfg, space)
    check_sizes(cfg, len(space.points))
    run_dir = Path(cfg.run_dir) if cfg.run_dir else Path("runs") / cfg.name
    fixed = [value for _, value in space.fixed.values()]
    check_trial_paths(trainer, run_dir, [p.label for p in space.points], fixed)
    storage_spec = resolve(cfg.storage, run_dir)
    check_storage_place(storage_spec, run_dir)
    plan = plan_summary(cfg, space, sizes)
    check_unchanged(run_dir, cfg)  # refused here as the run itself would refuse it
    if dry_run:  # the plan needs no cluster and no database: nothing is contacted
        check_storage(storage_spec, run_dir, connect=False)
        unchecked = not_contacted(storage_spec, cfg.launcher.name)
        print_dry_run(with_existing(plan, run_dir), run_dir, storage_spec, as_json, unchecked)
        return 0
    # Storage and launcher answer before anything is written (a server that is down, a
    # missing sbatch leave no run dir behind).
    check_storage(storage_spec, run_dir)
    check_submission(cfg.launcher)
    check_run_dir(cfg.launcher, run_dir)  # the launcher's jobs see it (Ray: every node)
    kind = kind_of(trainer)
    if not detach:
        kind.prepare_orchestrator(cfg)  # e.g. JAX's compilation cache for the built-in trainer
    check_unchanged(run_dir, cfg)  # the last check: nothing is written before it
    make_run_dir(run_dir)
    # The study's files exist before anything runs, so `sweep status` answers at once.
    # Another orchestrator of the same study may be starting too: one at a time (two
    # processes creating Optuna's tables in a fresh database at once would collide).
    with RunLock(run_dir) as lock:
        storage = open_storage(storage_spec)
        check_unchanged(run_dir, cfg)
        write_study_files(run_dir, raw, cfg, space)
        if not detach:
            write_provenance(run_dir, storage_spec, argv, jax_devices=kind.jax_devices)
    lock.close()
    if detach:
        from stepscale.sweeps.launch.detach import submit_orchestrator

        job = submit_orchestrator(cfg, run_dir, overrides, config_dir, run_orchestrator)
        _print_detached(job, run_dir, launcher_class(cfg.launcher.name).job_noun)
        return 0

    from stepscale.sweeps.run.display import StudyProgress
    from stepscale.sweeps.run.scheduler import Scheduler

    with StudyProgress(cfg.name, plan) as progress:
        scheduler = Scheduler(cfg, space, run_dir, storage_spec, storage, sizes, trainer, progress)
        try:
            stats = scheduler.run()
        except BaseException:  # Ctrl-C, a requeue of a detached orchestrator, a crash
            finish_provenance(run_dir, complete=False)
            raise
    finish_provenance(run_dir, complete=not scheduler.stopped)
    if scheduler.stopped:
        print(
            f"sweep: stopped on request (sweep stop); running trials were checkpointed. "
            f"Run the same command again to resume (run dir {run_dir}).",
            file=sys.stderr,
        )
        return 0
    summary = _summary(stats, run_dir)
    print(f"run dir: {run_dir}", file=sys.stderr)
    answer, lines = _answer(run_dir)
    command = f"sweep report {shlex.quote(str(run_dir))}"
    written = _render_report(run_dir) if report else None
    summary["time"] = _times(progress.elapsed(), progress.first_progress)
    if as_json:
        summary |= {"headline": answer, "report_command": command}
        if written is not None:
            summary["report"] = written
        print(json.dumps(summary, indent=2, sort_keys=True))
    else:
        print(_summary_text(summary))
        print("answer:")
        print("\n".join(f"  {line}" for line in lines))
        if written is not None:
            print(f"report: {written} (open it in a browser)")
        else:
            print(f"report: {command}")
    return 0 if not report or written is not None else 1


def _answer(run_dir: Path) -> tuple[dict[str, Any] | None, list[str]]:
    """The study's headline (analysis.headline) as JSON and as text lines; a study the
    analysis cannot read gives None and the reason."""
    from stepscale.analysis.analyze import analyze  # heavy (xarray, scipy): only at the end
    from stepscale.analysis.headline import answer_lines, headline
    from stepscale.analysis.load import RunDirError, load

    try:
        a = analyze(load(run_dir))
        h = headline(a)
    except (RunDirError, ValueError) as exc:
        return None, [f"no answer computed: {exc}"]
    except Exception as exc:  # the study finished: an analysis bug must not hide that
        return None, [
            f"no answer computed ({type(exc).__name__}: {exc}); "
            f"`sweep report {shlex.quote(str(run_dir))}` shows what the analysis finds"
        ]
    answer = h.to_dict()
    if a.ladder is not None:  # its rungs, laws, claim and held-out check, as in fits.json
        answer["ladder"] = a.ladder.to_dict()
    return answer, answer_lines(a)


def _render_report(run_dir: Path) -> str | None:
    """`sweep report RUN_DIR` at once (`sweep run --report`): the path of index.html, or
    None after saying on stderr why it could not be written."""
    from stepscale.analysis.load import RunDirError
    from stepscale.analysis.report import write_report

    try:
        result = write_report(run_dir)
    except RunDirError as exc:
        print(f"sweep: the report was not written: {exc}", file=sys.stderr)
        return None
    return str(result.report_dir / "index.html")


def run_orchestrator(args: list[str]) -> int:
    """`sweep run ARGS` inside the detached orchestrator's job (`sweeps.launch.detach`),
    with the command line's exit codes; ``args`` as `sweeps.launch.detach` wrote them."""
    from stepscale.sweeps.launch.detach import split_args

    overrides, config_dir = split_args(args)
    return exit_code(
        lambda: run_study(
            overrides,
            config_dir,
            dry_run=False,
            print_cfg=False,
            as_json=False,
            argv=["run", *args],
        )
    )


def _print_detached(job: dict[str, Any], run_dir: Path, noun: str) -> None:
    print(f"submitted orchestrator as {noun} {job['job_id']} (run dir {run_dir})")
    print(f"  follow:  sweep status {run_dir}    (log: {job['log']})")
    print(f"  stop:    sweep stop {run_dir}")
    print(f"  report:  sweep report {run_dir}")


def _summary(stats: list[Any], run_dir: Path) -> dict[str, Any]:
    points = []
    totals: dict[str, int] = {}
    for st in stats:
        points.append(
            {
                "point": st.label,
                "budget": st.budget,
                "best": st.best,
                "steps": st.steps,
                **st.counts,
            }
        )
        for k, v in st.counts.items():
            totals[k] = totals.get(k, 0) + v
    return {"run_dir": str(run_dir), "points": points, "trials": totals}


def _times(wall: float, first_progress: float | None) -> dict[str, float | None]:
    """The command's wall time and its time to the first trained step, both from the
    process's start (seconds, 0.1 s)."""
    return {
        "wall_s": round(wall, 1),
        "first_progress_s": None if first_progress is None else round(first_progress, 1),
    }


def _time_text(times: dict[str, float | None]) -> str:
    """The summary's line on time: the wall time and, beside it, the time to the first
    progress (compiles included)."""
    from stepscale.sweeps.run.display import duration_text

    wall = times["wall_s"]
    assert wall is not None
    first = times["first_progress_s"]
    text = f"  time: {duration_text(wall)} wall"
    if first is None:
        return text + " (no step trained by this command)"
    return (
        text + f"; first progress after {duration_text(first)} (the first trained step, from "
        "the command's start: imports, workers and compiles included)"
    )


def _summary_text(summary: dict[str, Any]) -> str:
    lines = [f"study finished: {summary['run_dir']}"]
    for p in summary["points"]:
        best = (
            "—"
            if p["best"] is None
            else (f"{p['best']:.6g}" if math.isfinite(p["best"]) else str(p["best"]))
        )
        lines.append(
            f"  {p['point']:32s} complete {p['complete']:3d}  pruned {p['pruned']:3d}  diverged {p['diverged']:3d}  "
            f"failed {p['failed']:3d}  best {best}  steps {p['steps']}"
        )
    failed = summary["trials"].get("failed", 0)
    if failed:
        lines.append(f"  {failed} trial(s) failed: see trials/*/*/trial.json and logs/")
    if "time" in summary:
        lines.append(_time_text(summary["time"]))
    return "\n".join(lines)


def command(args: argparse.Namespace) -> int:
    """`sweep run`."""
    return run_study(
        args.overrides,
        args.config_dir,
        dry_run=args.dry_run,
        print_cfg=args.cfg,
        as_json=args.json,
        argv=args.argv,
        detach=args.detach,
        report=args.report,
        sample_log=args.sample_log,
    )
