"""``rechunk``: the members' consecutive blocks along an axis, cut again into other consecutive blocks.

Member ``q`` holds ``in_sizes[q]`` consecutive rows (along ``axis``) of one
sequence laid out in member order; afterwards member ``p`` holds the rows
``out_sizes[p]`` says, in the same order.  Only the rows that change owner
move: member ``q`` sends member ``p`` the overlap of their two ranges, so a
slice of a sharded dim or a new chunking of it costs one ``Alltoallv`` with
mostly-zero counts, never a gather.  Counted as an ``all_to_all``.

Example:
    >>> import numpy as np
    >>> op = Rechunk.parse(1, (0, 1), axis=0, in_sizes={0: 3, 1: 1}, out_sizes={0: 2, 1: 2})
    >>> [x.tolist() for x in op.simulate([np.array([0, 1, 2]), np.array([3])])]
    [[0, 1], [2, 3]]
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import ClassVar

import numpy as np

from ..agreement import MemberInfo, lengths_match, same_shapes_except
from ..arguments import group_sizes, normalize_axis, with_length
from ..chunks import offsets
from ..device import array_module
from ..errors import CollectiveError
from ..types import Array, Group, Sizes
from .base import CollectiveOp, MpiCall, Shape, masked_axes, pieces
from .exchange import alltoallv_call

__all__ = ["Rechunk", "overlaps"]


def overlaps(in_sizes: Sequence[int], out_sizes: Sequence[int]) -> list[list[int]]:
    """``moved[q][p]``: how many rows member ``q`` sends member ``p`` (the overlap of their ranges).

    Example:
        >>> overlaps((3, 1), (2, 2))
        [[2, 1], [0, 1]]
    """
    starts_in, starts_out = offsets(in_sizes), offsets(out_sizes)
    return [[max(0, min(a + n, b + m) - max(a, b)) for b, m in zip(starts_out, out_sizes)]
            for a, n in zip(starts_in, in_sizes)]


@dataclass(frozen=True, slots=True)
class Rechunk(CollectiveOp):
    """Member ``q`` holds ``in_sizes[q]`` rows along ``axis`` before, ``out_sizes[q]`` after (consecutive, in order)."""

    axis: int
    in_sizes: tuple[int, ...]
    out_sizes: tuple[int, ...]
    name: ClassVar[str] = "rechunk"
    counted_as: ClassVar[str] = "all_to_all"

    @classmethod
    def parse(cls, ndim: int, group: Group, *, axis: int, in_sizes: Sizes, out_sizes: Sizes) -> Rechunk:
        axis = normalize_axis(axis, ndim, cls.name)
        before = group_sizes(in_sizes, group, cls.name, "in_sizes")
        after = group_sizes(out_sizes, group, cls.name, "out_sizes")
        if sum(before) != sum(after):
            raise CollectiveError(f"{cls.name}: in_sizes {before} and out_sizes {after} of group {group} must "
                                  f"add up to the same length, got {sum(before)} and {sum(after)}")
        return cls(axis, before, after)

    def check_local(self, rank: int, position: int, shape: Shape, dtype: np.dtype) -> None:
        if shape[self.axis] != self.in_sizes[position]:
            raise CollectiveError(f"{self.name}: in_sizes gives rank {rank} length {self.in_sizes[position]} "
                                  f"along axis {self.axis}, but its shape is {shape}")

    def check_group(self, group: Group, infos: Sequence[MemberInfo]) -> None:
        same_shapes_except(self.name, group, infos, (self.axis,))
        lengths_match(self.name, infos, self.axis, self.in_sizes, "in_sizes")

    def agreed_shape(self, shape: Shape) -> tuple[int, ...]:
        return masked_axes(shape, (self.axis,))

    def out_shape(self, shape: Shape, position: int, size: int) -> Shape:
        return with_length(shape, self.axis, self.out_sizes[position])

    def simulate(self, members: Sequence[Array]) -> list[Array]:
        whole = array_module(members[0]).concatenate(members, axis=self.axis)
        return [piece.copy() for piece in pieces(whole, self.axis, self.out_sizes)]

    def mpi_call(self, position: int, size: int, shape: Shape, dtype: np.dtype, xp: ModuleType) -> MpiCall:
        return alltoallv_call(overlaps(self.in_sizes, self.out_sizes), position, shape, self.axis, dtype, xp)
