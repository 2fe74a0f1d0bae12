#!/usr/bin/env python3
"""A small MLP learning a random teacher network by minibatch SGD, in PyTorch on CPU: a
command trainer.

In a study, stepscale runs this script in the trial folder, with the trial's config in
config.json (and as key=value arguments); it reports through stepscale's tiny client and
checkpoints model, optimizer, random streams and step into ``checkpoints/`` of the trial
folder (every ``train.checkpoint_every`` steps and on SIGTERM), so a killed, stopped or
preempted trial resumes where its last checkpoint was.
By hand: ``python train.py optim.lr=0.05 train.batch_size=32``.

The data are synthetic and made here from fixed seeds (nothing is downloaded): inputs
x ~ N(0, I), labels y = teacher(x) + noise·ε with a fixed random one-hidden-layer tanh
teacher. Training draws a fresh minibatch every step (an endless stream, seeded by
``train.seed``); ``eval_loss`` is the mean squared error on a fixed held-out set.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from pathlib import Path

import torch
from torch import nn

from stepscale import client

DEFAULTS = {
    "data": {"dim": 16, "teacher_width": 32, "noise": 0.5, "eval_size": 2048, "seed": 1234},
    "model": {"width": 64},
    "optim": {"lr": 0.05, "momentum": 0.9},
    "train": {
        "batch_size": 32,
        "steps": 400,
        "eval_every": 1,
        "checkpoint_every": 50,
        "seed": 0,
        "sleep_s": 0.0,  # per step: stands in for a model that takes time (tests use it)
    },
}
CHECKPOINT = Path("checkpoints") / "last.pt"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR2, signal.SIGINT)


def load_config(argv: list[str]) -> dict:
    """The trial's config.json (or the defaults), then ``key=value`` arguments."""
    cfg = client.config() or json.loads(json.dumps(DEFAULTS))
    for arg in argv:
        key, _, value = arg.partition("=")
        *parents, leaf = key.split(".")
        node = cfg
        for p in parents:
            node = node.setdefault(p, {})
        try:
            node[leaf] = json.loads(value) if value not in ("", "null") else None
        except ValueError:  # a plain word (Hydra writes strings unquoted)
            node[leaf] = value.strip("'")
    return cfg


class Teacher:
    """The task: y = w2·tanh(W1 x) + noise·ε, the same for every trial (``data.seed``)."""

    def __init__(self, dim: int, width: int, noise: float, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.w1 = torch.randn(dim, width, generator=g) / math.sqrt(dim)
        self.w2 = torch.randn(width, 1, generator=g) * (2.0 / math.sqrt(width))
        self.dim, self.noise = dim, noise

    def sample(self, g: torch.Generator, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(size, self.dim, generator=g)
        y = torch.tanh(x @ self.w1) @ self.w2 + self.noise * torch.randn(size, 1, generator=g)
        return x, y


class SGD:
    """Minibatch SGD with heavy-ball momentum, as ``torch.optim.SGD(momentum=…)`` computes
    it (v ← μ·v + g, θ ← θ − η·v). Written out because the first use of ``torch.optim``
    imports ``torch._dynamo``, which takes ~2 s of every trial's process here."""

    def __init__(self, params: list[torch.Tensor], lr: float, momentum: float) -> None:
        self.params, self.lr, self.momentum = params, lr, momentum
        self.velocity = [torch.zeros_like(p) for p in params]

    @torch.no_grad()
    def step(self) -> None:
        for p, v in zip(self.params, self.velocity, strict=True):
            v.mul_(self.momentum).add_(p.grad)
            p.sub_(v, alpha=self.lr)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def state_dict(self) -> dict:
        return {"velocity": self.velocity}

    def load_state_dict(self, state: dict) -> None:
        for v, saved in zip(self.velocity, state["velocity"], strict=True):
            v.copy_(saved)


def make_model(dim: int, width: int) -> nn.Module:
    """The student: two hidden ReLU layers."""
    return nn.Sequential(
        nn.Linear(dim, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1)
    )


def save_checkpoint(model: nn.Module, opt: SGD, data_rng: torch.Generator, step: int) -> None:
    """Everything the run needs to go on exactly, written atomically (tmp file, rename)."""
    CHECKPOINT.parent.mkdir(exist_ok=True)
    state = {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "data_rng": data_rng.get_state(),
        "torch_rng": torch.get_rng_state(),
        "step": step,
    }
    tmp = CHECKPOINT.with_name(CHECKPOINT.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, CHECKPOINT)


def main() -> int:
    stop = {"signal": 0}
    for sig in STOP_SIGNALS:  # save a checkpoint at the end of the current step, then exit
        signal.signal(sig, lambda signum, _frame: stop.update(signal=signum))
    torch.set_num_threads(1)  # trials run side by side: one core each
    cfg = load_config(sys.argv[1:])
    d, m, o, t = cfg["data"], cfg["model"], cfg["optim"], cfg["train"]
    teacher = Teacher(d["dim"], d["teacher_width"], d["noise"], d["seed"])
    x_eval, y_eval = teacher.sample(torch.Generator().manual_seed(d["seed"] + 1), d["eval_size"])

    torch.manual_seed(t["seed"])
    model = make_model(d["dim"], m["width"])
    opt = SGD(list(model.parameters()), lr=o["lr"], momentum=o["momentum"])
    data_rng = torch.Generator().manual_seed(t["seed"] + 1)
    step = 0
    if CHECKPOINT.exists():
        state = torch.load(CHECKPOINT, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        data_rng.set_state(state["data_rng"])
        torch.set_rng_state(state["torch_rng"])
        step = int(state["step"])
        print(f"resuming from the checkpoint of step {step}", flush=True)

    def evaluate() -> float:
        with torch.no_grad():
            return float(nn.functional.mse_loss(model(x_eval), y_eval))

    client.begin(step)  # records after the checkpoint's step are done again
    if step == 0:
        client.report(0, eval_loss=evaluate())
    while step < t["steps"]:
        x, y = teacher.sample(data_rng, t["batch_size"])
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if t.get("sleep_s"):
            time.sleep(t["sleep_s"])
        record = {"train_loss": loss.item()}
        if step % t["eval_every"] == 0 or step == t["steps"]:
            record["eval_loss"] = evaluate()
        if not all(math.isfinite(v) for v in record.values()):
            client.report(step, eval_loss=float("nan"))
            client.finish("diverged", step)
            return 0
        if step % t["checkpoint_every"] == 0 or stop["signal"]:
            save_checkpoint(model, opt, data_rng, step)
        if not client.report(step, **record):
            return 0  # pruned: stepscale records it
        if stop["signal"]:
            return 128 + stop["signal"]  # checkpointed at this step; the next job resumes here
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
