"""``run.json``: the provenance of a study's runs — the command (redacted), the versions,
devices and host, the git commits of the code and of the user's configs, the storage, and
one session per run of the orchestrator with its start and end."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from typing import Any

from stepscale.files import read_json, write_json_atomic
from stepscale.redact import redact
from stepscale.rundir import RUN_JSON
from stepscale.sweeps.study.storage import StorageSpec
from stepscale.sweeps.study.trials import now_iso
from stepscale.versions import package_versions, python_version

# The distributions whose versions run.json records (those installed).
PACKAGES = (
    "stepscale", "jax", "jaxlib", "flax", "optax", "optuna", "numpy", "hydra-core", "submitit",
)  # fmt: skip


def _git(cwd: Path, trusted: bool = False) -> dict[str, Any]:
    """The commit (and whether the tree is dirty) of the git checkout holding ``cwd``.
    ``trusted``: read it even when another user owns it (git's safe.directory), as for the
    checkout of the code that is running anyway."""
    git = ["git", "-c", f"safe.directory={cwd}"] if trusted else ["git"]
    try:
        head = subprocess.run(
            [*git, "rev-parse", "--show-toplevel", "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
        )
        if head.returncode != 0:
            return {"commit": None, "dirty": None}
        toplevel, commit = head.stdout.split()[:2]
        dirty = subprocess.run(
            [*git, "status", "--porcelain"], cwd=cwd, capture_output=True, text=True, timeout=5
        )
        return {"commit": commit, "dirty": bool(dirty.stdout.strip()), "path": toplevel}
    except (OSError, subprocess.SubprocessError, ValueError):
        return {"commit": None, "dirty": None}


def provenance_git() -> dict[str, Any]:
    """run.json's ``git``: the checkout of the stepscale code that ran (wherever the
    command was typed), and under ``workdir`` the user's own repository (their configs)
    when the command ran inside a different one."""
    code = _git(Path(__file__).resolve().parent.parent, trusted=True)
    workdir = _git(Path.cwd())
    if workdir["commit"] is not None and workdir.get("path") != code.get("path"):
        code["workdir"] = workdir
    return code


def versions() -> dict[str, str]:
    """The Python version and those of the installed `PACKAGES`."""
    installed = {k: v for k, v in package_versions(PACKAGES).items() if v is not None}
    return {"python": python_version(), **installed}


def write_provenance(
    run_dir: Path, storage: StorageSpec, argv: list[str], jax_devices: bool = True
) -> dict[str, Any]:
    """Start a session in ``run.json`` (created on the first run); returns the record.
    ``jax_devices``: record JAX's devices here (the built-in trainer's); a user trainer's
    devices are its own business, and its orchestrator need not load JAX at all."""
    path = run_dir / RUN_JSON
    record = read_json(path, lenient=True) or {}
    command = ["sweep", *(redact(a) for a in argv)]
    session = {"started": now_iso(), "ended": None, "command": command}
    record.update(
        command=command,
        started=record.get("started", session["started"]),
        ended=None,
        versions=versions(),
        **_devices(jax_devices),
        host=socket.gethostname(),
        git=provenance_git(),
        storage=storage.display(),
    )
    record["sessions"] = [*record.get("sessions", []), session]
    write_json_atomic(path, record)
    return record


def _devices(known: bool) -> dict[str, Any]:
    if not known:
        return {"devices": None, "platform": None}
    import jax

    return {
        "devices": [f"{d.platform}:{d.id}" for d in jax.devices()],
        "platform": jax.devices()[0].platform,
    }


def finish_provenance(run_dir: Path, complete: bool) -> None:
    """End the current session; the study's ``ended`` is set only when it is ``complete``."""
    path = run_dir / RUN_JSON
    record = read_json(path, lenient=True) or {}
    stamp = now_iso()
    if record.get("sessions"):
        record["sessions"][-1]["ended"] = stamp
    record["ended"] = stamp if complete else None
    write_json_atomic(path, record)
