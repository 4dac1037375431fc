"""``partition``/``argpartition`` along a sharded axis that no other dim can take (a 1-d array): a distributed
selection, never a gather.

Along mesh dim ``m`` (the members of each group hold consecutive blocks of the axis; every other mesh dim
replicates the array), for every 1-d slice along the axis and every ``kth``:

1. every member sorts its block (stably);
2. the ``kth`` smallest values are found by rounds of weighted medians: each member sends the median of the
   part of its block still in play and that part's size (one ``all_gather`` of a few bytes per slice and
   ``kth``), every member picks the same pivot (the weighted median of the medians), counts its elements
   below and equal to it, and the counts are summed (one ``all_reduce``); each round leaves at most three
   quarters of the elements in play, so about ``log4/3(n)`` rounds;
3. one ``all_gather`` of every member's counts below and equal to each ``kth`` value tells every member where
   each of its elements goes: the ``kth`` elements (ties broken by position, as a stable sort) at the ``kth``
   positions, the smaller ones before, the larger ones after, each member's part of a segment after the
   previous members' parts;
4. one ``exchange`` (an ``Alltoallv``, counted as ``all_to_all``) moves the elements whose place is on another
   member, and only those (none when every element is in place).

The result is a valid partition, equal to NumPy's at the ``kth`` positions; inside each segment the order is
this algorithm's (NumPy leaves it undefined, and its own differs).  An array whose other dims are sharded too
(on other mesh dims) is made whole along the axis instead (``whole_decision``: an ``all_gather``).

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> from dtensor_np.propagation.placing import partition_along
    >>> x = dt.distribute_tensor(np.array([9, 4, 7, 1, 8, 2, 6]), dt.DeviceMesh((3,)), [dt.Shard(0)])
    >>> with dt.comm_counter() as c:
    ...     y = partition_along(x, kth=(3,), axis=0).full_tensor()
    >>> int(y[3]), bool((y[:3] <= 6).all() and (y[4:] >= 6).all()), c.counts["all_gather"] >= 2
    (6, True, True)
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from collectives import array_module

from ..placements import Shard
from ..spec import DTensorSpec, TensorMeta
from .registry import Decision
from .whole_axes import whole_decision

__all__ = ["selection_decision", "weighted_median", "ragged"]

Shards = dict[int, Any]


def weighted_median(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Along axis 0: the first value (in sort order, NaN last) at which the cumulative weight reaches half the
    total; where the total is 0, any value.

    Example:
        >>> weighted_median(np.array([[3.0], [1.0], [2.0]]), np.array([[1], [1], [5]])).tolist()
        [2.0]
    """
    order = np.argsort(values, axis=0, kind="stable")
    ranked = np.take_along_axis(weights, order, axis=0)
    cumulative = np.cumsum(ranked, axis=0)
    first = np.argmax(cumulative * 2 >= cumulative[-1:], axis=0)
    chosen = np.take_along_axis(order, first[None], axis=0)
    return np.take_along_axis(values, chosen, axis=0)[0]


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


def _pack(*arrays: np.ndarray) -> np.ndarray:
    return np.concatenate([np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in arrays])


def _unpack(buffer: np.ndarray, dtypes: Sequence[np.dtype], shape: tuple[int, ...]) -> list[np.ndarray]:
    out, start = [], 0
    for dtype in dtypes:
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        out.append(buffer[start:start + n].copy().view(dtype).reshape(shape))
        start += n
    return out


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


def selection_decision(spec: DTensorSpec, axis: int, m: int, kth: Sequence[int], arg: bool) -> Decision:
    """The decision of ``partition_along`` when ``axis`` is sharded on mesh dim ``m`` and no other dim can take it."""
    dtype = np.dtype(np.intp) if arg else spec.dtype
    func = np.argpartition if arg else np.partition
    mesh = spec.mesh
    if any(isinstance(p, Shard) and d != m and mesh.shape[d] > 1 for d, p in enumerate(spec.placements)):
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

    def program(backend: Any, shards: Shards) -> Shards:
        """Rounds of weighted medians (an ``all_gather`` and an ``all_reduce`` each), one ``all_gather`` of the
        counts, one ``exchange`` of the elements that change owner."""
        position = {r: g.index(r) for g in groups for r in g}
        module = {r: array_module(x) for r, x in shards.items()}
        rows, ordered, moved = {}, {}, {}
        for r, x in shards.items():
            host = x if isinstance(x, np.ndarray) else module[r].asnumpy(x)
            block = np.moveaxis(host, axis, -1)
            flat = block.reshape(math.prod(block.shape[:-1]), block.shape[-1])
            order = np.argsort(flat, axis=1, kind="stable")
            ordered[r] = np.take_along_axis(flat, order, axis=1)
            moved[r] = (order + starts[position[r]]).astype(np.intp) if arg else ordered[r]
            rows[r] = block.shape
        q, b = len(kth_sorted), ordered[next(iter(ordered))].shape[0]
        values = _select(backend, groups, ordered, kth_sorted, q, b, spec.dtype)
        counts = {r: np.stack(_below_and_equal(s, values, None, None, None))[None] for r, s in ordered.items()}
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


def _below_and_equal(rows: np.ndarray, values: np.ndarray, lo: Any, hi: Any, skip: Any) -> tuple[np.ndarray, np.ndarray]:
    """For every ``(kth, row)``: how many elements of the sorted ``rows[row][lo:hi]`` (the whole row when ``lo`` is
    None) are below ``values[kth, row]``, and how many equal it (none counted where ``skip``)."""
    q, b = values.shape
    below = np.zeros((q, b), np.int64)
    equal = np.zeros((q, b), np.int64)
    for j in range(q):
        for i in range(b):
            if skip is not None and skip[j, i]:
                continue
            window = rows[i] if lo is None else rows[i, lo[j, i]:hi[j, i]]
            below[j, i] = np.searchsorted(window, values[j, i], "left")
            equal[j, i] = np.searchsorted(window, values[j, i], "right") - below[j, i]
    return below, equal


def _select(backend: Any, groups: Any, ordered: Shards, kth: np.ndarray, q: int, b: int, dtype: np.dtype) -> np.ndarray:
    """The ``kth`` smallest values of every row, ``(Q, B)``, the same on every rank: rounds of weighted medians."""
    lo = {r: np.zeros((q, b), np.int64) for r in ordered}
    hi = {r: np.broadcast_to(np.int64(s.shape[1]), (q, b)).copy() for r, s in ordered.items()}
    target = np.broadcast_to(kth[:, None], (q, b)).astype(np.int64)
    found = np.zeros((q, b), bool)
    values = np.zeros((q, b), dtype)
    while not found.all():
        packed = {}
        for r, s in ordered.items():
            size = np.where(found, 0, hi[r] - lo[r])
            middle = np.clip(lo[r] + np.maximum(size - 1, 0) // 2, 0, max(s.shape[1] - 1, 0))
            med = s[np.arange(b)[None], middle] if s.shape[1] else np.zeros((q, b), dtype)
            packed[r] = _pack(med.astype(dtype, copy=False), size)[None]
        gathered = backend.all_gather(packed, groups, axis=0)
        some = next(iter(gathered))
        meds, weights = zip(*(_unpack(row, (dtype, np.int64), (q, b)) for row in gathered[some]))
        pivot = weighted_median(np.stack(meds), np.stack(weights))
        counted = {r: _below_and_equal(s, pivot, lo[r], hi[r], found) for r, s in ordered.items()}
        totals = backend.all_reduce({r: np.stack(c) for r, c in counted.items()}, groups, op="sum")
        total_below, total_equal = totals[next(iter(totals))]
        lower = ~found & (target < total_below)
        hit = ~found & ~lower & (target < total_below + total_equal)
        higher = ~found & ~lower & ~hit
        if not (lower | hit | higher).any() or (higher & (total_below + total_equal == 0)).any():
            raise RuntimeError("partition: the distributed selection found no element in play")  # never: guard
        values[hit] = pivot[hit]
        for r, (below, equal) in counted.items():
            hi[r] = np.where(lower, lo[r] + below, hi[r])
            lo[r] = np.where(higher, lo[r] + below + equal, lo[r])
        target = np.where(higher, target - total_below - total_equal, target)
        found |= hit
    return values
