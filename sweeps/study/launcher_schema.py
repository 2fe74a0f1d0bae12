"""The registry of launcher schemas: each launcher's config (a subclass of `LauncherConfig`,
the keys every launcher shares), which Hydra composes ``launcher=<name>`` onto
(``conf/launcher/<name>.yaml`` starts with ``defaults: [<name>_schema, _self_]``).

The built-in launchers' schemas (`sweeps.study.launcher_configs`) live in this wing, so a
study is typed before any launcher is imported; a launcher of one's own brings its schema
to `sweeps.launch.registry.register_launcher`, which registers it here. A composed
``launcher`` section is typed by its ``name`` (`typed_launcher`); one read back from an
older run dir, which held every launcher's keys, keeps only its own (`launcher_from_mapping`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from stepscale.errors import UsageError
from stepscale.sweeps.study.launcher_configs import BUILTIN, LauncherConfig

__all__ = ["LauncherConfig", "register_schema", "schema_of", "schemas", "typed_launcher"]

SCHEMA_SUFFIX = "_schema"  # the ConfigStore name of launcher X's schema: X_schema
_SCHEMAS: dict[str, type[LauncherConfig]] = dict(BUILTIN)


def register_schema(name: str, schema: type[LauncherConfig]) -> None:
    """Make ``schema`` the config of launcher ``name`` (its ``name`` key defaults to it)."""
    if not (isinstance(schema, type) and issubclass(schema, LauncherConfig)):
        raise TypeError(f"launcher {name!r}: its schema must subclass LauncherConfig")
    if not dataclasses.is_dataclass(schema) or schema().name != name:
        raise TypeError(f"launcher {name!r}: its schema must be a dataclass with name={name!r}")
    if not name.isidentifier():
        raise TypeError(f"launcher name {name!r}: a plain name (letters, digits, _)")
    _SCHEMAS[name] = schema


def schemas() -> dict[str, type[LauncherConfig]]:
    """Every launcher's schema by name (the built-in ones first)."""
    return dict(_SCHEMAS)


def schema_of(name: str) -> type[LauncherConfig]:
    """The schema of launcher ``name``; an unknown name → `UsageError`."""
    known = schemas()
    if name not in known:
        raise UsageError(f"launcher.name: unknown {name!r}; choose one of {', '.join(known)}")
    return known[name]


def launcher_of(schema: type) -> str | None:
    """The launcher whose schema ``schema`` is (None: the shared base or not a schema)."""
    return next((n for n, s in schemas().items() if s is schema), None)


def store_schemas() -> None:
    """Put every launcher schema into Hydra's ConfigStore, group ``launcher`` (idempotent;
    Hydra is imported here so that a trial job never imports it)."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    for name, schema in schemas().items():
        store.store(group="launcher", name=f"{name}{SCHEMA_SUFFIX}", node=schema)


def field_names(schema: type[LauncherConfig]) -> list[str]:
    """The keys of a launcher schema, in order."""
    return [f.name for f in dataclasses.fields(schema)]


def typed_launcher(cfg: LauncherConfig) -> LauncherConfig:
    """``cfg`` as an instance of its launcher's schema (a bare `LauncherConfig`, as in a
    `StudyConfig` made in Python, gets the schema's defaults for the keys it lacks)."""
    schema = schema_of(cfg.name)
    if isinstance(cfg, schema):
        return cfg
    keep = set(field_names(schema))
    return schema(**{k: v for k, v in vars(cfg).items() if k in keep})


def launcher_from_mapping(section: Mapping[str, Any]) -> LauncherConfig:
    """The typed launcher config of a ``launcher:`` section read back from a run dir:
    keys of other launchers (a run dir from before per-launcher schemas held them all)
    are dropped, unknown ones too."""
    from omegaconf import OmegaConf

    schema = schema_of(str(section.get("name", LauncherConfig.name)))
    keep = {k: v for k, v in section.items() if k in set(field_names(schema))}
    merged = OmegaConf.merge(OmegaConf.structured(schema), keep)
    return OmegaConf.to_object(merged)  # type: ignore[return-value]


def not_a_key_message(launcher: str, key: str) -> str:
    """One paragraph for ``launcher.<key>`` given to a launcher that has no such key: the
    launchers that have it, and the chosen launcher's keys."""
    known = schemas()
    owners = [n for n, s in known.items() if key in field_names(s)]
    if len(owners) == 1:
        where = f" ({key} is a key of launcher={owners[0]}: choose it with launcher={owners[0]})"
    elif owners:
        where = f" ({key} is a key of launcher={', launcher='.join(owners)}: choose one of them)"
    else:
        where = ""
    own = ", ".join(field_names(known[launcher])) if launcher in known else "?"
    return f"launcher.{key}: launcher={launcher} has no key {key!r}{where}; its keys are {own}"
