"""``all_to_all``: member ``q`` sends piece ``p`` along one axis to member ``p``, who concatenates along another.

Pieces along ``split_axis`` follow ``out_sizes`` (or ``torch.chunk``); the
received pieces' lengths along ``concat_axis`` follow ``in_sizes`` (or are all
the member's own).  MPI: ``Alltoall`` when both are even, else ``Alltoallv``;
one packing copy before, one unpacking copy after, where the axes are not leading.

Example:
    >>> import numpy as np
    >>> shards = [np.full((1, 2), r) for r in range(2)]   # Shard(0) -> Shard(1)
    >>> AllToAll.parse(2, (0, 1), split_axis=1, concat_axis=0).simulate(shards)[1].tolist()
    [[0], [1]]
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import ClassVar, Optional

import numpy as np

from ..agreement import MemberInfo, lengths_match, same_lengths, same_shapes_except, sizes_cover
from ..arguments import all_equal, check_distinct_axes, group_sizes, normalize_axis, piece_counts, with_length
from ..chunks import chunk_sizes, offsets
from ..device import array_module
from ..dtypes import movement_datatype
from ..errors import CollectiveError
from ..packing import block_receiver, piece_packer
from ..types import Array, Group, Sizes
from .base import CollectiveOp, MpiCall, Shape, masked_axes, pieces

__all__ = ["AllToAll"]


@dataclass(frozen=True, slots=True)
class AllToAll(CollectiveOp):
    """Split along ``split_axis`` (pieces ``split_sizes``), exchange, concatenate along ``concat_axis`` (``concat_sizes``)."""

    split_axis: int
    concat_axis: int
    split_sizes: Optional[tuple[int, ...]] = None
    concat_sizes: Optional[tuple[int, ...]] = None
    name: ClassVar[str] = "all_to_all"

    @classmethod
    def parse(
        cls, ndim: int, group: Group, *, split_axis: int, concat_axis: int,
        in_sizes: Optional[Sizes] = None, out_sizes: Optional[Sizes] = None,
    ) -> AllToAll:
        split_axis = normalize_axis(split_axis, ndim, cls.name, "split_axis")
        concat_axis = normalize_axis(concat_axis, ndim, cls.name, "concat_axis")
        check_distinct_axes(cls.name, split_axis, concat_axis)
        return cls(
            split_axis, concat_axis,
            None if out_sizes is None else group_sizes(out_sizes, group, cls.name, "out_sizes"),
            None if in_sizes is None else group_sizes(in_sizes, group, cls.name, "in_sizes"),
        )

    def check_local(self, rank: int, position: int, shape: Shape, dtype: np.dtype) -> None:
        if self.split_sizes is not None and sum(self.split_sizes) != shape[self.split_axis]:
            raise CollectiveError(
                f"{self.name}: out_sizes {self.split_sizes} do not add up to length "
                f"{shape[self.split_axis]} of split_axis"
            )
        if self.concat_sizes is not None and self.concat_sizes[position] != shape[self.concat_axis]:
            raise CollectiveError(
                f"{self.name}: in_sizes gives rank {rank} length {self.concat_sizes[position]} along the "
                f"concat axis, but its shape is {shape}"
            )

    def check_group(self, group: Group, infos: Sequence[MemberInfo]) -> None:
        same_shapes_except(self.name, group, infos, (self.split_axis, self.concat_axis))
        if self.split_sizes is None:
            same_lengths(self.name, group, infos, self.split_axis, "split_axis")
        else:
            for info in infos:
                sizes_cover(self.name, group, self.split_sizes, info, self.split_axis)
        if self.concat_sizes is None:
            same_lengths(self.name, group, infos, self.concat_axis, "concat_axis")
        else:
            lengths_match(self.name, infos, self.concat_axis, self.concat_sizes, "in_sizes")

    def agreed_shape(self, shape: Shape) -> tuple[int, ...]:
        return masked_axes(shape, () if self.concat_sizes is None else (self.concat_axis,))

    def _sizes(self, shape: Shape, size: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        split = self.split_sizes if self.split_sizes is not None else chunk_sizes(shape[self.split_axis], size)
        concat = self.concat_sizes if self.concat_sizes is not None else (shape[self.concat_axis],) * size
        return split, concat

    def out_shape(self, shape: Shape, position: int, size: int) -> Shape:
        split, concat = self._sizes(shape, size)
        mine = with_length(shape, self.split_axis, split[position])
        return with_length(mine, self.concat_axis, sum(concat))

    def simulate(self, members: Sequence[Array]) -> list[Array]:
        k = len(members)
        cut = [pieces(x, self.split_axis, self._sizes(x.shape, k)[0]) for x in members]
        concatenate = array_module(members[0]).concatenate
        return [concatenate([cut[q][p] for q in range(k)], axis=self.concat_axis) for p in range(k)]

    def mpi_call(self, position: int, size: int, shape: Shape, dtype: np.dtype, xp: ModuleType) -> MpiCall:
        datatype = movement_datatype(dtype)
        split, concat = self._sizes(shape, size)
        mine = with_length(shape, self.split_axis, split[position])
        blocks = [with_length(mine, self.concat_axis, n) for n in concat]
        recv_shape, finish = block_receiver(blocks, self.concat_axis, dtype, xp)
        pack = piece_packer(shape, split, self.split_axis, dtype, xp)
        if all_equal(split) and all_equal(concat):
            send_count = math.prod(shape) // size
            recv_count = math.prod(blocks[0])
            return MpiCall("Alltoall", (send_count, datatype), recv_shape, (recv_count, datatype),
                           pack=pack, finish=finish)
        send_counts = piece_counts(shape, self.split_axis, split)
        recv_counts = piece_counts(mine, self.concat_axis, concat)
        return MpiCall(
            "Alltoallv", (send_counts, offsets(send_counts), datatype), recv_shape,
            (recv_counts, offsets(recv_counts), datatype), pack=pack, finish=finish,
        )
