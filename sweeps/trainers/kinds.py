"""The trainer kinds, a class each in one registry: what the orchestrator and a trial's job
ask of a trainer (`TrainerSpec`, read by `sweeps.trainers.spec`) instead of testing its kind.

A kind answers, for one spec: the keys a study's parameters may set, the unit of its batch
axis, the config tree a trial starts from, what the study writes into it besides the
parameters (horizon, seed, target), the ``validate`` run on every point, how a trial runs
in its job, and three facts (`TrainerKind.jax_devices`, `TrainerKind.reports_status`,
`TrainerKind.branches`). The built-in trainer is a kind like the others; its answers come
from `sweeps.trainers.builtin`, the one door to `stepscale.models`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from stepscale.errors import UsageError
from stepscale.rundir import EXAMPLES
from stepscale.sweeps.trainers import builtin
from stepscale.sweeps.trainers.spec import (
    BUILTIN,
    COMMAND,
    FUNCTION,
    TrainerSpec,
    config_paths,
    import_function,
    read_trainer,
    search_folders,
    set_path,
    trainer_kind,
)
from stepscale.trainer import Reporter

# A trainer run in the job's own process: (its config tree, the reporter, the trial folder).
TrainFunction = Callable[[dict[str, Any], Reporter, Path], Any]


@dataclass(frozen=True)
class StudyValues:
    """What a study writes into a trial's trainer config besides its parameters: the
    budget's horizon, the objective's target, the trial's seed."""

    max_steps: int | None
    max_tokens: int | None
    max_examples: int | None
    target_loss: float | None
    stop_at_target: bool
    seed: int

    @classmethod
    def of(cls, study: Any, seed: int) -> StudyValues:
        """The values of a study config (`StudyConfig`) for a trial of ``seed``."""
        b, o = study.budget, study.objective
        return cls(
            b.max_steps, b.max_tokens, b.max_examples, o.target_loss, bool(o.stop_at_target), seed
        )


class TrainerKind:
    """A user's trainer (the defaults): its config is ``trainer.config``, the study's
    values go where ``trainer.keys`` says, ``trainer.validate`` checks a point."""

    # Trains with JAX in the trial's process (run.json lists this machine's JAX devices;
    # the orchestrator points JAX's compilation cache where the study says).
    jax_devices: ClassVar[bool] = False
    # Ends with a complete status (the job does not complete it from the eval losses).
    reports_status: ClassVar[bool] = False
    # `sweep branch` may start branches from its checkpoints (train.init_from).
    branches: ClassVar[bool] = False
    # Restarts a trial from its own checkpoints on a loss spike (train.on_spike).
    restarts_on_spike: ClassVar[bool] = False

    def __init__(self, spec: TrainerSpec) -> None:
        self.spec = spec

    @classmethod
    def batch_unit(cls, study: Any) -> str:
        """What the batch axis counts when the study does not say: examples."""
        return EXAMPLES

    def settable_paths(self) -> frozenset[str] | None:
        """The keys of ``trainer.config``, or any (None) when that config is not given."""
        return frozenset(config_paths(self.spec.config)) if self.spec.config else None

    def config_base(self, study: Any) -> dict[str, Any]:
        """A trial's config tree before its values: a copy of ``trainer.config``."""
        return copy.deepcopy(self.spec.config)

    def trial_settings(
        self, settings: dict[str, Any], values: StudyValues, floats: set[str]
    ) -> dict[str, Any]:
        """``settings`` (path → value of the trial's parameters) with the study's values at
        the paths of ``trainer.keys``; a value at a float path (``floats``, or a float in
        ``trainer.config``) is a float, so a script that checks its types gets one."""
        settings = settings | {path: getattr(values, key) for key, path in self.spec.keys.items()}
        floats = floats | {p for p, v in _leaves(self.spec.config).items() if isinstance(v, float)}
        return {p: _as_float(v) if p in floats else v for p, v in settings.items()}

    def complete_config(
        self, tree: dict[str, Any], values: StudyValues, *, name: str, run_dir: Path | None
    ) -> None:
        """Nothing more: a user's trainer gets the study's values as settings."""

    def validator(self, *, here: bool) -> Callable[[dict[str, Any]], Any] | None:
        """``trainer.validate`` imported (None when not given); ``here`` plays no part."""
        if self.spec.validate is None:
            return None
        return import_function(self.spec.validate, self.spec.python_path, key="trainer.validate")

    def check_here(self) -> None:
        """Nothing to check before the study runs beyond what `read_trainer` checked."""

    def check_study(self, study: Any) -> None:
        """A spike policy (``train.on_spike.policy``) on a trainer that cannot go back to
        its own checkpoints → `UsageError` naming the key."""
        policy = study.train.on_spike.policy
        if policy != "off" and not self.restarts_on_spike:
            raise UsageError(
                f"train.on_spike.policy: {policy!r} restarts a trial from its own "
                f"checkpoints, which a {self.spec.kind} trainer cannot be asked to do; "
                "the built-in trainer, or a command with trainer.restart_args, restarts on "
                "spikes (leave the policy off)"
            )

    def prepare_orchestrator(self, study: Any) -> None:
        """Nothing to set up in the orchestrator's process."""

    def train_function(self) -> TrainFunction | None:
        """The function that trains a trial in the job's process; None: the trainer is a
        program of its own (`sweeps.job.command` runs it)."""
        return None


class FunctionKind(TrainerKind):
    """``trainer: {target: "module:function"}``: a Python function in the job's process."""

    def check_here(self) -> None:
        """``trainer.target`` imports (else `UsageError`)."""
        import_function(self.spec.target or "", self.spec.python_path)

    def train_function(self) -> TrainFunction:
        """``trainer.target`` imported, called with the config as an OmegaConf tree."""
        function = import_function(self.spec.target or "", self.spec.python_path)

        def call(config: dict[str, Any], reporter: Reporter, folder: Path) -> Any:
            from omegaconf import OmegaConf

            return function(OmegaConf.create(config), reporter, folder)

        return call


class CommandKind(TrainerKind):
    """``trainer: {command: [...]}``: a program run in the trial folder."""

    def check_study(self, study: Any) -> None:
        """A spike policy needs a program that can go back to a checkpoint of its own at a
        step the job names (``trainer.restart_args`` with ``{restart_step}``, and
        ``trainer.checkpoint_every``, the steps it keeps checkpoints at); the LR and clip
        scaling of a restart are the built-in trainer's alone. Else `UsageError` naming
        the key (`sweeps.job.command_restarts`)."""
        p = study.train.on_spike
        if p.policy == "off":
            return
        if p.policy != "restart":
            raise UsageError(f"train.on_spike.policy: expected off or restart, got {p.policy!r}")
        for name in ("rewind_steps", "skip_batches", "max_restarts"):
            value, low = getattr(p, name), 1 if name == "rewind_steps" else 0
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise UsageError(
                    f"train.on_spike.{name}: expected an integer ≥ {low}, got {value!r}"
                )
        for name, default in (("lr_scale", 1.0), ("clip_scale", 1.0), ("scaled_steps", 0)):
            if getattr(p, name) != default:
                raise UsageError(
                    f"train.on_spike.{name}: a command trainer's learning rate and clip are "
                    f"its own; leave {name} at {default:g} (or pass a scale in "
                    "trainer.restart_args)"
                )
        if not any("{restart_step}" in a for a in self.spec.restart_args):
            raise UsageError(
                "trainer.restart_args: train.on_spike.policy=restart restarts the program from "
                "a checkpoint of its own before the spike, which it must be told: give "
                "arguments with {restart_step} (the step to resume from) and "
                "{batches_skipped} (the batches to skip in all), e.g. "
                "['--resume_step={restart_step}', '--skip_batches={batches_skipped}']; a "
                "program that cannot resume from a chosen step cannot be restarted (leave "
                "the policy off)"
            )
        if self.spec.checkpoint_every <= 0:
            raise UsageError(
                "trainer.checkpoint_every: train.on_spike.policy=restart goes back to the "
                "program's own checkpoints: give the steps between them (it keeps every "
                "one at least train.on_spike.rewind_steps back)"
            )


class BuiltinKind(TrainerKind):
    """The built-in trainer (`stepscale.models`, through `sweeps.trainers.builtin`): its
    config is the study's own model/data/optimizer/schedule/train."""

    jax_devices = True
    reports_status = True
    branches = True
    restarts_on_spike = True
    # Where the study's values go in its config (`complete_config`).
    KEYS: ClassVar[dict[str, str]] = {
        "max_steps": "train.max_steps",
        "max_tokens": "train.max_tokens",
        "max_examples": "train.max_examples",
        "target_loss": "train.target_loss",
        "stop_at_target": "train.stop_at_target",
        "seed": "train.seed",
    }

    @classmethod
    def batch_unit(cls, study: Any) -> str:
        """What a batch counts with the study's data: its source says (sequences or
        examples)."""
        return builtin.batch_unit(study.data)

    def settable_paths(self) -> frozenset[str]:
        """Every key of the built-in trainer's config but its name and run dir."""
        from stepscale.sweeps.trainers.builtin_keys import TRAINER_PATHS

        return TRAINER_PATHS

    def config_base(self, study: Any) -> dict[str, Any]:
        """The study's model/data/optimizer/schedule/train sections."""
        return {k: dataclasses.asdict(getattr(study, k)) for k in builtin.SECTIONS}

    def trial_settings(
        self, settings: dict[str, Any], values: StudyValues, floats: set[str]
    ) -> dict[str, Any]:
        """The parameters as they are: the study's values are written by
        `complete_config`, and the trainer's config schema types every value."""
        return settings

    def complete_config(
        self, tree: dict[str, Any], values: StudyValues, *, name: str, run_dir: Path | None
    ) -> None:
        """The study's values at `KEYS`: a horizon in the budget (any of steps, tokens,
        examples) replaces the config's, a target set replaces its target; every trial
        resumes from its checkpoints and is named ``name``, kept in ``run_dir``."""
        written: dict[str, Any] = {}
        horizon = {k: getattr(values, k) for k in ("max_steps", "max_tokens", "max_examples")}
        if any(v is not None for v in horizon.values()):
            written |= horizon
        if values.target_loss is not None:
            written["target_loss"] = values.target_loss
        written |= {"stop_at_target": values.stop_at_target, "seed": values.seed}
        for key, value in written.items():
            set_path(tree, self.KEYS[key], value)
        set_path(tree, "train.resume", True)
        tree["name"] = name
        tree["run_dir"] = str(run_dir) if run_dir is not None else None

    def validator(self, *, here: bool) -> Callable[[dict[str, Any]], Any]:
        """The planner (`builtin.validate`); ``here``: the trials use this machine's
        devices (not SLURM's, whose memory is not checked here)."""
        return functools.partial(builtin.validate, here=here)

    def prepare_orchestrator(self, study: Any) -> None:
        """JAX's compilation cache where ``train.compile_cache_dir`` says (trials run in
        this process or its children); a folder that cannot be made → `UsageError`."""
        try:
            builtin.configure_compile_cache(study.train.compile_cache_dir)
        except builtin.RejectedConfig as exc:
            raise UsageError(str(exc)) from None

    def train_function(self) -> TrainFunction:
        """`builtin.run` (`stepscale.models.train.train` on the config tree)."""
        return builtin.run


# kind name (`TrainerSpec.kind`) → its class
KINDS: dict[str, type[TrainerKind]] = {
    BUILTIN: BuiltinKind,
    FUNCTION: FunctionKind,
    COMMAND: CommandKind,
}


def kind_of(spec: TrainerSpec) -> TrainerKind:
    """What ``spec``'s kind answers about it."""
    return KINDS[spec.kind](spec)


def trainer_batch_unit(study: Any) -> str:
    """The unit of a study's batch axis when the study does not state one: what its
    trainer (``study.trainer``, not otherwise checked) says."""
    return KINDS[trainer_kind(study.trainer)].batch_unit(study)


def study_trainer(cfg: Any, config_dir: str | None) -> tuple[TrainerSpec, frozenset[str] | None]:
    """A study's trainer (read and, for a function, imported: mistakes → `UsageError`) and
    the keys its parameters may set (None: any)."""
    trainer = read_trainer(cfg.trainer, search_folders(config_dir))
    kind = kind_of(trainer)
    kind.check_here()
    kind.check_study(cfg)
    return trainer, kind.settable_paths()


def _as_float(value: Any) -> Any:
    """A whole number as a float (``1`` → ``1.0``)."""
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _leaves(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted key → value of every leaf of a config tree."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out |= _leaves(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out
