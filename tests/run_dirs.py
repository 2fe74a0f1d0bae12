"""Synthetic run directories written exactly per docs/run-dir.md, with known answers.

Every trial's eval-loss curve is built so that the steps it needs to reach a loss L are

    τ(L) = m(lr) · S_min(L) · (1 + B_crit(L)/B)
    S_min(L) = s_min · ((target − floor)/(L − floor))^γ,  B_crit(L) = b_crit · (L/target)^(−2)
    m(lr) = 1 + κ·ln(lr/η*(B))²,  η*(B) = lr0 · (B/16)^lr_alpha

so S(B) at ``target`` follows McCandlish's form with the given ``s_min`` and ``b_crit``,
B_crit(L) follows Kaplan's law with slope −2, and the optimal LR follows a power law.
Trials at ``lr_multipliers`` × η*(B); a multiplier ≥ ``diverge_above`` diverges.
Used by the analysis tests and by benchmarks/analysis_scale.py.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

FLOOR = 1.0
START_LOSS = 4.0
GAMMA = 1.0
KAPPA = 0.25
PARAMS = 100_000


@dataclass
class Spec:
    """What to write; the defaults give a 7-batch-size study with B_crit = 128 at L = 2."""

    name: str = "synthetic"
    batches: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 1024)
    variants: tuple[str, ...] = ()  # values of a categorical scientific axis `optimizer`
    variant_truth: dict[str, tuple[float, float]] = field(default_factory=dict)
    seq_lens: tuple[int, ...] = ()  # a sequence-length study (batch fixed at 32)
    s_min: float = 500.0
    b_crit: float = 128.0
    target: float = 2.0
    objective: str = "steps_to_target"
    lr0: float = 1e-3
    lr_alpha: float = 0.5
    lr_factors: dict[int, float] = field(default_factory=dict)  # η*(B) × factor, per batch size
    lr_multipliers: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0, 16.0)
    diverge_above: float = 8.0
    horizon: int = 6000
    horizons: dict[int, int] = field(default_factory=dict)  # per batch size
    log_every: int = 10
    eval_every: int = 20
    seq_len: int = 64
    # data.name in the trials' config.yaml (None: not written). Sequence sources (None,
    # markov, tokens, text) write data.seq_len and seq_len tokens per example; the others
    # (nqm, teacher) no seq_len and one token per example.
    data: str | None = None
    unit: str | None = None  # space.json's unit of the batch parameter (None: not stated)
    confirm_seeds: int = 0
    running: int = 0  # trials of the last point left running (no final status)
    fewer_trials: dict[str, int] = field(default_factory=dict)  # variant → trials dropped
    noise_scale: bool = True
    jitter: float = 0.0  # multiplicative noise on τ per trial (std of its log)
    storage: str = "journal:///runs/synthetic/study.journal"
    command: tuple[str, ...] = ("sweep", "run", "conf=synthetic")
    seed: int = 0


def _dump(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def _tau(spec: Spec, s_min: float, b_crit: float, batch: float, m: float, loss: np.ndarray):
    smin_l = s_min * ((spec.target - FLOOR) / (loss - FLOOR)) ** GAMMA
    bcrit_l = b_crit * (loss / spec.target) ** -2.0
    return m * smin_l * (1.0 + bcrit_l / batch), bcrit_l


def _curve(spec: Spec, s_min: float, b_crit: float, batch: float, m: float, steps: np.ndarray):
    """Loss and B_crit(L) at ``steps`` for a trial whose τ(L) is given by the model."""
    grid = np.geomspace(3.5 - FLOOR, 0.02, 400) + FLOOR
    tau, bcrit_l = _tau(spec, s_min, b_crit, batch, m, grid)
    tau = np.concatenate([[0.0], tau])
    loss = np.interp(steps, tau, np.concatenate([[START_LOSS], grid]))
    noise = np.interp(steps, tau, np.concatenate([[bcrit_l[0]], bcrit_l]))
    return loss, noise


def _first_below(steps: np.ndarray, loss: np.ndarray, target: float) -> tuple[Any, Any]:
    below = np.flatnonzero(loss < target)
    if below.size == 0:
        return None, None
    i = int(below[0])
    if i == 0:
        return int(steps[0]), float(steps[0])
    s0, s1, l0, l1 = steps[i - 1], steps[i], loss[i - 1], loss[i]
    frac = (math.log(target) - math.log(l0)) / (math.log(l1) - math.log(l0))
    return int(s1), float(s0 + frac * (s1 - s0))


@dataclass
class _Point:
    label: str
    values: dict[str, Any]
    batch: int
    seq: int
    s_min: float
    b_crit: float
    n_trials: int


def _points(spec: Spec) -> list[_Point]:
    n = len(spec.lr_multipliers)
    out = []
    if spec.seq_lens:
        for seq in spec.seq_lens:
            s_min = spec.s_min * (128 / seq) ** 0.3
            out.append(_Point(f"seq_len={seq}", {"seq_len": seq}, 32, seq, s_min, spec.b_crit, n))
        return out
    for variant in spec.variants or (None,):
        s_min, b_crit = spec.variant_truth.get(variant, (spec.s_min, spec.b_crit))
        for b in spec.batches:
            values: dict[str, Any] = {} if variant is None else {"optimizer": variant}
            values["batch_size"] = b
            label = ",".join(f"{k}={v}" for k, v in values.items())
            k = n - spec.fewer_trials.get(variant, 0) if variant else n
            out.append(_Point(label, values, b, spec.seq_len, s_min, b_crit, k))
    return out


def _scientific(spec: Spec) -> list[dict[str, str]]:
    if spec.seq_lens:
        return [{"name": "seq_len", "path": "data.seq_len"}]
    sci = [{"name": "optimizer", "path": "optimizer.name"}] if spec.variants else []
    return [*sci, {"name": "batch_size", "path": "data.global_batch"}]


def _space(spec: Spec) -> dict[str, Any]:
    params: list[dict[str, Any]] = []
    for s in _scientific(spec):
        values = (
            list(spec.seq_lens)
            if s["name"] == "seq_len"
            else list(spec.variants)
            if s["name"] == "optimizer"
            else list(spec.batches)
        )
        kind = "categorical" if s["name"] == "optimizer" else "int"
        param = {**s, "role": "scientific", "type": kind, "values": values}
        if spec.unit is not None and s["path"] == "data.global_batch":
            param["unit"] = spec.unit
        params.append(param)
    params.append(
        {
            "name": "lr",
            "path": "optimizer.lr",
            "role": "nuisance",
            "type": "float",
            "low": 1e-5,
            "high": 1.0,
            "scale": "log",
        }
    )
    params.append(
        {"name": "warmup", "path": "schedule.warmup_steps", "role": "nuisance", "type": "int"}
    )
    if spec.seq_lens:
        params.append(
            {"name": "batch_size", "path": "data.global_batch", "role": "fixed", "value": 32}
        )
    params.append({"name": "model_size", "path": "model.size", "role": "fixed", "value": "tiny"})
    return {"schema": "stepscale.search_space/v1", "parameters": params}


_TRAIN = (
    '{"step":%d,"train_loss":%r,"lr":%r,"grad_norm":%r,"update_norm":%r,"param_norm":%r,'
    '"tokens":%d,"examples":%d,"wall_s":%r,"steps_per_s":%r'
)


def _sequences(spec: Spec) -> bool:
    """Whether the trials' data are sequences (seq_len tokens per example)."""
    return spec.data in (None, "markov", "tokens", "text")


def _write_trial(
    spec: Spec,
    root: Path,
    pt: _Point,
    number: int,
    kind: str,
    seed: int,
    mult: float,
    rng: np.random.Generator,
    running: bool,
) -> None:
    tdir = root / "trials" / pt.label / str(number)
    tdir.mkdir(parents=True)
    horizon = spec.horizons.get(pt.batch, spec.horizon)
    lr_opt = spec.lr0 * (pt.batch / 16) ** spec.lr_alpha * spec.lr_factors.get(pt.batch, 1.0)
    lr = lr_opt * mult
    m = 1.0 + KAPPA * math.log(mult) ** 2
    if spec.jitter:
        m *= math.exp(rng.normal(0.0, spec.jitter))
    diverged = mult >= spec.diverge_above
    last = horizon // 3 if running else horizon
    if diverged:
        last = min(last, 5 * spec.log_every)
    steps = np.arange(0, last + 1, spec.log_every)
    loss, bcrit_l = _curve(spec, pt.s_min, pt.b_crit, pt.batch, m, steps.astype(float))
    tps, eps = pt.batch * (pt.seq if _sequences(spec) else 1), pt.batch
    wall = 1.0 + steps * 1e-3 * (1 + pt.batch / 256)
    cols = [
        steps.tolist(),
        (loss * 1.01).tolist(),
        np.full(steps.size, lr).tolist(),
        (1.0 / (1 + steps / 100)).tolist(),
        (0.3 / (1 + steps / 100)).tolist(),
        (10 + steps / 100).tolist(),
        (steps * tps).tolist(),
        (steps * eps).tolist(),
        wall.round(4).tolist(),
        np.full(steps.size, 100.0).tolist(),
    ]
    is_eval = steps % spec.eval_every == 0
    lines = []
    noise = (0.5 * bcrit_l).tolist()
    for i, row in enumerate(zip(*cols, strict=True)):
        if i == 0:
            lines.append(
                f'{{"step":0,"eval_loss":{float(loss[0])!r},"tokens":0,"examples":0,"wall_s":1.0}}'
            )
            continue
        text = _TRAIN % row
        if is_eval[i]:
            text += f',"eval_loss":{float(loss[i])!r}'
            if spec.noise_scale:
                text += f',"noise_scale":{noise[i]!r}'
        lines.append(text + "}")
    eval_steps, eval_loss = steps[is_eval], loss[is_eval]
    if diverged:
        s = int(steps[-1])
        lines[-1] = (
            f'{{"step":{s},"train_loss":null,"eval_loss":null,"lr":{lr!r},"tokens":{s * tps},'
            f'"examples":{s * eps},"wall_s":{float(wall[-1])!r}}}'
        )
        eval_steps, eval_loss = eval_steps[:-1], eval_loss[:-1]
    (tdir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    reached, interp = _first_below(eval_steps, eval_loss, spec.target)
    state = "running" if running else ("diverged" if diverged else "complete")
    if running:
        _dump(tdir / "status.json", {"state": "running", "steps_done": int(last)})
        objective = None
    else:
        best = float(eval_loss.min())
        if diverged:
            objective = 2.0 * horizon
        elif spec.objective == "steps_to_target":
            excess = (best - spec.target) / spec.target
            objective = float(reached) if reached is not None else horizon * (1 + min(excess, 1))
        else:
            objective = float(eval_loss[-1])
        _dump(
            tdir / "status.json",
            {
                "state": state,
                "steps_done": int(last),
                "steps_to_target": reached,
                "steps_to_target_interp": interp,
                "best_eval_loss": best,
                "final_eval_loss": None if diverged else float(eval_loss[-1]),
                "params": PARAMS,
                "tokens_per_step": tps,
                "examples_per_step": eps,
                "flops_per_step": 6.0 * PARAMS * tps,
                "flops_done": 6.0 * PARAMS * tps * int(last),
                "wall_s": float(wall[-1]),
                "horizon_steps": horizon,
                "target_loss": spec.target,
                "diverged_step": int(last) if diverged else None,
                "reason": "diverged" if diverged else "horizon reached",
            },
        )
    nuisance = {"lr": lr, "warmup": 10}
    fixed: dict[str, Any] = {"model_size": "tiny"}
    if spec.seq_lens:
        fixed["batch_size"] = 32
    _dump(
        tdir / "trial.json",
        {
            "trial": f"{pt.label}/{number}",
            "point": pt.label,
            "number": number,
            "kind": kind,
            "seed": seed,
            "scientific": pt.values,
            "nuisance": nuisance,
            "fixed": fixed,
            "state": state,
            "objective": objective,
            "attempts": 1,
            "started": "2026-11-22T03:00:01Z",
            "ended": None if running else "2026-11-22T03:00:09Z",
        },
    )
    data = "" if spec.data is None else f"  name: {spec.data}\n"
    data += f"  seq_len: {pt.seq}\n" if _sequences(spec) else ""
    (tdir / "config.yaml").write_text(
        f"optimizer:\n  lr: {lr!r}\ndata:\n  global_batch: {pt.batch}\n{data}"
    )


def make_run_dir(root: Path, spec: Spec | None = None) -> Path:
    """Write a complete run directory for ``spec`` under ``root`` and return ``root``."""
    spec = spec or Spec()
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(spec.seed)
    points = _points(spec)
    partial = spec.running > 0
    _dump(
        root / "study.json",
        {
            "name": spec.name,
            "fingerprint": {"space": "abc"},
            "created": "2026-11-22T03:00:00Z",
            "points": [
                {"label": p.label, "values": p.values, "index": i} for i, p in enumerate(points)
            ],
            "scientific": _scientific(spec),
            "objective": {"kind": spec.objective, "target_loss": spec.target},
            "budget": {
                "trials_per_point": len(spec.lr_multipliers),
                "confirm_seeds": spec.confirm_seeds,
            },
        },
    )
    _dump(root / "space.json", _space(spec))
    _dump(
        root / "run.json",
        {
            "command": list(spec.command),
            "started": "2026-11-22T03:00:00Z",
            "ended": None if partial else "2026-11-22T04:00:00Z",
            "versions": {
                "stepscale": "0.1.0",
                "jax": "0.10.2",
                "flax": "0.12.8",
                "optax": "0.2.8",
                "optuna": "5.0.0",
                "numpy": "2.3.0",
                "python": "3.11.7",
            },
            "devices": ["cpu:0", "cpu:1"],
            "platform": "cpu",
            "host": "testhost",
            "git": {"commit": "0123456789abcdef0123456789abcdef01234567", "dirty": True},
            "storage": spec.storage,
            "sessions": [
                {"started": "2026-11-22T03:00:00Z", "ended": None, "command": list(spec.command)}
            ],
        },
    )
    (root / "config.yaml").write_text(
        f"name: {spec.name}\nsampler:\n  name: tpe\n  seed: 7\ntrain:\n  seed: 0\n"
        f"objective:\n  kind: {spec.objective}\n  target_loss: {spec.target}\n"
        f"storage:\n  name: journal\n  url: {spec.storage}\n"
    )
    (root / "study.journal").write_text("")
    for pi, pt in enumerate(points):
        mults = spec.lr_multipliers[: pt.n_trials]
        n_running = spec.running if pi == len(points) - 1 else 0
        for n, mult in enumerate(mults):
            run = n >= len(mults) - n_running
            _write_trial(spec, root, pt, n, "tune", 0, mult, rng, run)
        if pi == len(points) - 1 and n_running:
            continue
        best = min((mm for mm in mults if mm < spec.diverge_above), key=lambda v: abs(math.log(v)))
        for k in range(spec.confirm_seeds):
            jitter_spec = spec if spec.jitter else replace(spec, jitter=0.03)
            _write_trial(jitter_spec, root, pt, len(mults) + k, "confirm", k + 1, best, rng, False)
    return root
