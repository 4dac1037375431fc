"""``scatter_blocks``: the root's array is cut into rectangular blocks; member ``i`` gets block ``i``.

Each member's block is given by its offset and shape (any layout: a mesh's
``Shard``/``Replicate`` placements give every rank its block this way, blocks
may repeat or be empty).  It is what ``distribute_tensor`` uses so that every
rank receives only its shard.  Every member passes an array of the root's
shape and dtype; only the root's data is read.  MPI: one ``Alltoallw`` in
which the root sends each member its block straight out of its array (an MPI
subarray datatype per block, no packing copy) and every member receives one
contiguous block; it is counted as a ``scatter``.

Example:
    >>> import numpy as np
    >>> op = ScatterBlocks.parse(2, (0, 1), root=0, blocks={0: ((0, 0), (2, 1)), 1: ((0, 1), (2, 1))})
    >>> op.simulate([np.arange(4).reshape(2, 2), np.zeros((2, 2), int)])[1].tolist()
    [[1], [3]]
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import ClassVar

import numpy as np

from ..agreement import MemberInfo, same_shapes
from ..arguments import check_root
from ..dtypes import block_datatype, movement_datatype
from ..errors import CollectiveError
from ..types import Array, Group
from .base import CollectiveOp, MpiCall, Shape

__all__ = ["ScatterBlocks"]

Block = tuple[tuple[int, ...], tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class ScatterBlocks(CollectiveOp):
    """Member ``i`` gets ``blocks[i]`` (offset, shape) of the array of the member at index ``root``."""

    root: int
    blocks: tuple[Block, ...]
    name: ClassVar[str] = "scatter_blocks"
    counted_as: ClassVar[str] = "scatter"

    @classmethod
    def parse(cls, ndim: int, group: Group, *, root: int = 0, blocks: Mapping[int, Block]) -> ScatterBlocks:
        check_root(cls.name, root, (group,))
        picked = []
        for rank in group:
            if rank not in blocks:
                raise CollectiveError(f"{cls.name}: blocks must give a block for every rank of group {group}, "
                                      f"got none for rank {rank}")
            offset, shape = (tuple(int(v) for v in part) for part in blocks[rank])
            if len(offset) != ndim or len(shape) != ndim or min(offset + shape, default=0) < 0:
                raise CollectiveError(f"{cls.name}: expected rank {rank}'s block as ({ndim} offsets, {ndim} "
                                      f"lengths) of non-negative ints, got {blocks[rank]!r}")
            picked.append((offset, shape))
        return cls(int(root), tuple(picked))

    def check_local(self, rank: int, position: int, shape: Shape, dtype: np.dtype) -> None:
        for member, (offset, block) in enumerate(self.blocks):
            if any(o + n > s for o, n, s in zip(offset, block, shape)):
                raise CollectiveError(
                    f"{self.name}: block {block} at {offset} of member {member} does not fit an array of shape {shape}"
                )

    def check_group(self, group: Group, infos: Sequence[MemberInfo]) -> None:
        same_shapes(self.name, group, infos)

    def out_shape(self, shape: Shape, position: int, size: int) -> Shape:
        return self.blocks[position][1]

    def simulate(self, members: Sequence[Array]) -> list[Array]:
        source = members[self.root]
        return [source[tuple(slice(o, o + n) for o, n in zip(offset, block))].copy() for offset, block in self.blocks]

    def mpi_call(self, position: int, size: int, shape: Shape, dtype: np.dtype, xp: ModuleType) -> MpiCall:
        element = movement_datatype(dtype)
        zeros = [0] * size
        mine = self.blocks[position][1]
        recv_counts = list(zeros)
        recv_counts[self.root] = math.prod(mine)
        recv_spec = (recv_counts, zeros, [element] * size)
        if position != self.root:  # sends nothing: zero counts from an empty buffer, its own array unread
            empty = xp.empty(0, dtype)
            return MpiCall("Alltoallw", (zeros, zeros, [element] * size), mine, recv_spec,
                           pack=lambda x: empty, host_only=True, reads_input=False)
        counts = [1 if math.prod(block) else 0 for _, block in self.blocks]
        types = [block_datatype(dtype, shape, block, offset) if math.prod(block) else element
                 for offset, block in self.blocks]
        return MpiCall("Alltoallw", (counts, zeros, types), mine, recv_spec, host_only=True)
