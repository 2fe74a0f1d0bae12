"""Validate a trainer config and resolve it into a `RunPlan`, before any compute.

Every bad value stops here with a `ConfigError` naming the field and the allowed
values: unknown names, non-positive sizes, warmup longer than the horizon, a batch that
does not split over devices × microbatch, a sequence longer than the model allows, an
unusable token file, a target below the data's loss floor.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import warnings
from dataclasses import dataclass
from typing import Any

import jax
from flax import nnx

from stepscale.models import nets
from stepscale.models.batching import BatchPlan, plan_batch
from stepscale.models.checks import choice, finite_above_zero, in_unit_interval
from stepscale.models.config import TrainerConfig
from stepscale.models.data import DataInfo, DataSource, build_source
from stepscale.models.distributed import maybe_initialize
from stepscale.models.durations import to_steps
from stepscale.models.errors import ConfigError, ConfigWarning
from stepscale.models.memory import check_fits
from stepscale.models.optim import CLIPPED_OPTIMIZERS, OPTIMIZERS
from stepscale.models.ramp import BatchSchedule, batch_schedule, lr_scale
from stepscale.models.restarts import check as check_on_spike
from stepscale.models.schedules import SCHEDULES
from stepscale.models.sharding import MIN_SHARD_ELEMENTS, SHARDINGS, sharded_count

DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class Stage:
    """A stage of the batch schedule: from step ``start`` on, its own batch layout, LR
    factor and compiled program (``static_key``)."""

    start: int
    batch: BatchPlan
    lr_scale: float
    static_key: str


@dataclass(frozen=True)
class RunPlan:
    """A validated run: the data source, batch layout and every duration in steps."""

    cfg: TrainerConfig
    source: DataSource
    info: DataInfo
    batch: BatchPlan  # the layout of data.global_batch (the final batch of a ramp)
    horizon: int
    warmup: int
    decay_steps: int
    tokens_per_step: int
    examples_per_step: int
    n_params: int
    flops_per_step: float
    static_key: str  # identifies the compiled programs (shapes and program choices only)
    schedule: BatchSchedule | None = None  # the batch of every step (data.rampup)
    stages: tuple[Stage, ...] = ()  # one per batch of the schedule, in step order
    # N of the scaling laws (nets.count_nonembedding_params)
    n_params_nonembedding: int | None = None

    def examples_before(self, step: int) -> int:
        """Examples consumed by the first ``step`` steps of this run's schedule."""
        if self.schedule is None:
            return step * self.examples_per_step
        return self.schedule.examples_before(step)

    def hyperparams(self) -> dict[str, float]:
        """The runtime hyperparameters of the compiled step, as plain floats."""
        o, s = self.cfg.optimizer, self.cfg.schedule
        return {
            "lr": o.lr,
            "b1": o.b1,
            "b2": o.b2,
            "eps": o.eps,
            "weight_decay": o.weight_decay,
            "clip": o.clip,
            "update_clip": o.update_clip,
            "lr_scale": 1.0,
            "warmup": float(self.warmup),
            "horizon": float(self.horizon),
            "decay_steps": float(self.decay_steps),
            "final_lr_frac": s.final_lr_frac,
            "ema_decay": self.cfg.train.ema_decay,
            "data_skip": 0.0,  # batches a spike restart skipped (models/restarts.py)
        }


def _check_optimizer(cfg: TrainerConfig) -> None:
    o = cfg.optimizer
    choice("optimizer.name", o.name, OPTIMIZERS)
    finite_above_zero("optimizer.lr", o.lr, allow_zero=True)
    in_unit_interval("optimizer.b1", o.b1)
    in_unit_interval("optimizer.b2", o.b2)
    finite_above_zero("optimizer.eps", o.eps, allow_zero=True)
    finite_above_zero("optimizer.weight_decay", o.weight_decay, allow_zero=True)
    finite_above_zero("optimizer.clip", o.clip, allow_zero=True)
    finite_above_zero("optimizer.trust_coefficient", o.trust_coefficient)
    finite_above_zero("optimizer.update_clip", o.update_clip, allow_zero=True)
    if o.update_clip and o.name not in CLIPPED_OPTIMIZERS:
        raise ConfigError(
            "optimizer.update_clip",
            f"clips Adam's update ratio, which {o.name} has not; use it with "
            f"{' or '.join(CLIPPED_OPTIMIZERS)}, or set it to 0",
        )


def _check_train(cfg: TrainerConfig) -> int:
    t = cfg.train
    for name in ("log_every", "eval_every"):
        finite_above_zero(f"train.{name}", getattr(t, name))
    finite_above_zero("train.checkpoint_every", t.checkpoint_every, allow_zero=True)
    finite_above_zero("train.keep_checkpoints", t.keep_checkpoints)
    finite_above_zero("train.divergence_factor", t.divergence_factor)
    finite_above_zero("train.eval_positions", t.eval_positions)
    in_unit_interval("train.ema_decay", t.ema_decay)
    if not isinstance(t.spike_window, int) or t.spike_window < 0:
        raise ConfigError(
            "train.spike_window", f"must be a whole number of steps ≥ 0, got {t.spike_window!r}"
        )
    for name in ("spike_factor", "grad_norm_spike_factor"):
        value = getattr(t, name)
        if not math.isfinite(value) or value <= 1.0:
            raise ConfigError(f"train.{name}", f"must be a finite number > 1, got {value}")
    check_on_spike(t)
    _check_init_from(t.init_from)
    for name, seed in (("train.seed", t.seed), ("data.seed", cfg.data.seed)):
        if not 0 <= seed < 2**32:
            raise ConfigError(name, f"must lie in [0, 2**32), got {seed}")
    choice("train.sharding", t.sharding, SHARDINGS)
    choice("model.param_dtype", cfg.model.param_dtype, DTYPES)
    choice("model.dtype", cfg.model.dtype, DTYPES)
    procs = jax.process_count()
    if procs == 1:
        available = len(jax.local_devices())
        devices = available if t.devices is None else t.devices
        if not 1 <= devices <= available:
            raise ConfigError(
                "train.devices", f"must lie in [1, {available}] (local devices), got {devices}"
            )
        return devices
    # A multi-process run: global devices, the same number in every process.
    available = jax.device_count()
    devices = available if t.devices is None else t.devices
    local = jax.local_device_count()
    if not procs <= devices <= available or devices % procs or devices // procs > local:
        raise ConfigError(
            "train.devices",
            f"counts the devices of all {procs} processes in a multi-process run and must be "
            f"a multiple of {procs} in [{procs}, {procs * local}] ({local} devices per "
            f"process), got {devices}",
        )
    return devices


def _check_init_from(path: str | None) -> None:
    """``train.init_from`` names a checkpoint folder (``…/checkpoints/step_<N>``)."""
    if path is None:
        return
    folder = os.path.expanduser(str(path))
    name = os.path.basename(os.path.normpath(folder))
    if not name.startswith("step_") or not name[5:].isdigit():
        raise ConfigError(
            "train.init_from",
            f"{path!r} is not a checkpoint folder; give one like RUN/checkpoints/step_000000100",
        )
    for part in ("host.json", "arrays.npz"):
        if not os.path.isfile(os.path.join(folder, part)):
            raise ConfigError("train.init_from", f"{path} has no {part}: not a checkpoint")


def _by_schedule(
    value: float | None, per_example: float, schedule: BatchSchedule, steps: int | None
) -> int | None:
    """A duration in examples (or tokens, ``per_example`` of them an example) as steps of a
    ramped ``schedule`` (rounded up); ``steps`` as `to_steps` gave it otherwise."""
    if value is None or not schedule.ramped:
        return steps
    return schedule.steps_for_examples(value / per_example)


def _horizon(
    cfg: TrainerConfig, examples: int, tokens: int, schedule: BatchSchedule | None = None
) -> int:
    t = cfg.train
    if t.max_tokens is not None or t.max_examples is not None:
        steps = None  # a horizon in tokens/examples replaces the default in steps
    else:
        steps = t.max_steps
    horizon = to_steps(
        "train.max",
        steps=steps,
        tokens=t.max_tokens,
        examples=t.max_examples,
        examples_per_step=examples,
        tokens_per_step=tokens,
        allow_zero=False,
    )
    if horizon is None:
        raise ConfigError("train.max_steps", "the run needs a horizon: set train.max_steps")
    if schedule is not None:
        per_token = tokens / examples
        horizon = _by_schedule(t.max_examples, 1, schedule, horizon)
        horizon = _by_schedule(t.max_tokens, per_token, schedule, horizon)
    return horizon


def _warmup(
    cfg: TrainerConfig,
    horizon: int,
    examples: int,
    tokens: int,
    schedule: BatchSchedule | None = None,
) -> int:
    s = cfg.schedule
    choice("schedule.name", s.name, SCHEDULES)
    warmup = to_steps(
        "schedule.warmup",
        steps=s.warmup_steps,
        tokens=s.warmup_tokens,
        examples=s.warmup_examples,
        fraction=s.warmup_frac,
        examples_per_step=examples,
        tokens_per_step=tokens,
        horizon=horizon,
    )
    if schedule is not None and warmup is not None:
        warmup = _by_schedule(s.warmup_examples, 1, schedule, warmup)
        warmup = _by_schedule(s.warmup_tokens, tokens / examples, schedule, warmup)
    warmup = warmup or 0
    if warmup > horizon:
        raise ConfigError(
            "schedule.warmup_steps",
            f"warmup of {warmup} steps is longer than the horizon of {horizon} steps",
        )
    if s.name == "constant" and warmup:
        raise ConfigError("schedule.name", "'constant' has no warmup; use 'warmup_constant'")
    if not 0.0 <= s.final_lr_frac <= 1.0:
        raise ConfigError("schedule.final_lr_frac", f"must lie in [0, 1], got {s.final_lr_frac}")
    if not 0.0 < s.decay_frac <= 1.0:
        raise ConfigError("schedule.decay_frac", f"must lie in (0, 1], got {s.decay_frac}")
    decay = math.ceil(s.decay_frac * horizon)
    if s.name == "wsd" and warmup > horizon - decay:
        raise ConfigError(
            "schedule.warmup_steps",
            f"wsd: warmup of {warmup} steps runs into the decay phase (the last {decay} of "
            f"{horizon} steps); shorten the warmup or lower schedule.decay_frac",
        )
    return warmup


def _check_target(cfg: TrainerConfig, info: DataInfo, source: DataSource) -> None:
    target = cfg.train.target_loss
    if target is None:
        if cfg.train.stop_at_target:
            raise ConfigError("train.stop_at_target", "needs train.target_loss")
        return
    if not math.isfinite(target):
        raise ConfigError("train.target_loss", f"must be a finite number, got {target}")
    floor = info.loss_floor
    positions = cfg.train.eval_positions
    if positions is not None:
        per_position = getattr(source, "position_losses", None)
        floor = float(per_position[:positions].mean()) if per_position is not None else None
    if floor is not None and target <= floor:
        raise ConfigError(
            "train.target_loss",
            f"{target} is at or below the data's loss floor {floor:.4f} (no model can reach it); "
            f"choose a target above {floor:.4f}",
        )


def _check_eval_positions(cfg: TrainerConfig, info: DataInfo) -> None:
    positions = cfg.train.eval_positions
    if positions is None:
        return
    if info.kind != "lm":
        raise ConfigError("train.eval_positions", "applies to language models only; leave it unset")
    if positions > (info.seq_len or 0):
        raise ConfigError(
            "train.eval_positions",
            f"must be at most data.seq_len = {info.seq_len}, got {positions}",
        )


def _warn_if_nothing_shards(cfg: TrainerConfig, info: DataInfo, devices: int) -> None:
    """``train.sharding=fsdp`` with nothing to shard is allowed but only warns (every tensor
    then stays whole, as with ``replicated``)."""
    if cfg.train.sharding != "fsdp":
        return
    abstract = nnx.eval_shape(lambda: nets.build_model(cfg.model, info, nnx.Rngs(0)))
    shapes = [x.shape for x in jax.tree.leaves(nnx.state(abstract, nnx.Param))]
    if sharded_count(shapes, devices) == 0:
        warnings.warn(
            f"train.sharding=fsdp shards nothing here: no parameter of this model has at "
            f"least {MIN_SHARD_ELEMENTS} elements and a dimension divisible by the {devices} "
            "device(s) in use, so every tensor stays replicated (as with "
            "train.sharding=replicated)",
            ConfigWarning,
            stacklevel=3,
        )


def _static_key(cfg: TrainerConfig, batch: BatchPlan, info: DataInfo) -> str:
    """Only what shapes or selects the compiled program; runtime values are left out.
    ``batch`` is the layout of the program's step (a ramp's stages differ in it alone)."""
    data = dataclasses.asdict(cfg.data)
    # Only fields that reach the compiled step as *arrays* may be left out (the Markov and
    # teacher tables come from seed/concentration; file data is fed from the host). The
    # ramp only chooses which batch a step has: each batch is a program of its own.
    for runtime in ("seed", "path", "heldout_frac", "concentration", "rampup"):
        data.pop(runtime, None)
    data["global_batch"] = batch.global_batch
    static = {
        "model": dataclasses.asdict(nets.resolve(cfg.model, info)),
        "data": data,
        "info": dataclasses.asdict(info)
        | {"loss_floor": None, "baseline_loss": None, "baseline": None, "vocabulary": None},
        "optimizer": [cfg.optimizer.name, cfg.optimizer.nesterov, cfg.optimizer.trust_coefficient],
        "schedule": cfg.schedule.name,
        "batch": dataclasses.asdict(batch),
        "ema": cfg.train.ema_decay > 0,
        "eval_positions": cfg.train.eval_positions,
        **({"update_clip": True} if cfg.optimizer.update_clip > 0 else {}),
    }
    return json.dumps(static, sort_keys=True, default=str)


def _with_baseline(cfg: TrainerConfig, info: DataInfo) -> DataInfo:
    """The data's facts with the model's trivial baseline where only the model knows it:
    the NQM's expected loss at its starting point (its floor is 0)."""
    if info.baseline_loss is not None or cfg.model.name != "nqm":
        return info
    return dataclasses.replace(
        info,
        baseline_loss=nets.nqm_initial_loss(cfg.model),
        baseline="the expected loss at the starting point",
    )


def prepare(cfg: TrainerConfig, *, check_memory: bool = True) -> RunPlan:
    """Check every field and derive the plan; raises ConfigError on bad input. Joins the
    other processes first when the run is multi-process (`models.distributed`).
    ``check_memory``: refuse a run whose lower bound of memory per device exceeds what this
    machine's devices have (`models.memory`); off when the run will have other devices."""
    maybe_initialize(cfg)
    _check_optimizer(cfg)
    devices = _check_train(cfg)
    choice("model.name", cfg.model.name, nets.MODELS)
    source = build_source(cfg.data, cfg.model)
    info = _with_baseline(cfg, source.info)
    model = nets.resolve(cfg.model, info)  # model/data compatibility, dims, sequence length
    _check_eval_positions(cfg, info)
    _warn_if_nothing_shards(cfg, info, devices)
    batch = plan_batch(
        cfg.data.global_batch, devices, cfg.data.max_microbatch, cfg.train.noise_scale
    )
    schedule = batch_schedule(cfg.data)
    examples = cfg.data.global_batch
    tokens = examples * info.tokens_per_example
    horizon = _horizon(cfg, examples, tokens, schedule)
    warmup = _warmup(cfg, horizon, examples, tokens, schedule)
    stages = _stages(cfg, schedule, batch, devices, info)
    decay_steps = max(1, math.ceil(cfg.schedule.decay_frac * horizon))
    _check_target(cfg, info, source)
    n_params = nets.count_params(cfg.model, info)
    if check_memory:
        largest = max((st.batch for st in stages), key=lambda b: b.global_batch)
        check_fits(cfg, info, model, largest, n_params)
    return RunPlan(
        cfg=cfg,
        source=source,
        info=info,
        batch=batch,
        horizon=horizon,
        warmup=warmup,
        decay_steps=decay_steps,
        tokens_per_step=tokens,
        examples_per_step=examples,
        n_params=n_params,
        flops_per_step=nets.flops_per_example(cfg.model, info) * examples,
        static_key=_static_key(cfg, batch, info),
        schedule=schedule,
        stages=stages,
        n_params_nonembedding=nets.count_nonembedding_params(cfg.model, info),
    )


def _stages(
    cfg: TrainerConfig, schedule: BatchSchedule, final: BatchPlan, devices: int, info: DataInfo
) -> tuple[Stage, ...]:
    """Every stage's batch layout (each must split over the devices and microbatches as
    ``data.global_batch`` does), LR factor and program key."""
    field = "data.rampup.schedule" if cfg.data.rampup.schedule else "data.rampup.start"
    coupling = cfg.data.rampup.lr_coupling
    out = []
    for stage in schedule.stages:
        if stage.batch == final.global_batch:
            plan = final
        else:
            try:
                plan = plan_batch(
                    stage.batch, devices, cfg.data.max_microbatch, cfg.train.noise_scale
                )
            except ConfigError as exc:
                raise ConfigError(
                    field, f"the ramp's batch {stage.batch} cannot be laid out: {exc}"
                ) from None
        scale = lr_scale(coupling, stage.batch, final.global_batch)
        out.append(Stage(stage.start, plan, scale, _static_key(cfg, plan, info)))
    return tuple(out)


def describe(plan: RunPlan) -> dict[str, Any]:
    """The derived quantities a user wants to see beside the config."""
    b = plan.batch
    ramp = plan.schedule is not None and plan.schedule.ramped
    return {
        "horizon_steps": plan.horizon,
        "rampup_steps": plan.schedule.rampup_steps if plan.schedule is not None else 0,
        **({"batch_stages": plan.schedule.as_list()} if ramp else {}),
        "warmup_steps": plan.warmup,
        "global_batch": b.global_batch,
        "devices": b.devices,
        "sharding": plan.cfg.train.sharding,
        "per_device_batch": b.per_device,
        "microbatch": b.microbatch,
        "accum_steps": b.accum_steps,
        "tokens_per_step": plan.tokens_per_step,
        "examples_per_step": plan.examples_per_step,
        "params": plan.n_params,
        "params_nonembedding": plan.n_params_nonembedding,
        "flops_per_step": plan.flops_per_step,
        "loss_floor": plan.info.loss_floor,
        "baseline_loss": plan.info.baseline_loss,
        "baseline": plan.info.baseline,
        **({"tokenizer": plan.info.tokenizer} if plan.info.tokenizer else {}),
        **({"vocabulary": plan.info.vocabulary} if plan.info.vocabulary is not None else {}),
        **({"vocab_size": plan.info.vocab_size} if plan.info.vocab_size else {}),
    }
