"""Search spaces from the wild: the real files of tests/corpus (AlgoPerf baselines, W&B
sweeps, Hydra's Optuna-sweeper examples, a Vertex AI / Vizier StudySpec) and the cases that
real files showed, one test each: what the owning tool accepts is imported, no parameter is
mapped onto a built-in key on a guess that changes its meaning, exports say what the tool
reads; plus the ``vizier`` format both ways.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_formats import _dry_run_args, _run, builtin_studies, study_doc

from stepscale.sweeps.formats import (
    FORMATS,
    FormatError,
    document_to_study_yaml,
    export_space,
    import_space,
    study_yaml,
    validate_document,
)
from stepscale.sweeps.study.space_doc import SCHEMA_TAG

CORPUS = Path(__file__).resolve().parent / "corpus"
CORPUS_FILES = sorted(
    p for p in CORPUS.glob("*/*") if p.suffix in (".json", ".yaml") and p.parent.name != "."
)


def _params(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in doc["parameters"]}


def _notes(text: str, fmt: str, own_keys: bool = False) -> tuple[dict[str, Any], str]:
    doc, notes = import_space(text, fmt, own_keys=own_keys)
    return doc, "; ".join(notes)


# --- the corpus ------------------------------------------------------------------------------


def test_the_corpus_lists_every_file_with_its_source_and_licence() -> None:
    readme = (CORPUS / "README.md").read_text()
    assert len(CORPUS_FILES) >= 12
    for path in CORPUS_FILES:
        row = next(
            line for line in readme.splitlines() if f"| {path.parent.name}/{path.name} |" in line
        )
        assert row.rstrip().endswith(("| Apache-2.0 |", "| MIT |")), row


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_corpus_file_imports_into_a_conf_that_runs_dry(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from stepscale.cli.main import main

    fmt = path.parent.name
    doc, _ = import_space(path.read_text(), fmt)
    validate_document(doc)
    conf, _ = study_yaml(doc, fmt)
    args = _dry_run_args(conf, tmp_path, "wild")
    capsys.readouterr()
    assert main([*args, f"run_dir={tmp_path / 'r'}"]) == 0, capsys.readouterr().err
    # and with the user's own trainer every parameter is kept, under the source's own key
    own, _ = import_space(path.read_text(), fmt, own_keys=True)
    conf, notes = study_yaml(own, fmt, trainer="mypkg.train:run")
    assert not any("left out" in n for n in notes)


def test_algoperf_baselines_keep_their_meaning() -> None:
    doc, notes = _notes(
        (CORPUS / "algoperf" / "nadamw_tuning_search_space.json").read_text(), "algoperf"
    )
    p = _params(doc)
    assert (p["beta1"]["path"], p["beta1"]["scale"]) == ("optimizer.b1", "reverse_log")
    assert (p["beta1"]["low"], p["beta1"]["high"]) == (0.9, 0.996)
    assert p["warmup_factor"]["path"] == "schedule.warmup_frac"
    assert p["label_smoothing"]["path"] == "label_smoothing" and notes == ""
    # the sampler AlgoPerf uses cannot hand one_minus_beta1 to a user's trainer as beta1
    own, _ = _notes(
        (CORPUS / "algoperf" / "nadamw_tuning_search_space.json").read_text(),
        "algoperf",
        own_keys=True,
    )
    one_minus = _params(own)["one_minus_beta1"]
    assert (one_minus["path"], one_minus["scale"]) == ("one_minus_beta1", "log")
    assert (one_minus["low"], one_minus["high"]) == (0.004, 0.1)


def test_one_minus_beta1_given_as_points_goes_back_as_one_minus_beta1() -> None:
    text = (CORPUS / "algoperf" / "adamw_tuning_search_space_no_beta1.json").read_text()
    doc, _ = import_space(text, "algoperf")
    assert _params(doc)["beta1"] | {} == {
        "name": "beta1", "path": "optimizer.b1", "role": "fixed", "type": "float", "value": 0.9,
    }  # fmt: skip
    out = json.loads(export_space(doc, "algoperf")[0])
    assert out["one_minus_beta1"] == {"feasible_points": [0.1]} and "beta1" not in out
    assert out["learning_rate"] == {"min": 0.0001, "max": 0.01, "scaling": "log"}
    assert json.loads(text) == {k: out[k] for k in json.loads(text)}  # the same file back


def test_exports_use_algoperf_names() -> None:
    out = json.loads(export_space(study_doc("smoke"), "algoperf")[0])
    assert "learning_rate" in out and "lr" not in out
    doc = {
        "schema": SCHEMA_TAG,
        "parameters": [
            {"name": "b1", "path": "optimizer.b1", "role": "nuisance", "type": "float",
             "scale": "reverse_log", "low": 0.9, "high": 0.99},
            {"name": "wf", "path": "schedule.warmup_frac", "role": "fixed", "type": "float",
             "value": 0.05},
            {"name": "wd", "path": "optimizer.weight_decay", "role": "nuisance",
             "type": "float", "scale": "log", "low": 0.001, "high": 0.1},
        ],
    }  # fmt: skip
    out = json.loads(export_space(doc, "algoperf")[0])
    assert set(out) == {"one_minus_beta1", "warmup_factor", "weight_decay"}


def test_wandb_nested_parameters_are_read_as_dotted_names_and_said_so() -> None:
    doc, notes = _notes((CORPUS / "wandb" / "sweep-nested.yaml").read_text(), "wandb")
    assert {p["path"] for p in doc["parameters"]} == {
        "data.global_batch", "optimizer.lr", "optimizer.nadam.beta",
    }  # fmt: skip
    assert "nested parameters of optimizer read as dotted names" in notes
    assert "optimizer.nadam.beta" in notes


def test_hydra_examples_read_with_the_sampler_of_their_defaults_list() -> None:
    grid, notes = _notes((CORPUS / "hydra" / "example-config.yaml").read_text(), "hydra")
    assert grid["sampler"] == {"name": "grid"}  # not TPE
    x = _params(grid)["x"]  # the plugin's grid: -5.5, -5.0, …, 5.0 (below 5.5)
    assert (x["low"], x["high"], x["step"]) == (-5.5, 5.0, 0.5)
    tpe, _ = _notes((CORPUS / "hydra" / "custom-search-space-config.yaml").read_text(), "hydra")
    x = _params(tpe)["x"]  # the plugin's TPE: Optuna's -5.5 … 5.5, both ends
    assert (x["low"], x["high"], x["step"]) == (-5.5, 5.5, 0.5)
    mo, notes = _notes((CORPUS / "hydra" / "multi-objective-config.yaml").read_text(), "hydra")
    assert "sampler" not in mo
    assert "sampler nsgaii (hydra/sweeper/sampler) has no stepscale equivalent" in notes
    motpe = (
        "defaults:\n  - override hydra/sweeper/sampler: motpe\nparams: {lr: 'interval(0.1, 1.0)'}"
    )
    doc, notes = _notes(motpe, "hydra")
    assert "sampler" not in doc and "motpe" in notes


def test_vizier_study_spec_from_a_public_repository() -> None:
    path = CORPUS / "vizier" / "kfp_hyperparameter_tuning_parameters.json"
    doc, _ = import_space(path.read_text(), "vizier")
    p = _params(doc)
    assert p["lr"] | {} == {
        "name": "lr", "path": "optimizer.lr", "role": "nuisance", "type": "float",
        "scale": "log", "low": 0.001, "high": 0.1,
    }  # fmt: skip
    assert (p["units"]["type"], p["units"]["low"], p["units"]["high"]) == ("int", 4, 128)
    assert p["activation"]["choices"] == ["relu", "selu"]
    assert p["batch_size"]["choices"] == [128, 256]  # ints: data.global_batch takes ints


def test_vizier_import_command_writes_a_conf(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = CORPUS / "vizier" / "kfp_hyperparameter_tuning_parameters.json"
    target = tmp_path / "conf" / "kfp.yaml"
    assert _run(["import", str(source), "--format", "vizier", "-o", str(target)]) == 0
    conf = yaml.safe_load(target.read_text())
    assert conf["scientific"]["batch_size"] == {"path": "data.global_batch", "values": [128, 256]}
    assert conf["nuisance"]["lr"]["scale"] == "log"


# --- wrong without a word (before): now each says what it did -------------------------------


def test_a_warmup_given_as_a_fraction_is_not_a_step_count() -> None:
    text = json.dumps({"learning_rate": {"min": 1e-3, "max": 1e-2, "scaling": "log"},
                       "warmup": {"feasible_points": [0.02, 0.03]}})  # fmt: skip
    doc, notes = _notes(text, "algoperf")
    warmup = _params(doc)["warmup"]
    assert warmup["path"] == "warmup" and warmup["choices"] == [0.02, 0.03]
    assert "warmup: kept under its own key warmup, not schedule.warmup_steps" in notes
    assert "are fractions, not a step count" in notes
    ranged = json.dumps({"warmup": {"min": 0.0, "max": 0.1, "scaling": "linear"}})
    assert _params(import_space(ranged, "algoperf")[0])["warmup"]["path"] == "warmup"
    steps = json.dumps({"warmup": {"feasible_points": [0, 100, 500]}})  # a step count
    assert _params(import_space(steps, "algoperf")[0])["warmup"]["path"] == "schedule.warmup_steps"


def test_a_projects_own_model_names_are_not_our_model_names() -> None:
    text = "parameters:\n  model: {values: [resnet18, resnet50]}\n  lr: {min: 0.001, max: 0.1}\n"
    doc, notes = _notes(text, "wandb")
    assert _params(doc)["model"]["path"] == "model"
    assert "resnet18, resnet50 are not model.name of the built-in trainer" in notes
    ours = "parameters:\n  model: {values: [gpt, mlp]}\n"
    assert _params(import_space(ours, "wandb")[0])["model"]["path"] == "model.name"


def test_an_optimizer_we_do_not_have_is_not_exported_as_ours() -> None:
    # wandb/examples, examples/minimal-hydra-example/wandb_sweep.yaml (parameters)
    text = (
        "method: bayes\nmetric: {name: val_loss, goal: minimize}\nparameters:\n"
        "  optimizer.config.learning_rate: {min: !!float 1e-5, max: 0.1}\n"
        "  experiment: {values: [expt001, expt002]}\n"
        "  optimizer: {values: [sgd, adagrad, adam]}\n"
    )
    doc, notes = _notes(text, "wandb")
    assert _params(doc)["optimizer"]["path"] == "optimizer"
    assert "adagrad, adam are not optimizer.name of the built-in trainer" in notes
    hydra = yaml.safe_load(export_space(doc, "hydra")[0])["hydra"]["sweeper"]["params"]
    assert "optimizer.name" not in hydra and hydra["optimizer"] == "choice(sgd, adagrad, adam)"
    own, _ = import_space(text, "wandb", own_keys=True)  # a value and keys under it
    _, notes = study_yaml(own, "wandb", trainer="python train.py")
    assert any("optimizer and optimizer.config.learning_rate: one config key" in n for n in notes)


def test_the_hydra_sampler_options_are_said_when_dropped() -> None:
    text = (
        "hydra:\n  sweeper:\n    sampler: {seed: 5, n_startup_trials: 3, multivariate: true}\n"
        "    params: {optimizer.lr: 'tag(log, interval(0.001, 0.1))'}\n"
    )
    _, notes = _notes(text, "hydra")
    assert "sampler option multivariate=True ignored" in notes
    assert "sampler option n_startup_trials=3 ignored" in notes


# --- refused although the owning tool accepts it (before): now imported -----------------------


def test_two_algoperf_names_for_one_key_import_and_the_second_keeps_its_own() -> None:
    text = json.dumps({
        "learning_rate": {"min": 1e-4, "max": 1e-2, "scaling": "log"},
        "one_minus_beta1": {"min": 1e-2, "max": 0.15, "scaling": "log"},
        "one_minus_momentum": {"min": 1e-2, "max": 0.2, "scaling": "log"},
    })  # fmt: skip
    doc, notes = _notes(text, "algoperf")
    p = _params(doc)
    assert p["beta1"]["path"] == "optimizer.b1"
    assert (p["momentum"]["path"], p["momentum"]["scale"]) == ("momentum", "reverse_log")
    assert "momentum: kept under its own key momentum, not optimizer.b1" in notes


def test_wandb_q_uniform_without_q_uses_w_and_bs_default_of_one() -> None:
    doc, _ = import_space(
        "parameters:\n  warmup_steps: {distribution: q_uniform, min: 0, max: 10}\n", "wandb"
    )
    p = _params(doc)["warmup_steps"]
    assert (p["type"], p["low"], p["high"], p.get("step")) == ("int", 0, 10, None)
    doc, _ = import_space(
        "parameters:\n  clip: {distribution: q_uniform, min: 0.5, max: 3.5}\n", "wandb"
    )
    assert _params(doc)["clip"]["step"] == 1


def test_one_wandb_key_with_a_list_index_leaves_out_that_parameter_only() -> None:
    text = "parameters:\n  layers.0.units: {values: [64, 128]}\n  lr: {min: 0.001, max: 0.1}\n"
    doc, notes = _notes(text, "wandb")
    assert [p["path"] for p in doc["parameters"]] == ["optimizer.lr"]
    assert "layers.0.units: left out (not a config key" in notes


def test_hydra_choice_of_lists_imports() -> None:
    doc, _ = import_space("params:\n  model.layers: 'choice([64, 64], [128, 128, 128])'\n", "hydra")
    assert _params(doc)["model_layers"]["choices"] == [[64, 64], [128, 128, 128]]
    conf = yaml.safe_load(study_yaml(doc, "hydra", trainer="mypkg.train:run")[0])
    assert conf["nuisance"]["model_layers"]["choices"] == [[64, 64], [128, 128, 128]]


def test_optuna_categorical_choices_may_be_nan_or_infinite(tmp_path: Path) -> None:
    spec = '{"clip": {"name": "CategoricalDistribution", "attributes": {"choices": [1.0, Infinity, NaN]}}}'
    doc, _ = import_space(spec, "optuna")
    choices = _params(doc)["clip"]["choices"]
    assert choices[:2] == [1.0, math.inf] and math.isnan(choices[2])
    conf = document_to_study_yaml(doc)
    assert "[1.0, .inf, .nan]" in conf
    bad = '{"x": {"name": "CategoricalDistribution", "attributes": {"choices": [{"a": 1}]}}}'
    with pytest.raises(FormatError, match="NaN and infinities too"):
        import_space(bad, "optuna")


def test_an_empty_search_space_exports_to_every_format() -> None:
    doc = study_doc("smoke")
    doc["parameters"] = [p for p in doc["parameters"] if p["role"] != "nuisance"]
    for fmt in FORMATS:
        text, _ = export_space(doc, fmt)
        back, _ = import_space(text, fmt)
        validate_document(back)
    nothing = {"schema": SCHEMA_TAG, "parameters": []}
    for fmt in FORMATS:
        validate_document(import_space(export_space(nothing, fmt)[0], fmt)[0])


# --- vizier: both ways ----------------------------------------------------------------------

CONDITIONAL_SPEC = {
    "studySpec": {
        "algorithm": "RANDOM_SEARCH",
        "metrics": [{"metric_id": "final_eval_loss", "goal": "MINIMIZE"}],
        "parameters": [
            {"parameter_id": "optimizer",
             "categorical_value_spec": {"values": ["adamw", "sgd"]},
             "conditional_parameter_specs": [
                 {"parent_categorical_values": {"values": ["adamw"]},
                  "parameter_spec": {"parameter_id": "learning_rate",
                                     "double_value_spec": {"min_value": 1e-4, "max_value": 1e-2},
                                     "scale_type": "UNIT_LOG_SCALE"}},
                 {"parent_categorical_values": {"values": ["sgd"]},
                  "parameter_spec": {"parameter_id": "learning_rate",
                                     "double_value_spec": {"min_value": 1e-2, "max_value": 1.0},
                                     "scale_type": "UNIT_LOG_SCALE"}},
                 {"parent_categorical_values": {"values": ["sgd"]},
                  "parameter_spec": {"parameter_id": "momentum",
                                     "double_value_spec": {"min_value": 0.8, "max_value": 0.99},
                                     "scale_type": "UNIT_REVERSE_LOG_SCALE"}},
             ]},
            {"parameter_id": "warmup_steps", "integer_value_spec": {"min_value": "0", "max_value": "50"}},
        ],
    }
}  # fmt: skip


def test_vizier_conditional_ranges_depend_on_a_scientific_value() -> None:
    doc, notes = _notes(json.dumps(CONDITIONAL_SPEC), "vizier")
    p = _params(doc)
    assert p["optimizer"] | {} == {
        "name": "optimizer", "path": "optimizer.name", "role": "scientific",
        "type": "categorical", "values": ["adamw", "sgd"],
    }  # fmt: skip
    assert p["learning_rate"]["conditional"] == {
        "on": "optimizer", "ranges": {"sgd": {"low": 0.01, "high": 1.0}},
    }  # fmt: skip
    assert (p["learning_rate"]["low"], p["learning_rate"]["high"]) == (0.0001, 0.01)
    assert p["momentum"]["scale"] == "reverse_log"
    assert "optimizer becomes a scientific axis" in notes
    assert "momentum: active only at optimizer = sgd in the source; tuned at every point" in notes
    assert (p["warmup_steps"]["type"], p["warmup_steps"]["high"]) == ("int", 50)
    assert doc["objective"] == {"kind": "final_eval_loss"} and doc["sampler"] == {"name": "random"}
    by_batch = {"parameters": [{
        "parameterId": "batch_size", "discreteValueSpec": {"values": [128, 256]},
        "conditionalParameterSpecs": [
            {"parentDiscreteValues": {"values": [128.0]},
             "parameterSpec": {"parameterId": "lr", "doubleValueSpec": {"minValue": 0.01, "maxValue": 0.1}}},
            {"parentDiscreteValues": {"values": [256.0]},
             "parameterSpec": {"parameterId": "lr", "doubleValueSpec": {"minValue": 0.1, "maxValue": 1}}},
        ]}]}  # fmt: skip
    lr = _params(import_space(json.dumps(by_batch), "vizier")[0])["lr"]
    assert lr["conditional"] == {"on": "batch_size", "ranges": {"256": {"low": 0.1, "high": 1.0}}}
    old = {"parameters": [{"parameter": "x", "type": "DOUBLE", "scaleType": "UNIT_LINEAR_SCALE",
                           "doubleValueSpec": {"minValue": 0, "maxValue": 1}}]}  # fmt: skip
    assert _params(import_space(json.dumps(old), "vizier")[0])["x"]["high"] == 1.0


@pytest.mark.parametrize("study", builtin_studies())
def test_vizier_export_of_every_builtin_study_round_trips(study: str, tmp_path: Path) -> None:
    doc = study_doc(study)
    back, _ = import_space(export_space(doc, "vizier")[0], "vizier")
    theirs = _params(back)
    for p in doc["parameters"]:
        q = theirs[p["name"]]
        # A Vizier spec keeps only names: a model key is never inferred from one (a source's
        # `d_model` describes its own model), so it comes back as the name
        named = {p["name"]} if p["path"].startswith("model.") else set()
        assert q["path"] in {p["path"], *named}
        if p["role"] == "nuisance" and "step" not in p:
            # nor units, descriptions or what a parameter measures (its quantity)
            lost = ("unit", "description", "quantity")
            assert {k: v for k, v in q.items() if k not in lost} == {
                k: v for k, v in p.items() if k not in lost
            }, p["name"]
        elif p["role"] == "fixed":
            assert q["value"] == p["value"]
        else:
            got = q.get("values", q.get("choices"))
            if got is None and len(p["values"]) == 1:
                # One feasible value: a Vizier spec has no role that says it is an axis.
                got = [q["value"]]
            assert got == p["values"]
    cond = [p for p in doc["parameters"] if "conditional" in p]
    if cond:  # the axis a range depends on comes back as the scientific axis
        assert theirs[cond[0]["conditional"]["on"]]["role"] == "scientific"
    assert back["objective"]["kind"] == doc["objective"]["kind"]
    assert back["sampler"]["name"] == doc["sampler"]["name"]
    from stepscale.cli.main import main

    args = _dry_run_args(document_to_study_yaml(back), tmp_path, "back")
    assert main([*args, f"run_dir={tmp_path / 'r'}"]) == 0
