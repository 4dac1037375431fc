"""Moving selected rows between the ranks of groups: only the rows that change owner travel, in one ``Alltoallv``.

Two movements serve indexing (and its updates):

* :func:`move_ranges`: every member holds a range of positions of one
  sequence along an axis and must end up holding another range (a slice of a
  sharded dim: the part of its block the slice kept, then its ``torch.chunk``
  of the result).  A member sends each other member the overlap of its range
  with theirs and keeps its own overlap.  When the ranges keep their order
  (a positive step) this is one ``rechunk`` of the rows that leave; when they
  reverse it (a negative step) one ``exchange``.  Both are one ``Alltoallv``
  counted as an ``all_to_all``, and the bytes each rank passes are the rows it
  sends away.
* :func:`gather_rows`: rows named by flat coordinates (an integer-array
  index) go from the member that owns them to the member that must hold them
  (one ``exchange``), rows already in place do not move.

Every rank works the counts out from values it holds the same as every
other rank (ranges from specs, index arrays replicated), so all ranks make
the same call, and a movement in which nothing changes owner makes none.

Example:
    >>> import numpy as np
    >>> from collectives import SimulatedBackend
    >>> backend = SimulatedBackend(2)
    >>> shards = {0: np.array([4, 3]), 1: np.array([2, 1, 0])}     # positions 0-1 and 2-4 of 4,3,2,1,0
    >>> out = move_ranges(backend, shards, ((0, 1),), 0, {0: (0, 2), 1: (2, 5)}, {0: (0, 3), 1: (3, 5)})
    >>> out[0].tolist(), out[1].tolist()
    ([4, 3, 2], [1, 0])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence, Union

import numpy as np

from collectives import Groups, array_module, memo
from collectives.ops.rechunk import overlaps

__all__ = ["move_ranges", "gather_rows", "member_of", "width", "Ranges"]

Span = tuple[int, int]
Ranges = Mapping[int, Union[Span, tuple[Span, ...]]]
"""Every rank's positions: one ``(lo, hi)`` range, or ranges in the order its array holds them."""
Shards = dict[int, Any]


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    return (lo, hi) if lo < hi else (lo, lo)


def _take(x: Any, axis: int, lo: int, hi: int) -> Any:
    return x[(slice(None),) * axis + (slice(lo, hi),)]


@dataclass(frozen=True, eq=False, slots=True)
class _MovePlan:
    """What :func:`move_ranges` does for one (groups, have, want), worked out once.

    ``moves``: some row changes owner (one collective); ``kept``: no row moves
    and every rank's array is already its result.  ``sends[r]``: the local
    ``(lo, hi)`` pieces rank ``r`` sends, in member order; ``receives[r]``: its
    result's pieces in position order, each ``(True, lo, hi)`` (kept from its
    own array) or ``(False, start, stop)`` (from what arrived); ``prepared``:
    the backend's prepared calls, by (backend, shapes, dtype, axis).
    """

    moves: bool
    kept: bool
    sends: Mapping[int, tuple[tuple[int, int], ...]]
    receives: Mapping[int, tuple[tuple[bool, int, int], ...]]
    kind: str
    arguments: Mapping[str, Any]
    prepared: dict = field(default_factory=dict, compare=False)


def _spans(value: Any) -> tuple[tuple[int, int], ...]:
    """A rank's positions as ranges in its array's order: one ``(lo, hi)``, or a tuple of them."""
    if value and not isinstance(value[0], tuple):
        return (tuple(value),)
    return tuple(tuple(span) for span in value)


def _pieces(held: tuple[tuple[int, int], ...], wanted: tuple[tuple[int, int], ...]) -> list[tuple[int, int, int]]:
    """The positions ``held`` (ranges laid end to end in one array) that ``wanted`` names: ``(place in the wanted
    result, local lo, local hi)`` each, in the wanted order."""
    out, at = [], 0
    for w in wanted:
        local = 0
        for h in held:
            lo, hi = _overlap(h, w)
            if hi > lo:
                out.append((at + lo - w[0], local + lo - h[0], local + hi - h[0]))
            local += width(h)
        at += width(w)
    return out


@memo(maxsize=1024, name="dtensor_np.row_move_plans")
def _move_plan(groups: Groups, have_items: tuple, want_items: tuple) -> _MovePlan:
    have, want = dict(have_items), dict(want_items)
    moved, sends, receives = {}, {}, {}
    for g in groups:
        moved[g] = [[0 if q == p else sum(hi - lo for _, lo, hi in _pieces(have[a], want[b])) for p, b in enumerate(g)]
                    for q, a in enumerate(g)]
        for r in g:
            sends[r] = tuple((lo, hi) for b in g if b != r for _, lo, hi in _pieces(have[r], want[b]))
            placed, start = [], 0
            for a in g:
                for place, lo, hi in _pieces(have[a], want[r]):
                    if a == r:
                        placed.append((place, (True, lo, hi)))
                    else:
                        placed.append((place, (False, start, start + hi - lo)))
                        start += hi - lo
            placed.sort(key=lambda piece: piece[0])
            receives[r] = tuple(piece for _, piece in placed)
    moves = any(any(row) for rows in moved.values() for row in rows)
    kept = not moves and all(receives[r] in ((), ((True, 0, sum(map(width, have[r]))),)) for r in receives)
    kind, arguments = _call(groups, moved) if moves else ("", {})
    return _MovePlan(moves, kept, sends, receives, kind, arguments)


def move_ranges(backend: Any, shards: Mapping[int, Any], groups: Groups, axis: int, have: Ranges,
                want: Ranges) -> Shards:
    """Every rank's array holds positions ``have[r]`` of its group's sequence along ``axis``; return arrays holding ``want[r]``.

    ``have`` and ``want`` give every world rank's range (each group's ranges
    cover the same positions), or its ranges in the order its array holds (or
    must hold) them (a roll: the rows that wrap past the end); ``shards`` are
    the held ranks' arrays.  One ``rechunk`` (ranges in member order) or
    ``exchange`` (any other order) of the rows that change owner; none when no
    row does.  The results are new arrays, except where a rank already holds
    exactly what it wants.  The counts and the prepared call are worked out
    once per (groups, ranges).
    """
    plan = _move_plan(tuple(groups), tuple(sorted((r, _spans(v)) for r, v in have.items())),
                      tuple(sorted((r, _spans(v)) for r, v in want.items())))
    if plan.kept:
        return dict(shards)
    arrived: Shards = {}
    if plan.moves:
        send = {}
        for r, x in shards.items():
            parts = [_take(x, axis, lo, hi) for lo, hi in plan.sends[r]]
            send[r] = (array_module(x).concatenate(parts, axis=axis) if len(parts) > 1 else parts[0] if parts
                       else _take(x, axis, 0, 0))
        some = next(iter(shards.values()))
        shapes = tuple((r, s.shape) for r, s in send.items())
        key = (backend, shapes, some.dtype, axis)
        prepared = plan.prepared.get(key)
        if prepared is None:
            prepared = plan.prepared[key] = backend.prepare(plan.kind, groups, dict(shapes), some.dtype, axis=axis,
                                                            **plan.arguments)
        arrived = prepared.run(send)
    out = {}
    for r, x in shards.items():
        pieces = [_take(x, axis, lo, hi) if own else _take(arrived[r], axis, lo, hi)
                  for own, lo, hi in plan.receives[r]]
        if len(pieces) == 1 and pieces[0] is not x:
            out[r] = array_module(x).ascontiguousarray(pieces[0])
        elif pieces:
            out[r] = array_module(x).concatenate(pieces, axis=axis)
        else:
            out[r] = _take(x, axis, 0, 0).copy()
    return out


def width(span: tuple[int, int]) -> int:
    """How many positions a ``(lo, hi)`` range holds."""
    return span[1] - span[0]


def _shift(span: tuple[int, int], by: int) -> tuple[int, int]:
    return span[0] - by, span[1] - by


def _call(groups: Groups, moved: Mapping[tuple[int, ...], list[list[int]]]) -> tuple[str, dict[str, Any]]:
    """``rechunk`` when every group's counts are those of two consecutive cuttings, else ``exchange``."""
    in_sizes = {}
    out_sizes = {}
    consecutive = True
    for g, rows in moved.items():
        ins = [sum(row) for row in rows]
        outs = [sum(col) for col in zip(*rows)]
        consecutive = consecutive and overlaps(ins, outs) == rows
        in_sizes.update(zip(g, ins))
        out_sizes.update(zip(g, outs))
    if consecutive:
        return "rechunk", {"in_sizes": in_sizes, "out_sizes": out_sizes}
    return "exchange", {"send_counts": {r: tuple(rows[p]) for g, rows in moved.items() for p, r in enumerate(g)}}


def member_of(coordinates: Sequence[np.ndarray], blocks: Sequence[Sequence[tuple[int, int]]]) -> np.ndarray:
    """For every point (one array of coordinates per dim), the member whose box holds it.

    ``blocks[m][d]`` is member ``m``'s ``(start, size)`` along dim ``d``; the
    members' boxes tile the space (empty boxes allowed).

    Example:
        >>> member_of([np.array([0, 3, 4])], [[(0, 3)], [(3, 1)], [(4, 0)], [(4, 2)]]).tolist()
        [0, 1, 3]
    """
    n = len(coordinates[0]) if coordinates else 0
    if not blocks[0]:
        return np.zeros(n, np.intp)
    starts = [np.array(sorted({b[d][0] for b in blocks if b[d][1] > 0}), np.int64) for d in range(len(coordinates))]
    sizes = [len(s) for s in starts]
    table = np.full(int(np.prod(sizes)), -1, np.intp)
    for m, box in enumerate(blocks):
        if all(size > 0 for _, size in box):
            table[np.ravel_multi_index([int(np.searchsorted(s, start)) for s, (start, _) in zip(starts, box)],
                                       sizes)] = m
    if not n:
        return np.zeros(0, np.intp)
    labels = [np.searchsorted(s, c, side="right") - 1 for s, c in zip(starts, coordinates)]
    return table[np.ravel_multi_index(labels, sizes)]


def gather_rows(backend: Any, shards: Mapping[int, Any], groups: Groups, owner: np.ndarray, target: np.ndarray,
                take: Any) -> Shards:
    """Row ``j`` goes from member ``owner[j]`` to member ``target[j]``; each rank gets its rows in ``j`` order.

    ``take(rank, js)`` returns, from ``rank``'s array, the rows ``js`` (which it
    owns) stacked along axis 0.  Every group has the same owners and targets
    (positions within the group).  One ``exchange`` of the rows whose owner is
    not their target; none when there are no such rows.
    """
    k = len(groups[0])
    crossing = owner != target
    counts = np.zeros((k, k), np.int64)
    np.add.at(counts, (owner[crossing], target[crossing]), 1)
    group_of = {r: g for g in groups for r in g}
    order = np.lexsort((np.arange(len(owner)), target))  # by target, then j
    sends = {}
    local = {}
    for r in shards:
        me = group_of[r].index(r)
        mine = order[(owner[order] == me) & crossing[order]]
        sends[r] = take(r, mine)
        local[r] = take(r, np.nonzero((owner == me) & (target == me))[0])
    arrived = sends
    if counts.any():
        some = next(iter(sends.values()))
        send_counts = {r: tuple(int(n) for n in counts[g.index(r)]) for g in groups for r in g}
        prepared = backend.prepare("exchange", groups, {r: s.shape for r, s in sends.items()}, some.dtype, axis=0,
                                   send_counts=send_counts)
        arrived = prepared.run(sends)
    out = {}
    for r in shards:
        me = group_of[r].index(r)
        rows = np.nonzero(target == me)[0]  # in j order
        from_others = owner[rows] != me
        received = arrived[r] if counts.any() else local[r][:0]
        result = array_module(local[r]).empty((len(rows),) + tuple(local[r].shape[1:]), local[r].dtype)
        others = rows[from_others]
        result[np.nonzero(from_others)[0][np.argsort(owner[others], kind="stable")]] = received
        result[np.nonzero(~from_others)[0]] = local[r]
        out[r] = result
    return out
