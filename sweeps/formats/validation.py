"""Validation of a stepscale search-space document against the JSON Schema shipped with
the package (``sweeps/study/search_space.schema.json``), plus the checks a schema cannot state."""

from __future__ import annotations

import functools
import json
import re
from importlib import resources
from typing import Any

import jsonschema

from stepscale.sweeps.formats.common import FormatError
from stepscale.sweeps.study.space_doc import SCHEMA_TAG

_TAG = re.compile(r"^stepscale\.search_space/v(\d+)$")


@functools.cache
def schema() -> dict[str, Any]:
    """The JSON Schema of ``stepscale.search_space/v1``."""
    text = (
        resources.files("stepscale.sweeps.study").joinpath("search_space.schema.json").read_text()
    )
    return json.loads(text)


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    cls = jsonschema.validators.validator_for(schema())
    return cls(schema())


def validate_document(doc: Any) -> None:
    """Raise FormatError unless ``doc`` is a valid v1 document; the message starts with
    the JSON path of the (most relevant) error, e.g. ``$.parameters[1].low``."""
    if not isinstance(doc, dict):
        raise FormatError("$: a stepscale search space is a JSON object")
    tag = doc.get("schema")
    if tag is None:
        raise FormatError(
            f'$.schema: missing; a stepscale search space starts with "schema": "{SCHEMA_TAG}"'
        )
    match = _TAG.match(tag) if isinstance(tag, str) else None
    if match is None:
        raise FormatError(f"$.schema: {tag!r} is not a stepscale search-space tag")
    if tag != SCHEMA_TAG:
        raise FormatError(
            f"$.schema: unsupported schema version v{match.group(1)} "
            f"(this stepscale reads {SCHEMA_TAG})"
        )
    error = jsonschema.exceptions.best_match(_validator().iter_errors(doc))
    if error is not None:
        raise FormatError(f"{error.json_path}: {error.message}")
    _check_semantics(doc)


def _check_semantics(doc: dict[str, Any]) -> None:
    names: set[str] = set()
    paths: dict[str, str] = {}
    scientific = {p["name"]: p for p in doc["parameters"] if p["role"] == "scientific"}
    for i, p in enumerate(doc["parameters"]):
        where = f"$.parameters[{i}]"
        if p["name"] in names:
            raise FormatError(f"{where}.name: {p['name']!r} appears twice")
        names.add(p["name"])
        if p["path"] in paths:
            raise FormatError(f"{where}.path: {p['path']} is already set by {paths[p['path']]}")
        paths[p["path"]] = p["name"]
        ranges = [("", p)]
        cond = p.get("conditional")
        if cond is not None:
            axis = scientific.get(cond["on"])
            if axis is None:
                raise FormatError(
                    f"{where}.conditional.on: {cond['on']!r} is not a scientific parameter"
                )
            known = {str(v) for v in axis["values"]}
            for value, r in cond["ranges"].items():
                if value not in known:
                    raise FormatError(
                        f"{where}.conditional.ranges: {value!r} is not a value of {cond['on']}"
                    )
                ranges.append((f".conditional.ranges[{json.dumps(value)}]", r))
        for suffix, r in ranges:
            low, high = r.get("low", p.get("low")), r.get("high", p.get("high"))
            if low is None or high is None:
                continue
            if not low < high:
                raise FormatError(f"{where}{suffix}: needs low < high, got [{low}, {high}]")
            scale = p.get("scale")
            if scale == "log" and low <= 0:
                raise FormatError(f"{where}{suffix}: a log scale needs low > 0, got {low}")
            if scale == "reverse_log" and not (low >= 0 and high < 1):
                raise FormatError(
                    f"{where}{suffix}: reverse_log (log of 1 − x) needs 0 ≤ low < high < 1, "
                    f"got [{low}, {high}]"
                )
        if p["role"] == "scientific" and len({json.dumps(v) for v in p["values"]}) < len(
            p["values"]
        ):
            raise FormatError(f"{where}.values: values repeat")
    _check_derived(doc.get("derived") or [], names, paths)


def _check_derived(derived: list[dict[str, Any]], names: set[str], paths: dict[str, str]) -> None:
    """Derived entries: new names, free paths, expressions in the grammar over the
    parameters and earlier derived values."""
    from stepscale.sweeps.study.expr import ExprError, parse
    from stepscale.sweeps.study.expr import names as expr_names

    known = set(names)
    for i, d in enumerate(derived):
        where = f"$.derived[{i}]"
        if d["name"] in known:
            raise FormatError(f"{where}.name: {d['name']!r} appears twice")
        if d.get("path") in paths:
            raise FormatError(f"{where}.path: {d['path']} is already set by {paths[d['path']]}")
        if "path" in d:
            paths[d["path"]] = d["name"]
        try:
            unknown = sorted(expr_names(parse(d["expr"])) - known)
        except ExprError as exc:
            raise FormatError(f"{where}.expr: {exc}") from None
        if unknown:
            raise FormatError(f"{where}.expr: unknown name {unknown[0]!r}")
        if "low" in d and "high" in d and d["low"] > d["high"]:
            raise FormatError(f"{where}: needs low ≤ high, got [{d['low']}, {d['high']}]")
        known.add(d["name"])
