"""Running a redistribute plan on local shards through a collectives backend.

A plan (pure steps, see :mod:`dtensor_np.planner`) is compiled once per
(source spec, target spec, ranks held here) into a list of small operations
with every size precomputed from the specs: uneven shards are gathered,
scattered and exchanged with per-rank counts (no padding), and no per-call
work grows with the number of steps' metadata.

Under MPI (one rank per process) the plan is compiled further, once per
(source spec, target spec, backend), into one function on this rank's array
(``local``): per step, a collective prepared by the backend
(``MpiBackend.prepare_all_gather`` and friends: communicator, counts, datatype
and output shape fixed, one mpi4py call per use into the output buffer) or a
local slice copy.  :func:`lookup_redistribute` caches, per (spec, placements,
shard order), the target spec and that function, so a repeated
``DTensor.redistribute`` costs a lookup of well under a microsecond (by spec
identity, without hashing) before it communicates.

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
from typing import Any, Callable, Mapping, Optional

import numpy as np

from .placements import Replicate
from .planner import Step, plan_redistribute, step_arguments
from .spec import DTensorSpec, ShardOrder, _local_block

__all__ = ["redistribute_shards", "compile_redistribute", "lookup_redistribute", "lookup_full_tensor", "runner_for"]

Shards = dict[int, Any]
Operation = Callable[[Any, Shards], Shards]
Runner = Callable[[Mapping[int, Any]], Shards]


def redistribute_shards(shards: Mapping[int, Any], src: DTensorSpec, dst: DTensorSpec, backend: Any) -> Shards:
    """Move local shards from ``src`` placements to ``dst`` placements; returns new shards."""
    if src == dst:
        return dict(shards)
    if backend.name == "mpi" and hasattr(backend, "prepare_all_gather"):
        rank, local = _mpi_local(src, dst, backend)
        return {rank: local(shards[rank])}
    out = dict(shards)
    for operation in compile_redistribute(src, dst, backend.ranks):
        out = operation(backend, out)
    return out


def runner_for(src: DTensorSpec, dst: DTensorSpec, backend: Any) -> Runner:
    """A function from ``src`` shards to ``dst`` shards on ``backend`` (cached under MPI)."""
    rank, local = local_runner_for(src, dst, backend)
    if local is not None:
        return lambda shards: {rank: local(shards[rank])}
    operations = compile_redistribute(src, dst, backend.ranks)

    def run(shards: Mapping[int, Any]) -> Shards:
        out = dict(shards)
        for operation in operations:
            out = operation(backend, out)
        return out

    return run


def local_runner_for(src: DTensorSpec, dst: DTensorSpec, backend: Any) -> tuple[Optional[int], Optional[Callable[[Any], Any]]]:
    """``(rank, local)`` under MPI: ``local(array)`` is this rank's new array (cached); else ``(None, None)``."""
    if backend.name == "mpi" and hasattr(backend, "prepare_all_gather"):
        return _mpi_local(src, dst, backend)
    return None, None


# -- DTensor's cached entry points ---------------------------------------------------------

_LOOKUP_LIMIT = 4096
# (spec, placements, shard order) -> (target, run, rank, local); see lookup_redistribute
_LOOKUP: dict[tuple[Any, ...], tuple[DTensorSpec, Optional[Runner], Optional[int], Optional[Callable[[Any], Any]]]] = {}
# id(spec) -> (spec, [(placements, shard order, entry), ...]): the entries a spec object used lately,
# found by identity and tuple equality, without calling the Python-level hashes of specs and placements
# (DTensor.redistribute looks here first).  The spec is held, so its id is not reused meanwhile.
_RECENT: dict[int, tuple[DTensorSpec, list[tuple[tuple[Any, ...], Any, tuple[Any, ...]]]]] = {}
_RECENT_PER_SPEC = 8
# spec -> (run, rank, local) towards all-Replicate; see lookup_full_tensor
_FULL: dict[DTensorSpec, tuple[Optional[Runner], Optional[int], Optional[Callable[[Any], Any]]]] = {}


def lookup_redistribute(
    spec: DTensorSpec, placements: Any, shard_order: Optional[ShardOrder] = None
) -> tuple[DTensorSpec, Optional[Runner], Optional[int], Optional[Callable[[Any], Any]]]:
    """``(target, run, rank, local)`` for redistributing ``spec`` to ``placements``, cached.

    ``target`` is the new spec; ``run(shards)`` returns the new shards, and is
    None when nothing moves (``target == spec``).  Under MPI, ``rank`` is this
    process's rank and ``local(array)`` this rank's new array (what ``run``
    wraps in a dict); otherwise both are None.  Cached per (spec, placements,
    shard order): a repeated call is one dict lookup.

    Example:
        >>> from dtensor_np import DeviceMesh, DTensorSpec, TensorMeta, Shard, Replicate
        >>> spec = DTensorSpec(DeviceMesh((2,)), (Shard(0),), TensorMeta((4,), "float32"))
        >>> target, run, rank, local = lookup_redistribute(spec, [Replicate()])
        >>> str(target), lookup_redistribute(spec, [Shard(0)])[1] is None
        ('R', True)
    """
    cls = placements.__class__
    if cls is not tuple:
        if cls is not list and not isinstance(placements, (list, tuple)):
            raise TypeError(f"placements must be a list or tuple of placements, got {placements!r}")
        placements = tuple(placements)
    # What DTensor.redistribute does inline: this spec object's recent entries, no hashing.
    recent = _RECENT.get(id(spec))
    if recent is not None and recent[0] is spec:
        for known, order, found in recent[1]:
            if known == placements and order == shard_order:
                return found
    key = (spec, placements, shard_order)
    try:
        entry = _LOOKUP.get(key)
    except TypeError:  # a list inside: the target spec checks the arguments (and then they are not cached)
        return _new_entry(spec, placements, shard_order)
    if entry is None:
        entry = _new_entry(spec, placements, shard_order)
        if len(_LOOKUP) >= _LOOKUP_LIMIT:
            _LOOKUP.clear()
        _LOOKUP[key] = entry
    if recent is None or recent[0] is not spec:
        if len(_RECENT) >= _LOOKUP_LIMIT:
            _RECENT.clear()
        recent = _RECENT[id(spec)] = (spec, [])
    entries = recent[1]
    if len(entries) >= _RECENT_PER_SPEC:
        del entries[0]
    entries.append((placements, shard_order, entry))
    return entry


def _new_entry(spec: DTensorSpec, placements: tuple[Any, ...], shard_order: Optional[ShardOrder]):
    from .runtime import backend_for

    target = DTensorSpec(spec.mesh, placements, spec.tensor_meta, shard_order)
    if target == spec:
        return spec, None, None, None
    backend = backend_for(spec.mesh)
    rank, local = local_runner_for(spec, target, backend)
    return target, runner_for(spec, target, backend), rank, local


def lookup_full_tensor(spec: DTensorSpec) -> tuple[Optional[Runner], Optional[int], Optional[Callable[[Any], Any]]]:
    """``(run, rank, local)`` from ``spec`` to all-``Replicate`` (run None when already replicated); cached.

    Like :func:`lookup_redistribute`: ``local(array)`` is this rank's whole
    array under MPI (rank and local None otherwise).
    """
    try:
        return _FULL[spec]
    except KeyError:
        pass
    from .runtime import backend_for

    target = DTensorSpec(spec.mesh, (Replicate(),) * spec.mesh.ndim, spec.tensor_meta)
    if target == spec:
        entry: tuple[Any, Any, Any] = (None, None, None)
    else:
        backend = backend_for(spec.mesh)
        rank, local = local_runner_for(spec, target, backend)
        entry = (runner_for(spec, target, backend), rank, local)
    if len(_FULL) >= _LOOKUP_LIMIT:
        _FULL.clear()
    _FULL[spec] = entry
    return entry


@lru_cache(maxsize=4096)
def compile_redistribute(src: DTensorSpec, dst: DTensorSpec, ranks: tuple[int, ...]) -> tuple[Operation, ...]:
    """The plan from ``src`` to ``dst`` as operations on the shards of ``ranks``; cached on pure values."""
    mesh = src.mesh
    coords, walk = _walk(src, dst)
    return tuple(_operation(step, mesh, before, after, coords, ranks) for step, before, after in walk)


Blocks = dict[int, tuple[tuple[int, ...], tuple[int, ...]]]


def _walk(src: DTensorSpec, dst: DTensorSpec) -> tuple[dict[int, tuple[int, ...]], list[tuple[Step, Blocks, Blocks]]]:
    """Every rank's coordinate, and every step of the plan with every rank's block before and after it."""
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

    def blocks(order: ShardOrder) -> Blocks:
        return {r: _local_block(shape, mesh.shape, order, coords[r]) for r in world}

    walk = []
    before = blocks(order)
    for step in plan:
        after = blocks(step.shard_order)
        walk.append((step, before, after))
        before = after
    return coords, walk


@lru_cache(maxsize=1024)
def _mpi_local(src: DTensorSpec, dst: DTensorSpec, backend: Any) -> tuple[int, Callable[[Any], Any]]:
    """``(rank, local)``: the plan as one function on this rank's array, collectives prepared by ``backend``."""
    (rank,) = backend.ranks
    mesh = src.mesh
    dtype = src.dtype
    coords, walk = _walk(src, dst)
    steps = [_mpi_step(step, mesh, before, after, coords, rank, backend, dtype) for step, before, after in walk]
    if not steps:
        return rank, lambda x: x
    if len(steps) == 1:
        return rank, steps[0]
    if len(steps) == 2:
        first, second = steps
        return rank, lambda x: second(first(x))

    def run(x: Any) -> Any:
        for step in steps:
            x = step(x)
        return x

    return rank, run


def _arguments(step: Step, mesh, before: Blocks, after: Blocks) -> dict[str, Any]:
    """The backend's keyword arguments for a collective step: groups, axes, op, every rank's sizes."""
    return step_arguments(step, mesh, {r: b[0] for r, b in before.items()}, {r: a[0] for r, a in after.items()})


def _mpi_step(step: Step, mesh, before: Blocks, after: Blocks, coords, rank: int, backend: Any, dtype) -> Callable[[Any], Any]:
    """One step of the plan for this rank's array (a prepared collective or a local op)."""
    kind = step.kind
    shape = before[rank][0]
    if step.is_collective:
        prepare = getattr(backend, f"prepare_{kind}")
        return prepare(shape=shape, dtype=dtype, **_arguments(step, mesh, before, after)).run
    if kind == "chunk":
        return _chunk(shape, _relative_slice(before[rank], after[rank]), after[rank][0], dtype)
    if kind == "partition":
        operation = _partition(step, mesh, coords, (rank,))
        return lambda x: operation(backend, {rank: x})[rank]
    raise AssertionError(f"unknown step kind {kind}")  # pragma: no cover


def _chunk(shape: tuple[int, ...], index: tuple[slice, ...], out_shape: tuple[int, ...], dtype) -> Callable[[Any], Any]:
    """This rank's piece of its array: one C-contiguous copy (into a recycled buffer when large)."""
    from collectives.buffers import allocator

    # Trailing whole dims need no index; a single leading slice indexes fastest.
    index_list = list(index)
    while index_list and index_list[-1] == slice(0, shape[len(index_list) - 1]):
        index_list.pop()
    key: Any = index_list[0] if len(index_list) == 1 else tuple(index_list)
    take = allocator(out_shape, dtype)
    ndarray = np.ndarray
    if take is None:
        def copy(x: Any) -> Any:
            return x[key].copy()

        return copy
    copyto = np.copyto

    def run(x: Any) -> Any:
        if x.__class__ is not ndarray or x.shape != shape or x.dtype != dtype:
            return x[key].copy()
        out = take()
        copyto(out, x[key])
        return out

    return run


def _operation(step: Step, mesh, before, after, coords, ranks) -> Operation:
    kind = step.kind
    if step.is_collective:
        args = _arguments(step, mesh, before, after)
        return lambda backend, shards: getattr(backend, kind)(shards, check=False, **args)
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

