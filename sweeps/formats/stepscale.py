"""``stepscale``: the native ``stepscale.search_space/v1`` JSON document (lossless)."""

from __future__ import annotations

from typing import Any

from stepscale.sweeps.formats.common import load_json
from stepscale.sweeps.formats.validation import validate_document
from stepscale.sweeps.study.space_doc import dumps_stable


def export(doc: dict[str, Any]) -> str:
    """The document itself, in stable JSON."""
    return dumps_stable(doc)


def parse(text: str) -> tuple[dict[str, Any], list[str]]:
    """A stepscale document, validated against the schema."""
    doc = load_json(text, "stepscale")
    validate_document(doc)
    return doc, []
