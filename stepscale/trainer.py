"""The trainer interface: what any training code needs to take part in a stepscale study.

This module is the one door between the orchestrator and a trainer, whatever it is — the
built-in trainer (`stepscale.models.train`), a user's Python function, or a command line in
any language (docs/trainers.md). It imports nothing heavy (no JAX, no Optuna, no Hydra).

A **Python function trainer** is called as ``function(config, reporter, trial_dir)``:

- ``config``: the trainer's own config tree (an OmegaConf ``DictConfig``), with the trial's
  scientific, nuisance and fixed values written at their ``path``s;
- ``reporter``: a `Reporter`. Call ``begin(step)`` once (``step`` > 0 when resuming from a
  checkpoint), ``report(step, metrics)`` at logged steps — at least ``eval_loss`` at the
  steps where the model was evaluated — and obey the `Action` it returns;
- ``trial_dir``: the trial's folder, the same for every attempt of the trial: keep
  checkpoints there (under ``checkpoints/``) to resume after a crash, a requeue or a kill.

It returns its final **status**, a dict with at least ``state`` (`COMPLETE`, `PRUNED` or
`DIVERGED`) and ``steps_done``; every other key of `stepscale.rundir.STATUS_KEYS` is
optional, and the orchestrator fills what is missing from the reported eval losses
(steps to target, best and final eval loss).

**Stopping.** A stop request (Ctrl-C, SLURM's SIGTERM on ``scancel``/requeue/preemption, the
signal submitit sends before a time limit) reaches a Python trainer as ``KeyboardInterrupt``
raised at its current line, unless the trainer holds SIGINT itself (then its handler is
called and it should stop at its next safe point). Save a checkpoint, then let the
exception go: the trial resumes from that checkpoint in its next job. A command trainer
receives the signal itself (``SIGINT``, ``SIGTERM`` or ``SIGUSR2``, forwarded unchanged).

A trainer may come with a **validate** function, ``validate(config) -> dict | None``, which
the orchestrator calls on every point's config (at the ends of the nuisance ranges) before
anything runs. It raises (any exception; its message is shown, naming the point) when a
config cannot be trained, and may return the point's sizes: any of `PLAN_KEYS`.
"""

from __future__ import annotations

import enum
from typing import Any, Protocol

from stepscale.rundir import (
    COMPLETE,
    CONFIG_JSON,
    CONTROL_JSON,
    DIVERGED,
    PRUNED,
    STATUS_REQUIRED,
)


class Action(enum.Enum):
    """What a reporter wants the trainer to do after a record."""

    CONTINUE = "continue"
    STOP = "stop"  # end the run as complete (e.g. a budget is spent)
    PRUNE = "prune"  # end the run as pruned: return {"state": "pruned", …}


class Reporter(Protocol):
    """Receives metrics by optimizer step; ``step`` counts updates done."""

    def begin(self, step: int) -> None:
        """Called once before training; ``step`` > 0 when resuming from a checkpoint, and
        records after it must be forgotten (they will be produced again)."""
        ...

    def report(self, step: int, metrics: dict[str, Any]) -> Action:
        """Take one record and say whether training should go on."""
        ...

    # Optional: ``rewind(step)``, forget the records after ``step`` (the built-in trainer's
    # spike restart went back to it and produces them again); a reporter without it keeps
    # them.

    def finish(self, status: dict[str, Any]) -> None:
        """Take the final status (state, steps_done, steps_to_target, …)."""
        ...


# The states a trainer's final status may have, and the keys it must have.
FINAL_STATES = (COMPLETE, PRUNED, DIVERGED)
REQUIRED_STATUS_KEYS = STATUS_REQUIRED

# What a trainer's ``validate`` may return about a point (all optional): the steps a trial
# runs (else the study's ``budget.max_steps``), what one step consumes (needed for budgets
# in tokens or examples, shown in plans and reports), the model's size.
PLAN_KEYS = (
    "horizon_steps",
    "tokens_per_step",
    "examples_per_step",
    "params",
    "params_nonembedding",  # N of a ladder's laws (analysis.ladder); else params is used
    "flops_per_step",
    "loss_floor",
    "baseline_loss",  # the trivial baseline's eval loss (the "has it trained?" verdict)
)

# Environment of every trial (Python and command trainers alike).
ENV_TRIAL_DIR = "STEPSCALE_TRIAL_DIR"  # the trial folder (also the command's working dir)
ENV_CONFIG = "STEPSCALE_CONFIG"  # the trial's resolved config as JSON (config.json)
ENV_CONFIG_YAML = "STEPSCALE_CONFIG_YAML"  # the same as YAML (config.yaml)
ENV_MAX_STEPS = "STEPSCALE_MAX_STEPS"  # the trial's horizon in steps
ENV_TARGET_LOSS = "STEPSCALE_TARGET_LOSS"  # the study's target eval loss (unset: none)
ENV_SEED = "STEPSCALE_SEED"  # the trial's seed
ENV_ATTEMPT = "STEPSCALE_ATTEMPT"  # 1 for the first job of the trial, 2… for retries
ENV_RESUME_STEP = "STEPSCALE_RESUME_STEP"  # last step already reported (0: a fresh start)
ENV_CONTROL = "STEPSCALE_CONTROL"  # control file: {"action": "prune" | "stop"} when asked


__all__ = [
    "CONFIG_JSON",
    "CONTROL_JSON",
    "FINAL_STATES",
    "PLAN_KEYS",
    "REQUIRED_STATUS_KEYS",
    "Action",
    "Reporter",
    "missing_status_keys",
]


def missing_status_keys(status: Any) -> list[str]:
    """The required status keys a trainer's return value lacks (all, if not a dict)."""
    if not isinstance(status, dict):
        return list(REQUIRED_STATUS_KEYS)
    return [k for k in REQUIRED_STATUS_KEYS if k not in status]
