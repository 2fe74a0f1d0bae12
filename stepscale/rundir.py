"""The run directory: the one contract between whoever writes a study and whoever reads it.

The orchestrator (`stepscale.sweeps`), the trainer (`stepscale.models` or a user's own) and
the analysis (`stepscale.analysis`) all take the names of files, the keys of records and
the meaning of a trial's state from here; docs/run-dir.md describes the same layout for
people. This module imports nothing of the project, so every side may import it.

```
RUN_DIR/
  config.yaml  space.json  study.json  run.json  study.journal  stop.json
  adaptive.json  transfer.json
  orchestrators/  orchestrator/  jobs/
  branches/<base trial>/  branch.json  study.json  trials/<branch label>/0/ …
  aliases/<point alias> -> ../trials/<point label>   (what {trial_dir} gives a command)
  trials/<point label>/<n>/
      config.yaml  config.json  trial.json  status.json  metrics.jsonl  events.jsonl  control.json
      heartbeat.job  heartbeat.orch  checkpoints/  logs/
  report/
```
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

# ------------------------------------------------------------------ file and folder names

CONFIG_YAML = "config.yaml"  # the composed study config (run dir) or trainer config (trial)
CONFIG_JSON = "config.json"  # the trial's trainer config as JSON (for programs in any language)
CONTROL_JSON = "control.json"  # the orchestrator's request to a command trainer (prune, stop)
SPACE_JSON = "space.json"  # the search space, stepscale.search_space/v1
STUDY_JSON = "study.json"  # points in order, their Optuna study names, the study identity
RUN_JSON = "run.json"  # provenance of the runs of the orchestrator (command, versions, git)
JOURNAL = "study.journal"  # Optuna's journal file (the default storage)
SQLITE_DB = "study.db"  # the SQLite file of storage=sqlite without a URL
TRIALS_DIR = "trials"
REPORT_DIR = "report"
# `sweep branch`: RUN_DIR/branches/<base trial>/ holds a small run dir of its own (trials/,
# study.json …) and BRANCH_JSON, the record of the measurement.
BRANCHES_DIR = "branches"
BRANCH_JSON = "branch.json"
JOBS_DIR = "jobs"  # submitit's files of SLURM job arrays
ORCHESTRATOR_DIR = "orchestrator"  # the --detach orchestrator job's files (JOB_JSON)
ORCHESTRATORS_DIR = "orchestrators"  # one heartbeat file per live orchestrator
RUN_LOCK = ".orchestrator.lock"  # held while an orchestrator opens or changes the study
STOP_JSON = "stop.json"  # written by `sweep stop`
ADAPTIVE_JSON = "adaptive.json"  # adaptive batch sizes: each point added and why
TRANSFER_JSON = "transfer.json"  # transfer between points: each point's predicted start
JOB_JSON = "job.json"

TRIAL_JSON = "trial.json"  # the orchestrator's record of a trial (TRIAL_KEYS)
STATUS_JSON = "status.json"  # the trainer's status (STATUS_KEYS)
METRICS_JSONL = "metrics.jsonl"  # one record per logged step (METRIC_KEYS)
EVENTS_JSONL = "events.jsonl"  # the job's starts, resumes and stops (EVENT_KEYS)
JOB_HEARTBEAT = "heartbeat.job"  # refreshed by a live job
ORCH_HEARTBEAT = "heartbeat.orch"  # refreshed by the orchestrator that holds the trial
# A command trainer's spike restarts, kept by its job (sweeps/job/command_restarts.py)
SPIKE_RESTARTS_JSON = "spike_restarts.json"
CHECKPOINTS_DIR = "checkpoints"
LOGS_DIR = "logs"

# Files whose presence makes a folder under trials/ a trial.
TRIAL_FILES = (TRIAL_JSON, STATUS_JSON, METRICS_JSONL)


def trial_dir(run_dir: Path, label: str, number: int) -> Path:
    """``RUN_DIR/trials/<point label>/<n>/``."""
    return Path(run_dir) / TRIALS_DIR / label / str(number)


# A trial's safe path: ``RUN_DIR/aliases/<point alias>/<n>``, where ``aliases/<point alias>``
# is a relative symlink to ``../trials/<point label>``. The placeholder ``{trial_dir}`` of a
# command trainer gives this path, so that a script that splits ``--key=value`` on every
# ``=`` (or a list on ``,``) can take it; the trial's id and its folder stay as they are.
ALIASES_DIR = "aliases"
# The characters a path given to a script may hold: no ``=``, ``,``, spaces, quotes or
# anything a shell or a naive parser treats specially.
SAFE_PATH_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./+-")


def point_alias(label: str) -> str:
    """The point label as a safe folder name: ``=`` → ``-``, ``,`` → ``+``
    (``batch_size=32,lr=0.001`` → ``batch_size-32+lr-0.001``). The labels of a study share
    their parameter names in order and never hold ``+``, so two of them give one alias only
    when a value itself holds ``=`` or ``,`` (``sweep run`` refuses such a study)."""
    return label.replace("=", "-").replace(",", "+")


def trial_alias(run_dir: Path, label: str, number: int) -> Path:
    """``RUN_DIR/aliases/<point alias>/<n>/``: the trial's folder by a path without ``=``."""
    return Path(run_dir) / ALIASES_DIR / point_alias(label) / str(number)


def unsafe_path_chars(path: str) -> list[str]:
    """The characters of ``path`` outside `SAFE_PATH_CHARS`, each once, in order."""
    return list(dict.fromkeys(c for c in path if c not in SAFE_PATH_CHARS))


def is_trial_dir(path: Path) -> bool:
    """Whether a folder under ``trials/<point>/`` holds a trial (any of its files)."""
    return path.is_dir() and any((path / name).exists() for name in TRIAL_FILES)


# The built-in trainer's key of the global batch size (in sequences or examples): a study's
# batch axis is its scientific parameter at this path.
BATCH_PATH = "data.global_batch"

# What a parameter measures, for the analysis (space.json's ``quantity``): the batch size,
# the learning rate, the sequence length; and the two axes of a ladder of studies
# (analysis.ladder): the model's size (its parameter count N is the trainer's ``params``,
# recorded per trial) and the training horizon in tokens D. The built-in trainer's keys
# measure these without saying so; a user trainer's parameters say it.
BATCH_SIZE, LEARNING_RATE, SEQ_LEN = "batch_size", "learning_rate", "seq_len"
MODEL_SIZE, HORIZON_TOKENS = "model_size", "horizon_tokens"
QUANTITIES = (BATCH_SIZE, LEARNING_RATE, SEQ_LEN, MODEL_SIZE, HORIZON_TOKENS)
BUILTIN_QUANTITIES = {
    BATCH_PATH: BATCH_SIZE,
    "optimizer.lr": LEARNING_RATE,
    "data.seq_len": SEQ_LEN,
    "model.size": MODEL_SIZE,
    "model.d_model": MODEL_SIZE,
    "model.n_layers": MODEL_SIZE,
    "train.max_tokens": HORIZON_TOKENS,
}


def quantity_of(path: str, stated: str | None) -> str | None:
    """What a parameter at ``path`` measures: the ``quantity`` it states, else the built-in
    trainer's meaning of ``path`` (None: nothing the analysis needs to know)."""
    return stated or BUILTIN_QUANTITIES.get(path)


# The unit of the batch axis is the ``unit`` of the parameter at BATCH_PATH (or stating
# ``quantity: batch_size``) in space.json (``sequences``, ``examples``, ``tokens`` …). A
# study that does not state it gets its trainer's: the built-in trainer's data source says
# whether its examples are sequences; a user's trainer counts examples.
SEQUENCES = "sequences"
EXAMPLES = "examples"


def unit_of_counts(per_step: Iterable[tuple[float, float]]) -> str:
    """The batch unit of a run dir whose space.json states none (written before it did),
    from its trials' ``(tokens_per_step, examples_per_step)``: ``sequences`` when a step
    holds more tokens than examples (an example is a sequence of several tokens),
    ``examples`` otherwise (also when no trial says)."""
    for tokens, examples in per_step:
        if math.isfinite(tokens) and math.isfinite(examples) and 0 < examples < tokens:
            return SEQUENCES
    return EXAMPLES


# ----------------------------------------------------------------------------- states

RUNNING = "running"
STOPPED = "stopped"  # left by a stopped orchestrator or a signalled job; resumed next run
QUEUED = "queued"  # asked, but its job could not be submitted (sbatch failed); submitted next run
COMPLETE = "complete"
PRUNED = "pruned"
DIVERGED = "diverged"
FAILED = "failed"
# A trainer status that ends a trial.
TRAINER_FINAL_STATES = (COMPLETE, PRUNED, DIVERGED)
# A trial.json state that ends a trial (budgets count these).
FINAL_STATES = frozenset({*TRAINER_FINAL_STATES, FAILED})
STATES = (RUNNING, STOPPED, QUEUED, *TRAINER_FINAL_STATES, FAILED)
# status.json's ``ended_by`` (with ``ended_by_step``, ``progress_at_end``) of a pruned trial
# the no-progress rule stopped (sweeps.job.no_progress): it could not learn
NO_PROGRESS = "no_progress"

# ------------------------------------------------------------------- keys of the records

# metrics.jsonl: ``step`` (optimizer updates done) plus any of these; a trainer may log
# others, which the analysis keeps as they are.
METRIC_KEYS = (
    "train_loss",
    "eval_loss",
    "lr",
    "grad_norm",
    "update_norm",
    "param_norm",
    "tokens",
    "examples",
    "wall_s",
    "steps_per_s",
    "noise_scale",
    "step_batch",  # the global batch of the updates that led to this step (a ramp's changes)
)
# Metrics that say how much a step consumed: the analysis turns them into coordinates.
PER_STEP_COUNTS = {"tokens": "tokens_per_step", "examples": "examples_per_step"}

# status.json: ``state`` and ``steps_done`` are required, the rest optional.
STATUS_REQUIRED = ("state", "steps_done")
STATUS_KEYS = (
    *STATUS_REQUIRED,
    "reason",
    "resumed_from_step",
    "horizon_steps",
    "steps_to_target",
    "steps_to_target_interp",
    "target_loss",
    "best_eval_loss",
    "initial_eval_loss",  # the step-0 evaluation (the "has it trained?" verdict)
    "final_eval_loss",
    "diverged_step",
    "params",
    "params_nonembedding",  # N of the scaling laws: the parameters outside the embeddings
    "tokens_done",
    "examples_done",
    "flops_done",
    "wall_s",
    # the trainer's plan, beside the config (models.plan.describe)
    "warmup_steps",
    "global_batch",
    "devices",
    "sharding",  # replicated | fsdp (how the state is laid out over the devices)
    "per_device_batch",
    "microbatch",
    "accum_steps",
    "tokens_per_step",
    "examples_per_step",
    "flops_per_step",
    "loss_floor",
    "baseline_loss",  # the eval loss of the trivial baseline (unigram, uniform, the start)
    "baseline",  # what that baseline is
    "tokenizer",  # text sources: bytes | chars
    "vocabulary",  # chars: the characters in id order
    "vocab_size",
    "state_bytes_per_device",  # parameters + optimizer state (+ EMA) on one device
    "resharded_from",  # the layout of the checkpoint a resume read, when it was another
    "rampup_steps",  # the first step at the final batch (0: no batch ramp)
    "batch_stages",  # a ramp's [[first step, global batch], …]
    "loss_spikes",  # spikes of the training loss (docs/run-dir.md has the rule)
    "grad_norm_spikes",  # spikes of the gradient norm
    "loss_spike_steps",  # the first step of each (the first 100)
    "grad_norm_spike_steps",
    "init_from",  # the checkpoint of another run this one started from (a branch)
    # train.on_spike (models/restarts.py), under a restart policy only
    "spike_restarts",  # restarts done (null: no restart policy)
    "batches_skipped",  # batches of the data stream they skipped, in all
    "steps_redone",  # steps trained on paths restarts abandoned (null: no policy)
    "steps_spent",  # steps_done + steps_redone: the optimizer steps computed
    "restarts",  # one record per restart (the first 100), as in events.jsonl
)
# Status fields the analysis always has as coordinates (NaN where a trial lacks them).
STATUS_COORDS = (
    "steps_done",
    "steps_to_target",
    "steps_to_target_interp",
    "best_eval_loss",
    "final_eval_loss",
    "tokens_per_step",
    "examples_per_step",
    "flops_per_step",
    "wall_s",
    "loss_spikes",  # instability per trial (NaN for a trainer that does not count them)
    "grad_norm_spikes",
    "spike_restarts",  # train.on_spike's restarts (NaN: no restart policy)
    "steps_redone",  # the steps they abandoned: compute spent, not progress
)

# trial.json, written by the orchestrator.
TRIAL_KEYS = (
    "trial",  # "<point label>/<n>"
    "point",
    "number",
    "kind",  # tune | confirm
    "seed",
    "scientific",  # alias → value
    "nuisance",
    "fixed",
    "state",  # STATES
    "objective",  # what Optuna was told
    "attempts",
    "orchestrator",  # the owner id of the orchestrator that ran it
    "started",
    "ended",
    "job_id",
    "job_index",  # the trial's place in a job that runs several (launcher.trials_per_job)
    "job_files",
    "failures",  # errors of earlier attempts (retried)
    "interruptions",  # jobs stopped from outside (sweep stop, Ctrl-C, orchestrator killed)
    "error",  # the error of the last attempt of a failed trial
)
# The per-trial fields of trial.json the analysis keeps as coordinates.
TRIAL_COORDS = (
    "point",
    "number",
    "kind",
    "seed",
    "state",
    "running",  # derived: no final state yet
    "objective",
    "attempts",
    "started",
    "ended",
)

# events.jsonl
EVENT_KEYS = (
    "event",
    "step",
    "time",
    "host",
    "job_id",
    "signal",
    "error",
    "checkpoint",
    "value",  # a spike's value
    "median",  # the median of the window it was compared with
    # spike_restart (step: the spike's)
    "restart",  # its number, from 1
    "trigger",  # loss_spike | non_finite_loss
    "from_step",  # the checkpoint it went back to
    "batches_skipped",  # batches it skipped
    "skipped_total",  # batches skipped by all restarts so far
    "steps_redone",  # steps it abandoned (from_step to where the spike was found)
    "processes",  # leftovers_killed: how many processes outlived the trial's program
    "commands",  # leftovers_killed: the first few of their command lines (redacted)
    "by",  # leftovers_killed: "job", or "launcher" when the job itself had been killed
    "silent_s",  # inactive: how long the program had given no record
)
# Events the built-in trainer writes for instabilities (models/spikes.py).
LOSS_SPIKE = "loss_spike"
GRAD_NORM_SPIKE = "grad_norm_spike"
# A restart of train.on_spike (models/restarts.py).
SPIKE_RESTART = "spike_restart"

# ---------------------------------------------------------------------- the crossing


def interpolated_crossing(s0: float, l0: float, s1: float, l1: float, target: float) -> float:
    """Step at which an eval-loss curve crosses ``target`` between the evaluation at ``s0``
    (loss ``l0`` ≥ target) and the first one below it at ``s1`` (loss ``l1`` < target).

    log(loss) is taken as linear in step (loss itself when a loss is not positive); the
    result is clamped to [s0, s1]. The trainer's ``steps_to_target_interp`` and the
    analysis's crossings at other targets both come from this function.
    """
    if l0 == l1:
        return float(s1)
    if l0 > 0 and l1 > 0 and target > 0:
        frac = (math.log(l0) - math.log(target)) / (math.log(l0) - math.log(l1))
    else:
        frac = (l0 - target) / (l0 - l1)
    return s0 + min(max(frac, 0.0), 1.0) * (s1 - s0)
