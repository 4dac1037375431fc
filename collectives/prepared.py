"""Prepared collectives: everything but the data worked out once, then one mpi4py call per use.

``MpiBackend.prepare_all_gather`` (and ``prepare_all_reduce``,
``prepare_reduce_scatter``, ``prepare_all_to_all``) take what the general
methods take plus this rank's input shape and dtype, and return a
:class:`Prepared`: ``run(x)`` gives this rank's result for this rank's
array ``x``.  The group communicator, the even or uneven MPI function, counts,
displacements, datatype, reduce op and output shape are all computed at
preparation; a call checks that ``x`` is a C-contiguous NumPy array of the
prepared shape and dtype (a few attribute reads), allocates the output (or
reuses a large one nobody holds, see :mod:`.buffers`) and issues the MPI call
into it.  Anything else (a CuPy array, another shape, a strided view) goes
through the general method with ``check=False``, which issues the very same
MPI call, so ranks on either path still match.

A prepared call is a promise about the group: every member must call its own
prepared (or general) version of the same collective, as with ``check=False``.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from . import counting
from .buffers import allocator
from .dtypes import movement_datatype, validate_dtype
from .errors import CollectiveError
from .layout import (
    all_equal,
    all_to_all_arguments,
    axis_and_sizes,
    chunk_sizes,
    is_leading_axis,
    offsets,
    piece_counts,
    with_length,
)
from .packing import concat_blocks
from .protocol import Array, Groups, ReduceOp, Sizes
from .reduce_ops import mpi_reduction, validate_reduce_op, validate_reduction

if TYPE_CHECKING:
    from .mpi import MpiBackend

__all__ = [
    "Prepared",
    "prepare_all_gather",
    "prepare_all_reduce",
    "prepare_all_to_all",
    "prepare_reduce_scatter",
]

_ndarray = np.ndarray
_empty = np.empty
_copyto = np.copyto
_active = counting._active
_record = counting.record


class Prepared:
    """A collective prepared for one rank's input shape and dtype; ``run(x)`` returns this rank's result.

    Example (under ``mpiexec -n 2``):
        >>> backend = MpiBackend()  # doctest: +SKIP
        >>> gather = backend.prepare_all_gather(((0, 1),), (2, 3), "float32")  # doctest: +SKIP
        >>> gather  # doctest: +SKIP
        Prepared(all_gather, shape=(2, 3), dtype=float32, out_shape=(4, 3), mpi_call=Allgather)
        >>> gather.run(np.full((2, 3), backend.rank, np.float32))[:, 0]  # doctest: +SKIP
        array([0., 0., 1., 1.], dtype=float32)

    ``kind`` names the collective, ``shape``/``dtype`` the input it was
    prepared for, ``out_shape`` the result's shape and ``mpi_call`` the MPI
    function it issues (``"general"`` when every call takes the general path).
    """

    __slots__ = ("kind", "shape", "dtype", "out_shape", "mpi_call", "run")

    def __init__(self, kind: str, shape: tuple[int, ...], dtype: np.dtype, out_shape: tuple[int, ...] | None,
                 mpi_call: str, run: Callable[[Array], Array]) -> None:
        self.kind = kind
        self.shape = shape
        self.dtype = dtype
        self.out_shape = out_shape
        self.mpi_call = mpi_call
        self.run = run

    def __call__(self, x: Array) -> Array:
        return self.run(x)

    def __repr__(self) -> str:
        return (f"Prepared({self.kind}, shape={self.shape}, dtype={self.dtype}, out_shape={self.out_shape}, "
                f"mpi_call={self.mpi_call})")


def _shape_of(shape: Any) -> tuple[int, ...]:
    try:
        out = tuple(int(s) for s in shape)
    except TypeError:
        raise CollectiveError(f"expected a shape (a sequence of ints), got {shape!r}") from None
    if any(s < 0 for s in out):
        raise CollectiveError(f"expected a shape of non-negative ints, got {out}")
    return out


def _output(shape: tuple[int, ...], dtype: np.dtype) -> Callable[[], Array]:
    """A maker of output arrays: a recycling slot for large ones, else ``np.empty``."""
    take = allocator(shape, dtype)
    if take is not None:
        return take
    return partial(_empty, shape, dtype)  # called from C: no Python frame


def _unpacker(recv_shape: tuple[int, ...], shape: tuple[int, ...], k: int, axis: int,
              dtype: np.dtype) -> Callable[[Array], Array]:
    """Even blocks ``recv`` of ``(k,) + shape`` to the concatenation along ``axis`` (one copy)."""
    out_shape = with_length(shape, axis, shape[axis] * k)
    split = shape[:axis] + (k,) + shape[axis:]          # out viewed with the block index before ``axis``
    order = tuple(range(1, axis + 1)) + (0,) + tuple(range(axis + 1, len(shape) + 1))
    new = _output(out_shape, dtype)

    def unpack(recv: Array) -> Array:
        out = new()
        _copyto(out.reshape(split), recv.reshape(recv_shape).transpose(order))
        return out

    return unpack


def _even_pieces(shape: tuple[int, ...], k: int,
                 axis: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """``shape`` with ``axis`` cut in ``k`` even pieces, the transpose putting the piece first, one piece's shape."""
    split = shape[:axis] + (k, shape[axis] // k) + shape[axis + 1:]
    order = (axis,) + tuple(range(axis)) + tuple(range(axis + 1, len(split)))
    return split, order, with_length(shape, axis, shape[axis] // k)


def _packer(shape: tuple[int, ...], k: int, axis: int, dtype: np.dtype) -> Callable[[Array], Array]:
    """``x`` of ``shape`` to its ``k`` even pieces along ``axis`` laid out piece after piece (one copy)."""
    split, order, piece = _even_pieces(shape, k, axis)
    new = _output((k,) + piece, dtype)

    def pack(x: Array) -> Array:
        send = new()
        _copyto(send, x.reshape(split).transpose(order))
        return send

    return pack


def _pack_uneven(shape: tuple[int, ...], sizes: tuple[int, ...], axis: int,
                 dtype: np.dtype) -> Callable[[Array], Array]:
    """``x`` to its pieces of ``sizes`` along ``axis`` laid out piece after piece (one copy)."""
    lead = (slice(None),) * axis
    parts = []
    start = stop = 0
    for size in sizes:
        piece_shape = with_length(shape, axis, size)
        count = math.prod(piece_shape)
        parts.append((lead + (slice(stop, stop + size),), start, start + count, piece_shape))
        stop += size
        start += count
    new = _output((start,), dtype)

    def pack(x: Array) -> Array:
        flat = new()
        for index, a, b, piece_shape in parts:
            _copyto(flat[a:b].reshape(piece_shape), x[index])
        return flat

    return pack


def _pack_for(shape: tuple[int, ...], sizes: tuple[int, ...], axis: int,
              dtype: np.dtype) -> Callable[[Array], Array] | None:
    """``x`` to its pieces of ``sizes`` along ``axis`` laid out piece after piece (None: it already is)."""
    if is_leading_axis(shape, axis):
        return None
    if all_equal(sizes):
        return _packer(shape, len(sizes), axis, dtype)
    return _pack_uneven(shape, sizes, axis, dtype)


def _start(backend: MpiBackend, groups: Groups, shape: Any, dtype: Any, kind: str) -> tuple[Any, int, tuple[int, ...], np.dtype]:
    """What every prepared collective starts from: the group's team, this rank, the shape and the checked dtype."""
    team = backend._team(groups)
    shape = _shape_of(shape)
    dtype = np.dtype(dtype)
    validate_dtype(dtype, kind)
    return team, backend.rank, shape, dtype


def _general(method: Callable[..., Any], rank: int, groups: Groups, **kwargs: Any) -> Callable[[Array], Array]:
    """The backend's general method on this rank's array: the path for inputs the prepared call does not fit."""

    def general(x: Array) -> Array:
        return method({rank: x}, groups, check=False, **kwargs)[rank]

    return general


def prepare_all_gather(
    backend: MpiBackend, groups: Groups, shape: Any, dtype: Any, *, axis: int = 0,
    in_sizes: Sizes | None = None,
) -> Prepared:
    """``all_gather`` of this rank's array of ``shape``/``dtype`` (see ``MpiBackend.all_gather``)."""
    kind = "all_gather"
    team, rank, shape, dtype = _start(backend, groups, shape, dtype, kind)
    axis, sizes = axis_and_sizes(kind, len(shape), team.group, axis, in_sizes, "in_sizes")
    if sizes is not None and sizes[team.position] != shape[axis]:
        raise CollectiveError(
            f"{kind}: in_sizes gives rank {rank} length {sizes[team.position]} along axis {axis}, "
            f"but its shape is {shape}"
        )
    general = _general(backend.all_gather, rank, groups, axis=axis, in_sizes=in_sizes)

    k = team.size
    if sizes is None:
        sizes = (shape[axis],) * k
    out_shape = with_length(shape, axis, sum(sizes))
    if not dtype.isnative:
        return Prepared(kind, shape, dtype, out_shape, "general", general)
    datatype = movement_datatype(dtype)
    comm = team.comm
    count = math.prod(shape)
    nbytes = count * dtype.itemsize
    leading = is_leading_axis(shape, axis)
    if all_equal(sizes):
        mpi_fn = comm.Allgather
        if leading:
            new = _output(out_shape, dtype)

            def run(x: Array) -> Array:
                if (x.__class__ is not _ndarray or x.shape != shape or x.dtype != dtype
                        or not x.flags.c_contiguous):
                    return general(x)
                if _active:
                    _record(kind, nbytes)
                recv = new()
                mpi_fn([x, count, datatype], [recv, count, datatype])
                return recv

            return Prepared(kind, shape, dtype, out_shape, "Allgather", run)
        recv_shape = (k,) + shape
        unpack = _unpacker(recv_shape, shape, k, axis, dtype)
        new = _output(recv_shape, dtype)

        def run(x: Array) -> Array:
            if (x.__class__ is not _ndarray or x.shape != shape or x.dtype != dtype
                    or not x.flags.c_contiguous):
                return general(x)
            if _active:
                _record(kind, nbytes)
            recv = new()
            mpi_fn([x, count, datatype], [recv, count, datatype])
            return unpack(recv)

        return Prepared(kind, shape, dtype, out_shape, "Allgather", run)
    mpi_fn = comm.Allgatherv
    shapes = [with_length(shape, axis, size) for size in sizes]
    counts = [math.prod(s) for s in shapes]
    displs = offsets(counts)
    total = sum(counts)
    if leading:
        new = _output(out_shape, dtype)
        finish: Callable[[Array], Array] = lambda recv: recv  # noqa: E731
    else:
        new = _output((total,), dtype)
        finish = lambda recv: concat_blocks(recv, shapes, axis, np)  # noqa: E731

    def run(x: Array) -> Array:
        if (x.__class__ is not _ndarray or x.shape != shape or x.dtype != dtype
                or not x.flags.c_contiguous):
            return general(x)
        if _active:
            _record(kind, nbytes)
        recv = new()
        mpi_fn([x, count, datatype], [recv, counts, displs, datatype])
        return finish(recv)

    return Prepared(kind, shape, dtype, out_shape, "Allgatherv", run)


def prepare_all_reduce(
    backend: MpiBackend, groups: Groups, shape: Any, dtype: Any, *, op: ReduceOp = "sum",
) -> Prepared:
    """``all_reduce`` of this rank's array of ``shape``/``dtype`` (see ``MpiBackend.all_reduce``)."""
    kind = "all_reduce"
    validate_reduce_op(op, kind)
    team, rank, shape, dtype = _start(backend, groups, shape, dtype, kind)
    validate_reduction(dtype, op, kind)
    general = _general(backend.all_reduce, rank, groups, op=op)

    if not dtype.isnative:
        return Prepared(kind, shape, dtype, shape, "general", general)
    datatype, mpi_op, runs_numpy = mpi_reduction(dtype, op)
    if runs_numpy:  # a user-defined op: the general path is as fast as it gets
        return Prepared(kind, shape, dtype, shape, "general", general)
    comm = team.comm
    mpi_fn = comm.Allreduce
    count = math.prod(shape)
    nbytes = count * dtype.itemsize
    new = _output(shape, dtype)
    k = team.size
    average = op == "avg"
    divide = np.true_divide

    def run(x: Array) -> Array:
        if (x.__class__ is not _ndarray or x.shape != shape or x.dtype != dtype
                or not x.flags.c_contiguous):
            return general(x)
        if _active:
            _record(kind, nbytes)
        recv = new()
        mpi_fn([x, count, datatype], [recv, count, datatype], mpi_op)
        if average:
            divide(recv, k, out=recv)
        return recv

    return Prepared(kind, shape, dtype, shape, "Allreduce", run)


def prepare_reduce_scatter(
    backend: MpiBackend, groups: Groups, shape: Any, dtype: Any, *, op: ReduceOp = "sum",
    axis: int = 0, out_sizes: Sizes | None = None,
) -> Prepared:
    """``reduce_scatter`` of this rank's array of ``shape``/``dtype`` (see ``MpiBackend.reduce_scatter``)."""
    kind = "reduce_scatter"
    validate_reduce_op(op, kind)
    team, rank, shape, dtype = _start(backend, groups, shape, dtype, kind)
    validate_reduction(dtype, op, kind)
    axis, sizes = axis_and_sizes(kind, len(shape), team.group, axis, out_sizes, "out_sizes")
    k = team.size
    if sizes is None:
        sizes = chunk_sizes(shape[axis], k)
    if sum(sizes) != shape[axis]:
        raise CollectiveError(f"{kind}: out_sizes {sizes} do not add up to length {shape[axis]} of axis {axis}")
    general = _general(backend.reduce_scatter, rank, groups, op=op, axis=axis, out_sizes=out_sizes)

    out_shape = with_length(shape, axis, sizes[team.position])
    if not dtype.isnative:
        return Prepared(kind, shape, dtype, out_shape, "general", general)
    datatype, mpi_op, runs_numpy = mpi_reduction(dtype, op)
    if runs_numpy:
        return Prepared(kind, shape, dtype, out_shape, "general", general)
    comm = team.comm
    nbytes = math.prod(shape) * dtype.itemsize
    recv_count = math.prod(out_shape)
    pack = _pack_for(shape, sizes, axis, dtype)
    new = _output(out_shape, dtype)
    average = op == "avg"
    divide = np.true_divide
    if all_equal(sizes):
        mpi_fn = comm.Reduce_scatter_block
        counts = None
        name = "Reduce_scatter_block"
    else:
        mpi_fn = comm.Reduce_scatter
        counts = piece_counts(shape, axis, sizes)
        name = "Reduce_scatter"

    def run(x: Array) -> Array:
        if (x.__class__ is not _ndarray or x.shape != shape or x.dtype != dtype
                or not x.flags.c_contiguous):
            return general(x)
        if _active:
            _record(kind, nbytes)
        send = x if pack is None else pack(x)
        recv = new()
        if counts is None:
            mpi_fn([send, datatype], [recv, recv_count, datatype], mpi_op)
        else:
            mpi_fn([send, datatype], [recv, recv_count, datatype], counts, mpi_op)
        if average:
            divide(recv, k, out=recv)
        return recv

    return Prepared(kind, shape, dtype, out_shape, name, run)


def prepare_all_to_all(
    backend: MpiBackend, groups: Groups, shape: Any, dtype: Any, *, split_axis: int, concat_axis: int,
    in_sizes: Sizes | None = None, out_sizes: Sizes | None = None,
) -> Prepared:
    """``all_to_all`` of this rank's array of ``shape``/``dtype`` (see ``MpiBackend.all_to_all``)."""
    kind = "all_to_all"
    team, rank, shape, dtype = _start(backend, groups, shape, dtype, kind)
    split_axis, concat_axis, split_sizes, concat_sizes = all_to_all_arguments(
        kind, len(shape), team.group, split_axis, concat_axis, in_sizes, out_sizes
    )
    k = team.size
    if split_sizes is None:
        split_sizes = chunk_sizes(shape[split_axis], k)
    if concat_sizes is None:
        concat_sizes = (shape[concat_axis],) * k
    if sum(split_sizes) != shape[split_axis]:
        raise CollectiveError(
            f"{kind}: out_sizes {split_sizes} do not add up to length {shape[split_axis]} of split_axis"
        )
    if concat_sizes[team.position] != shape[concat_axis]:
        raise CollectiveError(
            f"{kind}: in_sizes gives rank {rank} length {concat_sizes[team.position]} along the concat axis, "
            f"but its shape is {shape}"
        )
    general = _general(
        backend.all_to_all, rank, groups, split_axis=split_axis, concat_axis=concat_axis,
        in_sizes=in_sizes, out_sizes=out_sizes,
    )

    mine = with_length(shape, split_axis, split_sizes[team.position])
    out_shape = with_length(mine, concat_axis, sum(concat_sizes))
    if not dtype.isnative:
        return Prepared(kind, shape, dtype, out_shape, "general", general)
    datatype = movement_datatype(dtype)
    comm = team.comm
    nbytes = math.prod(shape) * dtype.itemsize
    even = all_equal(split_sizes) and all_equal(concat_sizes)
    # S(i) -> S(j) with i < j, the common case, packs in the same frame as the exchange (below).
    fused = even and is_leading_axis(out_shape, concat_axis) and not is_leading_axis(shape, split_axis)
    pack = None if fused else _pack_for(shape, split_sizes, split_axis, dtype)
    if is_leading_axis(out_shape, concat_axis):
        new = _output(out_shape, dtype)
        unpack: Callable[[Array], Array] | None = None
    else:
        new = _output((math.prod(out_shape),), dtype)
        if all_equal(concat_sizes):
            piece = with_length(mine, concat_axis, concat_sizes[0])
            unpack = _unpacker((k,) + piece, piece, k, concat_axis, dtype)
        else:
            shapes = [with_length(mine, concat_axis, n) for n in concat_sizes]
            unpack = lambda recv: concat_blocks(recv, shapes, concat_axis, np)  # noqa: E731
    if even:
        mpi_fn = comm.Alltoall
        send_count = math.prod(shape) // k
        recv_count = math.prod(out_shape) // k
        name = "Alltoall"

        def issue(send: Array, recv: Array) -> None:
            mpi_fn([send, send_count, datatype], [recv, recv_count, datatype])
    else:
        mpi_fn = comm.Alltoallv
        send_counts = piece_counts(shape, split_axis, split_sizes)
        send_displs = offsets(send_counts)
        recv_counts = piece_counts(mine, concat_axis, concat_sizes)
        recv_displs = offsets(recv_counts)
        name = "Alltoallv"

        def issue(send: Array, recv: Array) -> None:
            mpi_fn([send, send_counts, send_displs, datatype], [recv, recv_counts, recv_displs, datatype])

    if fused:  # pack, exchange, done: one frame
        split, order, send_piece = _even_pieces(shape, k, split_axis)
        new_send = _output((k,) + send_piece, dtype)

        def run(x: Array) -> Array:
            if (x.__class__ is not _ndarray or x.shape != shape or x.dtype != dtype
                    or not x.flags.c_contiguous):
                return general(x)
            if _active:
                _record(kind, nbytes)
            send = new_send()
            _copyto(send, x.reshape(split).transpose(order))
            recv = new()
            mpi_fn([send, send_count, datatype], [recv, recv_count, datatype])
            return recv

        return Prepared(kind, shape, dtype, out_shape, name, run)

    def run(x: Array) -> Array:
        if (x.__class__ is not _ndarray or x.shape != shape or x.dtype != dtype
                or not x.flags.c_contiguous):
            return general(x)
        if _active:
            _record(kind, nbytes)
        send = x if pack is None else pack(x)
        recv = new()
        issue(send, recv)
        return recv if unpack is None else unpack(recv)

    return Prepared(kind, shape, dtype, out_shape, name, run)
