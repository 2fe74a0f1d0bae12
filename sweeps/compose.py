"""Compose a config from the packaged Hydra tree (plus a user's --config-dir) and turn
every composition or validation failure into a `UsageError` (exit code 2)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from stepscale.sweeps import schema
from stepscale.sweeps.errors import UsageError


def conf_dir() -> Path:
    """The packaged Hydra tree (``conf/`` of the repository, installed as ``stepscale.conf``)."""
    import stepscale.conf

    return Path(stepscale.conf.__file__).resolve().parent


def compose_config(
    overrides: list[str], config_dir: str | None = None
) -> tuple[DictConfig, dict[str, Any]]:
    """Compose ``config`` with ``overrides``; returns the config and Hydra's group choices.

    ``conf=NAME`` must be among the overrides. Raises UsageError on any Hydra/OmegaConf
    error (unknown preset, typo'd key, wrong type), with Hydra's own message.
    """
    schema.register()
    extra = []
    if config_dir is not None:
        user = Path(config_dir).expanduser().resolve()
        if not user.is_dir():
            raise UsageError(f"--config-dir {config_dir}: no such directory")
        extra.append(f"hydra.searchpath=[file://{user}]")
    try:
        with initialize_config_dir(config_dir=str(conf_dir()), version_base=None, job_name="sweep"):
            cfg = compose("config", overrides=[*overrides, *extra], return_hydra_config=True)
    except (HydraException, OmegaConfBaseException) as exc:
        raise UsageError(_explain(exc)) from None
    choices = OmegaConf.to_container(cfg.hydra.runtime.choices)
    with open_struct_free(cfg):
        del cfg["hydra"]
    return cfg, choices  # type: ignore[return-value]


def prepare_study(
    overrides: list[str], config_dir: str | None
) -> tuple[Any, schema.StudyConfig, dict[str, Any]]:
    """Compose and type a study's config; fills the default name from the conf preset.
    Returns (composed config, typed config, Hydra's group choices)."""
    raw, choices = compose_config(overrides, config_dir)
    if raw.name is None:
        raw.name = choices["conf"]
    return raw, to_object(raw), choices


class open_struct_free:
    """Temporarily lift struct mode (to drop the hydra node)."""

    def __init__(self, cfg: DictConfig) -> None:
        self.cfg = cfg

    def __enter__(self) -> DictConfig:
        OmegaConf.set_struct(self.cfg, False)
        return self.cfg

    def __exit__(self, *exc: object) -> None:
        OmegaConf.set_struct(self.cfg, True)


def to_object(cfg: DictConfig) -> Any:
    """The typed dataclass instance of a composed config; missing, ill-typed or unknown
    keys → UsageError naming the key."""
    unknown = _unknown_keys(cfg)
    if unknown:
        raise UsageError(
            f"unknown config key(s): {', '.join(unknown)} (a '+key=value' override adds a key "
            "that nothing reads; check the spelling with --cfg)"
        )
    try:
        return OmegaConf.to_object(cfg)
    except OmegaConfBaseException as exc:
        raise UsageError(_explain(exc)) from None


def _unknown_keys(node: Any, prefix: str = "") -> list[str]:
    """Keys of ``node`` that its dataclass schema does not define (added with ``+``)."""
    if not isinstance(node, DictConfig):
        return []
    schema = OmegaConf.get_type(node)
    fields = set(schema.__dataclass_fields__) if dataclasses.is_dataclass(schema) else None
    found = []
    for key in node:
        if fields is not None and key not in fields:
            found.append(f"{prefix}{key}")
        else:
            found.extend(_unknown_keys(node._get_node(key), f"{prefix}{key}."))
    return found


def _explain(exc: BaseException) -> str:
    """Hydra's message plus the causes it wraps (they say *why* an override failed), without
    the config-search-path listing and OmegaConf's type bookkeeping lines."""
    parts = []
    while exc is not None:
        text = str(exc).split("Config search path:")[0]
        lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
        lines = [ln for ln in lines if not ln.startswith(("reference_type=", "object_type="))]
        if lines and "\n".join(lines) not in parts:
            parts.append("\n".join(lines))
        exc = exc.__cause__
    return "\n".join(parts)
