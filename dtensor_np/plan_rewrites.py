"""Local rewrites of a plan the search did not prove optimal: each lowers its cost within the cap, or leaves it.

:func:`improve_locally` runs :func:`merge_gathers` (two all_gathers made one,
or a mesh dim moved by an all_to_all onto a tensor dim gathered later, to
leave with it), then rounds of the cheapest of :func:`park_early` (a mesh dim
Replicate for a while chunked onto a tensor dim that is gathered later, an
all_reduce made a reduce_scatter onto one, an all_gather of one mesh dim an
all_to_all onto one), :func:`fold_moves` (an all_gather and a later chunk of one
mesh dim made an all_to_all; a later reduction folded into an earlier
reduce_scatter) and :func:`reorder_moves` (neighbouring moves swapped so that
what shrinks the array goes first), while a round lowers the cost and within a
count of walked moves (:meth:`dtensor_np.plan_problem.Problem.walk`), so that
every rank rewrites alike.  Each rewrite keeps the path a path of the graph to
the goal within the cap; none changes a guarantee of the search.

Example (the all_gather goes after the chunks, which quarter the bytes it moves):
    >>> from dtensor_np import CostModel, DeviceMesh, Shard, Replicate, DTensorSpec, TensorMeta
    >>> from dtensor_np.plan_graph import search_state
    >>> src = DTensorSpec(DeviceMesh((2, 2, 2)), (Shard(0), Replicate(), Replicate()), TensorMeta((8, 8), "f4"))
    >>> pb = Problem(search_state(src), search_state(src.with_placements((Replicate(), Shard(1), Shard(1)))),
    ...              (2, 2, 2), 2, 256, CostModel(), None)
    >>> improve_locally(pb, (("all_gather", (0,), -1), ("chunk", (1,), 1), ("chunk", (2,), 1)), 100)[0]
    (('chunk', (1,), 1), ('chunk', (2,), 1), ('all_gather', (0,), -1))
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from .plan_graph import COLLECTIVES
from .plan_problem import IMove, Problem, Walk, growth

__all__ = ["fold_moves", "improve_locally", "merge_gathers", "park_early", "reorder_moves"]


def merge_gathers(pb: Problem, imoves: Sequence[IMove], walked: Optional[Walk] = None) -> tuple[tuple[IMove, ...], float]:
    """The path improved locally by merging all_gathers, and its cost: two rewrites, tried in
    order and taken while one lowers the cost (each keeps the count of collectives or lowers it,
    and the state after the later all_gather).

    * An all_gather of one mesh dim ``m``, followed later by an all_gather of stack ``f`` with
      neither ``f`` nor ``m`` touched in between: ``m`` goes onto ``f`` by an all_to_all instead,
      and leaves with the later all_gather (one all_gather of more mesh dims; the array stays
      split by ``m`` until then).
    * Two all_gathers of one stack, nothing else touching it in between: one all_gather of both,
      at the time of the first or of the second.

    Example:
        >>> from dtensor_np import CostModel, DeviceMesh, Shard, Replicate, DTensorSpec, TensorMeta
        >>> from dtensor_np.plan_graph import search_state
        >>> src = DTensorSpec(DeviceMesh((2, 2)), (Shard(0), Shard(0)), TensorMeta((8, 8), "f4"))
        >>> pb = Problem(search_state(src), search_state(src.with_placements((Replicate(),) * 2)), (2, 2), 2, 256,
        ...               CostModel(), 2)
        >>> merge_gathers(pb, (("all_gather", (1,), -1), ("all_gather", (0,), -1)))[0]
        (('all_gather', (0, 1), -1),)
    """
    best = tuple(imoves)
    walked = walked or pb.walk(best)
    if walked is None or walked[1][-1] != pb.goal:  # pragma: no cover - the callers' paths reach the goal
        return best, math.inf
    costs, states, counts = walked
    cost = sum(costs)
    for _ in range(len(best)):  # each rewrite takes a move out or moves a mesh dim onto another stack
        found: Optional[tuple[IMove, ...]] = None
        found_walk: Walk = ([], [], [])
        for i, (kind, dims, _) in enumerate(best):
            if kind != "all_gather":
                continue
            home = pb.top_of(states[i][0], dims)
            for j in range(i + 1, len(best)):
                later, later_dims, _ = best[j]
                if set(later_dims) & set(dims):
                    break
                if later != "all_gather":
                    continue
                f = pb.top_of(states[j][0], later_dims)
                untouched = not any(set(dims) & set(move[1]) for move in best[i + 1:j])
                windows = []  # moves i..j rewritten
                both = ("all_gather", later_dims + dims, -1)
                if f == home and untouched and all(states[t][0][f] == states[i + 1][0][f] for t in range(i + 1, j + 1)):
                    windows.append((both,) + best[i + 1:j])
                    windows.append(best[i + 1:j] + (both,))
                elif len(dims) == 1 and f != home and untouched and all(
                        states[t][0][f] == states[i][0][f] for t in range(i, j + 1)):
                    windows.append((("all_to_all", dims, f),) + best[i + 1:j] + (both,))
                for window in windows:
                    out = pb.walk(window, states[i], counts[i])
                    if out is not None and out[1][-1] == states[j + 1] and (
                            sum(out[0]) < sum(costs[i:j + 1]) * (1 - 1e-12)):
                        found = best[:i] + window + best[j + 1:]
                        found_walk = (costs[:i] + out[0] + costs[j + 1:], states[:i] + out[1] + states[j + 2:],
                                      counts[:i] + out[2] + counts[j + 2:])
                        break
                if found:
                    break
            if found:
                break
        if found is None:
            break
        best = found
        pb._walks.setdefault(best, found_walk)  # the rest of the path unchanged
        costs, states, counts = found_walk
        cost = sum(costs)
    return best, cost


@dataclass
class _Park:
    """One way to park something early (:func:`park_early`): ``first`` the move that parks (a chunk
    inserted at ``at``, or the all_reduce / all_gather at ``at`` made a reduce_scatter / all_to_all),
    ``group`` the mesh dims parked on tensor dim ``onto``, gathered with the all_gather at ``until``
    (``merged``) or by one more all_gather inserted before move ``until``.  (Not frozen, these two:
    compiled, a frozen dataclass is slow to make; a NamedTuple's fields are slow to read.)"""

    first: str
    at: int
    until: int
    group: tuple[int, ...]
    onto: int
    merged: bool


@dataclass
class _Parkable:
    """A collective at ``at`` that could park its mesh dims instead (see :class:`_Park`)."""

    at: int
    group: tuple[int, ...]
    mask: int
    k: int  # the group's size
    saved: float  # what the cheaper collective saves, in microseconds
    home: int  # the tensor dim an all_gather pops (not a place to park), or -1


def park_early(pb: Problem, imoves: Sequence[IMove], walked: Optional[Walk] = None) -> tuple[tuple[IMove, ...], float]:
    """The path with one thing parked early, if that lowers its cost (the one that lowers it most),
    and its cost: a mesh dim that is Replicate for a while is chunked onto a tensor dim that
    nothing touches until it is gathered, and leaves with that all_gather (one all_gather of
    more mesh dims) or, with a collective to spare, in an all_gather of its own later.  Likewise
    an all_reduce becomes a reduce_scatter onto such a tensor dim, and an all_gather of one mesh
    dim an all_to_all onto one.  The collectives in between move that many times fewer bytes.

    Each candidate is priced in O(1) from the path's step costs (bytes scale with the local
    size; :class:`CostModel` only: another model gets the path back); the chosen one is checked
    by :meth:`Problem.walk`.  O(len(path) * (mesh dims + tensor dims)).

    Example (the greedy plan of ``S(0)RP(sum) -> RS(1)R``: the sum is reduced onto tensor dim 0,
    which is gathered anyway, so the chunk after it touches half the bytes):
        >>> from dtensor_np import CostModel, DeviceMesh, Shard, Replicate, Partial, DTensorSpec, TensorMeta
        >>> from dtensor_np.plan_graph import search_state
        >>> src = DTensorSpec(DeviceMesh((2, 2, 2)), (Shard(0), Replicate(), Partial()), TensorMeta((8, 8), "f4"))
        >>> dst = src.with_placements((Replicate(), Shard(1), Replicate()))
        >>> pb = Problem(search_state(src), search_state(dst), (2, 2, 2), 2, 256, CostModel(), 2)
        >>> park_early(pb, (("all_reduce", (2,), -1), ("chunk", (1,), 1), ("all_gather", (0,), -1)))[0]
        (('reduce_scatter', (2,), 0), ('chunk', (1,), 1), ('all_gather', (0, 2), -1))
    """
    best = tuple(imoves)
    walked = walked or pb.walk(best)
    if walked is None:  # pragma: no cover - the callers' paths are walks
        return best, math.inf
    if not pb.linear or not pb.ndim:  # no pricing; a 0-d array has nowhere to park
        return best, sum(walked[0])
    choice = _best_park(pb, best, walked)
    if choice is None:
        return best, sum(walked[0])
    if choice.first == "chunk":
        head, body = best[:choice.at] + (("chunk", choice.group, choice.onto),), best[choice.at:choice.until]
    else:
        first = "reduce_scatter" if choice.first == "all_reduce" else "all_to_all"
        head, body = best[:choice.at] + ((first, choice.group, choice.onto),), best[choice.at + 1:choice.until]
    if choice.merged:
        new = head + body + (("all_gather", best[choice.until][1] + choice.group, -1),) + best[choice.until + 1:]
    else:
        new = head + body + (("all_gather", choice.group, -1),) + best[choice.until:]
    return _cheaper(pb, best, walked, ((new, choice.at),))


def _best_park(pb: Problem, best: tuple[IMove, ...], walked: Walk) -> Optional[_Park]:
    """:func:`park_early`'s scan: the candidate that saves the most, priced from the path's steps."""
    costs, states, counts = walked
    n = len(best)
    latency, inv_bw = pb.latency, pb.inv_bw
    nbytes, size, ndim = pb.nbytes, pb.mesh_shape, pb.ndim
    collective = [kind in COLLECTIVES for kind, _, _ in best]
    spare = pb.bound is None or sum(collective) < pb.bound
    prefix = [0.0]  # the bytes part of the steps' costs, summed
    for t in range(n):
        prefix.append(prefix[-1] + costs[t] - (latency if collective[t] else 0.0))
    calm = [0] * ndim  # per tensor dim: the first position from which nothing has changed it
    free: dict[int, int] = {}  # Replicate mesh dim -> the first position from which it is
    taken = states[0][1] | pb.stacked(states[0][0])
    for m in pb.live:
        if not taken >> m & 1:
            free[m] = 0
    parkable: list[_Parkable] = []
    chunk_rate = 1.0 / pb.local_bytes_per_us
    gain, choice = 1e-9 * max(1.0, sum(costs)), None
    for j in range(n + 1):
        kind, dims, _ = best[j] if j < n else ("", (), -1)
        bits = 0
        for m in dims:
            bits |= 1 << m
        local = nbytes / counts[j]
        popped = pb.top_of(states[j][0], dims) if kind == "all_gather" else -1
        longest = 0  # the tensor dim left alone longest (the first such)
        for f in range(1, ndim):
            if calm[f] < calm[longest]:
                longest = f
        for m, since in free.items():
            k = size[m]
            shrink = 1 - 1 / k
            if popped >= 0:  # parked on the tensor dim move j gathers, and gathered with it
                i = max(since, calm[popped])
                g = shrink * (prefix[j] - prefix[i] - local * inv_bw) - nbytes / counts[i] / k * chunk_rate
                if g > gain:
                    gain, choice = g, _Park("chunk", i, j, (m,), popped, True)
            if spare:  # parked on the tensor dim left alone longest, gathered alone before move j
                i = max(since, calm[longest])
                g = shrink * (prefix[j] - prefix[i] - local * inv_bw) - latency - nbytes / counts[i] / k * chunk_rate
                if g > gain:
                    gain, choice = g, _Park("chunk", i, j, (m,), longest, False)
        for p in parkable:
            shrink = 1 - 1 / p.k
            g = p.saved + shrink * (prefix[j] - prefix[p.at + 1] - local * inv_bw)
            if popped >= 0 and popped != p.home and calm[popped] <= p.at + 1 and not p.mask & bits and g > gain:
                gain, choice = g, _Park(best[p.at][0], p.at, j, p.group, popped, True)
            if spare and g - latency > gain:
                for f in range(ndim):
                    if f != p.home and calm[f] <= p.at + 1:
                        gain, choice = g - latency, _Park(best[p.at][0], p.at, j, p.group, f, False)
                        break
        if j == n:
            break
        before, after = states[j][0], states[j + 1][0]
        for f in range(ndim):
            if before[f] is not after[f] and before[f] != after[f]:
                calm[f] = j + 1
        if bits:
            for m in dims:
                free.pop(m, None)
            if parkable:
                parkable = [p for p in parkable if not p.mask & bits]
            taken = states[j + 1][1] | pb.stacked(after)
            for m in dims:
                if not taken >> m & 1:
                    free[m] = j + 1
        if kind == "all_reduce":  # a reduce_scatter instead: half the bytes
            k = pb.product(bits)
            parkable.append(_Parkable(j, dims, bits, k, (1 - 1 / k) * local * inv_bw, -1))
        elif kind == "all_gather" and len(dims) == 1:  # an all_to_all instead: 1/k of them
            k = size[dims[0]]
            parkable.append(_Parkable(j, dims, bits, k, (k - 2 + 1 / k) * local * inv_bw, popped))
    pb.walked += n  # the scan takes about a walk's time
    return choice


def fold_moves(pb: Problem, imoves: Sequence[IMove], walked: Optional[Walk] = None) -> tuple[tuple[IMove, ...], float]:
    """The path with two moves of one mesh dim folded into fewer bytes, if that lowers its cost
    (the cheapest such path), and its cost:

    * an all_gather of one mesh dim, later chunked onto another tensor dim: an all_to_all onto
      it instead, in the all_gather's place if nothing touches that tensor dim in between, or in
      the chunk's if nothing touches the gathered one (the array stays split until then);
    * a reduce_scatter onto a tensor dim, and a later reduction of the same reduce op with that
      tensor dim untouched in between: both reduced by the first (the later mesh dims parked on
      top), the later one an all_gather of them (for an all_reduce), nothing (for a
      reduce_scatter onto the same tensor dim) or an all_to_all (onto another).

    Example:
        >>> from dtensor_np import CostModel, DeviceMesh, Shard, Replicate, DTensorSpec, TensorMeta
        >>> from dtensor_np.plan_graph import search_state
        >>> src = DTensorSpec(DeviceMesh((2, 2)), (Shard(0), Replicate()), TensorMeta((8, 8), "f4"))
        >>> pb = Problem(search_state(src), search_state(src.with_placements((Shard(1), Replicate()))),
        ...               (2, 2), 2, 256, CostModel(), 2)
        >>> fold_moves(pb, (("all_gather", (0,), -1), ("chunk", (0,), 1)))[0]
        (('all_to_all', (0,), 1),)
    """
    best = tuple(imoves)
    walked = walked or pb.walk(best)
    if walked is None:  # pragma: no cover - the callers' paths are walks
        return best, math.inf
    _, states, _ = walked
    n = len(best)
    candidates = []
    for i, (kind, dims, e) in enumerate(best):
        if kind == "all_gather" and len(dims) == 1:
            home = pb.top_of(states[i][0], dims)
            for j in range(i + 1, n):
                later, later_dims, f = best[j]
                if dims[0] in later_dims:
                    if later == "chunk" and f != home:
                        if all(states[t][0][f] == states[i][0][f] for t in range(i, j + 1)):
                            candidates.append((best[:i] + (("all_to_all", dims, f),) + best[i + 1:j] + best[j + 1:], i))
                        if j > i + 1 and all(states[t][0][home] == states[i + 1][0][home] for t in range(i + 1, j + 1)):
                            candidates.append((best[:i] + best[i + 1:j] + (("all_to_all", dims, f),) + best[j + 1:], i))
                    break
        elif kind == "reduce_scatter":
            op = pb.op[dims[0]]
            for j in range(i + 1, n):
                later, later_dims, f = best[j]
                if states[j][0][e] != states[i + 1][0][e]:
                    break
                if later in ("all_reduce", "reduce_scatter") and pb.op[later_dims[0]] == op:
                    head = best[:i] + (("reduce_scatter", dims + later_dims, e),) + best[i + 1:j]
                    if later == "all_reduce":
                        candidates.append((head + (("all_gather", later_dims, -1),) + best[j + 1:], i))
                    elif f == e:
                        candidates.append((head + best[j + 1:], i))
                    elif len(later_dims) == 1:
                        candidates.append((head + (("all_to_all", later_dims, f),) + best[j + 1:], i))
                    break
    return _cheaper(pb, best, walked, candidates)


def reorder_moves(pb: Problem, imoves: Sequence[IMove], walked: Optional[Walk] = None) -> tuple[tuple[IMove, ...], float]:
    """The path with neighbouring moves swapped where that lowers its cost, in one sweep from the
    start, and its cost: a move that divides the array more than its predecessor does (by
    :func:`growth`: a chunk or reduce_scatter after an all_gather, all_to_all, all_reduce or
    partition; an all_to_all, all_reduce or partition after an all_gather) goes first when the two
    reach the same state either way, so the move after it touches fewer bytes.  Each swap is
    checked by walking the two moves alone: O(len(path) * (mesh dims + tensor dims)).

    Example (the all_gather of mesh dim 0 moves half the bytes after the chunk):
        >>> from dtensor_np import CostModel, DeviceMesh, Shard, Replicate, DTensorSpec, TensorMeta
        >>> from dtensor_np.plan_graph import search_state
        >>> src = DTensorSpec(DeviceMesh((2, 2)), (Shard(0), Replicate()), TensorMeta((8, 8), "f4"))
        >>> pb = Problem(search_state(src), search_state(src.with_placements((Replicate(), Shard(1)))),
        ...               (2, 2), 2, 256, CostModel(), 1)
        >>> reorder_moves(pb, (("all_gather", (0,), -1), ("chunk", (1,), 1)))[0]
        (('chunk', (1,), 1), ('all_gather', (0,), -1))
    """
    best = list(imoves)
    walked = walked or pb.walk(tuple(best))
    if walked is None:  # pragma: no cover - the callers' paths are walks
        return tuple(best), math.inf
    costs, states, counts = list(walked[0]), list(walked[1]), list(walked[2])
    for i in range(len(best) - 1):
        if growth(best[i][0]) >= growth(best[i + 1][0]):
            continue  # only what shrinks the array more goes first
        pair = (best[i + 1], best[i])
        window = pb.walk(pair, states[i], counts[i])
        if window is None or window[1][-1] != states[i + 2]:
            continue
        if window[0][0] + window[0][1] < (costs[i] + costs[i + 1]) * (1 - 1e-12):
            best[i], best[i + 1] = pair
            costs[i:i + 2], states[i + 1], counts[i + 1] = window[0], window[1][1], window[2][1]
    new = tuple(best)
    if new == tuple(imoves):
        return new, sum(walked[0])
    pb._walks[new] = (costs, states, counts)  # the same walk, and the same count of collectives
    return new, sum(costs)


def _cheaper(pb: Problem, path: tuple[IMove, ...], walked: Walk,
             candidates: Sequence[tuple[tuple[IMove, ...], int]]) -> tuple[tuple[IMove, ...], float]:
    """The cheapest of ``candidates`` (each a path and the number of moves it shares with ``path``
    first) that walks to the goal within the cap, if cheaper than ``path`` (``walked``: its walk)."""
    cost = sum(walked[0])
    for new, same in candidates:
        out = pb.rewalk(new, walked, same)
        if pb.reaches_goal(new, out) and sum(out[0]) < cost * (1 - 1e-12):  # type: ignore[index]
            path, cost = new, sum(out[0])  # type: ignore[index]
    return path, cost


def improve_locally(pb: Problem, imoves: Sequence[IMove], limit: float) -> tuple[tuple[IMove, ...], float]:
    """The path improved by local rewrites, and its cost: :func:`merge_gathers` to the end, then
    rounds of the cheapest of :func:`park_early`, :func:`fold_moves` and :func:`reorder_moves`,
    and :func:`merge_gathers` again, while a round lowers the cost and fewer than ``limit`` moves
    have been walked (:meth:`Problem.walk`, the scans counted as walks; a count, so every rank
    rewrites alike; a rewritten path is walked from its first changed move, :meth:`Problem.rewalk`).
    A round is not cut short.  Each rewrite keeps the path a path of the graph to the goal within
    the cap.
    """
    limit += pb.walked
    best, cost = merge_gathers(pb, imoves)
    while pb.walked < limit:
        walked = pb.walk(best)
        parked = park_early(pb, best, walked)
        folded = fold_moves(pb, best, walked)
        swapped = reorder_moves(pb, best, walked)
        new, new_cost = min(parked, folded, swapped, key=lambda pair: pair[1])
        if new_cost >= cost * (1 - 1e-12):
            break
        best, cost = merge_gathers(pb, new)
    return best, cost
