"""Standard search-space formats: the stepscale document and its JSON Schema, exporters
and importers for optuna / algoperf / wandb / hydra / batch_science, `sweep export` and
`sweep import`.

Golden files under tests/golden/<study>/ pin the exported bytes of every built-in study
(every file in conf/conf/ that declares `scientific:`); regenerate them with
``STEPSCALE_UPDATE_GOLDEN=1 pytest tests/test_formats.py``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
from pathlib import Path
from typing import Any

import jsonschema
import optuna.distributions as od
import pytest
import yaml

from stepscale.cli.formats import run_export, run_import
from stepscale.cli.main import build_parser
from stepscale.errors import UsageError
from stepscale.sweeps.formats import (
    EXTENSIONS,
    FORMATS,
    FormatError,
    document_to_study_yaml,
    export_space,
    import_space,
    loss_key,
    validate_document,
)
from stepscale.sweeps.study.compose import prepare_study
from stepscale.sweeps.study.space import build_space
from stepscale.sweeps.study.space_doc import SCHEMA_TAG, dumps_stable, space_document
from stepscale.sweeps.study.validate import check_study as _check_study

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
UPDATE = os.environ.get("STEPSCALE_UPDATE_GOLDEN") == "1"


def builtin_studies() -> list[str]:
    """Every built-in study: the files of conf/conf/ that declare `scientific:`."""
    return sorted(
        p.stem
        for p in (ROOT / "conf" / "conf").glob("*.yaml")
        if re.search(r"^scientific:", p.read_text(), re.MULTILINE)
    )


# A study with every feature of the format: two scientific axes (one categorical),
# conditional ranges, reverse_log, int step, float step, int log, units, descriptions.
RICH = """\
# @package _global_
# A study using every feature of the search-space format.
description: Every feature of the search space.
scientific:
  batch_size: {path: data.global_batch, values: [8, 16], unit: sequences, description: global batch}
  optimizer: {path: optimizer.name, values: [adamw, lion]}
nuisance:
  lr:
    path: optimizer.lr
    type: float
    low: 1.0e-4
    high: 1.0e-2
    scale: log
    by: optimizer
    ranges: {lion: {low: 1.0e-5, high: 1.0e-3}}
  b2: {path: optimizer.b2, type: float, low: 0.9, high: 0.9999, scale: reverse_log}
  warmup_steps: {path: schedule.warmup_steps, type: int, low: 0, high: 10, step: 5, unit: steps}
  clip: {path: optimizer.clip, type: float, low: 0.0, high: 2.0, step: 0.5}
  eps: {path: optimizer.eps, type: float, low: 1.0e-9, high: 1.0e-6, scale: log}
  seq_len: {path: data.seq_len, type: int, low: 8, high: 32, scale: log}
  schedule: {path: schedule.name, type: categorical, choices: [warmup_constant, warmup_cosine]}
fixed:
  model_size: {path: model.size, value: tiny, description: the smallest preset}
  wd: {path: optimizer.weight_decay, value: 0.1}
budget: {trials_per_point: 2, max_steps: 20}
objective: {kind: min_eval_loss}
sampler: {name: random, seed: 7}
"""


# A document (no conf) with the corner cases: a conditional range without a base range,
# unaligned and reverse_log steps, null / quoted / list values, a key no trainer has.
EDGE: dict[str, Any] = {
    "schema": SCHEMA_TAG,
    "name": "edge",
    "parameters": [
        {"name": "data", "path": "data.name", "role": "scientific", "type": "categorical",
         "values": ["markov", "teacher"]},
        {"name": "seed", "path": "train.seed", "role": "scientific", "type": "int",
         "values": [0, 1]},
        {"name": "opt", "path": "optimizer.name", "role": "nuisance", "type": "categorical",
         "choices": ["adamw", None, True, 1.5]},
        {"name": "eps", "path": "optimizer.eps", "role": "nuisance", "type": "float",
         "scale": "linear", "low": 0.5, "high": 10.5, "step": 2.0},
        {"name": "warmup", "path": "schedule.warmup_steps", "role": "nuisance", "type": "int",
         "scale": "linear", "low": 1, "high": 10, "step": 3},
        {"name": "lr", "path": "optimizer.lr", "role": "nuisance", "type": "float",
         "scale": "log", "conditional": {"on": "data", "ranges": {
             "markov": {"low": 1e-4, "high": 1e-2}, "teacher": {"low": 1e-3, "high": 1e-1}}}},
        {"name": "b1", "path": "optimizer.b1", "role": "nuisance", "type": "float",
         "scale": "reverse_log", "low": 0.0, "high": 0.99, "step": 0.01},
        {"name": "frac", "path": "schedule.warmup_frac", "role": "fixed",
         "type": "categorical", "value": None},
        {"name": "model", "path": "model.name", "role": "fixed", "type": "categorical",
         "value": "1"},
        {"name": "dims", "path": "model.n_layers", "role": "fixed", "type": "categorical",
         "value": [1, 2]},
        {"name": "odd", "path": "my.key", "role": "fixed", "type": "categorical",
         "value": "it's \"x\""},
    ],
    "sampler": {"name": "grid"},
    "objective": {"kind": "steps_to_target", "target_loss": 1.5, "stop_at_target": True},
    "budget": {"max_tokens": 1000, "trials_per_point": 1, "confirm_seeds": 2},
}  # fmt: skip


@pytest.fixture(scope="module")
def rich_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A --config-dir holding the RICH study as conf=rich."""
    root = tmp_path_factory.mktemp("rich")
    (root / "conf").mkdir()
    (root / "conf" / "rich.yaml").write_text(RICH)
    return root


@functools.cache
def _doc(overrides: tuple[str, ...], config_dir: str | None) -> str:
    from stepscale.sweeps.trainers.kinds import study_trainer

    _, cfg, _ = prepare_study(list(overrides), config_dir)
    _check_study(cfg)
    build_space(cfg, study_trainer(cfg, config_dir)[1])  # a function trainer's own keys
    return dumps_stable(space_document(cfg))


def study_doc(name: str, config_dir: Path | None = None, *extra: str) -> dict[str, Any]:
    """The space document of a study (a fresh copy)."""
    return json.loads(_doc((f"conf={name}", *extra), str(config_dir) if config_dir else None))


def all_docs(rich_dir: Path) -> dict[str, dict[str, Any]]:
    """Every built-in study's document plus RICH's."""
    docs = {name: study_doc(name) for name in builtin_studies()}
    docs["rich"] = study_doc("rich", rich_dir)
    return docs


# --- the document and its schema ---------------------------------------------------------


def test_builtin_studies_are_discovered() -> None:
    studies = builtin_studies()
    assert "smoke" in studies
    assert "train_smoke" not in studies  # a training preset has no scientific axis


def test_schema_file_is_a_valid_json_schema_shipped_with_the_package() -> None:
    from importlib import resources

    shipped = json.loads(
        resources.files("stepscale.sweeps.study").joinpath("search_space.schema.json").read_text()
    )
    jsonschema.Draft202012Validator.check_schema(shipped)
    assert shipped == json.loads(
        (ROOT / "sweeps" / "study" / "search_space.schema.json").read_text()
    )
    assert shipped["properties"]["schema"]["const"] == SCHEMA_TAG


@pytest.mark.parametrize("study", builtin_studies())
def test_space_json_of_every_builtin_validates_and_is_stable(study: str) -> None:
    doc = study_doc(study)
    schema = json.loads((ROOT / "sweeps" / "study" / "search_space.schema.json").read_text())
    jsonschema.validate(doc, schema)  # the schema file itself, not only our wrapper
    validate_document(doc)
    _, cfg, _ = prepare_study([f"conf={study}"], None)
    assert dumps_stable(space_document(cfg)) == dumps_stable(doc)
    assert {p["role"] for p in doc["parameters"]} >= {"scientific"}


def test_rich_document_holds_every_feature(rich_dir: Path) -> None:
    doc = study_doc("rich", rich_dir)
    validate_document(doc)
    params = {p["name"]: p for p in doc["parameters"]}
    assert params["lr"]["conditional"] == {
        "on": "optimizer",
        "ranges": {"lion": {"low": 1e-05, "high": 0.001}},
    }
    assert params["warmup_steps"] | {} == {
        "name": "warmup_steps",
        "path": "schedule.warmup_steps",
        "role": "nuisance",
        "type": "int",
        "scale": "linear",
        "low": 0,
        "high": 10,
        "step": 5,
        "unit": "steps",
    }
    assert isinstance(params["clip"]["low"], float) and params["b2"]["scale"] == "reverse_log"
    assert params["wd"] == {
        "name": "wd",
        "path": "optimizer.weight_decay",
        "role": "fixed",
        "type": "float",
        "value": 0.1,
    }
    assert doc["sampler"] == {"name": "random", "seed": 7}
    assert doc["description"] == "Every feature of the search space."


def test_dumps_stable_gives_the_same_bytes_for_the_same_content() -> None:
    a = {"b": [1, 2.0, 1e-05], "a": {"y": 0.1, "x": "é"}}
    b = {"a": {"x": "é", "y": 0.1}, "b": [1, 2.0, 1e-05]}
    assert dumps_stable(a) == dumps_stable(b)
    assert '"b": [\n    1,\n    2.0,\n    1e-05\n  ]' in dumps_stable(a)
    # Optuna allows NaN and infinities as categorical choices: written as its JSON does
    assert (
        dumps_stable({"x": [float("nan"), float("-inf")]})
        == '{\n  "x": [\n    NaN,\n    -Infinity\n  ]\n}\n'
    )


def _bad(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(FormatError) as info:
        validate_document(doc)
    assert message in str(info.value), str(info.value)


def test_validation_errors_name_the_json_path() -> None:
    doc = study_doc("smoke")
    bad = json.loads(json.dumps(doc))
    bad["parameters"][1]["low"] = "small"
    _bad(bad, "$.parameters[1].low")
    bad = json.loads(json.dumps(doc))
    bad["parameters"][1]["scale"] = "sqrt"
    _bad(bad, "$.parameters[1].scale")
    bad = json.loads(json.dumps(doc))
    del bad["parameters"][0]["values"]
    _bad(bad, "$.parameters[0]")
    bad = json.loads(json.dumps(doc))
    bad["parameters"][1]["low"], bad["parameters"][1]["high"] = 0.1, 0.01
    _bad(bad, "$.parameters[1]: needs low < high")
    bad = json.loads(json.dumps(doc))
    bad["parameters"][1]["low"] = -0.1
    _bad(bad, "$.parameters[1]: a log scale needs low > 0")
    bad["parameters"][1] |= {"scale": "reverse_log", "low": 0.9, "high": 1.0}
    _bad(bad, "$.parameters[1]: reverse_log (log of 1 − x) needs 0 ≤ low < high < 1")
    bad = json.loads(json.dumps(doc))
    bad["parameters"][2]["name"] = "lr"
    _bad(bad, "$.parameters[2].name: 'lr' appears twice")
    bad = json.loads(json.dumps(doc))
    bad["budget"]["max_stepz"] = 3
    _bad(bad, "$.budget")
    _bad({**doc, "schema": "stepscale.search_space/v2"}, "unsupported schema version v2")
    _bad({k: v for k, v in doc.items() if k != "schema"}, "$.schema: missing")
    _bad({**doc, "schema": "something/v1"}, "not a stepscale search-space tag")


def test_conditional_must_name_a_scientific_value(rich_dir: Path) -> None:
    doc = study_doc("rich", rich_dir)
    lr = next(p for p in doc["parameters"] if p["name"] == "lr")
    lr["conditional"]["ranges"]["sgd"] = {"low": 0.1}
    _bad(doc, "'sgd' is not a value of optimizer")
    lr["conditional"]["on"] = "lr"
    _bad(doc, "'lr' is not a scientific parameter")


# --- golden files --------------------------------------------------------------------------


@pytest.mark.parametrize("study", builtin_studies())
def test_golden_exports(study: str) -> None:
    doc = study_doc(study)
    folder = GOLDEN / study
    losses_by_format = {}
    for fmt in FORMATS:
        text, losses = export_space(doc, fmt)
        losses_by_format[fmt] = losses
        path = folder / f"{fmt}.{EXTENSIONS[fmt]}"
        if UPDATE:
            folder.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        assert path.exists(), f"no golden {path}: run with STEPSCALE_UPDATE_GOLDEN=1"
        assert text == path.read_text(), f"{path} changed; STEPSCALE_UPDATE_GOLDEN=1 rewrites it"
    losses_path = folder / "losses.json"
    if UPDATE:
        losses_path.write_text(dumps_stable(losses_by_format))
    assert losses_by_format == json.loads(losses_path.read_text())


# --- round trips ---------------------------------------------------------------------------

_NUMERIC = ("low", "high", "step", "scale")


def _kept(fmt: str, p: dict[str, Any]) -> tuple[str, ...]:
    """Fields of a parameter that ``fmt`` must carry through a round trip."""
    role, kind, scale = p["role"], p["type"], p.get("scale")
    conditional = "conditional" in p
    if fmt == "stepscale":
        return tuple(k for k in p if k != "name")
    if role == "fixed":
        if fmt == "vizier" and not isinstance(p["value"], (str, int, float)):
            return ("role",)  # a Vizier value is a number or a string: others as JSON text
        return () if fmt == "optuna" else ("role", "value")
    if role == "scientific" or conditional:
        return ()
    if kind == "categorical":  # Hydra's choice() has no null; Vizier's choices are text
        plain = all(isinstance(c, str) for c in p["choices"]) or all(
            isinstance(c, (int, float)) and not isinstance(c, bool) for c in p["choices"]
        )
        if fmt == "vizier" and not plain:
            return ()
        return ("type",) if fmt == "hydra" and None in p["choices"] else ("type", "choices")
    if fmt == "optuna":  # Optuna samples reverse_log continuously (1 − x on a log scale)
        return ("type", *_NUMERIC) if scale != "reverse_log" else ("type", "low", "high", "scale")
    if fmt == "algoperf":  # ints and steps are written as the feasible points of their grid
        return ("low", "high", "scale") if kind == "float" and "step" not in p else ()
    if fmt == "vizier":  # Vizier has no step: a stepped range is its DISCRETE points
        return ("type", "low", "high", "scale") if "step" not in p else ()
    if fmt in ("wandb", "hydra"):
        fields = ("type", "low", "high") + (() if scale == "reverse_log" else ("scale",))
        step = p.get("step")
        aligned = step is None or float(p["low"] / step).is_integer()
        return fields + (("step",) if fmt == "hydra" or aligned else ())  # W&B: q from 0
    if fmt == "batch_science":
        return ("type", "low", "high") + (("scale",) if kind == "float" else ())
    raise AssertionError(fmt)


_SECTIONS_KEPT = {
    "stepscale": ("name", "description", "budget", "objective", "sampler"),
    "optuna": (),
    "algoperf": (),
    "wandb": ("name", "description"),
    "hydra": ("name",),
    "batch_science": (),
    "vizier": (),
}


def _diff_keys(orig: dict[str, Any], back: dict[str, Any]) -> set[str]:
    """Independent field-by-field diff of two documents, as dotted keys."""
    keys = set()
    for k in ("name", "description"):
        if orig.get(k) != back.get(k):
            keys.add(k)
    by_name = {p["name"]: p for p in back["parameters"]}
    by_path = {p["path"]: p for p in back["parameters"]}
    for p in orig["parameters"]:
        q = by_name.get(p["name"]) or by_path.get(p["path"])
        if q is None:
            keys.add(f"parameters.{p['name']}")
            continue
        for field in sorted((set(p) | set(q)) - {"name"}):
            if json.dumps(p.get(field), sort_keys=True) != json.dumps(q.get(field), sort_keys=True):
                keys.add(f"parameters.{p['name']}.{field}")
        if p["name"] != q["name"]:
            keys.add(f"parameters.{p['name']}.name")
    for section in ("budget", "objective", "sampler"):
        a, b = orig.get(section) or {}, back.get(section) or {}
        keys |= {f"{section}.{k}" for k in set(a) | set(b) if a.get(k) != b.get(k)}
    # derived values: only the stepscale document holds them
    kept = {d["name"]: d for d in back.get("derived") or []}
    keys |= {f"derived.{d['name']}" for d in orig.get("derived") or [] if kept.get(d["name"]) != d}
    return keys


def _covers(loss: str, key: str) -> bool:
    if key == loss or key.startswith(loss + "."):
        return True
    head, _, field = loss.rpartition(".")
    rest = key[len(head) + 1 :] if key.startswith(head + ".") else None
    # a changed role carries the domain with it; a changed type the bounds' int/float form
    domain = {"type", "scale", "low", "high", "step", "choices", "values", "value"}
    return (field == "role" and rest in domain) or (field == "type" and rest in ("low", "high"))


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_keeps_what_the_format_expresses_and_reports_the_rest(
    fmt: str, rich_dir: Path
) -> None:
    for study, doc in (all_docs(rich_dir) | {"edge": EDGE}).items():
        text, losses = export_space(doc, fmt)
        back, _ = import_space(text, fmt)
        validate_document(back)
        if fmt == "stepscale":
            assert back == doc and losses == []
            continue
        by_name = {p["name"]: p for p in back["parameters"]}
        by_path = {p["path"]: p for p in back["parameters"]}
        for p in doc["parameters"]:
            fields = _kept(fmt, p)
            if not fields:
                continue
            q = by_path.get(p["path"]) or by_name[p["name"]]
            for field in fields:
                assert json.dumps(q.get(field)) == json.dumps(p.get(field)), (
                    study,
                    fmt,
                    p["name"],
                    field,
                )
        for section in _SECTIONS_KEPT[fmt]:
            assert back.get(section) == doc.get(section), (study, fmt, section)
        _check_kept_sampler_and_objective(fmt, doc, back)
        # the warning lists exactly the rest
        diff = _diff_keys(doc, back)
        keys = [loss_key(item) for item in losses]
        assert len(keys) == len(set(keys)), losses
        for key in diff:
            assert any(_covers(loss, key) for loss in keys), (study, fmt, key, losses)
        for loss in keys:
            assert any(_covers(loss, key) for key in diff), (study, fmt, loss, diff)


def _check_kept_sampler_and_objective(fmt: str, doc: dict[str, Any], back: dict[str, Any]) -> None:
    """Hydra keeps the sampler the plugin has (grid without its seed, and only when every
    parameter is discrete); Vizier keeps the sampler's name and the objective's kind."""
    sampler, got = doc.get("sampler"), back.get("sampler")
    if fmt == "hydra" and sampler is not None:
        discrete = all(
            p["type"] == "categorical"
            or (p.get("scale") == "linear" and (p["type"] == "int" or "step" in p))
            for p in doc["parameters"]
            if p["role"] == "nuisance"
        )
        name = sampler["name"]
        want = {"qmc": "random", "gp": "tpe"}.get(name, name)
        want = "random" if want == "grid" and not discrete else want
        assert got is not None and got["name"] == want, (fmt, sampler, got)
        assert got.get("seed") == (None if want == "grid" else sampler.get("seed"))
    if fmt == "vizier":
        assert (got or {}).get("name") == (sampler or {}).get("name")
        kind = (doc.get("objective") or {}).get("kind")
        assert (back.get("objective") or {}).get("kind") == kind


EXPECTED_RICH_LOSSES = {
    "stepscale": set(),
    "optuna": {
        "name",
        "description",
        "parameters.batch_size",
        "parameters.optimizer",
        "parameters.lr.conditional",
        "parameters.warmup_steps.unit",
        "parameters.model_size",
        "parameters.wd",
        "budget",
        "objective",
        "sampler",
    },
    "algoperf": {
        "name",
        "description",
        "parameters.batch_size.role",
        "parameters.batch_size.unit",
        "parameters.batch_size.description",
        "parameters.optimizer.role",
        "parameters.lr.name",
        "parameters.lr.conditional",
        "parameters.b2.name",
        "parameters.warmup_steps.type",
        "parameters.warmup_steps.scale",
        "parameters.warmup_steps.low",
        "parameters.warmup_steps.high",
        "parameters.warmup_steps.step",
        "parameters.warmup_steps.choices",
        "parameters.warmup_steps.unit",
        "parameters.clip.name",
        "parameters.clip.type",
        "parameters.clip.scale",
        "parameters.clip.low",
        "parameters.clip.high",
        "parameters.clip.step",
        "parameters.clip.choices",
        "parameters.eps.name",
        "parameters.seq_len.type",
        "parameters.seq_len.scale",
        "parameters.seq_len.low",
        "parameters.seq_len.high",
        "parameters.seq_len.choices",
        "parameters.model_size.description",
        "parameters.wd.name",
        "budget",
        "objective",
        "sampler",
    },
    "wandb": {
        "parameters.batch_size.role",
        "parameters.batch_size.unit",
        "parameters.batch_size.description",
        "parameters.optimizer.role",
        "parameters.lr.conditional",
        "parameters.b2.scale",
        "parameters.warmup_steps.unit",
        "parameters.model_size.description",
        "budget",
        "sampler.seed",
    },
    "hydra": {
        "description",
        "parameters.batch_size.role",
        "parameters.batch_size.unit",
        "parameters.batch_size.description",
        "parameters.optimizer.role",
        "parameters.lr.conditional",
        "parameters.b2.scale",
        "parameters.warmup_steps.unit",
        "parameters.model_size.description",
        "parameters.wd.name",
        "budget",
        "objective",
    },
    "batch_science": {
        "name",
        "description",
        "parameters.batch_size.role",
        "parameters.batch_size.unit",
        "parameters.batch_size.description",
        "parameters.optimizer.role",
        "parameters.lr.conditional",
        "parameters.warmup_steps.step",
        "parameters.warmup_steps.unit",
        "parameters.clip.step",
        "parameters.seq_len.scale",
        "parameters.model_size.description",
        "budget.trials_per_point",
        "objective",
        "sampler",
    },
    "vizier": {
        "name",
        "description",
        "parameters.batch_size.role",
        "parameters.batch_size.unit",
        "parameters.batch_size.description",
        "parameters.warmup_steps.type",
        "parameters.warmup_steps.scale",
        "parameters.warmup_steps.low",
        "parameters.warmup_steps.high",
        "parameters.warmup_steps.step",
        "parameters.warmup_steps.choices",
        "parameters.warmup_steps.unit",
        "parameters.clip.type",
        "parameters.clip.scale",
        "parameters.clip.low",
        "parameters.clip.high",
        "parameters.clip.step",
        "parameters.clip.choices",
        "parameters.model_size.description",
        "budget",
        "sampler.seed",
    },
}


@pytest.mark.parametrize("fmt", FORMATS)
def test_losses_of_the_rich_study_are_what_each_format_lacks(fmt: str, rich_dir: Path) -> None:
    _, losses = export_space(study_doc("rich", rich_dir), fmt)
    assert {loss_key(item) for item in losses} == EXPECTED_RICH_LOSSES[fmt], losses


def test_batch_science_keeps_a_single_batch_size_as_the_study_axis() -> None:
    doc = study_doc("smoke", None, "scientific.batch_size.values=[8]")
    text, losses = export_space(doc, "batch_science")
    data = json.loads(text)
    assert data["batch_size"] == 8 and data["train_steps"] == 40
    assert "batch_size" not in data["parameter_configs"]
    back, _ = import_space(text, "batch_science")
    axis = next(p for p in back["parameters"] if p["name"] == "batch_size")
    assert axis["role"] == "scientific" and axis["values"] == [8]
    assert not any(loss_key(x).startswith("parameters.batch_size.role") for x in losses)


def test_reverse_log_survives_optuna_algoperf_batch_science_and_vizier(rich_dir: Path) -> None:
    doc = study_doc("rich", rich_dir)
    optuna_out = json.loads(export_space(doc, "optuna")[0])
    assert optuna_out["b2__1m"]["attributes"] == {
        "low": 0.0001,
        "high": 0.1,
        "log": True,
        "step": None,
    }
    algoperf_out = json.loads(export_space(doc, "algoperf")[0])
    assert algoperf_out["one_minus_beta2"] == {"min": 0.0001, "max": 0.1, "scaling": "log"}
    assert json.loads(export_space(doc, "batch_science")[0])["parameter_configs"]["b2"][
        "scale"
    ] == ("REVERSE_LOG_SCALE")
    for fmt in ("optuna", "algoperf", "batch_science", "vizier"):
        back, _ = import_space(export_space(doc, fmt)[0], fmt)
        b2 = next(p for p in back["parameters"] if p["path"] == "optimizer.b2")
        assert (b2["scale"], b2["low"], b2["high"]) == ("reverse_log", 0.9, 0.9999), fmt


def test_hydra_ranges_are_written_as_the_plugin_reads_them(rich_dir: Path) -> None:
    # With any sampler but grid the plugin hands range(a, b, step) to Optuna as a..b
    # inclusive; with its grid sampler it takes a, a+s, ... below b.
    doc = study_doc("rich", rich_dir)
    text, _ = export_space(doc, "hydra")
    data = yaml.safe_load(text)
    params = data["hydra"]["sweeper"]["params"]
    assert data["defaults"] == [
        {"override hydra/sweeper": "optuna"},
        {"override hydra/sweeper/sampler": "random"},
    ]
    assert data["hydra"]["sweeper"]["sampler"] == {"seed": 7}  # no _target_: the group's
    assert params["schedule.warmup_steps"] == "range(0, 10, step=5)"
    assert params["optimizer.clip"] == "range(0.0, 2.0, step=0.5)"
    assert params["data.seq_len"] == "tag(log, int(interval(8, 32)))"
    assert params["optimizer.lr"] == "tag(log, interval(0.0001, 0.01))"
    assert params["model.size"] == "tiny" and params["optimizer.weight_decay"] == 0.1
    discrete = {**doc, "sampler": {"name": "grid", "seed": 3}}
    discrete["parameters"] = [
        p for p in doc["parameters"] if p["name"] in ("batch_size", "warmup_steps", "clip")
    ]
    data = yaml.safe_load(export_space(discrete, "hydra")[0])
    params = data["hydra"]["sweeper"]["params"]
    assert data["defaults"][1] == {"override hydra/sweeper/sampler": "grid"}
    assert "sampler" not in data["hydra"]["sweeper"]  # the plugin's grid sampler has no seed
    assert params["schedule.warmup_steps"] == "range(0, 15, step=5)"
    assert params["optimizer.clip"] == "choice(0.0, 0.5, 1.0, 1.5, 2.0)"
    for d in (doc, discrete):  # read back as the plugin reads them
        back = import_space(export_space(d, "hydra")[0], "hydra")[0]
        warmup = next(p for p in back["parameters"] if p["path"] == "schedule.warmup_steps")
        assert (warmup["low"], warmup["high"], warmup["step"]) == (0, 10, 5)
    continuous = {**doc, "sampler": {"name": "grid", "seed": 3}}
    data = yaml.safe_load(export_space(continuous, "hydra")[0])
    assert data["defaults"][1] == {"override hydra/sweeper/sampler": "random"}
    for name, option in (("qmc", "random"), ("gp", "tpe"), ("tpe", "tpe")):
        other = {**doc, "sampler": {"name": name, "seed": 1}}
        data = yaml.safe_load(export_space(other, "hydra")[0])
        assert data["defaults"][1] == {"override hydra/sweeper/sampler": option}, name


# --- the optuna format against Optuna --------------------------------------------------------


def test_optuna_export_loads_with_optuna_and_matches_the_study_space(rich_dir: Path) -> None:
    from stepscale.sweeps.trainers.kinds import study_trainer

    for study, doc in all_docs(rich_dir).items():
        out = json.loads(export_space(doc, "optuna")[0])
        for spec in out.values():
            assert isinstance(spec, dict)  # parsed objects, not strings
            od.json_to_distribution(json.dumps(spec))
        config_dir = rich_dir if study == "rich" else None
        _, cfg, _ = prepare_study([f"conf={study}"], str(config_dir) if config_dir else None)
        # the keys the study's own trainer may set (a Python-function trainer's: its config)
        space = build_space(cfg, study_trainer(cfg, str(config_dir) if config_dir else None)[1])
        first = space.points[0].label  # adamw: the base ranges
        expected = space.distributions(first)
        assert set(out) == set(expected), study
        for name, spec in out.items():
            got = od.json_to_distribution(json.dumps(spec))
            want = expected[name]
            assert type(got) is type(want), name
            if isinstance(want, od.CategoricalDistribution):
                assert got == want
            else:
                assert got.log == want.log and got.step == want.step
                assert got.low == pytest.approx(want.low) and got.high == pytest.approx(want.high)


# --- imported confs run ----------------------------------------------------------------------


def _dry_run_args(conf_yaml: str, tmp: Path, name: str) -> list[str]:
    """Install a conf as ``<tmp>/conf/<name>.yaml``; the `sweep run --dry-run` argv for it."""
    (tmp / "conf").mkdir(parents=True, exist_ok=True)
    (tmp / "conf" / f"{name}.yaml").write_text(conf_yaml)
    return ["run", f"conf={name}", "--config-dir", str(tmp), "--dry-run", "--json"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_conf_imported_from_each_format_runs_dry(
    fmt: str, rich_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from stepscale.cli.main import main

    for study in ("smoke", "rich"):
        doc = study_doc(study, rich_dir if study == "rich" else None)
        text, _ = export_space(doc, fmt)
        imported, _ = import_space(text, fmt)
        conf = document_to_study_yaml(imported)
        assert conf.startswith("# @package _global_\n")
        name = f"imported_{study}_{fmt}"
        args = _dry_run_args(conf, tmp_path, name)
        capsys.readouterr()
        code = main([*args, f"run_dir={tmp_path / 'runs' / name}"])
        out, err = capsys.readouterr()
        assert code == 0, err
        plan = json.loads(out)
        assert plan["n_points"] >= 1
        if study == "smoke":  # the batch sizes stay the grid (promoted where roles are lost)
            last = "batch_size=32" if fmt == "optuna" else "batch_size=16"  # optuna: default
            assert [p["point"] for p in plan["points"]][-1] == last, fmt
        assert not (tmp_path / "runs" / name).exists()


def test_stepscale_conf_round_trip_gives_back_the_same_document(
    rich_dir: Path, tmp_path: Path
) -> None:
    for study in ("smoke", "rich"):
        doc = study_doc(study, rich_dir if study == "rich" else None)
        conf = document_to_study_yaml(import_space(dumps_stable(doc), "stepscale")[0])
        (tmp_path / "conf").mkdir(exist_ok=True)
        (tmp_path / "conf" / f"copy_{study}.yaml").write_text(conf)
        copy = study_doc(f"copy_{study}", tmp_path)
        assert copy["name"] == f"copy_{study}"
        assert {**copy, "name": study} == doc


def test_imported_conf_says_what_it_added_and_left_out() -> None:
    doc = {
        "schema": SCHEMA_TAG,
        "parameters": [
            {"name": "lr", "path": "optimizer.lr", "role": "nuisance", "type": "float",
             "scale": "log", "low": 1e-4, "high": 1e-2},
            {"name": "dropout", "path": "dropout", "role": "fixed", "type": "float",
             "value": 0.1},
        ],
        "objective": {"kind": "steps_to_target"},
    }  # fmt: skip
    conf = document_to_study_yaml(doc)
    data = yaml.safe_load(conf)
    assert data["scientific"] == {
        "batch_size": {"path": "data.global_batch", "values": [32], "unit": "sequences"}
    }
    assert data["objective"] == {"kind": "final_eval_loss"}
    assert "fixed" not in data and "# dropout: {path: dropout" in conf
    assert "added batch_size (data.global_batch) = [32]" in conf
    assert "steps_to_target needs a target loss" in conf


# --- importers on files written by the other tools ------------------------------------------

ALGOPERF_NADAMW_LIKE = {
    "learning_rate": {"min": 2e-4, "max": 5e-3, "scaling": "log"},
    "one_minus_beta1": {"min": 5e-3, "max": 0.1, "scaling": "log"},
    "beta2": {"feasible_points": [0.999]},
    "warmup_factor": {"feasible_points": [0.05]},
    "weight_decay": {"min": 1e-2, "max": 0.5, "scaling": "log"},
    "dropout_rate": {"feasible_points": [0.0, 0.1]},
}


def test_import_algoperf_tuning_search_space(tmp_path: Path) -> None:
    doc, notes = import_space(json.dumps(ALGOPERF_NADAMW_LIKE), "algoperf")
    params = {p["name"]: p for p in doc["parameters"]}
    assert params["learning_rate"]["path"] == "optimizer.lr"
    assert params["beta1"] | {} == {
        "name": "beta1",
        "path": "optimizer.b1",
        "role": "nuisance",
        "type": "float",
        "scale": "reverse_log",
        "low": 0.9,
        "high": 0.995,
    }
    assert params["beta2"]["role"] == "fixed" and params["beta2"]["path"] == "optimizer.b2"
    assert params["warmup_factor"]["path"] == "schedule.warmup_frac"
    assert params["dropout_rate"]["choices"] == [0.0, 0.1] and notes == []
    conf = document_to_study_yaml(doc)
    assert "left out dropout_rate" in conf
    from stepscale.cli.main import main

    args = _dry_run_args(conf, tmp_path, "from_algoperf")
    assert main([*args, f"run_dir={tmp_path / 'r'}"]) == 0
    points = [{"learning_rate": 1e-3, "one_minus_beta1": 0.1}, {"learning_rate": 1e-2}]
    doc, notes = import_space(json.dumps(points), "algoperf")
    beta1 = next(p for p in doc["parameters"] if p["name"] == "beta1")
    assert beta1["role"] == "fixed" and beta1["value"] == 0.9
    assert "independent choices" in notes[0]


WANDB_SWEEP = """\
program: train.py
method: bayes
metric: {name: final_eval_loss, goal: minimize}
early_terminate: {type: hyperband, min_iter: 3}
parameters:
  optimizer:
    parameters:
      lr: {distribution: log_uniform, min: -9.210340371976182, max: -4.605170185988091}
      b1: {values: [0.8, 0.9]}
  warmup_steps: {min: 0, max: 100}
  seq_len: {distribution: q_log_uniform_values, min: 16, max: 128, q: 1}
  clip: {distribution: q_uniform, min: 0.0, max: 1.0, q: 0.25}
  model_size: {value: tiny}
  noise: {distribution: normal, mu: 0, sigma: 1}
"""


def test_import_wandb_sweep_config() -> None:
    doc, notes = import_space(WANDB_SWEEP, "wandb")
    params = {p["name"]: p for p in doc["parameters"]}
    assert (params["lr"]["path"], params["lr"]["scale"]) == ("optimizer.lr", "log")
    assert (params["lr"]["low"], params["lr"]["high"]) == (0.0001, 0.01)
    assert params["b1"]["choices"] == [0.8, 0.9]
    assert params["warmup_steps"] | {} == {
        "name": "warmup_steps",
        "path": "schedule.warmup_steps",
        "role": "nuisance",
        "type": "int",
        "scale": "linear",
        "low": 0,
        "high": 100,
    }
    assert (params["seq_len"]["type"], params["seq_len"]["scale"]) == ("int", "log")
    assert params["clip"]["step"] == 0.25 and params["model_size"]["role"] == "fixed"
    assert "noise" not in params
    assert doc["sampler"] == {"name": "tpe"} and doc["objective"] == {"kind": "final_eval_loss"}
    assert any("normal" in n for n in notes)
    assert any("early_terminate, program" in n for n in notes)


HYDRA_SPHERE = """\
hydra:
  sweeper:
    sampler: {_target_: optuna.samplers.TPESampler, seed: 123}
    direction: minimize
    study_name: sphere
    storage: null
    n_trials: 20
    params:
      x: range(-5.5,5.5,step=0.5)
      y: choice(-5,0,5)
      optimizer.lr: tag(log, interval(1e-4, 1e-2))
      schedule.warmup_steps: int(interval(0, 50))
"""


def test_import_hydra_optuna_sweeper_params() -> None:
    doc, notes = import_space(HYDRA_SPHERE, "hydra")
    params = {p["path"]: p for p in doc["parameters"]}
    x = params["x"]  # TPE: the plugin's Optuna samples -5.5 … 5.5, both ends included
    assert (x["type"], x["low"], x["high"], x["step"]) == ("float", -5.5, 5.5, 0.5)
    assert params["y"]["choices"] == [-5, 0, 5]
    assert params["optimizer.lr"]["name"] == "lr" and params["optimizer.lr"]["scale"] == "log"
    assert params["schedule.warmup_steps"]["type"] == "int"
    assert doc["sampler"] == {"name": "tpe", "seed": 123} and doc["name"] == "sphere"
    assert notes == ["ignored hydra.sweeper.n_trials, hydra.sweeper.storage"]
    conf = document_to_study_yaml(doc)
    assert "left out x, y" in conf


BATCH_SCIENCE_STUDY = {
    "batch_size": 256,
    "dataset": "imagenet",
    "early_stopping": False,
    "model": "resnet_50",
    "optimizer": "nesterov_momentum",
    "parameter_configs": {
        "end_learning_rate_factor": {
            "max_value": 0.1,
            "min_value": 0.0001,
            "scale": "LOG_SCALE",
            "type": "DOUBLE",
        },
        "label_smoothing": {"feasible_points": [0.0, 0.01, 0.1], "type": "DISCRETE"},
        "learning_rate": {
            "max_value": 10.0,
            "min_value": 0.0001,
            "scale": "LOG_SCALE",
            "type": "DOUBLE",
        },
        "learning_rate_decay_steps": {
            "max_value": 600000,
            "min_value": 300000,
            "scale": "",
            "type": "INTEGER",
        },
        "momentum": {
            "max_value": 0.9999,
            "min_value": 0.9,
            "scale": "REVERSE_LOG_SCALE",
            "type": "DOUBLE",
        },
    },
    "train_steps": 600000,
}


def test_import_batch_science_study_json() -> None:
    doc, notes = import_space(json.dumps(BATCH_SCIENCE_STUDY), "batch_science")
    params = {p["name"]: p for p in doc["parameters"]}
    assert params["batch_size"] == {
        "name": "batch_size",
        "path": "data.global_batch",
        "role": "scientific",
        "type": "int",
        "values": [256],
    }
    assert params["momentum"]["path"] == "optimizer.b1"
    assert params["momentum"]["scale"] == "reverse_log"
    assert params["end_learning_rate_factor"]["path"] == "schedule.final_lr_frac"
    assert params["learning_rate_decay_steps"]["type"] == "int"
    assert doc["budget"] == {"max_steps": 600000}
    assert notes == ["ignored dataset, early_stopping, model, optimizer"]
    vizier = json.loads(json.dumps(BATCH_SCIENCE_STUDY))
    vizier["parameter_configs"]["momentum"]["scale"] = "UNIT_REVERSE_LOG_SCALE"
    assert import_space(json.dumps(vizier), "batch_science")[0] == doc


@pytest.mark.parametrize(
    ("fmt", "text", "message"),
    [
        ("stepscale", "{", "invalid JSON at line 1"),
        ("stepscale", '{"schema": "stepscale.search_space/v9", "parameters": []}', "v9"),
        ("optuna", '{"lr": {"name": "NoSuchDistribution", "attributes": {}}}', "$.lr"),
        ("algoperf", '{"lr": {"min": 1, "max": 2, "scaling": "exp"}}', "$.lr.scaling"),
        ("algoperf", '{"lr": {"min": 2.0, "max": 1.0, "scaling": "log"}}', "needs low < high"),
        ("wandb", "parameters: {lr: {distribution: uniform}}", "parameters.lr"),
        ("wandb", "method: annealing\nparameters: {lr: {values: [1]}}", "method"),
        ("hydra", "params: {x: 'interval(1,'}", "hydra.sweeper.params.x"),
        ("batch_science", '{"parameter_configs": {"lr": {"type": "REAL"}}}', "lr.type"),
        ("batch_science", "[1, 2]", "study.json"),
        ("wandb", "a: [b", "invalid YAML"),
    ],
)
def test_invalid_files_are_rejected_with_where(fmt: str, text: str, message: str) -> None:
    with pytest.raises(FormatError) as info:
        import_space(text, fmt)
    assert message in str(info.value)


def test_unknown_format() -> None:
    with pytest.raises(FormatError, match="unknown format 'csv'"):
        export_space(study_doc("smoke"), "csv")
    with pytest.raises(FormatError, match="unknown format 'csv'"):
        import_space("{}", "csv")


# --- the commands ----------------------------------------------------------------------------


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = build_parser()
    return parser.parse_args(argv)


def _run(argv: list[str]) -> int:
    args = _parse(argv)
    return run_export(args) if args.command == "export" else run_import(args)


def test_export_command_prints_and_writes_with_one_warning_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(["export", "conf=smoke"]) == 0
    out, err = capsys.readouterr()
    assert out == dumps_stable(study_doc("smoke")) and err == ""
    target = tmp_path / "sub" / "smoke.yaml"
    assert _run(["export", "conf=smoke", "--format", "wandb", "-o", str(target)]) == 0
    out, err = capsys.readouterr()
    assert out == "" and target.read_text() == export_space(study_doc("smoke"), "wandb")[0]
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "parameters.batch_size.role" in warnings[0]
    assert "budget" in warnings[0]
    assert _run(["export", "conf=smoke", "sampler.seed=5", "--format", "hydra"]) == 0
    assert "seed: 5" in capsys.readouterr().out


def test_export_command_reads_a_config_dir(
    rich_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(["export", "conf=rich", "--config-dir", str(rich_dir), "--format", "optuna"]) == 0
    out, err = capsys.readouterr()
    assert "b2__1m" in json.loads(out)
    assert err.count("\n") == 1 and "parameters.lr.conditional" in err


def test_import_command_writes_a_conf(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "space.yaml"
    source.write_text(HYDRA_SPHERE)
    target = tmp_path / "conf" / "sphere.yaml"
    assert _run(["import", str(source), "--format", "hydra", "-o", str(target)]) == 0
    _, err = capsys.readouterr()
    conf = target.read_text()
    assert conf.startswith("# @package _global_\n") and "optimizer.lr" in conf
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "n_trials" in warnings[0] and "left out x, y" in warnings[0]
    source.write_text(dumps_stable(study_doc("smoke")))
    assert _run(["import", str(source), "--format", "stepscale"]) == 0
    out, err = capsys.readouterr()
    assert yaml.safe_load(out)["scientific"]["batch_size"]["values"] == [8, 16] and err == ""


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["export", "conf=smoke", "--format", "csv"], "unknown format 'csv'"),
        (["export", "lr=1"], "export needs conf=NAME"),
        (["export", "conf=train_smoke"], "scientific"),
        (["export", "conf=no_such_study"], "no_such_study"),
        (["import", "/nonexistent/space.json", "--format", "optuna"], "cannot read"),
        (["import", "-", "--format", "csv"], "unknown format 'csv'"),
    ],
)
def test_commands_refuse_bad_input(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError) as info:
        _run(argv)
    assert message in str(info.value)


def test_import_command_reports_schema_errors_with_their_path(tmp_path: Path) -> None:
    doc = study_doc("smoke")
    doc["parameters"][1]["high"] = "big"
    source = tmp_path / "space.json"
    source.write_text(json.dumps(doc))
    with pytest.raises(UsageError, match=re.escape("$.parameters[1].high")):
        _run(["import", str(source), "--format", "stepscale"])
    source.write_text(json.dumps({**study_doc("smoke"), "schema": "stepscale.search_space/v2"}))
    with pytest.raises(UsageError, match="unsupported schema version v2"):
        _run(["import", str(source), "--format", "stepscale"])
    with pytest.raises(SystemExit) as info:
        _parse(["import", str(source)])  # --format is required
    assert info.value.code == 2
