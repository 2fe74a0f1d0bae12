"""MaxText batch semantics: global batch = per-device batch × devices × accumulation steps.

The user gives the global batch (in examples) and optionally the largest per-device
microbatch; this module derives devices, microbatch and accumulation steps, builds the
1-D data mesh and splits a global batch into microbatches so that every microbatch stays
spread over all devices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from stepscale.models.distributed import mesh_devices
from stepscale.models.errors import ConfigError

AXIS = "data"


@dataclass(frozen=True)
class BatchPlan:
    """How one optimizer step's global batch is laid out."""

    global_batch: int
    devices: int
    per_device: int  # examples per device per step
    microbatch: int  # examples per device per forward/backward pass
    accum_steps: int  # microbatches accumulated per update (the user-visible number)
    n_micro: int  # microbatches the step computes: accum_steps, or 2 for the noise scale

    @property
    def noise_scale_free(self) -> bool:
        """True when a step has ≥ 2 microbatches anyway, so B_simple costs nothing."""
        return self.accum_steps >= 2


def plan_batch(
    global_batch: int, devices: int, max_microbatch: int | None, noise_scale: bool
) -> BatchPlan:
    """Derive the layout, or raise ConfigError naming the field at fault."""
    if global_batch <= 0:
        raise ConfigError(
            "data.global_batch", f"must be a positive number of examples, got {global_batch}"
        )
    if global_batch % devices:
        raise ConfigError(
            "data.global_batch",
            f"{global_batch} is not divisible by the {devices} devices in use "
            "(set train.devices or pick a multiple)",
        )
    per_device = global_batch // devices
    micro = per_device if max_microbatch is None else min(per_device, max_microbatch)
    if micro <= 0:
        raise ConfigError("data.max_microbatch", f"must be positive, got {max_microbatch}")
    if per_device % micro:
        raise ConfigError(
            "data.max_microbatch",
            f"global batch {global_batch} is not divisible by devices × microbatch = "
            f"{devices} × {micro}; choose a microbatch that divides {per_device}",
        )
    accum = per_device // micro
    n_micro = accum
    if noise_scale and accum < 2:
        if per_device % 2:
            raise ConfigError(
                "train.noise_scale",
                f"needs an even number of examples per device to split a step into two "
                f"microbatches; this run has {per_device}",
            )
        n_micro = 2
    return BatchPlan(global_batch, devices, per_device, micro, accum, n_micro)


def make_mesh(n_devices: int) -> Mesh:
    """A 1-D mesh over the first ``n_devices`` local devices; in a multi-process run over
    ``n_devices`` global devices, the same number from every process
    (`models.distributed.mesh_devices`)."""
    return Mesh(np.array(mesh_devices(n_devices)), (AXIS,))


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Examples (leading axis) spread over the data axis."""
    return NamedSharding(mesh, PartitionSpec(AXIS))


def replicated(mesh: Mesh) -> NamedSharding:
    """The same value on every device."""
    return NamedSharding(mesh, PartitionSpec())


def split_microbatches(batch: dict[str, Any], plan: BatchPlan, mesh: Mesh) -> dict[str, Any]:
    """Reshape each ``[B, ...]`` array to ``[n_micro, B / n_micro, ...]``.

    Microbatch ``i`` takes the ``i``-th slice of every device's rows, so each microbatch is
    itself spread over all devices and the split moves no data between devices.
    """
    d, n = plan.devices, plan.n_micro
    m = plan.per_device // n
    spec = NamedSharding(mesh, PartitionSpec(None, AXIS))

    def split(x: jax.Array) -> jax.Array:
        y = x.reshape((d, n, m, *x.shape[1:]))
        y = jax.numpy.swapaxes(y, 0, 1).reshape((n, d * m, *x.shape[1:]))
        return jax.lax.with_sharding_constraint(y, spec)

    return jax.tree.map(split, batch)
