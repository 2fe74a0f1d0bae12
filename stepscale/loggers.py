"""Metric loggers: copies of a run's records for TensorBoard, MLflow and W&B, written
beside ``metrics.jsonl`` (which stays the record the analysis reads).

A study or a training run chooses them with ``loggers: [tensorboard, mlflow, wandb]``.
Each logger writes into a folder of its own in the trial's folder (or the ``sweep
train`` run dir), never over the network:

- ``tensorboard/``: event files (scalars by step, the hyperparameters as TensorBoard
  hparams);
- ``mlflow/``: an MLflow file store (the tracking URI is set explicitly, so a user's
  ``MLFLOW_TRACKING_URI`` cannot send the run elsewhere), the hyperparameters as params;
- ``wandb/``: a W&B offline run (``wandb sync`` uploads it later), the hyperparameters
  as its config.

Every logger receives exactly the records ``metrics.jsonl`` receives, keyed by the
optimizer step (the x-axis is the step; ``tokens``, ``examples`` and the rest are
scalars beside it); values that are not finite numbers are skipped, as they are
``null`` in ``metrics.jsonl``. Each library is an optional extra
(``pip install 'stepscale[tensorboard]'``…); `check_loggers` names the missing one
before anything runs.
"""

from __future__ import annotations

import importlib.util
import math
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from stepscale.trainer import Action, Reporter

TENSORBOARD = "tensorboard"
MLFLOW = "mlflow"
WANDB = "wandb"
LOGGERS = (TENSORBOARD, MLFLOW, WANDB)
# the module each logger imports, and the extra that installs it
_MODULES = {TENSORBOARD: "tensorboard", MLFLOW: "mlflow", WANDB: "wandb"}


class LoggerUnavailable(ValueError):
    """A logger name that is unknown, or whose library is not installed."""


def check_loggers(names: Any, key: str = "loggers") -> list[str]:
    """The logger names of a config's ``loggers`` key, checked: `LoggerUnavailable` names
    an unknown logger (with the choices) or the extra that installs a missing library."""
    if names is None:
        return []
    if isinstance(names, str):
        names = [names]
    chosen: list[str] = []
    for name in names:
        if name not in LOGGERS:
            raise LoggerUnavailable(
                f"{key}: unknown logger {name!r}; choose any of {', '.join(LOGGERS)}"
            )
        if importlib.util.find_spec(_MODULES[name]) is None:
            raise LoggerUnavailable(
                f"{key}: the {name} logger needs its library, which is not installed: "
                f"pip install 'stepscale[{name}]'"
            )
        if name not in chosen:
            chosen.append(name)
    return chosen


@dataclass(frozen=True)
class RunInfo:
    """What names a logged run: its name (``study/point/n``, or the training run's name),
    the study it belongs to, tags (study, point, trial number) and its hyperparameters."""

    name: str
    group: str
    tags: dict[str, str] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)


def flat_params(tree: Any, prefix: str = "") -> dict[str, Any]:
    """A config tree as ``dotted.key → scalar`` (lists and None as text)."""
    out: dict[str, Any] = {}
    if isinstance(tree, dict):
        for key, value in tree.items():
            out.update(flat_params(value, f"{prefix}{key}."))
        return out
    key = prefix.rstrip(".")
    if isinstance(tree, bool | int | float | str):
        out[key] = tree
    else:
        out[key] = str(tree)
    return out


def scalars(metrics: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of a record (booleans, text and non-finite values left out)."""
    return {
        k: float(v)
        for k, v in metrics.items()
        if k != "step"
        and isinstance(v, int | float)
        and not isinstance(v, bool)
        and math.isfinite(v)
    }


class MetricLogger(Protocol):
    """One logging library's writer for one run."""

    def log(self, step: int, values: dict[str, float]) -> None:
        """Write the values of one record at ``step``."""
        ...

    def close(self) -> None:
        """Flush and close (the run ends)."""
        ...


class TensorBoardLogger:
    """Event files in ``folder`` (scalars by step; hyperparameters as hparams). Every job
    first writes TensorBoard's restart marker at ``start`` (the first step it may log), so
    readers drop what an earlier job of the run logged from there on."""

    def __init__(self, folder: Path, info: RunInfo, start: int) -> None:
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.plugins.hparams import summary_v2 as hparams
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._event, self._summary = Event, Summary
        self._writer = EventFileWriter(str(folder))
        restart = SessionLog(status=SessionLog.START)
        self._writer.add_event(Event(wall_time=time.time(), step=start, session_log=restart))
        params = {k: v for k, v in info.params.items() if isinstance(v, bool | int | float | str)}
        params.update({f"run.{k}": v for k, v in info.tags.items()})
        self._writer.add_event(
            Event(wall_time=time.time(), step=0, summary=hparams.hparams_pb(params, info.name))
        )

    def log(self, step: int, values: dict[str, float]) -> None:
        """Scalars at ``step`` (stored as float32 by the format)."""
        summary = self._summary(
            value=[self._summary.Value(tag=k, simple_value=v) for k, v in values.items()]
        )
        self._writer.add_event(self._event(wall_time=time.time(), step=step, summary=summary))

    def close(self) -> None:
        """Flush the event file."""
        self._writer.close()


def mlflow_uri(folder: Path) -> str:
    """The tracking URI of the MLflow file store in ``folder``."""
    return folder.resolve().as_uri()


class MlflowLogger:
    """A run of an MLflow file store in ``folder`` (experiment = the study). A resumed
    trial continues its run and logs only the steps after those it already holds."""

    def __init__(self, folder: Path, info: RunInfo, start: int) -> None:
        # MLflow 3 keeps the file store in maintenance mode and refuses it unless told:
        # a folder of files is what a trial folder needs (a SQLite store would spend
        # seconds creating its tables for every trial).
        os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
        os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"  # else it reports usage to a server
        from mlflow.entities import Metric, Param, RunTag
        from mlflow.tracking import MlflowClient

        self._metric = Metric
        self.client = MlflowClient(tracking_uri=mlflow_uri(folder))
        experiment = self.client.get_experiment_by_name(info.group)
        experiment_id = (
            experiment.experiment_id
            if experiment is not None
            else self.client.create_experiment(info.group)
        )
        runs = self.client.search_runs([experiment_id], f"tags.`stepscale.run` = '{info.name}'")
        self.logged = -1
        if runs:
            self.run_id = runs[0].info.run_id
            self.client.update_run(self.run_id, status="RUNNING")
            self.logged = _mlflow_last_step(self.client, self.run_id)
        else:
            tags = {
                "stepscale.run": info.name,
                **{f"stepscale.{k}": v for k, v in info.tags.items()},
            }
            run = self.client.create_run(experiment_id, run_name=info.name, tags=tags)
            self.run_id = run.info.run_id
            self.client.log_batch(
                self.run_id,
                params=[Param(k, str(v)[:6000]) for k, v in info.params.items()],
                tags=[RunTag("mlflow.runName", info.name)],
            )

    def log(self, step: int, values: dict[str, float]) -> None:
        """Metrics at ``step`` (float64)."""
        if step <= self.logged:  # a resumed trial redoing steps its run holds
            return
        ms = int(time.time() * 1000)
        metrics = [self._metric(k, v, ms, step) for k, v in values.items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def close(self) -> None:
        """End the run."""
        self.client.set_terminated(self.run_id)


def _mlflow_last_step(client: Any, run_id: str) -> int:
    run = client.get_run(run_id)
    steps = [m.step for key in run.data.metrics for m in client.get_metric_history(run_id, key)]
    return max(steps, default=-1)


class WandbLogger:
    """A W&B run in offline mode under ``folder`` (no login, no network; ``wandb sync``
    uploads it). The run's id is the same for every job of a trial; a resumed trial logs
    only the steps after those its earlier jobs logged (W&B needs increasing steps)."""

    def __init__(self, folder: Path, info: RunInfo, start: int) -> None:
        os.environ["WANDB_MODE"] = "offline"  # also for anything the trainer itself logs
        os.environ["WANDB_DIR"] = str(folder)
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb

        folder.mkdir(parents=True, exist_ok=True)
        self.marker = folder / "last_step"
        # steps an earlier job of the trial logged (W&B ignores a step below its last one)
        self.logged = int(self.marker.read_text()) if self.marker.exists() else -1
        self.last = self.logged
        run_id = (folder / "run_id").read_text().strip() if (folder / "run_id").exists() else None
        if run_id is None:
            run_id = uuid.uuid4().hex[:8]
            (folder / "run_id").write_text(run_id + "\n")
        self.run = wandb.init(
            dir=str(folder),
            project=_wandb_name(info.group),
            name=info.name,
            group=info.group,
            id=run_id,
            resume="allow",
            tags=[f"{k}={v}"[:64] for k, v in info.tags.items()],
            config=info.params,
            mode="offline",
            reinit="create_new",
            settings=wandb.Settings(
                silent=True, console="off", disable_git=True, save_code=False, x_disable_stats=True
            ),
        )

    def log(self, step: int, values: dict[str, float]) -> None:
        """A history row at ``step`` (float64)."""
        if step <= self.logged:
            return
        self.run.log(values, step=step)
        if step != self.last:
            self.last = step
            self.marker.write_text(f"{step}\n")

    def close(self) -> None:
        """Finish the run (writes its offline file to the end)."""
        self.run.finish()


def _wandb_name(name: str) -> str:
    """A W&B project name: no ``/ \\ # ? % :``, at most 128 characters."""
    return "".join("_" if c in "/\\#?%:" else c for c in name)[:128] or "stepscale"


_CLASSES: dict[str, Any] = {
    TENSORBOARD: TensorBoardLogger,
    MLFLOW: MlflowLogger,
    WANDB: WandbLogger,
}


class MetricLoggers:
    """The chosen loggers of one run: opened at the run's first step (``start``, > 0 when
    resuming), fed each record once, closed at its end. Records at or before ``start``
    of a resumed run, and a record seen twice (a command trainer's file read again), are
    not logged again."""

    def __init__(self, names: list[str], folder: Path, info: RunInfo) -> None:
        self.names = names
        self.folder = Path(folder)
        self.info = info
        self.loggers: list[MetricLogger] = []
        self.start: int | None = None
        self.last = -1

    def begin(self, step: int) -> None:
        """Open the loggers for a run starting (or resuming) at ``step``."""
        self.close()
        self.start = step
        self.last = step if step > 0 else -1
        first_new = step + 1 if step > 0 else 0  # the first step this job may log
        for name in self.names:
            self.loggers.append(_CLASSES[name](self.folder / name, self.info, first_new))

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        """Give every logger the record's finite numbers at ``step``."""
        if not self.names:
            return
        if self.start is None:
            self.begin(0)
        if step < self.last or (step == self.last and step == self.start and step > 0):
            return
        self.last = step
        values = scalars(metrics)
        if values:
            for logger in self.loggers:
                logger.log(step, values)

    def rewind(self, step: int) -> None:
        """Log the steps after ``step`` again (a spike restart redoes them)."""
        self.last = min(self.last, step)

    def close(self) -> None:
        """Close every logger (idempotent)."""
        loggers, self.loggers = self.loggers, []
        for logger in loggers:
            logger.close()

    def __enter__(self) -> MetricLoggers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LoggingReporter:
    """A reporter that passes everything to ``inner`` (e.g. `JsonlReporter`) and gives the
    loggers the same records."""

    def __init__(self, inner: Reporter, loggers: MetricLoggers) -> None:
        self.inner = inner
        self.loggers = loggers

    def begin(self, step: int) -> None:
        """Begin ``inner``, then open the loggers at ``step``."""
        self.inner.begin(step)
        self.loggers.begin(step)

    def rewind(self, step: int) -> None:
        """Rewind ``inner`` (a spike restart went back to ``step``); the loggers log the
        redone steps again."""
        rewind = getattr(self.inner, "rewind", None)
        if rewind is not None:
            rewind(step)
        self.loggers.rewind(step)

    def report(self, step: int, metrics: dict[str, Any]) -> Action:
        """Pass the record to ``inner`` and log it."""
        action = self.inner.report(step, metrics)
        self.loggers.log(step, metrics)
        return action

    def finish(self, status: dict[str, Any]) -> None:
        """Finish ``inner`` and close the loggers."""
        self.inner.finish(status)
        self.loggers.close()
