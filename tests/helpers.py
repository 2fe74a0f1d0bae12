"""Small builders shared by the tests: tiny trainer configs and JSONL readers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stepscale.models.config import TrainerConfig

WALL_KEYS = ("wall_s", "steps_per_s")


def tiny_gpt(**overrides: Any) -> TrainerConfig:
    """A tiny GPT on the Markov source, one device, a few dozen steps."""
    cfg = TrainerConfig(name="t")
    cfg.model.size = "tiny"
    cfg.data.global_batch = 8
    cfg.data.seq_len = 16
    cfg.data.eval_examples = 32
    cfg.data.eval_batch = 16
    cfg.optimizer.lr = 3e-3
    cfg.schedule.warmup_steps = 4
    cfg.train.max_steps = 24
    cfg.train.log_every = 4
    cfg.train.eval_every = 8
    cfg.train.devices = 1
    cfg.train.compile_cache_dir = ""
    return _apply(cfg, overrides)


def tiny_nqm(**overrides: Any) -> TrainerConfig:
    """The noisy quadratic model with plain SGD."""
    cfg = TrainerConfig(name="nqm")
    cfg.model.name = "nqm"
    cfg.model.dim = 32
    cfg.data.name = "nqm"
    cfg.data.global_batch = 16
    cfg.data.eval_examples = 16
    cfg.data.eval_batch = 16
    cfg.optimizer.name = "sgd"
    cfg.optimizer.b1 = 0.0
    cfg.optimizer.lr = 0.5
    cfg.schedule.name = "constant"
    cfg.schedule.warmup_steps = None
    cfg.train.max_steps = 100
    cfg.train.log_every = 10
    cfg.train.eval_every = 10
    cfg.train.devices = 1
    cfg.train.compile_cache_dir = ""
    return _apply(cfg, overrides)


def shadowing_packages(folder: Path) -> Path:
    """Give ``folder`` its own ``models/``, ``analysis/`` and ``sweeps/`` packages that fail
    on import, as a user's project might have; returns ``folder``."""
    for name in ("models", "analysis", "sweeps"):
        (folder / name).mkdir(parents=True)
        (folder / name / "__init__.py").write_text(
            "raise ImportError('the user package shadowed ours')\n"
        )
    return folder


def _apply(cfg: TrainerConfig, overrides: dict[str, Any]) -> TrainerConfig:
    """Set ``section__field=value`` overrides (``data__global_batch=4``)."""
    for key, value in overrides.items():
        section, name = key.split("__")
        node = getattr(cfg, section)
        if not hasattr(node, name):
            raise AttributeError(key)
        setattr(node, name, value)
    return cfg


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every record of a metrics file."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def without_wall(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records with the wall-clock fields removed (they differ run to run)."""
    return [{k: v for k, v in r.items() if k not in WALL_KEYS} for r in records]
