"""Rolling a sharded dim (``np.roll`` semantics, as ``fftshift`` needs) with ``rechunk`` exchanges.

A roll keeps the cyclic order of the rows but moves where the sequence
starts; a ``rechunk`` keeps the order of the rows laid out in its group's
member order, so it never changes that start alone.  Two do: with members
``0..P-1`` holding blocks at offsets ``a``, the roll by ``k`` gives member
``j`` the rows from ``c = a[j] - k`` (mod n) on.  The first rechunk (group in
mesh order) moves one block boundary so that member ``j``'s block starts at
row ``c`` (the others' boundaries are clamped around it); the second runs in
the group rotated to start at member ``j``, where the rows laid out in member
order are exactly ``roll(x, -c)`` and the target blocks too.  Each is one
``Alltoallv`` moving only the rows that change owner (counted as
``all_to_all``); :func:`roll_plan` picks the ``j`` that moves the fewest rows.

Example:
    >>> roll_plan((2, 2, 1, 0), 2)       # n = 5 over 4 ranks, roll by 2: member 0 hands its rows on, then rotate at member 1
    (1, (0, 4, 1, 0))
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from collectives import offsets
from collectives.ops.rechunk import overlaps

from ..errors import ShardingError
from ..placements import Shard
from ..sharded import is_sharded
from ..spec import DTensorSpec
from .common import axis_index, single_sharding
from .registry import Decision, OpRule, register
from .signature_bind import named_arguments, no_more_arguments, pop_dtensor

__all__ = ["roll_plan", "roll_shards", "roll_decision"]


def _moved(before: Sequence[int], after: Sequence[int]) -> int:
    """Rows that change owner when ``before`` is rechunked into ``after``."""
    moved = overlaps(before, after)
    return sum(before) - sum(moved[i][i] for i in range(len(before)))


def roll_plan(sizes: Sequence[int], shift: int) -> Optional[tuple[int, tuple[int, ...]]]:
    """``(j, middle)``: rotate the group at member ``j`` after rechunking ``sizes`` into ``middle``; None: nothing moves.

    ``sizes`` are the members' consecutive block lengths (the same before
    and after the roll, at least two members); ``shift`` is NumPy's
    (``y[i] = x[i - shift]``).
    """
    sizes = tuple(sizes)
    n = sum(sizes)
    if n == 0 or shift % n == 0:
        return None
    starts = offsets(sizes) + [n]
    best: Optional[tuple[int, int, tuple[int, ...]]] = None
    for j in range(1, len(sizes)):
        c = (starts[j] - shift) % n
        for cut in (c, n) if c == 0 else (c,):
            bounds = [min(a, cut) for a in starts[:j]] + [cut] + [max(a, cut) for a in starts[j + 1 : -1]] + [n]
            middle = tuple(b - a for a, b in zip(bounds, bounds[1:]))
            cost = _moved(sizes, middle) + _moved(middle[j:] + middle[:j], sizes[j:] + sizes[:j])
            if best is None or cost < best[0]:
                best = (cost, j, middle)
    assert best is not None
    return best[1], best[2]


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
    plan = roll_plan(sizes, shift)
    if plan is None:
        return shards
    j, middle = plan
    by_rank = lambda lengths: {r: lengths[i] for g in groups for i, r in enumerate(g)}  # noqa: E731
    if tuple(middle) != tuple(sizes):
        shards = backend.rechunk(shards, groups, axis=axis, in_sizes=by_rank(sizes), out_sizes=by_rank(middle))
    rotated = tuple(g[j:] + g[:j] for g in groups)
    return backend.rechunk(shards, rotated, axis=axis, in_sizes=by_rank(middle), out_sizes=by_rank(sizes))


def roll_decision(spec: DTensorSpec, shifts: dict[int, int]) -> Decision:
    """``np.roll`` by ``shifts[d]`` along each dim ``d``: local rolls, and two ``rechunk`` s per sharded rolled dim.

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
