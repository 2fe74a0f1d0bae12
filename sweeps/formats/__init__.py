"""Standard search-space formats: the stepscale document (``stepscale.search_space/v1``)
and exporters/importers for Optuna, AlgoPerf, W&B, Hydra's Optuna sweeper, the
batch-science data release and OSS Vizier's StudySpec (docs/search-space.md).

An export reports exactly what the target format cannot hold: the document is converted,
read back, and every difference is listed (``<key>: <before> → <after>``).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from stepscale.sweeps.formats import (
    algoperf,
    batch_science,
    hydra_sweeper,
    optuna_json,
    stepscale,
    vizier,
    wandb_sweep,
)
from stepscale.sweeps.formats.common import (
    GUESSES,
    KEEP_SOURCE_NAMES,
    FormatError,
    fit_trainer_types,
)
from stepscale.sweeps.formats.guesses import review_guesses
from stepscale.sweeps.formats.losses import describe_losses, loss_key
from stepscale.sweeps.formats.study_yaml import document_to_study_yaml, study_yaml
from stepscale.sweeps.formats.validation import schema, validate_document

FORMATS = ("stepscale", "optuna", "algoperf", "wandb", "hydra", "batch_science", "vizier")
_MODULES: dict[str, ModuleType] = {
    "stepscale": stepscale,
    "optuna": optuna_json,
    "algoperf": algoperf,
    "wandb": wandb_sweep,
    "hydra": hydra_sweeper,
    "batch_science": batch_science,
    "vizier": vizier,
}
EXTENSIONS = {
    "stepscale": "json",
    "optuna": "json",
    "algoperf": "json",
    "wandb": "yaml",
    "hydra": "yaml",
    "batch_science": "json",
    "vizier": "json",
}

__all__ = [
    "EXTENSIONS",
    "FORMATS",
    "FormatError",
    "describe_losses",
    "document_to_study_yaml",
    "export_space",
    "import_space",
    "loss_key",
    "schema",
    "study_yaml",
    "validate_document",
]


def _module(fmt: str) -> ModuleType:
    if fmt not in _MODULES:
        raise FormatError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return _MODULES[fmt]


def _read(module: ModuleType, text: str) -> tuple[dict[str, Any], list[str]]:
    guesses: dict[str, str] = {}
    token = GUESSES.set(guesses)
    try:
        doc, notes = module.parse(text)
    finally:
        GUESSES.reset(token)
    if module is not stepscale:  # a stepscale document's keys and types are its own
        notes += review_guesses(doc, guesses)
        notes += fit_trainer_types(doc)
    return doc, notes


def export_space(doc: dict[str, Any], fmt: str) -> tuple[str, list[str]]:
    """(text of ``doc`` in ``fmt``, what ``fmt`` cannot express). The document is
    validated first; the losses are the differences between it and the document read
    back from the text, one ``<key>: <before> → <after>`` item each."""
    module = _module(fmt)
    validate_document(doc)
    text = module.export(doc)
    back, _ = _read(module, text)
    return text, describe_losses(doc, back)


def import_space(text: str, fmt: str, own_keys: bool = False) -> tuple[dict[str, Any], list[str]]:
    """(stepscale document, warnings) of a file in ``fmt``; FormatError if the text is
    not valid for ``fmt`` or gives an invalid search space. ``own_keys``: parameters keep
    the names the source gives them as their paths (for a user's own trainer) instead of
    being mapped onto the built-in trainer's keys."""
    token = KEEP_SOURCE_NAMES.set(own_keys)
    try:
        return _import_space(text, fmt)
    finally:
        KEEP_SOURCE_NAMES.reset(token)


def _import_space(text: str, fmt: str) -> tuple[dict[str, Any], list[str]]:
    module = _module(fmt)
    doc, notes = _read(module, text)
    if module is not stepscale:
        try:
            validate_document(doc)
        except FormatError as exc:
            raise FormatError(f"the {fmt} file gives an invalid search space: {exc}") from None
    return doc, notes
