"""``launcher=slurm``: one SLURM job per trial (submitit SlurmExecutor). Trials asked for
in one pass go as one job array; with ``trials_per_job`` > 1 a job runs a queue of trials of
one point; a job requeued at its time limit or preempted resumes its trial. Jobs outlive
their orchestrator: the next one attaches to them by job id. The orchestrator itself can
run as a small SLURM job (``--detach``). Job parameters, the controller's answers and the
trials of a queue are in `sweeps.launch.slurm`."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import submitit

from stepscale.errors import EnvironmentFailure, UsageError
from stepscale.rundir import LOGS_DIR
from stepscale.sweeps.launch.base import JobRequest, Launcher, TrialHandle, check_amounts
from stepscale.sweeps.launch.jobs import JobHandle, environment, working_dir
from stepscale.sweeps.launch.registry import register_launcher
from stepscale.sweeps.launch.slurm import (
    INHERITED_SLURM,
    QueuedTrialHandle,
    link_logs,
    orchestrator_parameters,
    slurm_job_active,
    slurm_parameters,
)
from stepscale.sweeps.launch.submission import submission_errors
from stepscale.sweeps.study.launcher_configs import SlurmLauncherConfig
from stepscale.sweeps.study.launcher_schema import LauncherConfig
from stepscale.sweeps.study.schema import StudyConfig

# Keys that count a thing there must be one of, of none or more, and positive amounts.
_AT_LEAST_ONE = ("nodes", "tasks_per_node", "array_parallelism", "time_min", "trials_per_job")
_NONE_OR_MORE = ("max_requeues", "signal_delay_s", "gpus_per_task", "gpus_per_node")
_POSITIVE = ("state_poll_s", "mem_gb", "cpus_per_task")


@register_launcher
class SlurmLauncher(Launcher):
    """SLURM jobs, arrays and queues of trials."""

    name = "slurm"
    config = SlurmLauncherConfig
    on_this_machine = False
    submits_together = True
    jobs_outlive_orchestrator = True
    can_detach = True
    job_noun = "SLURM job"

    def __init__(
        self, cfg: SlurmLauncherConfig, parallelism: int = 1, heartbeat_timeout_s: float = 0.0
    ) -> None:
        super().__init__(cfg, parallelism, heartbeat_timeout_s)
        self._last_refresh = time.monotonic()

    @property
    def trials_per_job(self) -> int:
        """``launcher.trials_per_job``: trials of one point one job runs one after another."""
        return int(self.cfg.trials_per_job)

    def refresh(self, force: bool = False) -> None:
        """Re-read job states now and then: submitit's own cache waits up to 10 minutes,
        and a job that ended without a result (cancelled, node failure) is only seen
        through sacct."""
        now = time.monotonic()
        if force or now - self._last_refresh >= self.cfg.state_poll_s:
            self._last_refresh = now
            submitit.SlurmJob.watcher.update()

    def attach(
        self, folder: Path, job_id: str, files: Path | None = None, index: int | None = None
    ) -> TrialHandle | None:
        """A handle on an existing job of a trial, if it is still queued or running
        (``files``: its submitit folder, when not ``folder/logs``, as for an array task;
        ``index``: the trial's place in a job running a queue of trials)."""
        job = submitit.SlurmJob(folder=files or folder / LOGS_DIR, job_id=job_id)
        if job.done(force_check=True) and not slurm_job_active(job_id):
            return None
        handle = JobHandle(job, inline=False)
        return handle if index is None else QueuedTrialHandle(handle, index, folder)

    def _executor(self, folder: Path, name: str) -> submitit.SlurmExecutor:
        executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=self.cfg.max_requeues)
        executor.update_parameters(**slurm_parameters(self.cfg, name))
        return executor

    def submit(
        self,
        folder: Path,
        fn: Callable[..., Any],
        *args: Any,
        name: str = "stepscale",
        key: str | None = None,
    ) -> JobHandle:
        """sbatch ``fn(*args)`` as a job named ``name``, started in ``folder``."""
        folder.mkdir(parents=True, exist_ok=True)
        executor = self._executor(folder / LOGS_DIR, name)
        # sbatch from inside a SLURM job (a detached orchestrator) must not pass that job's
        # SLURM_* settings on: srun in the trial's job would read them as its own.
        with working_dir(folder), environment({}, drop=INHERITED_SLURM), submission_errors():
            job = executor.submit(fn, *args)
        return JobHandle(job, inline=False)

    def submit_together(
        self, requests: list[JobRequest], array_folder: Path, name: str = "stepscale"
    ) -> list[TrialHandle]:
        """Two or more jobs go as one job array named ``name``
        (``--array=0-<n-1>%<array_parallelism>``: one sbatch, one line in squeue, at most
        ``array_parallelism`` of them running at once); their submitit files live in
        ``array_folder`` and each job's logs are linked into its ``folder/logs``."""
        if len(requests) < 2:
            return super().submit_together(requests, array_folder, name)
        array_folder.mkdir(parents=True, exist_ok=True)
        executor = self._executor(array_folder, name)
        # The array is sbatch'ed as the batch closes, inside the other three contexts.
        with (
            working_dir(array_folder),
            environment({}, drop=INHERITED_SLURM),
            submission_errors(),
            executor.batch(),
        ):
            jobs = [executor.submit(r.fn, *r.args) for r in requests]
        for request, job in zip(requests, jobs, strict=True):
            link_logs(job, request.folder / LOGS_DIR)
        return [JobHandle(job, inline=False) for job in jobs]

    def submit_queues(
        self, queues: list[list[JobRequest]], array_folder: Path, name: str = "stepscale"
    ) -> list[list[TrialHandle]]:
        """Submit each queue (trials of one point) as one job running them one after
        another (`sweeps.job.trial_job.TrialQueueJob`), several queues as one job array; the
        job's logs are linked into every trial's ``logs/``."""
        from stepscale.sweeps.job.trial_job import TrialQueueJob

        requests = [
            JobRequest(
                q[0].folder, TrialQueueJob(), ([r.args[0] for r in q],), name=q[0].name, key=q[0].key
            )
            for q in queues
        ]  # fmt: skip
        handles = self.submit_together(requests, array_folder, name=name)
        out: list[list[TrialHandle]] = []
        for queue, handle in zip(queues, handles, strict=True):
            for request in queue[1:]:
                link_logs(handle.job, request.folder / LOGS_DIR)  # type: ignore[attr-defined]
            out.append([QueuedTrialHandle(handle, i, r.folder) for i, r in enumerate(queue)])
        return out

    @classmethod
    def check(cls, cfg: StudyConfig) -> None:
        """The shared checks, the counts and amounts of the job, and its parameters."""
        super().check(cfg)
        lc = cfg.launcher
        check_amounts(lc, _AT_LEAST_ONE, _NONE_OR_MORE, _POSITIVE)
        slurm_parameters(lc, cfg.name)  # its own checks raise UsageError

    @classmethod
    def check_submission(cls, cfg: LauncherConfig) -> None:
        """``sbatch`` is on PATH and the controller accepts a test submission
        (``sbatch --test-only``: no job, nothing written) of the trials' partition,
        account and QoS."""
        command = ["sbatch", "--test-only", "--wrap", "true"]
        command += [f"--{k}={v}" for k in ("partition", "account", "qos") if (v := getattr(cfg, k))]
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(INHERITED_SLURM) or k == "SLURM_CONF"
        }
        try:
            res = subprocess.run(
                command, capture_output=True, text=True, timeout=60, env=env, cwd="/"
            )
        except FileNotFoundError:
            raise EnvironmentFailure(
                "launcher=slurm needs SLURM's sbatch, which is not on PATH here: run the study "
                "on a machine of the cluster (a login node), or choose launcher=local"
            ) from None
        except subprocess.TimeoutExpired:
            raise EnvironmentFailure(
                f"launcher=slurm: `{' '.join(command)}` gave no answer in 60 s (the SLURM "
                "controller is not answering); nothing was written — try again later"
            ) from None
        if res.returncode != 0:
            said = "; ".join(ln.strip() for ln in res.stderr.splitlines() if ln.strip())
            raise EnvironmentFailure(
                f"launcher=slurm: the cluster does not take jobs from here: "
                f"`{' '.join(command)}` exited with code {res.returncode}: "
                f"{said or 'no message'}. Nothing was written"
            )

    @classmethod
    def submit_orchestrator(
        cls, cfg: StudyConfig, folder: Path, job: Callable[..., int], args: tuple[Any, ...]
    ) -> tuple[str, Path]:
        """sbatch the orchestrator as a small checkpointable job (``launcher.orchestrator``:
        one CPU, a little memory, requeued before its time limit)."""
        executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=1000)
        executor.update_parameters(**orchestrator_parameters(cfg.launcher, cfg.name))
        try:
            submitted = executor.submit(job, *args)
        except Exception as exc:  # sbatch missing or refusing the job
            message = str(exc).strip().splitlines()
            raise UsageError(
                f"--detach: cannot submit the orchestrator job: {message[-1] if message else exc}"
            ) from None
        return str(submitted.job_id), folder / f"{submitted.job_id}_0_log.out"

    @classmethod
    def orchestrator_pending(cls, job: dict[str, Any]) -> bool:
        """Is the orchestrator's SLURM job still pending (or requeued, configuring)?"""
        try:
            out = subprocess.run(
                ["squeue", "-h", "-j", str(job["job_id"]), "-o", "%T"],
                capture_output=True,
                text=True,
                timeout=30,
            )
        except (OSError, subprocess.SubprocessError):
            return False
        return out.stdout.strip() in ("PENDING", "REQUEUED", "CONFIGURING")

    @classmethod
    def cancel_orchestrator(cls, job: dict[str, Any]) -> None:
        """scancel the orchestrator's job."""
        scancel(str(job["job_id"]))


def scancel(job_id: str) -> None:
    """scancel a job (quietly: it may have ended, the controller may not answer)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(["scancel", job_id], capture_output=True, timeout=30)
