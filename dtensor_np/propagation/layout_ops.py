"""Rules that lay out or select copies of an array: ``broadcast_to``, ``broadcast_arrays``, ``tile``, ``repeat``,
``unstack``, ``tril``/``triu``, ``meshgrid``, ``take``, ``take_along_axis``.

What stays local stays local:

* ``broadcast_to``/``broadcast_arrays``/``meshgrid``: local; new dims are
  replicated, kept dims keep their sharding.  A size-1 dim that is sharded and
  broadcast is gathered first (its one row is tiny).  Linear: pending sums flow.
* ``tril``/``triu``: local, every rank passing NumPy its *global* diagonal
  offset ``k + row0 - col0`` (``row0, col0``: its block's origin).
* ``tile``: local on dims tiled once; a sharded dim tiled more than once is
  gathered first (``all_gather`` through the redistribute planner).
* ``repeat`` along a sharded axis: every rank repeats its block, then the
  rows that change owner move to the result's chunks in one ``rechunk``
  (counted as ``all_to_all``; none when the chunks already line up).
  ``axis=None`` on more than one dim: gathered, replicated.  ``repeats`` given
  as a DTensor makes the length data-dependent: eager only, both arrays
  gathered, the result replicated (``dt.trace`` refuses it).
* ``unstack`` along a sharded axis: that axis is gathered first (one
  ``all_gather``); other dims keep their sharding.
* ``take``: NumPy's ``a[:, ..., indices]``, the ``getitem`` rule's
  (advanced indexing: one ``exchange`` of the selected rows when the axis is
  sharded, none otherwise).
* ``take_along_axis``: local when ``axis`` is not sharded (``indices`` takes
  ``arr``'s placements); a sharded ``axis`` of ``arr`` is gathered first (one
  ``all_gather``) while ``indices`` stays sharded along it.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.ones((4, 4)), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> with dt.comm_counter() as c:
    ...     y = np.tril(x, -1)
    >>> bool((y.full_tensor() == np.tril(np.ones((4, 4)), -1)).all()), str(y.spec), c.total
    (True, 'S(0)', 0)
"""

from __future__ import annotations

import math
import operator
from typing import Any, Callable, Hashable, Sequence

import numpy as np

from collectives import frozen

from ..errors import ShardingError
from ..placements import Placement, Replicate, Shard
from ..sharded import array_operands, is_sharded
from ..spec import DTensorSpec, TensorMeta
from .common import axis_index, partial_free, replicate_mesh_dims, single_sharding
from .indexing import GETITEM
from .registry import Decision, OpRule, register
from .row_moves import move_ranges
from .whole_axes import LINEAR_REDUCE_OPS, whole_decision
from .signature_bind import named_arguments, no_more_arguments, pop_dtensor

__all__ = ["broadcast_spec", "tile_decision", "repeat_decision", "tri_decision"]

_LINEAR = lambda m, p: p.reduce_op in LINEAR_REDUCE_OPS  # noqa: E731  (pending sums flow through linear maps)


def _sharded_on(spec: DTensorSpec, dims: Sequence[int]) -> list[int]:
    """Mesh dims (of size > 1) that shard one of ``dims``."""
    return [m for m, p in enumerate(spec.placements) if isinstance(p, Shard) and p.dim in dims and spec.mesh.shape[m] > 1]


def _shifted(spec: DTensorSpec, lead: int, shape: Sequence[int], dtype: Any = None) -> DTensorSpec:
    """``spec``'s placements with ``lead`` new leading dims, on a result of ``shape``."""
    placements = tuple(Shard(p.dim + lead) if isinstance(p, Shard) else p for p in spec.placements)
    return DTensorSpec(spec.mesh, placements, TensorMeta(tuple(shape), spec.dtype if dtype is None else dtype))


# -- broadcast_to / broadcast_arrays -----------------------------------------------

def broadcast_spec(spec: DTensorSpec, shape: tuple[int, ...]) -> tuple[DTensorSpec, DTensorSpec]:
    """(input spec, output spec) of broadcasting ``spec`` to ``shape`` (NumPy's ValueError when it cannot)."""
    np.broadcast_to(np.broadcast_to(np.empty((), spec.dtype), spec.shape), shape)  # NumPy's checks, nothing allocated
    spec = partial_free(single_sharding(spec), _LINEAR)
    lead = len(shape) - spec.ndim
    spread = [d for d in range(spec.ndim) if spec.shape[d] != shape[lead + d]]
    spec = replicate_mesh_dims(spec, _sharded_on(spec, spread))
    return spec, _shifted(spec, lead, shape)


def _broadcast_local(out: DTensorSpec, rank: int, x: Any) -> Any:
    # a C-contiguous copy; not ascontiguousarray, which makes a 0-d result 1-d
    return np.broadcast_to(x, out.local_shape_of_rank(rank)).copy()


def _bind_broadcast_to(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    given = named_arguments("numpy.broadcast_to", ("array", "shape", "subok"), args, kwargs)
    x = pop_dtensor("numpy.broadcast_to", given, "array")
    shape = given.get("shape")
    shape = (operator.index(shape),) if not isinstance(shape, (tuple, list)) else tuple(operator.index(s) for s in shape)
    return (x,), shape


def _decide_broadcast_to(specs: tuple[DTensorSpec, ...], shape: tuple[int, ...]) -> Decision:
    spec, out = broadcast_spec(specs[0], shape)
    return Decision((spec,), (out,), lambda rank, x: _broadcast_local(out, rank, x))


register(np.broadcast_to)(OpRule("broadcast_to", _bind_broadcast_to, _decide_broadcast_to))


def _bind_broadcast_arrays(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    if kwargs.pop("subok", False) or kwargs:
        raise ShardingError(f"numpy.broadcast_arrays on DTensors: expected only arrays, got {sorted(kwargs) or ['subok']}")
    args = tuple(array_operands(args))  # plain arrays: replicated constants
    if not args or not all(is_sharded(a) for a in args):
        raise TypeError("numpy.broadcast_arrays: every array must be a DTensor; distribute plain arrays first")
    return tuple(args), None


def _decide_broadcast_arrays(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    shape = np.broadcast_shapes(*(s.shape for s in specs))
    pairs = [broadcast_spec(s, shape) for s in specs]
    outs = tuple(o for _, o in pairs)

    def local(rank: int, *xs: Any) -> tuple:
        return tuple(_broadcast_local(o, rank, x) for o, x in zip(outs, xs))

    return Decision(tuple(i for i, _ in pairs), outs, local, multiple_outputs=True)


register(np.broadcast_arrays)(OpRule("broadcast_arrays", _bind_broadcast_arrays, _decide_broadcast_arrays))


# -- meshgrid -----------------------------------------------------------------------

def _bind_meshgrid(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    options = {"indexing": kwargs.pop("indexing", "xy"), "sparse": bool(kwargs.pop("sparse", False))}
    kwargs.pop("copy", None)
    if kwargs or options["indexing"] not in ("xy", "ij"):
        raise ValueError(f"numpy.meshgrid: expected indexing 'xy' or 'ij' and no other keywords, got {options} {sorted(kwargs)}")
    args = tuple(array_operands(args))  # plain arrays: replicated constants
    if not args or not all(is_sharded(a) for a in args):
        raise TypeError("numpy.meshgrid: every array must be a DTensor; distribute plain arrays first")
    return tuple(args), (options["indexing"], options["sparse"])


def _decide_meshgrid(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    """Output ``i`` is input ``i`` spread along its dim: it takes input ``i``'s placements there; no communication."""
    indexing, sparse = key
    specs = tuple(partial_free(single_sharding(s), _LINEAR) for s in specs)
    if any(s.ndim != 1 for s in specs):  # NumPy flattens; a sharded n-d input would need a reshape first
        raise ShardingError(f"numpy.meshgrid on DTensors: expected 1-d arrays, got dims {[s.ndim for s in specs]}")
    n = len(specs)
    dims = list(range(n))
    if indexing == "xy" and n > 1:
        dims[0], dims[1] = 1, 0
    full = [0] * n
    for s, d in zip(specs, dims):
        full[d] = s.shape[0]
    outs = []
    for s, d in zip(specs, dims):
        shape = tuple(full[j] if j == d or not sparse else 1 for j in range(n))
        placements = tuple(Shard(d) if isinstance(p, Shard) else p for p in s.placements)
        outs.append(DTensorSpec(s.mesh, placements, TensorMeta(shape, s.dtype)))

    def local(rank: int, *xs: Any) -> tuple:
        results = []
        for x, d, o in zip(xs, dims, outs):
            view = [1] * n
            view[d] = x.shape[0]
            results.append(_broadcast_local(o, rank, x.reshape(view)))
        return tuple(results)

    return Decision(specs, tuple(outs), local, multiple_outputs=True)


register(np.meshgrid)(OpRule("meshgrid", _bind_meshgrid, _decide_meshgrid))


# -- tril / triu ---------------------------------------------------------------------

def tri_decision(spec: DTensorSpec, func: Callable[..., Any], k: int) -> Decision:
    """``tril``/``triu`` with every rank's diagonal offset made global: no communication."""
    if spec.ndim < 2:
        raise ShardingError(f"numpy.{func.__name__} on DTensors: expected an array of at least 2 dims, got {spec.ndim}")
    spec = partial_free(single_sharding(spec), _LINEAR)

    def local(rank: int, x: Any) -> Any:
        origin = spec.local_block(rank)[1]
        return func(x, k + origin[-2] - origin[-1])

    return Decision((spec,), (spec,), local)


def _tri_rule(func: Callable[..., Any]) -> OpRule:
    def bind(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
        name = f"numpy.{func.__name__}"
        given = named_arguments(name, ("m", "k"), args, kwargs)
        m = pop_dtensor(name, given, "m")
        k = operator.index(given.pop("k", 0))
        no_more_arguments(name, given)
        return (m,), k

    return OpRule(func.__name__, bind, lambda specs, k: tri_decision(specs[0], func, k))


register(np.tril)(_tri_rule(np.tril))
register(np.triu)(_tri_rule(np.triu))


# -- tile -----------------------------------------------------------------------------

def tile_decision(spec: DTensorSpec, reps: tuple[int, ...]) -> Decision:
    """``np.tile``: dims tiled once keep their sharding; a sharded dim tiled more is gathered first."""
    spec = partial_free(single_sharding(spec), _LINEAR)
    ndim = max(spec.ndim, len(reps))
    lead = ndim - spec.ndim
    full_reps = (1,) * (ndim - len(reps)) + reps
    tiled = [d for d in range(spec.ndim) if full_reps[lead + d] != 1]
    spec = replicate_mesh_dims(spec, _sharded_on(spec, tiled))
    shape = tuple(r * s for r, s in zip(full_reps, (1,) * lead + spec.shape))
    out = _shifted(spec, lead, shape)
    return Decision((spec,), (out,), lambda rank, x: np.tile(x, reps))


def _bind_tile(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    given = named_arguments("numpy.tile", ("A", "reps"), args, kwargs)
    a = pop_dtensor("numpy.tile", given, "A")
    reps = given.pop("reps")
    if is_sharded(reps) or given:
        raise ShardingError(f"numpy.tile on DTensors: expected static reps (ints), got {type(reps).__name__} {sorted(given)}")
    reps = tuple(operator.index(r) for r in reps) if isinstance(reps, (tuple, list, np.ndarray)) else (operator.index(reps),)
    return (a,), reps


register(np.tile)(OpRule("tile", _bind_tile, lambda specs, reps: tile_decision(specs[0], reps)))


# -- repeat ---------------------------------------------------------------------------

def repeat_decision(spec: DTensorSpec, repeats: Any, axis: Any) -> Decision:
    """``np.repeat`` with static ``repeats`` (an int or one per row)."""
    spec = partial_free(single_sharding(spec), _LINEAR)
    counts = np.asarray(repeats, np.int64)
    if axis is None:
        if spec.ndim != 1:
            size = int(np.sum(np.broadcast_to(counts, (math.prod(spec.shape),))))
            return whole_decision(spec, tuple(range(spec.ndim)), [TensorMeta((size,), spec.dtype)],
                                  lambda rank, x: np.repeat(x, repeats))
        axis = 0
    axis = axis_index(axis, spec.ndim)
    n = spec.shape[axis]
    per_row = np.broadcast_to(counts, (n,)) if counts.ndim == 0 or counts.shape == (1,) else counts
    if per_row.shape != (n,):
        raise ValueError(f"operands could not be broadcast together with shape ({n},) ({len(per_row)},)")
    if (per_row < 0).any():
        raise ValueError("repeats may not contain negative values.")
    ends = np.concatenate([[0], np.cumsum(per_row)])
    shape = spec.shape[:axis] + (int(ends[-1]),) + spec.shape[axis + 1:]
    out = DTensorSpec(spec.mesh, spec.placements, TensorMeta(shape, spec.dtype))

    def local(rank: int, x: Any) -> Any:
        start, size = spec.local_block(rank)[1][axis], x.shape[axis]
        return np.repeat(x, per_row[start:start + size], axis=axis)

    sharded = _sharded_on(spec, (axis,))
    if not sharded:
        return Decision((spec,), (out,), local)
    (m,) = sharded
    have, want = {}, {}
    for r in spec.mesh.all_ranks:
        (size_in, start_in), (size_out, start_out) = ((b[0][axis], b[1][axis]) for b in (spec.local_block(r), out.local_block(r)))
        have[r] = (int(ends[start_in]), int(ends[start_in + size_in]))
        want[r] = (start_out, start_out + size_out)
    groups = spec.mesh.groups((m,))

    def program(backend: Any, shards: dict[int, Any]) -> dict[int, Any]:
        """One ``rechunk`` of the repeated rows that change owner (none when the chunks line up)."""
        return move_ranges(backend, {r: local(r, x) for r, x in shards.items()}, groups, axis, have, want)

    return Decision((spec,), (out,), None, program=program)


def _bind_repeat(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    given = named_arguments("numpy.repeat", ("a", "repeats", "axis"), args, kwargs)
    a = pop_dtensor("numpy.repeat", given, "a")
    repeats = given.pop("repeats")
    axis = given.pop("axis", None)
    no_more_arguments("numpy.repeat", given)
    if is_sharded(repeats):  # the result's length depends on the values: eager only, gathered
        return (a, repeats), ("values", axis)
    counts = np.asarray(repeats)
    if counts.dtype.kind not in "iub":
        raise TypeError(f"Cannot cast array data from {counts.dtype} to int64 according to the rule 'safe'")
    return (a,), (tuple(int(c) for c in counts.reshape(-1)) if counts.ndim else int(counts), axis)


def _decide_repeat(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    if key[0] != "values":
        return repeat_decision(specs[0], *key)
    # repeats given as a DTensor: both are gathered (one all_gather each) and every rank repeats the whole array;
    # the replicated result's length comes from the values (data-dependent, refused under dt.trace)
    axis = key[1]
    inputs = tuple(s.with_placements((Replicate(),) * s.mesh.ndim) for s in specs)
    out = DTensorSpec(specs[0].mesh, inputs[0].placements, TensorMeta((0,) * max(specs[0].ndim, 1), specs[0].dtype))
    return Decision(inputs, (out,), lambda rank, x, r: np.repeat(x, r, axis=axis), data_dependent=True)


register(np.repeat)(OpRule("repeat", _bind_repeat, _decide_repeat))


# -- unstack --------------------------------------------------------------------------

def _decide_unstack(specs: tuple[DTensorSpec, ...], axis: Any) -> Decision:
    """A sharded ``axis`` is gathered first; every other placement is kept (dims after ``axis`` renumbered)."""
    spec = single_sharding(specs[0])
    if spec.ndim == 0:
        raise ValueError("Input array must be at least 1-d.")
    axis = axis_index(axis, spec.ndim)
    spec = spec.with_placements(tuple(Replicate() if isinstance(p, Shard) and p.dim == axis else p for p in spec.placements))
    placements: tuple[Placement, ...] = tuple(
        Shard(p.dim - (p.dim > axis)) if isinstance(p, Shard) else p for p in spec.placements)
    shape = spec.shape[:axis] + spec.shape[axis + 1:]
    outs = tuple(DTensorSpec(spec.mesh, placements, TensorMeta(shape, spec.dtype)) for _ in range(spec.shape[axis]))
    return Decision((spec,), outs, lambda rank, x: tuple(np.moveaxis(x, axis, 0).copy()), multiple_outputs=True)


def _bind_unstack(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    given = named_arguments("numpy.unstack", ("x",), args, kwargs)
    x = pop_dtensor("numpy.unstack", given, "x")
    return (x,), frozen(given.pop("axis", 0))


if hasattr(np, "unstack"):
    register(np.unstack)(OpRule("unstack", _bind_unstack, _decide_unstack))


# -- take / take_along_axis -------------------------------------------------------------

def _bind_take(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    given = named_arguments("numpy.take", ("a", "indices", "axis", "out", "mode"), args, kwargs)
    a = pop_dtensor("numpy.take", given, "a")
    if given.pop("out", None) is not None or given.pop("mode", "raise") != "raise":
        raise ShardingError("numpy.take on DTensors: expected mode='raise' and out= as a keyword")
    axis = given.pop("axis", None)
    if axis is None:
        if a.ndim != 1:
            raise ShardingError(f"numpy.take on DTensors: expected an axis for an array of {a.ndim} dims "
                                f"(axis=None flattens it; ravel it first)")
        axis = 0
    axis = axis_index(axis, a.ndim)
    indices = given.pop("indices")
    no_more_arguments("numpy.take", given)
    if not is_sharded(indices) and not isinstance(indices, np.ndarray) and isinstance(indices, (list, tuple)):
        indices = np.asarray(indices)
    return GETITEM.bind((a, (slice(None),) * axis + (indices,)), {})


register(np.take)(OpRule("take", _bind_take, GETITEM.decide))


def _bind_take_along_axis(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    given = named_arguments("numpy.take_along_axis", ("arr", "indices", "axis"), args, kwargs)
    arr, indices = array_operands([given.pop("arr", None), given.pop("indices", None)])
    if not (is_sharded(arr) and is_sharded(indices)):
        raise TypeError("numpy.take_along_axis: expected DTensors for arr and indices; distribute plain arrays first")
    axis = given.pop("axis", -1)
    no_more_arguments("numpy.take_along_axis", given)
    if axis is None:
        if arr.ndim != 1:
            raise ShardingError("numpy.take_along_axis on DTensors: expected an axis for an array of more than 1 dim")
        axis = 0
    return (arr, indices), axis_index(axis, arr.ndim)


def _decide_take_along_axis(specs: tuple[DTensorSpec, ...], axis: int) -> Decision:
    arr, idx = (partial_free(single_sharding(s)) for s in specs)
    if idx.ndim != arr.ndim or any(a != b for d, (a, b) in enumerate(zip(arr.shape, idx.shape)) if d != axis):
        raise ShardingError(f"numpy.take_along_axis on DTensors: expected indices of shape {arr.shape} but for axis "
                            f"{axis} (no broadcasting), got {idx.shape}")
    if idx.dtype.kind not in "iu":
        raise IndexError("`indices` must be an integer array")
    placements = arr.placements
    arr = arr.with_placements(tuple(Replicate() if isinstance(p, Shard) and p.dim == axis else p for p in placements))
    idx = idx.with_placements(tuple(p if isinstance(p, Shard) else Replicate() for p in placements))
    out = DTensorSpec(idx.mesh, idx.placements, TensorMeta(idx.shape, arr.dtype))
    return Decision((arr, idx), (out,), lambda rank, a, i: np.take_along_axis(a, i, axis))


register(np.take_along_axis)(OpRule("take_along_axis", _bind_take_along_axis, _decide_take_along_axis))
