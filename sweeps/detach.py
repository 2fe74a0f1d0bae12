"""`sweep run … launcher=slurm --detach`: the orchestrator itself runs as a small SLURM job.

The job asks for one CPU and a little memory (``launcher.orchestrator``) so it never takes
a trial's resources, runs the very same `sweep run` (same overrides, same run dir, plain
output into ``<run dir>/orchestrator/``) and is checkpointable: before its time limit
submitit requeues it, and the new orchestrator takes over the trial jobs still queued or
running. Nothing depends on the login session that submitted it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import submitit

from stepscale.models.reporter import write_json_atomic
from stepscale.sweeps.compose import UsageError
from stepscale.sweeps.schema import StudyConfig
from stepscale.sweeps.trials import now_iso

ORCHESTRATOR_DIR = "orchestrator"


class OrchestratorJob(submitit.helpers.Checkpointable):
    """Runs `sweep run` with the given arguments inside a SLURM job."""

    def __call__(self, args: list[str], cwd: str) -> int:
        from stepscale.sweeps.cli import main

        os.chdir(cwd)
        os.environ["STEPSCALE_ORCHESTRATOR_JOB"] = os.environ.get("SLURM_JOB_ID", "")
        code = main(["run", *args])
        if code != 0:
            raise RuntimeError(f"sweep run ended with exit code {code}; see the log above")
        return code


def submit_orchestrator(
    cfg: StudyConfig, run_dir: Path, overrides: list[str], config_dir: str | None
) -> dict[str, Any]:
    """Submit the orchestrator job; returns what was submitted (also written to
    ``<run dir>/orchestrator/job.json``)."""
    if cfg.launcher.name != "slurm":
        raise UsageError(
            f"--detach runs the orchestrator as a SLURM job: it needs launcher=slurm "
            f"(got launcher={cfg.launcher.name})"
        )
    run_dir = run_dir.resolve()
    args = [o for o in overrides if not o.startswith("run_dir=")]
    args.append(f"run_dir={run_dir}")
    if config_dir:
        args = ["--config-dir", str(Path(config_dir).resolve()), *args]
    oc = cfg.launcher.orchestrator
    folder = run_dir / ORCHESTRATOR_DIR
    folder.mkdir(parents=True, exist_ok=True)
    executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=1000)
    params: dict[str, Any] = {
        "job_name": f"{cfg.name}:orchestrator",
        "time": oc.time_min,
        "nodes": 1,
        "ntasks_per_node": 1,
        "cpus_per_task": oc.cpus,
        "mem": f"{int(oc.mem_gb * 1024)}M",
        "signal_delay_s": 120,
    }
    for key, value in (
        ("partition", oc.partition or cfg.launcher.partition),
        ("account", oc.account or cfg.launcher.account),
        ("qos", oc.qos or cfg.launcher.qos),
    ):
        if value:
            params[key] = value
    if oc.additional:
        params["additional_parameters"] = dict(oc.additional)
    executor.update_parameters(**params)
    try:
        job = executor.submit(OrchestratorJob(), args, os.getcwd())
    except Exception as exc:  # sbatch missing or refusing the job
        message = str(exc).strip().splitlines()
        raise UsageError(
            f"--detach: cannot submit the orchestrator job: {message[-1] if message else exc}"
        ) from None
    record = {
        "job_id": str(job.job_id),
        "submitted": now_iso(),
        "args": args,
        "cwd": os.getcwd(),
        "log": str(folder / f"{job.job_id}_0_log.out"),
    }
    write_json_atomic(folder / "job.json", record)
    return record
