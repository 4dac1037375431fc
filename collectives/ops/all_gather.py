"""``all_gather``: every member gets the members' arrays concatenated along an axis, in group order.

MPI: ``Allgather`` when every piece has the same length, else ``Allgatherv``
with counts and displacements from the sizes (no padding); pieces along a
non-leading axis arrive as blocks and are put together with one copy.

Example:
    >>> import numpy as np
    >>> op = AllGather.parse(1, (0, 1))
    >>> op.simulate([np.zeros(1), np.ones(1)])[1].tolist()
    [0.0, 1.0]
    >>> op.mpi_call(0, 2, (3,), np.dtype("f8"), np).name
    'Allgather'
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import ClassVar, Optional

import numpy as np

from ..agreement import MemberInfo, lengths_match, same_shapes, same_shapes_except
from ..arguments import all_equal, group_sizes, normalize_axis, with_length
from ..chunks import offsets
from ..device import array_module
from ..dtypes import movement_datatype
from ..errors import CollectiveError
from ..packing import block_receiver
from ..types import Array, Group, Sizes
from .base import CollectiveOp, MpiCall, Shape, masked_axes, deal

__all__ = ["AllGather"]


@dataclass(frozen=True, slots=True)
class AllGather(CollectiveOp):
    """Concatenate the members' arrays along ``axis``; ``sizes``: every member's length along it (None: equal)."""

    axis: int
    sizes: Optional[tuple[int, ...]] = None
    name: ClassVar[str] = "all_gather"

    @classmethod
    def parse(cls, ndim: int, group: Group, *, axis: int = 0, in_sizes: Optional[Sizes] = None) -> AllGather:
        axis = normalize_axis(axis, ndim, cls.name)
        return cls(axis, None if in_sizes is None else group_sizes(in_sizes, group, cls.name, "in_sizes"))

    def check_local(self, rank: int, position: int, shape: Shape, dtype: np.dtype) -> None:
        if self.sizes is not None and self.sizes[position] != shape[self.axis]:
            raise CollectiveError(
                f"{self.name}: in_sizes gives rank {rank} length {self.sizes[position]} along axis "
                f"{self.axis}, but its shape is {shape}"
            )

    def check_group(self, group: Group, infos: Sequence[MemberInfo]) -> None:
        if self.sizes is None:
            same_shapes(self.name, group, infos)
        else:
            same_shapes_except(self.name, group, infos, (self.axis,))
            lengths_match(self.name, infos, self.axis, self.sizes, "in_sizes")

    def agreed_shape(self, shape: Shape) -> tuple[int, ...]:
        return masked_axes(shape, () if self.sizes is None else (self.axis,))

    def _sizes(self, shape: Shape, size: int) -> tuple[int, ...]:
        return self.sizes if self.sizes is not None else (shape[self.axis],) * size

    def out_shape(self, shape: Shape, position: int, size: int) -> Shape:
        return with_length(shape, self.axis, sum(self._sizes(shape, size)))

    def simulate(self, members: Sequence[Array]) -> list[Array]:
        return deal(array_module(members[0]).concatenate(members, axis=self.axis), len(members))

    def mpi_call(self, position: int, size: int, shape: Shape, dtype: np.dtype, xp: ModuleType) -> MpiCall:
        datatype = movement_datatype(dtype)
        count = math.prod(shape)
        sizes = self._sizes(shape, size)
        shapes = [with_length(shape, self.axis, n) for n in sizes]
        recv_shape, finish = block_receiver(shapes, self.axis, dtype, xp)
        if all_equal(sizes):
            return MpiCall("Allgather", (count, datatype), recv_shape, (count, datatype), finish=finish)
        counts = [math.prod(s) for s in shapes]
        return MpiCall("Allgatherv", (count, datatype), recv_shape, (counts, offsets(counts), datatype), finish=finish)
