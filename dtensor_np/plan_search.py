"""The redistribute planner's search: the cheapest path over (placements, shard order) states.

The graph.  A state is the placements on the mesh dims of size > 1 plus the
shard order; a move is one step of the table in :mod:`dtensor_np.planner`
(all_gather, all_to_all, all_reduce, reduce_scatter, chunk, partition, merged
collectives over several mesh dims).  A step costs latency plus bytes over
bandwidth (:class:`CostModel`), its bytes a multiple of the local size
``X = N / F`` (``N`` the array's bytes, ``F`` the number of shards).  A path
may use at most as many collectives as PyTorch's greedy plan (the *cap*).
:func:`exhaustive_path` is Dijkstra over every (state, collectives used): the
oracle, exponential in the number of mesh dims (seconds on 6 of them).

The search (:func:`search_path`) is A* over the same graph, with move
families that leave out moves, every search under the cap and pruned at the
cost of the best path found so far (the first: the greedy plan itself,
replayed as moves):

* ``LANDING``: every move puts mesh dims where the target has them (a
  reduce_scatter or all_to_all or chunk into the next slot of a tensor dim
  whose outer splits already match the target), or undoes a split (all_gather,
  merged too) or reduces (all_reduce of all of one reduce op's pending mesh
  dims at once, or of those the target replicates).
* ``FULL``: every move of the graph.  Finishing it proves the path optimal.

Up to :data:`EXACT_DIMS` (4) mesh dims of size > 1, ``FULL`` runs alone (an
incumbent would prune nothing it expands: the work of A* is the states below
the optimum), within :data:`EXACT_BUDGET` (with no greedy plan, so no cap on
the collectives, :data:`UNCAPPED_BUDGET`).  It finishes on all 1,182
``--mixed`` pairs of up to 3 such mesh dims of benchmarks/planner.py's seeds 0
to 5 (588 work units at most, below), on every one of its 480 seeded pairs of
4 (seeds 0 to 7; 1,045 at most) and of 3,000 more (seeds 8 to 32 on 2x2x2x2,
4x4x4x4, 2x3x4x2 and 1x2x2x1x2x2; 1,452 at most), and on all 319 ``--mixed``
pairs of 4 (2,881 at most, a pair with no greedy plan).  Where it does not
finish, ``PROBES`` (below) runs after it with :data:`RESCUE_BUDGET`.  From 5
mesh dims on, the ``FULL`` search needs more (median 1,040 work units on
2x2x2x2x2, 590 on 8x8x4x2x2, 7,540 on 2x2x2x2x2x2, up to 134,610; seeds 0 to
3) and finishes within the budget on 449 of the 480 seeded pairs of 5 mesh
dims of seeds 0 to 7 but on 84 of 240 of 6, so
``PROBES`` first looks for a cheap path: ``LANDING`` searches from the start
(at most :data:`PROBE_ROOT` moves) and from every state within
:func:`_probe_depth` moves of it (any ``FULL`` move; at most
:data:`PROBE_MOVES` moves each; 3 moves up to 6 mesh dims), taken best first
by the lower bound and dropped once it reaches the best cost so far, the
searches sharing one table of expanded states (none expands a state that an
earlier one expanded from no more cost and collectives).  The cheapest plans
that ``LANDING`` misses start with moves it leaves out, mostly among their
first two: a chunk, reduce_scatter or all_to_all onto a tensor dim the target
does not split there (one still to be gathered, or one already as the target
wants it), shrinking the array for the collectives after it, the mesh dim
gathered later with the rest of that tensor dim.  A ``LANDING`` search is
short (10 to 60 moves).  ``FULL`` then gets what is left of the budget.
Branching 3 moves deep matches the exhaustive search's cost on 1,171 of the
1,200 benchmark pairs of 4 to 6 mesh dims (seeds 0 to 7; 1,170 with the
eighth version's budget on 5 mesh dims), 2 moves deep on 1,151 at that
version's budgets (before ``LANDING`` used the sharper bound below:
1,167) (2 moves deep on 1,042 at the seventh version's,
which were 10 times smaller, 1 and 0 moves deep on 953); branching deeper
made the *shrunk starts* (every pending reduction reduce_scattered and every
Replicate mesh dim chunked onto one tensor dim before a probe, from 5 mesh
dims on) a loss, and they were dropped (benchmarks/README.md).

The searches run in C.  :func:`_astar` (``FULL`` and ``LANDING``) and
:func:`_probes` hand a problem to :class:`dtensor_np._search_core.Core`
(dtensor_np/_search_core.pyx, built by Cython at install, :func:`_core`),
which runs the same search over the same int keys: the same moves in the same
order, the same float arithmetic in the same order, the same tie-breaks and
work count, so the same path, cost and work (tests/test_search_core.py
compares them on benchmark pairs and on hypothesis pairs at several budgets).
A move takes about 0.08 us there against 0.6 to 1 us in this module compiled
by mypyc; without a build this module's own searches run.

``PARKING`` (``LANDING`` plus reduce_scatter onto any tensor dim, in mesh dim
order or its reverse) is kept for experiments (:data:`STAGES`).  Before
``PROBES``, it and ``PRECHUNKED`` (``LANDING`` after every Replicate mesh dim
is chunked onto one tensor dim) ran in turn before ``FULL``; ``PROBES`` in
their place matches the exhaustive search's cost on more pairs for the same
budget (benchmarks/README.md).

Every family leaves out two kinds of move that no cheapest path needs: undoing
a split the target keeps under the same outer splits (a settled prefix of a
tensor dim: popping it only grows the array and pushes it back), and pushing
onto the second of two tensor dims that are empty now and in the target (the
two are interchangeable).  With no collective to spare (the collectives used
plus the fewest the state still needs reach the cap: one per tensor dim with
a split to undo, one per reduce op pending) they also leave out every move
that would need one more: a pop of part of a tensor dim's unsettled splits
(all of them go in one all_gather, or one all_to_all if there is one), a push
onto a settled tensor dim other than into its target slot (parking only on a
tensor dim still to be popped), a reduction of part of a reduce op's mesh
dims.

The lower bound.  With the potential ``-X / bandwidth``, an all_gather costs
only its latency and a push that splits a k-way mesh dim costs ``(1 - 1/k) X``
(chunk), a reduction ``2 (1 - 1/k) X`` (reduce_scatter, all_reduce), an
all_to_all ``(1 - 1/k) X``.  The bound is the potential plus the latency of
one collective for each tensor dim with a split to undo and each reduce op
pending, plus those bytes in their cheapest order: the pushes of every
unsharded mesh dim the target shards (and, when that helps, of every spare
one) first, the reductions next, the all_to_alls last; also priced at the
least local size any state has.  The count of collectives also prunes every
path that cannot end within the cap.  It is consistent, but it prices every
push as if it came first, while a target's split order or two tensor dims
that swap mesh dims force pushes after collectives: it starts at 0.46 to 0.76
of the optimum (median) from 4 mesh dims on.

``FULL`` sharpens it where no collective is spare (57 to 82 % of the visits it
pops on meshes of 4 to 6 dims; :meth:`_Problem.tight`, worked out when a visit is
popped and the visit pushed back if it rises), and so do the probes'
``LANDING`` searches (at the ninth version's budgets, 1,170 instead of 1,167
benchmark pairs as cheap as the exhaustive search's plan, 1,008 instead of 994
proved optimal): then each tensor dim with a
split to undo pops all of it in one collective, at the local size that the
pushes its own mesh dims do not block leave, and each other such tensor dim
popped first gathers what of it cannot be pushed back; something parked on a
tensor dim still to be popped makes that pop an all_gather of more than its
own splits.  This bound is admissible, not consistent, so a state may be
expanded again when reached more cheaply: a visit is dominated only by an
earlier expanded one with no more collectives and no more cost.  With it the
full search expands 2.5 to 4.4 times fewer states (median) on 4 to 6 mesh dims
and takes 1.2 to 2.2 times less time to prove a plan optimal (benchmarks/README.md;
the same plans' costs).  Checked against the exhaustive search on 450 pairs of
benchmarks/planner.py's meshes of 4 and 5 dims and 2,500 random pairs of up to 4
mesh dims of size > 1, and in the tests (tests/test_planner_search.py).

Budget.  The searches count their work: the moves they look at (the probes'
own first moves too), and in ``FULL`` also :data:`EXPAND_WORK` per expansion
and :data:`TIGHT_WORK` per sharper bound worked out (they take about that many
moves' time).  Up to :data:`EXACT_DIMS` mesh dims of size > 1 ``FULL`` alone
stops at :data:`EXACT_BUDGET` (:data:`UNCAPPED_BUDGET` with no cap); from
there on the probes stop at :data:`BUDGET` (5 mesh dims) or
:data:`WIDE_BUDGET` (from :data:`WIDE_DIMS` on: there a move costs more time,
more of the states it reaches are new, each with its bound to work out),
``FULL`` at what is left.  The count is deterministic, so every rank plans the
same steps, whether the C core, this module compiled by mypyc or its source
runs.  A move is O(ndim + mesh dims) work.  The searches name a state by an
int (each mesh dim's place and Partial flag packed: :meth:`_Problem.key`), work
out a new state's bound from it without building the state
(:meth:`_Problem.bound_of`), and build a state's stacks only to expand it
(:meth:`_Problem.view`): a move takes ~0.08 us in the C core (0.07 to 0.11 us
from 5 to 6 mesh dims) on a 2-core VM, ~0.6 to 1 us in this module compiled by
mypyc (:mod:`dtensor_np.native`), ~3 to 4.5 us from the source.  So a search
is O(BUDGET (ndim + mesh dims)); the local rewrites after it (below) start no
round past :data:`REWRITE_MOVES` walked moves, O(mesh dims + ndim) each.
Measured with the core, the plan's specs built too: 0.01 to 0.05 ms median up
to 4 mesh dims, 0.05 to 0.15 ms on 5 and 0.64 to 0.66 ms on 2x2x2x2x2x2, at
most 0.93 ms (benchmarks/planner.py's pairs of seeds 0 to 3, their --mixed
pairs and 1,500 pairs of ``--mixed-live 5,6``; the ninth version too, in the
same session, on a VM about 10 % slower than the last one's 0.8 ms);
without a build the same plans take up to about 25 ms (benchmarks/README.md).
Weighted A*, a limited-discrepancy search, probes from the best path and
pattern databases were measured too and found no cheaper plans per unit of
work (benchmarks/README.md, ninth version).
Worst case without the budget: the number of states, exponential in the mesh
dims, as the exhaustive search.

Guarantees.  Never more collectives than greedy (the cap) and never more cost
than the greedy plan (it is the first incumbent: with default shard orders
its steps always form a path of the graph, tested); the cost of
:func:`exhaustive_path` whenever ``FULL`` finishes (``method == "exact"``;
up to :data:`EXACT_DIMS` mesh dims of size > 1 on all but the rare pairs
above, on 9 in 10 pairs of 5).  Otherwise the path is the cheapest that
:data:`STAGES` (or, where ``FULL`` ran alone, the probes after it) found
(``"approximate"``) or the greedy plan (``"greedy"``; with no greedy plan,
:meth:`_Problem.fallback`), improved by :func:`improve_locally`, as the greedy plan and the probes' last
paths that a cheaper one beat are too (:data:`IMPROVE_GREEDY`,
:data:`IMPROVE_SUPERSEDED`; the cheapest kept: from each start the rewrites
reach a different local optimum): :func:`merge_gathers` (two all_gathers made one, or
a mesh dim moved by an all_to_all onto a tensor dim gathered later, to leave
with it), :func:`park_early` (a mesh dim Replicate for a while chunked onto a
tensor dim that is gathered later, an all_reduce made a reduce_scatter onto
one, an all_gather of one mesh dim an all_to_all onto one: what is parked
leaves with that all_gather, or in one more where a collective is spare),
:func:`fold_moves` (an all_gather and a later chunk of one mesh dim made an
all_to_all, where the all_gather was or where the chunk was; a later reduction
of the same reduce op folded into an earlier reduce_scatter) and
:func:`reorder_moves` (neighbouring moves swapped so that what shrinks the
array goes first): ``"approximate"`` if that lowered the cost;
``dtensor_np.explain`` says so.  The probes and the rewrites change no
guarantee: they only lower the cost, within the cap.

On request (``plan_redistribute(..., exact=True)``, ``DTensor.redistribute(...,
exact_plan=True)``) ``budget`` is ``math.inf``: ``FULL`` alone, run to its end,
always ``"exact"``.  On benchmarks/planner.py's pairs of seeds 0 and 1 it takes
at most 0.51 ms up to 5 mesh dims and 8.9 ms on 2x2x2x2x2x2 (work up to 79,184),
and on 3,000 ``--mixed-live 5,6`` pairs 0.05 to 0.08 ms median, at most 59 ms
(work up to 425,395); there the default plan costs more on 91 (3 %: 5 of 1,486
pairs of 5 mesh dims, 86 of 1,514 of 6, 67 of the 91 with no greedy plan, so no
cap), by up to 1.8 times (``python benchmarks/planner.py --full``).

Example:
    >>> from dtensor_np import DeviceMesh, Shard, Replicate, DTensorSpec, TensorMeta
    >>> src = DTensorSpec(DeviceMesh((2, 2)), (Shard(0), Shard(0)), TensorMeta((8, 8), "f4"))
    >>> dst = src.with_placements((Replicate(), Replicate()))
    >>> result = search_path(search_state(src), search_state(dst), (2, 2), 2, 256, CostModel(), 2)
    >>> [(kind, dims) for kind, dims, *_ in result.path], result.method
    ([('all_gather', (0, 1))], 'exact')
"""

from __future__ import annotations

import gc
import heapq
import importlib
import itertools
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Final, Iterable, Iterator, Optional, Sequence, cast

from .cost_model import CostModel
from .placements import Partial, Placement, Replicate, Shard
from .spec import DTensorSpec, ShardOrder

_core_module: Any = None  # the searches in C (dtensor_np/_search_core.pyx, built by Cython at install; optional)
try:
    _core_module = importlib.import_module("dtensor_np._search_core")
except ImportError:  # pragma: no cover - a build without it searches in Python
    pass

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

COLLECTIVES = frozenset(("all_gather", "all_reduce", "reduce_scatter", "all_to_all"))

_R = Replicate()
# The cap when there is none (no greedy plan): more collectives than any path has; an int, as the
# counts it is compared with.
_UNCAPPED: Final = 1 << 30


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


# --------------------------------------------------------------------------
# the fast search
# --------------------------------------------------------------------------
# Internally a state is (stacks, partial mask): for every tensor dim the mesh
# dims that split it, outermost first, and a bit per mesh dim holding Partial
# (its reduce op is fixed: the source's, or the target's when it comes from
# Replicate).  A mesh dim in neither is Replicate.  The searches name a state
# by an int instead (_Problem.key: per mesh dim of size > 1 a field of its
# tensor dim + 1, its place in that stack and its Partial flag), which a move
# changes with a few bit operations and a table looks up without hashing tuples.
_IState = tuple[tuple[tuple[int, ...], ...], int]
# (kind, mesh dims, tensor dim it lands on or -1)
_IMove = tuple[str, tuple[int, ...], int]
# a walk of moves (_Problem.walk): each move's cost, the states and numbers of shards before each
# move and after the last
_Walk = tuple[list[float], list[_IState], list[int]]

# The move families of the search (see the module docstring).
FULL: Final = 0
LANDING: Final = 1
PARKING: Final = 2
PROBES: Final = 3


class _Problem:
    """Everything one search needs, precomputed from the source and target states."""

    def __init__(self, start: SearchState, goal: SearchState, mesh_shape: tuple[int, ...], ndim: int,
                 nbytes: int, model: CostModel, bound: Optional[int]) -> None:
        self.mesh_shape = mesh_shape
        self.ndim = ndim
        self.nbytes = nbytes
        self.model = model
        self.bound = bound
        self.ext_start = start
        self.live = tuple(m for m, p in enumerate(start[0]) if p is not None)
        self.op: dict[int, Partial] = {}
        for m in self.live:
            for p in (start[0][m], goal[0][m]):
                if isinstance(p, Partial):
                    self.op.setdefault(m, p)
        # per mesh dim: its reduce op as a small int (the searches group by it without hashing a Partial)
        ops = list(dict.fromkeys(self.op.values()))
        self.op_id = [-1] * len(mesh_shape)
        for m, p in self.op.items():
            self.op_id[m] = ops.index(p)
        self.n_ops = len(ops)
        # The searches name a state by an int (:meth:`key`): per live mesh dim a field of the tensor
        # dim + 1 it splits (0: none), its place in that stack and a flag for Partial.
        self.td_bits = max(1, ndim.bit_length())
        place_bits = self.td_bits + max(1, (len(self.live) - 1).bit_length())
        self.partial_flag = 1 << place_bits
        self.shift = [0] * len(mesh_shape)
        for i, m in enumerate(self.live):
            self.shift[m] = i * (place_bits + 1)
        # per mesh dim: the mask clearing its place (popped), the mask clearing its Partial flag
        self.clear = [~(((1 << place_bits) - 1) << self.shift[m]) for m in range(len(mesh_shape))]
        self.unflag = [~(self.partial_flag << self.shift[m]) for m in range(len(mesh_shape))]
        self.places = 0  # the places of every mesh dim, no Partial flag
        for m in self.live:
            self.places |= (self.partial_flag - 1) << self.shift[m]
        self.td_mask = (1 << self.td_bits) - 1
        self.lane = max(1, len(self.live))  # a bit per place in a stack
        # per mesh dim: its place in the target (0: none); what an all_to_all of it costs in the
        # bound (1 - 1/k where the target shards it, else 0)
        self.start = self._istate(start)
        self.goal = self._istate(goal)
        self.goal_place = [0] * len(mesh_shape)
        for d, s in enumerate(self.goal[0]):
            for pos, m in enumerate(s):
                self.goal_place[m] = (d + 1) | pos << self.td_bits
        self.weight = [0.0] * len(mesh_shape)
        for m in self.live:
            if isinstance(goal[0][m], Shard):
                self.weight[m] = 1 - 1 / mesh_shape[m]
        # view()'s tables: by key, and the stacks part of it by the key without Partial flags
        self._views: dict[int, tuple[tuple[tuple[int, ...], ...], int, tuple[int, ...], int]] = {}
        self._stacks: dict[int, tuple[tuple[tuple[int, ...], ...], tuple[int, ...], int]] = {}
        self.start_key = self.key(self.start)
        self.goal_key = self.key(self.goal)
        self.goal_stacks = self.goal[0]
        self.goal_pmask = self.goal[1]
        self.goal_shard_mask = sum(1 << m for m in self.live if isinstance(goal[0][m], Shard))
        # mesh dims the target does not shard (Replicate, or Partial from Replicate): pushes for a while
        self.spare_mask = sum(1 << m for m in self.live) & ~self.goal_shard_mask
        fall = 1
        for m in self.live:
            if not (self.start[1] & self.goal[1]) >> m & 1:
                fall *= mesh_shape[m]
        self._product: dict[int, int] = {0: 1}
        self.goal_local = nbytes / self.product(self.stacked(self.goal[0]))
        self.start_shards = self.product(self.stacked(self.start[0]))
        # tensor dims empty in the target: interchangeable while empty (only the first is pushed onto)
        self.spare = tuple(d for d in range(ndim) if not self.goal_stacks[d])
        self.all_dims = tuple(range(ndim))
        self._h: dict[int, tuple[float, int]] = {}
        self._tight: dict[int, float] = {}
        self._pending: dict[int, dict[Partial, int]] = {}
        self.live_mask = sum(1 << m for m in self.live)
        self._reduce: dict[int, tuple[int, int]] = {}
        self._walks: dict[tuple[_IMove, ...], Optional[_Walk]] = {}  # whole paths from the start, walked (the rewrites walk one often)
        self.walked = 0  # moves walked by walk(), the measure of the rewrites' work
        # The lower bound holds for CostModel's linear costs; another model searches without it.
        linear = type(model).collective is CostModel.collective and type(model).local is CostModel.local
        self.linear = linear
        self.latency = model.latency_us if linear else 0.0
        self.inv_bw = 1.0 / model.bytes_per_us if linear else 0.0
        self.bytes_per_us = model.bytes_per_us if linear else 1.0
        self.local_bytes_per_us = model.local_bytes_per_us if linear else 1.0
        self.least_local = nbytes / fall
        self.core: Any = _core(self) if USE_CORE else None

    def step_cost(self, kind: str, k: int, local: float) -> float:
        """:func:`_kind_cost`, spelled out for :class:`CostModel` (the same arithmetic, in the same order)."""
        if not self.linear:
            return _kind_cost(kind, k, local, self.model)
        if kind == "all_gather":
            return self.latency + (k - 1) * local / self.bytes_per_us
        if kind == "all_reduce":
            return self.latency + 2 * (k - 1) / k * local / self.bytes_per_us
        if kind == "reduce_scatter" or kind == "all_to_all":
            return self.latency + (k - 1) / k * local / self.bytes_per_us
        if kind == "chunk":
            return local / k / self.local_bytes_per_us
        return local / self.local_bytes_per_us

    def _istate(self, state: SearchState) -> _IState:
        orders = dict(state[1])
        stacks = tuple(tuple(orders.get(d, ())) for d in range(self.ndim))
        pmask = sum(1 << m for m in self.live if isinstance(state[0][m], Partial))
        return stacks, pmask

    def key(self, state: _IState) -> int:
        """The int that names ``state`` in the searches (their tables are keyed by it)."""
        stacks, pmask = state
        key = 0
        for d, s in enumerate(stacks):
            for pos, m in enumerate(s):
                key |= ((d + 1) | pos << self.td_bits) << self.shift[m]
        for m in self.live:
            if pmask >> m & 1:
                key |= self.partial_flag << self.shift[m]
        return key

    def view(self, key: int) -> tuple[tuple[tuple[int, ...], ...], int, tuple[int, ...], int]:
        """The state :meth:`key` names, as (stacks, Partial mask, settled prefix length per stack, mask
        of the stacked mesh dims): :meth:`info`'s first two, worked out from the key's fields."""
        got = self._views.get(key)
        if got is None:
            skey = key & self.places
            part = self._stacks.get(skey)
            if part is None:
                ndim = self.ndim
                tdb = self.td_bits
                tdm = self.td_mask
                place_mask = self.partial_flag - 1
                cols = [[-1] * self.lane for _ in range(ndim)]
                lens = [0] * ndim
                lowest = [self.lane] * ndim  # the lowest place that differs from the target's
                smask = 0
                for m in self.live:
                    place = key >> self.shift[m] & place_mask
                    if place:
                        d = (place & tdm) - 1
                        pos = place >> tdb
                        cols[d][pos] = m
                        lens[d] += 1
                        smask |= 1 << m
                        if place != self.goal_place[m] and pos < lowest[d]:
                            lowest[d] = pos
                part = self._stacks[skey] = (
                    tuple([tuple(cols[d][:lens[d]]) for d in range(ndim)]),
                    tuple([min(lowest[d], lens[d]) for d in range(ndim)]), smask)
            pmask = 0
            for m in self.live:
                if key >> self.shift[m] & self.partial_flag:
                    pmask |= 1 << m
            got = self._views[key] = (part[0], pmask, part[1], part[2])
        return got

    @staticmethod
    def stacked(stacks: tuple[tuple[int, ...], ...]) -> int:
        """The mask of the mesh dims that split a tensor dim in ``stacks`` (:meth:`info`'s second
        part, without working out the key and its view)."""
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
        """Of a state's stacks: (settled prefix length per tensor dim, mask of stacked mesh dims), as
        :meth:`view` works them out (the rewrites and :meth:`fallback` hold states, not keys)."""
        return self.view(self.key((stacks, 0)))[2:]

    def heuristic(self, key: int, shards: int) -> tuple[float, int]:
        """Of the state ``key`` (:meth:`key`): (lower bound on the cost to the goal, lower bound on the
        collectives to the goal)."""
        got = self._h.get(key)
        if got is not None:
            return got
        return self.bound_of(key, shards)

    def bound_of(self, key: int, shards: int) -> tuple[float, int]:
        """:meth:`heuristic` of a state it has not seen (worked out and kept)."""
        # of the key's fields (no stacks built: most states a search reaches are new and never
        # expanded): the stacked and Partial mesh dims, and per stack the places that differ from
        # the target's (from the lowest on, the stack is unsettled)
        smask = pmask = mis = 0
        lane = self.lane
        tdb = self.td_bits
        place_mask = self.partial_flag - 1
        for m in self.live:
            field = key >> self.shift[m]
            if field & self.partial_flag:
                pmask |= 1 << m
            place = field & place_mask
            if place:
                smask |= 1 << m
                if place != self.goal_place[m]:
                    mis |= 1 << (((place & self.td_mask) - 1) * lane + (place >> tdb))
        dirty = 0
        moving = 0.0
        if mis:
            lanes = (1 << lane) - 1
            for m in self.live:  # the mesh dims the target shards, in an unsettled part of a stack
                place = key >> self.shift[m] & place_mask
                if place and self.weight[m]:
                    lo = mis >> (((place & self.td_mask) - 1) * lane) & lanes
                    if lo and place >> tdb >= (lo & -lo).bit_length() - 1:
                        moving += self.weight[m]
            while mis:
                dirty += (mis & lanes) != 0
                mis >>= lane
        reduce = pmask & ~self.goal_pmask
        red = self._reduce.get(reduce)
        if red is None:
            red = self._reduce[reduce] = (self.product(reduce), len({self.op[m] for m in self.live if reduce >> m & 1}))
        n_coll = dirty + red[1]
        unsharded = ~smask & ~pmask
        mask = self.goal_shard_mask & unsharded
        pushes = self._product.get(mask) or self.product(mask)
        # In reduced costs (the potential takes the bytes of every all_gather), a push of a k-way
        # mesh dim costs (1 - 1/k) X, a reduction 2 (1 - 1/k) X, an all_to_all (1 - 1/k) X.  The
        # cheapest order: the pushes (of every unsharded mesh dim the target shards, and perhaps of
        # every spare one), then the reductions, then the all_to_alls: X + Y (1 - (2 - a) / red),
        # Y the local size after the pushes.
        slope = 1 - (2 - moving) / red[0]
        after = self.nbytes / shards / pushes
        if slope > 0:
            mask = self.spare_mask & unsharded
            after /= self._product.get(mask) or self.product(mask)
        # and all of them at the least local size any state has (N / F_all), in the same order
        least = (pushes * red[0] + red[0] - 2 + moving) * self.least_local - self.nbytes / shards
        h = (self.goal_local + max(after * slope, least)) * self.inv_bw + self.latency * n_coll
        got = self._h[key] = (h, n_coll)
        return got

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

    def tight(self, key: int, shards: int) -> float:
        """A lower bound on the cost to the goal for a path with no collective to spare: one that uses
        only the fewest collectives the state needs (:meth:`heuristic`'s count), one per reduce op
        pending and one per stack with an unsettled top, which then takes all of it off at once.

        A stack with an unsettled top pops it in one collective: an all_to_all if it is one mesh
        dim that lands in its target slot (or is parked on another unsettled stack), else an
        all_gather of all of it, (K - 1) X, X the local size then.  Before that pop, pushes may fill
        the target slots its own mesh dims do not block, and each other unsettled stack popped
        first gathers what of it cannot be pushed back into such slots.  Either nothing is parked
        (each other stack popped first only if that lowers X), or something is parked on an
        unsettled stack, which then gathers more than its own part: (2K - 1) X at the least with
        every free mesh dim pushed first, or (K - 1/2) X for the one popped last, which sees every
        other stack popped first (a parked mesh dim shrinks X by k and is gathered with it); every
        stack but the last may see every free mesh dim pushed first.
        """
        got = self._tight.get(key)
        if got is not None:
            return got
        stacks, pmask, settled_len, smask = self.view(key)
        local = self.nbytes / shards
        inv_bw = self.inv_bw
        latency = self.latency
        free = self.live_mask & ~smask & ~(pmask & self.goal_pmask)
        total = 0.0
        ndim = self.ndim
        dirty: list[tuple[int, tuple[int, ...], int, int]] = []
        for d in range(ndim):
            s = stacks[d]
            lo = settled_len[d]
            if len(s) > lo:
                bits = 0
                for m in s[lo:]:
                    bits |= 1 << m
                dirty.append((d, s[lo:], bits, self.product(bits)))
        chains = [self.goal_stacks[e][settled_len[e]:] for e in range(ndim)]
        before_all = local / self.product(free)  # every free mesh dim pushed first
        for bits in self.pending_ops(pmask).values():  # one collective per reduce op, a reduce_scatter at the least
            total += latency + (1 - 1 / self.product(bits)) * local / self.product(free & ~bits) * inv_bw
        if not dirty:
            self._tight[key] = total
            return total
        apart = 0.0
        parked = math.inf
        others = 0.0
        cheapest: list[float] = []
        extra: list[float] = []
        last: list[tuple[float, float]] = []
        for f, mine, on_f, k in dirty:
            top = mine[0] if len(mine) == 1 else -1
            landing = False
            reach = 0
            fall = 1.0
            pushes: dict[int, int] = {}
            for e in range(ndim):
                if e == f:
                    continue
                pushed = 0
                for m in chains[e]:
                    bit = 1 << m
                    if on_f & bit:
                        landing = landing or m == top
                        break
                    reach |= bit
                    if free & bit:
                        pushed |= bit
                n = self.product(pushed)
                fall *= n
                pushes[e] = n
            fall_apart = fall_last = fall
            for e, mine_e, on_e, k_e in dirty:
                if e != f and len(mine_e) > 1:  # popped first: an all_gather of all of it
                    net = self.product(on_e & reach) / k_e
                    fall_last *= net
                    if net < 1:  # then it may rather pop after
                        n = pushes[e]
                        if n * net > 1:
                            fall_apart *= net
                        else:
                            fall_apart /= n
            rate = (1 - 1 / k) if landing else (k - 1)
            apart += latency + rate * local / fall_apart * inv_bw
            cheap = latency + ((1 - 1 / k) if top >= 0 else (k - 1)) * before_all * inv_bw
            others += cheap
            cheapest.append(cheap)
            last.append((latency + rate * local / fall_last * inv_bw, latency + (k - 0.5) * local / fall_last * inv_bw))
            extra.append(latency + (2 * k - 1) * before_all * inv_bw - cheap)
        if len(dirty) > 1:
            for i, (alone, taking) in enumerate(last):
                # parked on another stack too, or only on the one popped last
                parked = min(parked, others - cheapest[i] + min(alone + min(x for j, x in enumerate(extra) if j != i),
                                                                taking))
        total += min(apart, parked)
        self._tight[key] = total
        return total

    def ready(self, stacks: tuple[tuple[int, ...], ...], settled_len: tuple[int, ...]) -> list[int]:
        """For every tensor dim split as the target splits it so far: the mesh dim the target splits
        it by next; -1 for the others."""
        ready = [-1] * self.ndim
        for e, s in enumerate(stacks):
            n = len(s)
            if settled_len[e] == n and n < len(self.goal_stacks[e]):
                ready[e] = self.goal_stacks[e][n]
        return ready

    def push_targets(self, stacks: tuple[tuple[int, ...], ...]) -> Sequence[int]:
        """The tensor dims a mesh dim may be pushed onto: all, but of those empty now and in the target
        only the first (they are interchangeable)."""
        if not self.spare:
            return self.all_dims
        targets = [e for e in self.all_dims if stacks[e] or e not in self.spare]
        for e in self.spare:
            if not stacks[e]:
                targets.append(e)
                break
        targets.sort()
        return targets

    def successors(self, key: int, family: int, tight: bool = False, most: float = math.inf) -> list[tuple[str, tuple[int, ...], int, int, int]]:
        """The moves out of the state ``key`` (:meth:`key`) in a family: (kind, mesh dims, tensor dim
        landed on or -1, group size, next state's key); once there are more than ``most``, perhaps
        not all (the caller's budget ends before them: every early return follows an append, so the
        list is then longer than ``most``, which may be negative).  A list, not a generator:
        compiled, its locals stay in registers."""
        out: list[tuple[str, tuple[int, ...], int, int, int]] = []
        stacks, pmask, settled_len, smask = self.view(key)
        ndim = self.ndim
        size = self.mesh_shape
        shift = self.shift
        clear = self.clear
        tdb = self.td_bits
        goal_stacks = self.goal_stacks
        targets = self.push_targets(stacks)
        ready = self.ready(stacks, settled_len)
        # where a mesh dim may go other than its target slot: anywhere (FULL), nowhere
        # (LANDING), or for a reduce_scatter only (PARKING, below)
        parks: Sequence[int] = targets if family == FULL else ()
        if tight:  # no collective to spare: park only on unsettled stacks (module docstring)
            parks = [e for e in parks if len(stacks[e]) > settled_len[e]]
        parked = 0  # parks as a mask
        for e in parks:
            parked |= 1 << e
        # pops of the unsettled top of a stack: all_gather (also merged) and all_to_all
        for d in range(ndim):
            s = stacks[d]
            n = len(s)
            lo = settled_len[d]
            if n <= lo:
                continue
            top = s[-1]
            if tight and n - lo > 1:  # the whole unsettled part in one all_gather
                k = 1
                nkey = key
                for m in s[lo:]:
                    k *= size[m]
                    nkey &= clear[m]
                out.append(("all_gather", s[lo:], -1, k, nkey))
                continue
            popped = key & clear[top]
            out.append(("all_gather", (top,), -1, size[top], popped))
            for e in targets:
                if e != d and (parked >> e & 1 or ready[e] == top):
                    out.append(("all_to_all", (top,), e, size[top], popped | ((e + 1) | len(stacks[e]) << tdb) << shift[top]))
            k = size[top]
            nkey = popped
            for j in range(2, n - lo + 1):
                m = s[n - j]
                k *= size[m]
                nkey &= clear[m]
                out.append(("all_gather", s[n - j:], -1, k, nkey))
        reduce: list[list[int]] = []  # the pending mesh dims of each reduce op, in order of the first
        group = [-1] * self.n_ops if pmask else []  # per reduce op id: its list in reduce
        for m in self.live:
            bit = 1 << m
            if smask & bit:
                continue
            if pmask & bit:
                if not self.goal_pmask & bit:
                    i = group[self.op_id[m]]
                    if i < 0:
                        group[self.op_id[m]] = len(reduce)
                        reduce.append([m])
                    else:
                        reduce[i].append(m)
                continue
            for e in targets:  # Replicate: chunk
                if parked >> e & 1 or ready[e] == m:
                    out.append(("chunk", (m,), e, size[m], key | ((e + 1) | len(stacks[e]) << tdb) << shift[m]))
            if self.goal_pmask & bit:
                out.append(("partition", (m,), -1, size[m], key | self.partial_flag << shift[m]))
        for members in reduce:
            dims = tuple(members)
            if tight:  # one collective for all of them: all_reduce, or reduce_scatter
                bits = 0  # into the target's next slots or onto an unsettled stack in any order
                rest = key
                for m in dims:
                    bits |= 1 << m
                    rest &= self.unflag[m]
                out.append(("all_reduce", dims, -1, self.product(bits), rest))
                self._reductions(out, key, stacks, dims, itertools.permutations(dims), parks, all_reduce=False, most=most)
                if len(out) > most:
                    return out
                for e in range(ndim):
                    if ready[e] < 0:
                        continue
                    n = len(stacks[e])
                    g = goal_stacks[e][n:n + len(dims)]
                    if sorted(g) == sorted(dims):
                        self._reductions(out, key, stacks, g, (g,), (e,), all_reduce=False, most=most)
                        if len(out) > most:
                            return out
                continue
            if family == FULL:
                for r in range(1, len(dims) + 1):
                    for subset in itertools.combinations(dims, r):
                        self._reductions(out, key, stacks, subset, itertools.permutations(subset), targets, most=most)
                        if len(out) > most:
                            return out
                continue
            # all_reduce all at once (merged: cheaper than apart), or those the target replicates;
            # reduce_scatter into target slots, or (PARKING) anywhere in mesh dim order either way
            spare = tuple(m for m in dims if not self.goal_shard_mask >> m & 1)
            for subset in (dims, spare) if spare and spare != dims else (dims,):
                k = 1
                rest = key
                for m in subset:
                    k *= size[m]
                    rest &= self.unflag[m]
                out.append(("all_reduce", subset, -1, k, rest))
            for e in range(ndim):
                m = ready[e]
                if m < 0 or m not in dims:
                    continue
                n = len(stacks[e])
                for j in range(n + 1, len(goal_stacks[e]) + 1):
                    g = goal_stacks[e][n:j]
                    if g[-1] not in dims:
                        break
                    self._reductions(out, key, stacks, g, (g,), (e,), all_reduce=False, most=most)
                    if len(out) > most:
                        return out
            if family == PARKING:
                for r in range(1, len(dims) + 1):
                    for subset in itertools.combinations(dims, r):
                        orders = (subset, subset[::-1]) if r > 1 else (subset,)
                        self._reductions(out, key, stacks, subset, orders, targets, all_reduce=False, most=most)
                        if len(out) > most:
                            return out
        return out

    def _reductions(self, out: list[tuple[str, tuple[int, ...], int, int, int]], key: int, stacks: tuple[tuple[int, ...], ...],
                    subset: tuple[int, ...], orders: Iterable[tuple[int, ...]], targets: Sequence[int],
                    all_reduce: bool = True, most: float = math.inf) -> None:
        """Appends to ``out`` all_reduce over ``subset`` and reduce_scatter of it, in each of
        ``orders``, onto each of ``targets``."""
        k = 1
        rest = key
        for m in subset:
            k *= self.mesh_shape[m]
            rest &= self.unflag[m]
        if all_reduce:
            out.append(("all_reduce", subset, -1, k, rest))
        shift = self.shift
        tdb = self.td_bits
        for perm in orders:
            if len(out) > most:
                return
            for e in targets:
                nkey = rest
                pos = len(stacks[e])
                for m in perm:
                    nkey |= ((e + 1) | pos << tdb) << shift[m]
                    pos += 1
                out.append(("reduce_scatter", perm, e, k, nkey))

    @staticmethod
    def top_of(stacks: tuple[tuple[int, ...], ...], dims: tuple[int, ...]) -> int:
        """The tensor dim whose innermost splits are ``dims`` (in that order), or -1."""
        n = len(dims)
        for d, s in enumerate(stacks):
            if len(s) >= n and s[len(s) - n:] == dims:
                return d
        return -1

    def apply(self, state: _IState, move: _IMove) -> Optional[_IState]:
        """The state after an internal move, or None where it is not a move of the graph
        (:func:`moves`): an all_gather of mesh dims that are not the top of one stack in that
        order, an all_to_all of more than one mesh dim or onto its own stack, a chunk of a mesh dim
        that is split or Partial, a partition the target does not want, a reduction of mesh dims
        that are not all pending under one reduce op, a push without a tensor dim or a
        non-push with one."""
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

    def fallback(self) -> tuple[_IMove, ...]:
        """A path that always exists: every stack's unsettled part popped in one all_gather, every
        reduce op's pending mesh dims in one all_reduce, then every target slot filled by a chunk,
        in order, and every Partial the target adds made by a partition (the first incumbent
        where there is no greedy plan: shard orders other than the default)."""
        stacks, pmask = self.start
        settled_len = self.info(stacks)[0]
        path: list[_IMove] = []
        for d, s in enumerate(stacks):
            if len(s) > settled_len[d]:
                path.append(("all_gather", s[settled_len[d]:], -1))
        for bits in self.pending_ops(pmask).values():
            path.append(("all_reduce", tuple(m for m in self.live if bits >> m & 1), -1))
        for e, goal in enumerate(self.goal_stacks):
            path.extend(("chunk", (m,), e) for m in goal[settled_len[e]:])
        path.extend(("partition", (m,), -1) for m in self.live if (self.goal_pmask & ~pmask) >> m & 1)
        return tuple(path)

    def walk(self, imoves: Sequence[_IMove], state: Optional[_IState] = None,
             shards: Optional[int] = None) -> Optional[_Walk]:
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
            shards = _shards_after(move[0], k, shards)
            states.append(state)
            counts.append(shards)
        return costs, states, counts

    def rewalk(self, imoves: Sequence[_IMove], walked: _Walk, same: int) -> Optional[_Walk]:
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

    def reaches_goal(self, imoves: Sequence[_IMove], walked: Optional[_Walk]) -> bool:
        """Whether ``walked`` (:meth:`walk` of ``imoves``) ends at the goal with no more collectives than the cap."""
        return walked is not None and walked[1][-1] == self.goal and (
            self.bound is None or _collectives(imoves) <= self.bound)

    @staticmethod
    def internal(path: Sequence[Move]) -> tuple[_IMove, ...]:
        """A path of :data:`Move` as internal moves: the inverse of :meth:`external`."""
        return tuple((kind, dims, b.dim if isinstance(b, Shard) else -1) for kind, dims, _a, b, _ in path)

    def external(self, imoves: Sequence[_IMove]) -> tuple[Move, ...]:
        """Internal moves as a path of :data:`Move` (the states the exhaustive search names)."""
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
            placements = _with(placements, {m: b for m in dims})
            order = freeze_order(orders)
            path.append((kind, dims, a, b, (placements, order)))
        return tuple(path)


# Whether the searches run in C where they can (:func:`_core`); the tests turn it off to compare.
USE_CORE = True


def _core(pb: _Problem) -> Any:
    """The C core (dtensor_np/_search_core.pyx) for ``pb``, or None where there is no build or ``pb``
    is beyond it: another cost model than :class:`CostModel`'s, more live mesh dims or tensor dims
    than it holds, keys of more than 60 bits, an array of 2**53 bytes or more, a mesh of 2**53 ranks
    or more."""
    if _core_module is None or not pb.linear or pb.nbytes >= 1 << 53 or math.prod(pb.mesh_shape) >= 1 << 53:
        return None  # (it counts ranks and bytes in 64-bit ints and doubles)
    if len(pb.live) > _core_module.MAX_LIVE or pb.ndim > _core_module.MAX_DIMS or len(pb.mesh_shape) > _core_module.MAX_MESH:
        return None
    if len(pb.live) * pb.partial_flag.bit_length() > 60:  # the key's bits
        return None
    return _core_module.Core(pb, pb.bound if pb.bound is not None else _UNCAPPED, EXPAND_WORK, TIGHT_WORK)


class _Outcome:
    """What a search found (a plain class: compiled, a frozen dataclass is slow to make)."""

    def __init__(self, imoves: Optional[tuple[_IMove, ...]], cost: float, complete: bool, work: int,
                 superseded: Optional[list[tuple[_IMove, ...]]] = None) -> None:
        self.imoves = imoves  # None: nothing cheaper than ``upper`` found
        self.cost = cost
        self.complete = complete  # the search ran to its end within the budget
        self.work = work
        # the paths it found before imoves, each beaten by the next (the probes keep them)
        self.superseded = superseded if superseded is not None else []


# A node of the searches' heaps: (f, tie, g, state (its key), collectives used, shards, path as
# (parent, move) links)
_Node = tuple[float, int, float, int, int, int, object]


def _growth(kind: str) -> int:
    """How a move of ``kind`` changes the number of shards: 1 multiplies it by the group's size (a
    chunk, a reduce_scatter), -1 divides it (an all_gather), 0 keeps it."""
    if kind == "chunk" or kind == "reduce_scatter":
        return 1
    return -1 if kind == "all_gather" else 0


def _shards_after(kind: str, k: int, shards: int) -> int:
    """The number of shards after a move of ``kind`` over a group of ``k`` ranks from ``shards``."""
    grow = _growth(kind)
    return shards * k if grow > 0 else shards // k if grow else shards


def _astar(pb: _Problem, family: int, budget: float, upper: float, ties: bool = False, node: Optional[_Node] = None,
           shared: Optional[dict[int, tuple[float, int]]] = None) -> _Outcome:
    """A* from ``pb.start`` to ``pb.goal`` under the collective cap, pruning every path of cost >= ``upper``.

    With ``ties``, paths of cost ``upper`` (to a relative 1e-9) are kept: the
    search then picks among equally cheap paths as it would alone.

    ``budget`` counts the moves looked at: past it the search stops, incomplete.

    With :func:`_core` (``FULL`` and ``LANDING`` from the start: the calls of :func:`_search`; the
    probes' own calls run in C within :func:`_probes`) the same search runs in C, with the same result.
    """
    core = pb.core
    if core is not None and family != PARKING and node is None and shared is None:
        found, cost, complete, work = core.astar(family, budget, upper, ties)
        return _Outcome(None if found is None else tuple(found), cost, complete, work)
    goal = pb.goal_key
    bound = pb.bound if pb.bound is not None else _UNCAPPED
    stride = bound + 1  # a visit (state, collectives used) as the int state * stride + used
    start = pb.start_key
    nbytes = pb.nbytes
    hcache = pb._h
    tcache = pb._tight
    tie = 0  # the heap's tie-break: the order of pushes
    if node is None:
        f0, _ = pb.heuristic(start, pb.start_shards)
        node = (f0, tie, 0.0, start, 0, pb.start_shards, None)
        tie += 1
    heap: list[_Node] = [node]
    best: dict[int, float] = {node[3] * stride + node[4]: node[2]}
    # (collectives, cost) of the first expanded visit of each state: a later visit with no fewer
    # of either is dominated (the bound depends on the collectives left: visits of one state are
    # not popped in order of cost)
    fewest: dict[int, tuple[int, float]] = {}
    refined: set[int] = set()
    # the sharper bound where no collective is spare (its moves then restricted too; PARKING,
    # kept for experiments, without it); the expansions counted in the full search only
    refine = family != PARKING
    expand_work = EXPAND_WORK if family == FULL else 0
    work = 0
    slack = 1e-9 * max(upper, 1.0)
    limit = math.inf if upper == math.inf else upper + slack if ties else upper - slack
    inf = math.inf
    push: Callable[[list[_Node], _Node], None] = heapq.heappush  # looked up once
    pop: Callable[[list[_Node]], _Node] = heapq.heappop
    while heap:
        f, _, g, state, used, shards, links = pop(heap)
        if f >= limit:
            break
        if state == goal:
            imoves: list[_IMove] = []
            while links is not None:  # (parent, the successor tuple of the move)
                link = cast(tuple[object, tuple[str, tuple[int, ...], int, int, int]], links)
                links = link[0]
                imoves.append((link[1][0], link[1][1], link[1][2]))
            return _Outcome(tuple(reversed(imoves)), g, True, work)
        visit = state * stride + used
        if best.get(visit, inf) < g:
            continue
        known = fewest.get(state)
        if known is not None and known[0] <= used and known[1] <= g:
            continue  # a cheaper visit with no more collectives was expanded already
        spare = 1
        if refine:
            spare = bound - used - hcache[state][1]
            if spare == 0 and visit not in refined:
                # no collective to spare: the sharper bound, worked out only for the visits popped
                refined.add(visit)
                sharp = tcache.get(state)
                if sharp is None:
                    sharp = pb.tight(state, shards)
                    work += TIGHT_WORK
                    if work > budget:
                        return _Outcome(None, upper, False, work)
                if g + sharp > f:
                    if g + sharp < limit:
                        push(heap, (g + sharp, tie, g, state, used, shards, links))
                        tie += 1
                    continue
        if work >= budget:
            return _Outcome(None, upper, False, work)
        if known is None or used < known[0]:
            fewest[state] = (used, g)
        work += expand_work
        if shared is not None:
            seen = shared.get(state)
            if seen is not None and seen[0] <= g and seen[1] <= used:
                continue  # an earlier probe expanded it from no worse
            shared[state] = (g, used)
        local = nbytes / shards
        for move in pb.successors(state, family, spare == 0, budget - work):
            kind, dims, e, k, nxt = move
            work += 1
            if work > budget:  # mid-expansion too: one state may have thousands of moves
                return _Outcome(None, upper, False, work)
            n_used = used + (kind in COLLECTIVES)
            c = g + pb.step_cost(kind, k, local)
            key = nxt * stride + n_used
            if c >= best.get(key, inf):
                continue
            nshards = _shards_after(kind, k, shards)
            got = hcache.get(nxt)
            h, n_coll = got if got is not None else pb.bound_of(nxt, nshards)
            if n_used + n_coll > bound or c + h >= limit:
                continue
            best[key] = c
            push(heap, (c + h, tie, c, nxt, n_used, nshards, (links, move)))
            tie += 1
    return _Outcome(None, upper, True, work)


def _probes(pb: _Problem, budget: float, upper: float) -> _Outcome:
    """``LANDING`` searches from the start and from every state within :func:`_probe_depth` moves of it
    (any move of ``FULL``), best first by the lower bound; the first may look at :data:`PROBE_ROOT`
    moves, each other at :data:`PROBE_MOVES`.  The searches share one table of the states they
    expanded: a state an earlier one expanded from no more cost and collectives is not expanded again
    (a probe is a heuristic: this drops nothing the guarantees need).

    The cheapest path found below ``upper`` (or None), the paths it beat (``superseded``), and the
    moves looked at, the probes' first moves counted too; past ``budget`` the probes stop.

    With :func:`_core`, the same probes run in C, with the same result.
    """
    if pb.core is not None:
        found, cost, complete, work, beaten = pb.core.probes(budget, upper, _probe_depth(len(pb.live)), PROBE_ROOT,
                                                            PROBE_MOVES)
        return _Outcome(None if found is None else tuple(found), cost, complete, work, [tuple(p) for p in beaten])
    bound = pb.bound if pb.bound is not None else _UNCAPPED
    nbytes = pb.nbytes
    hcache = pb._h
    tie = 0  # the heap's tie-break: the order of pushes
    stride = bound + 1
    f0, _ = pb.heuristic(pb.start_key, pb.start_shards)
    # (f, depth, tie, node as _astar takes it)
    root: _Node = (f0, -1, 0.0, pb.start_key, 0, pb.start_shards, None)
    heap: list[tuple[float, int, int, _Node]] = [(f0, 0, tie, root)]
    tie += 1
    depth_limit = _probe_depth(len(pb.live))
    work = 0
    seen: set[int] = set()
    shared: dict[int, tuple[float, int]] = {}
    best: Optional[tuple[_IMove, ...]] = None
    superseded: list[tuple[_IMove, ...]] = []
    while heap and work < budget:
        f, depth, _, node = heapq.heappop(heap)
        if f >= upper:
            break
        _, _, g, state, used, shards, links = node
        visit = state * stride + used
        if visit in seen:
            continue
        seen.add(visit)
        known = shared.get(state)
        if known is None or known[0] > g or known[1] > used:  # else the search would stop at once
            most = PROBE_ROOT if links is None else PROBE_MOVES
            out = _astar(pb, LANDING, min(most, budget - work), upper, node=node,
                         shared=shared)
            work += out.work
            if out.imoves is not None:
                if best is not None:
                    superseded.append(best)
                best, upper = out.imoves, out.cost
        if depth == depth_limit:
            continue
        local = nbytes / shards
        for move in pb.successors(state, FULL, used + hcache[state][1] == bound, budget - work):
            kind, dims, e, k, nxt = move
            work += 1
            if work > budget:
                break
            coll = int(kind in COLLECTIVES)
            c = g + pb.step_cost(kind, k, local)
            nshards = _shards_after(kind, k, shards)
            got = hcache.get(nxt)
            h, n_coll = got if got is not None else pb.bound_of(nxt, nshards)
            if used + coll + n_coll > bound or c + h >= upper:
                continue
            heapq.heappush(heap, (c + h, depth + 1, tie, (c + h, -1, c, nxt, used + coll, nshards, (links, move))))
            tie += 1
    return _Outcome(best, upper, not heap, work, superseded)


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


@dataclass(frozen=True)
class SearchResult:
    """A path and how it was found.

    ``method`` is ``"exact"`` (the full search finished: no cheaper path
    exists), ``"approximate"`` (it ran out of its budget; the path is the
    cheapest the restricted searches found, or the greedy plan (or, with no
    greedy plan, :meth:`_Problem.fallback`) improved by :func:`improve_locally`,
    see the module docstring) or ``"greedy"`` (likewise, and nothing beat the
    greedy plan).  ``work`` counts the moves the searches looked at, and in the
    full search its expansions and sharper bounds too (:data:`EXPAND_WORK`,
    :data:`TIGHT_WORK`).
    """

    path: tuple[Move, ...]
    cost: float
    method: str
    work: int


# The searches tried in turn when the full search has a budget (move family, most moves it may
# look at, None: all of the budget; all of PROBES' searches together), then the full one with what
# is left; counted in moves looked at, so every rank plans the same steps.  PROBE_*: see _probes.
# Chosen on benchmarks/planner.py's pairs of meshes of 4 to 6 dims (seeds 0 to 2) and checked on
# seeds 3 to 7 and on --mixed pairs (module docstring).
STAGES: tuple[tuple[int, Optional[float]], ...] = ((PROBES, None),)
# The budget on 5 mesh dims of size > 1, and from WIDE_DIMS on (there a probe's move costs more
# time: more of the states it reaches are new, each with its bound worked out, and the plans are
# longer to rewrite and to build): about the most that plans every pair of benchmarks/planner.py
# (seeds 0 to 3) and of --mixed within about 0.9 ms on a 2-core VM with the searches in C
# (dtensor_np/_search_core.pyx), the rewrites and the plan's specs included.  Benchmark pairs of 4
# to 6 mesh dims, seeds 0 to 7: 1,171 of 1,200 as cheap as the exhaustive search's plan, 1,013
# proved, 1.0010 times its cost (geometric mean).  BUDGET was 7,000 until the tenth version: 1,170
# and 1,008; 7,600 proves 10 more plans of 5,400 benchmark pairs and makes one cheaper (8x8x4x2x2,
# seed 0), for at most 0.86 ms on 5 mesh dims instead of 0.83 (same session); the other pair of 5
# above the optimum needs 8,598 (2x2x2x2x2, seed 1; 9,000: 1.1 ms on the slowest --mixed-live
# pairs).  Measured before LANDING used the sharper bound (then 1,167 and
# 1.0011), as the alternatives in the comments below: 1,168 with 8,000 on 5, 1,169 with 7,000 on
# 6 (about 1 ms at most), 1,163 with 5,000 on 6.  (The seventh version, searching in Python: 720
# and 600.)
BUDGET: float = 7600
WIDE_DIMS = 6
WIDE_BUDGET: float = 6000
# The full search counts more than its moves: an expansion as 2 moves, the bound with no collective
# to spare (_Problem.tight) as 3 (measured from the source when states were tuples: 2.1 us a move,
# 4.2 an expansion, 5.6 the bound), so that its budget stands for time as the probes' does.
EXPAND_WORK: Final = 2
TIGHT_WORK: Final = 3
EXACT_DIMS = 4
# Up to EXACT_DIMS mesh dims of size > 1 the full search runs alone, within EXACT_BUDGET where the
# greedy plan caps the collectives: it finishes on every --mixed pair of up to 3 such dims of seeds 0
# to 5 (1,182 pairs, 588 units at most), on every benchmark pair of 4 of seeds 0 to 7 (480 pairs,
# 1,045 at most) and of seeds 8 to 32 on meshes 2x2x2x2, 4x4x4x4, 2x3x4x2 and 1x2x2x1x2x2 (3,000
# pairs, 1,452 at most) and on the 198 --mixed pairs of 4 with a greedy plan (794 at most).  With
# no greedy plan, so no cap, within UNCAPPED_BUDGET: all 121 --mixed pairs of 4 (2,881 at most; the
# seventh version's 1,000 left 7 to the probes).  Both about 0.4 ms of search in C.
EXACT_BUDGET: float = 5000
UNCAPPED_BUDGET: float = 5000
# Where the full search alone stops at its budget, the probes then run with this budget (no measured
# pair needs them now; at the seventh version's budgets, 200 moves on the 7 pairs above: the
# exhaustive search's cost on 4, at most 1.11 times it on the others; without the probes the simple
# plan improved locally costs up to 2.0 times it).
RESCUE_BUDGET: float = 1000
# The probes branch PROBE_DEPTH moves from the start up to PROBE_DEPTH_DIMS mesh dims of size > 1
# (one less per mesh dim beyond): 1,167 of the 1,200 benchmark pairs (seeds 0 to 7) as cheap as the
# exhaustive search's plan, against 1,151 branching 2 moves (1,042 at the seventh version's
# budgets).  A probe but the first looks at PROBE_MOVES moves at most: 1,152 with 60 (fewer moves,
# more probes), 1,168 with 150; PROBE_ROOT 300: 1,167.
PROBE_DEPTH = 3
PROBE_DEPTH_DIMS = 6
PROBE_MOVES: float = 100
PROBE_ROOT: float = 150
# The local rewrites after an unproved search start no round once they have walked this many moves
# (several rounds of park_early, fold_moves and reorder_moves after merge_gathers on a path of 10
# moves; a rewritten path walks only from its first changed move).  Benchmark pairs of 4 to 6 mesh
# dims (seeds 0 to 7) as cheap as the exhaustive search's plan, and the geometric mean of the cost
# over it: 1,167 of 1,200 and 1.0011 with 100 moves (or 48, or 200), 1,165 and 1.0013 with 24.  A
# call takes up to about 0.1 ms on 6 mesh dims.
REWRITE_MOVES: float = 100
# Besides the best path found, the greedy plan is improved by the rewrites too, and the cheapest
# result kept: they reach different local optima (a probe's cheaper path is not always the better
# start).  Seeds 0 to 7: 1,167 of 1,200 with it or without (1,042 and 1,041 at the seventh
# version's budgets).  Without it, 2 of 6,420 pairs cost more (1.02 and 1.07 times; 3,000 pairs
# of --mixed-live 5,6, seeds 0 and 1; none of the 3,420 seeded, --mixed and other wide pairs), for
# about 0.04 ms less on the slowest plans: kept.
IMPROVE_GREEDY = True
# Likewise the probes' paths that a cheaper one beat, the latest first, at most this many: 1,167 of
# 1,200 and 1.0011 with 4, 1,166 with 3, 1,163 and 1.0016 with 2, 1,163 with 1, 1,160 and 1.0018
# with none; with merge_gathers alone (nor of the greedy plan) 1,155 and 1.0021.  With 2, 5 of the
# 1,200 plans cost more than at the seventh version's budgets (up to 1.22 times the optimum on 6
# mesh dims); with 4, none (139 cost less).  With LANDING's sharper bound too, against the seventh
# version itself: 141 cost less, 1 more (1.02 times the optimum on 6 mesh dims).
IMPROVE_SUPERSEDED = 4


def _probe_depth(live: int) -> int:
    """How many ``FULL`` moves the probes branch from the start, for ``live`` mesh dims of size > 1:
    :data:`PROBE_DEPTH` up to :data:`PROBE_DEPTH_DIMS`, one less per mesh dim beyond."""
    return max(0, min(PROBE_DEPTH, PROBE_DEPTH + PROBE_DEPTH_DIMS - live))


def merge_gathers(pb: _Problem, imoves: Sequence[_IMove], walked: Optional[_Walk] = None) -> tuple[tuple[_IMove, ...], float]:
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
        >>> from dtensor_np import DeviceMesh, Shard, Replicate, DTensorSpec, TensorMeta
        >>> src = DTensorSpec(DeviceMesh((2, 2)), (Shard(0), Shard(0)), TensorMeta((8, 8), "f4"))
        >>> pb = _Problem(search_state(src), search_state(src.with_placements((Replicate(),) * 2)), (2, 2), 2, 256,
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
        found: Optional[tuple[_IMove, ...]] = None
        found_walk: _Walk = ([], [], [])
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


def _collectives(imoves: Sequence[_IMove]) -> int:
    return sum(kind in COLLECTIVES for kind, _, _ in imoves)


def park_early(pb: _Problem, imoves: Sequence[_IMove], walked: Optional[_Walk] = None) -> tuple[tuple[_IMove, ...], float]:
    """The path with one thing parked early, if that lowers its cost (the one that lowers it most),
    and its cost: a mesh dim that is Replicate for a while is chunked onto a tensor dim that
    nothing touches until it is gathered, and leaves with that all_gather (one all_gather of
    more mesh dims) or, with a collective to spare, in an all_gather of its own later.  Likewise
    an all_reduce becomes a reduce_scatter onto such a tensor dim, and an all_gather of one mesh
    dim an all_to_all onto one.  The collectives in between move that many times fewer bytes.

    Each candidate is priced in O(1) from the path's step costs (bytes scale with the local
    size; :class:`CostModel` only: another model gets the path back); the chosen one is checked
    by :meth:`_Problem.walk`.  O(len(path) * (mesh dims + tensor dims)).

    Example (the greedy plan of ``S(0)RP(sum) -> RS(1)R``: the sum is reduced onto tensor dim 0,
    which is gathered anyway, so the chunk after it touches half the bytes):
        >>> from dtensor_np import DeviceMesh, Shard, Replicate, Partial, DTensorSpec, TensorMeta
        >>> src = DTensorSpec(DeviceMesh((2, 2, 2)), (Shard(0), Replicate(), Partial()), TensorMeta((8, 8), "f4"))
        >>> dst = src.with_placements((Replicate(), Shard(1), Replicate()))
        >>> pb = _Problem(search_state(src), search_state(dst), (2, 2, 2), 2, 256, CostModel(), 2)
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


def _best_park(pb: _Problem, best: tuple[_IMove, ...], walked: _Walk) -> Optional[_Park]:
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


def fold_moves(pb: _Problem, imoves: Sequence[_IMove], walked: Optional[_Walk] = None) -> tuple[tuple[_IMove, ...], float]:
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
        >>> from dtensor_np import DeviceMesh, Shard, Replicate, DTensorSpec, TensorMeta
        >>> src = DTensorSpec(DeviceMesh((2, 2)), (Shard(0), Replicate()), TensorMeta((8, 8), "f4"))
        >>> pb = _Problem(search_state(src), search_state(src.with_placements((Shard(1), Replicate()))),
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


def reorder_moves(pb: _Problem, imoves: Sequence[_IMove], walked: Optional[_Walk] = None) -> tuple[tuple[_IMove, ...], float]:
    """The path with neighbouring moves swapped where that lowers its cost, in one sweep from the
    start, and its cost: a move that divides the array more than its predecessor does (by
    :func:`_growth`: a chunk or reduce_scatter after an all_gather, all_to_all, all_reduce or
    partition; an all_to_all, all_reduce or partition after an all_gather) goes first when the two
    reach the same state either way, so the move after it touches fewer bytes.  Each swap is
    checked by walking the two moves alone: O(len(path) * (mesh dims + tensor dims)).

    Example (the all_gather of mesh dim 0 moves half the bytes after the chunk):
        >>> from dtensor_np import DeviceMesh, Shard, Replicate, DTensorSpec, TensorMeta
        >>> src = DTensorSpec(DeviceMesh((2, 2)), (Shard(0), Replicate()), TensorMeta((8, 8), "f4"))
        >>> pb = _Problem(search_state(src), search_state(src.with_placements((Replicate(), Shard(1)))),
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
        if _growth(best[i][0]) >= _growth(best[i + 1][0]):
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


def _cheaper(pb: _Problem, path: tuple[_IMove, ...], walked: _Walk,
             candidates: Sequence[tuple[tuple[_IMove, ...], int]]) -> tuple[tuple[_IMove, ...], float]:
    """The cheapest of ``candidates`` (each a path and the number of moves it shares with ``path``
    first) that walks to the goal within the cap, if cheaper than ``path`` (``walked``: its walk)."""
    cost = sum(walked[0])
    for new, same in candidates:
        out = pb.rewalk(new, walked, same)
        if pb.reaches_goal(new, out) and sum(out[0]) < cost * (1 - 1e-12):  # type: ignore[index]
            path, cost = new, sum(out[0])  # type: ignore[index]
    return path, cost


def improve_locally(pb: _Problem, imoves: Sequence[_IMove]) -> tuple[tuple[_IMove, ...], float]:
    """The path improved by local rewrites, and its cost: :func:`merge_gathers` to the end, then
    rounds of the cheapest of :func:`park_early`, :func:`fold_moves` and :func:`reorder_moves`,
    and :func:`merge_gathers` again, while a round lowers the cost and fewer than
    :data:`REWRITE_MOVES` moves have been walked (:meth:`_Problem.walk`, the scans counted as
    walks; a count, so every rank rewrites alike; a rewritten path is walked from its first changed
    move, :meth:`_Problem.rewalk`).  A round is not cut short: a call walks 37.5 moves median and
    123 at most on the plans of 4 to 6 mesh dims that the search did not prove
    (benchmarks/planner.py's seeded pairs of seeds 0 to 3 and ``--mixed`` pairs, with the sixth
    version's budgets; the limit holds per call, and :func:`search_path` makes up to six: from
    the best path, the greedy plan (:data:`IMPROVE_GREEDY`) and :data:`IMPROVE_SUPERSEDED` others).
    Each rewrite keeps the
    path a path of the graph to the goal within the cap.
    """
    limit = pb.walked + REWRITE_MOVES
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

    Python's cyclic garbage collector is paused while it searches (for the whole process: a
    search allocates many short-lived tuples, all freed by reference counting, and takes at most
    about 1 ms), and resumed after.
    """
    if not gc.isenabled():
        return _search(start, goal, mesh_shape, ndim, nbytes, model, bound, greedy, budget)
    # a search allocates many short-lived tuples and frees them by reference counting: the cyclic
    # collector's passes over them would find nothing (a tenth of the time of a 2,000-move search)
    gc.disable()
    try:
        return _search(start, goal, mesh_shape, ndim, nbytes, model, bound, greedy, budget)
    finally:
        gc.enable()


def _search(
    start: SearchState, goal: SearchState, mesh_shape: tuple[int, ...], ndim: int, nbytes: int,
    model: CostModel, bound: Optional[int], greedy: Optional[tuple[Move, ...]], budget: Optional[float],
) -> SearchResult:
    if start == goal:
        return SearchResult((), 0.0, "exact", 0)
    pb = _Problem(start, goal, mesh_shape, ndim, nbytes, model, bound)
    live = len(pb.live)
    # up to EXACT_DIMS mesh dims of size > 1 the full search runs alone (module docstring)
    full_alone = budget is None and live <= EXACT_DIMS
    stages = () if full_alone else STAGES
    total: float
    if budget is not None:
        total = budget
    elif full_alone:
        total = EXACT_BUDGET if bound is not None else UNCAPPED_BUDGET
    else:
        total = BUDGET if live < WIDE_DIMS else WIDE_BUDGET
    # the best path so far, as internal moves (converted once, at the end)
    best_moves: Optional[tuple[_IMove, ...]] = None
    best_cost = math.inf
    method = "greedy"
    greedy_moves: Optional[tuple[_IMove, ...]] = None
    if greedy is not None:
        greedy_moves = pb.internal(greedy)
        best_moves, best_cost = greedy_moves, path_cost(greedy, start, nbytes, mesh_shape, model)
    else:  # no greedy plan (shard orders other than the default): a simple one, if within the cap
        simple = pb.fallback()
        walked = pb.walk(simple)
        if pb.reaches_goal(simple, walked):
            best_moves, best_cost, method = simple, sum(walked[0]), "approximate"  # type: ignore[index]
    work = 0
    superseded: list[tuple[_IMove, ...]] = []  # the probes' paths that a cheaper one beat, in order
    # with no limit the full search alone decides (an incumbent prunes nothing it would expand)
    for family, most in stages if total < math.inf else ():
        most = max(0, total - work) if most is None else most
        out = _probes(pb, most, best_cost) if family == PROBES else _astar(pb, family, most, best_cost)
        work += out.work
        superseded += out.superseded
        if out.imoves is not None:
            best_moves, best_cost, method = out.imoves, out.cost, "approximate"
    # ties: among plans as cheap as the best so far, the full search's own pick (most often the
    # exhaustive search's too)
    exact = _astar(pb, FULL, max(0, total - work), best_cost, ties=True)
    work += exact.work
    if exact.imoves is not None:
        return SearchResult(pb.external(exact.imoves), exact.cost, "exact", work)
    if full_alone and not exact.complete:  # it ran out of its budget (rare): the probes, briefly
        out = _probes(pb, RESCUE_BUDGET, best_cost)
        work += out.work
        superseded += out.superseded
        if out.imoves is not None:
            best_moves, best_cost, method = out.imoves, out.cost, "approximate"
    if best_moves is None:  # a cap with no greedy plan to meet it, and the budget spent
        raise ValueError(f"no path from {start} to {goal} with at most {bound} collectives within the budget")
    if exact.complete:
        method = "exact"
    else:  # not proved optimal: improved by local rewrites, from other starts too (the cheapest kept)
        starts = [greedy_moves] if IMPROVE_GREEDY and greedy_moves is not None and method != "greedy" else []
        starts += superseded[::-1][:IMPROVE_SUPERSEDED]
        improved, cost = improve_locally(pb, best_moves)
        for other_start in starts:
            other, other_cost = improve_locally(pb, other_start)
            if other_cost < cost:
                improved, cost = other, other_cost
        if cost < best_cost:
            best_moves, best_cost, method = improved, cost, "approximate"
    best_path = greedy if greedy is not None and method == "greedy" else pb.external(best_moves)
    return SearchResult(best_path, best_cost, method, work)
