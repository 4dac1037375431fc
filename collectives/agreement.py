"""``check=True``: do the members of a group agree on the call, dtype, shapes and sizes?

Each member is summarised by a ``MemberInfo`` (dtype, shape, whether its own
local validation failed, and a fingerprint of the call's arguments).  The
simulated backend builds these directly; the MPI backend encodes its own as a
fixed-size int64 descriptor and learns the others' with ONE ``Allgather`` over
the group.  ``verify`` then runs the same checks on every member, so every
member raises the same error, before any data moves.  The shape checks each
collective needs live with its op (``check_group`` in :mod:`collectives.ops`),
built from the helpers here.
"""
from __future__ import annotations

from collections.abc import Sequence
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from .dtypes import dtype_name
from .errors import CollectiveError

__all__ = [
    "DESCRIPTOR_LENGTH",
    "MemberInfo",
    "call_fingerprint",
    "decode",
    "encode",
    "lengths_match",
    "same_lengths",
    "same_shapes",
    "same_shapes_except",
    "sizes_cover",
    "status_of",
    "verify",
]

OK, TYPE_ERROR, VALUE_ERROR = 0, 1, 2
_MAX_NDIM = 64  # NumPy's limit
_HEADER = 4  # status, call fingerprint, dtype code, ndim
DESCRIPTOR_LENGTH = _HEADER + _MAX_NDIM


@dataclass(frozen=True)
class MemberInfo:
    """What the other members need to know about one member's input."""

    rank: int
    dtype: int
    shape: tuple[int, ...]
    status: int = OK
    call: int = 0


def status_of(error: BaseException | None) -> int:
    """The status a member reports for its own local validation error."""
    if error is None:
        return OK
    return TYPE_ERROR if isinstance(error, TypeError) else VALUE_ERROR


def call_fingerprint(*arguments: Any) -> int:
    """A fingerprint of a call's arguments that is equal on every process making the same call.

    ``arguments`` are values whose ``repr`` is the same in every process (ints,
    strings, tuples, the frozen :class:`~collectives.ops.CollectiveOp` of the
    call), so unlike ``hash`` of a string it does not depend on ``PYTHONHASHSEED``.

    Example:
        >>> call_fingerprint("all_reduce", ((0, 1),), "sum") == call_fingerprint("all_reduce", ((0, 1),), "sum")
        True
    """
    return zlib.crc32(repr(arguments).encode())


def encode(info: MemberInfo) -> np.ndarray:
    """``info`` as a fixed-size int64 descriptor."""
    row = np.zeros(DESCRIPTOR_LENGTH, np.int64)
    row[:_HEADER] = (info.status, info.call, info.dtype, len(info.shape))
    row[_HEADER:_HEADER + len(info.shape)] = info.shape
    return row


def decode(row: np.ndarray, rank: int) -> MemberInfo:
    """The ``MemberInfo`` of ``rank`` from its descriptor."""
    status, call, dtype, ndim = (int(v) for v in row[:_HEADER])
    shape = tuple(int(v) for v in row[_HEADER:_HEADER + ndim])
    return MemberInfo(rank, dtype, shape, status, call)


def verify(kind: str, group: tuple[int, ...], infos: Sequence[MemberInfo], op: Any = None) -> None:
    """Raise the error every member of ``group`` must raise, if any (``infos`` in group order).

    A member whose own validation failed, members making different calls, or
    members with different dtypes raise here; then ``op`` (the call's
    :class:`~collectives.ops.CollectiveOp`, when known) checks the members'
    shapes against each other with ``check_group``.
    """
    _raise_for_failed_members(kind, infos)
    first = infos[0]
    for info in infos[1:]:
        if info.call != first.call:
            raise CollectiveError(
                f"{kind}: every member of group {group} must make the same call, but ranks "
                f"{first.rank} and {info.rank} passed different groups, op, axes, root or sizes"
            )
    for info in infos[1:]:
        if info.dtype != first.dtype:
            raise CollectiveError(
                f"{kind}: dtype mismatch in group {group}: expected {dtype_name(first.dtype)} "
                f"(rank {first.rank}) on every member, got {dtype_name(info.dtype)} on rank {info.rank}"
            )
    if op is not None:
        op.check_group(group, infos)


def _raise_for_failed_members(kind: str, infos: Sequence[MemberInfo]) -> None:
    for info in infos:
        if info.status == TYPE_ERROR:
            raise TypeError(
                f"{kind}: rank {info.rank} refused its array of dtype "
                f"{dtype_name(info.dtype)} (see the TypeError raised there)"
            )
        if info.status != OK:
            raise CollectiveError(
                f"{kind}: rank {info.rank} rejected its arguments (shards, axis or sizes); "
                "see the error raised there"
            )


def same_shapes(kind: str, group: tuple[int, ...], infos: Sequence[MemberInfo]) -> None:
    """Raise unless every member has the first member's shape."""
    first = infos[0]
    for info in infos[1:]:
        if info.shape != first.shape:
            raise CollectiveError(
                f"{kind}: shape mismatch in group {group}: expected {first.shape} "
                f"(rank {first.rank}) on every member, got {info.shape} on rank {info.rank}"
            )


def same_shapes_except(
    kind: str, group: tuple[int, ...], infos: Sequence[MemberInfo], axes: tuple[int, ...]
) -> None:
    """Raise unless the members' shapes have one ndim and agree outside ``axes``."""
    first = infos[0]
    for info in infos[1:]:
        if len(info.shape) != len(first.shape):
            raise CollectiveError(
                f"{kind}: ndim mismatch in group {group}: expected {len(first.shape)} dims "
                f"(rank {first.rank}), got shape {info.shape} on rank {info.rank}"
            )
    masked = lambda shape: [None if d in axes else n for d, n in enumerate(shape)]  # noqa: E731
    for info in infos[1:]:
        if masked(info.shape) != masked(first.shape):
            raise CollectiveError(
                f"{kind}: shape mismatch in group {group}: expected shapes equal outside "
                f"axes {axes}, got {first.shape} on rank {first.rank} and {info.shape} on rank {info.rank}"
            )


def same_lengths(
    kind: str, group: tuple[int, ...], infos: Sequence[MemberInfo], axis: int, name: str
) -> None:
    """Raise unless every member has the same length along ``axis`` (argument ``name``)."""
    first = infos[0]
    for info in infos[1:]:
        if info.shape[axis] != first.shape[axis]:
            raise CollectiveError(
                f"{kind}: without explicit sizes every member of group {group} needs the same "
                f"length along {name} {axis}: expected {first.shape[axis]} (rank {first.rank}), "
                f"got {info.shape[axis]} on rank {info.rank}"
            )


def lengths_match(
    kind: str, infos: Sequence[MemberInfo], axis: int, sizes: tuple[int, ...], name: str
) -> None:
    """Raise unless member ``i`` has length ``sizes[i]`` along ``axis`` (argument ``name`` gave them)."""
    for info, size in zip(infos, sizes):
        if info.shape[axis] != size:
            raise CollectiveError(
                f"{kind}: {name} gives rank {info.rank} length {size} along axis {axis}, "
                f"but its array has shape {info.shape} (length {info.shape[axis]})"
            )


def sizes_cover(
    kind: str, group: tuple[int, ...], sizes: tuple[int, ...], info: MemberInfo, axis: int
) -> None:
    """Raise unless the pieces ``sizes`` add up to the member's length along ``axis``."""
    if sum(sizes) != info.shape[axis]:
        raise CollectiveError(
            f"{kind}: out_sizes {sizes} for group {group} must add up to the input length "
            f"{info.shape[axis]} along axis {axis} (rank {info.rank} has shape {info.shape}), "
            f"got {sum(sizes)}"
        )

