"""How the training state is laid out over the data mesh (``train.sharding``).

- ``replicated`` (default): every device holds the whole state (parameters, optimizer
  state, EMA); only the batch is split over the devices.
- ``fsdp`` (fully sharded data parallelism): every array of the state that has at least
  `MIN_SHARD_ELEMENTS` elements and a dimension divisible by the number of devices is split
  over the data axis along its largest such dimension (the first of equal ones); every other
  array (biases, norm scales, small embeddings, step counters, the optimizer's scalars) stays
  replicated. The rule looks only at shapes, so an optimizer's moments and the EMA are laid
  out like the parameters they belong to.

Under ``fsdp`` the step gathers the parameters where the loss uses them (XLA inserts one
all-gather per tensor) and hands their gradients back in the parameters' layout (the
custom VJP of `gather` constrains the cotangent, so XLA reduce-scatters the per-device
partial gradients rather than keeping whole ones; XLA's CPU backend emits that as an
all-reduce and a slice); gradient accumulators, clipping, the optimizer update and the EMA
then run on the shards. Every number is the one the replicated program computes, up to the
order of floating-point sums. When the gathered copies are freed is XLA's choice: the
persistent state is what is guaranteed to be sharded.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from stepscale.models.batching import AXIS

SHARDINGS = ("replicated", "fsdp")
# Smaller arrays stay replicated under fsdp: gathering them costs more than it saves.
MIN_SHARD_ELEMENTS = 1024


def fsdp_dim(shape: tuple[int, ...], n_devices: int) -> int | None:
    """The dimension of an array of ``shape`` that fsdp splits over ``n_devices``, or None
    when the array stays replicated (fewer than `MIN_SHARD_ELEMENTS` elements, one device,
    or no dimension divisible by ``n_devices``)."""
    if n_devices < 2 or math.prod(shape) < MIN_SHARD_ELEMENTS:
        return None
    best: int | None = None
    for i, size in enumerate(shape):
        if size % n_devices == 0 and (best is None or size > shape[best]):
            best = i
    return best


def partition_spec(shape: tuple[int, ...], n_devices: int) -> PartitionSpec:
    """The fsdp `PartitionSpec` of an array of ``shape`` (empty = replicated)."""
    dim = fsdp_dim(shape, n_devices)
    if dim is None:
        return PartitionSpec()
    return PartitionSpec(*(AXIS if i == dim else None for i in range(len(shape))))


def tree_shardings(abstract: Any, mesh: Mesh, mode: str) -> Any:
    """A `NamedSharding` for every leaf of ``abstract`` (arrays or shape structs) under
    sharding ``mode``, in the same tree structure."""
    n = mesh.shape[AXIS]
    if mode == "replicated":
        return jax.tree.map(lambda _: NamedSharding(mesh, PartitionSpec()), abstract)
    return jax.tree.map(lambda x: NamedSharding(mesh, partition_spec(x.shape, n)), abstract)


def sharded_count(shapes: list[tuple[int, ...]], n_devices: int) -> int:
    """How many of the arrays of ``shapes`` fsdp splits over ``n_devices``."""
    return sum(fsdp_dim(s, n_devices) is not None for s in shapes)


def constrain(tree: Any, shardings: Any | None) -> Any:
    """``tree`` laid out as ``shardings`` inside a compiled function (None: unchanged)."""
    if shardings is None:
        return tree
    return jax.lax.with_sharding_constraint(tree, shardings)


def gather(param_shardings: Any, mesh: Mesh) -> Callable[[Any], Any]:
    """``f(params) -> params`` that all-gathers sharded parameters for use, and whose
    gradient comes back laid out as ``param_shardings`` (a reduce-scatter), not replicated."""
    whole = jax.tree.map(lambda _: NamedSharding(mesh, PartitionSpec()), param_shardings)

    @jax.custom_vjp
    def f(params: Any) -> Any:
        return jax.lax.with_sharding_constraint(params, whole)

    def fwd(params: Any) -> tuple[Any, None]:
        return f(params), None

    def bwd(_: None, cotangent: Any) -> tuple[Any]:
        return (jax.lax.with_sharding_constraint(cotangent, param_shardings),)

    f.defvjp(fwd, bwd)
    return f


def bytes_per_device(tree: Any) -> int:
    """Bytes of the arrays of ``tree`` that one device holds, from their shardings (the
    largest over the devices)."""
    per_device: dict[Any, int] = {}
    for x in jax.tree.leaves(tree):
        if not isinstance(x, jax.Array):
            continue
        shard = math.prod(x.sharding.shard_shape(x.shape)) * x.dtype.itemsize
        for device in x.sharding.device_set:
            per_device[device] = per_device.get(device, 0) + shard
    return max(per_device.values(), default=0)
