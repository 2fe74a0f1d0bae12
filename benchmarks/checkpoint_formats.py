"""Our checkpoints (one .npz per step, renamed into place, SHA-256 in host.json) against
orbax-checkpoint's StandardCheckpointer (the JAX ecosystem's format), side by side in one run.

For a training state of the tiny demo's size and of a larger one (``--sizes``, floats per
leaf × leaves): the time to save (until the checkpoint is complete on disk), to restore, the
bytes on disk, whether the restore is bit-identical, and the import time each adds to a
fresh process. Prints one JSON document.

    python benchmarks/checkpoint_formats.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

from stepscale.models import checkpoint


def _state(leaves: int, floats: int, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {
        "params": {f"w{i}": jax.numpy.asarray(rng.standard_normal(floats, np.float32)) for i in range(leaves)},
        "mu": {f"w{i}": jax.numpy.asarray(rng.standard_normal(floats, np.float32)) for i in range(leaves)},
        "nu": {f"w{i}": jax.numpy.asarray(rng.random(floats, np.float32)) for i in range(leaves)},
        "step": jax.numpy.asarray(7, np.int32),
    }  # fmt: skip


def _same(a: Any, b: Any) -> bool:
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(
        np.asarray(x).tobytes() == np.asarray(y).tobytes() for x, y in zip(la, lb, strict=True)
    )


def _bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def ours(state: Any, work: Path) -> dict[str, float]:
    folder = work / "ours"
    t0 = time.perf_counter()
    checkpoint.save(folder, 1, state, {"step": 1}, keep=2)
    t1 = time.perf_counter()
    restored, _ = checkpoint.restore(folder, 1, state)
    jax.block_until_ready(restored)
    t2 = time.perf_counter()
    out = {"save_s": t1 - t0, "restore_s": t2 - t1, "bytes": _bytes(folder)}
    out["identical"] = _same(state, restored)
    shutil.rmtree(folder)
    return out


def orbax(state: Any, work: Path) -> dict[str, float]:
    import orbax.checkpoint as ocp

    folder = work / "orbax"
    ckptr = ocp.StandardCheckpointer()
    t0 = time.perf_counter()
    ckptr.save(folder / "1", state)
    ckptr.wait_until_finished()
    t1 = time.perf_counter()
    restored = ckptr.restore(folder / "1", state)
    jax.block_until_ready(restored)
    t2 = time.perf_counter()
    out = {"save_s": t1 - t0, "restore_s": t2 - t1, "bytes": _bytes(folder)}
    out["identical"] = _same(state, restored)
    ckptr.close()
    shutil.rmtree(folder)
    return out


def import_s(module: str) -> float:
    """Seconds a fresh interpreter spends importing ``module`` beyond importing jax."""
    code = (
        "import time, jax; t = time.perf_counter(); import "
        + module
        + "; print(time.perf_counter() - t)"
    )
    runs = [
        float(subprocess.check_output([sys.executable, "-c", code], text=True)) for _ in range(3)
    ]
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ckpt-bench-"))
    result: dict[str, Any] = {"benchmark": "checkpoint_formats", "sizes": {}}
    try:
        for name, (leaves, floats) in {"tiny_demo": (12, 4096), "larger": (24, 262_144)}.items():
            state = _state(leaves, floats)
            rows: dict[str, list[dict[str, float]]] = {"ours": [], "orbax": []}
            for _ in range(args.repeats):  # alternated, so drift hits both alike
                rows["ours"].append(ours(state, work))
                rows["orbax"].append(orbax(state, work))
            summary = {}
            for kind, runs in rows.items():
                summary[kind] = {
                    "save_s_median": statistics.median(r["save_s"] for r in runs),
                    "restore_s_median": statistics.median(r["restore_s"] for r in runs),
                    "bytes": runs[0]["bytes"],
                    "identical": all(r["identical"] for r in runs),
                }
            summary["orbax_over_ours_save"] = (
                summary["orbax"]["save_s_median"] / summary["ours"]["save_s_median"]
            )
            summary["orbax_over_ours_restore"] = (
                summary["orbax"]["restore_s_median"] / summary["ours"]["restore_s_median"]
            )
            summary["floats"] = 3 * leaves * floats
            result["sizes"][name] = summary
        result["import_s"] = {
            "stepscale.models.checkpoint": import_s("stepscale.models.checkpoint"),
            "orbax.checkpoint": import_s("orbax.checkpoint"),
        }
        result["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
