"""``all_reduce``: every member gets the elementwise reduction of the group's arrays.

MPI: ``Allreduce`` with MPI's own op where it computes what NumPy would
(integer sum/max/min, float and complex sum, bool or/and) and a NumPy
user-defined op otherwise (see :mod:`collectives.reduce_ops`); ``avg`` is a sum
divided by the group size.

Example:
    >>> import numpy as np
    >>> AllReduce.parse(1, (0, 1), op="max").simulate([np.array([1, 4]), np.array([3, 2])])[0].tolist()
    [3, 4]
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import ClassVar

import numpy as np

from ..reduce_ops import combine_in_order, finisher, mpi_reduction, validate_reduce_op
from ..types import Array, Group, ReduceOp
from .base import CollectiveOp, CombinesElementwise, MpiCall, Shape, deal

__all__ = ["AllReduce"]


@dataclass(frozen=True, slots=True)
class AllReduce(CombinesElementwise, CollectiveOp):
    """Reduce the members' arrays with ``op`` (``sum``, ``avg``, ``max``, ``min``)."""

    op: str = "sum"
    name: ClassVar[str] = "all_reduce"
    reduces: ClassVar[bool] = True

    @classmethod
    def parse(cls, ndim: int, group: Group, *, op: ReduceOp = "sum") -> AllReduce:
        validate_reduce_op(op, cls.name)
        return cls(op)

    def simulate(self, members: Sequence[Array]) -> list[Array]:
        return deal(combine_in_order(members, self.op), len(members))

    def mpi_call(self, position: int, size: int, shape: Shape, dtype: np.dtype, xp: ModuleType) -> MpiCall:
        datatype, mpi_op, runs_numpy = mpi_reduction(dtype, self.op)
        count = math.prod(shape)
        return MpiCall(
            "Allreduce", (count, datatype), shape, (count, datatype), (mpi_op,),
            finish=finisher(self.op, size), host_only=runs_numpy, numpy_op=runs_numpy,
        )
