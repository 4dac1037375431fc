"""``partition``/``argpartition`` along a sharded axis that no other dim can take (a 1-d array): the
distributed selection of :mod:`.selection`, then one exchange of the elements that change owner; never a gather.

Along mesh dim ``m`` (the members of each group hold consecutive blocks of the axis; every other mesh dim
replicates the array), for every 1-d slice along the axis and every ``kth``:

1. every member sorts its block (stably) by the order keys of :func:`~.selection.order_keys` (NaN last, as
   NumPy sorts);
2. the ``kth`` smallest keys are found by :func:`~.selection.select_order_statistics` (an ``all_reduce`` of
   each slice's extremes, ``all_reduce`` rounds of 256 bucket counts, one ``all_gather`` of the few keys left);
3. one ``all_gather`` of every member's counts below and equal to each ``kth`` key tells every member where
   each of its elements goes: the ``kth`` elements (ties broken by position, as a stable sort) at the ``kth``
   positions, the smaller ones before, the larger ones after, each member's part of a segment after the
   previous members' parts;
4. one ``exchange`` (an ``Alltoallv``, counted as ``all_to_all``) moves the elements whose place is on another
   member, and only those (none when every element is in place).

The result is a valid partition, equal to NumPy's at the ``kth`` positions; inside each segment the order is
this algorithm's (NumPy leaves it undefined, and its own differs).  An array whose other dims are sharded too
(on other mesh dims), or whose values have no order keys (complex, datetime, strings), is made whole along the
axis instead (``whole_decision``: an ``all_gather``).

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> from dtensor_np.propagation.placing import partition_along
    >>> x = dt.distribute_tensor(np.array([9, 4, 7, 1, 8, 2, 6]), dt.DeviceMesh((3,)), [dt.Shard(0)])
    >>> with dt.comm_counter() as c:
    ...     y = partition_along(x, kth=(3,), axis=0).full_tensor()
    >>> int(y[3]), bool((y[:3] <= 6).all() and (y[4:] >= 6).all()), c.counts["all_to_all"]
    (6, True, 1)
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from collectives import array_module

from ..placements import Shard
from ..spec import DTensorSpec, TensorMeta
from .registry import Decision
from .selection import order_keys, select_order_statistics
from .whole_axes import whole_decision

__all__ = ["partition_decision", "ragged"]

Shards = dict[int, Any]


def ragged(rows: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(row, column)`` of every element of the pieces ``row, starts .. starts + lengths`` laid end to end.

    Example:
        >>> [a.tolist() for a in ragged(np.array([0, 2]), np.array([5, 1]), np.array([2, 3]))]
        [[0, 0, 2, 2, 2], [5, 6, 1, 2, 3]]
    """
    total = int(lengths.sum())
    ends = np.cumsum(lengths)
    shift = np.repeat(starts - (ends - lengths), lengths)
    return np.repeat(rows, lengths), shift + np.arange(total)


class _Plan:
    """Where every member's sorted elements go: segment ``c`` of the output holds positions ``start[c]`` on, each
    member's part after the previous members' (``bounds[q]``: member ``q``'s class boundaries in its sorted row)."""

    def __init__(self, kth: np.ndarray, below: np.ndarray, equal: np.ndarray, sizes: Sequence[int]) -> None:
        k, q, b = below.shape
        less = below.sum(axis=0)  # (Q, B)
        before = np.cumsum(equal, axis=0) - equal  # ties before each member
        offset = kth[:, None] - less[None] - before  # (k, Q, B): the kth element's place among member q's ties
        bound = below + np.clip(offset, 0, equal)
        has = ((offset >= 0) & (offset < equal)).astype(np.int64)
        bounds = np.zeros((k, 2 * q + 2, b), np.int64)
        bounds[:, 1:-1:2] = bound
        bounds[:, 2:-1:2] = bound + has
        bounds[:, -1] = np.array(sizes, np.int64)[:, None]
        self.bounds = bounds
        counts = np.diff(bounds, axis=1)  # (k, C, B)
        self.pre = np.cumsum(counts, axis=0) - counts
        self.start = np.concatenate([[0], np.repeat(kth, 2) + np.tile([0, 1], q)]).astype(np.int64)

    def pieces(self, q: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Member ``q``'s elements whose places are in ``[lo, hi)``: ``(row, first local index, first place,
        length)`` per piece, in (row, place) order."""
        bounds = self.bounds[q]
        first = self.start[:, None] + self.pre[q]  # (C, B)
        length = bounds[1:] - bounds[:-1]
        a = np.maximum(first, lo)
        n = np.clip(np.minimum(first + length, hi) - a, 0, None)
        local = bounds[:-1] + (a - first)
        rows = np.broadcast_to(np.arange(first.shape[1]), first.shape)
        return tuple(np.ascontiguousarray(v.T).reshape(-1) for v in (rows, local, a, n))  # type: ignore[return-value]


def partition_decision(spec: DTensorSpec, axis: int, m: int, kth: Sequence[int], arg: bool) -> Decision:
    """The decision of ``partition_along`` when ``axis`` is sharded on mesh dim ``m`` and no other dim can take it."""
    dtype = np.dtype(np.intp) if arg else spec.dtype
    func = np.argpartition if arg else np.partition
    mesh = spec.mesh
    if spec.dtype.kind not in "fiub" or any(isinstance(p, Shard) and d != m and mesh.shape[d] > 1
                                            for d, p in enumerate(spec.placements)):
        return whole_decision(spec, (axis,), [TensorMeta(spec.shape, dtype)], lambda rank, x: func(x, kth, axis=axis))
    n = spec.shape[axis]
    if n == 0 or math.prod(spec.shape) == 0:  # nothing to select (NumPy returns the empty array)
        return Decision((spec,), (DTensorSpec(mesh, spec.placements, TensorMeta(spec.shape, dtype)),),
                        lambda rank, x: func(x, kth, axis=axis))
    kth_sorted = np.unique(np.array([k % n if n else 0 for k in kth], np.int64))
    groups = mesh.groups((m,))
    members = groups[0]
    sizes = [spec.local_block(r)[0][axis] for r in members]
    starts = [spec.local_block(r)[1][axis] for r in members]
    out = DTensorSpec(mesh, spec.placements, TensorMeta(spec.shape, dtype))
    floating = spec.dtype.kind == "f"

    def program(backend: Any, shards: Shards) -> Shards:
        """The distributed selection of the ``kth`` keys, one ``all_gather`` of the counts, one ``exchange`` of
        the elements that change owner."""
        position = {r: g.index(r) for g in groups for r in g}
        module = {r: array_module(x) for r, x in shards.items()}
        rows, keys, moved = {}, {}, {}
        for r, x in shards.items():
            host = x if isinstance(x, np.ndarray) else module[r].asnumpy(x)
            block = np.moveaxis(host, axis, -1)
            flat = block.reshape(math.prod(block.shape[:-1]), block.shape[-1])
            unsorted = order_keys(flat)
            order = np.argsort(unsorted, axis=1, kind="stable")
            keys[r] = np.take_along_axis(unsorted, order, axis=1)
            moved[r] = (order + starts[position[r]]).astype(np.intp) if arg else np.take_along_axis(flat, order, 1)
            rows[r] = block.shape
        found = _kth_keys(backend, groups, keys, kth_sorted, max(sizes), n, floating)
        counts = {r: _below_and_equal(keys[r], found[r])[None] for r in keys}
        table = backend.all_gather(counts, groups, axis=0)
        results = {}
        some = next(iter(table))
        plan = _Plan(kth_sorted, table[some][:, 0], table[some][:, 1], sizes)
        send_counts = np.zeros((len(members), len(members)), np.int64)
        for src in range(len(members)):
            for dst in range(len(members)):
                send_counts[src, dst] = plan.pieces(src, starts[dst], starts[dst] + sizes[dst])[3].sum()
        sends, own = {}, {}
        for r, values_r in moved.items():
            p = position[r]
            parts = []
            for dst in range(len(members)):
                row, local, _, length = plan.pieces(p, starts[dst], starts[dst] + sizes[dst])
                i, j = ragged(row, local, length)
                if dst == p:
                    own[r] = (i, j)
                else:
                    parts.append(values_r[i, j])
            sends[r] = np.concatenate(parts) if parts else values_r.reshape(-1)[:0]
        crossing = send_counts.copy()
        np.fill_diagonal(crossing, 0)
        if crossing.any():
            arrived = backend.exchange(sends, groups, axis=0, send_counts={
                r: tuple(int(v) for v in crossing[position[r]]) for g in groups for r in g})
        else:
            arrived = sends
        for r, values_r in moved.items():
            p = position[r]
            result = np.empty(values_r.shape, values_r.dtype)
            row, _, place, length = plan.pieces(p, starts[p], starts[p] + sizes[p])
            i, j = own[r]
            pi, pj = ragged(row, place - starts[p], length)
            result[pi, pj] = values_r[i, j]
            taken = 0
            for src in range(len(members)):
                if src == p:
                    continue
                row, _, place, length = plan.pieces(src, starts[p], starts[p] + sizes[p])
                pi, pj = ragged(row, place - starts[p], length)
                result[pi, pj] = arrived[r][taken:taken + len(pi)]
                taken += len(pi)
            shaped = np.moveaxis(result.reshape(rows[r]), -1, axis)
            results[r] = shaped if module[r] is np else module[r].asarray(shaped)
        return results

    return Decision((spec,), (out,), None, program=program)


def _kth_keys(backend: Any, groups: Any, keys: Shards, kth: np.ndarray, longest: int, n: int,
              floating: bool) -> Shards:
    """``{rank: (Q, B) keys}``: the ``kth`` smallest keys of every row (NaN's key where ``kth`` is past a row's
    numbers: NaN sorts last)."""
    def wanted(counts: np.ndarray) -> np.ndarray:
        return np.minimum(kth[:, None], np.maximum(counts - 1, 0)[None])

    found, counts = select_order_statistics(backend, groups, keys, wanted, floating, longest, n, nan=floating)
    if floating:  # the numbers were selected among; a kth past them is a NaN
        nan = order_keys(np.array([np.nan]))[0]
        found = {r: np.where(kth[:, None] >= counts[r][None], nan, f) for r, f in found.items()}
    return found


def _below_and_equal(sorted_keys: np.ndarray, found: np.ndarray) -> np.ndarray:
    """``(2, Q, B)``: for every ``(kth, row)``, how many keys of the sorted row are below ``found[kth, row]`` and
    how many equal it."""
    q, b = found.shape
    counts = np.zeros((2, q, b), np.int64)
    for i in range(b):
        below = np.searchsorted(sorted_keys[i], found[:, i], "left")
        counts[0, :, i] = below
        counts[1, :, i] = np.searchsorted(sorted_keys[i], found[:, i], "right") - below
    return counts

