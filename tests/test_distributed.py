"""One training run over two processes (jax.distributed on CPU, gloo collectives).

Two Python processes with one CPU device each join through the environment
(STEPSCALE_COORDINATOR_ADDRESS / STEPSCALE_NUM_PROCESSES / STEPSCALE_PROCESS_ID) and run
`models.train.train` into one run dir; process 0's metrics must match a one-process run
on two devices (one run with its state sharded over the processes, ``train.sharding=fsdp``,
killed and resumed from its checkpoint). This file is also the worker those processes run
(``python tests/test_distributed.py SPEC.json``; under SLURM ``srun -n 2 python
tests/test_distributed.py SPEC.json`` joins through the job step instead).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import read_jsonl, tiny_gpt, without_wall, xla_flags

from stepscale.models.config import TrainConfig
from stepscale.models.distributed import join_args, maybe_initialize
from stepscale.models.errors import ConfigError
from stepscale.reporters import Action, JsonlReporter, NullReporter

# Losses of the 2-process run agree with the 1-process run to this relative tolerance
# (the same program; only the cross-device sum runs over gloo instead of in-process).
RTOL = 1e-5
CRASH_AT = 20  # the first run of the workers dies here (after the checkpoint at 16)
TIMEOUT_S = 150


def _base(**extra: Any) -> dict[str, Any]:
    """Overrides of `tiny_gpt` for both runs: 2 devices in all, checkpoints every 8 steps."""
    return dict(
        data__global_batch=8,
        train__max_steps=32,
        train__checkpoint_every=8,
        train__devices=2,
        train__distributed_timeout_s=60,
        model__n_layers=1,
        **extra,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _text_file(path: Path) -> Path:
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta", "tokens", "steps", "scale"]
    path.write_text(" ".join(rng.choice(words, size=4000)))
    return path


def _start_workers(tmp_path: Path, jobs: list[dict[str, Any]]) -> list[Any]:
    """Start the two worker processes on ``jobs`` (they join on a free local port)."""
    port = _free_port()
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"jobs": jobs, "out": str(tmp_path / "out-{process}.json")}))
    procs = []
    for pid in range(2):
        env = {
            **os.environ,
            "XLA_FLAGS": xla_flags(1),
            "JAX_PLATFORMS": "cpu",
            "STEPSCALE_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
            "STEPSCALE_NUM_PROCESSES": "2",
            "STEPSCALE_PROCESS_ID": str(pid),
        }
        with open(tmp_path / f"worker-{pid}.log", "w") as log:
            cmd = [sys.executable, __file__, str(spec)]
            procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT))
    return procs


def _wait_workers(tmp_path: Path, procs: list[Any], deadline: float) -> list[Any]:
    """Each worker's results, once both exited cleanly (their logs in the failure)."""
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
                other.wait()
            codes.append(None)
    logs = [(tmp_path / f"worker-{pid}.log").read_text()[-3000:] for pid in range(2)]
    assert codes == [0, 0], f"exit codes {codes}\n--- worker 0\n{logs[0]}\n--- worker 1\n{logs[1]}"
    return [json.loads((tmp_path / f"out-{pid}.json").read_text()) for pid in range(2)]


def _reference(cfg_overrides: dict[str, Any]) -> list[dict[str, Any]]:
    """The same run in this one process on two (fake CPU) devices."""
    from stepscale.models.train import train

    cfg = tiny_gpt(**cfg_overrides)
    cfg.train.distributed = "off"
    rep = NullReporter()
    train(cfg, rep)
    return without_wall(rep.records)


def _assert_close(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> float:
    """Same steps and keys, integers equal, floats within RTOL; returns the worst relative
    difference."""
    assert [r["step"] for r in got] == [r["step"] for r in want]
    worst = 0.0
    for g, w in zip(got, want, strict=True):
        assert g.keys() == w.keys(), (g, w)
        for k, v in w.items():
            if isinstance(v, float):
                np.testing.assert_allclose(g[k], v, rtol=RTOL, err_msg=f"{k} at step {w['step']}")
                worst = max(worst, abs(g[k] - v) / max(abs(v), 1e-30))
            else:
                assert g[k] == v, (k, w["step"])
    return worst


@pytest.mark.slow
def test_two_processes_train_like_one_process_with_two_devices(tmp_path: Path) -> None:
    markov_dir, text_dir = tmp_path / "markov", tmp_path / "text"
    text = _text_file(tmp_path / "corpus.txt")
    text_overrides = _base(data__name="text", data__path=str(text), data__eval_examples=16)
    jobs = [
        # with the state sharded over the two processes' devices (train.sharding=fsdp)
        {
            "run_dir": str(markov_dir),
            "overrides": _base(train__sharding="fsdp"),
            "crash_at": CRASH_AT,
        },
        {"run_dir": str(text_dir), "overrides": text_overrides, "crash_at": None},
        # process 0's reporter alone says "prune" (like an Optuna pruner): all must stop
        # (the first job's config: its compiled programs serve this run too)
        {
            "run_dir": str(tmp_path / "pruned"),
            "overrides": _base(train__sharding="fsdp"),
            "prune_at": 8,
        },
    ]
    t0 = time.perf_counter()
    procs = _start_workers(tmp_path, jobs)
    # the one-process references run here meanwhile
    wants = [_reference(job["overrides"]) for job in jobs[:2]]
    results = _wait_workers(tmp_path, procs, deadline=time.monotonic() + TIMEOUT_S)
    elapsed = time.perf_counter() - t0

    for job, name in ((0, "markov"), (1, "text")):
        run_dir = Path(jobs[job]["run_dir"])
        assert [(r[job]["processes"], r[job]["local_devices"]) for r in results] == [(2, 1)] * 2
        statuses = [results[pid][job]["status"] for pid in range(2)]
        assert statuses[0] == statuses[1]  # every process ends the same way
        assert statuses[0]["state"] == "complete" and statuses[0]["steps_done"] == 32
        assert statuses[0]["devices"] == 2
        assert statuses[0]["sharding"] == ("fsdp" if name == "markov" else "replicated")
        # only process 0 reported: one metrics file, written by one reporter
        assert [results[pid][job]["reporter_began"] for pid in range(2)] == [True, False]
        on_disk = json.loads((run_dir / "status.json").read_text())
        assert on_disk["state"] == "complete" and on_disk["steps_done"] == 32
        records = read_jsonl(run_dir / "metrics.jsonl")
        assert [r["step"] for r in records] == [0, 4, 8, 12, 16, 20, 24, 28, 32], name
        assert sorted(p.name for p in run_dir.iterdir()) == [
            "checkpoints",
            "metrics.jsonl",
            "status.json",
        ]
        worst = _assert_close(without_wall(records), wants[job])
        print(f"{name}: worst relative difference 2 processes vs 1 process: {worst:.2e}")

    # the crashed first run left checkpoints; the second resumed from step 16 in both
    markov = [results[pid][0] for pid in range(2)]
    assert [m["crashed_at"] for m in markov] == [CRASH_AT, CRASH_AT]
    assert [m["status"]["resumed_from_step"] for m in markov] == [16, 16]
    pruned = [results[pid][2]["status"] for pid in range(2)]
    assert pruned[0] == pruned[1]
    assert (pruned[0]["state"], pruned[0]["steps_done"]) == ("pruned", 8)
    print(f"2-process workers and references took {elapsed:.1f} s")


_SLURM_TASK = """
import jax
from stepscale.models.config import TrainerConfig
from stepscale.models.distributed import broadcast_int, maybe_initialize
assert maybe_initialize(TrainerConfig())  # train.distributed=auto
print(jax.process_index(), jax.process_count(), jax.device_count(), broadcast_int(jax.process_index() + 7))
"""


def test_an_srun_step_of_two_tasks_joins_by_itself(tmp_path: Path) -> None:
    """The SLURM path through JAX's own detection, with the variables srun sets for a step
    of two tasks on one node (no SLURM needed: JAX only reads the environment)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "STEPSCALE_"))}
    env.update(
        XLA_FLAGS=xla_flags(1),
        JAX_PLATFORMS="cpu",
        JAX_COORDINATOR_PORT=str(_free_port()),  # else 61440 + job id % 4096 (JAX's choice)
        SLURM_JOB_ID="4242",
        SLURM_STEP_NODELIST="127.0.0.1",
        SLURM_NTASKS="2",
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _SLURM_TASK],
            env={**env, "SLURM_PROCID": str(i), "SLURM_LOCALID": str(i)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    try:
        results = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in results]
    outs = [out.splitlines()[-1].split() for out, _ in results]  # gloo logs first
    # process index, processes, global devices, process 0's value broadcast
    assert outs == [["0", "2", "2", "7"], ["1", "2", "2", "7"]]


def test_join_args_read_the_config_the_environment_and_slurm() -> None:
    t = TrainConfig()
    assert join_args(t, {}) is None  # a plain process: single-process run
    explicit = {
        "STEPSCALE_COORDINATOR_ADDRESS": "10.0.0.1:1234",
        "STEPSCALE_NUM_PROCESSES": "4",
        "STEPSCALE_PROCESS_ID": "3",
    }
    got = join_args(t, explicit)
    assert got is not None
    assert (got.coordinator_address, got.num_processes, got.process_id) == ("10.0.0.1:1234", 4, 3)
    one = {**explicit, "STEPSCALE_NUM_PROCESSES": "1", "STEPSCALE_PROCESS_ID": "0"}
    assert join_args(t, one) is None
    slurm = {
        "SLURM_JOB_ID": "77",
        "SLURM_STEP_NODELIST": "node[01-02]",
        "SLURM_NTASKS": "2",
        "SLURM_PROCID": "1",
        "SLURM_LOCALID": "0",
    }
    got = join_args(t, slurm)
    assert got is not None and got.num_processes is None  # JAX reads the SLURM step
    assert join_args(t, {**slurm, "SLURM_NTASKS": "1"}) is None
    batch_script = {k: v for k, v in slurm.items() if k != "SLURM_STEP_NODELIST"}
    assert join_args(t, batch_script) is None  # sbatch's script itself is one process
    off = TrainConfig(distributed="off")
    assert join_args(off, slurm) is None and join_args(off, explicit) is None
    on = join_args(TrainConfig(distributed="on"), {})
    assert on is not None and on.num_processes is None
    with pytest.raises(ConfigError, match=r"train\.distributed"):
        join_args(TrainConfig(distributed="maybe"), {})
    with pytest.raises(ConfigError, match=r"train\.process_id"):
        join_args(TrainConfig(num_processes=2, process_id=2), {})
    with pytest.raises(ConfigError, match=r"train\.num_processes"):
        join_args(t, {"STEPSCALE_NUM_PROCESSES": "two"})


def test_joining_after_jax_was_used_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import jax

    jax.devices()  # this process has used JAX: too late to join others
    monkeypatch.setenv("STEPSCALE_COORDINATOR_ADDRESS", f"127.0.0.1:{_free_port()}")
    monkeypatch.setenv("STEPSCALE_NUM_PROCESSES", "2")
    monkeypatch.setenv("STEPSCALE_PROCESS_ID", "0")
    with pytest.raises(ConfigError, match=r"before any JAX computation"):
        maybe_initialize(tiny_gpt())
    assert maybe_initialize(tiny_gpt(train__distributed="off")) is False


# ------------------------------------------------------------------------- the worker
class _SpyReporter(JsonlReporter):
    """The run's files, remembering whether this process's reporter was used at all; asks
    to prune from step ``prune_at`` on."""

    began = False

    def __init__(self, run_dir: str, prune_at: int | None = None) -> None:
        super().__init__(run_dir)
        self.prune_at = prune_at

    def begin(self, step: int) -> None:
        _SpyReporter.began = True
        super().begin(step)

    def report(self, step: int, metrics: dict[str, Any]) -> Action:
        super().report(step, metrics)
        if self.prune_at is not None and step >= self.prune_at:
            return Action.PRUNE
        return Action.CONTINUE


def _crash_after(original: Any, crash_at: int) -> Any:
    """`Trainer._events` that dies like a killed job once the run passed ``crash_at``."""

    def events(self: Any, state: Any, loop: Any, *args: Any, **kw: Any) -> Any:
        result = original(self, state, loop, *args, **kw)
        if loop.step >= crash_at:  # in every process, as when the job is killed
            raise RuntimeError(f"simulated crash at {loop.step}")
        return result

    return events


def _run_job(job: dict[str, Any]) -> dict[str, Any]:
    from stepscale.models import train as train_mod

    cfg = tiny_gpt(**job["overrides"])
    _SpyReporter.began = False
    crashed_at = None
    if job.get("crash_at") is not None:
        original = train_mod.Trainer._events
        train_mod.Trainer._events = _crash_after(original, job["crash_at"])
        try:
            train_mod.train(cfg, _SpyReporter(job["run_dir"]), run_dir=job["run_dir"])
        except RuntimeError as exc:
            crashed_at = int(str(exc).rsplit(" ", 1)[1])
        finally:
            train_mod.Trainer._events = original
    reporter = _SpyReporter(job["run_dir"], job.get("prune_at"))
    status = train_mod.train(cfg, reporter, run_dir=job["run_dir"])
    import jax

    return {
        "status": status,
        "reporter_began": _SpyReporter.began,
        "crashed_at": crashed_at,
        "processes": jax.process_count(),
        "local_devices": jax.local_device_count(),
    }


def _worker(spec_path: str) -> None:
    """Run the jobs of a spec in this process (one of several: joined through the
    STEPSCALE_* variables, or an srun step) and write what happened to ``out`` (a path with
    ``{process}`` in it)."""
    import jax

    spec = json.loads(Path(spec_path).read_text())
    out = [_run_job(job) for job in spec["jobs"]]
    Path(spec["out"].format(process=jax.process_index())).write_text(json.dumps(out))


if __name__ == "__main__":
    _worker(sys.argv[1])
