"""Compose a config from the packaged Hydra tree (plus a user's --config-dir) and turn
every composition or validation failure into a `UsageError` (exit code 2): Hydra's and
OmegaConf's errors, a preset file that is empty, not a mapping, not YAML or not UTF-8, a
key the chosen launcher does not have (`sweeps.study.launcher_choice`), and a study
``name`` that is not a plain name (`study_name`)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import yaml
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException, HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from stepscale.errors import UsageError
from stepscale.redact import redact
from stepscale.sweeps.study import schema
from stepscale.sweeps.study.launcher_choice import compose_for_launcher, unknown_launcher_keys
from stepscale.sweeps.study.names import study_name
from stepscale.sweeps.study.overrides import add_params, check_overrides, split_added_params

__all__ = ["compose_config", "prepare_study", "study_name", "to_object"]

_HEADER = re.compile(r"^#\s*@package\s+_global_\s*$")


def conf_dir() -> Path:
    """The packaged Hydra tree (``conf/`` of the repository, installed as ``stepscale.conf``)."""
    import stepscale.conf

    return Path(stepscale.conf.__file__).resolve().parent


def compose_config(
    overrides: list[str], config_dir: str | None = None, command: str = "run"
) -> tuple[DictConfig, dict[str, Any]]:
    """Compose ``config`` with ``overrides``; returns the config and Hydra's group choices.

    ``conf=NAME`` must be among the overrides. Raises UsageError on any Hydra/OmegaConf
    error (unknown preset, typo'd key, wrong type), with Hydra's own message, and on the
    Hydra habits `sweeps.study.overrides` answers (``command`` names the sub-command in them).
    """
    schema.register()
    check_overrides(overrides, command)
    overrides, added = split_added_params(overrides)
    extra = []
    user = None
    if config_dir is not None:
        user = Path(config_dir).expanduser().resolve()
        if not user.is_dir():
            raise UsageError(f"--config-dir {config_dir}: no such directory")
        extra.append(f"hydra.searchpath=[file://{user}]")
    presets = _preset_files(overrides, user)
    for preset in presets:
        check_preset_file(preset)

    def composed(chosen: list[str]) -> DictConfig:
        try:
            with initialize_config_dir(
                config_dir=str(conf_dir()), version_base=None, job_name="sweep"
            ):
                return compose("config", overrides=[*chosen, *extra], return_hydra_config=True)
        except ConfigCompositionException as exc:
            added = _with_new_mapping_key(exc, chosen, composed)
            if added is None:
                raise
        return composed(added)

    try:
        cfg = compose_for_launcher(composed, overrides, presets, user)
    except (HydraException, OmegaConfBaseException) as exc:
        raise UsageError(redact(_explain(exc) + _nearby_preset(overrides, user))) from None
    except yaml.YAMLError as exc:  # a group file of the user's (the preset was checked above)
        raise UsageError(f"cannot parse a YAML file of the config: {_yaml_problem(exc)}") from None
    except UnicodeDecodeError as exc:
        files = [str(p) for p in _undecodable(user)] or ["a config file"]
        raise UsageError(
            f"{', '.join(files)}: not UTF-8 text ({exc.reason} at byte {exc.start}); "
            "save it as UTF-8"
        ) from None
    choices = OmegaConf.to_container(cfg.hydra.runtime.choices)
    with open_struct_free(cfg):
        del cfg["hydra"]
    add_params(cfg, added)
    return cfg, choices  # type: ignore[return-value]


def prepare_study(
    overrides: list[str], config_dir: str | None
) -> tuple[Any, schema.StudyConfig, dict[str, Any]]:
    """Compose and type a study's config; fills the default name from the conf preset.
    Returns (composed config, typed config, Hydra's group choices)."""
    raw, choices = compose_config(overrides, config_dir)
    raw.name = study_name(raw.name, choices, "runs/<name>")
    return raw, to_object(raw), choices


_NO_KEY = re.compile(r"Could not override '([^']+)'")


def _with_new_mapping_key(
    exc: ConfigCompositionException, chosen: list[str], composed: Any
) -> list[str] | None:
    """``chosen`` with ``+`` before the override Hydra refused for naming a key that does
    not exist yet, when that key's parent is a mapping the schema declares (a
    ``dict[str, …]`` field: ``launcher.resources``, a parameter section), where a new key
    is what a user means; None otherwise (a key a dataclass lacks stays a typo). Hydra
    itself wants ``+`` to add any key."""
    match = _NO_KEY.search(str(exc))
    if match is None:
        return None
    key = match.group(1)
    plain = [o for o in chosen if not o.startswith(("+", "~")) and o.split("=", 1)[0] == key]
    if not plain or "." not in key:
        return None
    parent, grandparent = key.rsplit(".", 1)[0], key.rsplit(".", 2)[0] if key.count(".") > 1 else ""
    without = [o for o in chosen if o not in plain]
    cfg = composed(without)
    node = OmegaConf.select(cfg, parent, default=None)
    above = OmegaConf.select(cfg, grandparent, default=None) if grandparent else cfg
    declared_mapping = (
        isinstance(node, DictConfig)
        and OmegaConf.get_type(node) is dict
        and isinstance(above, DictConfig)
        and OmegaConf.get_type(above) not in (dict, None)  # a dataclass holds the mapping
    )
    if not declared_mapping:
        return None
    return [f"+{o}" if o in plain else o for o in chosen]


def _preset_files(overrides: list[str], user: Path | None) -> list[Path]:
    """The files of the ``conf=NAME`` preset that exist (the user's, the packaged one)."""
    names = [o.split("=", 1)[1] for o in overrides if o.startswith("conf=")]
    if not names or not names[-1]:
        return []
    roots = [r for r in (user, conf_dir()) if r is not None]
    files = [root / "conf" / f"{names[-1]}.yaml" for root in roots]
    return [f for f in files if f.is_file()]


def read_preset_text(path: Path) -> str:
    """A preset file's text; unreadable or not UTF-8 → `UsageError` naming the file."""
    try:
        return path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8"
        ) from None


def check_preset_file(path: Path) -> None:
    """Refuse (`UsageError`, naming the file) a preset that is not UTF-8, not YAML, empty,
    not a mapping, or without the ``# @package _global_`` header its keys need."""
    text = read_preset_text(path)
    try:
        body = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: not valid YAML: {_yaml_problem(exc)}") from None
    header = any(_HEADER.match(line.strip()) for line in _header_lines(text))
    if not text.strip():
        raise UsageError(
            f"{path} is empty: a preset is a YAML mapping of config keys under the first "
            "line '# @package _global_'"
        )
    if body is not None and not isinstance(body, dict):
        raise UsageError(
            f"{path}: the top level must be a mapping of config keys (key: value), "
            f"found a {type(body).__name__}"
        )
    if not header:
        raise UsageError(
            f"{path}: a preset starts with the line '# @package _global_' (its keys are the "
            "config's top-level keys); add it"
        )


def _header_lines(text: str) -> list[str]:
    """The leading comment lines of a YAML file, where Hydra reads ``@package``."""
    lines = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line.lstrip().startswith("#"):
            break
        lines.append(line)
    return lines


def _undecodable(user: Path | None) -> list[Path]:
    """The YAML files of the user's config dir that are not UTF-8."""
    bad = []
    for path in sorted(user.rglob("*.yaml")) if user is not None else []:
        try:
            path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            bad.append(path)
    return bad


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error on one line: what is wrong and where (file, line, column)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if mark is None or not problem:
        return "; ".join(ln.strip() for ln in str(exc).splitlines() if ln.strip())
    context = getattr(exc, "context", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}"
    if mark.name and not str(mark.name).startswith("<"):
        where = f"{mark.name}, {where}"
    return f"{context + ': ' if context else ''}{problem} ({where})"


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
    keys → UsageError naming the key (and, under ``launcher``, the launcher)."""
    wrong_launcher_keys = unknown_launcher_keys(cfg)
    if wrong_launcher_keys:
        raise UsageError("; ".join(wrong_launcher_keys))
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


def _nearby_preset(overrides: list[str], user: Path | None) -> str:
    """When ``conf=NAME`` is not found but ``NAME.yaml`` sits in a ``conf/`` folder below
    the working directory (where `sweep import -o` may have put it): the --config-dir to
    give."""
    names = [o.split("=", 1)[1] for o in overrides if o.startswith("conf=")]
    if not names or not names[-1] or user is not None:
        return ""
    for base in (Path("."), Path("conf")):
        if (base / "conf" / f"{names[-1]}.yaml").is_file():
            return f"\n{base / 'conf' / names[-1]}.yaml is here: add --config-dir {base}"
    return ""


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
