"""``SimulatedBackend``: every rank of the world lives in this process.

A collective is computed directly with NumPy (or CuPy, for CuPy arrays) on
the full set of shards, by its op's ``simulate`` (see :mod:`collectives.ops`).
Reductions use one fixed order per group (members in group order), so every
member gets bitwise the same result, each in its own new array.  ``prepare``
validates everything once (every member's shape is known here), so a
prepared call only moves data.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .agreement import MemberInfo, verify
from .arguments import describe_keys, group_layout
from .backend import MAX_DESCRIPTOR_LENGTH, Backend, Prepared
from .counting import record
from .device import is_device_array
from .dtypes import dtype_code, validate_dtype
from .errors import CollectiveError
from .handles import Handle
from .ops import OPS
from .types import Array, Groups, Shards

__all__ = ["SimulatedBackend"]


class SimulatedBackend(Backend):
    """All ranks of a ``world_size``-rank world in one process (see :class:`~collectives.Backend`).

    Example:
        >>> import numpy as np
        >>> backend = SimulatedBackend(4)
        >>> shards = {r: np.full(2, float(r)) for r in range(4)}
        >>> backend.all_reduce(shards, ((0, 2), (1, 3)))[3]
        array([4., 4.])
    """

    name = "simulated"

    def __init__(self, world_size: int) -> None:
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise CollectiveError(f"world_size must be a positive int, got {world_size!r}")
        self.world_size = world_size
        self.ranks = tuple(range(world_size))

    def __repr__(self) -> str:
        return f"SimulatedBackend({self.world_size})"

    # -- the one path ------------------------------------------------------------------

    def _prepare(self, kind: str, groups: Groups, shapes: dict[int, tuple[int, ...]], dtype: np.dtype,
                 arguments: Mapping[str, Any]) -> Prepared:
        cls = OPS.get(kind)
        if cls is None:
            raise CollectiveError(f"unknown collective {kind!r}: expected one of {tuple(OPS)}")
        layout = group_layout(groups, self.world_size)
        self._check_keys(kind, shapes)
        validate_dtype(dtype, kind)
        shapes = {r: tuple(int(n) for n in shapes[r]) for r in self.ranks}
        code = dtype_code(dtype)
        plans = []
        out_shapes = {}
        for group in layout.groups:
            op = cls.parse(len(shapes[group[0]]), group, **arguments)
            for position, rank in enumerate(group):
                if len(shapes[rank]) != len(shapes[group[0]]):
                    raise CollectiveError(
                        f"{kind}: ndim mismatch in group {group}: expected {len(shapes[group[0]])} dims "
                        f"(rank {group[0]}), got shape {shapes[rank]} on rank {rank}"
                    )
                op.check_local(rank, position, shapes[rank], dtype)
            op.check_group(group, [MemberInfo(r, code, shapes[r]) for r in group])
            for position, rank in enumerate(group):
                out_shapes[rank] = op.out_shape(shapes[rank], position, len(group))
            plans.append((group, op.simulate))
        nbytes = max(math.prod(s) for s in shapes.values()) * dtype.itemsize
        counted_as = cls.counted_as

        def run(shards: Shards) -> dict[int, Array]:
            record(counted_as, nbytes)
            result: dict[int, Array] = {}
            for group, simulate in plans:
                result.update(zip(group, simulate([shards[r] for r in group])))
            return result

        def start(shards: Shards) -> Handle:
            return Handle.completed(run(shards))

        return Prepared(kind, dtype, shapes, out_shapes, "simulated", run, start)

    def _checked(self, kind: str, shards: Shards, groups: Groups, check: bool,
                 arguments: Mapping[str, Any]) -> tuple[Prepared, dict[int, Array]]:
        self._check_keys(kind, shards)
        arrays = {}
        for rank in self.ranks:
            x = shards[rank]
            if type(x) is not np.ndarray and not is_device_array(x):
                x = np.asarray(x)
            validate_dtype(x.dtype, kind)
            arrays[rank] = x
        for group in group_layout(groups, self.world_size).groups:  # the members' dtypes, as MPI's check= says it
            verify(kind, group, [MemberInfo(r, dtype_code(arrays[r].dtype), tuple(arrays[r].shape)) for r in group])
        first = arrays[self.ranks[0]]
        return self.prepare(kind, groups, {r: x.shape for r, x in arrays.items()}, first.dtype, **arguments), arrays

    # -- helpers for the higher layer -----------------------------------------

    def barrier(self) -> None:
        """Nothing to wait for: every rank is this process."""

    def all_true(self, flag_per_rank: Mapping[int, bool]) -> bool:
        """Logical AND over every rank's flag.

        Example:
            >>> SimulatedBackend(2).all_true({0: True, 1: False})
            False
        """
        self._check_keys("all_true", flag_per_rank)
        return all(bool(flag_per_rank[r]) for r in self.ranks)

    def gather_descriptors(
        self, desc_per_rank: Mapping[int, Sequence[int]]
    ) -> dict[int, tuple[int, ...]]:
        """Every rank's descriptor (at most ``MAX_DESCRIPTOR_LENGTH`` ints), known to every rank.

        Example:
            >>> SimulatedBackend(2).gather_descriptors({0: (3, 4), 1: (5,)})
            {0: (3, 4), 1: (5,)}
        """
        self._check_keys("gather_descriptors", desc_per_rank)
        result = {}
        for rank in self.ranks:
            descriptor = tuple(int(v) for v in desc_per_rank[rank])
            if len(descriptor) > MAX_DESCRIPTOR_LENGTH:
                raise CollectiveError(
                    f"gather_descriptors: expected at most {MAX_DESCRIPTOR_LENGTH} ints per rank, "
                    f"got {len(descriptor)} from rank {rank}"
                )
            result[rank] = descriptor
        return result

    def _check_keys(self, kind: str, per_rank: Mapping[int, object]) -> None:
        if len(per_rank) != self.world_size or any(r not in per_rank for r in self.ranks):
            raise CollectiveError(
                f"{kind}: expected shards for ranks {list(self.ranks)}, got ranks {describe_keys(per_rank)}"
            )
