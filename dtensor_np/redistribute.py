"""Running a redistribute plan on local shards through a collectives backend.

A plan (pure steps, see :mod:`dtensor_np.planner`) is compiled once per
(source spec, target spec, ranks held here) into a list of small operations
with every size precomputed from the specs: uneven shards are gathered,
scattered and exchanged with per-rank counts (no padding), and no per-call
work grows with the number of steps' metadata.

Example:
    >>> import numpy as np, collectives
    >>> from dtensor_np import DeviceMesh, DTensorSpec, TensorMeta, Shard, Replicate
    >>> mesh = DeviceMesh((2,))
    >>> src = DTensorSpec(mesh, (Shard(0),), TensorMeta((3,), "int64"))
    >>> out = redistribute_shards({0: np.array([0, 1]), 1: np.array([2])}, src,
    ...                           src.with_placements((Replicate(),)), collectives.SimulatedBackend(2))
    >>> out[1].tolist()
    [0, 1, 2]
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable, Mapping

import numpy as np

from .planner import Step, plan_redistribute
from .spec import DTensorSpec, ShardOrder, _local_block

__all__ = ["redistribute_shards", "compile_redistribute"]

Shards = dict[int, Any]
Operation = Callable[[Any, Shards], Shards]


def redistribute_shards(shards: Mapping[int, Any], src: DTensorSpec, dst: DTensorSpec, backend: Any) -> Shards:
    """Move local shards from ``src`` placements to ``dst`` placements; returns new shards."""
    if src == dst:
        return dict(shards)
    out = dict(shards)
    for operation in compile_redistribute(src, dst, backend.ranks):
        out = operation(backend, out)
    return out


@lru_cache(maxsize=4096)
def compile_redistribute(src: DTensorSpec, dst: DTensorSpec, ranks: tuple[int, ...]) -> tuple[Operation, ...]:
    """The plan from ``src`` to ``dst`` as operations on the shards of ``ranks``; cached on pure values."""
    plan = plan_redistribute(src, dst)
    mesh = src.mesh
    shape = src.shape
    world = mesh.all_ranks
    coords = {r: mesh.coordinate_of(r) for r in world}
    trivial = {m for m, s in enumerate(mesh.shape) if s == 1}
    order: ShardOrder = tuple(
        (d, tuple(m for m in ms if m not in trivial)) for d, ms in src.shard_order  # type: ignore[union-attr]
    )
    order = tuple((d, ms) for d, ms in order if ms)

    def blocks(order: ShardOrder) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]:
        return {r: _local_block(shape, mesh.shape, order, coords[r]) for r in world}

    operations = []
    before = blocks(order)
    for step in plan:
        after = blocks(step.shard_order)
        operations.append(_operation(step, mesh, before, after, coords, ranks))
        before = after
    return tuple(operations)


def _operation(step: Step, mesh, before, after, coords, ranks) -> Operation:
    groups = mesh.groups(step.mesh_dims)
    kind = step.kind
    if kind == "all_gather":
        axis = step.src.dim  # type: ignore[union-attr]
        in_sizes = {r: b[0][axis] for r, b in before.items()}
        return lambda backend, shards: backend.all_gather(shards, groups, axis=axis, in_sizes=in_sizes, check=False)
    if kind == "all_reduce":
        op = step.src.reduce_op  # type: ignore[union-attr]
        return lambda backend, shards: backend.all_reduce(shards, groups, op=op, check=False)
    if kind == "reduce_scatter":
        op = step.src.reduce_op  # type: ignore[union-attr]
        axis = step.dst.dim  # type: ignore[union-attr]
        out_sizes = {r: a[0][axis] for r, a in after.items()}
        return lambda backend, shards: backend.reduce_scatter(
            shards, groups, op=op, axis=axis, out_sizes=out_sizes, check=False
        )
    if kind == "all_to_all":
        concat_axis = step.src.dim  # type: ignore[union-attr]
        split_axis = step.dst.dim  # type: ignore[union-attr]
        in_sizes = {r: b[0][concat_axis] for r, b in before.items()}
        out_sizes = {r: a[0][split_axis] for r, a in after.items()}
        return lambda backend, shards: backend.all_to_all(
            shards,
            groups,
            split_axis=split_axis,
            concat_axis=concat_axis,
            in_sizes=in_sizes,
            out_sizes=out_sizes,
            check=False,
        )
    if kind == "chunk":
        slices = {r: _relative_slice(before[r], after[r]) for r in ranks}
        return lambda backend, shards: {r: _contiguous(x[slices[r]]) for r, x in shards.items()}
    if kind == "partition":
        return _partition(step, mesh, coords, ranks)
    raise AssertionError(f"unknown step kind {kind}")  # pragma: no cover


def _relative_slice(before, after) -> tuple[slice, ...]:
    (_, start_before), (shape_after, start_after) = before, after
    return tuple(slice(a - b, a - b + n) for a, b, n in zip(start_after, start_before, shape_after))


def _contiguous(x: Any) -> Any:
    """A C-contiguous copy, so a chunk never aliases the array it came from."""
    return x.copy(order="C")


def _partition(step: Step, mesh, coords, ranks) -> Operation:
    """R -> P(op), locally: sum divides by the group size (integers stay on the first rank); others keep."""
    op = step.dst.reduce_op  # type: ignore[union-attr]
    dims = step.mesh_dims
    group = 1
    for m in dims:
        group *= mesh.shape[m]
    first = {r: all(coords[r][m] == 0 for m in dims) for r in ranks}

    def run(backend, shards: Shards) -> Shards:
        if op != "sum":
            return dict(shards)
        out = {}
        for r, x in shards.items():
            if x.dtype.kind in "fc":
                out[r] = x / x.dtype.type(group)
            else:
                out[r] = x.copy() if first[r] else np.zeros_like(x)
        return out

    return run

