"""The types every backend shares: arrays, groups, reduce ops and the ``Backend`` protocol."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .handles import Handle

__all__ = ["MAX_DESCRIPTOR_LENGTH", "Array", "Backend", "Groups", "ReduceOp", "Shards", "Sizes"]

MAX_DESCRIPTOR_LENGTH = 16
"""The most ints ``gather_descriptors`` accepts per rank."""

Array = Any
"""A ``numpy.ndarray`` or a ``cupy.ndarray``."""

ReduceOp = Literal["sum", "avg", "max", "min"]
"""How ``all_reduce`` and ``reduce_scatter`` combine the members' arrays."""

Groups = tuple[tuple[int, ...], ...]
"""A partition of the world ranks; each group runs the collective on its own.

A rank's position inside its group is its index in the collective, e.g. mesh
``(2, 2)`` dim 0 gives ``((0, 2), (1, 3))``.
"""

Shards = Mapping[int, Array]
"""World rank -> that rank's array (all ranks when simulated, this rank under MPI)."""

Sizes = Mapping[int, int]
"""World rank -> a length along the collective's axis."""


@runtime_checkable
class Backend(Protocol):
    """What the higher layer calls; ``SimulatedBackend`` and ``MpiBackend`` implement it.

    Every op takes per-rank shards and returns a new ``dict`` with the same
    keys; every result is a new C-contiguous array.

    Example:
        >>> import numpy as np
        >>> from collectives import SimulatedBackend
        >>> backend = SimulatedBackend(2)
        >>> out = backend.all_gather({0: np.zeros(2), 1: np.ones(1)}, ((0, 1),),
        ...                          in_sizes={0: 2, 1: 1})
        >>> out[1]
        array([0., 0., 1.])
    """

    name: str
    world_size: int
    ranks: tuple[int, ...]

    def all_gather(
        self, shards: Shards, groups: Groups, *, axis: int = 0,
        in_sizes: Sizes | None = None, check: bool = True,
    ) -> dict[int, Array]:
        """Concatenate every member's array along ``axis`` in group order."""
        ...

    def all_reduce(
        self, shards: Shards, groups: Groups, *, op: ReduceOp = "sum", check: bool = True
    ) -> dict[int, Array]:
        """Give every member the elementwise reduction of the group's arrays."""
        ...

    def reduce_scatter(
        self, shards: Shards, groups: Groups, *, op: ReduceOp = "sum", axis: int = 0,
        out_sizes: Sizes | None = None, check: bool = True,
    ) -> dict[int, Array]:
        """Reduce the group's arrays and give member ``i`` piece ``i`` along ``axis``."""
        ...

    def all_to_all(
        self, shards: Shards, groups: Groups, *, split_axis: int, concat_axis: int,
        in_sizes: Sizes | None = None, out_sizes: Sizes | None = None, check: bool = True,
    ) -> dict[int, Array]:
        """Split along ``split_axis``, exchange, concatenate along ``concat_axis``."""
        ...

    def broadcast(
        self, shards: Shards, groups: Groups, *, root: int = 0, check: bool = True
    ) -> dict[int, Array]:
        """Give every member a copy of the array of the member at index ``root``."""
        ...

    def scatter(
        self, shards: Shards, groups: Groups, *, root: int = 0, axis: int = 0,
        out_sizes: Sizes | None = None, check: bool = True,
    ) -> dict[int, Array]:
        """Split the root's array along ``axis``; member ``i`` gets piece ``i``."""
        ...

    def barrier(self) -> None:
        """Wait until every rank of the world has arrived."""
        ...

    def iall_gather(
        self, shards: Shards, groups: Groups, *, axis: int = 0,
        in_sizes: Sizes | None = None, check: bool = True,
    ) -> Handle:
        """Start ``all_gather``; ``.wait()`` on the handle returns its result."""
        ...

    def iall_reduce(
        self, shards: Shards, groups: Groups, *, op: ReduceOp = "sum", check: bool = True
    ) -> Handle:
        """Start ``all_reduce``; ``.wait()`` on the handle returns its result."""
        ...

    def ireduce_scatter(
        self, shards: Shards, groups: Groups, *, op: ReduceOp = "sum", axis: int = 0,
        out_sizes: Sizes | None = None, check: bool = True,
    ) -> Handle:
        """Start ``reduce_scatter``; ``.wait()`` on the handle returns its result."""
        ...

    def iall_to_all(
        self, shards: Shards, groups: Groups, *, split_axis: int, concat_axis: int,
        in_sizes: Sizes | None = None, out_sizes: Sizes | None = None, check: bool = True,
    ) -> Handle:
        """Start ``all_to_all``; ``.wait()`` on the handle returns its result."""
        ...

    def all_true(self, flag_per_rank: Mapping[int, bool]) -> bool:
        """Logical AND of the flags of every world rank, the same on every rank."""
        ...

    def gather_descriptors(
        self, desc_per_rank: Mapping[int, Sequence[int]]
    ) -> dict[int, tuple[int, ...]]:
        """Every world rank's short int descriptor, known to every rank."""
        ...
