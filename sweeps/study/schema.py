"""The typed root config registered with Hydra's ConfigStore.

The root is the built-in trainer's config (`TrainerConfig`: model, data, optimizer,
schedule, train), the trainer of the trials (`trainer`, the built-in one by default) plus the study: scientific × nuisance × fixed parameters, budget,
objective, sampler, pruner, launcher (its schema per launcher: `sweeps.study.launcher_schema`)
and storage (docs/search-space.md). `sweep train` reads only
the trainer part; `sweep run` reads everything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stepscale.rundir import QUANTITIES
from stepscale.sweeps.study.launcher_configs import OrchestratorJobConfig
from stepscale.sweeps.study.launcher_schema import LauncherConfig, store_schemas
from stepscale.sweeps.trainers.builtin import TrainerConfig

SCHEMA_NAME = "stepscale_schema"
__all__ = ["QUANTITIES", "LauncherConfig", "OrchestratorJobConfig"]


@dataclass
class AdaptiveAxis:
    """Adaptive batch sizes (`stepscale.sweeps.run.adaptive`): the candidates are
    low·ratio^k up to high; the study starts with ``initial`` of them spread in log B,
    fits S(B) after each finished point and adds the batch sizes the fit needs around the
    B_crit estimate, then the candidate that narrows the B_crit interval most per example,
    until ``max_points`` or an interval within a factor ``ci_ratio``
    (`stepscale.analysis.fits.design`).
    Off (the axis has ``values``) while low and high are unset."""

    low: float | None = None
    high: float | None = None
    max_points: int = 5
    initial: int = 3
    ratio: float = 2.0
    ci_ratio: float = 2.0

    @property
    def enabled(self) -> bool:
        """Whether the axis is adaptive (low or high given)."""
        return self.low is not None or self.high is not None


@dataclass
class ScientificParam:
    """A grid axis: every combination of the axes' values is a point."""

    path: str = "???"  # trainer key, e.g. data.global_batch
    values: list[Any] = field(default_factory=list)
    # instead of values: batch sizes chosen as the study runs (a node, not None, so that an
    # override such as scientific.batch_size.adaptive.low=4 can switch it on)
    adaptive: AdaptiveAxis = field(default_factory=AdaptiveAxis)
    # e.g. sequences, examples, tokens. Unstated on the batch axis (data.global_batch),
    # space.json gets what the trainer's batch counts (the built-in trainer's data source
    # says sequences or examples; a user's trainer counts examples:
    # sweeps.study.space_doc.written_unit); the config itself is left as written.
    unit: str | None = None
    quantity: str | None = None  # batch_size | learning_rate | seq_len (QUANTITIES)
    description: str | None = None


@dataclass
class RangeOverride:
    """The range of a nuisance parameter for one value of a categorical scientific axis."""

    low: float | None = None
    high: float | None = None
    choices: list[Any] | None = None


@dataclass
class NuisanceParam:
    """A hyperparameter tuned by the sampler separately at each point."""

    path: str = "???"
    type: str = "float"  # float | int | categorical
    low: float | None = None
    high: float | None = None
    choices: list[Any] | None = None
    scale: str = "linear"  # linear | log | reverse_log (log of 1 - x)
    step: float | None = None
    by: str | None = None  # a categorical scientific alias the range depends on
    ranges: dict[str, RangeOverride] = field(default_factory=dict)  # value of `by` -> range
    unit: str | None = None
    quantity: str | None = None  # batch_size | learning_rate | seq_len (QUANTITIES)
    description: str | None = None


@dataclass
class FixedParam:
    """A recorded value (also applied to the trainer config)."""

    path: str = "???"
    value: Any = None
    unit: str | None = None
    quantity: str | None = None  # batch_size | learning_rate | seq_len (QUANTITIES)
    description: str | None = None


@dataclass
class DerivedParam:
    """A trainer value computed from the study's other parameters at every trial
    (`stepscale.sweeps.study.derived`), e.g. Adam's β2 from its half-life in tokens:
    ``{path: optimizer.b2, expr: "0.5 ** (batch_size * seq_len / t2)", low: 0.5, high: 0.9999}``.
    ``low``/``high`` (optional) bound the value at every point; ``type: int`` rounds it.
    Without a ``path`` the entry is a named value (e.g. ``t2: {expr: "2048"}``) that later
    entries use and trial.json records, but no trainer key receives."""

    path: str | None = None  # None: a named intermediate value other entries may use
    expr: str = "???"
    low: float | None = None
    high: float | None = None
    type: str = "float"  # float | int (rounded to the nearest integer)
    unit: str | None = None
    quantity: str | None = None  # batch_size | learning_rate | seq_len (QUANTITIES)
    description: str | None = None


@dataclass
class BudgetConfig:
    """How many trials per point and how long each trains (one horizon unit only)."""

    trials_per_point: int = 8
    max_steps: int | None = None
    max_tokens: int | None = None
    max_examples: int | None = None
    confirm_seeds: int = 0
    # A trial that cannot learn ends early (sweeps.job.no_progress): at its first evaluation
    # at or after this fraction of its horizon, if its best eval loss has come less than
    # no_progress_min of the way from its step-0 eval loss to the target, it stops (pruned,
    # ended_by "no_progress" in status.json). Needs a target loss; null: off.
    no_progress_by: float | None = 0.1
    no_progress_min: float = 0.05


@dataclass
class ObjectiveConfig:
    """What each trial is scored by (minimised)."""

    kind: str = "steps_to_target"  # steps_to_target | final_eval_loss | min_eval_loss
    target_loss: float | None = None
    stop_at_target: bool = False  # end trials at the target (saves compute, shortens curves)
    # A comparison's claim ("arm A reaches the target in fewer steps") is shown when its
    # one-sided Welch test gives p below this (analysis.claims; docs/science.md).
    claim_level: float = 0.01
    # More target losses the analysis refits S(B) at (B_crit vs target), beside target_loss
    # and the automatic ones; with stop_at_target they must be easier (above target_loss).
    report_targets: list[float] = field(default_factory=list)


@dataclass
class SamplerConfig:
    """Optuna sampler of the nuisance values."""

    name: str = "tpe"  # tpe | qmc | random | grid | gp
    seed: int | None = None  # default: the study seed
    n_startup_trials: int | None = None  # tpe/gp: default min(10, trials_per_point // 2)
    # Trial n of a point is drawn (tpe, gp) and pruned from the point's trials 0 … n − 1 − lag
    # alone, and asked once those have ended, so up to lag + 1 trials of a point run at once
    # and the trials do not depend on parallelism or completion order
    # (stepscale.sweeps.study.ordered).
    lag: int = 1
    # Transfer between points (stepscale.sweeps.run.transfer): each point's first trial is the
    # optimum predicted from the points already tuned, and its LR range is narrowed to a
    # factor transfer_width either side of the prediction (never outside the declared range).
    transfer: bool = False
    transfer_width: float = 3.0
    # > 1: the predicted LR is enqueued with η̂/f and η̂·f beside it (inside the narrowed
    # range), so a point's first trials bracket its optimum; 0: the prediction alone.
    transfer_bracket: float = 0.0


@dataclass
class PrunerConfig:
    """Optuna pruner on eval loss by step (within one point)."""

    name: str = "none"  # none | median | successive_halving | hyperband | deadline
    n_startup_trials: int = 2
    n_warmup_steps: int = 0
    min_resource: int | None = None  # successive_halving / hyperband, in steps
    reduction_factor: int = 3
    # deadline: stop a trial still above the target after this many times the fewest steps
    # to target any trial of its point has needed so far (it cannot become the point's best)
    deadline_factor: float = 3.0


@dataclass
class StorageConfig:
    """Where Optuna keeps the studies."""

    name: str = "journal"  # journal | sqlite | postgres
    url: str | None = None  # default: a file in the run dir
    url_env: str | None = None  # environment variable holding the URL (with password)


@dataclass
class StudyConfig(TrainerConfig):
    """The root config: a trainer config plus the study around it."""

    # The trainer of every trial (sweeps.trainers.spec, docs/trainers.md): None = the built-in one,
    # whose config is model/data/optimizer/schedule/train; {target: "module:function",
    # config: {…}} for a Python function; {command: [...], config: {…}} for any program, with
    # metrics/args/cwd/stop_signal/stop_grace_s/resume_args for a script run unmodified
    # (sweeps.trainers.spec reads and checks it all; docs/trainers.md).
    trainer: Any = None
    scientific: dict[str, ScientificParam] = field(default_factory=dict)
    nuisance: dict[str, NuisanceParam] = field(default_factory=dict)
    fixed: dict[str, FixedParam] = field(default_factory=dict)
    # values computed from the parameters above by a small safe grammar (sweeps.study.expr)
    derived: dict[str, DerivedParam] = field(default_factory=dict)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    pruner: PrunerConfig = field(default_factory=PrunerConfig)
    # How trials run: the shared keys here, each launcher's own in its schema
    # (sweeps.study.launcher_schema; `launcher=NAME` composes onto it).
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    parallelism: int = 1
    seed: int = 0
    retries: int = 1
    keep_checkpoints: bool = False
    heartbeat_timeout_s: float = 120.0
    description: str | None = None
    # Metric loggers beside metrics.jsonl (stepscale.loggers): any of tensorboard, mlflow,
    # wandb; each writes into a folder of its name in the trial folder (docs/loggers.md).
    loggers: list[str] = field(default_factory=list)


def register() -> None:
    """Register the root schema and every launcher's schema (idempotent). Hydra is imported
    here, not at the top, so that a trial job, which reads these dataclasses, never
    imports it."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name=SCHEMA_NAME, node=StudyConfig)
    store_schemas()
