"""The step-based training loop: `train(cfg, reporter)`.

Read top to bottom: validate and plan → build state (or resume it from the latest
checkpoint) → evaluate at step 0 → run compiled chunks of steps up to the next event
(log, eval, checkpoint, horizon) → log / evaluate / check the target and divergence /
checkpoint → final status. Every record goes to the reporter keyed by optimizer step.

A run may span several processes (`models.distributed`): every process runs this same
loop on global arrays; only process 0 reports and writes checkpoints, and every decision
(evaluation, divergence, target, pruning, Ctrl-C) is the same in all of them.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import numpy as np
from flax import nnx

from stepscale.events import drop_events, drop_restarts, record_event
from stepscale.models import checkpoint, distributed, executables, nets, restarts
from stepscale.models.batching import AXIS, make_mesh, replicated
from stepscale.models.config import TrainerConfig
from stepscale.models.errors import ConfigError
from stepscale.models.optim import make_optimizer
from stepscale.models.plan import RunPlan, describe, prepare
from stepscale.models.restarts import RESTART_EVENT, Restarts
from stepscale.models.sharding import bytes_per_device, tree_shardings
from stepscale.models.spikes import SpikeDetector
from stepscale.models.step import (
    DATA_STREAM,
    StepSpec,
    abstract_state,
    chunk_fn,
    eval_fn,
    init_fn,
)
from stepscale.reporters import Action, NullReporter, Reporter
from stepscale.rundir import GRAD_NORM_SPIKE, LOSS_SPIKE, interpolated_crossing

Progress = Callable[[int, int, dict[str, Any]], None]

log = logging.getLogger(__name__)


def cache_path(directory: str) -> str:
    """``directory`` with ``~`` expanded; a folder under ``~/.cache`` (the default's) is
    under ``$XDG_CACHE_HOME`` instead where that is set, as Linux caches are."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and (directory == "~/.cache" or directory.startswith("~/.cache/")):
        directory = xdg + directory[len("~/.cache") :]
    return os.path.expanduser(directory)


def configure_compile_cache(directory: str) -> None:
    """Turn on JAX's persistent compilation cache (every program cached, however small) and
    keep compiled programs beside it (models/executables.py); ``""`` turns the latter off."""
    if not directory:
        executables.configure(None)
        return
    path = cache_path(directory)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            "train.compile_cache_dir", f"cannot create {path}: {exc.strerror}"
        ) from None
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    executables.configure(path)


@dataclass
class LoopState:
    """Host-side state of the loop; saved in every checkpoint so a resume is exact."""

    step: int = 0
    wall_s: float = 0.0
    initial_loss: float | None = None
    best_eval_loss: float | None = None
    last_eval_loss: float | None = None
    last_eval_step: int | None = None
    steps_to_target: int | None = None
    steps_to_target_interp: float | None = None
    # per-step values accumulated since the last log
    pending: dict[str, list[float]] = field(default_factory=dict)
    last_log_step: int = 0
    last_log_wall: float = 0.0
    final: dict[str, Any] | None = None  # the status, once the run has ended
    examples: int | None = None  # examples consumed so far (exact under a batch ramp)
    spikes: dict[str, Any] = field(default_factory=dict)  # the detectors' windows
    loss_spike_steps: list[int] = field(default_factory=list)
    grad_norm_spike_steps: list[int] = field(default_factory=list)
    restarts: dict[str, Any] = field(default_factory=dict)  # models/restarts.Restarts

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form (for checkpoints)."""
        return dict(self.__dict__)


# How many spike steps status.json lists (all are counted, and all are in events.jsonl).
MAX_LISTED = 100
ABOVE_START = "final eval loss above the initial eval loss"


@dataclass(frozen=True)
class Ending:
    """How and why a run ended."""

    state: str  # complete | pruned | diverged
    reason: str
    diverged_step: int | None = None


class DeferredInterrupt:
    """Holds Ctrl-C (SIGINT) until the loop reaches a point where state and bookkeeping
    agree; a second Ctrl-C interrupts at once. Only active in the main thread."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self) -> DeferredInterrupt:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


class Trainer:
    """One training run. Use `train()`; the class only keeps the loop's pieces together."""

    def __init__(
        self, plan: RunPlan, run_dir: Path | None, reporter: Reporter, progress: Progress | None
    ):
        self.plan = plan
        self.cfg: TrainerConfig = plan.cfg
        self.run_dir = run_dir
        self.reporter = reporter
        self.progress = progress
        self.ckpt_dir = run_dir / "checkpoints" if run_dir is not None else None
        t = self.cfg.train
        self.procs = distributed.process_count()
        self.mesh = make_mesh(plan.batch.devices)
        self.repl = replicated(self.mesh)
        self.host_data = not plan.source.device_side
        stages = plan.stages
        self.noise = t.noise_scale or all(st.batch.noise_scale_free for st in stages)
        self.schedule = plan.schedule
        # A ramp runs every chunk with its stage's program, each taking its number of steps
        # as a runtime value: one compiled program per batch size, whatever the chunk.
        self.ramp = self.schedule is not None and self.schedule.ramped
        cadences = [t.log_every, t.eval_every] + (
            [t.checkpoint_every] if t.checkpoint_every else []
        )
        self.chunk_len = min(cadences) if self.ramp else None
        self.layout = {
            "devices": plan.batch.devices,
            "processes": self.procs,
            "sharding": t.sharding,
        }
        self.resharded_from: dict[str, Any] | None = None  # the layout a resume read
        self.state_bytes: int | None = None  # of the final state, on one device
        self.spec = self._spec()
        self.stage_specs = [
            self.spec
            if st.static_key == plan.static_key
            else dataclasses.replace(self.spec, key=self._key(st.static_key), plan=st.batch)
            for st in stages
        ]
        # Host values every process holds in full become global arrays (distributed.put).
        base_hp = {k: np.float32(v) for k, v in plan.hyperparams().items()}
        self.stage_hp = [
            distributed.put(base_hp | {"lr_scale": np.float32(st.lr_scale)}, self.repl)
            for st in stages
        ]
        self.hp = self.stage_hp[-1]
        self.policy = t.on_spike if restarts.enabled(t) else None
        if self.policy is not None and run_dir is None:
            raise ConfigError(
                "train.on_spike.policy",
                "restart goes back to the run's checkpoints: give the run a run_dir",
            )
        self.detectors = {
            LOSS_SPIKE: SpikeDetector(t.spike_window, t.spike_factor),
            GRAD_NORM_SPIKE: SpikeDetector(t.spike_window, t.grad_norm_spike_factor),
        }
        self.init_from: str | None = None  # the checkpoint this run started from, if another's
        self.key = distributed.put(
            jax.random.fold_in(jax.random.PRNGKey(t.seed), DATA_STREAM), self.repl
        )
        self.arrays = distributed.put(plan.source.device_arrays(), self.repl)
        self.eval_batches = self._eval_batches()

    # ----------------------------------------------------------------- setup
    def _key(self, static_key: str) -> str:
        """The cache key of a program: the plan's static key and the run's layout."""
        procs = f"|processes={self.procs}" if self.procs > 1 else ""
        mode = self.cfg.train.sharding
        layout = f"|sharding={mode}" if mode != "replicated" else ""
        return static_key + f"|noise={self.noise}|mesh={self.plan.batch.devices}{procs}{layout}"

    def _spec(self) -> StepSpec:
        cfg, plan = self.cfg, self.plan
        abstract = nnx.eval_shape(lambda: nets.build_model(cfg.model, plan.info, nnx.Rngs(0)))
        graphdef, _ = nnx.split(abstract)
        mode = cfg.train.sharding
        spec = StepSpec(
            key=self._key(plan.static_key),
            graphdef=graphdef,
            tx=make_optimizer(cfg.optimizer),
            optimizer=cfg.optimizer.name,
            schedule=cfg.schedule.name,
            plan=plan.batch,
            mesh=self.mesh,
            sample=None if self.host_data else plan.source.sample,
            ema=cfg.train.ema_decay > 0,
            noise_scale=self.noise,
            eval_positions=cfg.train.eval_positions,
            update_clip=cfg.optimizer.update_clip > 0,
        )
        if mode == "replicated":
            return spec
        shardings = tree_shardings(abstract_state(spec, self._build), self.mesh, mode)
        return dataclasses.replace(
            spec, state_sharding=shardings, param_sharding=shardings["params"]
        )

    def _build(self, seed_key: jax.Array) -> nnx.Module:
        return nets.build_model(self.cfg.model, self.plan.info, nnx.Rngs(params=seed_key))

    def _eval_batches(self) -> Any:
        eval_set = self.plan.source.eval_set()
        eb = self.cfg.data.eval_batch
        batches = jax.tree.map(lambda x: x.reshape((-1, eb, *x.shape[1:])), eval_set)
        spread = eb % self.plan.batch.devices == 0
        sharding = (
            jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec(None, AXIS))
            if spread
            else self.repl
        )
        return distributed.put(batches, sharding)

    def _init_state(self) -> dict[str, Any]:
        seed_key = distributed.put(jax.random.PRNGKey(self.cfg.train.seed), self.repl)
        layout = self.spec.state_sharding or self.repl
        return init_fn(self.spec, self._build, layout)(seed_key)

    # ------------------------------------------------------------- the loop
    def _evaluate(self, state: dict[str, Any]) -> float:
        params = state["ema"] if self.spec.ema else state["params"]
        return float(distributed.to_host(eval_fn(self.spec)(params, self.eval_batches)))

    def _next_event(self, step: int, scaled_until: int = 0) -> int:
        t = self.cfg.train
        cadences = [t.log_every, t.eval_every] + (
            [t.checkpoint_every] if t.checkpoint_every else []
        )
        nxt = min((step // c + 1) * c for c in cadences)
        if step < scaled_until:
            nxt = min(nxt, scaled_until)
        change = self.schedule.next_change(step) if self.ramp else None
        if change is not None:
            nxt = min(nxt, change)
        return min(nxt, self.plan.horizon)

    def _host_batches(
        self, start: int, length: int, b: int, pad_to: int | None = None, skip: int = 0
    ) -> Any:
        """``[length, b, ...]`` batches spread over the devices; each device's rows are read
        by the process that holds the device, and only those (host-side sources). With
        ``pad_to``, zeros fill the steps after ``length`` (a counted chunk skips them);
        ``skip``: batches a spike restart skipped (step u trains on batch u + skip)."""
        src, seed = self.plan.source, self.cfg.train.seed
        rows_of_steps = length
        length = pad_to or length
        sharding = jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec(None, AXIS))
        local: dict[tuple[int, int], Any] = {}

        def rows(lo: int, hi: int) -> Any:  # [length, hi - lo, ...] for one device
            if (lo, hi) not in local:
                part = slice(lo, hi)
                steps = range(start + skip, start + skip + rows_of_steps)
                per_step = [src.host_batch(seed, s, b, rows=part) for s in steps]
                per_step += [jax.tree.map(np.zeros_like, per_step[0])] * (length - len(per_step))
                local[(lo, hi)] = jax.tree.map(lambda *xs: np.stack(xs), *per_step)
            return local[(lo, hi)]

        def bounds(index: tuple[slice, ...]) -> tuple[int, int]:
            lo, hi, _ = index[1].indices(b)
            return lo, hi

        first = next(iter(sharding.addressable_devices_indices_map((length, b)).values()))
        return {  # a batch is a dict of arrays with the example axis first
            name: jax.make_array_from_callback(
                (length, b, *x.shape[2:]),
                sharding,
                lambda index, name=name: rows(*bounds(index))[name],
            )
            for name, x in rows(*bounds(first)).items()
        }

    def _save(self, state: dict[str, Any], loop: LoopState, now: float) -> None:
        """Checkpoint (every process calls this at the same steps; process 0 writes)."""
        if self.ckpt_dir is None:
            return
        loop.wall_s = now
        host = distributed.to_host(state)
        if distributed.is_leader():
            checkpoint.save(
                self.ckpt_dir,
                loop.step,
                host,
                loop.to_json(),
                restarts.checkpoints_to_keep(self.cfg.train),
                layout=self.layout,
            )
        distributed.barrier(f"checkpoint {loop.step}")  # written before anyone goes on

    def _restore(self, state: dict[str, Any]) -> tuple[dict[str, Any], LoopState]:
        """Resume from the newest valid checkpoint (process 0's listing decides for all);
        a damaged one is skipped for the one before it, with an event saying so."""
        steps = (
            checkpoint.list_steps(self.ckpt_dir) if self.ckpt_dir and self.cfg.train.resume else []
        )
        latest = distributed.broadcast_int(self._newest_valid(steps))
        if latest < 0:
            if self.cfg.train.init_from:
                return self._start_from(state, self.cfg.train.init_from)
            return state, LoopState(examples=0)
        state, host = checkpoint.restore(self.ckpt_dir, latest, state)
        written = checkpoint.layout(self.ckpt_dir, latest)
        if written is not None and written != self.layout:
            # The checkpoint holds whole arrays: any device count and sharding can read it.
            self.resharded_from = written
            if distributed.is_leader():
                log.warning(
                    "resuming at step %d from a checkpoint written on %s; this run uses %s: "
                    "the state is laid out anew (the numbers continue, up to the order of "
                    "floating-point sums)",
                    latest,
                    _layout_text(written),
                    _layout_text(self.layout),
                )
        loop = LoopState(**host)
        if loop.examples is None:  # a checkpoint written before examples were counted
            loop.examples = self.plan.examples_before(loop.step)
        self._load_detectors(loop)
        self.init_from = self.cfg.train.init_from
        if self.run_dir is not None and distributed.is_leader():
            # spikes past the checkpoint are found again, and restarts it does not count
            # are done again
            drop_events(self.run_dir, (LOSS_SPIKE, GRAD_NORM_SPIKE), loop.step)
            drop_restarts(self.run_dir, RESTART_EVENT, Restarts.of(loop.restarts).count)
        return state, loop

    def _start_from(self, state: dict[str, Any], path: str) -> tuple[dict[str, Any], LoopState]:
        """Start from another run's checkpoint (``train.init_from``): its parameters,
        optimizer state and step, and its record of the evaluations so far (initial, best
        and last loss, the target's crossing); the steps from there are this run's."""
        folder = Path(os.path.expanduser(path))
        try:
            step = int(folder.name.removeprefix("step_"))
            state, host = checkpoint.restore(folder.parent, step, state)
        except (checkpoint.CorruptCheckpoint, OSError) as exc:
            raise ConfigError("train.init_from", f"cannot read {path}: {exc}") from None
        except ValueError as exc:
            raise ConfigError(
                "train.init_from",
                f"{path} does not hold this run's model and optimizer state ({exc})",
            ) from None
        if step >= self.plan.horizon:
            raise ConfigError(
                "train.init_from",
                f"{path} is at step {step}, at or past this run's horizon of "
                f"{self.plan.horizon} steps; set train.max_steps beyond it",
            )
        base = LoopState(**host)
        loop = LoopState(
            step=base.step,
            initial_loss=base.initial_loss,
            best_eval_loss=base.best_eval_loss,
            last_eval_loss=base.last_eval_loss,
            last_eval_step=base.last_eval_step,
            steps_to_target=base.steps_to_target,
            steps_to_target_interp=base.steps_to_target_interp,
            last_log_step=base.step,
            examples=base.examples if base.examples is not None else 0,
            spikes=base.spikes,
        )
        self._load_detectors(loop)
        self.init_from = str(path)
        return state, loop

    def _load_detectors(self, loop: LoopState) -> None:
        for name, detector in self.detectors.items():
            detector.load(loop.spikes.get(name))

    def _newest_valid(self, steps: list[int]) -> int:
        """The newest of ``steps`` whose checkpoint verifies (-1: none); process 0 checks and
        says which it skipped (a warning and a ``checkpoint_skipped`` event; the damaged
        files stay for a look, and a later save at that step replaces them)."""
        if not distributed.is_leader() or self.ckpt_dir is None:
            return -1
        for step in reversed(steps):
            try:
                checkpoint.verify(self.ckpt_dir, step)
                return step
            except checkpoint.CorruptCheckpoint as exc:
                log.warning("skipping the checkpoint of step %d: %s", step, exc)
                if self.run_dir is not None:
                    record_event(self.run_dir, "checkpoint_skipped", step, error=str(exc))
        if steps:
            log.warning("no valid checkpoint left: training starts again at step 0")
        return -1

    def _report(self, step: int, rec: dict[str, Any]) -> Action:
        """Hand a record to the reporter; its answer (process 0's) holds in every process."""
        action = self.reporter.report(step, rec)
        if self.procs == 1:
            return action
        codes = list(Action)
        return codes[distributed.broadcast_int(codes.index(action))]

    def _log_record(self, loop: LoopState, last: dict[str, float], now: float) -> dict[str, Any]:
        pend = loop.pending
        rec: dict[str, Any] = {
            "train_loss": float(np.mean(pend["loss"])),
            "lr": last["lr"],
            "grad_norm": float(np.mean(pend["grad_norm"])),
            "update_norm": float(np.mean(pend["update_norm"])),
            "param_norm": last["param_norm"],
        }
        if self.noise:
            g2, tr = float(np.sum(pend["ns_g2"])), float(np.sum(pend["ns_trace"]))
            rec["noise_scale"] = tr / g2 if g2 > 0 else float("nan")
        steps = loop.step - loop.last_log_step
        elapsed = now - loop.last_log_wall
        rec.update(
            tokens=self._tokens(loop),
            examples=loop.examples,
            step_batch=self._batch_of(loop.step),
            wall_s=round(now, 4),
            steps_per_s=round(steps / elapsed, 3) if elapsed > 0 else None,
        )
        loop.pending = {}
        loop.last_log_step, loop.last_log_wall = loop.step, now
        return rec

    def _tokens(self, loop: LoopState) -> int:
        return int(loop.examples or 0) * self.plan.info.tokens_per_example

    def _batch_of(self, step: int) -> int:
        """The global batch of the update that made ``step`` (that of step 1 at step 0)."""
        if self.schedule is None:
            return self.plan.examples_per_step
        return self.schedule.batch_at(max(step - 1, 0))

    def _eval_record(self, loop: LoopState, loss: float) -> dict[str, Any]:
        rec: dict[str, Any] = {"eval_loss": loss}
        target = self.cfg.train.target_loss
        if math.isfinite(loss):
            if loop.best_eval_loss is None or loss < loop.best_eval_loss:
                loop.best_eval_loss = loss
            if target is not None and loop.steps_to_target is None and loss < target:
                loop.steps_to_target = loop.step
                prev_s, prev_l = loop.last_eval_step, loop.last_eval_loss
                loop.steps_to_target_interp = (
                    interpolated_crossing(prev_s, prev_l, loop.step, loss, target)
                    if prev_s is not None and prev_l is not None
                    else float(loop.step)
                )
        loop.last_eval_loss, loop.last_eval_step = loss, loop.step
        return rec

    def _first_non_finite(self, losses: np.ndarray) -> int | None:
        """Index of the first step of a chunk whose training loss is not finite."""
        idx = np.flatnonzero(~np.isfinite(losses))
        return int(idx[0]) if idx.size else None

    def _ending(self, loop: LoopState, action: Action, evaluated: bool) -> Ending | None:
        """Why the run ends at ``loop.step``, or None to go on. The divergence limit compares
        evaluation losses with the initial evaluation (like with like: both exact, noise-free
        where the model allows)."""
        t = self.cfg.train
        if action is Action.PRUNE:
            return Ending("pruned", "pruned by the reporter")
        if action is Action.STOP:
            return Ending("complete", "stopped by the reporter")
        loss = loop.last_eval_loss
        if evaluated and loss is not None:
            limit = t.divergence_factor * loop.initial_loss if loop.initial_loss else math.inf
            if not math.isfinite(loss) or loss > limit:
                return Ending("diverged", "eval loss diverged", loop.step)
        if t.stop_at_target and loop.steps_to_target is not None:
            return Ending("complete", "target reached")
        if loop.step >= self.plan.horizon:
            return Ending("complete", "horizon reached")
        return None

    def run(self) -> dict[str, Any]:
        """Train to the horizon (or a stop), reporting by step; returns the final status."""
        state, loop = self._restore(self._init_state())
        self.resumed_from = loop.step
        self.reporter.begin(loop.step)
        if loop.final is not None:  # this run already ended: say so again, train no more
            self.reporter.finish(loop.final)
            return loop.final
        clock0 = time.perf_counter() - loop.wall_s
        ending: Ending | None = None
        with DeferredInterrupt() as interrupt:
            if loop.step == 0:
                loss0 = self._evaluate(state)
                loop.initial_loss = loss0 if math.isfinite(loss0) and loss0 > 0 else None
                rec = self._eval_record(loop, loss0)
                rec.update(tokens=0, examples=0, wall_s=round(time.perf_counter() - clock0, 4))
                ending = self._ending(loop, self._report(0, rec), evaluated=True)
                if ending is None and self.policy is not None:
                    self._save(state, loop, time.perf_counter() - clock0)  # a restart point
            while ending is None:
                if distributed.any_process(interrupt.requested):
                    # Between chunks the state and the loop agree: keep them, and let the
                    # next run of the same command resume from here (a Ctrl-C in one
                    # process stops them all at the same step).
                    self._save(state, loop, time.perf_counter() - clock0)
                    raise KeyboardInterrupt
                state, ending = self._advance(loop, state, clock0)
        now = distributed.broadcast_seconds(time.perf_counter() - clock0)
        loop.wall_s = now
        self.state_bytes = bytes_per_device(state)
        status = self._status(loop, ending, now)
        loop.final = status
        self._save(state, loop, now)
        self.reporter.finish(status)
        return status

    def _advance(
        self, loop: LoopState, state: dict[str, Any], clock0: float
    ) -> tuple[dict[str, Any], Ending | None]:
        """Run the compiled steps up to the next event and handle that event; returns the
        new state (the old one is donated) and the ending, if the run ends here."""
        start = loop.step
        done = Restarts.of(loop.restarts)
        end = self._next_event(start, done.scaled_until)
        length = end - start
        i = self.schedule.stage_index(start) if self.ramp and self.schedule else -1
        spec, hp = self.stage_specs[i], self._hyperparams(i, start, done)
        b = spec.plan.global_batch
        skip = done.skipped
        if self.chunk_len is None:
            batches = self._host_batches(start, length, b, skip=skip) if self.host_data else None
            fn = chunk_fn(spec, length, self.host_data)
            state, metrics = fn(state, hp, self.arrays, self.key, batches)
        else:
            width = self.chunk_len
            batches = (
                self._host_batches(start, length, b, pad_to=width, skip=skip)
                if self.host_data
                else None
            )
            fn = chunk_fn(spec, width, self.host_data, counted=True)
            n = distributed.put(np.int32(length), self.repl)
            state, metrics = fn(state, hp, self.arrays, self.key, batches, n)
        metrics = {
            k: np.asarray(v, dtype=np.float64)[:length]
            for k, v in distributed.to_host(metrics).items()
        }
        bad = self._first_non_finite(metrics["loss"])
        if bad is not None:
            metrics = {k: v[: bad + 1] for k, v in metrics.items()}
            end = start + bad + 1
        for k, v in metrics.items():
            loop.pending.setdefault(k, []).extend(v.tolist())
        spikes = self._find_spikes(loop, start, metrics)
        loop.step = end
        loop.examples = int(loop.examples or 0) + (end - start) * b
        now = time.perf_counter() - clock0
        last = {k: float(v[-1]) for k, v in metrics.items()}
        if self.policy is not None and (spikes or bad is not None):
            trigger = min([*spikes, *([end] if bad is not None else [])])
            why = LOSS_SPIKE if spikes and trigger == spikes[0] else restarts.NON_FINITE
            value = float(metrics["loss"][trigger - start - 1])
            restored = self._restart(loop, state, trigger, why, value, now)
            if restored is not None:
                return restored, None
            if bad is None:  # restarts used up: the spike ends the run
                self._report(end, self._log_record(loop, last, now))
                used = Restarts.of(loop.restarts).count
                reason = f"loss spike at step {trigger} after {used} restarts"
                return state, Ending("diverged", reason, trigger)
        if bad is not None:
            self._report(end, self._log_record(loop, last, now))
            return state, Ending("diverged", "training loss is not finite", end)
        action, evaluated = self._events(state, loop, last, now)
        if self.progress is not None:
            info = {"loss": last["loss"], "eval": loop.last_eval_loss}
            self.progress(loop.step, self.plan.horizon, info)
        return state, self._ending(loop, action, evaluated)

    def _find_spikes(
        self, loop: LoopState, start: int, metrics: dict[str, np.ndarray]
    ) -> list[int]:
        """Loss and gradient-norm spikes among a chunk's steps (models/spikes.py): counted,
        kept for the status and written to events.jsonl (process 0); returns the steps of
        the loss spikes."""
        before = len(loop.loss_spike_steps)
        found = {
            LOSS_SPIKE: (loop.loss_spike_steps, metrics["loss"]),
            GRAD_NORM_SPIKE: (loop.grad_norm_spike_steps, metrics["grad_norm"]),
        }
        for name, (steps, values) in found.items():
            detector = self.detectors[name]
            for step, value, median in detector.scan(start + 1, values):
                steps.append(step)
                if self.run_dir is not None and distributed.is_leader():
                    record_event(self.run_dir, name, step, value=value, median=median)
            loop.spikes[name] = detector.to_json()
        return loop.loss_spike_steps[before:]

    def _hyperparams(self, stage: int, step: int, done: Restarts) -> Any:
        """The runtime values of a chunk from ``step``: the stage's, with the batches the
        restarts skipped and, inside a restart's scaled window, the LR and clip scaled."""
        hp = self.stage_hp[stage]
        scaled = step < done.scaled_until
        if not done.skipped and not scaled:
            return hp
        host = {k: np.float32(v) for k, v in self.plan.hyperparams().items()}
        host["lr_scale"] = np.float32(self.plan.stages[stage].lr_scale)
        host["data_skip"] = np.float32(done.skipped)
        if scaled and self.policy is not None:
            host["lr_scale"] = np.float32(host["lr_scale"] * self.policy.lr_scale)
            host["clip"] = np.float32(host["clip"] * self.policy.clip_scale)
        return distributed.put(host, self.repl)

    def _restart(
        self,
        loop: LoopState,
        state: dict[str, Any],
        spike: int,
        why: str,
        value: float,
        now: float,
    ) -> dict[str, Any] | None:
        """Go back to the newest checkpoint at least R steps before the ``spike`` step and
        skip K batches from there (models/restarts.py); returns the state restored, or None
        when M restarts are used up or no checkpoint precedes the spike (the run then ends
        as diverged)."""
        assert self.policy is not None and self.ckpt_dir is not None
        p = self.policy
        done = Restarts.of(loop.restarts)
        saved = distributed.broadcast_int(
            restarts.restart_point(checkpoint.list_steps(self.ckpt_dir), spike, p.rewind_steps)
            if distributed.is_leader()
            else -1
        )
        if done.count >= p.max_restarts or saved < 0:
            return None
        state, host = checkpoint.restore(self.ckpt_dir, saved, state)
        back = LoopState(**host)
        entry = done.add((spike, why, value), saved, p.skip_batches, loop.step - saved)
        done.scaled_until = saved + p.scaled_steps
        done.examples_redone += int(loop.examples or 0) - int(back.examples or 0)
        back.restarts = done.to_json()
        back.last_log_wall = now
        self._load_detectors(back)
        if distributed.is_leader():
            checkpoint.delete_after(self.ckpt_dir, saved)
            if self.run_dir is not None:
                drop_events(self.run_dir, (LOSS_SPIKE, GRAD_NORM_SPIKE), saved)
                info = {k: v for k, v in entry.items() if k != "spike_step"}
                record_event(self.run_dir, RESTART_EVENT, spike, **info)
            log.warning(
                "%s at step %d: restart %d of at most %d from the checkpoint of step %d, "
                "skipping %d batches",
                why.replace("_", " "),
                spike,
                done.count,
                p.max_restarts,
                saved,
                p.skip_batches,
            )
        rewind = getattr(self.reporter, "rewind", None)
        if rewind is not None:
            rewind(saved)  # the records of the abandoned steps are produced again
        self._save(state, back, now)  # the restart is kept: a resume from here is exact
        loop.__dict__.update(back.__dict__)
        return state

    def _events(
        self, state: dict[str, Any], loop: LoopState, last: dict[str, float], now: float
    ) -> tuple[Action, bool]:
        """Log, evaluate and checkpoint as the cadences say at ``loop.step``; returns the
        reporter's answer and whether an evaluation ran."""
        t, step = self.cfg.train, loop.step
        at_end = step == self.plan.horizon
        rec: dict[str, Any] = {}
        # The last step of every ramp stage is logged too: the batch of each step can be
        # read from the records.
        stage_end = self.ramp and self._batch_of(step) != self._batch_of(step + 1)
        if step % t.log_every == 0 or at_end or stage_end:
            rec.update(self._log_record(loop, last, now))
        evaluated = step % t.eval_every == 0 or at_end
        if evaluated:
            eval_rec = self._eval_record(loop, self._evaluate(state))
            rec.update(eval_rec)
            rec.setdefault("tokens", self._tokens(loop))
            rec.setdefault("examples", loop.examples)
            rec.setdefault("step_batch", self._batch_of(step))
            rec.setdefault("wall_s", round(now, 4))
        action = self._report(step, rec) if rec else Action.CONTINUE
        if t.checkpoint_every and step % t.checkpoint_every == 0 and not at_end:
            self._save(state, loop, now)
        return action, evaluated

    def _status(self, loop: LoopState, ending: Ending, now: float) -> dict[str, Any]:
        p = self.plan
        ending = self._worse_than_start(loop, ending)
        done = Restarts.of(loop.restarts)
        # compute spent: the steps of the path that ended here and those restarts abandoned
        examples = int(loop.examples or 0) + done.examples_redone
        return {
            "state": ending.state,
            "reason": ending.reason,
            "steps_done": loop.step,
            "resumed_from_step": self.resumed_from,
            "horizon_steps": p.horizon,
            "steps_to_target": loop.steps_to_target,
            "steps_to_target_interp": loop.steps_to_target_interp,
            "target_loss": self.cfg.train.target_loss,
            "best_eval_loss": loop.best_eval_loss,
            "initial_eval_loss": loop.initial_loss,
            "final_eval_loss": (
                loop.last_eval_loss
                if ending.state != "diverged" or ending.reason == ABOVE_START
                else None
            ),
            "diverged_step": ending.diverged_step,
            "params": p.n_params,
            "tokens_done": examples * p.info.tokens_per_example,
            "examples_done": examples,
            "flops_done": examples * p.flops_per_step / p.examples_per_step,
            "wall_s": round(now, 4),
            **{k: v for k, v in describe(p).items() if k != "horizon_steps"},
            "state_bytes_per_device": self.state_bytes,
            "resharded_from": self.resharded_from,
            "loss_spikes": len(loop.loss_spike_steps),
            "grad_norm_spikes": len(loop.grad_norm_spike_steps),
            "loss_spike_steps": loop.loss_spike_steps[:MAX_LISTED],
            "grad_norm_spike_steps": loop.grad_norm_spike_steps[:MAX_LISTED],
            **({"init_from": self.init_from} if self.init_from else {}),
            # null without a restart policy (the analysis reads NaN: no policy ran)
            **(
                {**done.status(), "steps_spent": loop.step + done.steps_redone}
                if self.policy is not None
                else {"spike_restarts": None, "steps_redone": None}
            ),
        }

    def _worse_than_start(self, loop: LoopState, ending: Ending) -> Ending:
        """A run that ended with its eval loss finite but above its initial eval loss made
        no progress: it is ``diverged`` (the sampler is told so), at its last evaluation."""
        final, start = loop.last_eval_loss, loop.initial_loss
        if ending.state != "complete" or final is None or start is None:
            return ending
        if math.isfinite(final) and final > start:
            return Ending("diverged", ABOVE_START, loop.last_eval_step)
        return ending


def _layout_text(layout: dict[str, Any]) -> str:
    """``4 devices (sharding fsdp)``, naming the processes when there are several."""
    procs = layout.get("processes", 1)
    where = f"{layout.get('devices')} devices" + (f" in {procs} processes" if procs > 1 else "")
    return f"{where} (sharding {layout.get('sharding', 'replicated')})"


def train(
    cfg: TrainerConfig,
    reporter: Reporter | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
    plan: RunPlan | None = None,
) -> dict[str, Any]:
    """Run one training run to its horizon (or target, divergence, prune) and return its
    final status. ``run_dir`` holds checkpoints (none are written without it); the default
    reporter is in-memory — pass `JsonlReporter(run_dir)` for the files of docs/run-dir.md.
    Raises `ConfigError` on bad input before any compute.

    Multi-process (`models.distributed`; joined here or in `prepare`, before any JAX
    computation): call it in every process with the same config and run dir. Only process 0
    uses ``reporter`` and ``progress`` (the others report to a `NullReporter`) and writes
    checkpoints; every process returns the same status."""
    distributed.maybe_initialize(cfg)
    plan = plan or prepare(cfg)
    configure_compile_cache(cfg.train.compile_cache_dir)
    if not distributed.is_leader():
        reporter, progress = NullReporter(), None
    trainer = Trainer(
        plan, Path(run_dir) if run_dir is not None else None, reporter or NullReporter(), progress
    )
    return trainer.run()
