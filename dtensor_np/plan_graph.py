"""The graph the planner searches: states (placements, shard order), the moves between them, their costs.

A state is the placements on the mesh dims of size > 1 (size-1 mesh dims hold
None) and the shard order restricted to those mesh dims; a move is one step of
the table in :mod:`dtensor_np.planner` (all_gather, all_to_all, all_reduce,
reduce_scatter, chunk, partition, merged collectives over several mesh dims).
A step costs latency plus bytes over bandwidth (:class:`CostModel`), its bytes a
multiple of the local size ``N / F`` (``N`` the array's bytes, ``F`` the number
of shards).  :mod:`dtensor_np.plan_search` searches it.

Example:
    >>> from dtensor_np import DeviceMesh, Shard, Replicate, DTensorSpec, TensorMeta
    >>> src = DTensorSpec(DeviceMesh((2, 2)), (Shard(0), Shard(0)), TensorMeta((8, 8), "f4"))
    >>> state = search_state(src)
    >>> state
    ((Shard(dim=0), Shard(dim=0)), ((0, (0, 1)),))
    >>> [(kind, dims) for kind, dims, *_ in moves(state, search_state(src.with_placements((Replicate(),) * 2)), (2, 2), 2)][:2]
    [('all_gather', (1,)), ('all_to_all', (1,))]
"""

from __future__ import annotations

import itertools
from typing import Iterator, Optional, Sequence

from .cost_model import CostModel
from .placements import Partial, Placement, Replicate, Shard
from .spec import DTensorSpec, ShardOrder

__all__ = ["COLLECTIVES", "Move", "SearchState", "freeze_order", "kind_cost", "moves", "path_cost", "replaced",
           "search_state", "step_cost"]

COLLECTIVES = frozenset(("all_gather", "all_reduce", "reduce_scatter", "all_to_all"))

_R = Replicate()

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


def replaced(placements: tuple, updates: dict[int, Placement]) -> tuple:
    """``placements`` with those of the mesh dims in ``updates`` replaced."""
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
            yield "all_gather", (m,), p, _R, (replaced(placements, {m: _R}), freeze_order(rest))
            for e in range(ndim):
                if e == d:
                    continue
                moved = dict(rest)
                moved[e] = moved.get(e, ()) + (m,)
                yield "all_to_all", (m,), p, Shard(e), (replaced(placements, {m: Shard(e)}), freeze_order(moved))
        elif isinstance(p, Replicate):
            for e in range(ndim):
                moved = dict(orders)
                moved[e] = moved.get(e, ()) + (m,)
                yield "chunk", (m,), p, Shard(e), (replaced(placements, {m: Shard(e)}), freeze_order(moved))
            if isinstance(target, Partial):
                yield "partition", (m,), p, target, (replaced(placements, {m: target}), order)
        elif isinstance(p, Partial):
            if p == target:
                continue  # a pending reduction the target keeps
            yield "all_reduce", (m,), p, _R, (replaced(placements, {m: _R}), order)
            for e in range(ndim):
                moved = dict(orders)
                moved[e] = moved.get(e, ()) + (m,)
                yield "reduce_scatter", (m,), p, Shard(e), (replaced(placements, {m: Shard(e)}), freeze_order(moved))

    # Merged collectives over several mesh dims at once.
    for d, ms in orders.items():
        for k in range(2, len(ms) + 1):
            suffix = ms[-k:]
            rest = dict(orders)
            rest[d] = ms[:-k]
            yield "all_gather", suffix, Shard(d), _R, (replaced(placements, {m: _R for m in suffix}), freeze_order(rest))
    partials: dict[Placement, list[int]] = {}
    for m in live:
        p = placements[m]
        if isinstance(p, Partial) and p != goal_placements[m]:
            partials.setdefault(p, []).append(m)
    for p, dims in partials.items():
        for k in range(2, len(dims) + 1):
            for subset in itertools.combinations(dims, k):
                yield "all_reduce", subset, p, _R, (replaced(placements, {m: _R for m in subset}), order)
                for perm in itertools.permutations(subset):
                    for e in range(ndim):
                        moved = dict(orders)
                        moved[e] = moved.get(e, ()) + perm
                        yield "reduce_scatter", perm, p, Shard(e), (
                            replaced(placements, {m: Shard(e) for m in perm}),
                            freeze_order(moved),
                        )


def kind_cost(kind: str, k: int, local: float, model: CostModel) -> float:
    """The cost of a step of ``kind`` over a group of ``k`` ranks on local blocks of ``local`` bytes.

    A Python float whatever number type the model returns (NumPy's float32, a Fraction): the
    searches add and compare in float64 alike, compiled or not (dtensor_np.native).
    """
    if kind == "all_gather":
        return float(model.collective(k, (k - 1) * local))
    if kind == "all_reduce":
        return float(model.collective(k, 2 * (k - 1) / k * local))
    if kind in ("reduce_scatter", "all_to_all"):
        return float(model.collective(k, (k - 1) / k * local))
    if kind == "chunk":
        return float(model.local(local / k))
    return float(model.local(local))


def step_cost(kind: str, dims: tuple[int, ...], state: SearchState, nbytes: int, mesh_shape: tuple[int, ...], model: CostModel) -> float:
    """The cost of a step out of ``state`` (``nbytes``: the global array's size)."""
    local = nbytes / _num_shards(state, mesh_shape)
    k = 1
    for m in dims:
        k *= mesh_shape[m]
    return kind_cost(kind, k, local, model)


def path_cost(path: Sequence[Move], start: SearchState, nbytes: int, mesh_shape: tuple[int, ...], model: CostModel) -> float:
    """The cost of a path from ``start``, step costs added in order (as both searches add them)."""
    cost = 0.0
    state = start
    for kind, dims, _a, _b, nxt in path:
        cost = cost + step_cost(kind, dims, state, nbytes, mesh_shape, model)
        state = nxt
    return cost
