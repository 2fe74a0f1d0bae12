"""`sweep run … launcher=slurm --detach`: the orchestrator itself runs as a small SLURM job
(submitted by the launcher, one that can detach: `Launcher.submit_orchestrator`; with
`launcher=ray` a Ray job, `sweeps.launch.ray_detach`).

The job asks for one CPU and a little memory (``launcher.orchestrator``) so it never takes
a trial's resources, runs the very same `sweep run` (same overrides, same run dir, plain
output into ``<run dir>/orchestrator/``) and is checkpointable: before its time limit
submitit requeues it, and the new orchestrator takes over the trial jobs still queued or
running. Nothing depends on the login session that submitted it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import submitit

from stepscale.errors import UsageError
from stepscale.files import write_json_atomic
from stepscale.rundir import JOB_JSON, ORCHESTRATOR_DIR
from stepscale.sweeps.launch.launchers import launcher_class, launcher_names
from stepscale.sweeps.study.schema import StudyConfig
from stepscale.sweeps.study.trials import now_iso


class OrchestratorJob(submitit.helpers.Checkpointable):
    """Runs `sweep run` with the given arguments inside a SLURM job. ``run`` is the
    command (`cli.run.run_orchestrator`, handed over by its caller so that this
    module needs nothing of the command line): arguments in, exit code out."""

    def __init__(self, run: Callable[[list[str]], int]) -> None:
        self.run = run

    def __call__(self, args: list[str], cwd: str) -> int:
        os.chdir(cwd)
        os.environ["STEPSCALE_ORCHESTRATOR_JOB"] = os.environ.get("SLURM_JOB_ID", "")
        code = self.run(args)
        if code != 0:
            raise RuntimeError(f"sweep run ended with exit code {code}; see the log above")
        return code


def split_args(args: list[str]) -> tuple[list[str], str | None]:
    """(overrides, config dir) of the arguments `submit_orchestrator` gives the job."""
    if args[:1] == ["--config-dir"]:
        return list(args[2:]), args[1]
    return list(args), None


def submit_orchestrator(
    cfg: StudyConfig,
    run_dir: Path,
    overrides: list[str],
    config_dir: str | None,
    run: Callable[[list[str]], int],
) -> dict[str, Any]:
    """Submit the orchestrator job through the study's launcher (one that can detach),
    which calls ``run`` with the `sweep run` arguments of this study; returns what was
    submitted (also written to ``<run dir>/orchestrator/job.json``)."""
    launcher = launcher_class(cfg.launcher.name)
    if not launcher.can_detach:
        raise UsageError(detach_refusal(cfg.launcher.name))
    run_dir = run_dir.resolve()
    args = [o for o in overrides if not o.startswith("run_dir=")]
    args.append(f"run_dir={run_dir}")
    if config_dir:
        args = ["--config-dir", str(Path(config_dir).resolve()), *args]
    folder = run_dir / ORCHESTRATOR_DIR
    folder.mkdir(parents=True, exist_ok=True)
    job_id, log = launcher.submit_orchestrator(
        cfg, folder, OrchestratorJob(run), (args, os.getcwd())
    )
    record = {
        "job_id": job_id,
        "submitted": now_iso(),
        "args": args,
        "cwd": os.getcwd(),
        "log": str(log),
        "launcher": cfg.launcher.name,
        **launcher.orchestrator_record(cfg),
    }
    write_json_atomic(folder / JOB_JSON, record)
    return record


def detach_refusal(name: str) -> str:
    """What ``--detach`` with a launcher that cannot detach says."""
    able = [n for n in launcher_names() if launcher_class(n).can_detach]
    return (
        f"--detach runs the orchestrator as a job of the launcher: it needs "
        f"{' or '.join(f'launcher={n}' for n in able)} (got launcher={name})"
    )
