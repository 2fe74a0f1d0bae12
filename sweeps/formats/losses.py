"""What a conversion lost: the differences between a document and the one read back from
its conversion, one ``<key>: <before> → <after>`` item each."""

from __future__ import annotations

import json
from typing import Any

_FIELDS = (
    "path",
    "role",
    "type",
    "scale",
    "low",
    "high",
    "step",
    "choices",
    "values",
    "value",
    "unit",
    "quantity",
    "description",
    "conditional",
)
_DOMAIN = ("type", "scale", "low", "high", "step", "choices", "values", "value")
_SECTIONS = ("budget", "objective", "sampler")
_MISSING = object()
_ROLE_HINT = " (a grid axis becomes a tuned parameter: no per-point tuning)"


def _same(a: Any, b: Any) -> bool:
    # 8 and 8.0 differ: the type of a bound or a value matters to the trainer.
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _show(value: Any) -> str:
    if value is _MISSING:
        return "—"
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _domain(p: dict[str, Any]) -> Any:
    if "values" in p:
        return p["values"]
    if "choices" in p:
        return p["choices"]
    if "value" in p:
        return [p["value"]]
    return {k: p.get(k) for k in ("type", "scale", "low", "high", "step")}


def _summary(p: dict[str, Any]) -> str:
    role = p["role"]
    if role == "scientific":
        return f"scientific axis {_show(p['values'])} (no grid, no per-point tuning)"
    if role == "fixed":
        return f"fixed {_show(p['value'])}"
    if p["type"] == "categorical":
        return f"nuisance choices {_show(p.get('choices'))}"
    return f"nuisance {p['type']} [{p.get('low')}, {p.get('high')}] {p.get('scale')}"


def describe_losses(orig: dict[str, Any], back: dict[str, Any]) -> list[str]:
    """What differs between a document and the one read back from its conversion, one
    ``<key>: <before> → <after>`` item each (``—`` = absent). Keys are dotted
    (``parameters.<name>.<field>``, ``budget.<field>``…); a changed role stands for the
    change of the domain that comes with it (e.g. a scientific axis's values read back as a
    nuisance parameter's choices)."""
    out: list[str] = []
    for key in ("name", "description"):
        a, b = orig.get(key, _MISSING), back.get(key, _MISSING)
        if not _same(None if a is _MISSING else a, None if b is _MISSING else b):
            out.append(f"{key}: {_show(a)} → {_show(b)}")
    out += _param_losses(orig.get("parameters", []), back.get("parameters", []))
    out += _derived_losses(orig.get("derived") or [], back.get("derived") or [])
    for section in _SECTIONS:
        a, b = orig.get(section), back.get(section)
        if a is None and b is None:
            continue
        if b is None:
            out.append(f"{section}: {_show(a)} → —")
            continue
        if a is None:
            out.append(f"{section}: — → {_show(b)}")
            continue
        for key in sorted(set(a) | set(b)):
            va, vb = a.get(key, _MISSING), b.get(key, _MISSING)
            if va is _MISSING or vb is _MISSING or not _same(va, vb):
                out.append(f"{section}.{key}: {_show(va)} → {_show(vb)}")
    return out


def _param_losses(orig: list[dict[str, Any]], back: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    by_name = {p["name"]: p for p in back}
    free = {id(q): q for q in back}  # not matched yet, in order
    pairs: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
    for p in orig:
        q = by_name.get(p["name"])
        if q is None or id(q) not in free:  # renamed (e.g. known by its path only)
            q = next((c for c in free.values() if c["path"] == p["path"]), None)
        if q is not None:
            del free[id(q)]
        pairs.append((p, q))
    for p, q in pairs:
        key = f"parameters.{p['name']}"
        if q is None:
            out.append(f"{key}: {_summary(p)} → —")
            continue
        if q["name"] != p["name"]:
            out.append(f"{key}.name: {_show(p['name'])} → {_show(q['name'])}")
        role_changed = p["role"] != q["role"]
        retyped = p["type"] != q["type"]
        for field in _FIELDS:
            if role_changed and field in _DOMAIN:
                continue
            a, b = p.get(field, _MISSING), q.get(field, _MISSING)
            if a is _MISSING and b is _MISSING:
                continue
            if retyped and field in ("low", "high") and a == b:
                continue  # 8 → 8.0 is said by the type change
            if a is _MISSING or b is _MISSING or not _same(a, b):
                why = _ROLE_HINT if field == "role" and a == "scientific" else ""
                out.append(f"{key}.{field}: {_show(a)} → {_show(b)}{why}")
        if role_changed and not _same(_domain(p), _domain(q)):
            field = next((f for f in ("values", "choices", "value") if f in p), "low")
            out.append(f"{key}.{field}: {_show(_domain(p))} → {_show(_domain(q))}")
    for q in free.values():
        out.append(f"parameters.{q['name']}: — → {_summary(q)}")
    return out


def _derived_losses(orig: list[dict[str, Any]], back: list[dict[str, Any]]) -> list[str]:
    """Derived values (``derived``) the conversion dropped or changed; only the stepscale
    document and a study conf hold them (no other format has derived parameters)."""
    out: list[str] = []
    by_name = {d["name"]: d for d in back}
    for d in orig:
        key = f"derived.{d['name']}"
        q = by_name.pop(d["name"], None)
        if q is None:
            out.append(
                f"{key}: {d.get('path', d['name'])} = {d['expr']} → — (the format has no derived "
                "parameters: compute it in the training script)"
            )
            continue
        for field in sorted(set(d) | set(q)):
            a, b = d.get(field, _MISSING), q.get(field, _MISSING)
            if a is _MISSING or b is _MISSING or not _same(a, b):
                out.append(f"{key}.{field}: {_show(a)} → {_show(b)}")
    out += [
        f"derived.{name}: — → {q.get('path', name)} = {q['expr']}" for name, q in by_name.items()
    ]
    return out


def loss_key(item: str) -> str:
    """The dotted key a loss item is about (its text up to the first colon)."""
    return item.split(":", 1)[0]
