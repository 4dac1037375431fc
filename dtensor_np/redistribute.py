"""Running a redistribute plan on local shards: one compiled runner per pair of specs.

:func:`redistributor` compiles the plan from one spec to another (pure steps,
see :mod:`dtensor_np.planner`) into one function on the shards this process
holds: per collective step, the backend's prepared collective
(``backend.prepare``: communicator, counts, datatype and output shape fixed,
one MPI call per use into its output buffer); per local step, the
:func:`local_step` of every rank held.  Both backends take the same path, and
the runner is cached on the two specs, which are interned, so one cache serves
``DTensor.redistribute``, the op dispatcher and the graph interpreter.
:func:`redistribution` adds the target spec for ``DTensor.redistribute``'s
arguments, so a repeated call costs one cached lookup before it communicates.

Example:
    >>> import numpy as np
    >>> from dtensor_np import DeviceMesh, DTensorSpec, TensorMeta, Shard, Replicate
    >>> mesh = DeviceMesh((2,))
    >>> src = DTensorSpec(mesh, (Shard(0),), TensorMeta((3,), "int64"))
    >>> out = redistributor(src, src.with_placements((Replicate(),)))({0: np.array([0, 1]), 1: np.array([2])})
    >>> out[1].tolist()
    [0, 1, 2]
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import numpy as np

from collectives import Array, allocator, array_module, memo

from .placements import Partial, Placement, Replicate
from .planner import Step, collective_call, plan_flag, plan_redistribute
from .runtime import backend_for
from .spec import DTensorSpec, ShardOrder

__all__ = ["LocalStepFn", "local_step", "redistribute_shards", "redistribution", "redistributor", "full_replicator"]

Shards = dict[int, Any]
Runner = Callable[[Mapping[int, Any]], Shards]


# -- local steps -----------------------------------------------------------------------


class LocalStepFn:
    """A plan step that moves no data (``chunk``: R -> S keeps this rank's piece; ``partition``: R -> P).

    ``for_rank(rank)`` is the step as a function of that rank's array, worked
    out once; calling ``step(rank, x)`` does the same.  A chunk of leading
    rows (``R -> S(0)`` and every chunk whose only cut is the first dim) of a
    C-contiguous NumPy block is a read-only view of it (no copy: buffers are
    never written in place; the view keeps the whole block alive); any other
    chunk is a C-contiguous copy (into a recycled buffer when large).  A
    partition divides a ``sum`` by the group size for inexact dtypes
    and keeps integers on the group's first rank (zeros elsewhere); other ops
    keep every value.

    Example:
        >>> from dtensor_np import DeviceMesh, DTensorSpec, TensorMeta, Shard, Replicate
        >>> src = DTensorSpec(DeviceMesh((2,)), (Replicate(),), TensorMeta((5,), "f8"))
        >>> (step,) = plan_redistribute(src, src.with_placements((Shard(0),)))
        >>> local_step(step)(1, np.arange(5.0)).tolist()
        [3.0, 4.0]
    """

    __slots__ = ("step", "_by_rank")

    def __init__(self, step: Step) -> None:
        if step.kind not in ("chunk", "partition"):
            raise ValueError(f"{step} is not a local step")
        self.step = step
        self._by_rank: dict[int, Callable[[Array], Array]] = {}

    def __call__(self, rank: int, x: Array) -> Array:
        return self.for_rank(rank)(x)

    def for_rank(self, rank: int) -> Callable[[Array], Array]:
        """The step on ``rank``'s array."""
        found = self._by_rank.get(rank)
        if found is None:
            found = self._by_rank[rank] = self._build(rank)
        return found

    def _build(self, rank: int) -> Callable[[Array], Array]:
        step = self.step
        if step.kind == "chunk":
            return _chunk(step.before, step.after, rank)
        return _partition(step.dst, step.mesh_dims, step.before.mesh.coordinate_of(rank),  # type: ignore[arg-type]
                          step.before.mesh.shape)


@memo(maxsize=4096, name="dtensor_np.local_steps")
def local_step(step: Step) -> LocalStepFn:
    """The :class:`LocalStepFn` of a ``chunk`` or ``partition`` step (cached on the step, a pure value)."""
    return LocalStepFn(step)


def _chunk(before: DTensorSpec, after: DTensorSpec, rank: int) -> Callable[[Array], Array]:
    """This rank's piece of its block: a read-only view of leading rows, else one C-contiguous copy."""
    shape, start_before = before.local_block(rank)
    out_shape, start_after = after.local_block(rank)
    index = [slice(a - b, a - b + n) for a, b, n in zip(start_after, start_before, out_shape)]
    while index and index[-1] == slice(0, shape[len(index) - 1]):  # trailing whole dims need no index
        index.pop()
    key: Any = index[0] if len(index) == 1 else tuple(index)  # a single leading slice indexes fastest
    dtype = before.dtype
    if len(index) <= 1:  # rows of a C-contiguous block are C-contiguous: a read-only view, no copy
        return _row_view(key)
    take = allocator(out_shape, dtype)
    if take is None:
        return lambda x: x[key].copy()
    ndarray, copyto = np.ndarray, np.copyto

    def copy(x: Array) -> Array:
        if x.__class__ is not ndarray or x.shape != shape or x.dtype != dtype:
            return x[key].copy()
        out = take()
        copyto(out, x[key])
        return out

    return copy


def _row_view(key: Any) -> Callable[[Array], Array]:
    """``x[key]`` (``key`` a leading slice) as a read-only view of a C-contiguous NumPy ``x``; a copy otherwise."""
    ndarray = np.ndarray

    def view(x: Array) -> Array:
        if x.__class__ is not ndarray or not x.flags.c_contiguous:
            return x[key].copy()
        out = x[key]
        out.flags.writeable = False
        return out

    return view


def _partition(target: Partial, mesh_dims: tuple[int, ...], coordinate: tuple[int, ...],
               mesh_shape: tuple[int, ...]) -> Callable[[Array], Array]:
    """R -> P(op) on one rank (see :class:`LocalStepFn`)."""
    if target.reduce_op != "sum":
        return lambda x: x
    group = 1
    for m in mesh_dims:
        group *= mesh_shape[m]
    first = all(coordinate[m] == 0 for m in mesh_dims)

    def partition(x: Array) -> Array:
        if x.dtype.kind in "fc":
            return array_module(x).true_divide(x, x.dtype.type(group), out=array_module(x).empty_like(x))
        return x.copy() if first else array_module(x).zeros_like(x)

    return partition


# -- whole plans ---------------------------------------------------------------------------


def _step_runner(step: Step, backend: Any) -> Runner:
    """One step on the shards of the ranks ``backend`` holds."""
    ranks = backend.ranks
    if step.is_collective:
        call = collective_call(step)
        shapes = {r: step.before.local_shape_of_rank(r) for r in ranks}
        return backend.prepare(call.kind, call.groups, shapes, step.before.dtype, **call.arguments()).run
    local = local_step(step)
    if len(ranks) == 1:  # one rank held (MPI): no per-rank loop
        (rank,) = ranks
        only = local.for_rank(rank)
        return lambda shards: {rank: only(shards[rank])}
    per_rank = {r: local.for_rank(r) for r in ranks}
    return lambda shards: {r: f(shards[r]) for r, f in per_rank.items()}


@memo(maxsize=4096, name="dtensor_np.redistribute_runners")
def redistributor(src: DTensorSpec, dst: DTensorSpec, exact_plan: bool = False) -> Optional[Runner]:
    """``run(shards) -> shards`` moving an array from ``src`` to ``dst`` on its mesh's backend; cached.

    ``exact_plan``: by the plan proved cheapest (``plan_redistribute(..., exact=True)``).

    None when nothing moves (``dst`` is ``src``).  The shards are those of the
    ranks this process holds; the result is a new dict of new arrays, except
    where only size-1 mesh dims differ (then the arrays are the same: values
    are never written in place).
    """
    if src is dst:
        return None
    plan = plan_redistribute(src, dst, exact=exact_plan)
    backend = backend_for(src.mesh)
    runs = [_step_runner(step, backend) for step in plan]
    if not runs:
        return dict
    if len(runs) == 1:
        return runs[0]
    if len(runs) == 2:
        first, second = runs
        return lambda shards: second(first(shards))

    def run(shards: Mapping[int, Any]) -> Shards:
        for step in runs:
            shards = step(shards)
        return dict(shards)

    return run


def redistribute_shards(shards: Mapping[int, Any], src: DTensorSpec, dst: DTensorSpec) -> Shards:
    """Move local shards from ``src`` placements to ``dst`` placements; returns new shards."""
    run = redistributor(src, dst)
    return dict(shards) if run is None else run(shards)


@memo(maxsize=4096, name="dtensor_np.redistributions")
def redistribution(
    spec: DTensorSpec, placements: tuple[Placement, ...], shard_order: Optional[ShardOrder] = None,
    exact_plan: bool = False,
) -> tuple[DTensorSpec, Optional[Runner]]:
    """``(target, run)`` for ``DTensor.redistribute(placements, shard_order=..., exact_plan=...)`` of an array with ``spec``; cached.

    Example:
        >>> from dtensor_np import DeviceMesh, DTensorSpec, TensorMeta, Shard, Replicate
        >>> spec = DTensorSpec(DeviceMesh((2,)), (Shard(0),), TensorMeta((4,), "float32"))
        >>> target, run = redistribution(spec, (Replicate(),))
        >>> str(target), redistribution(spec, (Shard(0),))[1] is None
        ('R', True)
    """
    exact = plan_flag(exact_plan, "redistribute: exact_plan")
    target = DTensorSpec(spec.mesh, placements, spec.tensor_meta, shard_order)
    # the default plan's runner under one cache key, whoever asks for it
    return target, redistributor(spec, target, True) if exact else redistributor(spec, target)


@memo(maxsize=4096, name="dtensor_np.full_replicators")
def full_replicator(spec: DTensorSpec) -> Optional[Runner]:
    """The runner from ``spec`` to all-``Replicate`` (what ``full_tensor`` runs); None when already replicated."""
    return redistributor(spec, spec.with_placements((Replicate(),) * spec.mesh.ndim))
