"""A tiny client for command trainers written in Python: report metrics, hear the pruner.

Standard library only, and free of imports from the rest of stepscale, so a training
script in another environment can use it (or a copy of this one file). In a trial it reads
the ``STEPSCALE_*`` environment the orchestrator sets (docs/trainers.md); outside a study
it writes into the working directory, so the same script runs by hand.

    from stepscale import client

    cfg = client.config()                       # the trial's config (config.json)
    start = my_checkpoint_step() or 0
    client.begin(start)                         # forget records after a resumed step
    for step in range(start + 1, client.max_steps(default=1000) + 1):
        ...
        if step % 50 == 0 and not client.report(step, eval_loss=loss):
            break                               # pruned (or asked to stop): end early
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

# The names of `stepscale.rundir` and `stepscale.trainer` (a test keeps them equal).
METRICS_JSONL = "metrics.jsonl"
STATUS_JSON = "status.json"
CONFIG_JSON = "config.json"
CONTROL_JSON = "control.json"
ENV_TRIAL_DIR = "STEPSCALE_TRIAL_DIR"
ENV_CONFIG = "STEPSCALE_CONFIG"
ENV_MAX_STEPS = "STEPSCALE_MAX_STEPS"
ENV_TARGET_LOSS = "STEPSCALE_TARGET_LOSS"
ENV_SEED = "STEPSCALE_SEED"
ENV_RESUME_STEP = "STEPSCALE_RESUME_STEP"
ENV_CONTROL = "STEPSCALE_CONTROL"


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: a non-finite float is written as null (a diverged value)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class Trial:
    """One trial seen from inside its trainer program."""

    def __init__(self, folder: str | os.PathLike[str] | None = None) -> None:
        env = os.environ
        self.folder = Path(folder or env.get(ENV_TRIAL_DIR) or ".")
        self.metrics_path = self.folder / METRICS_JSONL
        self.control_path = Path(env.get(ENV_CONTROL) or self.folder / CONTROL_JSON)
        self.action: str | None = None  # "prune" or "stop" once the orchestrator asked

    def config(self) -> dict[str, Any]:
        """The trial's resolved config (``config.json``; empty outside a study)."""
        path = Path(os.environ.get(ENV_CONFIG) or self.folder / CONFIG_JSON)
        return json.loads(path.read_text()) if path.exists() else {}

    def begin(self, step: int = 0) -> None:
        """Start (``step`` = 0) or resume after ``step``: records after it are dropped."""
        if step <= 0:
            self.metrics_path.unlink(missing_ok=True)
            return
        if not self.metrics_path.exists():
            return
        kept = []
        for line in self.metrics_path.read_text().splitlines():
            try:
                if json.loads(line).get("step", 0) <= step:
                    kept.append(line + "\n")
            except (ValueError, AttributeError):
                continue  # a line cut short by a kill
        tmp = self.metrics_path.with_name(METRICS_JSONL + ".tmp")
        tmp.write_text("".join(kept))
        os.replace(tmp, self.metrics_path)

    def report(self, step: int, **metrics: Any) -> bool:
        """Append one record; False when the trainer should stop now (pruned or asked)."""
        record = {"step": int(step), **{k: _clean(v) for k, v in metrics.items()}}
        with open(self.metrics_path, "a") as f:
            f.write(json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n")
        return self.should_continue()

    def should_continue(self) -> bool:
        """Whether the orchestrator lets the trial go on (it writes the control file)."""
        if self.action is None and self.control_path.exists():
            try:
                self.action = json.loads(self.control_path.read_text()).get("action")
            except ValueError:  # being written; read again at the next report
                return True
        return self.action is None

    def finish(self, state: str | None = None, steps_done: int | None = None, **extra: Any) -> None:
        """Optionally write the final status yourself (else the orchestrator derives it:
        ``pruned`` when it asked to prune, else ``complete``, at the last reported step)."""
        status = {"state": state or ("pruned" if self.action == "prune" else "complete")}
        if steps_done is not None:
            status["steps_done"] = steps_done
        status.update({k: _clean(v) for k, v in extra.items()})
        tmp = self.folder / (STATUS_JSON + ".tmp")
        tmp.write_text(json.dumps(status, allow_nan=False))
        os.replace(tmp, self.folder / STATUS_JSON)


_trial: Trial | None = None


def trial() -> Trial:
    """The trial of this process (made on first use)."""
    global _trial
    if _trial is None:
        _trial = Trial()
    return _trial


def config() -> dict[str, Any]:
    """The trial's resolved config (see `Trial.config`)."""
    return trial().config()


def begin(step: int = 0) -> None:
    """Start or resume after ``step`` (see `Trial.begin`)."""
    trial().begin(step)


def report(step: int, **metrics: Any) -> bool:
    """Append one record; False when the trainer should stop (see `Trial.report`)."""
    return trial().report(step, **metrics)


def finish(state: str | None = None, steps_done: int | None = None, **extra: Any) -> None:
    """Write the final status (optional; see `Trial.finish`)."""
    trial().finish(state, steps_done, **extra)


def _env_number(name: str, kind: type, default: Any) -> Any:
    value = os.environ.get(name)
    return kind(value) if value not in (None, "") else default


def max_steps(default: int | None = None) -> int | None:
    """The trial's horizon in steps (``default`` outside a study)."""
    return _env_number(ENV_MAX_STEPS, int, default)


def target_loss(default: float | None = None) -> float | None:
    """The study's target eval loss, if it has one."""
    return _env_number(ENV_TARGET_LOSS, float, default)


def seed(default: int = 0) -> int:
    """The trial's seed."""
    return _env_number(ENV_SEED, int, default)


def resume_step() -> int:
    """The last step already reported by an earlier job of this trial (0: none)."""
    return _env_number(ENV_RESUME_STEP, int, 0)
