"""The asynchronous scheduler: keep `parallelism` trials in flight across all points,
refill a slot the moment any trial ends, tell Optuna each result exactly once.

Every point is its own Optuna study in one storage. The budget of a point counts trials
in a final state (complete, pruned, diverged, failed) plus those running. Points are
served fewest-trials-first, so early results cover every batch size. A crashed job is
resubmitted as the same Optuna trial (resuming from its checkpoint) until `retries` run
out. Trials left RUNNING by a dead orchestrator are adopted: finished ones are told from
their status.json, dead ones re-run from their checkpoints, live ones (another
orchestrator's, or a job that outlived its orchestrator) are waited for; a SLURM job whose
orchestrator died (e.g. a detached orchestrator requeued at its time limit) is taken over
while it is still queued or running.

Several orchestrators may share a study: each decision that reads and then writes the
study (ask, adopt, tell) happens under the run dir's lock (`sweeps.runlock`), so together
they run exactly the budget. `sweep stop` (`sweeps.orchestrators`) ends them cleanly.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from stepscale.sweeps import heartbeat, orchestrators
from stepscale.sweeps.job import TrialJob
from stepscale.sweeps.launchers import JobHandle, JobRequest, Launcher
from stepscale.sweeps.objective import objective_value
from stepscale.sweeps.runlock import RunLock
from stepscale.sweeps.samplers import derived_seed, make_sampler
from stepscale.sweeps.schema import StudyConfig
from stepscale.sweeps.space import Point, SearchSpace
from stepscale.sweeps.storage import StorageSpec
from stepscale.sweeps.trials import (
    TrialSpec,
    now_iso,
    read_json,
    trial_config,
    trial_dir,
    write_config_yaml,
    write_trial_json,
)

FINAL = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
optuna.logging.set_verbosity(optuna.logging.WARNING)
# Optuna's own handler keeps the stderr object it first saw; propagating to the root
# logger (whose last-resort handler writes to the current sys.stderr) is sturdier.
optuna.logging.disable_default_handler()
optuna.logging.enable_propagation()
TRIAL_STATES = ("complete", "pruned", "diverged", "failed")
FINISHED = ("complete", "pruned", "diverged")  # a trainer status that ends a trial


@dataclass
class Running:
    """A trial this orchestrator has a job for."""

    point: Point
    trial_id: int
    number: int
    folder: Path
    spec: TrialSpec
    handle: JobHandle
    record: dict[str, Any]


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
class PointStats:
    """What the progress display shows for a point."""

    label: str
    budget: int
    counts: dict[str, int] = field(default_factory=dict)
    best: float | None = None
    steps: int = 0  # optimizer steps trained
    consumed: int = (
        0  # budget used: a finished trial uses its whole horizon, however early it ended
    )


class Scheduler:
    """Runs a study's trials to its budget."""

    def __init__(
        self,
        cfg: StudyConfig,
        space: SearchSpace,
        run_dir: Path,
        storage_spec: StorageSpec,
        storage: optuna.storages.BaseStorage,
        horizons: dict[str, int],
        progress: Callable[[list[PointStats]], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.space = space
        self.run_dir = run_dir
        self.storage_spec = storage_spec
        self.storage = storage
        self.horizons = horizons
        self.progress = progress
        self.launcher = Launcher(cfg.launcher)
        self.owner = uuid.uuid4().hex[:12]
        self.started = time.time()
        self.lock = RunLock(run_dir)
        self.running: dict[int, Running] = {}  # trial_id -> job
        with self.lock:  # two orchestrators creating one study at once would collide
            self.studies = {p.label: self._study(p) for p in space.points}
        self.told = 0
        self.stopped = False  # ended by `sweep stop`
        self._last_orch_beat = 0.0

    # ------------------------------------------------------------ studies
    def _study(self, point: Point) -> optuna.Study:
        name = f"{self.cfg.name}/{point.label}"
        study = optuna.create_study(
            study_name=name, storage=self.storage, direction="minimize", load_if_exists=True
        )
        if "point" not in study.user_attrs:
            study.set_user_attr("point", point.label)
            study.set_user_attr("values", {k: _jsonable(v) for k, v in point.values.items()})
        return study

    def _trials(self, point: Point) -> list[FrozenTrial]:
        return self.studies[point.label].get_trials(deepcopy=False)

    # -------------------------------------------------------------- budget
    def _needs(self, point: Point, trials: list[FrozenTrial]) -> str | None:
        """'tune' or 'confirm' if the point needs another trial now, else None."""
        budget = self.cfg.budget
        tune = [
            t
            for t in trials
            if t.user_attrs.get("kind", "tune") == "tune" and t.state != TrialState.WAITING
        ]
        if len(tune) < budget.trials_per_point:
            return "tune"
        if budget.confirm_seeds <= 0 or any(t.state not in FINAL for t in tune):
            return None
        confirm = [
            t
            for t in trials
            if t.user_attrs.get("kind") == "confirm" and t.state != TrialState.WAITING
        ]
        if len(confirm) < budget.confirm_seeds and self._best_tune(tune) is not None:
            return "confirm"
        return None

    @staticmethod
    def _best_tune(tune: list[FrozenTrial]) -> FrozenTrial | None:
        done = [
            t
            for t in tune
            if t.state == TrialState.COMPLETE and t.user_attrs.get("state") != "diverged"
        ]
        return min(done, key=lambda t: (t.value, t.number)) if done else None

    def _pick_point(self) -> tuple[Point, str] | None:
        """The point with the fewest trials that still needs one (ties: grid order)."""
        best: tuple[int, int, Point, str] | None = None
        for point in self.space.points:
            trials = self._trials(point)
            kind = self._needs(point, trials)
            if kind is None:
                continue
            key = (len([t for t in trials if t.state != TrialState.WAITING]), point.index)
            if best is None or key < best[:2]:
                best = (*key, point, kind)
        return (best[2], best[3]) if best else None

    def _finished(self) -> bool:
        if self.running:
            return False
        for point in self.space.points:
            trials = self._trials(point)
            if (
                any(t.state == TrialState.RUNNING for t in trials)
                or self._needs(point, trials) is not None
            ):
                return False
        return True

    # ------------------------------------------------------------ submit
    def _ask(self, point: Point, kind: str) -> Prepared:
        study = self.studies[point.label]
        dists = self.space.distributions(point.label)
        trials = self._trials(point)
        if kind == "confirm":
            tune = [t for t in trials if t.user_attrs.get("kind", "tune") == "tune"]
            best = self._best_tune(tune)
            k = 1 + len([t for t in trials if t.user_attrs.get("kind") == "confirm"])
            study.enqueue_trial(
                best.params, user_attrs={"kind": "confirm", "seed": self.cfg.seed + k}
            )
        number = len(trials)
        per_ask = self.cfg.sampler.name not in ("qmc", "grid")
        seed = self.cfg.sampler.seed if self.cfg.sampler.seed is not None else self.cfg.seed
        sampler_seed = (
            derived_seed(seed, point.label, number) if per_ask else derived_seed(seed, point.label)
        )
        study.sampler = make_sampler(
            self.cfg.sampler, sampler_seed, self.cfg.budget.trials_per_point, dists
        )
        trial = study.ask(fixed_distributions=dists)
        if kind == "tune":
            trial.set_user_attr("kind", "tune")
            trial.set_user_attr("seed", self.cfg.seed)
        return self._prepare(point, study.get_trials(deepcopy=False)[trial.number], attempt=1)

    def _submit(self, point: Point, trial: FrozenTrial, attempt: int) -> None:
        self._launch([self._prepare(point, trial, attempt)])

    def _prepare(self, point: Point, trial: FrozenTrial, attempt: int) -> Prepared:
        """Write a trial's folder (config, trial.json, the orchestrator's heartbeat, which
        keeps other orchestrators off it) and its job's spec; :meth:`_launch` submits it."""
        folder = trial_dir(self.run_dir, point.label, trial.number)
        nuisance = self.space.trainer_values(point.label, trial.params)
        seed = int(trial.user_attrs.get("seed", self.cfg.seed))
        tree = trial_config(self.cfg, self.space, point, nuisance, seed, folder)
        write_config_yaml(folder, tree)
        previous = read_json(folder / "trial.json") or {}
        failures = previous.get("failures")
        record = {
            "trial": f"{point.label}/{trial.number}",
            "point": point.label,
            "number": trial.number,
            "kind": trial.user_attrs.get("kind", "tune"),
            "seed": seed,
            "scientific": {k: _jsonable(v) for k, v in point.values.items()},
            "nuisance": {k: _jsonable(v) for k, v in nuisance.items()},
            "fixed": {a: _jsonable(v) for a, (_, v) in self.space.fixed.items()},
            "state": "running",
            "objective": None,
            "attempts": attempt,
            "orchestrator": self.owner,
            "started": previous.get("started", now_iso()),
            "ended": None,
        }
        if failures:
            record["failures"] = failures  # errors of earlier attempts (retried)
        write_trial_json(folder, record)
        spec = self._spec(point, trial, folder, tree, attempt, record["kind"])
        heartbeat.write(folder / "heartbeat.orch", owner=self.owner)
        return Prepared(point, trial._trial_id, trial.number, folder, spec, record)

    def _launch(self, batch: list[Prepared]) -> None:
        """Submit prepared trials together (on SLURM, two or more as one job array)."""
        requests = [
            JobRequest(p.folder, TrialJob(), (p.spec,), name=f"{self.cfg.name}:{p.spec.trial}")
            for p in batch
        ]
        handles = self.launcher.submit_together(
            requests, self.run_dir / "jobs", name=f"{self.cfg.name}:{len(batch)} trials"
        )
        for p, handle in zip(batch, handles, strict=True):
            p.record["job_id"] = handle.job_id
            if handle.files != p.folder / "logs":
                p.record["job_files"] = str(handle.files.resolve())
            write_trial_json(p.folder, p.record)
            self.running[p.trial_id] = Running(
                p.point, p.trial_id, p.number, p.folder, p.spec, handle, p.record
            )

    def _spec(
        self,
        point: Point,
        trial: FrozenTrial,
        folder: Path,
        tree: dict[str, Any],
        attempt: int,
        kind: str,
    ) -> TrialSpec:
        return TrialSpec(
            trial=f"{point.label}/{trial.number}",
            study_name=self.studies[point.label].study_name,
            trial_id=trial._trial_id,
            number=trial.number,
            trial_dir=str(folder.resolve()),
            config=tree,
            storage=self.storage_spec,
            trainer=self.cfg.trainer,
            pruner=asdict(self.cfg.pruner) if self.cfg.pruner.name != "none" else None,
            horizon=self.horizons[point.label],
            attempt=attempt,
            # Confirm seeds re-run the best values to measure seed spread: never pruned.
            prune=kind == "tune",
        )

    # ------------------------------------------------------------- finish
    def _reap(self) -> None:
        for trial_id, run in list(self.running.items()):
            if not run.handle.done():
                continue
            del self.running[trial_id]
            ok, result = run.handle.outcome()
            status = result if ok and isinstance(result, dict) else None
            if status is not None and status.get("state") in FINISHED:
                self._finalize(run.point, trial_id, run.folder, status, run.record)
                continue
            error = (
                f"{type(result).__name__}: {result}" if not ok else f"unexpected result {result!r}"
            )
            if run.record["attempts"] <= self.cfg.retries:
                # Kept for the user: why this trial needed another job.
                run.record["failures"] = [*run.record.get("failures", []), error[:2000]]
                write_trial_json(run.folder, run.record)
                trial = self.storage.get_trial(trial_id)
                self._submit(run.point, trial, attempt=run.record["attempts"] + 1)
            else:
                self._finalize(run.point, trial_id, run.folder, None, run.record, error=error)

    def _finalize(
        self,
        point: Point,
        trial_id: int,
        folder: Path,
        status: dict[str, Any] | None,
        record: dict[str, Any],
        error: str | None = None,
    ) -> None:
        """Tell Optuna (once) and record the trial's true end."""
        study = self.studies[point.label]
        state = status["state"] if status else "failed"
        value = None
        with self.lock:
            frozen = self.storage.get_trial(trial_id)
            if frozen.state == TrialState.RUNNING:
                self.storage.set_trial_user_attr(trial_id, "state", state)
                if state == "pruned":
                    study.tell(frozen.number, state=TrialState.PRUNED)
                elif state == "failed":
                    study.tell(frozen.number, state=TrialState.FAIL)
                else:
                    value = objective_value(self.cfg.objective.kind, status, _initial_loss(folder))
                    study.tell(frozen.number, value)
                self.told += 1
            else:  # told already (by another orchestrator, or one that died): keep its verdict
                value = frozen.value
        record.update(state=state, objective=value, ended=now_iso())
        if error:
            record["error"] = error[:2000]
        write_trial_json(folder, record)
        if not self.cfg.keep_checkpoints:
            shutil.rmtree(folder / "checkpoints", ignore_errors=True)
        (folder / "heartbeat.orch").unlink(missing_ok=True)

    # ------------------------------------------------------------- adopt
    def _adopt(self) -> None:
        """Handle RUNNING trials that no job of ours runs (left by a dead orchestrator, or
        run by another live one)."""
        timeout = self.cfg.heartbeat_timeout_s
        with self.lock:
            for point in self.space.points:
                for trial in self._trials(point):
                    if trial.state != TrialState.RUNNING or trial._trial_id in self.running:
                        continue
                    folder = trial_dir(self.run_dir, point.label, trial.number)
                    status = read_json(folder / "status.json")
                    record = read_json(folder / "trial.json") or {"attempts": 0}
                    if status and status.get("state") in FINISHED:
                        record = self._record_for(point, trial, record)
                        self._finalize(point, trial._trial_id, folder, status, record)
                    elif heartbeat.fresh(heartbeat.read(folder / "heartbeat.orch"), timeout):
                        continue  # its orchestrator is alive and waits for it
                    elif self._take_over(point, trial, folder, record):
                        continue
                    elif not heartbeat.trial_alive(folder, timeout):
                        # Stopped on request (`sweep stop`, Ctrl-C): not a failed attempt.
                        attempts = int(record.get("attempts", 0))
                        again = record.get("state") == "stopped" and attempts > 0
                        self._submit(point, trial, attempt=attempts if again else attempts + 1)

    def _take_over(
        self, point: Point, trial: FrozenTrial, folder: Path, record: dict[str, Any]
    ) -> bool:
        """Own the SLURM job of a trial whose orchestrator died, if it is still queued or
        running (so it is neither waited on blindly nor run twice)."""
        job_id = record.get("job_id")
        if self.cfg.launcher.name != "slurm" or not job_id or "trial" not in record:
            return False
        files = record.get("job_files")
        handle = self.launcher.attach(folder, str(job_id), Path(files) if files else None)
        if handle is None:
            return False
        heartbeat.write(folder / "heartbeat.orch", owner=self.owner)
        # The job runs with the spec it was submitted with; this one is for bookkeeping.
        attempt = int(record.get("attempts", 1))
        spec = self._spec(point, trial, folder, {}, attempt, record.get("kind", "tune"))
        self.running[trial._trial_id] = Running(
            point, trial._trial_id, trial.number, folder, spec, handle, record
        )
        return True

    def _record_for(
        self, point: Point, trial: FrozenTrial, record: dict[str, Any]
    ) -> dict[str, Any]:
        if "trial" in record:
            return record
        nuisance = self.space.trainer_values(point.label, trial.params)
        return {
            "trial": f"{point.label}/{trial.number}",
            "point": point.label,
            "number": trial.number,
            "kind": trial.user_attrs.get("kind", "tune"),
            "seed": int(trial.user_attrs.get("seed", self.cfg.seed)),
            "scientific": {k: _jsonable(v) for k, v in point.values.items()},
            "nuisance": {k: _jsonable(v) for k, v in nuisance.items()},
            "fixed": {a: _jsonable(v) for a, (_, v) in self.space.fixed.items()},
            "attempts": 1,
            "started": None,
        }

    # --------------------------------------------------------------- loop
    def _beat(self) -> None:
        now = time.time()
        if now - self._last_orch_beat < min(10.0, self.cfg.heartbeat_timeout_s / 4):
            return
        self._last_orch_beat = now
        orchestrators.register(self.run_dir, self.owner, self.started)
        for run in self.running.values():
            heartbeat.write(run.folder / "heartbeat.orch", owner=self.owner)

    def stats(self) -> list[PointStats]:
        """Per-point counts, best objective and steps spent (for progress and summaries)."""
        out = []
        budget = self.cfg.budget.trials_per_point + self.cfg.budget.confirm_seeds
        for point in self.space.points:
            st = PointStats(point.label, budget, {s: 0 for s in ("running", *TRIAL_STATES)})
            for t in self._trials(point):
                if t.state == TrialState.WAITING:
                    continue
                folder = trial_dir(self.run_dir, point.label, t.number)
                if t.state == TrialState.RUNNING:
                    st.counts["running"] += 1
                    beat = heartbeat.read(folder / "heartbeat.job")
                    st.steps += int(beat.get("step", 0)) if beat else 0
                    st.consumed += int(beat.get("step", 0)) if beat else 0
                    continue
                state = {TrialState.PRUNED: "pruned", TrialState.FAIL: "failed"}.get(
                    t.state, t.user_attrs.get("state", "complete")
                )
                st.counts[state] = st.counts.get(state, 0) + 1
                status = read_json(folder / "status.json") or {}
                st.steps += int(status.get("steps_done") or 0)
                st.consumed += self.horizons[point.label]
                if (
                    t.state == TrialState.COMPLETE
                    and state != "diverged"
                    and (st.best is None or t.value < st.best)
                ):
                    st.best = t.value
            out.append(st)
        return out

    def run(self) -> list[PointStats]:
        """Run until every point has its budget of finished trials."""
        poll = self.cfg.launcher.poll_s
        orchestrators.register(self.run_dir, self.owner, self.started)
        try:
            self._adopt()
            while True:
                if orchestrators.stop_requested(self.run_dir, self.started):
                    self._stop()
                    break
                self.launcher.refresh()
                self._reap()
                self._adopt()
                # On SLURM, trials asked in one pass are submitted together, as one job array.
                together = self.cfg.launcher.name == "slurm"
                batch: list[Prepared] = []
                try:
                    while len(self.running) + len(batch) < self.cfg.parallelism:
                        with self.lock:
                            choice = self._pick_point()
                            if choice is None:
                                break
                            batch.append(self._ask(*choice))
                        if not together:
                            self._launch(batch)
                            batch = []
                            self._reap()  # inline jobs are done already
                    self._launch(batch)
                except BaseException:
                    self._release(batch)
                    raise
                if self.progress is not None:
                    self.progress(self.stats())
                if self._finished():
                    break
                self._beat()
                time.sleep(poll if self.running else min(poll, 1.0) * 2)
        except KeyboardInterrupt:
            self._interrupted()
            raise
        finally:
            orchestrators.unregister(self.run_dir, self.owner)
            self.lock.close()
        return self.stats()

    def _release(self, batch: list[Prepared]) -> None:
        """Asked but never submitted (Ctrl-C or an error in between): mark them stopped and
        drop our heartbeat, so the next run submits them at once as the same attempt."""
        for p in batch:
            if "job_id" not in p.record:
                p.record["state"] = "stopped"
                write_trial_json(p.folder, p.record)
                (p.folder / "heartbeat.orch").unlink(missing_ok=True)

    def _mark_stopped(self, run: Running) -> None:
        run.record["state"] = "stopped"
        write_trial_json(run.folder, run.record)
        (run.folder / "heartbeat.orch").unlink(missing_ok=True)

    def _stop(self) -> None:
        """`sweep stop`: submit nothing more; every running trial job checkpoints at its
        current step and ends (SIGTERM, see sweeps.job). Trials stay open in Optuna and
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
            if ok and isinstance(result, dict) and result.get("state") in FINISHED:
                self._finalize(run.point, trial_id, run.folder, result, run.record)
            else:
                self._mark_stopped(run)

    def _interrupted(self) -> None:
        """Ctrl-C: local jobs got the signal too and save their checkpoints; give them a
        moment, then stop what is left. Trials stay RUNNING and resume on the next run;
        SLURM jobs go on and are waited for (or taken over) by the next run."""
        deadline = time.time() + 15
        local = self.cfg.launcher.name == "local"
        while (
            local
            and time.time() < deadline
            and any(not r.handle.done() for r in self.running.values())
        ):
            time.sleep(0.2)
        for run in self.running.values():
            if local:
                run.handle.cancel()
                self._mark_stopped(run)
            else:
                (run.folder / "heartbeat.orch").unlink(missing_ok=True)


def _initial_loss(folder: Path) -> float | None:
    """The step-0 eval loss of a trial, from its metrics."""
    try:
        with open(folder / "metrics.jsonl") as f:
            first = f.readline()
    except OSError:
        return None
    record = read_json_line(first)
    value = record.get("eval_loss") if record else None
    return float(value) if value is not None else None


def read_json_line(line: str) -> dict[str, Any] | None:
    """One JSONL record, or None."""
    try:
        return json.loads(line)
    except ValueError:
        return None


def _jsonable(value: Any) -> Any:
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    return str(value)
