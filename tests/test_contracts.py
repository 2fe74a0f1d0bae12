"""The seams of the codebase hold: who may import whom (parsed from the source), and the run
directory's contract (`stepscale.rundir`) is the one writers and readers share."""

from __future__ import annotations

import ast
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
from helpers import read_jsonl, tiny_gpt, tiny_nqm

import stepscale
from stepscale import rundir
from stepscale.analysis.fits.targets import first_crossing
from stepscale.models.train import train
from stepscale.reporters import JsonlReporter

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"sweeps": "stepscale.sweeps", "models": "stepscale.models"}
FOLDERS |= {"analysis": "stepscale.analysis", "stepscale": "stepscale", "cli": "stepscale.cli"}


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT)
    parts = [FOLDERS[rel.parts[0]], *rel.parts[1:]]
    parts[-1] = parts[-1].removesuffix(".py")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, module: str) -> set[str]:
    """Every module ``path`` imports, at the top or inside functions (relative ones resolved)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)  # `from pkg import module`
    return out


def _graph() -> dict[str, set[str]]:
    files = [p for top in FOLDERS for p in (ROOT / top).rglob("*.py")]
    modules = {_module_name(p): p for p in files}
    return {m: {i for i in _imports(p, m) if i in modules and i != m} for m, p in modules.items()}


GRAPH = _graph()


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_import_graph_sees_the_codebase() -> None:
    # A parser that found nothing would make every rule below pass.
    assert len(GRAPH) > 80
    assert "stepscale.models.plan" in GRAPH["stepscale.models.train"]
    assert "stepscale.analysis.load" in GRAPH["stepscale.analysis.report.write"]


def _imports_of(package: str, *targets: str) -> list[tuple[str, str]]:
    """(importer, imported) pairs of modules in ``package`` importing any of ``targets``."""
    return [
        (m, i)
        for m, deps in GRAPH.items()
        if _within(m, package)
        for i in deps
        if any(_within(i, t) for t in targets)
    ]


def test_models_imports_neither_sweeps_nor_analysis() -> None:
    assert not _imports_of("stepscale.models", "stepscale.sweeps", "stepscale.analysis")
    assert not _imports_of("stepscale.models", "stepscale.cli")


def test_analysis_imports_neither_models_nor_the_orchestrator() -> None:
    assert not _imports_of("stepscale.analysis", "stepscale.models")
    assert not _imports_of("stepscale.analysis", "stepscale.sweeps", "stepscale.cli")


def test_the_command_floor_is_above_everything() -> None:
    # `stepscale.cli` may import the orchestrator and the analysis; nothing imports it.
    for package in ("stepscale.sweeps", "stepscale.models", "stepscale.analysis"):
        assert not _imports_of(package, "stepscale.cli"), package
    assert not [
        (m, i)
        for m, i in _imports_of("stepscale", "stepscale.cli")
        if not _within(m, "stepscale.cli")
    ]


def test_sweeps_uses_only_the_pure_fits_of_the_analysis() -> None:
    # The scheduler's adaptive batch sizes and transfer between points fit S(B) and predict
    # the LR with the analysis' own rules (numpy/scipy, no xarray): only `analysis.fits`,
    # and only from the wings that decide what a study runs (study/, run/).
    found = _imports_of("stepscale.sweeps", "stepscale.analysis")
    assert found  # the rule is about real imports: adaptive and transfer use the fits
    assert all(_within(i, "stepscale.analysis.fits") for _, i in found), found
    wings = {m.split(".")[2] for m, _ in found}
    assert wings <= {"study", "run"}, found


# Each wing of `stepscale.sweeps` may import the wings listed here (and itself), never one
# above it: what a trainer is, below what a study is, below what runs in a trial's job,
# below the launchers, below the scheduler (docs/architecture.md).
WINGS = {
    "trainers": set(),
    "study": {"trainers"},
    "formats": {"study", "trainers"},
    "job": {"study", "trainers"},
    "launch": {"job", "study", "trainers"},
    "run": {"launch", "job", "study", "trainers"},
}


def _wing(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[:2] == ["stepscale", "sweeps"] else None


def test_every_module_of_sweeps_lives_in_a_wing() -> None:
    flat = [
        m
        for m in GRAPH
        if _within(m, "stepscale.sweeps") and m.count(".") == 2 and m.split(".")[2] not in WINGS
    ]
    assert flat == ["stepscale.sweeps.moved"]  # the old paths' loader (sweeps.moved)
    assert {_wing(m) for m in GRAPH if _wing(m)} == set(WINGS)


def test_no_wing_of_sweeps_imports_one_above_it() -> None:
    bad = [
        (m, i)
        for m, deps in GRAPH.items()
        if (w := _wing(m)) is not None
        for i in deps
        if (v := _wing(i)) is not None and v != w and v not in WINGS[w]
    ]
    assert not bad
    # and the rule sees real arrows: the scheduler launches, launchers submit jobs
    assert "stepscale.sweeps.launch.launchers" in GRAPH["stepscale.sweeps.run.scheduler"]


def test_sweeps_reaches_models_only_through_one_door() -> None:
    # The orchestrator works with any trainer; the built-in one is reached through
    # stepscale.sweeps.trainers.builtin alone.
    importers = sorted(
        m
        for m, deps in GRAPH.items()
        if _within(m, "stepscale.sweeps") and any(_within(i, "stepscale.models") for i in deps)
    )
    assert importers == ["stepscale.sweeps.trainers.builtin"]


SHARED = (
    "stepscale.rundir",
    "stepscale.files",
    "stepscale.redact",
    "stepscale.versions",
    "stepscale.trainer",
    "stepscale.reporters",
    "stepscale.client",
)


def test_the_shared_contracts_import_no_subpackage() -> None:
    for module in SHARED:
        subpackages = {"stepscale.sweeps", "stepscale.models", "stepscale.analysis"}
        bad = {i for i in GRAPH[module] for p in subpackages if _within(i, p)}
        assert not bad, module


def _loaded_by(modules: str, unwanted: set[str], prefix: str = "stepscale.analysis") -> str:
    """Which of ``unwanted`` (top-level packages) and which modules under ``prefix`` a fresh
    Python has loaded after importing ``modules`` (printed as a list)."""
    code = (
        f"import sys, {modules}\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(unwanted)!r}))"
        f" + [m for m in sys.modules if m.startswith({prefix!r})])\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return res.stdout.strip() + res.stderr


def test_the_trainer_interface_imports_nothing_heavy() -> None:
    heavy = {"jax", "flax", "optax", "optuna", "hydra", "omegaconf", "numpy", "submitit"}
    modules = "stepscale.trainer, stepscale.reporters, stepscale.client"
    assert _loaded_by(modules, heavy, prefix="stepscale.sweeps") == "[]"


def test_the_client_is_self_contained_and_names_what_the_contract_names() -> None:
    from stepscale import client, trainer

    assert GRAPH["stepscale.client"] == set()  # a copy of the one file works elsewhere
    for name in ("METRICS_JSONL", "STATUS_JSON", "CONFIG_JSON", "CONTROL_JSON"):
        assert getattr(client, name) == getattr(rundir, name), name
    for name in [n for n in dir(client) if n.startswith("ENV_")]:
        assert getattr(client, name) == getattr(trainer, name), name


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (as a path), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycle_among_sweeps_modules() -> None:
    sweeps = {m: {i for i in d if _within(i, "stepscale.sweeps")} for m, d in GRAPH.items()}
    sweeps = {m: d for m, d in sweeps.items() if _within(m, "stepscale.sweeps")}
    # A package's __init__ importing its own modules is not a cycle of jobs.
    sweeps = {m: {i for i in d if not m.startswith(i + ".")} for m, d in sweeps.items()}
    assert _cycle(sweeps) is None, " → ".join(_cycle(sweeps) or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_installed_names_live_under_stepscale_only(tmp_path: Path) -> None:
    # From a directory without the repository on sys.path: ours import, generic names do not.
    code = (
        "import importlib.util, stepscale.models, stepscale.sweeps, stepscale.analysis\n"
        "import stepscale.conf\n"
        "print([n for n in ('models', 'sweeps', 'analysis', 'conf')"
        " if importlib.util.find_spec(n) is not None])\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert res.stdout.strip() == "[]", res.stdout + res.stderr


RAY_MODULES = {
    "stepscale.sweeps.launch.ray_cluster",
    "stepscale.sweeps.launch.ray_detach",
    "stepscale.sweeps.launch.ray_host",
    "stepscale.sweeps.launch.ray_launcher",
    "stepscale.sweeps.launch.ray_pool",
}


def test_only_the_ray_launchers_modules_import_ray() -> None:
    """Ray is an extra (`stepscale[ray]`): only `launcher=ray`'s own modules import it, and
    nothing loads it until that launcher is chosen."""
    files = {_module_name(p): p for top in FOLDERS for p in (ROOT / top).rglob("*.py")}
    importers = {m for m, p in files.items() if any(_within(i, "ray") for i in _imports(p, m))}
    assert importers and importers <= RAY_MODULES, importers - RAY_MODULES
    assert {m for m in GRAPH if m.startswith("stepscale.sweeps.launch.ray")} == RAY_MODULES
    # The launcher's module (registered with every built-in launcher) imports Ray only
    # inside the functions that run once launcher=ray is chosen.
    modules = (
        "stepscale.cli.main, stepscale.sweeps.launch.launchers, stepscale.sweeps.run.scheduler"
    )
    assert _loaded_by(modules, {"ray"}, prefix="stepscale.sweeps.launch.ray_p") == "[]"


def test_a_trial_job_imports_neither_hydra_nor_the_analysis() -> None:
    modules = "stepscale.sweeps.job.trial_job, stepscale.sweeps.job.worker_main"
    assert _loaded_by(modules, {"hydra", "matplotlib", "xarray"}) == "[]"


def test_a_command_trainers_job_never_loads_jax() -> None:
    # (the built-in trainer's config dataclasses load with the study schema; nothing else)
    modules = "stepscale.sweeps.job.trial_job, stepscale.sweeps.job.command"
    assert _loaded_by(modules, {"jax", "flax", "optax"}, prefix="stepscale.models.t") == "[]"


def test_sweep_version_names_the_installed_package() -> None:
    sweep = Path(sys.executable).with_name("sweep")
    res = subprocess.run([str(sweep), "--version"], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == f"sweep (stepscale) {stepscale.__version__}"


# ------------------------------------------------------------------ the run directory


def _keys_of_a_run(tmp_path: Path) -> tuple[set[str], set[str]]:
    status_keys: set[str] = set()
    metric_keys: set[str] = set()
    for name, cfg in (("gpt", tiny_gpt()), ("nqm", tiny_nqm(train__max_steps=20))):
        run = tmp_path / name
        train(cfg, JsonlReporter(run), run_dir=run)
        status_keys |= set(json.loads((run / rundir.STATUS_JSON).read_text()))
        for record in read_jsonl(run / rundir.METRICS_JSONL):
            metric_keys |= set(record)
    return status_keys, metric_keys


def test_the_trainer_writes_only_keys_the_contract_knows(tmp_path: Path) -> None:
    status_keys, metric_keys = _keys_of_a_run(tmp_path)
    assert set(rundir.STATUS_REQUIRED) <= status_keys
    assert status_keys <= set(rundir.STATUS_KEYS), status_keys - set(rundir.STATUS_KEYS)
    assert metric_keys <= {"step", *rundir.METRIC_KEYS}, metric_keys - set(rundir.METRIC_KEYS)
    # The reader's coordinates are keys the writer emits.
    assert set(rundir.STATUS_COORDS) <= status_keys


def test_trainer_and_analysis_cross_a_target_at_the_same_step(tmp_path: Path) -> None:
    cfg = tiny_nqm(train__max_steps=60, train__eval_every=5)
    probe = train(cfg, JsonlReporter(tmp_path / "probe"), run_dir=tmp_path / "probe")
    evals = [r for r in read_jsonl(tmp_path / "probe" / rundir.METRICS_JSONL) if "eval_loss" in r]
    losses = np.array([r["eval_loss"] for r in evals])
    # A target half-way (in log) between two evaluations, crossed mid-run.
    k = len(losses) // 2
    target = math.sqrt(losses[k - 1] * losses[k]) if losses[k] < losses[k - 1] else None
    assert target is not None and probe["state"] == "complete"
    cfg = tiny_nqm(
        train__max_steps=60, train__eval_every=5, train__target_loss=target,
        train__stop_at_target=False,
    )  # fmt: skip
    status = train(cfg, JsonlReporter(tmp_path / "run"), run_dir=tmp_path / "run")
    steps = [r["step"] for r in evals]
    first, interp = first_crossing(steps, losses, target)
    assert status["steps_to_target"] == first
    assert status["steps_to_target_interp"] == interp
    assert steps[k - 1] < interp < steps[k]


def test_the_crossing_is_log_linear_and_clamped() -> None:
    assert rundir.interpolated_crossing(0, 4.0, 10, 1.0, 2.0) == 5.0
    assert rundir.interpolated_crossing(0, -1.0, 10, -3.0, -2.0) == 5.0  # linear when ≤ 0
    assert rundir.interpolated_crossing(0, 4.0, 10, 1.0, 8.0) == 0.0  # clamped
    assert rundir.interpolated_crossing(0, 2.0, 10, 2.0, 2.0) == 10.0
