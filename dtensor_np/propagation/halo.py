"""Halo exchanges along a sharded dim: ``diff``, ``gradient``, ``trapezoid``, ``diagflat`` and ``kron`` on DTensors.

Each output row along the dim an op works along needs a few input rows
around it (``diff``: rows ``i .. i + n``; ``gradient``: ``i - 1 .. i + 1``;
``trapezoid``: the next row).  Where that dim is sharded on mesh dim ``m``,
every rank computes the output rows it holds (their ``torch.chunk`` block)
from the input rows they need: the rows it holds, and the few its neighbours
hold, which arrive in one ``Alltoallv`` over the ranks of ``m`` (counted as
``all_to_all``; see :func:`~.row_moves.move_ranges`).  Only rows that change
owner travel: ``n`` rows of the other dims per block boundary for ``diff`` of
order ``n``, one row each way for ``gradient`` and one for ``trapezoid``
(plus whatever the output's chunking moves the block boundaries by when the
output has another length than the input).  Never a gather.  Every rank
computes NumPy's own arithmetic on its rows, so the values equal NumPy's
exactly (``trapezoid``'s sum over the axis adds the ranks' partial sums:
``Partial(sum)``, reduced when read).

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.arange(8.0) ** 2, dt.DeviceMesh((4,)), [dt.Shard(0)])
    >>> with dt.comm_counter() as c:
    ...     d = np.diff(x)
    >>> d.full_tensor().tolist(), str(d.spec), c.counts["all_to_all"], c.bytes["all_to_all"]
    ([1.0, 3.0, 5.0, 7.0, 9.0, 11.0, 13.0], 'S(0)', 1, 8)
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Hashable, Mapping, Optional

import numpy as np

from collectives import Groups, array_module, frozen

from ..errors import ShardingError
from ..placements import Partial, Placement, Replicate, Shard
from ..sharded import array_operands, is_sharded
from ..spec import DTensorSpec, TensorMeta
from .common import axis_index, axis_tuple, partial_free, sharding_mesh_dim, single_sharding
from .registry import Decision, OpRule, register
from .row_moves import move_ranges
from .signature_bind import named_arguments, no_more_arguments

__all__ = ["AxisLayout", "layout_of", "fetch_windows", "clip_range", "gradient_block"]

Shards = dict[int, Any]
Range = tuple[int, int]


@dataclass(frozen=True)
class AxisLayout:
    """Where the positions of one dim live: ``have[r]`` (input) and ``out[r]`` (output) are each world rank's
    ``(start, stop)`` along it, ``groups`` the ranks that split it (mesh dim ``mesh_dim``; None: whole on every rank).

    Example:
        >>> from dtensor_np import DeviceMesh
        >>> spec = DTensorSpec(DeviceMesh((2,)), (Shard(0),), TensorMeta((5,), "f8"))
        >>> s = layout_of(spec, 0, DTensorSpec(DeviceMesh((2,)), (Shard(0),), TensorMeta((4,), "f8")), 0)
        >>> s.mesh_dim, s.have, s.out
        (0, {0: (0, 3), 1: (3, 5)}, {0: (0, 2), 1: (2, 4)})
    """

    mesh_dim: Optional[int]
    groups: Groups
    have: Mapping[int, Range]
    out: Mapping[int, Range]


def layout_of(spec: DTensorSpec, axis: int, out_spec: Optional[DTensorSpec], out_axis: Optional[int],
              scale: int = 1) -> AxisLayout:
    """The :class:`AxisLayout` of dim ``axis`` of ``spec`` (positions times ``scale``: a raveled block's flat range)
    and of dim ``out_axis`` of ``out_spec`` (None: no output along it; ``out`` is then empty).

    Example:
        >>> from dtensor_np import DeviceMesh
        >>> spec = DTensorSpec(DeviceMesh((2,)), (Shard(0),), TensorMeta((3, 2), "f8"))
        >>> layout_of(spec, 0, None, None, scale=2).have
        {0: (0, 4), 1: (4, 6)}
    """
    mesh = spec.mesh
    m = sharding_mesh_dim(spec, axis)
    have, out = {}, {}
    for r in mesh.all_ranks:
        shape, origin = spec.local_block(r)
        have[r] = (origin[axis] * scale, (origin[axis] + shape[axis]) * scale)
        if out_spec is not None and out_axis is not None:
            oshape, oorigin = out_spec.local_block(r)
            out[r] = (oorigin[out_axis], oorigin[out_axis] + oshape[out_axis])
    groups = mesh.groups((m,)) if m is not None else ()
    return AxisLayout(m, groups, have, out)


def clip_range(lo: int, hi: int, n: int) -> Range:
    """``[lo, hi)`` within ``[0, n)``; an empty range where nothing is left.

    Example:
        >>> clip_range(-2, 3, 5), clip_range(4, 9, 5), clip_range(6, 9, 5)
        ((0, 3), (4, 5), (5, 5))
    """
    lo, hi = max(lo, 0), min(hi, n)
    return (lo, hi) if lo < hi else (min(lo, n), min(lo, n))


def fetch_windows(backend: Any, shards: Shards, seq: AxisLayout, axis: int, want: Mapping[int, Range]) -> Shards:
    """Every held rank's array of the positions ``want[r]`` along ``axis`` (one ``Alltoallv`` of the rows that
    change owner, counted as ``all_to_all``; none where nothing moves or the dim is whole on every rank).

    Example:
        >>> from collectives import SimulatedBackend
        >>> from dtensor_np import DeviceMesh
        >>> spec = DTensorSpec(DeviceMesh((2,)), (Shard(0),), TensorMeta((5,), "f8"))
        >>> shards = {0: np.arange(3.0), 1: np.arange(3.0, 5.0)}
        >>> out = fetch_windows(SimulatedBackend(2), shards, layout_of(spec, 0, None, None), 0, {0: (0, 4), 1: (2, 5)})
        >>> out[0].tolist(), out[1].tolist()
        ([0.0, 1.0, 2.0, 3.0], [2.0, 3.0, 4.0])
    """
    if seq.mesh_dim is None:
        return {r: x[(slice(None),) * axis + (slice(*want[r]),)] for r, x in shards.items()}
    return move_ranges(backend, shards, seq.groups, axis, seq.have, want)


def _follow_placements(spec: DTensorSpec, like: DTensorSpec, dims: Mapping[int, int]) -> tuple[Placement, ...]:
    """Placements for ``spec`` that shard its dim ``d`` where ``like`` shards dim ``dims[d]`` (same length), else
    replicate: an operand aligned with ``like`` needs no movement but what its own placements ask for."""
    placements: list[Placement] = []
    for m, p in enumerate(like.placements):
        own = next((d for d, ld in dims.items() if isinstance(p, Shard) and p.dim == ld
                    and d < spec.ndim and spec.shape[d] == like.shape[ld]), None)
        placements.append(Shard(own) if own is not None else Replicate())
    return tuple(placements)


def _take(x: Any, axis: int, lo: int, hi: int) -> Any:
    return x[(slice(None),) * axis + (slice(lo, hi),)]


def _row(x: Any, axis: int, i: int) -> Any:
    return x[(slice(None),) * axis + (i,)]


def _with_length(spec: DTensorSpec, axis: int, length: int, dtype: Any) -> DTensorSpec:
    shape = list(spec.shape)
    shape[axis] = length
    return DTensorSpec(spec.mesh, spec.placements, TensorMeta(tuple(shape), np.dtype(dtype)), spec.shard_order)


# -- diff --------------------------------------------------------------------------------------------
_ABSENT = "absent"


def _edge_argument(value: Any) -> Any:
    """``prepend``/``append`` in the key: absent, a static scalar, or an array operand (``"array"``)."""
    if value is np._NoValue:
        return _ABSENT
    if is_sharded(value):
        return "array"
    return ("scalar", frozen(value))


def _bind_diff(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    given = named_arguments("numpy.diff", ("a", "n", "axis", "prepend", "append"), args, kwargs)
    a = given.pop("a", None)
    n, axis = given.pop("n", 1), given.pop("axis", -1)
    edges = [given.pop("prepend", np._NoValue), given.pop("append", np._NoValue)]
    no_more_arguments("numpy.diff", given)
    operands = array_operands([a] + [e for e in edges if e is not np._NoValue])
    a, rest = operands[0], iter(operands[1:])
    edges = [e if e is np._NoValue else next(rest) for e in edges]
    if not is_sharded(a):
        raise TypeError(f"numpy.diff: expected a DTensor, got {type(a).__name__}")
    n = operator.index(n)
    kinds = tuple(_edge_argument(e) for e in edges)
    tensors = (a,) + tuple(e for e, k in zip(edges, kinds) if k == "array")
    return tensors, (n, axis, kinds)


def _edge_block(value: Any, like: Any, axis: int) -> Any:
    """A scalar ``prepend``/``append`` as NumPy makes it: one row broadcast to the shape of ``like``'s other dims."""
    value = np.asanyarray(value)
    shape = list(like.shape)
    shape[axis] = 1
    return np.broadcast_to(value, tuple(shape))


def _decide_diff(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    """``np.diff(a, n, axis, prepend, append)``: local along an unsharded axis, else one halo exchange.

    The joined sequence is ``prepend`` (replicated along ``axis``), ``a``, ``append``; the output rows a
    rank holds need the joined rows from its first to ``n`` past its last: those of ``a`` that other ranks
    hold arrive in one ``Alltoallv`` (``n`` rows per block boundary, plus the shift of the output's chunking).
    """
    n, axis_arg, kinds = key
    a = specs[0]
    if a.ndim == 0:
        raise ValueError("diff requires input that is at least one dimensional")
    axis = axis_index(axis_arg, a.ndim)
    if n < 0:
        raise ValueError("order must be non-negative but got " + repr(n))
    a = single_sharding(partial_free(a))
    if n == 0:  # NumPy returns a itself: here a new handle on the same values
        return Decision((a,), (a,), lambda rank, x: x)
    edge_specs = iter(specs[1:])
    edges: list[Any] = []  # per edge: None (absent), ("scalar", value) or a spec
    for kind in kinds:
        edges.append(None if kind == _ABSENT else kind if kind != "array" else next(edge_specs))
    lengths, stand_ins = [], []
    for e in edges:
        if e is None:
            lengths.append(0)
            continue
        if isinstance(e, tuple):
            block = _edge_block(e[1], np.empty(a.shape, a.dtype), axis)
        else:
            block = np.empty(e.shape if e.ndim else (), e.dtype)
            block = _edge_block(block, np.empty(a.shape, a.dtype), axis) if e.ndim == 0 else block
        if block.ndim != a.ndim or any(s != t for d, (s, t) in enumerate(zip(block.shape, a.shape)) if d != axis):
            np.concatenate([np.empty(block.shape, block.dtype), np.empty(a.shape, a.dtype)], axis=axis)  # NumPy's error
            raise ValueError(f"numpy.diff: prepend/append of shape {block.shape} does not fit {a.shape} along axis {axis}")
        lengths.append(block.shape[axis])
        stand_ins.append(np.empty((0,) * a.ndim, block.dtype))
    p, q, length = lengths[0], lengths[1], a.shape[axis]
    total = p + length + q
    joined = np.concatenate([np.empty((0,) * a.ndim, a.dtype)] + stand_ins).dtype
    dtype = np.diff(np.zeros(n + 1, joined), n).dtype
    out = _with_length(a, axis, max(total - n, 0), dtype)
    edge_targets = [DTensorSpec(a.mesh, _follow_placements(e, a, {d: d for d in range(a.ndim) if d != axis}),
                                e.tensor_meta) for e in edges if isinstance(e, DTensorSpec)]
    seq = layout_of(a, axis, out, axis)

    def pieces(rank: int, window: Any, lo: int, hi: int, arrays: list[Any]) -> Any:
        """The joined rows ``[lo, hi)``: NumPy's concatenation of the three parts (empty parts keep the dtype)."""
        it = iter(arrays)
        parts = []
        for e, start in zip(edges, (0, p + length)):
            if e is None:
                continue
            block = _edge_block(e[1], window, axis) if isinstance(e, tuple) else next(it)
            if not isinstance(e, tuple) and block.ndim == 0:
                block = _edge_block(block, window, axis)
            size = block.shape[axis]
            parts.append(_take(block, axis, min(max(lo - start, 0), size), min(max(hi - start, 0), size)))
        if edges[0] is None:
            return array_module(window).concatenate([window] + parts, axis=axis) if parts else window
        return array_module(window).concatenate([parts[0], window] + parts[1:], axis=axis)

    def local(rank: int, x: Any, *arrays: Any) -> Any:
        return np.diff(pieces(rank, x, 0, total, list(arrays)), n, axis=axis)

    inputs = (a,) + tuple(edge_targets)
    if seq.mesh_dim is None:
        return Decision(inputs, (out,), local)
    want = {}
    for r, (o0, o1) in seq.out.items():  # the rows of a among the joined rows [o0, o1 + n)
        want[r] = clip_range(max(o0, p) - p, min(o1 + n, p + length) - p, length) if o1 > o0 else (0, 0)

    def program(backend: Any, shards: Shards, *edge_shards: Shards) -> Shards:
        windows = fetch_windows(backend, shards, seq, axis, want)
        result = {}
        for r, w in windows.items():
            o0, o1 = seq.out[r]
            if o1 == o0:
                shape = list(w.shape)
                shape[axis] = 0
                result[r] = array_module(w).empty(tuple(shape), dtype)
                continue
            joined_rows = pieces(r, w, o0, o1 + n, [s[r] for s in edge_shards])
            result[r] = np.diff(joined_rows, n, axis=axis)
        return result

    return Decision(inputs, (out,), None, program=program)


register(np.diff)(OpRule("diff", _bind_diff, _decide_diff))


# -- gradient ----------------------------------------------------------------------------------------
def _bind_gradient(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    if not args:
        raise TypeError("numpy.gradient() missing required argument 'f'")
    extra = sorted(set(kwargs) - {"axis", "edge_order"})
    if extra:
        raise TypeError(f"numpy.gradient() got unexpected keyword arguments {extra}")
    f, varargs = args[0], list(args[1:])
    operands = array_operands([f] + varargs)
    f, varargs = operands[0], operands[1:]
    if not is_sharded(f):
        raise TypeError(f"numpy.gradient: expected a DTensor for f, got {type(f).__name__}")
    axis = kwargs.get("axis")
    axes = tuple(range(f.ndim)) if axis is None else axis_tuple(axis, f.ndim, lists=True)
    spacing = tuple("array" if is_sharded(v) else ("scalar", frozen(v)) for v in varargs)
    return (f,) + tuple(v for v in varargs if is_sharded(v)), (axes, spacing, kwargs.get("edge_order", 1))


def _spacings(axes: tuple[int, ...], spacing: tuple, shape: tuple[int, ...], arrays: list[Any]) -> list[Any]:
    """NumPy's ``dx`` per axis from the spacing arguments (the coordinate arrays whole on every rank)."""
    it = iter(arrays)
    values = [next(it) if s == "array" else s[1] for s in spacing]
    if not values:
        return [1.0] * len(axes)
    if len(values) == 1 and np.ndim(values[0]) == 0:
        return values * len(axes)
    if len(values) != len(axes):
        raise TypeError("invalid number of arguments")
    dx = list(values)
    for i, distances in enumerate(dx):
        distances = np.asanyarray(distances)
        if distances.ndim == 0:
            continue
        if distances.ndim != 1:
            raise ValueError("distances must be either scalars or 1d")
        if len(distances) != shape[axes[i]]:
            raise ValueError("when 1d, distances must match the length of the corresponding dimension")
        if np.issubdtype(distances.dtype, np.integer):
            distances = distances.astype(np.float64)
        diffx = np.diff(distances)
        if (diffx == diffx[0]).all():
            diffx = diffx[0]
        dx[i] = diffx
    return dx


def _gradient_type(dtype: np.dtype) -> tuple[np.dtype, Optional[np.dtype]]:
    """(output dtype, the dtype ``f`` is first converted or viewed to, or None), as NumPy's ``gradient``."""
    if dtype.type is np.datetime64:
        delta = np.dtype(dtype.name.replace("datetime", "timedelta"))
        return delta, delta
    if dtype.type is np.timedelta64 or np.issubdtype(dtype, np.inexact):
        return dtype, None
    return np.dtype(np.float64), np.dtype(np.float64) if np.issubdtype(dtype, np.integer) else None


def gradient_block(w: Any, i0: int, o0: int, o1: int, length: int, axis: int, ax_dx: Any, edge_order: Any,
                   otype: np.dtype) -> Any:
    """Rows ``[o0, o1)`` of NumPy's ``gradient`` along ``axis`` (of ``length``), from ``w``: the rows from ``i0``
    that they need (ints as float64, datetimes viewed as timedeltas), NumPy's formulas element by element.

    Example:
        >>> f = np.array([1.0, 2.0, 4.0, 7.0, 11.0])
        >>> gradient_block(f[1:], 1, 2, 5, 5, 0, 1.0, 1, np.dtype("f8")).tolist() == np.gradient(f)[2:].tolist()
        True
    """
    shape = list(w.shape)
    shape[axis] = o1 - o0
    out = array_module(w).empty(tuple(shape), otype)
    if o1 == o0:
        return out

    def put(lo: int, hi: int, value: Any) -> None:
        out[(slice(None),) * axis + (slice(lo - o0, hi - o0),)] = value

    def rows(lo: int, hi: int) -> Any:
        return _take(w, axis, lo - i0, hi - i0)

    def at(i: int) -> Any:
        return _row(w, axis, i - i0)

    uniform = np.ndim(ax_dx) == 0
    j0, j1 = max(o0, 1), min(o1, length - 1)
    if j1 > j0:
        if uniform:
            put(j0, j1, (rows(j0 + 1, j1 + 1) - rows(j0 - 1, j1 - 1)) / (2. * ax_dx))
        else:
            dx1, dx2 = ax_dx[j0 - 1:j1 - 1], ax_dx[j0:j1]
            a = -(dx2) / (dx1 * (dx1 + dx2))
            b = (dx2 - dx1) / (dx1 * dx2)
            c = dx1 / (dx2 * (dx1 + dx2))
            bshape = [1] * w.ndim
            bshape[axis] = -1
            a, b, c = a.reshape(bshape), b.reshape(bshape), c.reshape(bshape)
            put(j0, j1, a * rows(j0 - 1, j1 - 1) + b * rows(j0, j1) + c * rows(j0 + 1, j1 + 1))
    first, last = (slice(None),) * axis + (0,), (slice(None),) * axis + (o1 - o0 - 1,)
    if edge_order == 1:
        if o0 == 0:
            out[first] = (at(1) - at(0)) / (ax_dx if uniform else ax_dx[0])
        if o1 == length:
            out[last] = (at(length - 1) - at(length - 2)) / (ax_dx if uniform else ax_dx[-1])
        return out
    if o0 == 0:
        if uniform:
            a, b, c = -1.5 / ax_dx, 2. / ax_dx, -0.5 / ax_dx
        else:
            dx1, dx2 = ax_dx[0], ax_dx[1]
            a = -(2. * dx1 + dx2) / (dx1 * (dx1 + dx2))
            b = (dx1 + dx2) / (dx1 * dx2)
            c = - dx1 / (dx2 * (dx1 + dx2))
        out[first] = a * at(0) + b * at(1) + c * at(2)
    if o1 == length:
        if uniform:
            a, b, c = 0.5 / ax_dx, -2. / ax_dx, 1.5 / ax_dx
        else:
            dx1, dx2 = ax_dx[-2], ax_dx[-1]
            a = (dx2) / (dx1 * (dx1 + dx2))
            b = - (dx2 + dx1) / (dx1 * dx2)
            c = (2. * dx2 + dx1) / (dx2 * (dx1 + dx2))
        out[last] = a * at(length - 3) + b * at(length - 2) + c * at(length - 1)
    return out


def _gradient_need(o0: int, o1: int, length: int, second: bool) -> Range:
    """The rows the output rows ``[o0, o1)`` of ``gradient`` need: one either side, three at an edge of order 2."""
    if o1 == o0:
        return (0, 0)
    lo, hi = o0 - 1, o1 + 1
    if o0 == 0:
        hi = max(hi, 3 if second else 2)
    if o1 == length:
        lo = min(lo, length - (3 if second else 2))
    return clip_range(lo, hi, length)


def _decide_gradient(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    """``np.gradient``: per axis, local where it is whole, else one halo exchange of a row each way (two at an
    edge of order 2) over the ranks that shard it; coordinate arrays are replicated (gathered if sharded)."""
    axes, spacing, edge_order = key
    f = single_sharding(partial_free(specs[0]))
    coords = tuple(DTensorSpec(s.mesh, (Replicate(),) * s.mesh.ndim, s.tensor_meta) for s in specs[1:])
    stand_ins = [np.zeros(s.shape if s.ndim <= 1 else (0,) * s.ndim, s.dtype) for s in coords]
    if any(s.ndim == 1 and s.shape[0] < 2 for s in coords):  # NumPy's own error for a short coordinate array
        _spacings(axes, spacing, f.shape, stand_ins)
    _spacings(axes, spacing, f.shape, [np.arange(s.shape[0], dtype=float) if s.ndim == 1 else z
                                       for s, z in zip(coords, stand_ins)])
    if edge_order > 2:
        raise ValueError("'edge_order' greater than 2 not supported")
    otype, convert = _gradient_type(f.dtype)
    second = edge_order != 1
    for axis in axes:
        if f.shape[axis] < edge_order + 1:
            raise ValueError("Shape of array too small to calculate a numerical gradient, "
                             "at least (edge_order + 1) elements are required.")
        if second and f.shape[axis] < 3:
            raise IndexError(f"index 2 is out of bounds for axis {axis} with size {f.shape[axis]}")
    out = tuple(_with_length(f, a, f.shape[a], otype) for a in axes)
    seqs = [layout_of(f, a, f, a) for a in axes]

    def prepared(x: Any) -> Any:
        if convert is None:
            return x
        return x.view(convert) if f.dtype.type is np.datetime64 else x.astype(convert)

    def compute(backend: Any, shards: Shards, *coord_shards: Shards) -> tuple[Shards, ...]:
        results = []
        some = next(iter(coord_shards[0].values())) if coord_shards else None
        dx = _spacings(axes, spacing, f.shape, [s[next(iter(s))] for s in coord_shards]) if some is not None \
            else _spacings(axes, spacing, f.shape, [])
        for axis, ax_dx, seq in zip(axes, dx, seqs):
            length = f.shape[axis]
            want = {r: _gradient_need(o0, o1, length, second) for r, (o0, o1) in seq.out.items()}
            windows = fetch_windows(backend, shards, seq, axis, want)
            results.append({r: gradient_block(prepared(w), want[r][0], *seq.out[r], length, axis, ax_dx,
                                              edge_order, otype) for r, w in windows.items()})
        return tuple(results)

    multiple = len(axes) != 1

    def program(backend: Any, shards: Shards, *coord_shards: Shards) -> Any:
        results = compute(backend, shards, *coord_shards)
        return results if multiple else results[0]

    if all(s.mesh_dim is None for s in seqs):
        def local(rank: int, x: Any, *cs: Any) -> Any:
            results = tuple(r[rank] for r in compute(None, {rank: x}, *[{rank: c} for c in cs]))
            return results if multiple else results[0]

        return Decision((f,) + coords, out, local, multiple_outputs=multiple)
    return Decision((f,) + coords, out, None, multiple_outputs=multiple, program=program)


register(np.gradient)(OpRule("gradient", _bind_gradient, _decide_gradient))


# -- trapezoid ---------------------------------------------------------------------------------------
def _bind_trapezoid(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    given = named_arguments("numpy.trapezoid", ("y", "x", "dx", "axis"), args, kwargs)
    y, x = given.pop("y", None), given.pop("x", None)
    dx, axis = given.pop("dx", 1.0), given.pop("axis", -1)
    no_more_arguments("numpy.trapezoid", given)
    y, x = array_operands([y, x])
    if not is_sharded(y):
        raise TypeError(f"numpy.trapezoid: expected a DTensor for y, got {type(y).__name__}")
    if is_sharded(dx) or (isinstance(dx, np.ndarray) and dx.ndim) or isinstance(dx, (list, tuple)):
        raise ShardingError("numpy.trapezoid on DTensors: expected dx as a scalar (an array of spacings: pass "
                            "the coordinates as x)")
    return (y,) + ((x,) if is_sharded(x) else ()), (frozen(dx), axis, is_sharded(x))


def _reduced(spec: DTensorSpec, axis: int, meta: TensorMeta, pending: Placement) -> DTensorSpec:
    placements: list[Placement] = []
    for p in spec.placements:
        if isinstance(p, Shard):
            placements.append(pending if p.dim == axis else Shard(p.dim - (p.dim > axis)))
        else:
            placements.append(p)
    return DTensorSpec(spec.mesh, tuple(placements), meta)


def _decide_trapezoid(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    """``np.trapezoid``: along a sharded axis every rank sums the terms of the pairs that start in its block (the
    next row arrives in one halo exchange, and the coordinates' next one too when ``x`` is sharded); the result
    is ``Partial(sum)`` on that mesh dim (one ``all_reduce`` when read).  An ``x`` NumPy broadcasts oddly (another
    length than ``y``'s axis, or another shape) is met on gathered operands (stated: ``all_gather``)."""
    dx, axis_arg, has_x = key
    y = single_sharding(partial_free(specs[0]))
    if y.ndim == 0:
        raise IndexError("list assignment index out of range")
    axis = axis_index(axis_arg, y.ndim)
    x = single_sharding(partial_free(specs[1])) if has_x else None
    length = y.shape[axis]
    probe_y = np.zeros((2,), y.dtype)
    dtype = np.trapezoid(probe_y, x=None if x is None else np.zeros(2, x.dtype), dx=dx).dtype
    meta = TensorMeta(tuple(n for d, n in enumerate(y.shape) if d != axis), dtype)

    def call(rank: int, yl: Any, *xl: Any) -> Any:
        return np.asarray(np.trapezoid(yl, x=xl[0] if xl else None, dx=dx, axis=axis))

    aligned = x is None or (x.ndim == 1 and x.shape[0] == length) or x.shape == y.shape
    if not aligned:  # NumPy broadcasts d against the pairs: on whole operands
        whole = tuple(DTensorSpec(s.mesh, (Replicate(),) * s.mesh.ndim, s.tensor_meta) for s in (y, x))
        return Decision(whole, (DTensorSpec(y.mesh, (Replicate(),) * y.mesh.ndim, meta),), call)
    m = sharding_mesh_dim(y, axis)
    if x is not None:
        if x.ndim == 1:
            keep = m is not None and any(isinstance(p, Shard) for p in x.placements)
            x = x.with_placements(tuple(Shard(0) if keep and i == m else Replicate() for i in range(y.mesh.ndim)))
        else:  # y's shape: sharded as y is
            x = DTensorSpec(y.mesh, y.placements, specs[1].tensor_meta, y.shard_order)
    inputs = (y,) + ((x,) if x is not None else ())
    out = _reduced(y, axis, meta, Partial("sum"))
    if m is None:
        return Decision(inputs, (out,), call)
    seq = layout_of(y, axis, None, None)
    want = {r: (a, min(b + 1, length)) if b > a else (a, a) for r, (a, b) in seq.have.items()}
    x_sharded = x is not None and x.ndim == 1 and not x.is_replicated()
    x_seq = layout_of(x, 0, None, None) if x_sharded else None

    def program(backend: Any, y_shards: Shards, *x_shards: Shards) -> Shards:
        windows = fetch_windows(backend, y_shards, seq, axis, want)
        coords: dict[int, Any] = {}
        if x is not None and x.ndim == 1:
            coords = (fetch_windows(backend, x_shards[0], x_seq, 0, want) if x_seq is not None
                      else {r: c[slice(*want[r])] for r, c in x_shards[0].items()})
        elif x is not None:
            coords = fetch_windows(backend, x_shards[0], seq, axis, want)
        result = {}
        for r, w in windows.items():
            d: Any = dx
            if x is not None and x.ndim == 1:
                d = np.diff(coords[r])
                shape = [1] * y.ndim
                shape[axis] = d.shape[0]
                d = d.reshape(shape)
            elif x is not None:
                d = np.diff(coords[r], axis=axis)
            pairs = _take(w, axis, 1, None) + _take(w, axis, None, -1) if w.shape[axis] else _take(w, axis, 0, 0) * 2
            result[r] = np.asarray((d * pairs / 2.0).sum(axis))
        return result

    return Decision(inputs, (out,), None, program=program)


register(np.trapezoid)(OpRule("trapezoid", _bind_trapezoid, _decide_trapezoid))


# -- diagflat ----------------------------------------------------------------------------------------
def _bind_diagflat(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    given = named_arguments("numpy.diagflat", ("v", "k"), args, kwargs)
    v, k = given.pop("v", None), given.pop("k", 0)
    no_more_arguments("numpy.diagflat", given)
    if not is_sharded(v):
        raise TypeError(f"numpy.diagflat: expected a DTensor, got {type(v).__name__}")
    return (v,), operator.index(k)


def _decide_diagflat(specs: tuple[DTensorSpec, ...], k: int) -> Decision:
    """``np.diagflat(v, k)``: the rows of the result sharded where ``v``'s first dim is; each rank builds its rows
    from the entries of ``v`` they hold, which arrive in one ``Alltoallv`` (only those that change owner: the
    result's rows are chunked by ``len(v) + |k|``).  ``v`` sharded on another dim than its first is gathered along
    it first (``all_gather``: the flattened order needs whole rows)."""
    v = single_sharding(partial_free(specs[0]))
    v = v.with_placements(tuple(p if isinstance(p, Shard) and p.dim == 0 else Replicate() for p in v.placements))
    size = int(np.prod(v.shape))
    inner = int(np.prod(v.shape[1:]))
    n = size + abs(k)
    m = sharding_mesh_dim(v, 0) if v.ndim else None
    placements = tuple(Shard(0) if i == m else Replicate() for i in range(v.mesh.ndim))
    out = DTensorSpec(v.mesh, placements, TensorMeta((n, n), v.dtype))
    start = max(-k, 0)  # the first row holding v[0] (row i holds it at column i + k)

    def build(rows: Range, flat: Any, first: int) -> Any:
        """Rows ``[rows)`` of the result from ``flat``: the entries of ``v`` from ``first`` on."""
        o0, o1 = rows
        res = array_module(flat).zeros((o1 - o0, n), v.dtype)
        lo, hi = max(o0, start), min(o1, start + size)
        if hi > lo:
            i = np.arange(lo, hi)
            res[i - o0, i + k] = flat[lo - start - first:hi - start - first]
        return res

    if m is None:
        return Decision((v,), (out,), lambda rank, x: build((0, n), x.reshape(-1), 0))
    seq = layout_of(v, 0, out, 0, scale=inner)
    want = {r: clip_range(o0 - start, o1 - start, size) for r, (o0, o1) in seq.out.items()}

    def program(backend: Any, shards: Shards) -> Shards:
        windows = fetch_windows(backend, {r: x.reshape(-1) for r, x in shards.items()}, seq, 0, want)
        return {r: build(seq.out[r], w, want[r][0]) for r, w in windows.items()}

    return Decision((v,), (out,), None, program=program)


register(np.diagflat)(OpRule("diagflat", _bind_diagflat, _decide_diagflat))


# -- kron --------------------------------------------------------------------------------------------
def _bind_kron(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    given = named_arguments("numpy.kron", ("a", "b"), args, kwargs)
    a, b = given.pop("a", None), given.pop("b", None)
    no_more_arguments("numpy.kron", given)
    a, b = array_operands([a, b])
    if not is_sharded(a) or not is_sharded(b):
        raise ShardingError(f"numpy.kron on DTensors: expected a and b as arrays (a scalar: multiply), got "
                            f"{type(a).__name__} and {type(b).__name__}")
    return (a, b), None


def _decide_kron(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    """``np.kron(a, b)``: the result's dim ``d`` (length ``a_d * b_d``) sharded where ``a``'s dim ``d`` is; each
    rank builds its rows from the rows of ``a`` under them (``o // b_d``), which arrive in one ``Alltoallv`` per
    sharded dim (only ``a``'s rows that change owner: ``b_d`` times fewer than the result's).  ``b`` is
    replicated (gathered with one ``all_gather`` where it is sharded), except on a dim where ``a`` has length 1
    and ``b``'s sharding carries over as it is."""
    a, b = (single_sharding(partial_free(s)) for s in specs)
    dtype = np.kron(np.zeros((1,) * a.ndim, a.dtype), np.zeros((1,) * b.ndim, b.dtype)).dtype
    if a.ndim == 0 or b.ndim == 0:  # NumPy's multiply
        big = b if a.ndim == 0 else a
        scalar = DTensorSpec(a.mesh, (Replicate(),) * a.mesh.ndim, (a if a.ndim == 0 else b).tensor_meta)
        out = DTensorSpec(big.mesh, big.placements, TensorMeta(big.shape, dtype), big.shard_order)
        inputs = (scalar, big) if a.ndim == 0 else (big, scalar)
        return Decision(inputs, (out,), lambda rank, x, y: np.kron(x, y))
    nd = max(a.ndim, b.ndim)
    pa, pb = nd - a.ndim, nd - b.ndim  # leading ones NumPy gives the shorter
    a_shape = (1,) * pa + a.shape
    b_shape = (1,) * pb + b.shape
    placements: list[Placement] = []
    a_places: list[Placement] = []
    b_places: list[Placement] = []
    for m, (p, q) in enumerate(zip(a.placements, b.placements)):
        if isinstance(p, Shard) and a.mesh.shape[m] > 1:
            placements.append(Shard(p.dim + pa))
            a_places.append(p)
            b_places.append(Replicate())
        elif isinstance(q, Shard) and a_shape[q.dim + pb] == 1 and a.mesh.shape[m] > 1:
            placements.append(Shard(q.dim + pb))
            a_places.append(Replicate())
            b_places.append(q)
        else:
            placements.append(Replicate())
            a_places.append(Replicate())
            b_places.append(Replicate())
    shape = tuple(s * t for s, t in zip(a_shape, b_shape))
    out = DTensorSpec(a.mesh, tuple(placements), TensorMeta(shape, dtype))
    a_in, b_in = a.with_placements(tuple(a_places)), b.with_placements(tuple(b_places))
    moves = []  # (a's dim, sequence, want)
    for m, p in enumerate(a_in.placements):
        if isinstance(p, Shard) and a_in.mesh.shape[m] > 1:
            d, od, bd = p.dim, p.dim + pa, b_shape[p.dim + pa]
            seq = layout_of(a_in, d, out, od)
            want = {r: clip_range(o0 // bd, -(-o1 // bd), a.shape[d]) if o1 > o0 else (0, 0)
                    for r, (o0, o1) in seq.out.items()}
            moves.append((d, od, bd, seq, want))
    if not moves:
        return Decision((a_in, b_in), (out,), lambda rank, x, y: np.kron(x, y))

    def program(backend: Any, a_shards: Shards, b_shards: Shards) -> Shards:
        for d, _, _, seq, want in moves:
            a_shards = fetch_windows(backend, a_shards, seq, d, want)
        result = {}
        for r, x in a_shards.items():
            full = np.kron(x, b_shards[r])
            index = [slice(None)] * nd
            for d, od, bd, seq, want in moves:
                o0, o1 = seq.out[r]
                start = o0 - want[r][0] * bd
                index[od] = slice(start, start + o1 - o0)
            result[r] = array_module(full).ascontiguousarray(full[tuple(index)])
        return result

    return Decision((a_in, b_in), (out,), None, program=program)


register(np.kron)(OpRule("kron", _bind_kron, _decide_kron))
