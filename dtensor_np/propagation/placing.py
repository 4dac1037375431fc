"""Rules for selecting and placing (:mod:`dtensor_np.functions.selecting`): ``put_along_axis``, ``isin``,
``lexsort``, ``partition``/``argpartition``, ``apply_along_axis`` and the distinct values of the set functions.

* :func:`put_along` (``np.put_along_axis`` without writing): ``arr`` stays where it is; ``indices`` and
  ``values`` are placed like ``arr`` on every other dim and whole along ``axis`` (their redistribute: along a
  sharded ``axis`` they are gathered over that mesh dim, their bytes only).  Every rank writes the elements of its
  own block; the ranks agree that every index is in bounds (NumPy's ``IndexError`` on every rank; an
  uncounted 4-byte ``Allreduce`` under MPI).
* :func:`isin_elements` (``np.isin``): elementwise on ``element``'s blocks, ``test_elements`` whole on every rank
  (a DTensor ``test_elements`` is gathered: its bytes only).
* :func:`lexsort_keys` (``np.lexsort``): along an unsharded axis local; a sharded axis is made whole as
  ``sort``'s (:func:`~.whole_axes.whole_plan`: its sharding moves to another dim with one ``all_to_all`` per
  key, or, with no dim to take it, the axis is gathered with one ``all_gather`` per key).
* :func:`partition_along` (``np.partition``/``np.argpartition`` along one axis): local along an unsharded
  axis; a sharded axis is made whole as ``sort``'s when another dim can take its sharding (one ``all_to_all``:
  NumPy's exact result).  A 1-d array (or one whose other dims are all shorter than the mesh dim) is
  partitioned in place by a distributed selection (:mod:`.selection`): no gather.
* :func:`whole_along`, :func:`first_result`, :func:`apply_blocks` (``np.apply_along_axis``): the axis is made
  whole first (``whole_along``: the ``sort`` rule's move, one ``all_to_all``, or an ``all_gather`` when no other
  dim can take the sharding); the rank holding the first 1-d slice runs the function on it and every rank
  learns the result's shape and dtype (one uncounted ``gather_descriptors``); then every rank applies the
  function to its own slices (no communication).
* :func:`distinct` (the set functions' ``unique``): every rank takes the distinct values of its own block, then
  one ``all_gather`` of those (their counts learnt with an uncounted ``gather_descriptors``), and every rank
  takes the distinct values of what it got: a replicated result whose length comes from the values.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.array([3, 1, 3, 3, 1, 2]), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> with dt.comm_counter() as c:
    ...     u = distinct(x)
    >>> u.full_tensor().tolist(), str(u.spec), c.counts["all_gather"]
    ([1, 2, 3], 'R', 1)
"""

from __future__ import annotations

import math
import operator
from typing import Any, Callable, Hashable, Optional

import numpy as np

from collectives import array_module
from collectives.dtypes import dtype_code, dtype_name

from ..arrays import array_function
from ..errors import ShardingError
from ..placements import Replicate, Shard
from ..sharded import array_operands, is_sharded
from ..spec import DTensorSpec, TensorMeta
from .common import axis_index, partial_free, replicate_mesh_dims, sharding_mesh_dim, single_sharding
from .registry import Decision, OpRule, register
from .partitioning import partition_decision
from .row_moves import move_ranges
from .whole_axes import gather_blocks, whole_plan

__all__ = ["put_along", "isin_elements", "lexsort_keys", "partition_along", "whole_along", "first_result",
           "apply_blocks", "distinct", "Callback"]

Shards = dict[int, Any]


def _like(spec: DTensorSpec, other: DTensorSpec, whole: Optional[int]) -> DTensorSpec:
    """``other`` placed like ``spec``, but ``Replicate`` on mesh dim ``whole``."""
    placements = tuple(Replicate() if m == whole else p for m, p in enumerate(spec.placements))
    return other if placements == other.placements else other.with_placements(placements)


# -- put_along_axis ----------------------------------------------------------------------------------------
@array_function
def put_along(arr: Any, indices: Any, values: Any, axis: int = 0) -> Any:
    """``np.put_along_axis(copy of arr, indices, values, axis)``, returned (``indices``/``values`` of the shape of
    the index, broadcast already).

    Example:
        >>> put_along(np.zeros((2, 3)), np.array([[1], [2]]), np.array([[5.0], [6.0]]), axis=1).tolist()
        [[0.0, 5.0, 0.0], [0.0, 0.0, 6.0]]
    """
    out = np.array(arr, copy=True)
    np.put_along_axis(out, indices, values, axis)
    return out


def _bind_put_along(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    arr, indices, values = (list(args) + [kwargs.get(k) for k in ("arr", "indices", "values")[len(args):]])[:3]
    axis = kwargs.get("axis", 0)
    scalar = not is_sharded(values) and np.ndim(values) == 0
    operands = array_operands([arr, indices] + ([] if scalar else [values]))
    if not all(is_sharded(t) for t in operands):
        raise TypeError("put_along: expected arrays for arr, indices and values")
    return tuple(operands), (axis_index(axis, operands[0].ndim), values if scalar else None, scalar)


def _decide_put_along(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    axis, scalar_value, scalar = key
    arr = single_sharding(partial_free(specs[0]))
    m = sharding_mesh_dim(arr, axis)
    others = tuple(_like(arr, single_sharding(partial_free(s)), m) for s in specs[1:])
    n = arr.shape[axis]
    if others[0].dtype.kind not in "iu":
        raise IndexError("`indices` must be an integer array")

    def local(rank: int, x: Any, i: Any, v: Any) -> tuple[Any, bool]:
        xp = array_module(x)
        out = x.copy()
        if i.size and bool(((i < -n) | (i >= n)).any()):
            return out, False
        i = xp.where(i < 0, i + n, i)
        if m is None:
            xp.put_along_axis(out, i, v, axis)
            return out, True
        start, size = arr.local_block(rank)[1][axis], x.shape[axis]
        chosen = (i >= start) & (i < start + size)
        grid = list(xp.indices(i.shape, sparse=True))
        grid[axis] = i - start
        index = tuple(xp.broadcast_to(g, i.shape)[chosen] for g in grid)
        out[index] = v if scalar else v[chosen]
        return out, True

    def program(backend: Any, *shards: Shards) -> Shards:
        """Every rank writes its own block; the ranks agree that every index is in bounds."""
        done = {r: local(r, shards[0][r], shards[1][r], scalar_value if scalar else shards[2][r]) for r in backend.ranks}
        if not backend.all_true({r: ok for r, (_, ok) in done.items()}):
            raise IndexError(f"index out of bounds for axis {axis} with size {n}")
        return {r: out for r, (out, _) in done.items()}

    return Decision((arr,) + others, (arr,), None, program=program)


register(put_along)(OpRule("put_along", _bind_put_along, _decide_put_along))


# -- isin -----------------------------------------------------------------------------------------------------
@array_function
def isin_elements(element: Any, test_elements: Any, assume_unique: bool = False, invert: bool = False,
                  kind: Optional[str] = None) -> Any:
    """``np.isin`` (its rule: elementwise on ``element``'s blocks, ``test_elements`` whole on every rank).

    Example:
        >>> isin_elements(np.arange(4), np.array([1, 3])).tolist()
        [False, True, False, True]
    """
    return np.isin(element, test_elements, assume_unique=assume_unique, invert=invert, kind=kind)


def _bind_isin(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    names = ("element", "test_elements", "assume_unique", "invert", "kind")
    given = dict(zip(names, args))
    given.update(kwargs)
    operands = array_operands([given.pop("element"), given.pop("test_elements")])
    if not all(is_sharded(t) for t in operands):
        raise TypeError("numpy.isin on DTensors: expected arrays for element and test_elements")
    options = (bool(given.pop("assume_unique", False)), bool(given.pop("invert", False)), given.pop("kind", None))
    if given:
        raise TypeError(f"numpy.isin() got unexpected arguments {sorted(given)}")
    return tuple(operands), options


def _decide_isin(specs: tuple[DTensorSpec, ...], options: Any) -> Decision:
    element, test = specs
    element = partial_free(element)
    test = test.with_placements((Replicate(),) * test.mesh.ndim)
    assume_unique, invert, kind = options
    np.isin(np.zeros(1, element.dtype), np.zeros(1, test.dtype), kind=kind)  # NumPy's checks of kind and dtypes
    out = DTensorSpec(element.mesh, element.placements, TensorMeta(element.shape, np.dtype(bool)),
                      element.shard_order)

    def local(rank: int, e: Any, t: Any) -> Any:
        return array_module(e).isin(e, t, assume_unique=assume_unique, invert=invert, kind=kind)

    return Decision((element, test), (out,), local)


register(isin_elements)(OpRule("isin", _bind_isin, _decide_isin))


# -- lexsort ----------------------------------------------------------------------------------------------------
@array_function
def lexsort_keys(*keys: Any, axis: int = -1) -> Any:
    """``np.lexsort(keys, axis)`` with the keys given one by one (its rule: the ``sort`` rule's whole axes).

    Example:
        >>> lexsort_keys(np.array([1, 0, 1]), np.array([2, 2, 1])).tolist()
        [2, 1, 0]
    """
    return np.lexsort(keys, axis=axis)


def _bind_lexsort(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    keys = tuple(array_operands(args))
    if not keys or not all(is_sharded(k) for k in keys):
        raise TypeError("numpy.lexsort on DTensors: expected a sequence of arrays")
    if set(kwargs) - {"axis"}:
        raise TypeError(f"numpy.lexsort() got unexpected arguments {sorted(set(kwargs) - {'axis'})}")
    if keys[0].ndim == 0:
        raise np.exceptions.AxisError(kwargs.get("axis", -1), 0)
    return keys, axis_index(kwargs.get("axis", -1), keys[0].ndim)


def _decide_lexsort(specs: tuple[DTensorSpec, ...], axis: int) -> Decision:
    if any(s.shape != specs[0].shape for s in specs):
        raise ValueError("all keys need to be the same shape")
    first = single_sharding(partial_free(specs[0]))
    moved, gathered = whole_plan(first, {axis})
    inputs = tuple(s.with_placements(moved.placements) if s.placements != moved.placements else s for s in specs)
    whole = replicate_mesh_dims(moved, gathered)
    out = DTensorSpec(first.mesh, whole.placements, TensorMeta(first.shape, np.dtype(np.intp)))

    def local(rank: int, *keys: Any) -> Any:
        return array_module(keys[0]).lexsort(keys, axis=axis)

    if not gathered:
        return Decision(inputs, (out,), local)

    def program(backend: Any, *shards: Shards) -> Shards:
        """One ``all_gather`` per key of the mesh dims no other dim could take."""
        whole_keys = [gather_blocks(backend, moved, s, gathered) for s in shards]
        return {r: local(r, *[k[r] for k in whole_keys]) for r in backend.ranks}

    return Decision(inputs, (out,), None, program=program)


register(lexsort_keys)(OpRule("lexsort", _bind_lexsort, _decide_lexsort))


# -- partition / argpartition -------------------------------------------------------------------------------
@array_function
def partition_along(a: Any, kth: Any = 0, axis: int = -1, arg: bool = False) -> Any:
    """``np.partition(a, kth, axis)`` (``np.argpartition`` with ``arg``) along one axis (see the module docstring).

    Example:
        >>> partition_along(np.array([3, 1, 2]), kth=(1,), axis=0).tolist()
        [1, 2, 3]
    """
    return (np.argpartition if arg else np.partition)(a, kth, axis=axis)


def _bind_partition(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    a = args[0] if args else kwargs.get("a")
    if not is_sharded(a):
        raise TypeError("numpy.partition: expected a DTensor")
    kth = kwargs.get("kth", 0)
    kth = (operator.index(kth),) if np.ndim(kth) == 0 else tuple(operator.index(k) for k in np.ravel(kth))
    return (a,), (kth, axis_index(kwargs.get("axis", -1), a.ndim), bool(kwargs.get("arg", False)))


def _decide_partition(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    kth, axis, arg = key
    spec = single_sharding(partial_free(specs[0]))
    n = spec.shape[axis]
    np.partition(np.zeros(n, spec.dtype), kth)  # NumPy's ValueError for a kth out of bounds
    dtype = np.dtype(np.intp) if arg else spec.dtype
    func = np.argpartition if arg else np.partition

    def local(rank: int, x: Any) -> Any:
        return func(x, kth, axis=axis)

    m = sharding_mesh_dim(spec, axis)
    if m is None:
        return Decision((spec,), (DTensorSpec(spec.mesh, spec.placements, TensorMeta(spec.shape, dtype)),), local)
    moved, gathered = whole_plan(spec, {axis})
    if not gathered:
        out = DTensorSpec(spec.mesh, moved.placements, TensorMeta(spec.shape, dtype))
        return Decision((moved,), (out,), local)
    return partition_decision(spec, axis, m, kth, arg)


register(partition_along)(OpRule("partition", _bind_partition, _decide_partition))


# -- apply_along_axis ---------------------------------------------------------------------------------------
class Callback:
    """A function and its extra arguments, passed to a rule by identity (never hashed: its decisions are not kept)."""

    __hash__ = None  # type: ignore[assignment]

    def __init__(self, func: Callable[..., Any], args: tuple = (), kwargs: Optional[dict] = None) -> None:
        self.func = func
        self.args = args
        self.kwargs = kwargs or {}

    def __call__(self, x: Any) -> Any:
        return self.func(x, *self.args, **self.kwargs)


@array_function
def whole_along(a: Any, axis: int = 0) -> Any:
    """``a`` with ``axis`` whole on every rank (its rule: the ``sort`` rule's move of the sharding).

    Example:
        >>> whole_along(np.arange(3), axis=0).tolist()
        [0, 1, 2]
    """
    return np.array(a, copy=True)


def _bind_whole(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    if not args or not is_sharded(args[0]):
        raise TypeError("whole_along: expected a DTensor")
    return (args[0],), axis_index(kwargs.get("axis", 0), args[0].ndim)


def _decide_whole(specs: tuple[DTensorSpec, ...], axis: int) -> Decision:
    spec = single_sharding(partial_free(specs[0]))
    moved, gathered = whole_plan(spec, {axis})
    whole = replicate_mesh_dims(moved, gathered)
    if not gathered:
        return Decision((moved,), (moved,), lambda rank, x: x)

    def program(backend: Any, shards: Shards) -> Shards:
        """One ``all_gather`` of the mesh dims no other dim could take."""
        return gather_blocks(backend, moved, shards, gathered)

    return Decision((moved,), (whole,), None, program=program)


register(whole_along)(OpRule("whole_along", _bind_whole, _decide_whole))

_DESCRIPTOR = 16


@array_function
def first_result(a: Any, axis: int = 0, func: Any = None) -> Any:
    """``[ndim, dtype code, *shape]`` (16 int64) of ``func`` on the first 1-d slice of ``a`` along ``axis``.

    Example:
        >>> first_result(np.ones((2, 3)), axis=1, func=Callback(np.sum))[:2].tolist()
        [0, 0]
    """
    value = np.asarray(func(np.moveaxis(a, axis, -1)[(0,) * (a.ndim - 1)]))
    return _describe(value)


def _describe(value: Any) -> np.ndarray:
    row = [value.ndim, 0] + list(value.shape)
    if len(row) > _DESCRIPTOR:
        raise ShardingError(f"numpy.apply_along_axis on DTensors: a result of at most {_DESCRIPTOR - 2} dims, "
                            f"got {value.ndim}")
    out = np.zeros(_DESCRIPTOR, np.int64)
    out[:len(row)] = row
    out[1] = 0
    return out


def _bind_first(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    if not args or not is_sharded(args[0]):
        raise TypeError("first_result: expected a DTensor")
    return (args[0],), (axis_index(kwargs.get("axis", 0), args[0].ndim), kwargs["func"])


def _decide_first(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    axis, func = key
    spec = specs[0]
    mesh = spec.mesh
    holder = min(r for r in mesh.all_ranks if all(o == 0 for o in spec.local_block(r)[1])
                 and all(s > 0 for d, s in enumerate(spec.local_block(r)[0]) if d != axis))
    out = DTensorSpec(mesh, (Replicate(),) * mesh.ndim, TensorMeta((_DESCRIPTOR,), np.dtype(np.int64)))

    def program(backend: Any, shards: Shards) -> Shards:
        """The holder of the first slice runs ``func`` on it; every rank learns the result's shape and dtype (one
        uncounted ``gather_descriptors``)."""
        mine = {}
        for r in backend.ranks:
            row = np.zeros(_DESCRIPTOR, np.int64)
            if r == holder:
                x = shards[r]
                value = array_module(x).asarray(func(array_module(x).moveaxis(x, axis, -1)[(0,) * (x.ndim - 1)]))
                row = _describe(value)
                row[1] = dtype_code(np.dtype(value.dtype))
            mine[r] = tuple(int(v) for v in row)
        table = backend.gather_descriptors(mine)
        found = np.array(table[holder], np.int64)
        return {r: found.copy() for r in backend.ranks}

    return Decision((spec,), (out,), None, program=program)


register(first_result)(OpRule("first_result", _bind_first, _decide_first))


@array_function
def apply_blocks(a: Any, axis: int = 0, func: Any = None, meta: tuple = ()) -> Any:
    """``np.apply_along_axis(func, axis, a)`` (its rule: every rank applies ``func`` to its own slices; ``meta``:
    the result's ``(shape, dtype)`` for one slice, as :func:`first_result` finds them).

    Example:
        >>> apply_blocks(np.ones((2, 3)), axis=1, func=Callback(np.sum), meta=((), "float64")).tolist()
        [3.0, 3.0]
    """
    return np.apply_along_axis(func, axis, a)


def _bind_apply(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    if not args or not is_sharded(args[0]):
        raise TypeError("apply_blocks: expected a DTensor")
    shape, dtype = kwargs["meta"]
    return (args[0],), (axis_index(kwargs.get("axis", 0), args[0].ndim), kwargs["func"], tuple(shape), str(dtype))


def _decide_apply(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    axis, func, res_shape, dtype = key
    spec = specs[0]
    dtype = np.dtype(dtype)
    if sharding_mesh_dim(spec, axis) is not None:
        raise ShardingError("apply_blocks: the axis must be whole (whole_along first)")
    k = len(res_shape)
    placements = tuple(Shard(p.dim + (k - 1 if p.dim > axis else 0)) if isinstance(p, Shard) else p
                       for p in spec.placements)
    shape = spec.shape[:axis] + tuple(res_shape) + spec.shape[axis + 1:]
    out = DTensorSpec(spec.mesh, placements, TensorMeta(shape, dtype))

    def local(rank: int, x: Any) -> Any:
        want = out.local_shape_of_rank(rank)
        xp = array_module(x)
        if math.prod(x.shape[:axis] + x.shape[axis + 1:]) == 0:
            return xp.zeros(want, dtype)
        result = xp.asarray(np.apply_along_axis(func, axis, x)).astype(dtype, copy=False)
        if result.shape != want:
            raise ValueError(f"numpy.apply_along_axis: the function returned results of shape "
                             f"{result.shape[axis:axis + k]} on some slices, {tuple(res_shape)} on the first")
        return result

    return Decision((spec,), (out,), local)


register(apply_blocks)(OpRule("apply_blocks", _bind_apply, _decide_apply))


def described(descriptor: Any) -> tuple[tuple[int, ...], np.dtype]:
    """``(shape, dtype)`` from a :func:`first_result` descriptor (a NumPy array of 16 ints)."""
    values = [int(v) for v in descriptor]
    ndim, code = values[0], values[1]
    return tuple(values[2:2 + ndim]), np.dtype(dtype_name(code))


# -- distinct values (the set functions) --------------------------------------------------------------------
@array_function
def distinct(ar: Any) -> Any:
    """``np.unique(ar)``: the sorted distinct values of the flattened array (see the module docstring).

    Example:
        >>> distinct(np.array([[2, 1], [2, 0]])).tolist()
        [0, 1, 2]
    """
    return np.unique(ar)


def _bind_distinct(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    if len(args) != 1 or kwargs or not is_sharded(args[0]):
        raise TypeError("distinct: expected one DTensor")
    return (args[0],), None


def _decide_distinct(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    spec = partial_free(specs[0])
    mesh = spec.mesh
    sharding = tuple(sorted(m for m, p in enumerate(spec.placements) if isinstance(p, Shard) and mesh.shape[m] > 1))
    out = DTensorSpec(mesh, (Replicate(),) * mesh.ndim, TensorMeta((0,), spec.dtype))

    def local(rank: int, x: Any) -> Any:
        return array_module(x).unique(x)

    if not sharding:
        return Decision((spec,), (out,), local, data_dependent=True)
    groups = mesh.groups(sharding)

    def program(backend: Any, shards: Shards) -> Shards:
        """Each rank's distinct values, one ``all_gather`` of them, the distinct values of those."""
        mine = {r: array_module(x).unique(x) for r, x in shards.items()}
        sizes = {r: d[0] for r, d in backend.gather_descriptors({r: (len(u),) for r, u in mine.items()}).items()}
        gathered = backend.all_gather(mine, groups, axis=0, in_sizes=sizes)
        return {r: array_module(x).unique(x) for r, x in gathered.items()}

    return Decision((spec,), (out,), None, program=program, data_dependent=True)


register(distinct)(OpRule("distinct", _bind_distinct, _decide_distinct))


# -- values looked up in a small table (place, put, putmask) -----------------------------------------------------
@array_function
def lookup(table: Any, indices: Any) -> Any:
    """``table[indices]`` for a 1-d ``table``: its rule takes ``table`` whole on every rank (a replicated constant
    costs nothing; a sharded one is gathered, its bytes only) and ``indices`` as they are: elementwise, local.

    Example:
        >>> lookup(np.array([5, 6, 7]), np.array([[2, 0]])).tolist()
        [[7, 5]]
    """
    return np.asarray(table)[indices]


def _bind_lookup(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    operands = array_operands(args)
    if len(operands) != 2 or not all(is_sharded(t) for t in operands) or kwargs:
        raise TypeError("lookup(table, indices): expected two arrays")
    return tuple(operands), None


def _decide_lookup(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    table, indices = specs
    if table.ndim != 1 or indices.dtype.kind not in "iu":
        raise ShardingError("lookup: expected a 1-d table and integer indices")
    table = table.with_placements((Replicate(),) * table.mesh.ndim)
    indices = partial_free(indices)
    out = DTensorSpec(indices.mesh, indices.placements, TensorMeta(indices.shape, table.dtype), indices.shard_order)
    return Decision((table, indices), (out,), lambda rank, t, i: t[i])


register(lookup)(OpRule("lookup", _bind_lookup, _decide_lookup))


@array_function
def cycled(table: Any, like: Any) -> Any:
    """An array shaped and placed like ``like`` whose element at flat (C-order) position ``p`` is
    ``table[p % len(table)]`` (``np.putmask``'s values): local, ``table`` whole on every rank.

    Example:
        >>> cycled(np.array([1, 2]), np.zeros((2, 3))).tolist()
        [[1, 2, 1], [2, 1, 2]]
    """
    return np.resize(np.ravel(table), np.shape(like))


def _decide_cycled(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    table, like = specs
    if table.ndim != 1 or table.shape[0] == 0:
        raise ShardingError("cycled: expected a non-empty 1-d table")
    table = table.with_placements((Replicate(),) * table.mesh.ndim)
    like = partial_free(like)
    out = DTensorSpec(like.mesh, like.placements, TensorMeta(like.shape, table.dtype), like.shard_order)
    n = table.shape[0]

    def local(rank: int, t: Any, x: Any) -> Any:
        xp = array_module(t)
        shape, origin = out.local_block(rank)
        if not like.ndim:
            return t[0].copy()
        grid = [xp.arange(o, o + s).reshape((-1,) + (1,) * (len(shape) - d - 1))
                for d, (s, o) in enumerate(zip(shape, origin))]
        flat = sum(g * math.prod(like.shape[d + 1:]) for d, g in enumerate(grid))
        return t[xp.broadcast_to(flat, shape) % n]

    return Decision((table, like), (out,), local)


register(cycled)(OpRule("cycled", _bind_lookup, _decide_cycled))


# -- y[mask] = values, values in the layout of y[mask] (np.piecewise) -----------------------------------------------
@array_function
def scatter_masked(y: Any, mask: Any, values: Any) -> Any:
    """A copy of ``y`` with ``y[mask] = values`` (``values`` of the count of ``mask``, in C order), as ``x[mask]`` read
    it: the inverse of the lined-up mask read.

    Its rule: where ``y`` shards only its first dim and ``mask`` has its shape, ``mask`` is placed like ``y``, the ranks
    learn each other's counts (an uncounted ``gather_descriptors``) and the values that change owner move back in one
    ``rechunk`` (the read's, reversed); every rank writes its own block.  Otherwise ``mask`` and ``values`` are
    gathered (their bytes, never ``y``'s) and every rank writes its own block.

    Example:
        >>> scatter_masked(np.zeros(4), np.array([True, False, True, False]), np.array([1.0, 2.0])).tolist()
        [1.0, 0.0, 2.0, 0.0]
    """
    out = np.array(y, copy=True)
    out[mask] = values
    return out


def _bind_scatter(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    operands = array_operands(args)
    if len(operands) != 3 or kwargs or not all(is_sharded(t) for t in operands):
        raise TypeError("scatter_masked(y, mask, values): expected three arrays")
    return tuple(operands), None


def _decide_scatter(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    y, mask, values = specs
    if mask.shape != y.shape or mask.dtype != np.dtype(bool) or values.ndim != 1:
        raise ShardingError("scatter_masked: expected a boolean mask of y's shape and 1-d values")
    y = partial_free(y)
    mesh = y.mesh
    order = dict(y.shard_order)  # type: ignore[arg-type]
    first = tuple(m for m in order.get(0, ()) if mesh.shape[m] > 1)
    lined = y.ndim > 0 and all(d == 0 or not ms for d, ms in order.items())
    if not lined:  # the mask and the values whole on every rank: each rank numbers its block's elements itself
        whole = (Replicate(),) * mesh.ndim
        inputs = (y, mask.with_placements(whole), values.with_placements(whole))

        def local(rank: int, block: Any, m: Any, v: Any) -> Any:
            xp = array_module(block)
            if int(m.sum()) != v.shape[0]:
                raise ValueError(f"NumPy boolean array indexing assignment cannot assign {v.shape[0]} input values to "
                                 f"the {int(m.sum())} output values where the mask is true")
            number = (xp.cumsum(m.reshape(-1)) - 1).reshape(m.shape)
            part = y.local_index(rank)
            out = block.copy()
            chosen = m[part]
            out[chosen] = v[number[part][chosen]]
            return out

        return Decision(inputs, (y,), local)
    mask_in = mask.with_placements(y.placements, y.shard_order)
    placements = tuple(Shard(0) if m in first else Replicate() for m in range(mesh.ndim))
    values_in = DTensorSpec(mesh, placements, values.tensor_meta, ((0, first),) if first else ())
    groups = mesh.groups(first) if first else tuple((r,) for r in mesh.all_ranks)
    chunks = {r: (values_in.local_block(r)[1][0], values_in.local_block(r)[1][0] + values_in.local_block(r)[0][0])
              for r in mesh.all_ranks}

    def program(backend: Any, ys: Shards, masks: Shards, vs: Shards) -> Shards:
        """The values that change owner move back to the ranks whose mask holds their places (one ``rechunk``)."""
        counts = backend.gather_descriptors({r: (int(m.sum()),) for r, m in masks.items()})
        total = sum(counts[r][0] for r in groups[0])
        if total != values.shape[0]:
            raise ValueError(f"NumPy boolean array indexing assignment cannot assign {values.shape[0]} input values to "
                             f"the {total} output values where the mask is true")
        want = {}
        for g in groups:
            start = 0
            for r in g:
                want[r] = (start, start + counts[r][0])
                start += counts[r][0]
        moved = move_ranges(backend, vs, groups, 0, chunks, want) if first else vs
        out = {}
        for r, block in ys.items():
            out[r] = block.copy()
            out[r][masks[r]] = moved[r]
        return out

    return Decision((y, mask_in, values_in), (y,), None, program=program)


register(scatter_masked)(OpRule("scatter_masked", _bind_scatter, _decide_scatter))
