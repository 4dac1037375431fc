"""``reduce_scatter``: reduce the group's arrays, member ``i`` keeps piece ``i`` along an axis.

Pieces follow ``out_sizes`` or, without it, ``torch.chunk``.  MPI:
``Reduce_scatter_block`` for equal pieces, else ``Reduce_scatter`` with
per-member counts; pieces along a non-leading axis are packed with one copy.

Example:
    >>> import numpy as np
    >>> x = np.arange(3.0)
    >>> ReduceScatter.parse(1, (0, 1)).simulate([x, x])[1].tolist()
    [4.0]
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import ClassVar, Optional

import numpy as np

from ..arguments import all_equal, group_sizes, normalize_axis, piece_counts, with_length
from ..packing import piece_packer
from ..reduce_ops import combine_in_order, finisher, mpi_reduction, validate_reduce_op, validate_reduction
from ..types import Array, Group, ReduceOp, Sizes
from .base import CollectiveOp, MpiCall, Shape, SplitsAlongAxis, pieces

__all__ = ["ReduceScatter"]


@dataclass(frozen=True, slots=True)
class ReduceScatter(SplitsAlongAxis, CollectiveOp):
    """Reduce with ``op``, then member ``i`` keeps piece ``i`` along ``axis`` (``sizes``: every piece's length; None: torch.chunk)."""

    op: str
    axis: int
    sizes: Optional[tuple[int, ...]] = None
    name: ClassVar[str] = "reduce_scatter"
    reduces: ClassVar[bool] = True

    @classmethod
    def parse(
        cls, ndim: int, group: Group, *, op: ReduceOp = "sum", axis: int = 0, out_sizes: Optional[Sizes] = None
    ) -> ReduceScatter:
        validate_reduce_op(op, cls.name)
        axis = normalize_axis(axis, ndim, cls.name)
        return cls(op, axis, None if out_sizes is None else group_sizes(out_sizes, group, cls.name, "out_sizes"))

    def check_local(self, rank: int, position: int, shape: Shape, dtype: np.dtype) -> None:
        validate_reduction(dtype, self.op, self.name)
        SplitsAlongAxis.check_local(self, rank, position, shape, dtype)

    def simulate(self, members: Sequence[Array]) -> list[Array]:
        reduced = combine_in_order(members, self.op)
        return [piece.copy() for piece in pieces(reduced, self.axis, self.piece_sizes(reduced.shape, len(members)))]

    def mpi_call(self, position: int, size: int, shape: Shape, dtype: np.dtype, xp: ModuleType) -> MpiCall:
        datatype, mpi_op, runs_numpy = mpi_reduction(dtype, self.op)
        sizes = self.piece_sizes(shape, size)
        out = with_length(shape, self.axis, sizes[position])
        count = math.prod(out)
        pack = piece_packer(shape, sizes, self.axis, dtype, xp)
        finish = finisher(self.op, size)
        if all_equal(sizes):
            return MpiCall("Reduce_scatter_block", (datatype,), out, (count, datatype), (mpi_op,),
                           pack=pack, finish=finish, host_only=runs_numpy, numpy_op=runs_numpy)
        counts = piece_counts(shape, self.axis, sizes)
        return MpiCall("Reduce_scatter", (datatype,), out, (count, datatype), (counts, mpi_op),
                       pack=pack, finish=finish, host_only=runs_numpy, numpy_op=runs_numpy)
