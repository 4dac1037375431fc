"""``broadcast``: every member gets a copy of the array of the member at index ``root``.

Every member passes an array of the root's shape and dtype; only the root's
data is read.  MPI: ``Bcast`` into the root's copy on the root and into a new
array elsewhere.

Example:
    >>> import numpy as np
    >>> Broadcast.parse(1, (0, 1)).simulate([np.ones(2), np.zeros(2)])[1].tolist()
    [1.0, 1.0]
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import ClassVar

import numpy as np

from ..agreement import MemberInfo, same_shapes
from ..arguments import check_root
from ..dtypes import movement_datatype
from ..types import Array, Group
from .base import CollectiveOp, MpiCall, Shape

__all__ = ["Broadcast"]


def _copy(x: Array) -> Array:
    return x.copy()


@dataclass(frozen=True, slots=True)
class Broadcast(CollectiveOp):
    """Copy the array of the member at index ``root`` to every member."""

    root: int = 0
    name: ClassVar[str] = "broadcast"

    @classmethod
    def parse(cls, ndim: int, group: Group, *, root: int = 0) -> Broadcast:
        check_root(cls.name, root, (group,))
        return cls(int(root))

    def check_group(self, group: Group, infos: Sequence[MemberInfo]) -> None:
        same_shapes(self.name, group, infos)

    def out_shape(self, shape: Shape, position: int, size: int) -> Shape:
        return shape

    def simulate(self, members: Sequence[Array]) -> list[Array]:
        source = members[self.root]
        return [source.copy() for _ in members]

    def mpi_call(self, position: int, size: int, shape: Shape, dtype: np.dtype, xp: ModuleType) -> MpiCall:
        spec = (math.prod(shape), movement_datatype(dtype))
        is_root = position == self.root
        return MpiCall("Bcast", None, shape, spec, (self.root,), pack=_copy if is_root else None, in_place=True,
                       reads_input=is_root)
