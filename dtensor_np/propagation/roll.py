"""Rolling a sharded dim (``np.roll`` semantics, as ``fftshift`` needs): one move of the rows that change owner.

Row ``g`` of the members' consecutive blocks lands at row ``(g + k) mod n`` of
the same blocks.  In the rolled positions, member ``q`` holds two ranges (the
rows that land before the end, then those that wrap to the start) and wants
its own block back: :func:`~.row_moves.move_ranges` sends each member exactly
the rows of others that land in its block (one ``Alltoallv``, counted as one
``all_to_all``: ``|k|`` rows a boundary for a small shift, a halo exchange)
and writes each new block once, from the rows kept and the rows received.

Example:
    >>> roll_ranges((2, 2, 1, 0), 2)  # n = 5 over 4 ranks, roll by 2: member 1's rows 2, 3 land at 4, then 0
    (((2, 4),), ((4, 5), (0, 1)), ((1, 2),), ())
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from collectives import offsets

from ..errors import ShardingError
from ..placements import Shard
from ..sharded import is_sharded
from ..spec import DTensorSpec
from .common import axis_index, single_sharding
from .registry import Decision, OpRule, register
from .row_moves import Span, move_ranges
from .signature_bind import named_arguments, no_more_arguments, pop_dtensor

__all__ = ["roll_ranges", "roll_shards", "roll_decision"]


def roll_ranges(sizes: Sequence[int], shift: int) -> tuple[tuple[Span, ...], ...]:
    """Each member's rows as the rolled positions they land on: the rows before the wrap, then those after it
    (the ranges that hold rows).

    ``sizes`` are the members' consecutive block lengths; ``shift`` is NumPy's
    (``y[i] = x[i - shift]``).
    """
    n = sum(sizes)
    k = shift % n if n else 0
    ranges = []
    for a, size in zip(offsets(sizes), sizes):
        kept = max(0, min(size, n - k - a))  # rows that land before the end
        spans = ((a + k, a + k + kept), (a + k + kept - n, a + size + k - n))
        ranges.append(tuple(span for span in spans if span[1] > span[0]))
    return tuple(ranges)


def roll_shards(backend: Any, shards: dict[int, Any], groups: tuple[tuple[int, ...], ...], axis: int, sizes: Sequence[int], shift: int) -> dict[int, Any]:
    """Roll ``axis`` of the rows the members of every group hold in order (block lengths ``sizes`` by position).

    Example:
        >>> import numpy as np
        >>> from collectives import SimulatedBackend
        >>> x = np.arange(5)
        >>> shards = {0: x[:2], 1: x[2:4], 2: x[4:], 3: x[5:]}
        >>> out = roll_shards(SimulatedBackend(4), shards, ((0, 1, 2, 3),), 0, (2, 2, 1, 0), 2)
        >>> np.concatenate([out[r] for r in range(4)]).tolist() == np.roll(x, 2).tolist()
        True
    """
    if len(sizes) == 1:  # one member holds every row
        return {r: np.roll(x, shift, axis) for r, x in shards.items()}
    n = sum(sizes)
    if n == 0 or shift % n == 0:
        return shards
    landing, blocks = roll_ranges(sizes, shift), tuple((a, a + s) for a, s in zip(offsets(sizes), sizes))
    have = {r: landing[i] for g in groups for i, r in enumerate(g)}
    want = {r: blocks[i] for g in groups for i, r in enumerate(g)}
    return move_ranges(backend, shards, groups, axis, have, want)


def roll_decision(spec: DTensorSpec, shifts: dict[int, int]) -> Decision:
    """``np.roll`` by ``shifts[d]`` along each dim ``d``: local rolls, and one ``exchange`` per sharded rolled dim.

    Example:
        >>> from dtensor_np import DeviceMesh, TensorMeta
        >>> spec = DTensorSpec(DeviceMesh((2,)), (Shard(0),), TensorMeta((5, 3), "f8"))
        >>> roll_decision(spec, {1: 1}).local is not None, roll_decision(spec, {0: 2}).program is not None
        (True, True)
    """
    spec = single_sharding(spec)
    shifts = {d: k for d, k in shifts.items() if spec.shape[d] and k % spec.shape[d]}
    sharded = {p.dim: m for m, p in enumerate(spec.placements)
               if isinstance(p, Shard) and p.dim in shifts and spec.mesh.shape[m] > 1}
    local_axes = tuple(d for d in shifts if d not in sharded)
    local_shifts = tuple(shifts[d] for d in local_axes)

    def roll_local(rank: int, x: Any) -> Any:
        return np.roll(x, local_shifts, local_axes) if local_axes else x.copy()

    if not sharded:
        return Decision((spec,), (spec,), roll_local)
    mesh = spec.mesh
    rolls = []
    for d, m in sharded.items():
        groups = mesh.groups((m,))
        sizes = tuple(spec.local_shape_of_rank(r)[d] for r in groups[0])
        rolls.append((groups, d, sizes, shifts[d]))

    def program(backend: Any, shards: dict[int, Any]) -> dict[int, Any]:
        for groups, d, sizes, shift in rolls:
            shards = roll_shards(backend, shards, groups, d, sizes, shift)
        return {r: roll_local(r, x) for r, x in shards.items()} if local_axes else shards

    return Decision((spec,), (spec,), None, program=program)


def _bind_roll(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Any]:
    given = named_arguments("numpy.roll", ("a", "shift", "axis"), args, kwargs)
    a = pop_dtensor("numpy.roll", given, "a")
    if "shift" not in given:
        raise TypeError("numpy.roll() missing required argument 'shift'")
    shift, axis = given.pop("shift"), given.pop("axis", None)
    no_more_arguments("numpy.roll", given)
    if is_sharded(shift) or is_sharded(axis):
        raise ShardingError("numpy.roll on DTensors: expected shift and axis as Python integers, got a DTensor")
    shift_t = tuple(int(k) for k in np.atleast_1d(shift))
    if axis is None:
        if len(shift_t) != 1:
            raise ValueError("numpy.roll: with axis=None, shift must be one integer")
        return (a,), (None, shift_t)
    axis_t = tuple(axis_index(d, a.ndim, "axis") for d in np.atleast_1d(axis))
    shift_b, axis_b = np.broadcast_arrays(np.array(shift_t), np.array(axis_t))
    return (a,), (tuple(int(d) for d in axis_b.ravel()), tuple(int(k) for k in shift_b.ravel()))


def _decide_roll(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    axes, shifts = key
    spec = specs[0]
    if axes is None:
        if spec.ndim <= 1:
            return roll_decision(spec, {0: shifts[0]} if spec.ndim else {})
        from .whole_axes import whole_decision  # a flat roll of an n-d array needs every dim whole

        return whole_decision(spec, tuple(range(spec.ndim)), [spec.tensor_meta],
                              lambda rank, x: np.roll(x, shifts[0]))
    total: dict[int, int] = {}
    for d, k in zip(axes, shifts):
        total[d] = total.get(d, 0) + k
    return roll_decision(spec, total)


register(np.roll)(OpRule("roll", _bind_roll, _decide_roll))
