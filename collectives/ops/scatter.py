"""``scatter``: the root's array is cut along an axis; member ``i`` gets piece ``i``.

Pieces follow ``out_sizes`` or, without it, ``torch.chunk``.  Every member
passes an array of the root's shape and dtype; only the root's data is read.
MPI: ``Scatter`` for equal pieces, else ``Scatterv``.

Example:
    >>> import numpy as np
    >>> Scatter.parse(1, (0, 1)).simulate([np.arange(3), np.arange(3)])[1].tolist()
    [2]
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import ClassVar, Optional

import numpy as np

from ..arguments import all_equal, check_root, group_sizes, normalize_axis, piece_counts, with_length
from ..chunks import offsets
from ..dtypes import movement_datatype
from ..packing import piece_packer
from ..types import Array, Group, Sizes
from .base import CollectiveOp, MpiCall, Shape, SplitsAlongAxis, pieces

__all__ = ["Scatter"]


@dataclass(frozen=True, slots=True)
class Scatter(SplitsAlongAxis, CollectiveOp):
    """Cut the root's array along ``axis`` (pieces ``sizes``; None: torch.chunk); member ``i`` gets piece ``i``."""

    root: int = 0
    axis: int = 0
    sizes: Optional[tuple[int, ...]] = None
    name: ClassVar[str] = "scatter"

    @classmethod
    def parse(
        cls, ndim: int, group: Group, *, root: int = 0, axis: int = 0, out_sizes: Optional[Sizes] = None
    ) -> Scatter:
        check_root(cls.name, root, (group,))
        axis = normalize_axis(axis, ndim, cls.name)
        return cls(int(root), axis, None if out_sizes is None else group_sizes(out_sizes, group, cls.name, "out_sizes"))

    def simulate(self, members: Sequence[Array]) -> list[Array]:
        source = members[self.root]
        return [piece.copy() for piece in pieces(source, self.axis, self.piece_sizes(source.shape, len(members)))]

    def mpi_call(self, position: int, size: int, shape: Shape, dtype: np.dtype, xp: ModuleType) -> MpiCall:
        datatype = movement_datatype(dtype)
        sizes = self.piece_sizes(shape, size)
        out = with_length(shape, self.axis, sizes[position])
        recv_spec = (math.prod(out), datatype)
        is_root = position == self.root
        pack = piece_packer(shape, sizes, self.axis, dtype, xp) if is_root else None
        if all_equal(sizes):
            send_spec = (math.prod(out), datatype) if is_root else None
            return MpiCall("Scatter", send_spec, out, recv_spec, (self.root,), pack=pack, reads_input=is_root)
        counts = piece_counts(shape, self.axis, sizes)
        send_spec = (counts, offsets(counts), datatype) if is_root else None
        return MpiCall("Scatterv", send_spec, out, recv_spec, (self.root,), pack=pack, reads_input=is_root)
