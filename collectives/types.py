"""The types every part of ``collectives`` shares: arrays, groups, per-rank shards and sizes, reduce ops.

Example:
    >>> REDUCE_OPS
    ('sum', 'avg', 'max', 'min')
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["Array", "Group", "Groups", "REDUCE_OPS", "ReduceOp", "Shapes", "Shards", "Sizes"]

Array = Any
"""A ``numpy.ndarray`` or a ``cupy.ndarray``."""

ReduceOp = Literal["sum", "avg", "max", "min"]
"""How ``all_reduce`` and ``reduce_scatter`` combine the members' arrays."""

REDUCE_OPS: tuple[str, ...] = ("sum", "avg", "max", "min")
"""Every ``ReduceOp``, in a fixed order."""

Group = tuple[int, ...]
"""The world ranks of one group; a rank's position in it is its index in the collective."""

Groups = tuple[Group, ...]
"""A partition of the world ranks; each group runs the collective on its own.

A rank's position inside its group is its index in the collective, e.g. mesh
``(2, 2)`` dim 0 gives ``((0, 2), (1, 3))``.
"""

Shards = Mapping[int, Array]
"""World rank -> that rank's array (all ranks when simulated, this rank under MPI)."""

Sizes = Mapping[int, int]
"""World rank -> a length along the collective's axis."""

Shapes = Mapping[int, tuple[int, ...]]
"""World rank -> the shape of that rank's input (the ranks this process holds)."""
