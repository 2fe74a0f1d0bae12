"""The typed root config registered with Hydra's ConfigStore.

For now the root is the trainer's config (`models.config.TrainerConfig`); study fields
(scientific, nuisance, fixed, budget, …) join it with the orchestrator.
"""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

from models.config import TrainerConfig

SCHEMA_NAME = "stepscale_schema"


def register() -> None:
    """Register the root schema (idempotent)."""
    ConfigStore.instance().store(name=SCHEMA_NAME, node=TrainerConfig)
