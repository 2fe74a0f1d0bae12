"""Which of a study's parameters plays which role in the science: the scientific axis that
is the batch size, the nuisance parameter that is the learning rate."""

from __future__ import annotations

from stepscale.rundir import BATCH_SIZE, LEARNING_RATE, quantity_of
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
