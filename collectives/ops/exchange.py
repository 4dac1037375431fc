"""``exchange``: member ``q`` sends ``send_counts[q][p]`` rows along an axis to member ``p`` (any counts).

Member ``q``'s array holds, along ``axis``, the rows for member 0, then those
for member 1, ... (``send_counts[q]`` gives their lengths, one per member);
member ``p`` gets the rows every member sent it, member 0's first.  Only the
rows named move, so a gather of selected rows or a reversed re-chunking costs
one ``Alltoallv`` whose counts are exactly the rows that change owner.
:mod:`~collectives.ops.rechunk` is the order-keeping special case whose counts
follow from two consecutive chunkings.  Counted as an ``all_to_all``.

Example:
    >>> import numpy as np
    >>> op = Exchange.parse(1, (0, 1), axis=0, send_counts={0: (0, 2), 1: (1, 0)})
    >>> [x.tolist() for x in op.simulate([np.array([5, 6]), np.array([7])])]
    [[7], [5, 6]]
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import ClassVar

import numpy as np

from ..agreement import MemberInfo, same_shapes_except
from ..arguments import normalize_axis, piece_counts, with_length
from ..chunks import offsets
from ..device import array_module
from ..dtypes import movement_datatype
from ..errors import CollectiveError
from ..packing import block_receiver, piece_packer
from ..types import Array, Group
from .base import CollectiveOp, MpiCall, Shape, masked_axes, pieces

__all__ = ["Exchange", "alltoallv_call"]


def alltoallv_call(moved: Sequence[Sequence[int]], position: int, shape: Shape, axis: int, dtype: np.dtype,
                   xp: ModuleType) -> MpiCall:
    """The ``Alltoallv`` of the member at ``position`` when member ``q`` sends ``moved[q][p]`` rows to member ``p``."""
    datatype = movement_datatype(dtype)
    send = list(moved[position])
    receive = [row[position] for row in moved]
    mine = with_length(shape, axis, sum(receive))
    recv_shape, finish = block_receiver([with_length(shape, axis, n) for n in receive], axis, dtype, xp)
    pack = piece_packer(shape, send, axis, dtype, xp)
    send_counts = piece_counts(shape, axis, send)
    recv_counts = piece_counts(mine, axis, receive)
    return MpiCall("Alltoallv", (send_counts, offsets(send_counts), datatype), recv_shape,
                   (recv_counts, offsets(recv_counts), datatype), pack=pack, finish=finish)


@dataclass(frozen=True, slots=True)
class Exchange(CollectiveOp):
    """Member ``q`` sends ``counts[q][p]`` consecutive rows along ``axis`` to member ``p``, in member order."""

    axis: int
    counts: tuple[tuple[int, ...], ...]
    name: ClassVar[str] = "exchange"
    counted_as: ClassVar[str] = "all_to_all"

    @classmethod
    def parse(cls, ndim: int, group: Group, *, axis: int, send_counts: Mapping[int, Sequence[int]]) -> Exchange:
        axis = normalize_axis(axis, ndim, cls.name)
        rows = []
        for rank in group:
            if rank not in send_counts:
                raise CollectiveError(f"{cls.name}: send_counts must give a row for every rank of group {group}, "
                                      f"got none for rank {rank}")
            row = tuple(send_counts[rank])
            if len(row) != len(group) or any(isinstance(n, bool) or not hasattr(n, "__index__") or n < 0
                                              for n in row):
                raise CollectiveError(f"{cls.name}: send_counts[{rank}] must be {len(group)} non-negative ints "
                                      f"(one per member of group {group}), got {row!r}")
            rows.append(tuple(int(n) for n in row))
        return cls(axis, tuple(rows))

    def check_local(self, rank: int, position: int, shape: Shape, dtype: np.dtype) -> None:
        if shape[self.axis] != sum(self.counts[position]):
            raise CollectiveError(f"{self.name}: send_counts give rank {rank} {sum(self.counts[position])} rows to "
                                  f"send along axis {self.axis}, but its shape is {shape}")

    def check_group(self, group: Group, infos: Sequence[MemberInfo]) -> None:
        same_shapes_except(self.name, group, infos, (self.axis,))

    def agreed_shape(self, shape: Shape) -> tuple[int, ...]:
        return masked_axes(shape, (self.axis,))

    def out_shape(self, shape: Shape, position: int, size: int) -> Shape:
        return with_length(shape, self.axis, sum(row[position] for row in self.counts))

    def simulate(self, members: Sequence[Array]) -> list[Array]:
        cut = [pieces(x, self.axis, row) for x, row in zip(members, self.counts)]
        concatenate = array_module(members[0]).concatenate
        return [concatenate([cut[q][p] for q in range(len(members))], axis=self.axis) for p in range(len(members))]

    def mpi_call(self, position: int, size: int, shape: Shape, dtype: np.dtype, xp: ModuleType) -> MpiCall:
        return alltoallv_call(self.counts, position, shape, self.axis, dtype, xp)
