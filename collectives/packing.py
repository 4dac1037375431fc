"""Laying pieces along an axis out as contiguous blocks for MPI, and back.

MPI moves contiguous blocks.  Pieces along the leading axis already are; for
any other axis the sender copies its pieces once into a flat buffer (piece
after piece, each in C order) and the receiver concatenates the blocks it got
along the axis once.  Works for NumPy and CuPy arrays alike.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from types import ModuleType

from .layout import is_leading_axis
from .protocol import Array

__all__ = ["concat_blocks", "pack_pieces"]


def pack_pieces(x: Array, axis: int, sizes: Sequence[int], xp: ModuleType) -> Array:
    """The pieces of the C-contiguous ``x`` along ``axis`` (lengths ``sizes``) as one flat buffer.

    No copy when ``axis`` is leading; otherwise exactly one.

    Example:
        >>> import numpy as np
        >>> pack_pieces(np.arange(6).reshape(2, 3), 1, (2, 1), np)
        array([0, 1, 3, 4, 2, 5])
    """
    shape = x.shape
    if is_leading_axis(shape, axis):
        return x.reshape(-1)
    k = len(sizes)
    size = sizes[0]
    if sizes.count(size) == k and size * k == shape[axis]:
        blocks = x.reshape(shape[:axis] + (k, size) + shape[axis + 1:])
        pieces_first = (axis, *range(axis), *range(axis + 1, blocks.ndim))
        return blocks.transpose(pieces_first).copy().reshape(-1)
    flat = xp.empty(x.size, x.dtype)
    start = stop = 0
    lead = (slice(None),) * axis
    for size in sizes:
        piece = x[lead + (slice(stop, stop + size),)]
        stop += size
        flat[start:start + piece.size].reshape(piece.shape)[...] = piece
        start += piece.size
    return flat


def concat_blocks(flat: Array, shapes: Sequence[tuple[int, ...]], axis: int, xp: ModuleType) -> Array:
    """Concatenate along ``axis`` the blocks of ``shapes`` laid end to end in ``flat``.

    Example:
        >>> import numpy as np
        >>> concat_blocks(np.array([0, 1, 3, 4, 2, 5]), [(2, 2), (2, 1)], 1, np)
        array([[0, 1, 2],
               [3, 4, 5]])
    """
    blocks = []
    start = 0
    for shape in shapes:
        count = math.prod(shape)
        blocks.append(flat[start:start + count].reshape(shape))
        start += count
    return xp.concatenate(blocks, axis=axis)
