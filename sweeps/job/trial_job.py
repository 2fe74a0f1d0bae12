"""What runs inside a trial's job: load the trial, run its trainer (built-in, a Python
function or a command: `sweeps.trainers.kinds`) with a reporter that writes the trial's files
and talks to Optuna (intermediate eval losses by step, the pruner's verdict), keep a
heartbeat, and complete the trainer's status from its eval losses
(`sweeps.trainers.final_status`). The orchestrator, not the job, tells Optuna the result.

Stopping signals (SLURM's SIGTERM on ``scancel``, ``scontrol requeue`` or preemption, and
submitit's USR2 before a time limit) never cut a trial mid-step: they are held like Ctrl-C
until the trainer's next safe point, where it saves a checkpoint at the current step.
Then, for USR2, submitit's own handler requeues the job (`TrialJob` is checkpointable: the
requeued job is the same call, which resumes from that checkpoint); for SIGTERM the job
exits without a result, so SLURM's verdict stands (requeued, or cancelled → failed).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

import submitit

from stepscale import trainer as contract
from stepscale.events import record_event
from stepscale.files import read_json
from stepscale.loggers import MetricLoggers, RunInfo, flat_params
from stepscale.reporters import JsonlReporter
from stepscale.rundir import (
    COMPLETE,
    CONFIG_YAML,
    METRICS_JSONL,
    STATUS_JSON,
    TRAINER_FINAL_STATES,
)
from stepscale.sweeps.job.heartbeat import JobHeartbeat
from stepscale.sweeps.job.no_progress import NO_PROGRESS, NoProgressRule, earlier_stop
from stepscale.sweeps.job.spec import TrialSpec
from stepscale.sweeps.job.worker_main import ENV_WORKER
from stepscale.sweeps.trainers.final_status import complete_status, crossing, eval_losses
from stepscale.sweeps.trainers.kinds import kind_of
from stepscale.sweeps.trainers.metrics_file import last_step, normalized_records
from stepscale.trainer import Action


class TrainerContractError(RuntimeError):
    """A trainer broke the interface (a status without ``state``, a malformed record)."""


class TrialReporter:
    """JsonlReporter + metric loggers + Optuna: every record goes to metrics.jsonl and the
    loggers; eval losses become intermediate values; the pruner may stop."""

    def __init__(
        self,
        files: JsonlReporter,
        trial: Any | None,
        heartbeat: JobHeartbeat,
        prune: bool = True,
        reported: set[int] | None = None,
        loggers: MetricLoggers | None = None,
        target: float | None = None,
        no_progress: NoProgressRule | None = None,
    ) -> None:
        self.files = files
        self.target = target
        self.no_progress = no_progress
        self.trial = trial
        self.heartbeat = heartbeat
        self.prune = prune
        self.reported: set[int] = set(reported or ())
        # evaluations of a path a spike restart abandoned, in Optuna until redone (rewind)
        self.abandoned: set[int] = set()
        self.loggers = loggers if loggers is not None else MetricLoggers([], files.run_dir, _NO_RUN)

    def begin(self, step: int) -> None:
        """Open the trial's metrics file and loggers (resuming after ``step``)."""
        self.files.begin(step)
        self.loggers.begin(step)
        self.heartbeat.step = step
        record_event(self.heartbeat.path.parent, "start" if step == 0 else "resume", step)

    def rewind(self, step: int) -> None:
        """A spike restart went back to ``step``: its records after it are dropped and
        logged again. Optuna keeps the intermediate values of the abandoned path (it cannot
        delete one): each is overwritten when its step is evaluated again, and until the
        new path has passed them all the pruner is not asked (it would judge the trial by
        the spike the restart went around)."""
        self.files.rewind(step)
        self.loggers.rewind(step)
        self.heartbeat.step = step
        self.abandoned |= {s for s in self.reported if s > step}

    def report(self, step: int, metrics: dict[str, Any]) -> Action:
        """Write the record; at evaluations report to Optuna and ask the pruner."""
        self.files.report(step, metrics)
        return self.observe(step, metrics)

    def observe(self, step: int, metrics: dict[str, Any]) -> Action:
        """A record in metrics.jsonl (written above, or by a command trainer): log it, keep
        the heartbeat's step, report an eval loss to Optuna and ask the pruner."""
        self.loggers.log(step, metrics)
        self.heartbeat.step = step
        loss = metrics.get("eval_loss")
        if loss is None:
            return Action.CONTINUE
        if self.no_progress is not None:
            self.no_progress.seen(step, float(loss))
        if step == 0 or loss != loss:
            return Action.CONTINUE
        if self.trial is not None:
            if step in self.abandoned:  # the new path's value replaces the abandoned one
                self._replace(step, float(loss))
            elif step not in self.reported:  # a resumed job reports again what it redoes
                self.trial.report(float(loss), step)
                self.reported.add(step)
            if self.abandoned and step < max(self.abandoned):
                return Action.CONTINUE  # the abandoned path's later values still stand
            self.abandoned.clear()
        if self.target is not None and loss < self.target:
            return Action.CONTINUE  # it reached the target here: never pruned at this step
        if not self.prune:  # confirm seeds run to their end
            return Action.CONTINUE
        if self.no_progress is not None and self.no_progress.stops(step):
            ended = self.no_progress.ended
            record_event(self.heartbeat.path.parent, NO_PROGRESS, step, **ended)
            return Action.PRUNE
        return (
            Action.PRUNE
            if self.trial is not None and self.trial.should_prune()
            else Action.CONTINUE
        )

    def _replace(self, step: int, loss: float) -> None:
        """Overwrite the intermediate value at ``step`` in the storage (`Trial.report`
        ignores a step it has), then take the trial afresh from it."""
        import optuna

        trial_id = self.trial._trial_id  # Optuna's Trial takes it, exposes no public name
        self.trial.storage.set_trial_intermediate_value(trial_id, step, loss)
        self.trial = optuna.trial.Trial(self.trial.study, trial_id)
        self.abandoned.discard(step)

    def finish(self, status: dict[str, Any]) -> None:
        """Write the final status; close the loggers."""
        self.files.finish(status)
        self.loggers.close()


_NO_RUN = RunInfo(name="", group="")


def run_info(spec: TrialSpec) -> RunInfo:
    """How the loggers name a trial: ``study/point/n``, tagged with the study, the point
    and the trial number, its settings (scientific, nuisance, fixed) as hyperparameters."""
    point, _, number = spec.trial.rpartition("/")
    study = spec.study_name.rpartition("/")[0] or spec.study_name
    return RunInfo(
        name=f"{study}/{spec.trial}",
        group=study,
        tags={"study": study, "point": point, "trial": number, "seed": str(spec.seed)},
        params={**flat_params(spec.settings), "seed": spec.seed},
    )


def _optuna_trial(spec: TrialSpec) -> tuple[Any | None, set[int]]:
    """The trial as Optuna's ``Trial`` (None when nothing is ever pruned) and the steps
    already reported for it (by earlier jobs of the trial)."""
    if spec.pruner is None:
        return None, set()
    import optuna

    from stepscale.sweeps.study.samplers import make_pruner
    from stepscale.sweeps.study.schema import PrunerConfig
    from stepscale.sweeps.study.storage import open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(spec.storage)
    study = optuna.load_study(
        study_name=spec.study_name,
        storage=storage,
        pruner=make_pruner(PrunerConfig(**spec.pruner), horizon=spec.horizon, lag=spec.history_lag),
    )
    reported = set(storage.get_trial(spec.trial_id).intermediate_values)
    return optuna.trial.Trial(study, spec.trial_id), reported


class StopSignals:
    """Turns SIGTERM and submitit's preemption signal into a held Ctrl-C (see the module
    docstring); remembers which one came. Only in a submitit job's main thread."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.previous: dict[int, Any] = {}
        executor = os.environ.get("SUBMITIT_EXECUTOR", "")
        warm = bool(os.environ.get(ENV_WORKER))  # a warm worker (launcher=local)
        self.active = (
            executor in ("slurm", "local") or warm
        ) and threading.current_thread() is threading.main_thread()
        # A submitit job is requeued on its preemption signal; a warm worker has none.
        self.preempt = submitit.JobEnvironment._usr_sig() if self.active and not warm else None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None:  # SLURM may signal twice; the first one is in hand
            return
        self.received = signum
        held = signal.getsignal(signal.SIGINT)  # the trainer's DeferredInterrupt, if training
        if callable(held) and held is not signal.default_int_handler:
            held(signal.SIGINT, frame)
        else:  # not training yet (or any more): nothing to save, stop now
            raise KeyboardInterrupt

    def __enter__(self) -> StopSignals:
        if self.active:
            for sig in (signal.SIGTERM, self.preempt):
                if sig is not None:
                    self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def finish_stop(self) -> None:
        """After the trainer stopped at a safe point: requeue (preemption signal, through
        submitit's handler, which calls `TrialJob.checkpoint`) or exit without a result."""
        handler = self.previous.get(self.preempt) if self.preempt is not None else None
        if self.received == self.preempt and callable(handler):
            # The requeue (`scontrol requeue`) makes SLURM send SIGTERM to every process of
            # the job, scontrol included: under load it reached scontrol before it exited,
            # and the requeue, done, was reported as a failed job. An ignored SIGTERM stays
            # ignored across scontrol's exec (a handler would not); this process exits next.
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            handler(self.received, None)  # checkpoints, requeues and exits
        raise SystemExit(128 + int(self.received or 0))


def run_trial(spec: TrialSpec) -> dict[str, Any]:
    """Train one trial to its end and return the trainer's final status."""
    if threading.current_thread() is threading.main_thread():
        # The local launcher starts jobs with SIGINT ignored (for its controller's sake);
        # the trial itself must stop cleanly on Ctrl-C.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    folder = Path(spec.trial_dir)
    os.environ.update(spec.env)
    os.environ.update(trial_env(spec, folder))
    # In a trial of several tasks (jax.distributed) every task trains, task 0 reports.
    leader = task_index() == 0
    loggers = MetricLoggers(list(spec.loggers) if leader else [], folder, run_info(spec))
    with StopSignals() as stop, JobHeartbeat(folder, active=leader) as heartbeat, loggers:
        trial, reported = _optuna_trial(spec)
        reporter = TrialReporter(
            JsonlReporter(folder),
            trial,
            heartbeat,
            prune=spec.prune,
            reported=reported,
            loggers=loggers,
            target=spec.target_loss,
            no_progress=_no_progress_rule(spec, folder),
        )
        try:
            at = reached_target(spec, folder)
            if at is None:
                status = _train(spec, reporter, stop)
            else:  # killed after its records reached the target, before it ended
                if leader:
                    record_event(folder, "at_target", at)
                status = {"state": COMPLETE, "steps_done": last_step(folder / METRICS_JSONL)}
        except KeyboardInterrupt:
            if stop.received is None:
                raise
            if leader:
                name = signal.Signals(stop.received).name
                record_event(folder, "stopped", heartbeat.step, signal=name)
            status = None
    if status is None:
        stop.finish_stop()
        raise AssertionError("unreachable")
    ended = reporter.no_progress.ended if reporter.no_progress is not None else {}
    return _final_status(spec, folder, status, ended) if leader else status


def _no_progress_rule(spec: TrialSpec, folder: Path) -> NoProgressRule | None:
    """The rule that ends a trial that cannot learn (None: off), with the evaluations an
    earlier job of the trial recorded."""
    if spec.no_progress is None or spec.target_loss is None:
        return None
    fraction, least = spec.no_progress
    rule = NoProgressRule(fraction, least, spec.horizon, float(spec.target_loss))
    for step, loss in eval_losses(normalized_records(folder / METRICS_JSONL)):
        rule.seen(step, loss)
    rule.ended = earlier_stop(folder)  # an earlier job stopped it, then died before its end
    return rule


def reached_target(spec: TrialSpec, folder: Path) -> int | None:
    """The step at which the records an earlier attempt kept already reached the study's
    target, when the study ends trials there (`objective.stop_at_target`): the trial is
    complete without training again. Its script, killed after that evaluation was read
    but before it ended, would resume from its checkpoint and train on — and a framework
    does not evaluate again the step it resumes at (Lightning), so its first evaluation
    below the target would come later than the one its records hold. Not for a trainer
    that reports its own status (the built-in trainer replays from its checkpoint to the
    same numbers and stops at the target itself)."""
    if not spec.stop_at_target or spec.target_loss is None:
        return None
    if kind_of(spec.trainer).reports_status:
        return None
    records = normalized_records(folder / METRICS_JSONL)
    return crossing(eval_losses(records), float(spec.target_loss))[0]


def task_index() -> int:
    """This process's place in a trial of several (SLURM's task, submitit's local task,
    or the process id a launcher gives through STEPSCALE_PROCESS_ID, `launcher=ray`)."""
    for var in ("SLURM_PROCID", "SUBMITIT_LOCAL_GLOBALID", "STEPSCALE_PROCESS_ID"):
        if os.environ.get(var):
            return int(os.environ[var])
    return 0


def _train(spec: TrialSpec, reporter: TrialReporter, stop: StopSignals) -> Any:
    """Run the trial's trainer (of any kind: `sweeps.trainers.kinds`); returns what it
    returned."""
    function = kind_of(spec.trainer).train_function()
    if function is None:  # a program of its own
        from stepscale.sweeps.job.command import run_command

        return run_command(spec, reporter, stop)
    return function(spec.config, reporter, Path(spec.trial_dir))


def _final_status(
    spec: TrialSpec, folder: Path, status: Any, ended: dict[str, Any]
) -> dict[str, Any]:
    """The trainer's status checked against the interface and completed from its eval
    losses; written to status.json (and metrics.jsonl cleaned of records a resume redid)."""
    missing = contract.missing_status_keys(status)
    if missing:
        raise TrainerContractError(
            f"the trainer returned {str(status)[:300]!r}, which is not a status: a status is "
            f"a dict with {' and '.join(repr(k) for k in contract.REQUIRED_STATUS_KEYS)} "
            f"(lacking {', '.join(missing)}); see docs/trainers.md"
        )
    if status["state"] not in TRAINER_FINAL_STATES:
        raise TrainerContractError(
            f"the trainer's status has state {status['state']!r}; a finished trial is one of "
            f"{', '.join(TRAINER_FINAL_STATES)}"
        )
    if kind_of(spec.trainer).reports_status:  # the trainer reports every key itself
        if not ended:
            return status
        full = {**status, **ended}  # and the rule that stopped it (sweeps.job.no_progress)
        JsonlReporter(folder).finish(full)
        return full
    records = normalized_records(folder / METRICS_JSONL, rewrite=True)
    full = complete_status(status, records, spec.horizon, spec.target_loss) | ended
    for key, value in spec.sizes.items():  # what the plan knows of a step, unless said
        full.setdefault(key, value)
    JsonlReporter(folder).finish(full)
    return full


def trial_env(spec: TrialSpec, folder: Path) -> dict[str, str]:
    """The STEPSCALE_* variables every trainer may read (`stepscale.trainer`)."""
    env = {
        contract.ENV_TRIAL_DIR: str(folder),
        contract.ENV_CONFIG: str(folder / contract.CONFIG_JSON),
        contract.ENV_CONFIG_YAML: str(folder / CONFIG_YAML),
        contract.ENV_MAX_STEPS: str(spec.horizon),
        contract.ENV_SEED: str(spec.seed),
        contract.ENV_ATTEMPT: str(spec.attempt),
        contract.ENV_RESUME_STEP: str(last_step(folder / METRICS_JSONL)),
        contract.ENV_CONTROL: str(folder / contract.CONTROL_JSON),
    }
    if spec.target_loss is not None:
        env[contract.ENV_TARGET_LOSS] = repr(float(spec.target_loss))
    return env


def finished_status(folder: Path) -> dict[str, Any] | None:
    """The final status a job wrote into a trial's folder, if the trial has ended."""
    status = read_json(folder / STATUS_JSON, lenient=True)
    if isinstance(status, dict) and status.get("state") in TRAINER_FINAL_STATES:
        return status
    return None


class TrialQueueJob(submitit.helpers.Checkpointable):
    """The callable of a SLURM job that runs several trials of one point, one after
    another, in one allocation and one process (``launcher.trials_per_job``): the later
    trials start warm. Returns one outcome per trial, ``("success", status)`` or
    ``("error", traceback)``; a failed trial does not stop the others. Checkpointable: a
    requeued job (preemption, time limit) skips the trials it finished and resumes the one
    it was running from its checkpoint. A stop signal (scancel) ends the whole job."""

    def __call__(self, specs: list[TrialSpec]) -> list[tuple[str, Any]]:
        outcomes: list[tuple[str, Any]] = []
        for spec in specs:
            done = finished_status(Path(spec.trial_dir))
            if done is not None:
                outcomes.append(("success", done))
                continue
            try:
                outcomes.append(("success", run_trial(spec)))
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception:
                trace = traceback.format_exc()
                print(trace, file=sys.stderr, flush=True)
                outcomes.append(("error", trace))
        return outcomes


class TrialJob(submitit.helpers.Checkpointable):
    """The callable a launcher submits for a trial. Checkpointable: on preemption or time
    limit submitit requeues the same call, which resumes from the trial's checkpoint."""

    def __call__(self, spec: TrialSpec) -> dict[str, Any]:
        return run_trial(spec)
