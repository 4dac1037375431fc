"""The redistribute planner's search: the cheapest path over (placements, shard order) states.

A state is the placements on the mesh dims of size > 1 plus the shard order;
a move is one step of the table in :mod:`dtensor_np.planner`.
:func:`exhaustive_path` is Dijkstra over every (state, collectives used),
capped by the greedy plan's count of collectives.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Iterator, Optional, Sequence

from .placements import Partial, Placement, Replicate, Shard
from .spec import DTensorSpec, ShardOrder

__all__ = [
    "CostModel",
    "SearchState",
    "Move",
    "COLLECTIVES",
    "freeze_order",
    "search_state",
    "moves",
    "step_cost",
    "path_cost",
    "exhaustive_path",
    "greedy_path",
]

COLLECTIVES = frozenset(("all_gather", "all_reduce", "reduce_scatter", "all_to_all"))

_R = Replicate()


@dataclass(frozen=True, slots=True)
class CostModel:
    """Cost of a step in microseconds: ``latency_us`` per collective plus bytes over bandwidth.

    Example:
        >>> CostModel().collective(1024, bytes_moved=2**20) > CostModel().collective(1024, 0)
        True
    """

    latency_us: float = 5.0
    bytes_per_us: float = 5000.0
    local_bytes_per_us: float = 20000.0

    def collective(self, group_size: int, bytes_moved: float) -> float:
        return self.latency_us + bytes_moved / self.bytes_per_us

    def local(self, bytes_touched: float) -> float:
        return bytes_touched / self.local_bytes_per_us


# --------------------------------------------------------------------------
# states and moves: the graph both searches walk
# --------------------------------------------------------------------------
# A search state: placements on the non-trivial mesh dims (size-1 dims hold
# None) and the shard order restricted to those dims.
SearchState = tuple[tuple[Optional[Placement], ...], ShardOrder]
# One step of a path: (kind, mesh dims, src placement, dst placement, state after).
Move = tuple[str, tuple[int, ...], Placement, Placement, SearchState]


def freeze_order(orders: dict[int, tuple[int, ...]]) -> ShardOrder:
    """A shard order from ``{tensor dim: mesh dims}``, sorted, without empty entries."""
    return tuple(sorted((d, ms) for d, ms in orders.items() if ms))


def search_state(spec: DTensorSpec) -> SearchState:
    """The search state of a spec: size-1 mesh dims left out (they never split anything)."""
    trivial = {m for m, size in enumerate(spec.mesh.shape) if size == 1}
    placements = tuple(None if m in trivial else p for m, p in enumerate(spec.placements))
    orders = {d: tuple(m for m in ms if m not in trivial) for d, ms in spec.shard_order}  # type: ignore[union-attr]
    return placements, freeze_order(orders)


def _num_shards(state: SearchState, mesh_shape: tuple[int, ...]) -> int:
    n = 1
    for m, p in enumerate(state[0]):
        if isinstance(p, Shard):
            n *= mesh_shape[m]
    return n


def _with(placements: tuple, updates: dict[int, Placement]) -> tuple:
    return tuple(updates.get(m, p) for m, p in enumerate(placements))


def moves(state: SearchState, goal: SearchState, mesh_shape: tuple[int, ...], ndim: int) -> Iterator[Move]:
    """Every step out of ``state``: (kind, mesh dims, src, dst, next state)."""
    placements, order = state
    orders = dict(order)
    goal_placements = goal[0]
    live = [m for m, p in enumerate(placements) if p is not None]

    # Single mesh dim steps.
    for m in live:
        p = placements[m]
        target = goal_placements[m]
        if isinstance(p, Shard):
            d = p.dim
            if orders.get(d, ())[-1:] != (m,):
                continue  # only the innermost split of a dim can be undone
            rest = dict(orders)
            rest[d] = orders[d][:-1]
            yield "all_gather", (m,), p, _R, (_with(placements, {m: _R}), freeze_order(rest))
            for e in range(ndim):
                if e == d:
                    continue
                moved = dict(rest)
                moved[e] = moved.get(e, ()) + (m,)
                yield "all_to_all", (m,), p, Shard(e), (_with(placements, {m: Shard(e)}), freeze_order(moved))
        elif isinstance(p, Replicate):
            for e in range(ndim):
                moved = dict(orders)
                moved[e] = moved.get(e, ()) + (m,)
                yield "chunk", (m,), p, Shard(e), (_with(placements, {m: Shard(e)}), freeze_order(moved))
            if isinstance(target, Partial):
                yield "partition", (m,), p, target, (_with(placements, {m: target}), order)
        elif isinstance(p, Partial):
            if p == target:
                continue  # a pending reduction the target keeps
            yield "all_reduce", (m,), p, _R, (_with(placements, {m: _R}), order)
            for e in range(ndim):
                moved = dict(orders)
                moved[e] = moved.get(e, ()) + (m,)
                yield "reduce_scatter", (m,), p, Shard(e), (_with(placements, {m: Shard(e)}), freeze_order(moved))

    # Merged collectives over several mesh dims at once.
    for d, ms in orders.items():
        for k in range(2, len(ms) + 1):
            suffix = ms[-k:]
            rest = dict(orders)
            rest[d] = ms[:-k]
            yield "all_gather", suffix, Shard(d), _R, (_with(placements, {m: _R for m in suffix}), freeze_order(rest))
    partials: dict[Placement, list[int]] = {}
    for m in live:
        p = placements[m]
        if isinstance(p, Partial) and p != goal_placements[m]:
            partials.setdefault(p, []).append(m)
    for p, dims in partials.items():
        for k in range(2, len(dims) + 1):
            for subset in itertools.combinations(dims, k):
                yield "all_reduce", subset, p, _R, (_with(placements, {m: _R for m in subset}), order)
                for perm in itertools.permutations(subset):
                    for e in range(ndim):
                        moved = dict(orders)
                        moved[e] = moved.get(e, ()) + perm
                        yield "reduce_scatter", perm, p, Shard(e), (
                            _with(placements, {m: Shard(e) for m in perm}),
                            freeze_order(moved),
                        )


def _kind_cost(kind: str, k: int, local: float, model: CostModel) -> float:
    """The cost of a step of ``kind`` over a group of ``k`` ranks on local blocks of ``local`` bytes."""
    if kind == "all_gather":
        return model.collective(k, (k - 1) * local)
    if kind == "all_reduce":
        return model.collective(k, 2 * (k - 1) / k * local)
    if kind in ("reduce_scatter", "all_to_all"):
        return model.collective(k, (k - 1) / k * local)
    if kind == "chunk":
        return model.local(local / k)
    return model.local(local)


def step_cost(kind: str, dims: tuple[int, ...], state: SearchState, nbytes: int, mesh_shape: tuple[int, ...], model: CostModel) -> float:
    """The cost of a step out of ``state`` (``nbytes``: the global array's size)."""
    local = nbytes / _num_shards(state, mesh_shape)
    k = 1
    for m in dims:
        k *= mesh_shape[m]
    return _kind_cost(kind, k, local, model)


def path_cost(path: Sequence[Move], start: SearchState, nbytes: int, mesh_shape: tuple[int, ...], model: CostModel) -> float:
    """The cost of a path from ``start``, step costs added in order (as both searches add them)."""
    cost = 0.0
    state = start
    for kind, dims, _a, _b, nxt in path:
        cost = cost + step_cost(kind, dims, state, nbytes, mesh_shape, model)
        state = nxt
    return cost


# --------------------------------------------------------------------------
# the exhaustive search: Dijkstra over every state (the oracle)
# --------------------------------------------------------------------------
def exhaustive_path(
    start: SearchState, goal: SearchState, mesh_shape: tuple[int, ...], ndim: int, nbytes: int,
    model: CostModel, bound: Optional[int],
) -> Optional[tuple[Move, ...]]:
    """The cheapest path with at most ``bound`` collectives: Dijkstra over (state, collectives used).

    Exponential in the number of mesh dims; kept as the oracle the faster
    search is tested against.  None when no path exists.
    """
    tie = itertools.count()
    frontier: list = [(0.0, 0, next(tie), start, 0, ())]
    best: dict[tuple[SearchState, int], float] = {(start, 0): 0.0}
    while frontier:
        cost, used, _, state, _, path = heapq.heappop(frontier)
        if state == goal:
            return path
        if best.get((state, used), float("inf")) < cost:
            continue
        for kind, dims, a, b, nxt in moves(state, goal, mesh_shape, ndim):
            n_used = used + (kind in COLLECTIVES)
            if bound is not None and n_used > bound:
                continue
            c = cost + step_cost(kind, dims, state, nbytes, mesh_shape, model)
            key = (nxt, n_used)
            if c < best.get(key, float("inf")):
                best[key] = c
                heapq.heappush(frontier, (c, n_used, next(tie), nxt, 0, path + ((kind, dims, a, b, nxt),)))
    return None


def greedy_path(start: SearchState, goal: Optional[SearchState], mesh_shape: tuple[int, ...], steps: Sequence[tuple[int, Placement, Placement]]) -> Optional[tuple[Move, ...]]:
    """The greedy planner's ``(mesh dim, src, dst)`` steps as a path of :data:`Move` (steps on size-1 mesh dims dropped).

    Each greedy step maps onto the step kind of the same transition on one
    mesh dim (``S->R`` all_gather, ``S->S`` all_to_all, ``P->R`` all_reduce,
    ``P->S`` reduce_scatter, ``R->S`` chunk, ``R->P`` partition).  None when a
    step undoes a split that is not the innermost one, or the walk does not
    end at ``goal``: then the greedy plan is not a path of this search.  With
    ``goal`` None, neither is checked (a replay to cost the greedy plan by).
    """
    placements, order = start
    path = []
    for m, a, b in steps:
        if mesh_shape[m] == 1 or a == b:
            continue
        orders = dict(order)
        if isinstance(a, Shard):
            if orders.get(a.dim, ())[-1:] != (m,) and goal is not None:
                return None
            orders[a.dim] = tuple(x for x in orders[a.dim] if x != m)
            kind = "all_to_all" if isinstance(b, Shard) else "all_gather"
        elif isinstance(a, Partial):
            kind = "reduce_scatter" if isinstance(b, Shard) else "all_reduce"
        else:
            kind = "chunk" if isinstance(b, Shard) else "partition"
        if isinstance(b, Shard):
            orders[b.dim] = orders.get(b.dim, ()) + (m,)
        placements = _with(placements, {m: b})
        order = freeze_order(orders)
        path.append((kind, (m,), a, b, (placements, order)))
    if goal is not None and (placements, order) != goal:
        return None
    return tuple(path)
