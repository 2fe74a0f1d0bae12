"""What a Hydra user types that `sweep` reads differently, answered before composing.

`sweep` composes its config with Hydra but is not a Hydra app: there is no multirun (a study
is the sweep), no ``hydra.*`` runtime settings (the run dir is ``run_dir=``), and a preset is
chosen with ``conf=NAME``. Each such habit gets a message naming what to use instead
(`UsageError`, exit 2) rather than Hydra's grammar error or a setting silently ignored.

A whole new parameter can be added from the command line,
``+nuisance.b2={path: optimizer.b2, type: float, low: 0.9, high: 0.999}`` (likewise under
``scientific.`` and ``fixed.``): OmegaConf cannot add an untyped mapping to a typed
dictionary, so such overrides are taken out before composing and merged, typed, after.
"""

from __future__ import annotations

import re
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from stepscale.errors import UsageError
from stepscale.sweeps.study import schema
from stepscale.sweeps.study.names import study_name

SECTIONS: dict[str, type] = {
    "scientific": schema.ScientificParam,
    "nuisance": schema.NuisanceParam,
    "fixed": schema.FixedParam,
    "derived": schema.DerivedParam,
}
MULTIRUN_FLAGS = ("-m", "--multirun")

_STUDY_WAY = (
    "a study is the sweep: list the values to compare under scientific.<axis>.values "
    "(e.g. scientific.batch_size.values=[8,32,128]) and give ranges to tune under "
    "nuisance.<name> (e.g. nuisance.lr.low=1e-4); `sweep run` then runs them all"
)
_HYDRA_KEYS = {
    "hydra.run.dir": "the run dir is run_dir=PATH (default runs/<name>)",
    "hydra.sweep.dir": "the run dir is run_dir=PATH (default runs/<name>)",
    "hydra.job.name": "the study's name is name=NAME",
    "hydra.searchpath": "add a folder of configs with --config-dir DIR",
    "hydra.verbose": "each trial's log is in its folder (trials/<point>/<n>/logs/)",
}


def multirun_message() -> str:
    """What `-m/--multirun` gets."""
    return f"-m/--multirun: stepscale does not use Hydra's multirun; {_STUDY_WAY}"


def check_overrides(overrides: list[str], command: str) -> None:
    """Refuse the overrides a Hydra habit gets wrong (`UsageError` naming what to use)."""
    for o in overrides:
        if o in MULTIRUN_FLAGS:
            raise UsageError(multirun_message())
        if "=" not in o and not o.startswith("~"):
            if "." in o or not o.strip():
                raise UsageError(f"{o!r} is not an override: give a value, {o}=VALUE")
            raise UsageError(
                f"{o!r} is not an override (key=value); to pick a preset write "
                f"`sweep {command} conf={o}` (`sweep list` shows them)"
            )
        key, _, value = o.lstrip("+~").partition("=")
        if not key.strip():
            raise UsageError(
                f"{o!r} is not an override: it needs a key before '=' (key=value, e.g. "
                "budget.trials_per_point=5)"
            )
        if not key.isascii():
            raise UsageError(
                f"{key}: not a config key (keys are ASCII names; --cfg shows the config's keys)"
            )
        if key == "name" and not value.isascii():  # the plain-name rule, not Hydra's lexer
            study_name(value, {}, "runs/<name>" + ("-train" if command == "train" else ""))
        if not re.sub(r"'[^']*'|\"[^\"]*\"", "", value).isascii():
            raise UsageError(
                f"{o}: Hydra's override grammar takes characters beyond ASCII only inside "
                f"quotes: write {key}='{value}'"
            )
        if key == "hydra" or key.startswith("hydra.") or key.startswith("hydra/"):
            instead = next(
                (v for k, v in _HYDRA_KEYS.items() if key == k or key.startswith(k + ".")),
                "stepscale composes its config with Hydra but does not run Hydra's app",
            )
            raise UsageError(f"{key}: Hydra's runtime settings have no effect here; {instead}")
        if _is_comma_sweep(value):
            raise UsageError(f"{o}: a comma list is Hydra's multirun syntax; {_STUDY_WAY}")


def split_added_params(
    overrides: list[str],
) -> tuple[list[str], list[tuple[str, str, Any, bool]]]:
    """(the overrides for Hydra, the parameters they give whole: (section, name, mapping,
    plain)).

    ``+nuisance.NAME={…}`` (``++`` too; also ``scientific.``, ``fixed.``, ``derived.``) is
    taken out, and so is the same without ``+`` (``plain``): it adds the parameter, or, when
    the preset has one of that name, sets the keys it gives. Any other override stays for
    Hydra."""
    kept, added = [], []
    for o in overrides:
        m = re.fullmatch(r"(\+\+?)?(scientific|nuisance|fixed|derived)\.([^.=]+)=(.*)", o, re.S)
        if m is None:
            kept.append(o)
            continue
        plus, section, name, _ = m.groups()
        value = _parsed_value(o if plus else f"+{o}")
        if not isinstance(value, dict):
            if not plus:  # e.g. nuisance.lr=null: Hydra's own answer
                kept.append(o)
                continue
            raise UsageError(
                f"{o}: give the whole parameter as a mapping, e.g. "
                f"+{section}.{name}={_EXAMPLE[section]}"
            )
        added.append((section, name, value, not plus))
    return kept, added


def add_params(cfg: DictConfig, added: list[tuple[str, str, Any, bool]]) -> None:
    """Merge the parameters `split_added_params` took out into the composed ``cfg``: a
    plain one into the preset's parameter of its name if there is one, else (and every
    ``+`` one) as the whole parameter."""
    for section, name, value, plain in added:
        kind = SECTIONS[section]
        existing = cfg[section].get(name) if plain and section in cfg else None
        try:
            base = existing if existing is not None else OmegaConf.structured(kind)
            node = OmegaConf.merge(base, value)
        except OmegaConfBaseException as exc:
            key = getattr(exc, "key", None)
            where = f"{section}.{name}.{key}" if key else f"{section}.{name}"
            raise UsageError(f"{where}: {_first_line(exc)}") from None
        with open_dict(cfg):
            cfg[section][name] = node


_EXAMPLE = {
    "nuisance": "{path: optimizer.b2, type: float, low: 0.9, high: 0.999}",
    "scientific": "{path: data.seq_len, values: [32, 64]}",
    "fixed": "{path: optimizer.weight_decay, value: 0.1}",
    "derived": '{path: optimizer.b2, expr: "0.5 ** (batch_size * 32 / t2)"}',
}


def _parsed_value(override: str) -> Any:
    try:
        parsed = OverridesParser.create().parse_overrides([override])[0]
    except HydraException as exc:
        raise UsageError(f"{override}: {_first_line(exc)}") from None
    return _plain(parsed.value())


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _is_comma_sweep(value: str) -> bool:
    """A comma outside brackets, braces and quotes (``lr=1e-3,1e-2``): Hydra's sweep."""
    depth, quote = 0, ""
    for ch in value:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            return True
    return False


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
