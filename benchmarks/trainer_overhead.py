"""How much does `models.train` cost over a minimal hand-written training loop?

For the `tiny` and `small` GPT presets on the Markov source, both loops train the same
model with the same batch, optimizer and schedule, sampling batches on device, and run the
same evaluations on the same held-out set. `models.train` additionally logs every
`log_every` steps (metrics, progress), checkpoints every `checkpoint_every` steps and at
the end, and writes metrics.jsonl/status.json. Both are timed warm (programs compiled),
whole runs including initialisation and evaluations, best of a few interleaved repeats.

Then compile time: a fresh process runs a short training with an empty persistent
compilation cache (cold), then again with the cache filled (warm).

Then ``train.sharding``: in a fresh process with 4 forced CPU devices, `models.train` runs
the `small` preset data-parallel over the 4 devices with the state replicated and with it
fsdp-sharded (interleaved, best of a few), and reports steps/s and the bytes of parameters
+ optimizer state that one device holds (from the arrays' shardings, ``status.json``'s
``state_bytes_per_device``).

Ends with one JSON line: steps/s of both loops, their ratio (target ≥ 0.90 on CPU), the
cold / warm time to a finished short run, and the ``fsdp`` line.

    python benchmarks/trainer_overhead.py [--steps-tiny 400] [--steps-small 200] [--only-fsdp]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from stepscale.models import nets
from stepscale.models.config import TrainerConfig
from stepscale.models.data import build_source
from stepscale.models.train import train
from stepscale.reporters import JsonlReporter

LOG_EVERY, EVAL_EVERY, CHECKPOINT_EVERY = 10, 50, 100


def demo_config(size: str, steps: int) -> TrainerConfig:
    """The trainer config both loops reproduce."""
    cfg = TrainerConfig(name=f"bench-{size}")
    cfg.model.size = size
    cfg.data.vocab_size = 64
    cfg.data.seq_len = 64 if size == "tiny" else 128
    cfg.data.global_batch = 32
    cfg.data.eval_examples = 128
    cfg.data.eval_batch = 64
    cfg.optimizer.lr = 3e-3
    cfg.schedule.warmup_steps = 20
    cfg.train.max_steps = steps
    cfg.train.log_every = LOG_EVERY
    cfg.train.eval_every = EVAL_EVERY
    cfg.train.checkpoint_every = CHECKPOINT_EVERY
    cfg.train.devices = 1
    cfg.train.compile_cache_dir = ""
    return cfg


def time_trainer(cfg: TrainerConfig) -> float:
    """Wall seconds of one `models.train` run writing its files to a fresh run dir."""
    with tempfile.TemporaryDirectory() as run_dir:
        start = time.perf_counter()
        train(cfg, JsonlReporter(run_dir), run_dir=run_dir)
        return time.perf_counter() - start


def hand_written_loop(cfg: TrainerConfig) -> Any:
    """A minimal jitted lax.scan loop: same model, data, optimizer, warmup and evaluations."""
    source = build_source(cfg.data)
    info = source.info
    tables = {k: jnp.asarray(v) for k, v in source.device_arrays().items()}
    eval_set = jnp.asarray(source.eval_set()["tokens"]).reshape(
        -1, cfg.data.eval_batch, cfg.data.seq_len + 1
    )
    schedule = optax.linear_schedule(0.0, cfg.optimizer.lr, cfg.schedule.warmup_steps)
    tx = optax.adamw(
        schedule, b1=cfg.optimizer.b1, b2=cfg.optimizer.b2, eps=cfg.optimizer.eps, weight_decay=0.0
    )
    batch = cfg.data.global_batch

    def init(key: jax.Array) -> Any:
        model = nets.build_model(cfg.model, info, nnx.Rngs(params=key))
        graphdef, params = nnx.split(model)
        return graphdef, params

    graphdef, _ = nnx.split(nnx.eval_shape(lambda: nets.build_model(cfg.model, info, nnx.Rngs(0))))
    init_params = jax.jit(lambda k: init(k)[1])

    def loss_fn(params: Any, tokens: Any) -> jax.Array:
        return nnx.merge(graphdef, params).loss(tokens, train=True)

    @jax.jit
    def run_chunk(params: Any, opt_state: Any, step0: jax.Array, key: jax.Array) -> Any:
        def body(carry: Any, i: jax.Array) -> Any:
            p, o = carry
            b = source.sample(tables, jax.random.fold_in(key, step0 + i), batch)
            loss, g = jax.value_and_grad(loss_fn)(p, b)
            u, o = tx.update(g, o, p)
            return (optax.apply_updates(p, u), o), loss

        (params, opt_state), losses = jax.lax.scan(
            body, (params, opt_state), jnp.arange(EVAL_EVERY)
        )
        return params, opt_state, losses

    @jax.jit
    def evaluate(params: Any) -> jax.Array:
        model = nnx.merge(graphdef, params)
        return jnp.mean(jax.lax.map(lambda t: model.loss({"tokens": t}, train=False), eval_set))

    def run() -> float:
        key = jax.random.PRNGKey(0)
        params = init_params(key)
        opt_state = tx.init(params)
        last = float(evaluate(params))
        for step0 in range(0, cfg.train.max_steps, EVAL_EVERY):
            params, opt_state, _ = run_chunk(params, opt_state, jnp.int32(step0), key)
            last = float(evaluate(params))
        return last

    return run


def time_both(cfg: TrainerConfig, repeats: int) -> tuple[float, float]:
    """Best-of-``repeats`` warm wall seconds of (trainer, hand-written loop), interleaved so
    that load from elsewhere on the machine hits both alike."""
    baseline = hand_written_loop(cfg)
    baseline()  # compile
    time_trainer(cfg)  # compile
    trainer_s, baseline_s = [], []
    for _ in range(repeats):
        trainer_s.append(time_trainer(cfg))
        start = time.perf_counter()
        baseline()
        baseline_s.append(time.perf_counter() - start)
    return min(trainer_s), min(baseline_s)


_COLD_SCRIPT = """
import sys, time
start = time.perf_counter()
from benchmarks.trainer_overhead import demo_config
from stepscale.reporters import NullReporter
from stepscale.models.train import train
cfg = demo_config("tiny", 20)
cfg.train.compile_cache_dir = sys.argv[1]
imported = time.perf_counter()
train(cfg, NullReporter())
print(f"{imported - start:.3f} {time.perf_counter() - imported:.3f}")
"""


def compile_times() -> dict[str, float]:
    """Seconds for a fresh process to import and finish a 20-step run: empty cache, then filled."""
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as cache:
        for label in ("cold", "warm_cache"):
            start = time.perf_counter()
            res = subprocess.run(
                [sys.executable, "-c", _COLD_SCRIPT, cache],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            total = time.perf_counter() - start
            imports, run = (float(x) for x in res.stdout.split())
            out[f"{label}_process_s"] = round(total, 2)
            out[f"{label}_train_call_s"] = round(run, 2)
            out.setdefault("import_s", round(imports, 2))
    return out


_FSDP_SCRIPT = """
import json, sys, time
from benchmarks.trainer_overhead import demo_config
from stepscale.reporters import NullReporter
from stepscale.models.train import train
steps, repeats = int(sys.argv[1]), int(sys.argv[2])
best, status = {}, {}
for i in range(repeats + 1):  # the first round compiles
    for mode in ("replicated", "fsdp"):
        cfg = demo_config("small", steps)
        cfg.train.devices, cfg.train.sharding, cfg.train.checkpoint_every = 4, mode, 0
        start = time.perf_counter()
        status[mode] = train(cfg, NullReporter())
        if i:
            best[mode] = min(best.get(mode, float("inf")), time.perf_counter() - start)
print(json.dumps({m: [steps / best[m], status[m]["state_bytes_per_device"]] for m in best}))
"""


def fsdp_line(steps: int, repeats: int) -> dict[str, Any]:
    """Replicated vs fsdp state on 4 forced CPU devices (a fresh process, since the device
    count is fixed when JAX starts): steps/s and bytes of the state per device."""
    root = Path(__file__).resolve().parent.parent
    env = {
        **os.environ,
        "PYTHONPATH": str(root),
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
        "JAX_PLATFORMS": "cpu",
    }
    res = subprocess.run(
        [sys.executable, "-c", _FSDP_SCRIPT, str(steps), str(repeats)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    got = json.loads(res.stdout.splitlines()[-1])
    (rep_sps, rep_bytes), (fsdp_sps, fsdp_bytes) = got["replicated"], got["fsdp"]
    return {
        "devices": 4,
        "preset": "small",
        "steps": steps,
        "replicated_steps_per_s": round(rep_sps, 2),
        "fsdp_steps_per_s": round(fsdp_sps, 2),
        "steps_per_s_ratio": round(fsdp_sps / rep_sps, 3),
        "replicated_state_bytes_per_device": rep_bytes,
        "fsdp_state_bytes_per_device": fsdp_bytes,
        "bytes_ratio": round(fsdp_bytes / rep_bytes, 3),
    }


def main() -> None:
    """Run both loops on both presets and print the results, the last line as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps-tiny", type=int, default=400)
    parser.add_argument("--steps-small", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps-fsdp", type=int, default=50)
    parser.add_argument("--only-fsdp", action="store_true", help="measure only the fsdp line")
    args = parser.parse_args()
    result: dict[str, Any] = {"devices": str(jax.devices()[0].platform)}
    sizes = () if args.only_fsdp else (("tiny", args.steps_tiny), ("small", args.steps_small))
    for size, steps in sizes:
        cfg = demo_config(size, steps)
        trainer_s, baseline_s = time_both(cfg, args.repeats)
        row = {
            "steps": steps,
            "params": nets.count_params(cfg.model, build_source(cfg.data).info),
            "trainer_steps_per_s": round(steps / trainer_s, 2),
            "baseline_steps_per_s": round(steps / baseline_s, 2),
            "ratio": round(baseline_s / trainer_s, 3),
        }
        print(f"{size}: {row}", file=sys.stderr)
        result[size] = row
    if not args.only_fsdp:
        result |= compile_times()
    result["fsdp"] = fsdp_line(args.steps_fsdp, args.repeats)
    print(f"fsdp: {result['fsdp']}", file=sys.stderr)
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
