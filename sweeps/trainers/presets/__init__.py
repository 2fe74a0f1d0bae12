"""Presets for popular training frameworks (``trainer.metrics.preset: NAME``): each is one
module here that registers a `Preset` — the metrics block it stands for (keys written
beside ``preset:`` override it), how the framework takes its arguments, its own names for
the settings a scaling study sets, and what it reads and assumes (docs/trainers.md,
"Presets"). Adding one is a module and its test."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stepscale.errors import UsageError

N = r"[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|nan|inf)"  # a number in a preset's pattern
STUDY_SETTINGS = ("batch_size", "lr", "warmup", "max_steps", "seed")


@dataclass(frozen=True)
class Preset:
    """One framework's reading of its metrics and its argument conventions."""

    name: str
    metrics: dict[str, Any]  # the trainer.metrics block the preset stands for
    arg_style: str  # a style of `sweeps.trainers.arg_styles.STYLES`
    keys: dict[str, str] = field(default_factory=dict)  # STUDY_SETTINGS → the framework's name
    description: str = ""


PRESETS: dict[str, Preset] = {}


def register_preset(preset: Preset) -> Preset:
    """Register ``preset`` under its name."""
    PRESETS[preset.name] = preset
    return preset


def preset_block(name: Any) -> dict[str, Any]:
    """The metrics block of preset ``name`` (`UsageError` for an unknown one)."""
    if name not in PRESETS:
        raise UsageError(
            f"trainer.metrics.preset: unknown preset {name!r}; choose one of {', '.join(PRESETS)}"
        )
    return dict(PRESETS[name].metrics)


def _load() -> None:
    from stepscale.sweeps.trainers.presets import (  # noqa: F401 (they register themselves)
        fairseq,
        hf_trainer,
        keras,
        lightning,
        maxtext,
        megatron,
        nanogpt,
        tensorboard,
        torchtitan,
    )


_load()

__all__ = ["PRESETS", "Preset", "preset_block", "register_preset"]
