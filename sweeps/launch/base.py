"""The launcher interface: what every launcher does, and what the scheduler may ask it.

A launcher submits a trial's job (``fn(*args)`` started in the trial's folder, logs in
``<trial>/logs/``) and answers with a `TrialHandle`; it may submit several jobs at once
(`Launcher.submit_together`) or a queue of trials as one job (`Launcher.submit_queues`),
attach again to a job of a dead orchestrator by its id (`Launcher.attach`), refresh job
states (`Launcher.refresh`), check its own settings (`Launcher.check`) and its environment
(`Launcher.check_submission`) before anything is written, and — when it can — run the
orchestrator itself as a job (`Launcher.submit_orchestrator`, ``sweep run --detach``).

Its capabilities are class attributes the scheduler reads instead of the launcher's name.
A launcher is one class with a ``name``, a ``config`` (its schema, a subclass of
`LauncherConfig`) and `sweeps.launch.launchers.register_launcher` (docs/architecture.md).
A handle whose job was interrupted from outside (its node died) may say so
(`was_interrupted`): the trial runs again as the same attempt, no retry used up.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from stepscale.errors import UsageError
from stepscale.sweeps.study.launcher_schema import LauncherConfig
from stepscale.sweeps.study.schema import StudyConfig


@dataclass
class JobRequest:
    """One job to submit: ``fn(*args)``, started in ``folder``, logs in ``folder/logs``."""

    folder: Path
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    name: str = "stepscale"
    key: str | None = None  # jobs of one key share shapes (a point): see Launcher.submit


class TrialHandle(Protocol):
    """A submitted trial job, as the scheduler follows it."""

    @property
    def job_id(self) -> str:
        """The launcher's id of the job (recorded in trial.json, given back to `attach`)."""
        ...

    @property
    def files(self) -> Path:
        """The folder of the job's files (recorded when it is not ``<trial>/logs``)."""
        ...

    @property
    def log(self) -> Path | None:
        """The job's error stream, where a failed trial's traceback is."""
        ...

    @property
    def index(self) -> int | None:
        """The trial's place in a job that runs a queue of trials (None: a job of its own)."""
        ...

    def done(self) -> bool:
        """Has the job (or this trial of it) ended, in any way?"""
        ...

    def outcome(self) -> tuple[bool, Any]:
        """(True, result) or (False, error), once done."""
        ...

    def cancel(self) -> None:
        """Ask the job to stop (its trial checkpoints and ends)."""
        ...


class Launcher(ABC):
    """Submits trial jobs; one subclass per launcher, registered by name."""

    name: ClassVar[str]
    config: ClassVar[type[LauncherConfig]]
    # Trials run on this machine and see its devices: the plan checks `train.devices` here,
    # the compile cache is set up here, run.json records this machine's devices.
    on_this_machine: ClassVar[bool] = True
    # Jobs are processes this orchestrator started here: it looks at them often (a slot is
    # refilled the moment one ends) and stops them with itself (Ctrl-C, SIGTERM).
    child_jobs: ClassVar[bool] = False
    # Jobs asked for in one pass are submitted together (`submit_together`), not one by one.
    submits_together: ClassVar[bool] = False
    # Jobs go on without their orchestrator if it dies (kill -9, its machine, a detached
    # orchestrator's requeue): the next one finds them again with `attach`. A stop signal
    # or `sweep stop` cancels them all the same.
    jobs_outlive_orchestrator: ClassVar[bool] = False
    # The orchestrator itself can run as a job of this launcher (`sweep run --detach`).
    can_detach: ClassVar[bool] = False
    # What its jobs are called in messages ("submitted orchestrator as SLURM job 42").
    job_noun: ClassVar[str] = "job"

    def __init__(
        self, cfg: LauncherConfig, parallelism: int = 1, heartbeat_timeout_s: float = 0.0
    ) -> None:
        self.cfg: Any = cfg  # an instance of `config`
        self.parallelism = parallelism
        self.heartbeat_timeout_s = heartbeat_timeout_s

    @property
    def trials_per_job(self) -> int:
        """How many trials of one point one job may run one after another (`submit_queues`)."""
        return 1

    @abstractmethod
    def submit(
        self,
        folder: Path,
        fn: Callable[..., Any],
        *args: Any,
        name: str = "stepscale",
        key: str | None = None,
    ) -> TrialHandle:
        """Submit ``fn(*args)`` as a job named ``name``, started in ``folder`` (logs in
        ``folder/logs``). ``key``: jobs of one key (a point) share shapes."""

    def submit_together(
        self, requests: list[JobRequest], array_folder: Path, name: str = "stepscale"
    ) -> list[TrialHandle]:
        """Submit jobs asked for at the same time (``array_folder``: where a launcher that
        groups them keeps the group's files); by default one by one, as by `submit`."""
        return [self.submit(r.folder, r.fn, *r.args, name=r.name, key=r.key) for r in requests]

    def submit_queues(
        self, queues: list[list[JobRequest]], array_folder: Path, name: str = "stepscale"
    ) -> list[list[TrialHandle]]:
        """Submit each queue (trials of one point) as one job running them one after
        another (a launcher whose `trials_per_job` can exceed 1 overrides this). By default
        every queued trial is a job of its own, all submitted together: the handles keep
        the queues' shape, so a scheduler that asks for queues is served either way."""
        handles = iter(self.submit_together([r for q in queues for r in q], array_folder, name))
        return [[next(handles) for _ in queue] for queue in queues]

    def attach(
        self, folder: Path, job_id: str, files: Path | None = None, index: int | None = None
    ) -> TrialHandle | None:
        """A handle on a job submitted by an orchestrator that died, if it is still queued
        or running (``files``: its files' folder when not ``folder/logs``; ``index``: the
        trial's place in a job that runs a queue). None: it has ended, or this launcher's
        jobs do not outlive their orchestrator."""
        return None

    def refresh(self, force: bool = False) -> None:
        """Re-read job states now and then (``force``: now); nothing to re-read by default."""
        return None

    def close(self) -> None:
        """Release what the launcher holds (warm workers end), at the end of a run;
        nothing by default."""
        return None

    @classmethod
    def check(cls, cfg: StudyConfig) -> None:
        """Refuse (`UsageError`) settings this launcher cannot run, before the run dir is
        made; subclasses add their own keys' checks to the shared ones."""
        lc = cfg.launcher
        if lc.timeout_min < 1:
            raise UsageError(f"launcher.timeout_min must be at least 1, got {lc.timeout_min}")
        if not lc.poll_s > 0:
            raise UsageError(f"launcher.poll_s must be positive, got {lc.poll_s}")
        if lc.gpus_per_trial is not None and lc.gpus_per_trial < 0:
            raise UsageError(f"launcher.gpus_per_trial must be 0 or more, got {lc.gpus_per_trial}")

    @classmethod
    def check_submission(cls, cfg: LauncherConfig) -> None:
        """Can jobs be submitted from here? A failure is the environment's
        (`EnvironmentFailure`, exit 1); checked before the run dir is made. Nothing to
        check by default."""
        return None

    @classmethod
    def check_run_dir(cls, cfg: LauncherConfig, run_dir: Path) -> None:
        """Can the trials' jobs reach the run dir (``run_dir``, which may not exist yet)?
        Refused with a `UsageError`; checked before the run dir is made. Nothing to check
        by default (jobs run on this machine, or on a cluster whose shared storage is the
        user's setup)."""
        return None

    @classmethod
    def submit_orchestrator(
        cls, cfg: StudyConfig, folder: Path, job: Callable[..., int], args: tuple[Any, ...]
    ) -> tuple[str, Path]:
        """Submit ``job(*args)`` (the orchestrator) as a job of this launcher, its files in
        ``folder``; returns (job id, its log). Only when `can_detach`."""
        raise UsageError(
            f"--detach runs the orchestrator as a job of a launcher that can detach it "
            f"(launcher=slurm); launcher={cls.name} cannot"
        )

    @classmethod
    def orchestrator_record(cls, cfg: StudyConfig) -> dict[str, Any]:
        """What `orchestrator_pending` and `cancel_orchestrator` need to find a detached
        orchestrator's job again, beyond its id (kept in ``orchestrator/job.json``)."""
        return {}

    @classmethod
    def orchestrator_pending(cls, job: dict[str, Any]) -> bool:
        """Is the detached orchestrator's job (its ``job.json`` record) still waiting to
        start, so that it would never see a stop request?"""
        return False

    @classmethod
    def cancel_orchestrator(cls, job: dict[str, Any]) -> None:
        """Cancel the detached orchestrator's job (its ``job.json`` record)."""
        return None


def check_amounts(
    lc: Any,
    at_least_one: tuple[str, ...] = (),
    none_or_more: tuple[str, ...] = (),
    positive: tuple[str, ...] = (),
) -> None:
    """UsageError naming the key unless each of ``lc``'s keys that is set is at least 1
    (``at_least_one``), 0 or more (``none_or_more``) or above 0 (``positive``)."""
    for keys, holds, says in (
        (at_least_one, lambda v: v >= 1, "must be at least 1"),
        (none_or_more, lambda v: v >= 0, "must be 0 or more"),
        (positive, lambda v: v > 0, "must be positive"),
    ):
        for key in keys:
            if (value := getattr(lc, key)) is not None and not holds(value):
                raise UsageError(f"launcher.{key} {says}, got {value}")


def was_interrupted(handle: TrialHandle) -> bool:
    """Was the handle's job interrupted from outside — its node died — rather than failed?
    A launcher's handle says so with an ``interrupted`` attribute (`launcher=ray`); the
    scheduler then runs the trial again as the same attempt, from its checkpoint."""
    return bool(getattr(handle, "interrupted", False))
