"""Module paths of `stepscale.sweeps` before it was split into wings, still importable.

A SLURM job queued before an upgrade holds pickles that name the old paths (its trial
spec, trainer spec, storage spec, job object), and an old console script imports
``stepscale.sweeps.cli``; each old path loads the module that now holds its code. The old
``stepscale.sweeps.job`` and ``stepscale.sweeps.trainers`` are the wings' own packages
now: their ``__init__`` hands out the old modules' names on first use
(:func:`old_module_attribute`).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any

OLD = "stepscale.sweeps."
MOVED = {
    "schema": "stepscale.sweeps.study.schema",
    "compose": "stepscale.sweeps.study.compose",
    "overrides": "stepscale.sweeps.study.overrides",
    "names": "stepscale.sweeps.study.names",
    "validate": "stepscale.sweeps.study.validate",
    "space": "stepscale.sweeps.study.space",
    "space_doc": "stepscale.sweeps.study.space_doc",
    "derived": "stepscale.sweeps.study.derived",
    "expr": "stepscale.sweeps.study.expr",
    "adaptive_axis": "stepscale.sweeps.study.adaptive_axis",
    "plan": "stepscale.sweeps.study.plan",
    "study_files": "stepscale.sweeps.study.files",
    "provenance": "stepscale.sweeps.study.provenance",
    "samplers": "stepscale.sweeps.study.samplers",
    "storage": "stepscale.sweeps.study.storage",
    "journal": "stepscale.sweeps.study.journal",
    "objective": "stepscale.sweeps.study.objective",
    "trials": "stepscale.sweeps.study.trials",
    "builtin": "stepscale.sweeps.trainers.builtin",
    "trainer_keys": "stepscale.sweeps.trainers.builtin_keys",
    "arg_styles": "stepscale.sweeps.trainers.arg_styles",
    "line_formats": "stepscale.sweeps.trainers.line_formats",
    "output_sources": "stepscale.sweeps.trainers.output_sources",
    "metrics_file": "stepscale.sweeps.trainers.metrics_file",
    "trainer_status": "stepscale.sweeps.trainers.final_status",
    "command_job": "stepscale.sweeps.job.command",
    "trial_spec": "stepscale.sweeps.job.spec",
    "heartbeat": "stepscale.sweeps.job.heartbeat",
    "worker_main": "stepscale.sweeps.job.worker_main",
    "launchers": "stepscale.sweeps.launch.launchers",
    "workers": "stepscale.sweeps.launch.workers",
    "slurm": "stepscale.sweeps.launch.slurm",
    "detach": "stepscale.sweeps.launch.detach",
    "submission": "stepscale.sweeps.launch.submission",
    "scheduler": "stepscale.sweeps.run.scheduler",
    "budget": "stepscale.sweeps.run.budget",
    "transfer": "stepscale.sweeps.run.transfer",
    "adaptive": "stepscale.sweeps.run.adaptive",
    "outcomes": "stepscale.sweeps.run.outcomes",
    "adoption": "stepscale.sweeps.run.adoption",
    "reconcile": "stepscale.sweeps.run.reconcile",
    "signals": "stepscale.sweeps.run.signals",
    "runlock": "stepscale.sweeps.run.runlock",
    "orchestrators": "stepscale.sweeps.run.orchestrators",
    "point_stats": "stepscale.sweeps.run.point_stats",
    "trial_records": "stepscale.sweeps.run.trial_records",
    "killpoints": "stepscale.sweeps.run.killpoints",
    "display": "stepscale.sweeps.run.display",
    "progress": "stepscale.sweeps.run.progress",
    "branch_cmd": "stepscale.sweeps.run.branches",
    "cli": "stepscale.cli.main",
    "run_cmd": "stepscale.cli.run",
    "train_cmd": "stepscale.cli.train",
    "status_cmd": "stepscale.cli.status",
    "stop_cmd": "stepscale.cli.stop",
    "branch_args": "stepscale.cli.branch",
    "dry_run": "stepscale.cli.dry_run",
    "listing": "stepscale.cli.listing",
    "sample_log": "stepscale.cli.sample_log",
    "formats.cli": "stepscale.cli.formats",
    "errors": "stepscale.errors",
}


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``stepscale.sweeps.<old>`` and loads it as the module that holds it now."""

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.startswith(OLD) and fullname.removeprefix(OLD) in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(MOVED[spec.name.removeprefix(OLD)])

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module was loaded under its own name."""


def install() -> None:
    """Make the old paths importable (idempotent)."""
    if not any(isinstance(f, _OldPaths) for f in sys.meta_path):
        sys.meta_path.append(_OldPaths())


def old_module_attribute(new_module: str, package: str, name: str) -> Any:
    """``name`` of the module that ``package`` was before it became a wing (for a
    package's ``__getattr__``); AttributeError for any other name."""
    module = importlib.import_module(new_module)
    if name.startswith("__") or not hasattr(module, name):
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return getattr(module, name)
