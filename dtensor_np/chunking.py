"""``torch.chunk`` arithmetic: how one tensor dim splits over ``k`` ranks.

Every shard gets ``ceil(n / k)`` elements except at the tail, which may be
smaller or empty (n=5, k=4 gives 2, 2, 1, 0).  This is not
``numpy.array_split`` (which would give 2, 1, 1, 1).

Example:
    >>> chunk_sizes(5, 4)
    (2, 2, 1, 0)
    >>> chunk_size_and_offset(5, 4, 2)
    (1, 4)
"""

from __future__ import annotations

from functools import lru_cache

__all__ = ["chunk_sizes", "chunk_size_and_offset"]


@lru_cache(maxsize=4096)
def chunk_sizes(n: int, k: int) -> tuple[int, ...]:
    """The sizes of the ``k`` chunks of a dim of size ``n``."""
    if k < 1:
        raise ValueError(f"cannot split into {k} chunks")
    full = -(-n // k)
    return tuple(max(0, min(full, n - i * full)) for i in range(k))


def chunk_size_and_offset(n: int, k: int, i: int) -> tuple[int, int]:
    """Size and start offset of chunk ``i`` of ``k`` of a dim of size ``n``."""
    full = -(-n // k)
    start = min(n, i * full)
    return max(0, min(full, n - start)), start
