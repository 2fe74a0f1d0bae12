"""GPUs of trials that run on this machine: with ``launcher.gpus_per_trial`` set, each
running trial (a warm worker, a process) holds a slot of that many GPUs no other holds,
handed over as ``CUDA_VISIBLE_DEVICES``."""

from __future__ import annotations

import os
from pathlib import Path

from stepscale.errors import UsageError
from stepscale.sweeps.study.schema import StudyConfig


def local_gpus() -> list[int]:
    """The GPUs this process may hand to local jobs: CUDA_VISIBLE_DEVICES if set, else every
    NVIDIA GPU the driver lists (none on a machine without one)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [int(x) for x in visible.split(",") if x.strip().isdigit()]
    return list(range(len(list(Path("/proc/driver/nvidia/gpus").glob("*")))))


def slot_gpus(per_trial: int, slot: int) -> list[int]:
    """The GPUs of local slot ``slot`` (``per_trial`` of them, disjoint from other slots')."""
    k = int(per_trial)
    ids = local_gpus() or list(range((slot + 1) * k))  # not countable here: trust config
    if len(ids) < (slot + 1) * k:
        raise UsageError(
            f"launcher.gpus_per_trial={k}: {slot + 1} trials at once need "
            f"{(slot + 1) * k} GPUs, this machine shows {len(ids)}; lower parallelism"
        )
    return ids[slot * k : (slot + 1) * k]


def check_local_gpus(cfg: StudyConfig) -> None:
    """With ``launcher.gpus_per_trial``: the GPUs this machine shows hold ``parallelism``
    trials at once (checked before the run dir is made, not when the first trial is
    submitted); a machine whose GPUs cannot be counted is trusted."""
    k = int(cfg.launcher.gpus_per_trial or 0)
    if not k:
        return
    shown = len(local_gpus())
    if shown and k * cfg.parallelism > shown:
        raise UsageError(
            f"launcher.gpus_per_trial={k}: {cfg.parallelism} trials at once (parallelism) "
            f"need {k * cfg.parallelism} GPUs, this machine shows {shown}; lower parallelism"
        )
