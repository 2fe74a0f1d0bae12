"""Provenance of a report: what ran, where, with what, and how it ended.

Everything comes from the run directory — run.json (written by the orchestrator at run
time: command, start/end, package versions including JAX, devices, git, storage),
config.yaml, space.json, study.json — and from the loaded Dataset (trial counts, seeds).
The analysis never imports JAX. Every string is passed through :func:`redact` (again:
the orchestrator already redacts), so a password in a storage URL or a command line
never reaches a report file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from stepscale import rundir
from stepscale.analysis.load import read_json
from stepscale.redact import redact_all
from stepscale.versions import package_versions

__all__ = ["provenance"]

SCHEMA = "stepscale.provenance/v1"
_REPORT_PACKAGES = ("stepscale", "numpy", "scipy", "xarray", "h5netcdf", "h5py", "matplotlib")


def _config(path: Path) -> Any:
    """config.yaml as a JSON-like structure (via OmegaConf, which reads 1e-4 as a float);
    its text when it does not parse; None when absent."""
    if not path.exists():
        return None
    try:
        from omegaconf import OmegaConf

        return OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except Exception:  # an unparsable config is still worth recording verbatim
        try:
            return path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None


def _dig(cfg: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(cfg, Mapping) or part not in cfg:
            return None
        cfg = cfg[part]
    return cfg


def _counts(values: np.ndarray) -> dict[str, int]:
    uniq, n = np.unique(values.astype(str), return_counts=True)
    return {str(u): int(k) for u, k in zip(uniq, n, strict=True)}


def _strings(ds: xr.Dataset, name: str) -> np.ndarray:
    """The text values of a per-trial variable (none when it is absent; gaps left out)."""
    if name not in ds:
        return np.array([], dtype=str)
    return np.array([v for v in ds[name].values.tolist() if isinstance(v, str)], dtype=str)


def _seeds(ds: xr.Dataset, kind: str) -> list[Any]:
    seeds = ds["seed"].values[ds["kind"].values == kind]
    if seeds.dtype.kind == "f":
        seeds = seeds[np.isfinite(seeds)]
    return sorted({s.item() for s in seeds})


def provenance(run_dir: Path, ds: xr.Dataset, extra: Mapping[str, Any]) -> dict[str, Any]:
    """The content of provenance.json (keys sorted when written); ``extra`` is merged in
    under ``report`` (targets, fit settings)."""
    run = read_json(run_dir / rundir.RUN_JSON)
    run = run if isinstance(run, Mapping) else {}
    study = read_json(run_dir / rundir.STUDY_JSON)
    space = read_json(run_dir / rundir.SPACE_JSON)
    cfg = _config(run_dir / rundir.CONFIG_YAML)
    versions = run.get("versions") if isinstance(run.get("versions"), Mapping) else {}
    missing = [
        f
        for f in (rundir.RUN_JSON, rundir.STUDY_JSON, rundir.SPACE_JSON, rundir.CONFIG_YAML)
        if not (run_dir / f).exists()
    ]
    states = ds["state"].values
    by_point = {
        p: _counts(states[ds["point"].values == p])
        for p in dict.fromkeys(ds["point"].values.tolist())
    }
    out = {
        "schema": SCHEMA,
        "study": ds.attrs.get("study"),
        "partial": bool(ds.attrs.get("partial", 0)),
        "command": run.get("command"),
        "sessions": run.get("sessions"),
        "started": run.get("started"),
        "ended": run.get("ended"),
        "versions": versions,
        "python": versions.get("python"),
        "jax": versions.get("jax"),
        "devices": run.get("devices"),
        "platform": run.get("platform"),
        "host": run.get("host"),
        "git": run.get("git"),
        "storage": run.get("storage"),
        "config": cfg,
        "space": space,
        "study_json": study,
        # the built-in trainer's layout over devices: configured, and as each trial ran it
        "sharding": {
            "config": _dig(cfg, "train.sharding"),
            "by_trial": _counts(_strings(ds, "sharding")),
        },
        "seeds": {
            "sampler": _dig(cfg, "sampler.seed"),
            "train": _dig(cfg, "train.seed"),
            "tune_trials": _seeds(ds, "tune"),
            "confirm_trials": _seeds(ds, "confirm"),
        },
        "trials": {
            "total": int(ds.sizes["trial"]),
            "by_state": _counts(states),
            "by_kind": _counts(ds["kind"].values),
            "by_point": by_point,
        },
        "missing_files": missing,
        "report": {**dict(extra), "environment": package_versions(_REPORT_PACKAGES)},
    }
    return redact_all(out)
