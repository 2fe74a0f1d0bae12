"""The asynchronous scheduler: keep `parallelism` trials in flight across all points,
refill a slot the moment any trial ends, tell Optuna each result exactly once.

Every point is its own Optuna study in one storage, served fewest-trials-first up to its
budget (`sweeps.run.budget`). A crashed job is resubmitted as the same Optuna trial (resuming
from its checkpoint) until `retries` run out; one interrupted from outside (its node died)
is resubmitted as the same attempt. Trials left RUNNING by a dead orchestrator
are adopted (`sweeps.run.adoption`); how a trial ended is told and recorded by
`sweeps.run.outcomes`.

Several orchestrators may share a study: each decision that reads and then writes the
study (ask, adopt, tell) happens under the run dir's lock (`sweeps.run.runlock`), so together
they run exactly the budget. `sweep stop` (`sweeps.run.orchestrators`) ends them cleanly.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from stepscale.files import read_json
from stepscale.rundir import (
    FAILED,
    JOBS_DIR,
    LOGS_DIR,
    QUEUED,
    RUNNING,
    STOPPED,
    TRIAL_JSON,
    trial_dir,
)
from stepscale.sweeps.job import heartbeat
from stepscale.sweeps.job.spec import TrialSpec
from stepscale.sweeps.job.trial_job import TrialJob
from stepscale.sweeps.launch.base import was_interrupted
from stepscale.sweeps.launch.launchers import JobRequest, TrialHandle, make_launcher
from stepscale.sweeps.launch.submission import SubmissionFailed
from stepscale.sweeps.launch.workers import was_stopped
from stepscale.sweeps.run import adoption, budget, orchestrators, outcomes
from stepscale.sweeps.run.adaptive import AdaptiveRun
from stepscale.sweeps.run.killpoints import kill_point
from stepscale.sweeps.run.point_stats import PointStats, point_stats
from stepscale.sweeps.run.reconcile import reconcile
from stepscale.sweeps.run.runlock import RunLock
from stepscale.sweeps.run.signals import StopRequest
from stepscale.sweeps.run.transfer import TransferRun
from stepscale.sweeps.run.trial_records import adopted_record, json_scalar, trial_record
from stepscale.sweeps.study import ordered
from stepscale.sweeps.study.samplers import derived_seed, make_sampler
from stepscale.sweeps.study.schema import StudyConfig
from stepscale.sweeps.study.space import Point, SearchSpace
from stepscale.sweeps.study.storage import StorageSpec
from stepscale.sweeps.study.trials import (
    now_iso,
    trial_config,
    trial_settings,
    write_trial_config,
    write_trial_json,
)
from stepscale.sweeps.trainers.spec import COMMAND, TrainerSpec

# How often a waiting orchestrator looks whether a local job's process has ended, and
# whether a stop signal came.
LOCAL_WAKE_S = 0.02
SIGNAL_WAKE_S = 0.2
# How long a stop signal waits for local trial jobs to checkpoint and end.
INTERRUPT_GRACE_S = 30.0

optuna.logging.set_verbosity(optuna.logging.WARNING)
# Optuna's own handler keeps the stderr object it first saw; propagating to the root
# logger (whose last-resort handler writes to the current sys.stderr) is sturdier.
optuna.logging.disable_default_handler()
optuna.logging.enable_propagation()


@dataclass
class Prepared:
    """A trial whose folder is written and whose job is about to be submitted."""

    point: Point
    trial_id: int
    number: int
    folder: Path
    spec: TrialSpec
    record: dict[str, Any]


@dataclass
class Running(Prepared):
    """A trial this orchestrator has a job for."""

    handle: TrialHandle


class Scheduler:
    """Runs a study's trials to its budget."""

    def __init__(
        self,
        cfg: StudyConfig,
        space: SearchSpace,
        run_dir: Path,
        storage_spec: StorageSpec,
        storage: optuna.storages.BaseStorage,
        sizes: dict[str, dict[str, Any]],
        trainer: TrainerSpec,
        progress: Callable[[list[PointStats]], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.trainer = trainer
        self.space = space
        self.run_dir = run_dir
        self.storage_spec = storage_spec
        self.storage = storage
        self.sizes = sizes  # per point: horizon_steps and what a step consumes (sweeps.study.plan)
        self.horizons = {label: int(s["horizon_steps"]) for label, s in sizes.items()}
        self.progress = progress
        self.launcher = make_launcher(cfg.launcher, cfg.parallelism, cfg.heartbeat_timeout_s)
        self.owner = uuid.uuid4().hex[:12]
        self.started = time.time()
        self.lock = RunLock(run_dir)
        self.running: dict[int, Running] = {}  # trial_id -> job
        # Cheaper studies: transfer between points, adaptive batch sizes (None when off).
        self.transfer = TransferRun.of(cfg, run_dir)
        self.adaptive = AdaptiveRun.of(cfg, run_dir)
        if self.adaptive is not None:
            self.space = space = self.adaptive.restore(space)
        with self.lock:  # two orchestrators creating one study at once would collide
            self.studies = {p.label: self._study(p) for p in space.points}
        self.told = 0
        self.stopped = False  # ended by `sweep stop`
        self.signals = StopRequest()  # Ctrl-C / SIGTERM: stop at the next safe point
        self._last_orch_beat = 0.0

    # ------------------------------------------------------------ studies
    def _study(self, point: Point) -> optuna.Study:
        name = f"{self.cfg.name}/{point.label}"
        study = optuna.create_study(
            study_name=name, storage=self.storage, direction="minimize", load_if_exists=True
        )
        if "point" not in study.user_attrs:
            study.set_user_attr("point", point.label)
            study.set_user_attr("values", {k: json_scalar(v) for k, v in point.values.items()})
        return study

    def _trials(self, point: Point) -> list[FrozenTrial]:
        return self.studies[point.label].get_trials(deepcopy=False)

    def _finished(self) -> bool:
        if self._grow():
            return False
        if self.running:
            return False
        points = self.space.points
        if self.transfer is not None:  # groups whose anchors learned nothing end there
            skipped = self.transfer.not_learning(points, self._trials)
            points = tuple(p for p in points if p.label not in skipped)
        return budget.all_done(points, self._trials, self.cfg.budget)

    # ------------------------------------------------------------ submit
    def _ask(self, point: Point, kind: str) -> Prepared:
        study = self.studies[point.label]
        dists = self.space.distributions(point.label)
        trials = self._trials(point)
        if self.transfer is not None:  # a point's first trial: the predicted optimum
            if kind == "tune" and all(t.state == TrialState.WAITING for t in trials):
                self.transfer.start(self.space, point, study, self._trials, self.run_dir)
            dists = self.transfer.distributions(point.label, dists)
        if kind == "confirm":
            tune = [t for t in trials if t.user_attrs.get("kind", "tune") == "tune"]
            best = budget.best_tune(tune)
            k = 1 + len([t for t in trials if t.user_attrs.get("kind") == "confirm"])
            study.enqueue_trial(
                best.params, user_attrs={"kind": "confirm", "seed": self.cfg.seed + k}
            )
        self._use_sampler(point, ordered.next_number(trials), dists, trials)
        # study.ask(fixed_distributions=dists), one write at a time: the trial is created,
        # then each parameter recorded. A kill in between leaves a RUNNING trial without
        # (all of) its parameters, which the next orchestrator completes (_complete_ask).
        trial = study.ask()
        kill_point("ask:created")
        for i, (name, dist) in enumerate(dists.items()):
            trial._suggest(name, dist)
            if i + 1 < len(dists):
                kill_point("ask:param")
        kill_point("ask:asked")
        if kind == "tune":
            trial.set_user_attr("kind", "tune")
            trial.set_user_attr("seed", self.cfg.seed)
        return self._prepare(point, study.get_trials(deepcopy=False)[trial.number], attempt=1)

    def _use_sampler(
        self,
        point: Point,
        number: int,
        dists: dict[str, BaseDistribution],
        trials: list[FrozenTrial],
    ) -> None:
        """Give the point's study the sampler that draws its trial ``number``: one that
        learns from history (TPE, GP) draws from the point's trials 0 … number − 1 − lag
        alone (`sweeps.study.ordered`), whatever else has ended or is running."""
        per_ask = self.cfg.sampler.name not in ("qmc", "grid")
        seed = self.cfg.sampler.seed if self.cfg.sampler.seed is not None else self.cfg.seed
        sampler_seed = (
            derived_seed(seed, point.label, number) if per_ask else derived_seed(seed, point.label)
        )
        sampler = make_sampler(
            self.cfg.sampler, sampler_seed, self.cfg.budget.trials_per_point, dists
        )
        if self.cfg.sampler.name in ordered.HISTORY_SAMPLERS:
            past = ordered.history(trials, number, self.cfg.sampler.lag)
            params = ordered.draw_from_history(sampler, past, dists)
            sampler = ordered.fixed_sampler(params, sampler_seed)
        self.studies[point.label].sampler = sampler

    def _cut_short(self, o: adoption.Orphan) -> bool:
        """Was this trial's ask cut short (its orchestrator killed between creating it and
        recording all its parameters, its kind and its seed)? Asks and adoptions both hold
        the run dir's lock, so no live orchestrator is in the middle of this one."""
        missing = set(self.space.distributions(o.point.label)) - set(o.trial.params)
        return bool(missing) or "kind" not in o.trial.user_attrs

    def _complete_ask(self, o: adoption.Orphan) -> None:
        """Finish a cut-short ask: draw the missing parameters with the sampler the ask
        used (the same seed), record kind and seed, and submit the trial as its first
        attempt. It never reached a job, so nothing of it is lost or run twice."""
        study = self.studies[o.point.label]
        dists = self.space.distributions(o.point.label)
        if self.transfer is not None:
            dists = self.transfer.distributions(o.point.label, dists)
        self._use_sampler(o.point, o.trial.number, dists, self._trials(o.point))
        trial = optuna.Trial(study, o.trial._trial_id)
        for name, dist in dists.items():
            if name not in o.trial.params:
                trial._suggest(name, dist)
        if "kind" not in o.trial.user_attrs:  # confirm trials get theirs when enqueued
            trial.set_user_attr("kind", "tune")
            trial.set_user_attr("seed", self.cfg.seed)
        frozen = self.storage.get_trial(o.trial._trial_id)
        self._launch([[self._prepare(o.point, frozen, attempt=1)]])

    def _submit(
        self, point: Point, trial: FrozenTrial, attempt: int, interrupted: bool = False
    ) -> None:
        self._launch([[self._prepare(point, trial, attempt, interrupted)]])

    def _prepare(
        self, point: Point, trial: FrozenTrial, attempt: int, interrupted: bool = False
    ) -> Prepared:
        """Write a trial's folder (config, trial.json, the orchestrator's heartbeat, which
        keeps other orchestrators off it) and its job's spec; :meth:`_launch` submits it.
        ``interrupted``: the trial's last job was stopped from outside, not failed."""
        folder = trial_dir(self.run_dir, point.label, trial.number)
        previous = read_json(folder / TRIAL_JSON, lenient=True) or {}
        record = trial_record(
            self.cfg, self.space, point, trial,
            state=RUNNING, objective=None, attempts=attempt, orchestrator=self.owner,
            started=previous.get("started", now_iso()), ended=None,
        )  # fmt: skip
        if previous.get("failures"):
            record["failures"] = previous["failures"]  # errors of earlier attempts (retried)
        interruptions = int(previous.get("interruptions", 0)) + int(interrupted)
        if interruptions:
            record["interruptions"] = interruptions
        nuisance = self.space.trainer_values(point.label, trial.params)
        seed = record["seed"]
        tree = trial_config(self.cfg, self.trainer, self.space, point, nuisance, seed, folder)
        write_trial_config(folder, tree)
        write_trial_json(folder, record)
        if "derived" in record and "derived" not in trial.user_attrs:  # the told trial's too
            self.storage.set_trial_user_attr(trial._trial_id, "derived", record["derived"])
        settings = trial_settings(self.cfg, self.trainer, self.space, point, nuisance, seed)
        spec = self._spec(point, trial, folder, tree, attempt, record["kind"], seed, settings)
        heartbeat.hold(folder, self.owner)
        return Prepared(point, trial._trial_id, trial.number, folder, spec, record)

    def _launch(self, groups: list[list[Prepared]]) -> None:
        """Submit prepared trials together (a launcher that submits together: on SLURM,
        two or more jobs as one job array); a group of several trials (of one point,
        ``launcher.trials_per_job``) runs as one job, one trial after another."""
        requests = [
            [
                JobRequest(
                    p.folder, TrialJob(), (p.spec,), name=f"{self.cfg.name}:{p.spec.trial}",
                    key=p.point.label,
                )
                for p in group
            ]
            for group in groups
        ]  # fmt: skip
        name = f"{self.cfg.name}:{sum(map(len, groups))} trials"
        handles: list[Any]
        try:
            if any(len(group) > 1 for group in groups):
                queued = self.launcher.submit_queues(requests, self.run_dir / JOBS_DIR, name=name)
                handles = [h for queue in queued for h in queue]
            else:
                handles = self.launcher.submit_together(
                    [r for group in requests for r in group], self.run_dir / JOBS_DIR, name=name
                )
        except SubmissionFailed:  # never ran: the next run submits them as they are
            self._release([p for group in groups for p in group], state=QUEUED)
            raise
        for p, handle in zip([p for g in groups for p in g], handles, strict=True):
            p.record["job_id"] = handle.job_id
            if handle.index is not None:
                p.record["job_index"] = handle.index
            if handle.files != p.folder / LOGS_DIR:
                p.record["job_files"] = str(handle.files.resolve())
            write_trial_json(p.folder, p.record)
            self.running[p.trial_id] = Running(**vars(p), handle=handle)

    def _spec(
        self,
        point: Point,
        trial: FrozenTrial,
        folder: Path,
        tree: dict[str, Any],
        attempt: int,
        kind: str,
        seed: int,
        settings: dict[str, Any],
    ) -> TrialSpec:
        return TrialSpec(
            trial=f"{point.label}/{trial.number}",
            study_name=self.studies[point.label].study_name,
            trial_id=trial._trial_id,
            number=trial.number,
            trial_dir=str(folder.resolve()),
            config=tree,
            storage=self.storage_spec,
            trainer=self.trainer,
            seed=seed,
            target_loss=self.cfg.objective.target_loss,
            pruner=asdict(self.cfg.pruner) if self.cfg.pruner.name != "none" else None,
            horizon=self.horizons[point.label],
            attempt=attempt,
            # Confirm seeds re-run the best values to measure seed spread: never pruned.
            prune=kind == "tune",
            settings=settings,
            sizes={k: v for k, v in self.sizes.get(point.label, {}).items() if v is not None},
            loggers=tuple(self.cfg.loggers),
            stop_at_target=bool(self.cfg.objective.stop_at_target),
            on_spike=self._on_spike(),
            no_progress=self._no_progress(),
            history_lag=self.cfg.sampler.lag,
        )

    def _on_spike(self) -> dict[str, Any] | None:
        """A command trainer's spike policy as its job applies it (None: off, or a trainer
        that applies its own)."""
        t = self.cfg.train
        if self.trainer.kind != COMMAND or t.on_spike.policy != "restart":
            return None
        return {
            "rewind_steps": int(t.on_spike.rewind_steps),
            "skip_batches": int(t.on_spike.skip_batches),
            "max_restarts": int(t.on_spike.max_restarts),
            "window": int(t.spike_window),
            "factor": float(t.spike_factor),
            "checkpoint_every": int(self.trainer.checkpoint_every),
        }

    def _no_progress(self) -> tuple[float, float] | None:
        """The rule that ends a trial that cannot learn (budget.no_progress_by), when on."""
        b = self.cfg.budget
        if b.no_progress_by is None or self.cfg.objective.target_loss is None:
            return None
        return (float(b.no_progress_by), float(b.no_progress_min))

    def _grow(self) -> bool:
        """Adaptive batch sizes: decide once every point has finished; points added (by
        this or another orchestrator) get their Optuna study. Returns whether any was."""
        if self.adaptive is None:
            return False
        with self.lock:
            self.space = self.adaptive.grow(self.space, self._trials)
            added = [p for p in self.space.points if p.label not in self.studies]
            for p in added:
                self.studies[p.label] = self._study(p)
        return bool(added)

    # ------------------------------------------------------------- finish
    def _reap(self) -> None:
        for trial_id, run in list(self.running.items()):
            if not run.handle.done():
                continue
            del self.running[trial_id]
            ok, result = run.handle.outcome()
            status = outcomes.final_status(ok, result)
            if status is not None:
                self._finalize(run.point, trial_id, run.folder, status, run.record)
                continue
            if self.signals.signum is not None and was_stopped(ok, result):
                # Stopped by the signal that stops this orchestrator (Ctrl-C to the group
                # reaches the job too): not a failure; the next run resumes the same attempt.
                self._mark_stopped(run)
                continue
            if was_interrupted(run.handle):  # its node died: the same attempt, elsewhere
                trial = self.storage.get_trial(trial_id)
                attempt = int(run.record.get("attempts", 1))
                self._submit(run.point, trial, attempt=attempt, interrupted=True)
                continue
            error = outcomes.job_error(ok, result, self._log_name(run.folder, run.handle.log))
            self._failed(run.point, self.storage.get_trial(trial_id), run.folder, run.record, error)

    def _failed(
        self, point: Point, trial: FrozenTrial, folder: Path, record: dict[str, Any], error: str
    ) -> None:
        """A trial's job failed: run it again (as the same Optuna trial, from its checkpoint)
        while retries last, else the trial failed. Only failures use up retries."""
        if int(record.get("attempts", 1)) <= self.cfg.retries:
            # Kept for the user: why this trial needed another job.
            record["failures"] = [*record.get("failures", []), error[:2000]]
            write_trial_json(folder, record)
            self._submit(point, trial, attempt=int(record.get("attempts", 1)) + 1)
        else:
            self._finalize(point, trial._trial_id, folder, None, record, error=error)

    def _log_name(self, folder: Path, log: Path | None) -> Path | None:
        """A job's log as the user finds it: relative to the trial folder when inside it."""
        if log is None:
            return None
        try:
            return log.resolve().relative_to(folder.resolve())
        except ValueError:
            return log

    def _finalize(
        self,
        point: Point,
        trial_id: int,
        folder: Path,
        status: dict[str, Any] | None,
        record: dict[str, Any],
        error: str | None = None,
    ) -> None:
        """Tell Optuna (once) and record the trial's true end, both under the run lock:
        another orchestrator of the study reconciles folders under it (sweeps.run.reconcile),
        and between the two it would take this trial for one whose end was never recorded,
        repair its folder itself and remove the temporary file of the write in progress
        here (which then failed, ending this orchestrator)."""
        state = status["state"] if status else FAILED
        study = self.studies[point.label]
        with self.lock:
            value, told = outcomes.tell_once(
                study, self.storage, trial_id, state, status, folder, self.cfg.objective.kind
            )
            outcomes.record_end(folder, record, state, value, error, self.cfg.keep_checkpoints)
        self.told += told

    # ------------------------------------------------------------- adopt
    def _adopt(self) -> None:
        """Handle RUNNING trials that no job of ours runs (left by a dead orchestrator, or
        run by another live one)."""
        timeout = self.cfg.heartbeat_timeout_s
        with self.lock:
            for o in adoption.orphans(self.space.points, self._trials, self.running, self.run_dir):
                trial_id = o.trial._trial_id
                if self._cut_short(o):
                    self._complete_ask(o)
                elif o.finished:
                    record = adopted_record(self.cfg, self.space, o.point, o.trial, o.record)
                    self._finalize(o.point, trial_id, o.folder, o.status, record)
                elif o.record.get("state") == FAILED:  # recorded, but Optuna's tell was lost
                    error = str(o.record.get("error") or "failed")
                    self._finalize(o.point, trial_id, o.folder, None, o.record, error=error)
                elif heartbeat.owner_alive(o.folder, timeout):
                    continue  # its orchestrator is alive and waits for it
                elif (handle := adoption.live_job(self.launcher, o.folder, o.record)) is not None:
                    self._take_over(o, handle)
                elif not heartbeat.trial_alive(o.folder, timeout):
                    self._resume_dead(o)

    def _resume_dead(self, o: adoption.Orphan) -> None:
        """A trial nobody works on any more: its job failed on its own (a retry is used up)
        or was interrupted from outside (stopped, or killed with its orchestrator: the same
        attempt goes on from its checkpoint)."""
        error = adoption.dead_job_error(o.folder, o.record)
        if error is None:
            attempt = max(1, int(o.record.get("attempts", 0)))
            interrupted = "trial" in o.record and o.record.get("state") != QUEUED
            self._submit(o.point, o.trial, attempt=attempt, interrupted=interrupted)
        else:
            self._failed(o.point, o.trial, o.folder, dict(o.record), error)

    def _take_over(self, o: adoption.Orphan, handle: TrialHandle) -> None:
        """Own the still-live job of a trial whose orchestrator died (one trial of it, when
        the job runs a queue of them)."""
        heartbeat.hold(o.folder, self.owner)
        # The job runs with the spec it was submitted with; this one is for bookkeeping.
        attempt = int(o.record.get("attempts", 1))
        kind, seed = o.record.get("kind", "tune"), int(o.record.get("seed", self.cfg.seed))
        spec = self._spec(o.point, o.trial, o.folder, {}, attempt, kind, seed, {})
        trial_id = o.trial._trial_id
        self.running[trial_id] = Running(
            o.point, trial_id, o.trial.number, o.folder, spec, o.record, handle
        )

    # --------------------------------------------------------------- loop
    def _beat(self) -> None:
        now = time.time()
        if now - self._last_orch_beat < min(10.0, self.cfg.heartbeat_timeout_s / 4):
            return
        self._last_orch_beat = now
        orchestrators.register(self.run_dir, self.owner, self.started)
        for run in self.running.values():
            heartbeat.hold(run.folder, self.owner)

    def stats(self) -> list[PointStats]:
        """Per-point counts, best objective and steps spent (for progress and summaries)."""
        per_point = self.cfg.budget.trials_per_point + self.cfg.budget.confirm_seeds
        return point_stats(self.space.points, self._trials, self.run_dir, self.horizons, per_point)

    def run(self) -> list[PointStats]:
        """Run until every point has its budget of finished trials."""
        poll = self.cfg.launcher.poll_s
        orchestrators.register(self.run_dir, self.owner, self.started)
        orchestrators.remove_stale(self.run_dir, self.cfg.heartbeat_timeout_s)
        try:
            with self.signals:
                self._reconcile()
                self._loop(poll)
                self._reconcile()
        except KeyboardInterrupt:  # a second signal: stop now, without waiting for jobs
            self._interrupted(grace_s=0.0)
            raise
        finally:
            self.launcher.close()
            orchestrators.unregister(self.run_dir, self.owner)
            self.lock.close()
        return self.stats()

    def _reconcile(self) -> None:
        """Bring trial folders in line with the storage (a write between telling Optuna and
        recording the end may have failed: a full disk, a kill)."""
        with self.lock:
            reconcile(
                self.space.points,
                self._trials,
                self.run_dir,
                lambda point, trial, record: adopted_record(
                    self.cfg, self.space, point, trial, record
                ),
                self.cfg.keep_checkpoints,
            )

    def _loop(self, poll: float) -> None:
        """Ask, submit, reap and adopt until the budget is done, a stop is asked for
        (`sweep stop`) or a signal came (then `Interrupted` ends it, trials saved)."""
        self._adopt()
        while True:
            if self.signals.signum is not None:
                self._interrupted()
                self.signals.check()
            if orchestrators.stop_requested(self.run_dir, self.started):
                self._stop()
                return
            self._step()
            if self._finished():
                return
            self._beat()
            self._wait(poll if self.running else min(poll, 1.0) * 2)

    def _step(self) -> None:
        """One pass: reap ended jobs, adopt orphans, fill free slots, show progress."""
        self.launcher.refresh()
        self._reap()
        self._adopt()
        self._grow()
        # Trials asked in one pass are submitted together where the launcher does so (on
        # SLURM as one job array), and with trials_per_job > 1 several trials of one point
        # go as one job.
        together = self.launcher.submits_together
        per_job = self.launcher.trials_per_job
        batch: list[list[Prepared]] = []

        def in_flight() -> int:
            return len(self.running) + sum(map(len, batch))

        try:
            while in_flight() < self.cfg.parallelism:
                if self.signals.signum is not None:
                    break  # stopping: submit nothing more
                with self.lock:
                    choice = budget.pick_point(
                        self.space.points, self._trials, self.cfg.budget, **self._serving()
                    )
                    if choice is None:
                        break
                    point, kind = choice
                    group = [self._ask(point, kind)]
                    batch.append(group)
                    while (
                        len(group) < per_job
                        and in_flight() < self.cfg.parallelism
                        and budget.needs(self.cfg.budget, self._trials(point)) == kind
                        and self._history_ready(point)
                    ):
                        group.append(self._ask(point, kind))
                if not together:
                    self._launch(batch)
                    batch = []
                    self._reap()  # inline jobs are done already
            self._launch(batch)
        except BaseException:
            self._release([p for group in batch for p in group])
            raise
        if self.progress is not None:
            self.progress(self.stats())

    def _history_ready(self, point: Point) -> bool:
        """Whether the point's next trial may be asked: when the sampler or the pruner reads
        other trials, once its history (trials 0 … n − 1 − lag) has ended
        (`sweeps.study.ordered`)."""
        reads_history = (
            self.cfg.sampler.name in ordered.HISTORY_SAMPLERS or self.cfg.pruner.name != "none"
        )
        return not reads_history or ordered.history_ready(self._trials(point), self.cfg.sampler.lag)

    def _serving(self) -> dict[str, Any]:
        """The order and readiness points are served by (`budget.pick_point`): transfer's,
        and the history's."""
        serving: dict[str, Any] = (
            self.transfer.serving(self.space.points, self._trials)
            if self.transfer is not None
            else {}
        )
        transfer_ready = serving.get("ready")

        def ready(point: Point) -> bool:
            if transfer_ready is not None and not transfer_ready(point):
                return False
            return self._history_ready(point)

        return {**serving, "ready": ready}

    def _wait(self, seconds: float) -> None:
        """Sleep up to ``seconds``; a local job whose process ends wakes us at once (its
        slot is refilled and its result told without waiting out the poll interval), and
        so does a stop signal."""
        deadline = time.monotonic() + seconds
        watch = self.launcher.child_jobs and bool(self.running)
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, LOCAL_WAKE_S if watch else SIGNAL_WAKE_S))
            if self.signals.signum is not None:
                return
            if watch and any(run.handle.done() for run in self.running.values()):
                return

    def _release(self, batch: list[Prepared], state: str = STOPPED) -> None:
        """Asked but never submitted (Ctrl-C or an error in between; ``state`` queued when
        the submission itself failed): mark them so and drop our heartbeat, so the next
        run submits them at once as the same attempt."""
        for p in batch:
            if "job_id" not in p.record and p.record.get("state") != QUEUED:
                self._mark_stopped(p, state)

    def _mark_stopped(self, run: Prepared, state: str = STOPPED) -> None:
        run.record["state"] = state
        write_trial_json(run.folder, run.record)
        heartbeat.let_go(run.folder)

    def _stop(self) -> None:
        """`sweep stop`: submit nothing more; every running trial job checkpoints at its
        current step and ends (SIGTERM, see sweeps.job.trial_job). Trials stay open in Optuna and
        resume when the same `sweep run` runs again."""
        self.stopped = True
        for run in self.running.values():
            run.handle.cancel()
        deadline = time.time() + 60
        while time.time() < deadline and any(not r.handle.done() for r in self.running.values()):
            time.sleep(0.5)
            self.launcher.refresh(force=True)
        for trial_id, run in list(self.running.items()):
            ok, result = run.handle.outcome() if run.handle.done() else (False, None)
            status = outcomes.final_status(ok, result)
            if status is not None:
                self._finalize(run.point, trial_id, run.folder, status, run.record)
            else:
                self._mark_stopped(run)

    def _interrupted(self, grace_s: float = INTERRUPT_GRACE_S) -> None:
        """A stop signal (Ctrl-C, SIGTERM) to a foreground orchestrator does what `sweep stop`
        does: every running trial job is asked to stop (local jobs may have had the signal
        already, from the terminal; SLURM's are scancelled, which they take as SIGTERM) and
        given ``grace_s`` to checkpoint. A trial that finished meanwhile is recorded as
        finished, the others as stopped (they resume on the next run). Nothing of the study
        goes on without its orchestrator: a user who stops it has stopped it. (A detached
        orchestrator's signals are submitit's: its time limit requeues it and its successor
        takes over the trial jobs that kept running.)"""
        for run in self.running.values():
            run.handle.cancel()
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(
            not r.handle.done() for r in self.running.values()
        ):
            if self.launcher.child_jobs:
                time.sleep(0.05)
            else:  # a cluster's jobs: ask its controller, not too often
                time.sleep(0.5)
                self.launcher.refresh(force=True)
        for trial_id, run in list(self.running.items()):
            status = outcomes.final_status(*run.handle.outcome()) if run.handle.done() else None
            if status is not None:
                self._finalize(run.point, trial_id, run.folder, status, run.record)
            else:
                run.handle.cancel()
                self._mark_stopped(run)
            del self.running[trial_id]
