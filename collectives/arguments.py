"""A collective's arguments checked: groups that partition the world, axes, roots and piece sizes.

Everything here is pure and deterministic, so every rank that makes the same
call reaches the same verdict and raises together, before any message.  Both
backends and every op in :mod:`collectives.ops` validate through it.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .caches import memo
from .errors import CollectiveError
from .types import Groups

__all__ = [
    "GroupLayout",
    "all_equal",
    "check_distinct_axes",
    "check_root",
    "describe_keys",
    "group_layout",
    "group_sizes",
    "is_leading_axis",
    "normalize_axis",
    "piece_counts",
    "with_length",
]


@dataclass(frozen=True)
class GroupLayout:
    """A validated partition of the world into groups.

    ``group_index[r]`` is the index of rank ``r``'s group in ``groups`` (the
    ``Comm.Split`` colour) and ``position[r]`` its index inside that group.

    Example:
        >>> from collectives import group_layout
        >>> layout = group_layout(((0, 2), (1, 3)), 4)
        >>> layout.group_index, layout.position
        ((0, 1, 0, 1), (0, 0, 1, 1))
    """

    groups: Groups
    group_index: tuple[int, ...]
    position: tuple[int, ...]
    fingerprint: int

    def group_of(self, rank: int) -> tuple[int, ...]:
        """The group that ``rank`` belongs to."""
        return self.groups[self.group_index[rank]]


def group_layout(groups: Groups, world_size: int) -> GroupLayout:
    """Validate that ``groups`` partitions ``range(world_size)`` (cached).

    Example:
        >>> group_layout(((0, 2), (1, 3)), 4).position
        (0, 0, 1, 1)
    """
    try:
        return _cached_layout(groups, world_size)
    except TypeError:  # unhashable, e.g. lists: normalise, then validate
        return _cached_layout(_as_tuples(groups), world_size)


def _as_tuples(groups: Any) -> Groups:
    try:
        return tuple(tuple(group) for group in groups)
    except TypeError:
        raise CollectiveError(
            f"groups must be a tuple of tuples of world ranks, got {groups!r}"
        ) from None


@memo(maxsize=512, name="collectives.group_layouts")
def _cached_layout(groups: Groups, world_size: int) -> GroupLayout:
    if not isinstance(groups, tuple) or not all(isinstance(g, tuple) for g in groups):
        groups = _as_tuples(groups)
    expected = f"every rank 0..{world_size - 1} exactly once"
    group_index = [-1] * world_size
    position = [-1] * world_size
    for index, group in enumerate(groups):
        if not group:
            raise CollectiveError(f"groups must not contain an empty group: got {groups}")
        for pos, rank in enumerate(group):
            if isinstance(rank, bool) or not isinstance(rank, int):
                if not hasattr(rank, "__index__"):
                    raise CollectiveError(
                        f"groups must hold int world ranks, got {rank!r} in {groups}"
                    )
                rank = rank.__index__()
            if not 0 <= rank < world_size:
                raise CollectiveError(
                    f"groups must partition the world: expected {expected}, "
                    f"got rank {rank} in {groups}"
                )
            if group_index[rank] != -1:
                raise CollectiveError(
                    f"groups must partition the world: expected {expected}, "
                    f"got rank {rank} twice in {groups}"
                )
            group_index[rank] = index
            position[rank] = pos
    missing = [rank for rank in range(world_size) if group_index[rank] == -1]
    if missing:
        raise CollectiveError(
            f"groups must partition the world: expected {expected}, "
            f"got no group for ranks {missing} in {groups}"
        )
    groups = tuple(tuple(int(r) for r in group) for group in groups)
    return GroupLayout(groups, tuple(group_index), tuple(position), hash(groups))




def normalize_axis(axis: int, ndim: int, kind: str, name: str = "axis") -> int:
    """``axis`` as a non-negative index into an ``ndim``-dimensional array.

    Example:
        >>> normalize_axis(-1, 3, "all_gather")
        2
    """
    if not -ndim <= axis < ndim:
        raise CollectiveError(
            f"{kind}: {name} {axis} is out of range: expected -{ndim} <= {name} < {ndim} "
            f"for an array with {ndim} dimension(s)"
        )
    return axis + ndim if axis < 0 else axis


def group_sizes(sizes: Mapping[int, int], group: tuple[int, ...], kind: str, name: str) -> tuple[int, ...]:
    """The lengths ``sizes`` gives the members of ``group``, in group order.

    Example:
        >>> group_sizes({0: 3, 1: 0, 2: 1}, (2, 0), "all_gather", "in_sizes")
        (1, 3)
    """
    try:
        picked = tuple(sizes[rank] for rank in group)
    except KeyError:
        missing = [rank for rank in group if rank not in sizes]
        raise CollectiveError(
            f"{kind}: {name} must give a length for every rank of group {group}, "
            f"got none for ranks {missing}"
        ) from None
    for rank, size in zip(group, picked):
        if isinstance(size, bool) or not hasattr(size, "__index__") or size < 0:
            raise CollectiveError(
                f"{kind}: {name} must be non-negative ints, got {size!r} for rank {rank}"
            )
    return tuple(int(size) for size in picked)




def all_equal(sizes: Sequence[int]) -> bool:
    """True when every piece has the first one's length (so the even MPI call fits)."""
    return sizes.count(sizes[0]) == len(sizes)


def piece_counts(shape: tuple[int, ...], axis: int, sizes: Sequence[int]) -> list[int]:
    """Elements in each piece of ``sizes`` along ``axis`` of an array of ``shape``.

    Example:
        >>> piece_counts((2, 3, 4), 1, (2, 1))
        [16, 8]
    """
    per_unit = math.prod(shape[:axis]) * math.prod(shape[axis + 1:])
    return [size * per_unit for size in sizes]


def is_leading_axis(shape: tuple[int, ...], axis: int) -> bool:
    """True when consecutive pieces along ``axis`` are contiguous blocks of a C array."""
    return math.prod(shape[:axis]) <= 1


def with_length(shape: tuple[int, ...], axis: int, length: int) -> tuple[int, ...]:
    """``shape`` with its ``axis`` entry replaced by ``length``."""
    return shape[:axis] + (length,) + shape[axis + 1:]


def describe_keys(per_rank: Mapping[object, object]) -> list[object]:
    """The keys of a per-rank mapping, sorted when possible (for error messages)."""
    try:
        return sorted(per_rank)
    except TypeError:
        return list(per_rank)


def check_root(kind: str, root: int, groups: Groups) -> None:
    """Raise ``CollectiveError`` unless ``root`` indexes a member of every group."""
    if isinstance(root, bool) or not hasattr(root, "__index__"):
        raise CollectiveError(f"{kind}: root must be an int index within each group, got {root!r}")
    for group in groups:
        if not 0 <= root < len(group):
            raise CollectiveError(
                f"{kind}: root {root} is out of range for group {group}: "
                f"expected 0 <= root < {len(group)} (root is an index within the group)"
            )


def check_distinct_axes(kind: str, split_axis: int, concat_axis: int) -> None:
    """Raise ``CollectiveError`` when an all_to_all would split and concatenate along one axis."""
    if split_axis == concat_axis:
        raise CollectiveError(
            f"{kind}: expected split_axis != concat_axis, got both {split_axis}"
        )
