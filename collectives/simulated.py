"""``SimulatedBackend``: every rank of the world lives in this process.

Collectives are computed directly with NumPy (or CuPy, for CuPy arrays) on
the full set of shards.  Reductions use one fixed order per group (members in
group order), so every member gets bitwise the same result, each in its own
new array.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from .agreement import MemberInfo, verify
from .counting import record
from .device import array_module, is_device_array
from .dtypes import dtype_code, validate_dtype
from .errors import CollectiveError
from .handles import Handle
from .layout import (
    GroupLayout,
    check_distinct_axes,
    check_root,
    chunk_sizes,
    describe_keys,
    group_layout,
    group_sizes,
    normalize_axis,
    offsets,
)
from .protocol import MAX_DESCRIPTOR_LENGTH, Array, Backend, Groups, ReduceOp, Shards, Sizes
from .reduce_ops import combine_in_order, validate_reduce_op, validate_reduction

__all__ = ["SimulatedBackend"]


class SimulatedBackend(Backend):
    """All ranks of a ``world_size``-rank world in one process (the ``Backend`` protocol).

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

    # -- collectives ---------------------------------------------------------

    def all_gather(
        self, shards: Shards, groups: Groups, *, axis: int = 0,
        in_sizes: Sizes | None = None, check: bool = True,
    ) -> dict[int, Array]:
        """Concatenate every member's array along ``axis`` in group order.

        Example:
            >>> SimulatedBackend(2).all_gather({0: np.zeros(1), 1: np.ones(1)}, ((0, 1),))[0]
            array([0., 1.])
        """
        kind = "all_gather"
        layout, arrays = self._inputs(kind, shards, groups)
        plans = []
        for group, members in _by_group(layout, arrays):
            member_axis, _ = _group_axis_and_sizes(kind, group, members, axis, in_sizes, "in_sizes", check)
            plans.append((group, members, member_axis))
        record(kind, _largest(arrays))
        result: dict[int, Array] = {}
        for group, members, member_axis in plans:
            xp = array_module(members[0])
            _deal(result, group, xp.concatenate(members, axis=member_axis))
        return result

    def all_reduce(
        self, shards: Shards, groups: Groups, *, op: ReduceOp = "sum", check: bool = True
    ) -> dict[int, Array]:
        """Give every member the reduction (``op``) of its group's arrays.

        Example:
            >>> SimulatedBackend(2).all_reduce({0: np.ones(1), 1: np.ones(1)}, ((0, 1),), op="avg")[1]
            array([1.])
        """
        kind = "all_reduce"
        layout, arrays = self._inputs(kind, shards, groups, op)
        plans = []
        for group, members in _by_group(layout, arrays):
            if check:
                verify(kind, group, _infos(group, members))
            plans.append((group, members))
        record(kind, _largest(arrays))
        result: dict[int, Array] = {}
        for group, members in plans:
            _deal(result, group, combine_in_order(members, op))
        return result

    def reduce_scatter(
        self, shards: Shards, groups: Groups, *, op: ReduceOp = "sum", axis: int = 0,
        out_sizes: Sizes | None = None, check: bool = True,
    ) -> dict[int, Array]:
        """Reduce the group's arrays; member ``i`` gets piece ``i`` along ``axis``.

        Pieces follow ``out_sizes`` or, without it, ``torch.chunk`` (``chunk_sizes``).

        Example:
            >>> x = np.arange(3.0)
            >>> SimulatedBackend(2).reduce_scatter({0: x, 1: x}, ((0, 1),))[1]
            array([4.])
        """
        kind = "reduce_scatter"
        layout, arrays = self._inputs(kind, shards, groups, op)
        plans = []
        for group, members in _by_group(layout, arrays):
            member_axis, sizes = _group_axis_and_sizes(kind, group, members, axis, out_sizes, "out_sizes", check)
            if sizes is None:
                sizes = chunk_sizes(members[0].shape[member_axis], len(group))
            plans.append((group, members, member_axis, sizes))
        record(kind, _largest(arrays))
        result: dict[int, Array] = {}
        for group, members, member_axis, sizes in plans:
            reduced = combine_in_order(members, op)
            for rank, piece in zip(group, _pieces(reduced, member_axis, sizes)):
                result[rank] = piece.copy()
        return result

    def all_to_all(
        self, shards: Shards, groups: Groups, *, split_axis: int, concat_axis: int,
        in_sizes: Sizes | None = None, out_sizes: Sizes | None = None, check: bool = True,
    ) -> dict[int, Array]:
        """Member ``q`` sends piece ``p`` along ``split_axis`` to member ``p``, who
        concatenates what it receives along ``concat_axis`` in group order.

        Example:
            >>> shards = {r: np.full((1, 2), r) for r in range(2)}  # Shard(0) -> Shard(1)
            >>> SimulatedBackend(2).all_to_all(shards, ((0, 1),), split_axis=1, concat_axis=0)[1]
            array([[0],
                   [1]])
        """
        kind = "all_to_all"
        layout, arrays = self._inputs(kind, shards, groups)
        plans = []
        for group, members in _by_group(layout, arrays):
            split = _common_axis(kind, members, split_axis, "split_axis")
            concat = _common_axis(kind, members, concat_axis, "concat_axis")
            check_distinct_axes(kind, split, concat)
            sizes_in = None if in_sizes is None else group_sizes(in_sizes, group, kind, "in_sizes")
            sizes_out = None if out_sizes is None else group_sizes(out_sizes, group, kind, "out_sizes")
            if check:
                verify(kind, group, _infos(group, members), split_axis=split, concat_axis=concat,
                       in_sizes=sizes_in, out_sizes=sizes_out)
            plans.append((group, members, split, concat, sizes_out))
        record(kind, _largest(arrays))
        result: dict[int, Array] = {}
        for group, members, split, concat, sizes_out in plans:
            k = len(group)
            pieces = [
                _pieces(x, split, sizes_out or chunk_sizes(x.shape[split], k)) for x in members
            ]
            xp = array_module(members[0])
            for p, rank in enumerate(group):
                result[rank] = xp.concatenate([pieces[q][p] for q in range(k)], axis=concat)
        return result

    def broadcast(
        self, shards: Shards, groups: Groups, *, root: int = 0, check: bool = True
    ) -> dict[int, Array]:
        """Give every member a copy of the array of the member at index ``root``.

        Every member passes an array of the root's shape and dtype; only the
        root's is read (others may pass ``np.broadcast_to(np.empty((), dtype), shape)``).

        Example:
            >>> SimulatedBackend(2).broadcast({0: np.ones(2), 1: np.zeros(2)}, ((0, 1),), root=0)[1]
            array([1., 1.])
        """
        kind = "broadcast"
        layout, arrays = self._inputs(kind, shards, groups)
        check_root(kind, root, layout.groups)
        if check:
            for group, members in _by_group(layout, arrays):
                verify(kind, group, _infos(group, members))
        record(kind, _largest(arrays))
        result: dict[int, Array] = {}
        for group in layout.groups:
            source = arrays[group[root]]
            for rank in group:
                result[rank] = source.copy()
        return result

    def scatter(
        self, shards: Shards, groups: Groups, *, root: int = 0, axis: int = 0,
        out_sizes: Sizes | None = None, check: bool = True,
    ) -> dict[int, Array]:
        """Split the root's array along ``axis`` like ``reduce_scatter``; member ``i`` gets piece ``i``.

        Every member passes an array of the root's shape and dtype; only the root's is read.

        Example:
            >>> SimulatedBackend(2).scatter({0: np.arange(3), 1: np.arange(3)}, ((0, 1),))[1]
            array([2])
        """
        kind = "scatter"
        layout, arrays = self._inputs(kind, shards, groups)
        check_root(kind, root, layout.groups)
        plans = []
        for group, members in _by_group(layout, arrays):
            member_axis, sizes = _group_axis_and_sizes(kind, group, members, axis, out_sizes, "out_sizes", check)
            source = members[root]
            if sizes is None:
                sizes = chunk_sizes(source.shape[member_axis], len(group))
            plans.append((group, source, member_axis, sizes))
        record(kind, _largest(arrays))
        result: dict[int, Array] = {}
        for group, source, member_axis, sizes in plans:
            for rank, piece in zip(group, _pieces(source, member_axis, sizes)):
                result[rank] = piece.copy()
        return result

    def barrier(self) -> None:
        """Nothing to wait for: every rank is this process."""

    # -- asynchronous variants (computed when issued) --------------------------

    def iall_gather(
        self, shards: Shards, groups: Groups, *, axis: int = 0,
        in_sizes: Sizes | None = None, check: bool = True,
    ) -> Handle:
        """``all_gather``, returned through a ``Handle``."""
        return Handle.completed(
            self.all_gather(shards, groups, axis=axis, in_sizes=in_sizes, check=check)
        )

    def iall_reduce(
        self, shards: Shards, groups: Groups, *, op: ReduceOp = "sum", check: bool = True
    ) -> Handle:
        """``all_reduce``, returned through a ``Handle``."""
        return Handle.completed(self.all_reduce(shards, groups, op=op, check=check))

    def ireduce_scatter(
        self, shards: Shards, groups: Groups, *, op: ReduceOp = "sum", axis: int = 0,
        out_sizes: Sizes | None = None, check: bool = True,
    ) -> Handle:
        """``reduce_scatter``, returned through a ``Handle``."""
        return Handle.completed(
            self.reduce_scatter(shards, groups, op=op, axis=axis, out_sizes=out_sizes, check=check)
        )

    def iall_to_all(
        self, shards: Shards, groups: Groups, *, split_axis: int, concat_axis: int,
        in_sizes: Sizes | None = None, out_sizes: Sizes | None = None, check: bool = True,
    ) -> Handle:
        """``all_to_all``, returned through a ``Handle``."""
        return Handle.completed(
            self.all_to_all(
                shards, groups, split_axis=split_axis, concat_axis=concat_axis,
                in_sizes=in_sizes, out_sizes=out_sizes, check=check,
            )
        )

    # -- helpers for the higher layer -----------------------------------------

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

    # -- internals ------------------------------------------------------------

    def _check_keys(self, kind: str, per_rank: Mapping[int, object]) -> None:
        if len(per_rank) != self.world_size or any(r not in per_rank for r in self.ranks):
            raise CollectiveError(
                f"{kind}: expected shards for ranks {list(self.ranks)}, got ranks {describe_keys(per_rank)}"
            )

    def _inputs(
        self, kind: str, shards: Shards, groups: Groups, op: ReduceOp | None = None
    ) -> tuple[GroupLayout, list[Array]]:
        """The validated groups and every rank's array in rank order (reducible with ``op``, if given)."""
        if op is not None:
            validate_reduce_op(op, kind)
        layout = group_layout(groups, self.world_size)
        self._check_keys(kind, shards)
        arrays = []
        for rank in self.ranks:
            x = shards[rank]
            if type(x) is not np.ndarray and not is_device_array(x):
                x = np.asarray(x)
            validate_dtype(x.dtype, kind)
            arrays.append(x)
        if op is not None:
            for x in arrays:
                validate_reduction(x.dtype, op, kind)
        return layout, arrays


def _by_group(layout: GroupLayout, arrays: Sequence[Array]) -> Iterator[tuple[tuple[int, ...], list[Array]]]:
    """Each group with its members' arrays, in group order."""
    for group in layout.groups:
        yield group, [arrays[r] for r in group]


def _common_axis(kind: str, members: Sequence[Array], axis: int, name: str = "axis") -> int:
    normalized = [normalize_axis(axis, x.ndim, kind, name) for x in members]
    return normalized[0]


def _group_axis_and_sizes(
    kind: str, group: tuple[int, ...], members: Sequence[Array], axis: int,
    sizes: Sizes | None, name: str, check: bool,
) -> tuple[int, tuple[int, ...] | None]:
    """The group's ``axis`` (valid for every member) and the lengths ``sizes`` (argument ``name``) gives it.

    With ``check`` the members' arrays are verified against them too.
    """
    member_axis = _common_axis(kind, members, axis)
    picked = None if sizes is None else group_sizes(sizes, group, kind, name)
    if check:
        verify(kind, group, _infos(group, members), axis=member_axis, **{name: picked})
    return member_axis, picked


def _infos(group: tuple[int, ...], members: Sequence[Array]) -> list[MemberInfo]:
    return [MemberInfo(rank, dtype_code(x.dtype), tuple(x.shape)) for rank, x in zip(group, members)]


def _largest(arrays: Sequence[Array]) -> int:
    return max((x.nbytes for x in arrays), default=0)


def _deal(result: dict[int, Array], group: tuple[int, ...], value: Array) -> None:
    """Give ``value`` to the first member and a copy of it to every other."""
    result[group[0]] = value
    for rank in group[1:]:
        result[rank] = value.copy()


def _pieces(x: Array, axis: int, sizes: Sequence[int]) -> list[Array]:
    lead = (slice(None),) * axis
    return [x[lead + (slice(start, start + size),)] for start, size in zip(offsets(sizes), sizes)]
