"""``torch.chunk`` arithmetic: how a length splits into pieces, and where each piece starts.

Every piece gets ``ceil(length / pieces)`` elements except at the tail, which
may be smaller or empty (5 over 4 pieces gives 2, 2, 1, 0).  This is not
``numpy.array_split`` (which would give 2, 1, 1, 1).  The one owner of this
arithmetic: the collectives split pieces by it, and ``dtensor_np`` cuts shards
by it.

Example:
    >>> chunk_sizes(5, 4)
    (2, 2, 1, 0)
    >>> chunk_size_and_offset(5, 4, 2)
    (1, 4)
    >>> offsets((2, 0, 3))
    [0, 2, 2]
"""
from __future__ import annotations

from collections.abc import Sequence

from .caches import memo

__all__ = ["chunk_size_and_offset", "chunk_sizes", "offsets"]


@memo(maxsize=4096, name="collectives.chunk_sizes")
def chunk_sizes(length: int, pieces: int) -> tuple[int, ...]:
    """The lengths of the ``pieces`` chunks of ``length`` elements.

    Example:
        >>> chunk_sizes(10, 4)
        (3, 3, 3, 1)
    """
    if pieces < 1:
        raise ValueError(f"expected at least one chunk, got {pieces}")
    step = -(-length // pieces)
    return tuple(max(0, min(step, length - i * step)) for i in range(pieces))


def chunk_size_and_offset(length: int, pieces: int, index: int) -> tuple[int, int]:
    """Length and start of chunk ``index`` of ``pieces`` chunks of ``length`` elements.

    Example:
        >>> chunk_size_and_offset(10, 4, 3)
        (1, 9)
    """
    step = -(-length // pieces)
    start = min(length, index * step)
    return max(0, min(step, length - start)), start


def offsets(sizes: Sequence[int]) -> list[int]:
    """Where each piece starts when pieces of ``sizes`` are laid end to end.

    Example:
        >>> offsets((3, 3, 1))
        [0, 3, 6]
    """
    starts = [0] * len(sizes)
    total = 0
    for i, size in enumerate(sizes):
        starts[i] = total
        total += size
    return starts
