"""``optuna``: a JSON object mapping each nuisance parameter to the object that
``optuna.distributions.distribution_to_json`` writes for its distribution.

A ``reverse_log`` parameter is stored as Optuna samples it in a study: ``1 − x`` on a log
scale under the name ``<name>__1m``. Scientific axes, fixed values, conditional ranges
(the parameter's own range, or the union of its ranges, is written), units, descriptions,
budget, objective and sampler have no place in this format. Categorical choices may be
NaN or ±inf, as Optuna allows (written as JSON's ``NaN`` / ``Infinity``, as Optuna's own
``distribution_to_json`` does); an empty object is an empty search space.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import optuna.distributions as od

from stepscale.sweeps.formats.common import (
    FormatError,
    choice_param,
    clean,
    envelope,
    is_choice,
    load_json,
    name_and_path,
    named_entries,
    need,
    new_document,
    numeric_param,
)
from stepscale.sweeps.study.space_doc import dumps_stable

FMT = "optuna"
REVERSE_SUFFIX = "__1m"


def _distribution(p: dict[str, Any]) -> tuple[str, od.BaseDistribution]:
    low, high, choices = envelope(p)
    if p["type"] == "categorical":
        return p["name"], od.CategoricalDistribution(choices)
    scale, step = p["scale"], p.get("step")
    if scale == "reverse_log":
        return p["name"] + REVERSE_SUFFIX, od.FloatDistribution(
            clean(1.0 - high), clean(1.0 - low), log=True
        )
    if p["type"] == "int":
        log = scale == "log"
        # Optuna allows no step other than 1 on a log scale; the loss report shows it.
        return p["name"], od.IntDistribution(
            int(low), int(high), log=log, step=1 if log or step is None else int(step)
        )
    log = scale == "log"
    return p["name"], od.FloatDistribution(
        float(low), float(high), log=log, step=None if log or step is None else float(step)
    )


def export(doc: dict[str, Any]) -> str:
    """JSON: nuisance parameter name → Optuna distribution (as a JSON object)."""
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Optuna warns when it trims high to the step grid
        for p in doc["parameters"]:
            if p["role"] == "nuisance":
                name, dist = _distribution(p)
                out[name] = json.loads(od.distribution_to_json(dist))
    return dumps_stable(out)


def parse(text: str) -> tuple[dict[str, Any], list[str]]:
    """Every distribution becomes a nuisance parameter (``<name>__1m`` log floats become
    reverse_log parameters ``<name>``)."""
    data = load_json(text, FMT)
    entries = named_entries(data, "parameter names to distributions", FMT)
    params: list[dict[str, Any]] = []
    taken: set[str] = set()
    for name, spec in entries:
        spec_text = spec if isinstance(spec, str) else json.dumps(spec)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # deprecated distribution names still load
                dist = od.json_to_distribution(spec_text)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise FormatError(
                f"not a valid {FMT} file: $.{name}: not an Optuna distribution ({exc})"
            ) from None
        reverse = (
            name.endswith(REVERSE_SUFFIX) and isinstance(dist, od.FloatDistribution) and dist.log
        )
        base = name[: -len(REVERSE_SUFFIX)] if reverse else name
        alias, path = name_and_path(base, taken)
        if isinstance(dist, od.CategoricalDistribution):
            need(
                all(is_choice(c) for c in dist.choices),
                f"$.{name}",
                "choices must be strings, numbers (NaN and infinities too), booleans, null "
                "or lists of them",
                FMT,
            )
            params.append(choice_param(alias, path, list(dist.choices)))
        elif reverse:
            params.append(
                numeric_param(
                    alias,
                    path,
                    "float",
                    clean(1.0 - dist.high),
                    clean(1.0 - dist.low),
                    "reverse_log",
                )
            )
        elif isinstance(dist, od.IntDistribution):
            step = None if dist.step == 1 else dist.step
            params.append(
                numeric_param(
                    alias, path, "int", dist.low, dist.high, "log" if dist.log else "linear", step
                )
            )
        elif isinstance(dist, od.FloatDistribution):
            params.append(
                numeric_param(
                    alias,
                    path,
                    "float",
                    dist.low,
                    dist.high,
                    "log" if dist.log else "linear",
                    dist.step,
                )
            )
        else:  # pragma: no cover - Optuna has no other distribution classes
            raise FormatError(f"not a valid {FMT} file: $.{name}: unsupported distribution")
    return new_document(params), []
