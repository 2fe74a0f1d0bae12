"""Atomic checkpoints of the training state, last k kept, restored bit-exactly.

In a multi-process run the trainer gathers the state and only process 0 calls `save`;
every process calls `restore` with its own (global) template.

A checkpoint is a folder ``checkpoints/step_<N>/`` with ``arrays.npz`` (every array leaf
of the state, whole, by its tree path) and ``host.json`` (the loop's host-side state and the
layout that wrote it: devices, processes, ``train.sharding``). Arrays are stored whole
whatever their sharding, so a run resumes on any device count or sharding. It is
written under a temporary name and renamed into place, so a crash mid-write leaves
either the previous checkpoints or the new one, never a torn one.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import jax
import numpy as np

_PREFIX = "step_"


def _leaf_name(path: tuple[Any, ...]) -> str:
    return jax.tree_util.keystr(path)


def save(
    directory: Path,
    step: int,
    state: Any,
    host: dict[str, Any],
    keep: int,
    layout: dict[str, Any] | None = None,
) -> Path:
    """Write the checkpoint of ``step`` and delete all but the newest ``keep``; ``layout``
    (how the run was spread over devices) is recorded beside the state."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"{_PREFIX}{step:09d}"
    tmp = directory / f".tmp-{_PREFIX}{step:09d}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    leaves = jax.tree_util.tree_flatten_with_path(jax.device_get(state))[0]
    arrays: dict[str, np.ndarray] = {}
    dtypes: dict[str, str] = {}
    for i, (path, leaf) in enumerate(leaves):
        arr = np.asarray(leaf)
        dtypes[f"a{i}"] = arr.dtype.name
        if (
            arr.dtype.kind == "V" or arr.dtype.name == "bfloat16"
        ):  # numpy cannot store these natively
            arr = arr.view(np.uint16)
        arrays[f"a{i}"] = arr
        dtypes[f"a{i}/path"] = _leaf_name(path)
    with open(tmp / "arrays.npz", "wb") as f:
        np.savez(f, **arrays)
        f.flush()
        os.fsync(f.fileno())
    with open(tmp / "host.json", "w") as f:
        meta = {"step": step, "host": host, "dtypes": dtypes, "layout": layout}
        json.dump(meta, f, allow_nan=True)
        f.flush()
        os.fsync(f.fileno())
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in list_steps(directory)[:-keep] if keep > 0 else []:
        shutil.rmtree(directory / f"{_PREFIX}{old:09d}", ignore_errors=True)
    return final


def list_steps(directory: Path) -> list[int]:
    """Steps of the complete checkpoints in ``directory``, oldest first."""
    if not directory.is_dir():
        return []
    steps = []
    for p in directory.iterdir():
        if (
            p.name.startswith(_PREFIX)
            and (p / "host.json").exists()
            and (p / "arrays.npz").exists()
        ):
            steps.append(int(p.name[len(_PREFIX) :]))
    return sorted(steps)


def restore(directory: Path, step: int, template: Any) -> tuple[Any, dict[str, Any]]:
    """Load checkpoint ``step`` into the structure (and shardings) of ``template``."""
    folder = directory / f"{_PREFIX}{step:09d}"
    meta = json.loads((folder / "host.json").read_text())
    dtypes = meta["dtypes"]
    leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
    with np.load(folder / "arrays.npz") as data:
        restored = []
        for i, (path, like) in enumerate(leaves):
            key = f"a{i}"
            if dtypes.get(f"{key}/path") != _leaf_name(path):
                raise ValueError(
                    f"checkpoint {folder} does not match this run's state at {_leaf_name(path)}; "
                    "was the model or optimizer changed? Use a new run_dir."
                )
            arr = data[key]
            if arr.dtype.name != dtypes[key]:
                arr = arr.view(jax.numpy.dtype(dtypes[key]))
            restored.append(_place(arr, getattr(like, "sharding", None)))
    return jax.tree_util.tree_unflatten(treedef, restored), meta["host"]


def layout(directory: Path, step: int) -> dict[str, Any] | None:
    """The layout recorded with checkpoint ``step`` (None for checkpoints that lack one)."""
    meta = json.loads((directory / f"{_PREFIX}{step:09d}" / "host.json").read_text())
    return meta.get("layout")


def _place(arr: np.ndarray, sharding: Any) -> Any:
    """``arr`` laid out as ``sharding``. A sharding spanning several processes is filled by
    each process for its own devices (``device_put`` would compare the value across
    processes first); every process reads the same checkpoint."""
    if sharding is None:
        return arr
    if sharding.is_fully_addressable:
        return jax.device_put(arr, sharding)
    return jax.make_array_from_callback(arr.shape, sharding, lambda index: arr[index])
