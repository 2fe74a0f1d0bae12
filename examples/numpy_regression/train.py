#!/usr/bin/env python3
"""Linear regression by minibatch SGD with momentum, in NumPy only: a command trainer.

In a study, stepscale runs this script in the trial folder, with the trial's config in
config.json (and as key=value arguments); it reports through stepscale's tiny client and
checkpoints into the trial folder, so a killed or preempted trial resumes where it was.
By hand: ``python train.py optim.lr=0.05 train.batch_size=32``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

from stepscale import client

DEFAULTS = {
    "data": {"dim": 64, "noise": 0.5, "decay": 1.0, "seed": 1234},
    "optim": {"lr": 0.05, "momentum": 0.9},
    "train": {
        "batch_size": 32,
        "steps": 300,
        "eval_every": 10,
        "checkpoint_every": 50,
        "seed": 0,
        "sleep_s": 0.0,  # per step: stands in for a model that takes time (tests use it)
    },
}


def load_config(argv: list[str]) -> dict:
    """The trial's config.json (or the defaults), then ``key=value`` arguments."""
    cfg = client.config() or json.loads(json.dumps(DEFAULTS))
    for arg in argv:
        key, _, value = arg.partition("=")
        *parents, leaf = key.split(".")
        node = cfg
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = json.loads(value) if value not in ("", "null") else None
    return cfg


class Problem:
    """y = x·w* + noise with x ~ N(0, diag(h)), h_i = i^-decay: a noisy quadratic whose
    expected loss is known exactly, so evaluation is free of sampling noise."""

    def __init__(self, dim: int, noise: float, decay: float, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.h = np.arange(1, dim + 1, dtype=np.float64) ** -decay
        self.w_star = rng.normal(size=dim)
        self.noise = noise

    def batch(self, rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
        x = rng.normal(size=(size, self.h.size)) * np.sqrt(self.h)
        return x, x @ self.w_star + self.noise * rng.normal(size=size)

    def loss(self, w: np.ndarray) -> float:
        d = w - self.w_star
        return float(0.5 * (d * self.h) @ d + 0.5 * self.noise**2)


def main() -> int:
    cfg = load_config(sys.argv[1:])
    d, o, t = cfg["data"], cfg["optim"], cfg["train"]
    problem = Problem(d["dim"], d["noise"], d["decay"], d["seed"])
    ckpt = Path("checkpoint.npz")
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))  # checkpoint, then exit
    if ckpt.exists():
        state = np.load(ckpt, allow_pickle=False)
        w, v, step = state["w"], state["v"], int(state["step"])
        rng = np.random.default_rng()
        rng.bit_generator.state = json.loads(str(state["rng"]))
    else:
        w, v, step = np.zeros(d["dim"]), np.zeros(d["dim"]), 0
        rng = np.random.default_rng(t["seed"])
    client.begin(step)
    if step == 0:
        client.report(0, eval_loss=problem.loss(w))
    while step < t["steps"]:
        x, y = problem.batch(rng, t["batch_size"])
        grad = x.T @ (x @ w - y) / t["batch_size"]
        v = o["momentum"] * v + grad
        w = w - o["lr"] * v
        step += 1
        if t.get("sleep_s"):
            time.sleep(t["sleep_s"])
        record = {"train_loss": float(0.5 * np.mean((x @ w - y) ** 2))}
        if step % t["eval_every"] == 0 or step == t["steps"]:
            record["eval_loss"] = problem.loss(w)
        if not np.isfinite(w).all():
            client.report(step, eval_loss=float("nan"))
            client.finish("diverged", step)
            return 0
        if step % t["checkpoint_every"] == 0 or stop["now"]:
            tmp = Path("checkpoint.tmp.npz")
            np.savez(tmp, w=w, v=v, step=step, rng=json.dumps(rng.bit_generator.state))
            os.replace(tmp, ckpt)
        if not client.report(step, **record):
            return 0  # pruned: stepscale records it
        if stop["now"]:
            return 143  # checkpointed at this step; the next job resumes here
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
