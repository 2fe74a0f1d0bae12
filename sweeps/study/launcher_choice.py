"""Which launcher a composed config is for, and its keys checked against that launcher.

``launcher=NAME`` picks the launcher's schema (its group file composes onto
``NAME_schema``). ``launcher.name`` still names the launcher, as it did when one schema held
every launcher's keys: ``launcher.name=process`` on the command line, or a preset's
``launcher: {name: inline}``, composes the config again with ``launcher=<name>``; a launcher
file of the user's that names no schema is composed onto the schema of the launcher it
names (``launcher=[slurm_schema,mycluster]``). A key the
chosen launcher does not have (``launcher.partition=gpu`` with ``launcher=local``) is a
`UsageError` naming the key, the launcher, and the launchers that have it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from stepscale.errors import UsageError
from stepscale.sweeps.study.launcher_schema import (
    SCHEMA_SUFFIX,
    LauncherConfig,
    field_names,
    launcher_of,
    not_a_key_message,
    schema_of,
    schemas,
)

_NAME_OVERRIDES = ("launcher.name=", "+launcher.name=", "++launcher.name=")


def compose_for_launcher(
    compose: Callable[[list[str]], DictConfig],
    overrides: list[str],
    presets: list[Path],
    user: Path | None = None,
) -> DictConfig:
    """``compose(overrides)``, composed again when the config's ``launcher.name`` names
    another launcher than the schema it was composed onto, or when a key failed to compose
    onto that schema but belongs to the launcher ``launcher.name`` names (also in a
    launcher file of the user's, in ``user``, that names no schema: it is composed onto its
    launcher's). Raises `UsageError` for a key the launcher does not have and for an
    unknown ``launcher.name``; other composition errors propagate."""
    retry: str | None = None
    for _ in range(2):
        attempt = overrides if retry is None else [*overrides, retry]
        try:
            cfg = compose(attempt)
        except (HydraException, OmegaConfBaseException) as exc:
            found = _launcher_key(exc)
            if found is None:
                raise
            schema, key = found
            launcher = launcher_of(schema)
            if retry is None:
                retry = _retry(launcher, key, overrides, presets, user)
                if retry is not None:
                    continue
            raise UsageError(_refusal(launcher, key)) from None
        name = str(cfg.launcher.name)
        own = launcher_of(OmegaConf.get_type(cfg.launcher))
        if own == name:
            return cfg
        schema = schema_of(name)  # an unknown name is refused here
        if own is None:  # a launcher file of the user's that names no schema: shared keys
            own_keys = OmegaConf.to_container(cfg.launcher)
            cfg.launcher = OmegaConf.merge(OmegaConf.structured(schema), own_keys)
            return cfg
        if retry is not None:
            break
        retry = f"launcher={name}"
    raise UsageError(
        f"launcher.name={cfg.launcher.name}: the launcher file chosen composes onto "
        f"launcher={own}'s schema; choose the launcher with launcher=NAME"
    )


def _retry(
    launcher: str | None, key: str, overrides: list[str], presets: list[Path], user: Path | None
) -> str | None:
    """The override that composes ``launcher.<key>`` onto the launcher meant, if any."""
    named = _named(overrides, presets)
    if launcher is None:  # the user's launcher file names no schema: put its launcher's under it
        option = _chosen_option(overrides)
        named = named or (_file_name(user / "launcher" / f"{option}.yaml") if user else None)
        if option and named in schemas():
            return f"launcher=[{named}{SCHEMA_SUFFIX},{option}]"
        return None
    if named not in (None, launcher) and _has_key(named, key):
        return f"launcher={named}"  # e.g. launcher.name=slurm launcher.partition=gpu
    return None


def unknown_launcher_keys(cfg: DictConfig) -> list[str]:
    """Messages for the keys of ``cfg.launcher`` its launcher's schema does not have (added
    with ``+launcher.<key>=…``)."""
    node = cfg.get("launcher")
    if not isinstance(node, DictConfig):
        return []
    known = set(field_names(OmegaConf.get_type(node) or LauncherConfig))
    name = str(node.get("name", ""))
    return [_refusal(name, str(k)) for k in node if k not in known]


def _refusal(launcher: str | None, key: str) -> str:
    if launcher is None:
        return (
            f"launcher.{key}: the launcher file chosen names no launcher schema, so it has only "
            f"the keys every launcher has; start the file with `defaults: [NAME{SCHEMA_SUFFIX}, "
            f"_self_]`, NAME its launcher ({', '.join(schemas())})"
        )
    return not_a_key_message(launcher, key)


def _launcher_key(exc: BaseException) -> tuple[type, str] | None:
    """(schema, key) when ``exc`` (or an error it wraps) is about a key directly under
    ``launcher`` that the launcher's schema does not have."""
    seen: BaseException | None = exc
    while seen is not None:
        full_key = str(getattr(seen, "full_key", "") or "")
        schema: Any = getattr(seen, "object_type", None)
        parts = full_key.split(".")
        if (
            len(parts) == 2
            and parts[0] == "launcher"
            and isinstance(schema, type)
            and issubclass(schema, LauncherConfig)
            and parts[1] not in field_names(schema)
        ):
            return schema, parts[1]
        seen = seen.__cause__ or seen.__context__
    return None


def _has_key(name: str | None, key: str) -> bool:
    known = schemas()
    return name in known and key in field_names(known[name])


def _named(overrides: list[str], presets: list[Path]) -> str | None:
    """The launcher ``launcher.name`` names: the last such override, else the preset's."""
    for o in reversed(overrides):
        if o.startswith(_NAME_OVERRIDES):
            return o.split("=", 1)[1].strip().strip("'\"")
    for preset in presets:
        section = _yaml(preset).get("launcher")
        if isinstance(section, dict) and isinstance(section.get("name"), str):
            return str(section["name"])
    return None


def _chosen_option(overrides: list[str]) -> str | None:
    """The launcher group option chosen on the command line (``launcher=NAME``), if any."""
    for o in reversed(overrides):
        if o.startswith("launcher="):
            value = o.split("=", 1)[1].strip()
            return value if value.replace("_", "").replace("-", "").isalnum() else None
    return None


def _file_name(path: Path) -> str | None:
    """The ``name`` a launcher group file gives."""
    name = _yaml(path).get("name")
    return name if isinstance(name, str) else None


def _yaml(path: Path) -> dict[str, Any]:
    """A YAML file's top-level mapping ({} when missing, unreadable or not a mapping)."""
    try:
        body = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    return body if isinstance(body, dict) else {}
