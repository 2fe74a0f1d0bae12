"""The SLURM side of `launcher=slurm` (`sweeps.launch.slurm_launcher`): submitit parameters
of a trial job and of a detached orchestrator's job, whether the controller still holds a
job (and a warning while it does not answer), the logs of an array task linked into its
trial, and a trial of a job that runs several (``trials_per_job``)."""

from __future__ import annotations

import logging
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import submitit

from stepscale.errors import UsageError
from stepscale.files import read_json
from stepscale.rundir import STATUS_JSON, TRAINER_FINAL_STATES
from stepscale.sweeps.study.launcher_configs import SlurmLauncherConfig

log = logging.getLogger(__name__)


class QueuedTrialHandle:
    """One trial of a SLURM job that runs several (``launcher.trials_per_job``), with the
    interface of `JobHandle`: done as soon as its final status is in its folder (the
    job goes on with the next trial), or when the job ends; its outcome is its own entry
    of the job's result, or the job's error if the job ended before the trial did."""

    inline = False
    slot = None
    # ``queue``: the `sweeps.launch.jobs.JobHandle` of the job that runs the queue.

    def __init__(self, queue: Any, index: int, folder: Path) -> None:
        self.queue = queue
        self.index = index
        self.folder = folder
        self._outcome: tuple[bool, Any] | None = None

    @property
    def job_id(self) -> str:
        """The SLURM job (or array task) that runs this trial among others."""
        return self.queue.job_id

    @property
    def files(self) -> Path:
        """The folder of the job's submitit files."""
        return self.queue.files

    @property
    def log(self) -> Path | None:
        """The job's error stream (every trial of the queue writes there)."""
        return self.queue.log

    def done(self) -> bool:
        """Has this trial ended (its final status written, or its job ended)?"""
        if self._outcome is not None:
            return True
        status = read_json(self.folder / STATUS_JSON, lenient=True)
        if isinstance(status, dict) and status.get("state") in TRAINER_FINAL_STATES:
            self._outcome = (True, status)
            return True
        if not self.queue.done():
            return False
        ok, result = self.queue.outcome()
        if ok and isinstance(result, list) and self.index < len(result):
            kind, payload = result[self.index]
            failed = RuntimeError(f"failed during processing with trace:\n{payload}")
            self._outcome = (True, payload) if kind == "success" else (False, failed)
        else:
            self._outcome = (False, result)
        return True

    def outcome(self) -> tuple[bool, Any]:
        """(True, status) or (False, error) once done."""
        while not self.done():
            time.sleep(0.5)
        assert self._outcome is not None
        return self._outcome

    def cancel(self) -> None:
        """Stop the job (and with it every trial of its queue still to run)."""
        self.queue.cancel()


# A job's own settings, which sbatch run from inside it must not pass on (see submit).
INHERITED_SLURM = ("SLURM_", "SBATCH_", "SUBMITIT_")


def link_logs(job: Any, logs: Path) -> None:
    """Link an array task's stdout/stderr (one pair per SLURM task) into the trial's logs
    folder, by relative paths so the run dir can move; they exist once the task starts."""
    logs.mkdir(parents=True, exist_ok=True)
    for task in range(job.num_tasks):
        paths = submitit.core.utils.JobPaths(job.paths.folder, job_id=job.job_id, task_id=task)
        for target in (paths.stdout, paths.stderr):
            link = logs / target.name
            if not link.is_symlink():
                link.symlink_to(os.path.relpath(target, logs))


# squeue states of a job that has not ended (it may run again).
_ENDED = {
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
    "PREEMPTED", "TIMEOUT", "SPECIAL_EXIT", "REVOKED",
}  # fmt: skip


def slurm_job_active(job_id: str) -> bool:
    """Is the job still in the controller's queue in a state it can run from (pending,
    running, requeued, completing)? A job the controller no longer knows has ended.

    When the controller cannot answer (down, busy, timing out) the job counts as active,
    as submitit does when sacct fails: the next poll asks again, instead of a job that may
    still run being retried as a second job on the same trial folder."""
    try:
        out = subprocess.run(
            ["squeue", "-h", "-j", str(job_id), "-o", "%T"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        _controller_silent(job_id, "squeue gave no answer in 60 s")
        return True
    except OSError:  # no squeue here: sacct's answer stands
        return False
    if out.returncode != 0:
        if "Invalid job id" in out.stderr:
            return False
        said = out.stderr.strip().splitlines()
        _controller_silent(job_id, said[-1] if said else f"squeue exit {out.returncode}")
        return True
    _last_silence_warning[0] = 0.0  # it answers again: say so at once next time it does not
    return any(state not in _ENDED for state in out.stdout.split())


SILENCE_WARNING_EVERY_S = 300.0
_last_silence_warning = [0.0]  # monotonic time of the last warning (0: none since an answer)


def _controller_silent(job_id: str, why: str) -> None:
    """Say (at most every few minutes) that the orchestrator is waiting on a controller
    that does not answer, so a sweep that seems stuck says why."""
    now = time.monotonic()
    last = _last_silence_warning[0]
    if last and now - last < SILENCE_WARNING_EVERY_S:
        return
    _last_silence_warning[0] = now
    log.warning(
        "sweep: warning: the SLURM controller did not answer about job %s (%s); its jobs "
        "count as still running and are asked about again every poll, nothing is "
        "resubmitted meanwhile",
        job_id,
        why,
    )


def slurm_parameters(cfg: SlurmLauncherConfig, job_name: str) -> dict[str, Any]:
    """submitit SlurmExecutor parameters for a trial job."""
    params: dict[str, Any] = {
        "job_name": job_name,
        "time": cfg.time_min,
        "nodes": cfg.nodes,
        "ntasks_per_node": cfg.tasks_per_node,
        "array_parallelism": cfg.array_parallelism,
        "signal_delay_s": cfg.signal_delay_s,
    }
    gpus_per_node = cfg.gpus_per_node
    if cfg.gpus_per_trial and cfg.gpus_per_task is None and gpus_per_node is None:
        if cfg.gpus_per_trial % cfg.nodes:
            raise UsageError(
                f"launcher.gpus_per_trial: {cfg.gpus_per_trial} GPUs do not split over "
                f"{cfg.nodes} nodes"
            )
        gpus_per_node = cfg.gpus_per_trial // cfg.nodes
    optional = {
        "partition": cfg.partition,
        "account": cfg.account,
        "qos": cfg.qos,
        "gpus_per_task": cfg.gpus_per_task,
        "gpus_per_node": gpus_per_node,
        "cpus_per_task": cfg.cpus_per_task,
        "mem": f"{int(cfg.mem_gb * 1024)}M" if cfg.mem_gb else None,
        "constraint": cfg.constraint,
        "setup": list(cfg.setup) or None,
    }
    params.update({k: v for k, v in optional.items() if v is not None})
    if cfg.additional:
        params["additional_parameters"] = dict(cfg.additional)
    return params


def orchestrator_parameters(cfg: SlurmLauncherConfig, study: str) -> dict[str, Any]:
    """submitit SlurmExecutor parameters for a detached orchestrator's job
    (``launcher.orchestrator``; partition, account and QoS default to the trials')."""
    oc = cfg.orchestrator
    params: dict[str, Any] = {
        "job_name": f"{study}:orchestrator",
        "time": oc.time_min,
        "nodes": 1,
        "ntasks_per_node": 1,
        "cpus_per_task": oc.cpus,
        "mem": f"{int(oc.mem_gb * 1024)}M",
        "signal_delay_s": 120,
    }
    for key, value in (
        ("partition", oc.partition or cfg.partition),
        ("account", oc.account or cfg.account),
        ("qos", oc.qos or cfg.qos),
    ):
        if value:
            params[key] = value
    if oc.additional:
        params["additional_parameters"] = dict(oc.additional)
    return params
