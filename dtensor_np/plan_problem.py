"""One redistribute problem as the planner's search sees it: internal moves, their walks, its search core.

A path is searched as internal moves (kind, mesh dims, tensor dim landed on
or -1) over internal states (stacks, Partial mask): per tensor dim the mesh
dims that split it, outermost first, and a bit per mesh dim holding Partial
(its reduce op is fixed: the source's, or the target's when it comes from
Replicate); a mesh dim in neither is Replicate.  :class:`Problem` turns paths
of the graph (:mod:`dtensor_np.plan_graph`) into internal moves and back,
walks them (each move's cost, the states and numbers of shards on the way:
the local rewrites' measure, :mod:`dtensor_np.plan_rewrites`) and holds the
searches over int-keyed states (:class:`dtensor_np.plan_core.Core`, compiled
where the install built it; a problem beyond that build's fixed sizes runs the
same text as Python, :func:`dtensor_np.native.twin`).

Example:
    >>> from dtensor_np import DeviceMesh, Shard, Replicate, DTensorSpec, TensorMeta
    >>> from dtensor_np.plan_graph import search_state
    >>> src = DTensorSpec(DeviceMesh((2, 2)), (Shard(0), Shard(0)), TensorMeta((8, 8), "f4"))
    >>> pb = Problem(search_state(src), search_state(src.with_placements((Replicate(),) * 2)), (2, 2), 2, 256,
    ...              CostModel(), 2)
    >>> pb.walk((("all_gather", (1,), -1), ("all_gather", (0,), -1)))[0]
    [5.0128, 5.0256]
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

from . import native, plan_core
from .cost_model import CostModel
from .placements import Partial, Placement, Replicate, Shard
from .plan_graph import COLLECTIVES, Move, SearchState, freeze_order, replaced

__all__ = ["IMove", "IState", "Problem", "Walk", "collectives", "growth", "shards_after"]

# an internal state: (stacks, Partial mask)
IState = tuple[tuple[tuple[int, ...], ...], int]
# an internal move: (kind, mesh dims, tensor dim it lands on or -1)
IMove = tuple[str, tuple[int, ...], int]
# a walk of moves (Problem.walk): each move's cost, the states and numbers of shards before each move and
# after the last
Walk = tuple[list[float], list[IState], list[int]]

_R = Replicate()
_KIND_CODES = {kind: code for code, kind in enumerate(plan_core.KINDS)}


def growth(kind: str) -> int:
    """How a move of ``kind`` changes the number of shards: 1 multiplies it by the group's size (a
    chunk, a reduce_scatter), -1 divides it (an all_gather), 0 keeps it."""
    if kind == "chunk" or kind == "reduce_scatter":
        return 1
    return -1 if kind == "all_gather" else 0


def shards_after(kind: str, k: int, shards: int) -> int:
    """The number of shards after a move of ``kind`` over a group of ``k`` ranks from ``shards``.

    Example:
        >>> shards_after("all_gather", 2, 8), shards_after("chunk", 2, 8), shards_after("all_to_all", 2, 8)
        (4, 16, 8)
    """
    grow = growth(kind)
    return shards * k if grow > 0 else shards // k if grow else shards


def collectives(imoves: Sequence[IMove]) -> int:
    """The number of collectives among ``imoves``."""
    return sum(kind in COLLECTIVES for kind, _, _ in imoves)


class Problem:
    """A search problem: the start and goal states, the array's bytes, the cost model, the cap on the
    collectives (``bound``; None: none) and the search core (:attr:`core`)."""

    def __init__(self, start: SearchState, goal: SearchState, mesh_shape: tuple[int, ...], ndim: int,
                 nbytes: int, model: CostModel, bound: Optional[int]) -> None:
        self.mesh_shape = mesh_shape
        self.ndim = ndim
        self.nbytes = nbytes
        self.model = model
        self.bound = bound
        self.ext_start = start
        self.live = tuple(m for m, p in enumerate(start[0]) if p is not None)
        self.op: dict[int, Partial] = {}  # per mesh dim: its reduce op
        for m in self.live:
            for p in (start[0][m], goal[0][m]):
                if isinstance(p, Partial):
                    self.op.setdefault(m, p)
        self.start = self.istate(start)
        self.goal = self.istate(goal)
        self.goal_stacks, self.goal_pmask = self.goal
        self._product: dict[int, int] = {0: 1}
        self.start_shards = self.product(self.stacked(self.start[0]))
        self._pending: dict[int, dict[Partial, int]] = {}
        self._walks: dict[tuple[IMove, ...], Optional[Walk]] = {}  # whole paths from the start, walked
        self.walked = 0  # moves walked by walk(), the measure of the rewrites' work
        linear = type(model).collective is CostModel.collective and type(model).local is CostModel.local
        self.linear = linear  # CostModel's costs (park_early prices its candidates by them)
        self.latency = model.latency_us if linear else 0.0
        self.inv_bw = 1.0 / model.bytes_per_us if linear else 0.0
        self.local_bytes_per_us = model.local_bytes_per_us if linear else 1.0
        # per mesh dim its reduce op as a small int (the core groups by it without hashing a Partial)
        ops = list(dict.fromkeys(self.op.values()))
        self.op_id = op_id = [-1] * len(mesh_shape)
        for m, p in self.op.items():
            op_id[m] = ops.index(p)
        # beyond the build's sizes: the same text as Python (Any: compiled, a module would be looked up by name)
        fits = plan_core.fits(len(self.live), ndim, len(mesh_shape), nbytes, math.prod(mesh_shape))
        module: Any = plan_core if fits else native.twin("dtensor_np.plan_core")
        self.core = module.Core(self.live, mesh_shape, ndim, nbytes, self.start, self.goal, op_id, model, bound)

    def istate(self, state: SearchState) -> IState:
        """The internal state of a graph state."""
        orders = dict(state[1])
        stacks = tuple(tuple(orders.get(d, ())) for d in range(self.ndim))
        pmask = sum(1 << m for m in self.live if isinstance(state[0][m], Partial))
        return stacks, pmask

    def step_cost(self, kind: str, k: int, local: float) -> float:
        """The cost of a move of ``kind`` over ``k`` ranks on local blocks of ``local`` bytes (the core's)."""
        return self.core.cost(_KIND_CODES[kind], k, local)

    @staticmethod
    def stacked(stacks: tuple[tuple[int, ...], ...]) -> int:
        """The mask of the mesh dims that split a tensor dim in ``stacks``."""
        mask = 0
        for s in stacks:
            for m in s:
                mask |= 1 << m
        return mask

    def product(self, mask: int) -> int:
        """The number of ranks of the mesh dims in ``mask``."""
        got = self._product.get(mask)
        if got is None:
            got = 1
            for m in self.live:
                if mask >> m & 1:
                    got *= self.mesh_shape[m]
            self._product[mask] = got
        return got

    def info(self, stacks: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], int]:
        """Of a state's stacks: (per tensor dim, the length of its settled prefix: the splits it shares
        with the target's from the outermost; the mask of the stacked mesh dims)."""
        settled = []
        for s, goal in zip(stacks, self.goal_stacks):
            n = 0
            while n < len(s) and n < len(goal) and s[n] == goal[n]:
                n += 1
            settled.append(n)
        return tuple(settled), self.stacked(stacks)

    def pending_ops(self, pmask: int) -> dict[Partial, int]:
        """Of a state's Partial mesh dims: for every reduce op still to reduce (the target does not
        keep it), the mask of its mesh dims."""
        got = self._pending.get(pmask)
        if got is None:
            got = {}
            for m in self.live:
                if (pmask & ~self.goal_pmask) >> m & 1:
                    got[self.op[m]] = got.get(self.op[m], 0) | 1 << m
            self._pending[pmask] = got
        return got

    @staticmethod
    def top_of(stacks: tuple[tuple[int, ...], ...], dims: tuple[int, ...]) -> int:
        """The tensor dim whose innermost splits are ``dims`` (in that order), or -1."""
        n = len(dims)
        for d, s in enumerate(stacks):
            if len(s) >= n and s[len(s) - n:] == dims:
                return d
        return -1

    def apply(self, state: IState, move: IMove) -> Optional[IState]:
        """The state after an internal move, or None where it is not a move of the graph
        (:func:`dtensor_np.plan_graph.moves`): an all_gather of mesh dims that are not the top of one
        stack in that order, an all_to_all of more than one mesh dim or onto its own stack, a chunk of
        a mesh dim that is split or Partial, a partition the target does not want, a reduction of mesh
        dims that are not all pending under one reduce op, a push without a tensor dim or a non-push
        with one."""
        stacks, pmask = state
        kind, dims, e = move
        n = len(dims)
        bits = 0
        for m in dims:
            bits |= 1 << m
        pushes = kind in ("all_to_all", "chunk", "reduce_scatter")
        if n == 0 or (e >= 0) != pushes or e >= self.ndim:
            return None
        if kind == "all_gather" or kind == "all_to_all":
            if kind == "all_to_all" and n != 1:
                return None
            d = self.top_of(stacks, dims)
            if d < 0 or d == e:
                return None
            stacks = stacks[:d] + (stacks[d][:len(stacks[d]) - n],) + stacks[d + 1:]
        elif kind == "reduce_scatter" or kind == "all_reduce":
            pending = pmask & ~self.goal_pmask
            if pending & bits != bits or len({self.op[m] for m in dims}) != 1:
                return None
            pmask &= ~bits
        elif kind == "chunk" or kind == "partition":
            if n != 1 or pmask & bits or any(dims[0] in s for s in stacks):
                return None
            if kind == "partition":
                if not self.goal_pmask & bits:
                    return None
                pmask |= bits
        else:
            return None
        if e >= 0:
            stacks = stacks[:e] + (stacks[e] + dims,) + stacks[e + 1:]
        return stacks, pmask

    def fallback(self) -> tuple[IMove, ...]:
        """A path that always exists: every stack's unsettled part popped in one all_gather, every
        reduce op's pending mesh dims in one all_reduce, then every target slot filled by a chunk,
        in order, and every Partial the target adds made by a partition (the first incumbent
        where there is no greedy plan: shard orders other than the default)."""
        stacks, pmask = self.start
        settled_len = self.info(stacks)[0]
        path: list[IMove] = []
        for d, s in enumerate(stacks):
            if len(s) > settled_len[d]:
                path.append(("all_gather", s[settled_len[d]:], -1))
        for bits in self.pending_ops(pmask).values():
            path.append(("all_reduce", tuple(m for m in self.live if bits >> m & 1), -1))
        for e, goal in enumerate(self.goal_stacks):
            path.extend(("chunk", (m,), e) for m in goal[settled_len[e]:])
        path.extend(("partition", (m,), -1) for m in self.live if (self.goal_pmask & ~pmask) >> m & 1)
        return tuple(path)

    def walk(self, imoves: Sequence[IMove], state: Optional[IState] = None,
             shards: Optional[int] = None) -> Optional[Walk]:
        """Internal moves from ``state`` (of ``shards`` shards; the start by default): each move's
        cost, and the states and numbers of shards before each move and after the last; None if
        a move does not apply.  Walks of whole paths from the start are cached: the lists are
        shared, read them only.  :attr:`walked` counts the moves walked (not those served from
        the cache)."""
        if state is None:
            key = tuple(imoves)
            if key not in self._walks:
                self._walks[key] = self.walk(key, self.start, self.start_shards)
            return self._walks[key]
        assert shards is not None
        self.walked += len(imoves)
        costs: list[float] = []
        states, counts = [state], [shards]
        for move in imoves:
            bits = 0
            for m in move[1]:
                bits |= 1 << m
            k = self.product(bits)
            costs.append(self.step_cost(move[0], k, self.nbytes / shards))
            state = self.apply(state, move)  # type: ignore[assignment]
            if state is None:
                return None
            shards = shards_after(move[0], k, shards)
            states.append(state)
            counts.append(shards)
        return costs, states, counts

    def rewalk(self, imoves: Sequence[IMove], walked: Walk, same: int) -> Optional[Walk]:
        """:meth:`walk` of a path from the start whose first ``same`` moves are those of the walked
        path ``walked`` (:meth:`walk` of it): only the moves after them are walked.  Cached as
        :meth:`walk` caches."""
        key = tuple(imoves)
        if key not in self._walks:
            costs, states, counts = walked
            tail = self.walk(key[same:], states[same], counts[same])
            self._walks[key] = None if tail is None else (
                costs[:same] + tail[0], states[:same] + tail[1], counts[:same] + tail[2])
        return self._walks[key]

    def reaches_goal(self, imoves: Sequence[IMove], walked: Optional[Walk]) -> bool:
        """Whether ``walked`` (:meth:`walk` of ``imoves``) ends at the goal with no more collectives than the cap."""
        return walked is not None and walked[1][-1] == self.goal and (
            self.bound is None or collectives(imoves) <= self.bound)

    @staticmethod
    def internal(path: Sequence[Move]) -> tuple[IMove, ...]:
        """A path of graph moves as internal moves: the inverse of :meth:`external`."""
        return tuple((kind, dims, b.dim if isinstance(b, Shard) else -1) for kind, dims, _a, b, _ in path)

    def external(self, imoves: Sequence[IMove]) -> tuple[Move, ...]:
        """Internal moves as a path of graph moves (the states the exhaustive search names)."""
        path: list = []  # of Move (the placements before a move may be None only on size-1 mesh dims)
        placements, order = self.ext_start
        for kind, dims, e in imoves:
            orders = dict(order)
            a = placements[dims[0]]
            if kind in ("all_gather", "all_to_all"):
                d = a.dim  # type: ignore[union-attr]
                orders[d] = orders[d][: len(orders[d]) - len(dims)]
            if e >= 0:
                b: Placement = Shard(e)
                orders[e] = orders.get(e, ()) + dims
            elif kind == "partition":
                b = self.op[dims[0]]
            else:
                b = _R
            placements = replaced(placements, {m: b for m in dims})
            order = freeze_order(orders)
            path.append((kind, dims, a, b, (placements, order)))
        return tuple(path)
