"""Laying pieces along an axis out as contiguous blocks for MPI, and back; built once per shape.

MPI moves contiguous blocks.  Pieces along the leading axis already are; for
any other axis the sender copies its pieces once into a flat buffer (piece
after piece, each in C order) and the receiver puts the blocks it got together
along the axis with one copy.  Each function here works the layout out once,
for one shape, and returns the function that does the copy on every call (or
None when no copy is needed).  NumPy and CuPy arrays alike (``xp``).

Example:
    >>> import numpy as np
    >>> pack = piece_packer((2, 3), (2, 1), 1, np.dtype(int), np)
    >>> pack(np.arange(6).reshape(2, 3))
    array([0, 1, 3, 4, 2, 5])
    >>> recv_shape, finish = block_receiver([(2, 2), (2, 1)], 1, np.dtype(int), np)
    >>> recv_shape, finish(np.array([0, 1, 3, 4, 2, 5]))
    ((6,), array([[0, 1, 2],
           [3, 4, 5]]))
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from types import ModuleType
from typing import Optional

import numpy as np

from .arguments import all_equal, is_leading_axis, with_length
from .chunks import offsets
from .recycling import allocator
from .types import Array

__all__ = ["block_receiver", "new_array", "piece_packer"]

Shape = tuple[int, ...]


def new_array(shape: Shape, dtype: np.dtype, xp: ModuleType) -> Callable[[], Array]:
    """A maker of uninitialised arrays of one shape: a recycling slot for large NumPy ones, else ``xp.empty``."""
    if xp is np:
        take = allocator(shape, dtype)
        if take is not None:
            return take
    return partial(xp.empty, shape, dtype)  # called from C: no Python frame


def piece_packer(
    shape: Shape, sizes: Sequence[int], axis: int, dtype: np.dtype, xp: ModuleType
) -> Optional[Callable[[Array], Array]]:
    """``x`` of ``shape`` to its pieces of ``sizes`` along ``axis``, laid out piece after piece (one copy).

    None when they already are (``axis`` is leading, so ``x`` itself is the buffer).
    """
    if is_leading_axis(shape, axis):
        return None
    k = len(sizes)
    copyto = xp.copyto
    if all_equal(sizes):
        split = shape[:axis] + (k, sizes[0]) + shape[axis + 1:]
        order = (axis, *range(axis), *range(axis + 1, len(split)))
        new = new_array((k,) + with_length(shape, axis, sizes[0]), dtype, xp)

        def pack(x: Array) -> Array:
            send = new()
            copyto(send, x.reshape(split).transpose(order))
            return send

        return pack
    lead = (slice(None),) * axis
    parts = []
    start = stop = 0
    for size in sizes:
        piece_shape = with_length(shape, axis, size)
        count = math.prod(piece_shape)
        parts.append((lead + (slice(stop, stop + size),), start, start + count, piece_shape))
        stop += size
        start += count
    new = new_array((start,), dtype, xp)

    def pack_uneven(x: Array) -> Array:
        flat = new()
        for index, a, b, piece_shape in parts:
            copyto(flat[a:b].reshape(piece_shape), x[index])
        return flat

    return pack_uneven


def block_receiver(
    shapes: Sequence[Shape], axis: int, dtype: np.dtype, xp: ModuleType
) -> tuple[Shape, Optional[Callable[[Array], Array]]]:
    """The buffer MPI receives blocks of ``shapes`` into, end to end, and how it becomes their concatenation along ``axis``.

    Returns ``(recv_shape, finish)``: along a leading axis the buffer has the
    concatenated shape already and ``finish`` is None; otherwise it is flat and
    ``finish(recv)`` makes the concatenation (one transposing copy for equal
    blocks, ``concatenate`` for unequal ones).
    """
    lengths = [s[axis] for s in shapes]
    out_shape = with_length(shapes[0], axis, sum(lengths))
    if is_leading_axis(out_shape, axis):
        return out_shape, None
    k = len(shapes)
    if all_equal(lengths):
        block = shapes[0]
        recv_shape = (k,) + block
        split = block[:axis] + (k,) + block[axis:]  # out viewed with the block index before ``axis``
        order = (*range(1, axis + 1), 0, *range(axis + 1, len(block) + 1))
        new = new_array(out_shape, dtype, xp)
        copyto = xp.copyto

        def unpack(recv: Array) -> Array:
            out = new()
            copyto(out.reshape(split), recv.transpose(order))
            return out

        return recv_shape, unpack
    counts = [math.prod(s) for s in shapes]
    bounds = [(a, a + n, s) for a, n, s in zip(offsets(counts), counts, shapes)]
    concatenate = xp.concatenate

    def concat(recv: Array) -> Array:
        return concatenate([recv[a:b].reshape(s) for a, b, s in bounds], axis=axis)

    return (sum(counts),), concat
