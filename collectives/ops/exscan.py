"""``exscan``: an exclusive prefix reduction: member ``i`` gets the reduction of members ``0 .. i-1``.

Member 0 gets the op's identity (zeros for ``sum``; the dtype's lowest or
highest value for ``max`` and ``min``).  A distributed ``cumulative_sum``
needs exactly this: each rank scans its block, then adds the exclusive scan
of the blocks' totals.  MPI: ``Exscan`` (with MPI's op, or the NumPy
user-defined op where MPI's does not compute what NumPy would).

Example:
    >>> import numpy as np
    >>> [x.tolist() for x in ExScan.parse(1, (0, 1, 2)).simulate([np.array([1]), np.array([2]), np.array([3])])]
    [[0], [1], [3]]
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import ClassVar

import numpy as np

from ..device import array_module
from ..errors import CollectiveError
from ..reduce_ops import combine_in_order, mpi_reduction
from ..types import Array, Group
from .base import CollectiveOp, CombinesElementwise, MpiCall, Shape

__all__ = ["ExScan"]

_OPS = ("sum", "max", "min")


def identity(dtype: np.dtype, op: str) -> Array:
    """The value that leaves ``op`` unchanged (member 0's result)."""
    if op == "sum":
        return np.zeros((), dtype)
    if dtype.kind == "b":
        return np.array(op == "min")
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.array(info.min if op == "max" else info.max, dtype)
    return np.array(-np.inf if op == "max" else np.inf, dtype)


@dataclass(frozen=True, slots=True)
class ExScan(CombinesElementwise, CollectiveOp):
    """Member ``i`` gets the ``op`` reduction (``sum``, ``max``, ``min``) of members ``0 .. i-1``."""

    op: str = "sum"
    name: ClassVar[str] = "exscan"
    counted_as: ClassVar[str] = "scan"
    reduces: ClassVar[bool] = True

    @classmethod
    def parse(cls, ndim: int, group: Group, *, op: str = "sum") -> ExScan:
        if op not in _OPS:
            raise CollectiveError(f"{cls.name}: op must be one of {_OPS}, got {op!r}")
        return cls(op)

    def simulate(self, members: Sequence[Array]) -> list[Array]:
        first = members[0]
        xp = array_module(first)
        out = [xp.full(first.shape, identity(first.dtype, self.op), first.dtype)]
        for i in range(1, len(members)):
            out.append(combine_in_order(list(members[:i]), self.op))
        return out

    def mpi_call(self, position: int, size: int, shape: Shape, dtype: np.dtype, xp: ModuleType) -> MpiCall:
        datatype, mpi_op, runs_numpy = mpi_reduction(dtype, self.op)
        count = math.prod(shape)
        finish = None
        if position == 0:  # MPI leaves member 0's buffer undefined
            fill = identity(dtype, self.op)

            def finish(recv: Array) -> Array:
                recv[...] = fill
                return recv

        return MpiCall("Exscan", (count, datatype), shape, (count, datatype), (mpi_op,), finish=finish,
                       host_only=runs_numpy, numpy_op=runs_numpy)
