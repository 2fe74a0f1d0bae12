"""A synthetic ladder task with a known answer: a trainer whose eval loss is a set formula
of the model size N, the horizon D (tokens), the batch size B and the learning rate η, so
that η*(N, D) and B_opt(D) follow set power laws (the known-answer tests of the ladder's
fits, conf/conf/ladder_synthetic.yaml). It trains nothing and takes milliseconds.

The final loss after D tokens is

    L(N, D, B, η) = E + A·N^−α + C·D^−β + k_η·ln²(η/η*(N, D)) + k_B·ln²(B/B_opt(D))

with η*(N, D) = c_η·N^a·D^b and B_opt(D) = c_B·D^g (B in sequences of ``seq_len``
tokens). Its argmin over (B, η) is exactly (B_opt, η*). Along the run, after t steps,

    L(t) = L(N, D, B, η) + C·(τ(t)^−β − τ(T)^−β),   τ(t) = t·B·seq_len / (1 + B/B_c(D)),

the tokens of the run discounted by the critical batch size B_c(D) = c_c·D^h (McCandlish
et al. 2018's E = E_min(1 + B/B_crit)), so that steps to a target fall with B as
S_min(1 + B_c/B) far from the end. A seeded Gaussian noise of ``noise`` is added to every
evaluation (the trial's seed).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["LadderLaw", "final_loss", "loss_curve", "train", "validate"]


@dataclass(frozen=True)
class LadderLaw:
    """The set laws and loss surface of the synthetic ladder (defaults: StepFun 2025's
    η_opt = 1.79·N^−0.713·D^0.307; B_opt = 0.58·D^0.571 tokens at 64 tokens a sequence)."""

    lr_coef: float = 1.79
    lr_n: float = -0.713
    lr_d: float = 0.307
    batch_coef: float = 0.58 / 64  # sequences of 64 tokens
    batch_d: float = 0.571
    bcrit_coef: float = 0.02
    bcrit_d: float = 0.5
    e: float = 1.0
    a: float = 40.0
    alpha: float = 0.34
    c: float = 60.0
    beta: float = 0.28
    k_lr: float = 0.05
    k_batch: float = 0.03
    noise: float = 0.0

    @classmethod
    def of(cls, values: Mapping[str, Any] | None) -> LadderLaw:
        """From a mapping of field → value (unknown keys refused)."""
        values = dict(values or {})
        known = {f.name for f in fields(cls)}
        extra = sorted(set(values) - known)
        if extra:
            raise ValueError(f"ladder law: unknown key {extra[0]!r}; known: {sorted(known)}")
        return cls(**{k: float(v) for k, v in values.items()})

    def lr_opt(self, n: float, d: float) -> float:
        """η*(N, D)."""
        return self.lr_coef * n**self.lr_n * d**self.lr_d

    def batch_opt(self, d: float) -> float:
        """B_opt(D), in sequences."""
        return self.batch_coef * d**self.batch_d

    def bcrit(self, d: float) -> float:
        """B_c(D), in sequences."""
        return self.bcrit_coef * d**self.bcrit_d


def final_loss(law: LadderLaw, n: float, d: float, b: float, lr: float) -> float:
    """L(N, D, B, η) after D tokens, without noise."""
    return (
        law.e
        + law.a * n**-law.alpha
        + law.c * d**-law.beta
        + law.k_lr * math.log(lr / law.lr_opt(n, d)) ** 2
        + law.k_batch * math.log(b / law.batch_opt(d)) ** 2
    )


def _tau(law: LadderLaw, d: float, b: float, seq_len: int, step: float) -> float:
    return (step + 1) * b * seq_len / (1 + b / law.bcrit(d))


def loss_curve(
    law: LadderLaw, n: float, d: float, b: float, lr: float, seq_len: int, steps: list[int]
) -> list[float]:
    """L(t) at the given steps, without noise; the last step of the run gives
    `final_loss`."""
    horizon = max(1, math.ceil(d / (b * seq_len)))
    end = _tau(law, d, b, seq_len, horizon)
    base = final_loss(law, n, d, b, lr)
    return [
        base + law.c * (_tau(law, d, b, seq_len, t) ** -law.beta - end**-law.beta) for t in steps
    ]


# the law's own keys in a trainer config (every other key of LadderLaw may be given too)
_RUN_KEYS = ("params", "horizon", "batch", "eta", "seq_len", "evals", "seed")


def _settings(config: Mapping[str, Any]) -> tuple[LadderLaw, float, float, float, float, int, int]:
    """The law and the run of a flat config: ``params`` (N), ``horizon`` (D, tokens),
    ``batch`` (B, sequences), ``eta`` (η), ``seq_len``, ``evals`` (evaluations), ``seed``;
    any other key is a field of `LadderLaw` (e.g. ``noise``)."""
    law = LadderLaw.of({k: v for k, v in config.items() if k not in _RUN_KEYS})
    n, d, b, lr = (float(config[k]) for k in ("params", "horizon", "batch", "eta"))
    seq_len = int(config.get("seq_len", 64))
    evals = int(config.get("evals", 20))
    for key, v in (("params", n), ("horizon", d), ("batch", b), ("eta", lr)):
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{key} must be a positive number, got {v}")
    if seq_len < 1 or evals < 1:
        raise ValueError("seq_len and evals must be ≥ 1")
    return law, n, d, b, lr, seq_len, evals


def validate(config: Mapping[str, Any]) -> dict[str, Any]:
    """The trial's plan: steps = ⌈D / (B·T)⌉, what a step consumes, the model's size."""
    _law, n, d, b, _lr, seq_len, _ = _settings(config)
    return {
        "horizon_steps": max(1, math.ceil(d / (b * seq_len))),
        "tokens_per_step": int(b * seq_len),
        "examples_per_step": int(b),
        "params": int(n),
    }


def train(config: Mapping[str, Any], reporter: Any, trial_dir: Any) -> dict[str, Any]:
    """Report the formula's eval loss at ``train.evals`` evenly spaced steps (and step 0)
    and end with a complete status."""
    law, n, d, b, lr, seq_len, evals = _settings(config)
    horizon = max(1, math.ceil(d / (b * seq_len)))
    every = max(1, horizon // evals)
    steps = sorted({0, *range(every, horizon, every), horizon})
    rng = random.Random(int(config.get("seed", 0)) * 1_000_003 + int(n) % 1_000_003)
    losses = [
        v + rng.gauss(0.0, law.noise) if law.noise else v
        for v in loss_curve(law, n, d, b, lr, seq_len, steps)
    ]
    reporter.begin(0)
    for s, v in zip(steps, losses, strict=True):
        reporter.report(s, {"eval_loss": v, "train_loss": v})
    return {
        "state": "complete",
        "steps_done": horizon,
        "horizon_steps": horizon,
        "final_eval_loss": losses[-1],
        "best_eval_loss": min(losses),
        "initial_eval_loss": losses[0],
        "params": int(n),
        "params_nonembedding": int(n),
        "tokens_per_step": int(b * seq_len),
        "examples_per_step": int(b),
        "tokens_done": int(horizon * b * seq_len),
    }
