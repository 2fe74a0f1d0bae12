"""Which of a study's parameters plays which role in the science: the scientific axis that
is the batch size, the axes of a ladder (model size, horizon in tokens), the nuisance
parameter that is the learning rate."""

from __future__ import annotations

from stepscale.rundir import BATCH_SIZE, HORIZON_TOKENS, LEARNING_RATE, MODEL_SIZE, quantity_of
from stepscale.sweeps.study.schema import StudyConfig


def batch_alias(cfg: StudyConfig) -> str | None:
    """The scientific axis that is the batch size (numeric), or None."""
    for alias, p in cfg.scientific.items():
        if quantity_of(p.path, p.quantity) == BATCH_SIZE:
            return alias
    return None


def lr_alias(cfg: StudyConfig) -> str | None:
    """The nuisance parameter that is the learning rate (a float), or None."""
    for alias, n in cfg.nuisance.items():
        if n.type == "float" and quantity_of(n.path, n.quantity) == LEARNING_RATE:
            return alias
    return None


def ladder_axes(cfg: StudyConfig) -> tuple[str, ...]:
    """The scientific axes other than the batch size that are a ladder's (``quantity:
    model_size`` or ``horizon_tokens``, every value a positive number), in declared order."""
    batch = batch_alias(cfg)
    return tuple(
        alias
        for alias, p in cfg.scientific.items()
        if alias != batch
        and quantity_of(p.path, p.quantity) in (MODEL_SIZE, HORIZON_TOKENS)
        and p.values
        and all(isinstance(v, int | float) and not isinstance(v, bool) and v > 0 for v in p.values)
    )
