"""Exports checked against the tools that read them: W&B's sweep engine (`sweeps`),
Hydra's Optuna sweeper plugin (with the optuna < 3 it pins), OSS Vizier (these three in
their own virtual environment, tests/consumers), AlgoPerf's Halton search (a verbatim
copy, tests/consumers/algoperf_halton.py) and Optuna. Every built-in study (plus the
every-feature study of test_formats and variants for the other samplers) is exported, each
consumer loads it and draws trials, and every drawn value must lie inside the study's
declared range: in its grid for a step, an int for an int parameter, one of the values of a
scientific axis, the fixed value.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import optuna
import optuna.distributions as od
import pytest
from consumers import ConsumerUnavailable, consumer_python, run_consumers
from consumers import algoperf_halton as halton
from servers import skip_or_fail
from test_formats import RICH, builtin_studies, study_doc

from stepscale.sweeps.formats import export_space
from stepscale.sweeps.formats.algoperf import _entry as algoperf_entry

TRIALS = 20
# Trials per study in the consumers' environment (W&B's bayes refits a GP per run, and each
# trial of the Hydra plugin is a job): fewer, with the samplers seeded.
OWN_ENV_TRIALS = 6


def _variants(rich: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Sampler variants the built-in studies do not cover: tpe with stepped ranges, qmc and
    gp (absent from the plugin's optuna), grid over discrete parameters only (no seed in the
    plugin's grid)."""
    discrete = {**rich, "sampler": {"name": "grid", "seed": 3}}
    discrete["parameters"] = [
        p
        for p in rich["parameters"]
        if p["name"] in ("batch_size", "optimizer", "warmup_steps", "clip", "schedule")
    ]
    return {
        "rich_tpe": {**rich, "sampler": {"name": "tpe", "seed": 2}},
        "rich_qmc": {**rich, "sampler": {"name": "qmc", "seed": 1}},
        "rich_gp": {**rich, "sampler": {"name": "gp", "seed": 1}},
        "rich_grid": discrete,
    }


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every built-in study's document, the every-feature study's and its variants."""
    root = tmp_path_factory.mktemp("rich")
    (root / "conf").mkdir()
    (root / "conf" / "rich.yaml").write_text(RICH)
    out = {name: study_doc(name) for name in builtin_studies()}
    out["rich"] = study_doc("rich", root)
    return out | _variants(out["rich"])


# --- what a drawn value must be ----------------------------------------------------------


def _close_to_grid(x: float, low: float, step: float) -> bool:
    k = (x - low) / step
    return math.isclose(k, round(k), abs_tol=1e-6)


def _within(x: float, low: float, high: float) -> bool:
    tol = 1e-9 * max(1.0, abs(low), abs(high))
    return low - tol <= x <= high + tol


def _domain(p: dict[str, Any], at: dict[str, Any] | None) -> dict[str, Any]:
    """The declared domain of a nuisance parameter: its range at the value ``at`` gives
    its conditional axis (when the format keeps the condition), else the union of ranges."""
    ranges = p.get("conditional", {}).get("ranges", {})
    if at is not None and "conditional" in p:
        on = at[p["conditional"]["on"]]
        if isinstance(on, float) and on.is_integer():
            on = int(on)  # Vizier holds a DISCRETE parent's values as doubles: 64.0 is "64"
        r = ranges.get(str(on), {})
        return {k: r.get(k, p.get(k)) for k in ("low", "high", "choices")}
    lows = [r["low"] for r in [p, *ranges.values()] if "low" in r]
    highs = [r["high"] for r in [p, *ranges.values()] if "high" in r]
    choices = list(p.get("choices", []))
    for r in ranges.values():
        choices += r.get("choices", [])
    return {"low": min(lows, default=None), "high": max(highs, default=None), "choices": choices}


def check_value(
    p: dict[str, Any], v: Any, axis_values: dict[str, Any] | None = None, whole: bool = False
) -> None:
    """Fail unless ``v`` is a value the study declares for ``p``; ``whole``: an int may
    come as a whole float (Vizier holds DISCRETE values as doubles)."""
    where = f"{p['name']}={v!r}"
    if p["role"] == "scientific":
        assert v in p["values"], f"{where}: not one of {p['values']}"
        return
    if p["role"] == "fixed":
        assert v == p["value"], f"{where}: the fixed value is {p['value']!r}"
        return
    domain = _domain(p, axis_values)
    if p["type"] == "categorical":
        assert v in domain["choices"], f"{where}: not one of {domain['choices']}"
        return
    assert isinstance(v, (int, float)) and not isinstance(v, bool), f"{where}: not a number"
    if p["type"] == "int":
        assert isinstance(v, int) or (whole and float(v).is_integer()), f"{where}: not an int"
    assert _within(v, domain["low"], domain["high"]), f"{where}: outside {domain}"
    if "step" in p:
        assert _close_to_grid(v, domain["low"], p["step"]), f"{where}: off the step {p['step']}"


def check_samples(
    doc: dict[str, Any],
    samples: list[dict[str, Any]],
    key_of: Any,
    keep_conditions: bool = False,
    roles: tuple[str, ...] = ("scientific", "nuisance", "fixed"),
    whole: bool = False,
    trials: int = TRIALS,
) -> None:
    """Every parameter of ``doc`` (of ``roles``) has a declared value in every sample;
    ``key_of(p)`` → (its key in a sample, a function of the sampled value giving ours)."""
    assert len(samples) == trials, f"{len(samples)} trials drawn, not {trials}"
    by_name = {p["name"]: p for p in doc["parameters"]}
    for sample in samples:
        axis_values = None
        if keep_conditions:
            axis_values = {
                name: sample[key_of(by_name[name])[0]]
                for name in {p["conditional"]["on"] for p in by_name.values() if "conditional" in p}
            }
        for p in doc["parameters"]:
            if p["role"] not in roles:
                continue
            key, ours = key_of(p)
            assert key in sample, f"{p['name']}: {key} not in the consumer's trial {sample}"
            check_value(p, ours(sample[key]), axis_values, whole)


def _same(v: Any) -> Any:
    return v


def _one_minus(v: Any) -> Any:
    return 1.0 - v


# --- consumers in the project's environment ----------------------------------------------


def test_algoperf_halton_search_draws_only_declared_values(docs: dict[str, Any]) -> None:
    for study, doc in docs.items():
        space = json.loads(export_space(doc, "algoperf")[0])
        trials = [t._asdict() for t in halton.generate_search(space, TRIALS)]

        def key_of(p: dict[str, Any]) -> tuple[str, Any]:
            name, _ = algoperf_entry(p)
            return name, _one_minus if name.startswith("one_minus_") else _same

        try:
            check_samples(doc, trials, key_of)
        except AssertionError as exc:
            raise AssertionError(f"{study}: {exc}") from None


def test_optuna_samples_only_declared_values(docs: dict[str, Any]) -> None:
    for study, doc in docs.items():
        space = {
            name: od.json_to_distribution(json.dumps(spec))
            for name, spec in json.loads(export_space(doc, "optuna")[0]).items()
        }
        samples = []
        for sampler in (optuna.samplers.RandomSampler(seed=0), optuna.samplers.TPESampler(seed=0)):
            s = optuna.create_study(sampler=sampler)
            for _ in range(TRIALS // 2):
                trial = s.ask(space)
                s.tell(trial, float(len(samples) % 3))
                samples.append(dict(trial.params))

        def key_of(p: dict[str, Any]) -> tuple[str, Any]:
            if p.get("scale") == "reverse_log":
                return f"{p['name']}__1m", _one_minus
            return p["name"], _same

        try:
            check_samples(doc, samples, key_of, roles=("nuisance",))
        except AssertionError as exc:
            raise AssertionError(f"{study}: {exc}") from None


# --- consumers in their own environment --------------------------------------------------

_FORMAT = {"wandb": "wandb", "hydra": "hydra", "vizier": "vizier"}
# The sampler variants matter to the Hydra plugin (whose optuna < 3 lacks them); W&B and
# Vizier only name a method.
_HYDRA_ONLY = ("rich_tpe", "rich_qmc", "rich_gp", "rich_grid")


@pytest.fixture(scope="module")
def consumed(docs: dict[str, Any]) -> dict[str, Any]:
    """Every document exported to W&B, Hydra and Vizier and drawn from by the real
    consumer, all in one process of the consumers' environment."""
    try:
        consumer_python()
    except ConsumerUnavailable as exc:
        skip_or_fail(str(exc))
    jobs = [
        {
            "consumer": consumer,
            "id": f"{consumer}:{study}",
            "text": export_space(doc, fmt)[0],
            "trials": OWN_ENV_TRIALS,
        }
        for consumer, fmt in _FORMAT.items()
        for study, doc in docs.items()
        if consumer == "hydra" or study not in _HYDRA_ONLY
    ]
    return run_consumers(jobs)


def _results(consumed: dict[str, Any], consumer: str, study: str) -> list[dict[str, Any]]:
    result = consumed[f"{consumer}:{study}"]
    assert "error" not in result, f"{consumer} refused the export of {study}:\n{result['error']}"
    return result["samples"]


@pytest.mark.slow
@pytest.mark.parametrize("consumer", list(_FORMAT))
def test_real_consumers_accept_every_export_and_draw_only_declared_values(
    consumer: str, docs: dict[str, Any], consumed: dict[str, Any]
) -> None:
    failures = []
    for study, doc in docs.items():
        if consumer != "hydra" and study in _HYDRA_ONLY:
            continue
        if consumer == "hydra":
            key_of = lambda p: (p["path"], _same)  # noqa: E731
        else:
            key_of = lambda p: (p["name"], _same)  # noqa: E731
        vizier = consumer == "vizier"
        try:
            samples = _results(consumed, consumer, study)
            check_samples(doc, samples, key_of, vizier, whole=vizier, trials=OWN_ENV_TRIALS)
        except AssertionError as exc:
            failures.append(f"{study}: {str(exc).splitlines()[0]}")
    assert not failures, f"{consumer}:\n" + "\n".join(failures)


@pytest.mark.slow
def test_the_plugin_draws_both_ends_of_a_stepped_range(consumed: dict[str, Any]) -> None:
    # range(0, 10, step=5) with the random sampler: 0, 5 and 10 all come out (and no 15:
    # the range before the fix, range(0, 15, step=5), gave 15 in these draws).
    values = {s["schedule.warmup_steps"] for s in _results(consumed, "hydra", "rich")}
    assert values == {0, 5, 10}  # the random sampler is seeded (7): the same draws each run


def test_consumers_environment_is_required_where_ci_asks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEPSCALE_CONSUMER_VENVS", str(tmp_path))
    with pytest.raises(ConsumerUnavailable, match="no consumers' environment"):
        consumer_python()
