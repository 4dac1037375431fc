"""The redistribute planner's search: the cheapest path over (placements, shard order) states.

The graph (:mod:`dtensor_np.plan_graph`): a state is the placements on the mesh dims of size > 1
and the shard order; a move is one collective or local step, costing latency plus bytes over
bandwidth; a path may use at most as many collectives as PyTorch's greedy plan (the cap).
:func:`exhaustive_path` (Dijkstra over every (state, collectives used)) is the oracle.

The search (:func:`search_path`; its A* and probes are :mod:`dtensor_np.plan_core`, compiled where
the install built it) is A* under the cap with a consistent lower bound (the potential -X/bandwidth,
X the local size: a latency per collective still needed plus the bytes of the pushes, reductions
and all_to_alls in their cheapest order), sharpened where no collective is spare (admissible), and
pruned at the cheapest path so far, first the greedy plan replayed as moves.  ``FULL`` looks at every
move but two kinds no cheapest path needs; ``LANDING`` only at moves that land a mesh dim in its
target slot, undo a split or reduce.  Up to :data:`EXACT_DIMS` mesh dims of size > 1 ``FULL`` runs
alone (within :data:`EXACT_BUDGET`, or :data:`UNCAPPED_BUDGET` with no cap), then, if it did not
finish, the probes with :data:`RESCUE_BUDGET`.  From 5 on the probes run first (``LANDING`` searches
from the start and from every state within :func:`_probe_depth` moves of it, best first, sharing a
table of expanded states; :data:`BUDGET`, :data:`WIDE_BUDGET` from :data:`WIDE_DIMS`), ``FULL``
gets the rest.  A plan not proved optimal is improved by :mod:`dtensor_np.plan_rewrites` from the
best path, the greedy plan and the probes' last beaten paths; the cheapest is kept.

Guarantees: never more collectives than the cap, never costlier than the greedy plan; the cost of
:func:`exhaustive_path` whenever ``FULL`` finishes (``"exact"``; always with ``budget=math.inf``,
as ``plan_redistribute(..., exact=True)`` asks), else ``"approximate"`` (``"greedy"`` where nothing
beat the greedy plan).  Budgets count work (moves looked at, expansions, sharper bounds), not time:
every rank plans the same steps, compiled or not.

Complexity: a move is O(tensor dims + mesh dims), a search O(budget (tensor dims + mesh dims)), a
rewrite O(:data:`REWRITE_MOVES` (tensor dims + mesh dims)); with no budget, the number of states,
exponential in the mesh dims.  Measured (benchmarks/README.md, planner): compiled, 0.02 to 0.2 ms
median a plan up to 5 mesh dims, 0.6 ms on 2x2x2x2x2x2, about 1 ms at most; as Python, up to 33 ms.

Example:
    >>> from dtensor_np import DeviceMesh, Shard, Replicate, DTensorSpec, TensorMeta
    >>> src = DTensorSpec(DeviceMesh((2, 2)), (Shard(0), Shard(0)), TensorMeta((8, 8), "f4"))
    >>> dst = src.with_placements((Replicate(), Replicate()))
    >>> result = search_path(search_state(src), search_state(dst), (2, 2), 2, 256, CostModel(), 2)
    >>> [(kind, dims) for kind, dims, *_ in result.path], result.method
    ([('all_gather', (0, 1))], 'exact')
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from dataclasses import dataclass
from typing import Optional, Sequence

from .cost_model import CostModel
from .placements import Partial, Placement, Shard
from .plan_core import FULL
from .plan_graph import (COLLECTIVES, Move, SearchState, freeze_order, moves, path_cost, replaced, search_state,
                         step_cost)
from .plan_problem import IMove, Problem
from .plan_rewrites import improve_locally

__all__ = [
    "CostModel",
    "SearchState",
    "Move",
    "SearchResult",
    "COLLECTIVES",
    "freeze_order",
    "search_state",
    "moves",
    "step_cost",
    "path_cost",
    "exhaustive_path",
    "greedy_path",
    "search_path",
]

# The budgets, in work units (benchmarks/README.md, planner: how each was chosen).  From 5 mesh dims
# of size > 1: the probes and then the full search within BUDGET, from WIDE_DIMS on WIDE_BUDGET.
BUDGET: float = 7600
WIDE_DIMS = 6
WIDE_BUDGET: float = 6000
# Up to EXACT_DIMS: the full search alone, within EXACT_BUDGET (UNCAPPED_BUDGET with no greedy plan,
# so no cap); where it does not finish, the probes within RESCUE_BUDGET.
EXACT_DIMS = 4
EXACT_BUDGET: float = 5000
UNCAPPED_BUDGET: float = 5000
RESCUE_BUDGET: float = 1000
# The probes branch PROBE_DEPTH moves from the start up to PROBE_DEPTH_DIMS mesh dims of size > 1,
# one less per mesh dim beyond; the first probe looks at PROBE_ROOT moves at most, each other at
# PROBE_MOVES.
PROBE_DEPTH = 3
PROBE_DEPTH_DIMS = 6
PROBE_MOVES: float = 100
PROBE_ROOT: float = 150
# The local rewrites start no round past REWRITE_MOVES walked moves a call; besides the best path
# they rewrite the greedy plan (IMPROVE_GREEDY) and the IMPROVE_SUPERSEDED last paths the probes beat.
REWRITE_MOVES: float = 100
IMPROVE_GREEDY = True
IMPROVE_SUPERSEDED = 4


def exhaustive_path(
    start: SearchState, goal: SearchState, mesh_shape: tuple[int, ...], ndim: int, nbytes: int,
    model: CostModel, bound: Optional[int], time_limit_s: Optional[float] = None,
) -> Optional[tuple[Move, ...]]:
    """The cheapest path with at most ``bound`` collectives: Dijkstra over (state, collectives used).

    Exponential in the number of mesh dims; kept as the oracle the faster
    search is tested against.  None when no path exists.  ``time_limit_s``
    (for benchmarks) raises ``TimeoutError`` once the search has run that long.
    """
    tie = itertools.count()
    frontier: list = [(0.0, 0, next(tie), start, 0, ())]
    best: dict[tuple[SearchState, int], float] = {(start, 0): 0.0}
    deadline = None if time_limit_s is None else time.perf_counter() + time_limit_s
    pops = 0
    while frontier:
        pops += 1
        if deadline is not None and pops % 256 == 0 and time.perf_counter() > deadline:
            raise TimeoutError(f"the exhaustive search ran past {time_limit_s} s")
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
        placements = replaced(placements, {m: b})
        order = freeze_order(orders)
        path.append((kind, (m,), a, b, (placements, order)))
    if goal is not None and (placements, order) != goal:
        return None
    return tuple(path)


@dataclass(frozen=True)
class SearchResult:
    """A path and how it was found.

    ``method`` is ``"exact"`` (the full search finished: no cheaper path
    exists), ``"approximate"`` (it ran out of its budget; the path is the
    cheapest the restricted searches found, or the greedy plan (or, with no
    greedy plan, :meth:`~dtensor_np.plan_problem.Problem.fallback`) improved by :func:`~dtensor_np.plan_rewrites.improve_locally`,
    see the module docstring) or ``"greedy"`` (likewise, and nothing beat the
    greedy plan).  ``work`` counts the moves the searches looked at, and in the
    full search its expansions and sharper bounds too
    (:data:`~dtensor_np.plan_core.EXPAND_WORK`, :data:`~dtensor_np.plan_core.TIGHT_WORK`).
    """

    path: tuple[Move, ...]
    cost: float
    method: str
    work: int


def _probe_depth(live: int) -> int:
    """How many ``FULL`` moves the probes branch from the start, for ``live`` mesh dims of size > 1:
    :data:`PROBE_DEPTH` up to :data:`PROBE_DEPTH_DIMS`, one less per mesh dim beyond."""
    return max(0, min(PROBE_DEPTH, PROBE_DEPTH + PROBE_DEPTH_DIMS - live))


def search_path(
    start: SearchState, goal: SearchState, mesh_shape: tuple[int, ...], ndim: int, nbytes: int,
    model: CostModel, bound: Optional[int], greedy: Optional[tuple[Move, ...]] = None,
    budget: Optional[float] = None,
) -> SearchResult:
    """The cheapest path with at most ``bound`` collectives, or the best fallback within the budget.

    ``greedy`` is the greedy plan as a path (:func:`greedy_path`), an upper
    bound the result never exceeds.  ``budget`` overrides the budget that the
    number of mesh dims of size > 1 gives (:data:`EXACT_BUDGET`, :data:`UNCAPPED_BUDGET`,
    :data:`BUDGET`, :data:`WIDE_BUDGET`); given one, the probes run first on any mesh
    (``math.inf``: the full search alone, always exact).
    """
    if start == goal:
        return SearchResult((), 0.0, "exact", 0)
    pb = Problem(start, goal, mesh_shape, ndim, nbytes, model, bound)
    live = len(pb.live)
    full_alone = budget is None and live <= EXACT_DIMS  # (module docstring)
    total: float
    if budget is not None:
        total = budget
    elif full_alone:
        total = EXACT_BUDGET if bound is not None else UNCAPPED_BUDGET
    else:
        total = BUDGET if live < WIDE_DIMS else WIDE_BUDGET
    # the best path so far, as internal moves (converted once, at the end)
    best_moves: Optional[tuple[IMove, ...]] = None
    best_cost = math.inf
    method = "greedy"
    greedy_moves: Optional[tuple[IMove, ...]] = None
    if greedy is not None:
        greedy_moves = pb.internal(greedy)
        best_moves, best_cost = greedy_moves, path_cost(greedy, start, nbytes, mesh_shape, model)
    else:  # no greedy plan (shard orders other than the default): a simple one, if within the cap
        simple = pb.fallback()
        walked = pb.walk(simple)
        if pb.reaches_goal(simple, walked):
            best_moves, best_cost, method = simple, sum(walked[0]), "approximate"  # type: ignore[index]
    work = 0
    superseded: list[tuple[IMove, ...]] = []  # the probes' paths that a cheaper one beat, in order

    def probe(most: float) -> None:
        nonlocal best_moves, best_cost, method, work
        found, cost, _, spent, beaten = pb.core.probes(most, best_cost, _probe_depth(live), PROBE_ROOT, PROBE_MOVES)
        work += spent
        superseded.extend(tuple(path) for path in beaten)
        if found is not None:
            best_moves, best_cost, method = tuple(found), cost, "approximate"

    if not full_alone and total < math.inf:  # with no limit the full search alone decides
        probe(total)
    # ties: among plans as cheap as the best so far, the full search's own pick (most often the
    # exhaustive search's too)
    found, cost, complete, spent = pb.core.astar(FULL, max(0, total - work), best_cost, True)
    work += spent
    if found is not None:
        return SearchResult(pb.external(found), cost, "exact", work)
    if full_alone and not complete:  # it ran out of its budget (rare): the probes, briefly
        probe(RESCUE_BUDGET)
    if best_moves is None:  # a cap with no greedy plan to meet it, and the budget spent
        raise ValueError(f"no path from {start} to {goal} with at most {bound} collectives within the budget")
    if complete:
        method = "exact"
    else:  # not proved optimal: improved by local rewrites, from other starts too (the cheapest kept)
        starts = [greedy_moves] if IMPROVE_GREEDY and greedy_moves is not None and method != "greedy" else []
        starts += superseded[::-1][:IMPROVE_SUPERSEDED]
        improved, cost = improve_locally(pb, best_moves, REWRITE_MOVES)
        for other_start in starts:
            other, other_cost = improve_locally(pb, other_start, REWRITE_MOVES)
            if other_cost < cost:
                improved, cost = other, other_cost
        if cost < best_cost:
            best_moves, best_cost, method = improved, cost, "approximate"
    best_path = greedy if greedy is not None and method == "greedy" else pb.external(best_moves)
    return SearchResult(best_path, best_cost, method, work)
