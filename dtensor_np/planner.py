"""The redistribute planner: pure functions from a source spec and a target spec to steps.

A *state* is the placements plus the shard order.  Steps move between states:

====================  ==================  =====================================
step                  collective          condition
====================  ==================  =====================================
S(d) -> R             all_gather          the mesh dim(s) split ``d`` innermost
S(d) -> S(e)          all_to_all          the mesh dim splits ``d`` innermost
P -> R                all_reduce
P -> S(d)             reduce_scatter      the mesh dim becomes the innermost split of ``d``
R -> S(d)             local chunk         likewise
R -> P(op)            local partition     only towards a target ``P(op)``
====================  ==================  =====================================

Instead of the reference's greedy walk over mesh dims, :func:`plan_redistribute`
runs a shortest-path search over states with a cost per step (latency plus
bytes over bandwidth, computed from the global shape and dtype), and merges
collectives of one kind over several mesh dims into one collective over the
combined group (``[S(0), S(0)] -> [R, R]`` is one all_gather over all ranks).
The search never uses more collectives than the greedy plan
(:func:`plan_greedy`, kept for comparison) and never costs more than it; it
is the A* of :mod:`dtensor_np.plan_search` (its docstring: the algorithm, its
complexity and budget), exact wherever it finishes within its budget (up to
4 mesh dims of size > 1 all but rare pairs), else the best plan it found,
improved by local rewrites (``explain`` says which).  With ``exact=True`` it
runs with no budget and always proves its plan the cheapest, for the rare
redistribute that runs often enough to be worth milliseconds of planning
(module docstring of :mod:`dtensor_np.plan_search`).  :func:`plan_exhaustive`
is the old exhaustive search, the oracle of the tests.  Plans are cached on
the specs (pure values), never on a rank.

Example:
    >>> from dtensor_np import DeviceMesh, Shard, Replicate, DTensorSpec, TensorMeta
    >>> mesh = DeviceMesh((2, 2))
    >>> meta = TensorMeta((8, 8), "float32")
    >>> src = DTensorSpec(mesh, (Shard(0), Replicate()), meta)
    >>> dst = DTensorSpec(mesh, (Replicate(), Shard(1)), meta)
    >>> plan = plan_redistribute(src, dst)
    >>> [str(s) for s in plan]
    ['chunk R->S(1) on mesh dim 1', 'all_gather S(0)->R on mesh dim 0']
    >>> explain(plan, src)  # chunk first: the all_gather then moves half the bytes
    'S(0)R->S(0)S(1)->RS(1)'
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

import numpy as np

from collectives import Groups, group_layout, memo
from collectives.ops import KINDS, OPS

from .cost_model import CostModel
from .errors import ShardingError
from .int_tuple import product
from .placements import Partial, Placement, Replicate, Shard
from .plan_search import (
    exhaustive_path,
    freeze_order,
    greedy_path,
    SearchResult,
    path_cost,
    search_path,
    search_state,
    step_cost,
)
from .spec import DTensorSpec, ShardOrder, default_shard_order

__all__ = [
    "Step",
    "plan_redistribute",
    "plan_flag",
    "search_result",
    "plan_greedy",
    "plan_exhaustive",
    "plan_cost",
    "greedy_cost",
    "explain",
    "count_collectives",
    "greedy_collectives",
    "COLLECTIVE_KINDS",
    "LOCAL_KINDS",
    "CostModel",
    "CollectiveCall",
    "backward_target",
    "collective_call",
]

COLLECTIVE_KINDS = KINDS[:4]
"""The collectives a plan may use (``all_gather``, ``all_reduce``, ``reduce_scatter``, ``all_to_all``)."""
LOCAL_KINDS = ("chunk", "partition")

_R = Replicate()


@dataclass(frozen=True, slots=True)
class Step:
    """One collective (or local op) on one mesh dim, or one merged collective on several.

    ``before`` and ``after`` are the full specs of the array before and after
    the step: the first step's ``before`` is the source spec and the last
    step's ``after`` the target spec, so a plan's specs chain.

    Example:
        >>> from dtensor_np import DeviceMesh, DTensorSpec, TensorMeta
        >>> src = DTensorSpec(DeviceMesh((2,)), (Shard(0),), TensorMeta((5,), "f4"))
        >>> (s,) = plan_redistribute(src, src.with_placements((Replicate(),)))
        >>> s.mesh_dim, s.is_collective, str(s), str(s.before), str(s.after)
        (0, True, 'all_gather S(0)->R on mesh dim 0', 'S(0)', 'R')
    """

    kind: str
    mesh_dims: tuple[int, ...]
    src: Placement
    dst: Placement
    before: DTensorSpec
    after: DTensorSpec

    @property
    def mesh_dim(self) -> Union[int, tuple[int, ...]]:
        """The mesh dim of the step, or the tuple of mesh dims of a merged collective."""
        return self.mesh_dims[0] if len(self.mesh_dims) == 1 else self.mesh_dims

    @property
    def placements(self) -> tuple[Placement, ...]:
        """The placements after the step."""
        return self.after.placements

    @property
    def is_collective(self) -> bool:
        """True when the step communicates."""
        return self.kind in COLLECTIVE_KINDS

    def __str__(self) -> str:
        where = f"mesh dim {self.mesh_dims[0]}" if len(self.mesh_dims) == 1 else f"mesh dims {self.mesh_dims}"
        return f"{self.kind} {self.src}->{self.dst} on {where}"


# --------------------------------------------------------------------------
# the search (dtensor_np.plan_search)
# --------------------------------------------------------------------------
_freeze = freeze_order


def _validate(src: DTensorSpec, dst: DTensorSpec) -> None:
    for what, spec in (("source", src), ("target", dst)):
        if not isinstance(spec, DTensorSpec):
            raise TypeError(f"plan_redistribute needs a DTensorSpec for the {what}, got {type(spec).__name__} {spec!r}")
    if src.mesh != dst.mesh:
        raise ShardingError(f"cannot redistribute between different meshes: {src.mesh} and {dst.mesh}")
    if src.tensor_meta is None:
        raise ShardingError("plan_redistribute needs the source spec's tensor_meta (global shape and dtype)")
    if dst.tensor_meta is not None and dst.tensor_meta.shape != src.tensor_meta.shape:
        raise ShardingError(
            f"redistribute keeps the global shape: source {src.tensor_meta.shape}, target {dst.tensor_meta.shape}"
        )
    for m, (a, b) in enumerate(zip(src.placements, dst.placements)):
        if src.mesh.shape[m] == 1:
            continue  # one rank: every placement holds the same data
        if isinstance(b, Partial) and isinstance(a, Partial) and a != b:
            raise ShardingError(
                f"cannot redistribute {a} to {b} on mesh dim {m}: Partials of different reduce ops "
                f"do not convert; reduce to Replicate() first"
            )


def _to_dst_meta(src: DTensorSpec, dst: DTensorSpec) -> DTensorSpec:
    if dst.tensor_meta is None:
        return DTensorSpec(dst.mesh, dst.placements, src.tensor_meta, dst.shard_order)
    return dst


class PlanTuple(tuple):
    """A plan: its steps, as a tuple, and ``method``, which search found them (``SearchResult.method``).

    Example:
        >>> plan = PlanTuple(("a", "b"), "approximate")
        >>> plan == ("a", "b"), plan.method, PlanTuple(()).method
        (True, 'approximate', 'exact')
    """

    method: str

    def __new__(cls, steps: Sequence = (), method: str = "exact") -> "PlanTuple":
        self = super().__new__(cls, steps)
        self.method = method
        return self


def plan_redistribute(
    src_spec: DTensorSpec, dst_spec: DTensorSpec, cost_model: Optional[CostModel] = None, *, exact: bool = False
) -> PlanTuple:
    """The cheapest steps from ``src_spec`` to ``dst_spec``, never more collectives than :func:`plan_greedy`.

    The search stops at a budget of about 1 ms, so a plan may be an
    approximate one (``explain`` and the plan's ``method`` say so): on
    meshes of 5 or more dims of size > 1, and on rare pairs of fewer.  With
    ``exact=True`` it runs to the end and the plan is the cheapest there is
    (as cheap as the default one wherever that is proved cheapest); measured
    up to 59 ms on the benchmark's pairs of 5 and 6 mesh dims
    (benchmarks/README.md), its worst case grows exponentially with the mesh
    dims.  Every rank must ask alike (the plans differ).  Cached, each mode
    apart.

    Example:
        >>> from dtensor_np import DeviceMesh, Shard, Replicate, DTensorSpec, TensorMeta
        >>> mesh = DeviceMesh((2, 2))
        >>> meta = TensorMeta((8, 8), "float32")
        >>> src = DTensorSpec(mesh, (Shard(0), Shard(0)), meta)
        >>> [str(s) for s in plan_redistribute(src, src.with_placements((Replicate(), Replicate())))]
        ['all_gather S(0)->R on mesh dims (0, 1)']
        >>> plan_redistribute(src, src.with_placements((Replicate(), Replicate())), exact=True).method
        'exact'
    """
    _validate(src_spec, dst_spec)
    exact = plan_flag(exact, "plan_redistribute: exact")
    return _plan_cached(src_spec, _to_dst_meta(src_spec, dst_spec), cost_model or CostModel(), exact)


def plan_flag(value: object, what: str) -> bool:
    """``value`` (True, False or a NumPy bool) as a bool; anything else is a ``TypeError`` naming ``what``.

    Example:
        >>> import numpy as np
        >>> plan_flag(np.True_, "exact"), plan_flag(False, "exact")
        (True, False)
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{what} must be True or False, got {value!r}")


@memo(maxsize=4096, name="dtensor_np.plans")
def _plan_cached(src: DTensorSpec, dst: DTensorSpec, model: CostModel, exact: bool) -> tuple[Step, ...]:
    result = search_result(src, dst, model, math.inf if exact else None)  # inf: the full search alone, to the end
    return PlanTuple(_materialize(result.path, src, dst), result.method)


def search_result(
    src: DTensorSpec, dst: DTensorSpec, model: Optional[CostModel] = None, budget: Optional[float] = None
) -> SearchResult:
    """The search behind :func:`plan_redistribute`, uncached, on a pair with its target's tensor_meta: its path
    (search moves), cost, method and work.  The greedy plan is the first incumbent and its collectives the cap,
    where it applies (default shard orders); ``budget`` as :func:`~dtensor_np.plan_search.search_path` takes it.

    Example:
        >>> from dtensor_np import DeviceMesh, Shard, Replicate, DTensorSpec, TensorMeta
        >>> src = DTensorSpec(DeviceMesh((2, 2)), (Shard(0), Shard(0)), TensorMeta((8, 8), "f4"))
        >>> result = search_result(src, src.with_placements((Replicate(), Replicate())))
        >>> result.method, result.work > 0
        ('exact', True)
    """
    start, goal = search_state(src), search_state(dst)
    mesh_shape = src.mesh.shape
    bound = greedy = None
    if _greedy_applies(src, dst):
        steps = plan_greedy(src, dst)
        bound = count_collectives_greedy(steps, mesh_shape)
        greedy = greedy_path(start, goal, mesh_shape, steps)
    return search_path(start, goal, mesh_shape, src.ndim, _nbytes(src), model or CostModel(), bound, greedy, budget)


def plan_exhaustive(
    src_spec: DTensorSpec, dst_spec: DTensorSpec, cost_model: Optional[CostModel] = None, time_limit_s: Optional[float] = None
) -> tuple[Step, ...]:
    """The plan of the exhaustive search (Dijkstra over every state), uncached: the oracle of the tests.

    Its cost equals :func:`plan_redistribute`'s wherever that search is exact;
    its time grows exponentially with the number of mesh dims
    (``time_limit_s``: raise ``TimeoutError`` past it).

    Example:
        >>> from dtensor_np import DeviceMesh, Shard, Replicate, DTensorSpec, TensorMeta
        >>> src = DTensorSpec(DeviceMesh((2, 2)), (Shard(0), Shard(0)), TensorMeta((8,), "f4"))
        >>> [str(s) for s in plan_exhaustive(src, src.with_placements((Replicate(), Replicate())))]
        ['all_gather S(0)->R on mesh dims (0, 1)']
    """
    _validate(src_spec, dst_spec)
    src, dst = src_spec, _to_dst_meta(src_spec, dst_spec)
    bound = greedy_collectives(src, dst) if _greedy_applies(src, dst) else None
    path = exhaustive_path(search_state(src), search_state(dst), src.mesh.shape, src.ndim, _nbytes(src),
                           cost_model or CostModel(), bound, time_limit_s)
    if path is None:  # pragma: no cover - every legal pair has a path through Replicate
        raise ShardingError(f"no redistribute plan from {src} to {dst}")
    return PlanTuple(_materialize(path, src, dst), "exact")


def plan_cost(plan: tuple[Step, ...], src_spec: DTensorSpec, cost_model: Optional[CostModel] = None) -> float:
    """The cost of a plan from ``src_spec`` under ``cost_model``, its steps' costs added in order.

    Example:
        >>> from dtensor_np import DeviceMesh, Shard, Replicate, DTensorSpec, TensorMeta
        >>> src = DTensorSpec(DeviceMesh((2,)), (Shard(0),), TensorMeta((1000,), "f4"))
        >>> plan_cost(plan_redistribute(src, src.with_placements((Replicate(),))), src)  # 5 us + 2000 B / 5000 B/us
        5.4
    """
    model = cost_model or CostModel()
    nbytes, mesh_shape = _nbytes(src_spec), src_spec.mesh.shape
    placements, cost = src_spec.placements, 0.0
    for step in plan:
        cost = cost + step_cost(step.kind, step.mesh_dims, (placements, ()), nbytes, mesh_shape, model)
        placements = step.placements
    return cost


def greedy_cost(src_spec: DTensorSpec, dst_spec: DTensorSpec, cost_model: Optional[CostModel] = None) -> float:
    """The cost of :func:`plan_greedy`'s plan under ``cost_model``: its steps replayed as the step kinds of the search.

    A greedy step on one mesh dim is the search's step of the same
    transition (``S->R`` all_gather, ``S->S`` all_to_all, ``P->R``
    all_reduce, ``P->S`` reduce_scatter, ``R->S`` chunk, ``R->P`` partition);
    steps on size-1 mesh dims cost nothing.

    Example:
        >>> from dtensor_np import DeviceMesh, Shard, Replicate, DTensorSpec, TensorMeta
        >>> src = DTensorSpec(DeviceMesh((2, 2)), (Shard(0), Shard(0)), TensorMeta((8, 8), "f4"))
        >>> dst = src.with_placements((Replicate(), Replicate()))
        >>> greedy_cost(src, dst) > plan_cost(plan_redistribute(src, dst), src)  # two all_gathers, not one
        True
    """
    _validate(src_spec, dst_spec)
    model = cost_model or CostModel()
    mesh_shape = src_spec.mesh.shape
    path = greedy_path(search_state(src_spec), None, mesh_shape, plan_greedy(src_spec, dst_spec))
    return path_cost(path, search_state(src_spec), _nbytes(src_spec), mesh_shape, model)  # type: ignore[arg-type]


def _nbytes(spec: DTensorSpec) -> int:
    return max(1, product(spec.shape)) * spec.dtype.itemsize


def _materialize(path: tuple, src: DTensorSpec, dst: DTensorSpec) -> tuple[Step, ...]:
    """Search moves to steps that carry the full spec before and after each step."""
    steps = []
    full = list(src.placements)
    before = src
    for i, (kind, dims, a, b, nxt) in enumerate(path):
        for m in dims:
            full[m] = b
        if i == len(path) - 1:  # the target, with size-1 mesh dims as it has them
            after = dst
        else:
            after = _spec_after(tuple(full), nxt[1], src)
        steps.append(Step(kind, tuple(dims), a, b, before, after))
        before = after
    return tuple(steps)


def count_collectives(plan: tuple[Step, ...]) -> int:
    """How many steps of a plan communicate."""
    return sum(1 for s in plan if s.is_collective)


def explain(plan: tuple[Step, ...], src_spec: DTensorSpec) -> str:
    """The chain of states a plan walks through, e.g. ``S(0)R->RR->RS(1)``.

    A state whose shard order is not the default (outer mesh dim first) shows
    its order, e.g. ``S(0)S(0)[order 0:[1, 0]]``.  A plan the search did not
    prove cheapest ends in `` [approximate search]`` (the best its probes found,
    or the greedy or simple first plan, improved by its local rewrites) or
    `` [greedy fallback]`` (the greedy plan, which nothing beat).

    Example:
        >>> import dtensor_np as dt
        >>> src = dt.DTensorSpec(dt.DeviceMesh((2,)), (dt.Shard(0),), dt.TensorMeta((4,), "f8"))
        >>> explain(dt.plan_redistribute(src, src.with_placements((dt.Replicate(),))), src)
        'S(0)->R'
    """
    if not isinstance(src_spec, DTensorSpec):
        raise TypeError(f"explain(plan, src_spec): expected the source DTensorSpec second, got "
                        f"{type(src_spec).__name__} {src_spec!r:.60}")
    if not isinstance(plan, tuple) or not all(isinstance(step, Step) for step in plan):
        raise TypeError(f"explain(plan, src_spec): expected the plan of plan_redistribute first, got "
                        f"{type(plan).__name__} {plan!r:.60}")
    text = "->".join([str(src_spec)] + [str(step.after) for step in plan])
    return text + _METHOD_NOTES.get(getattr(plan, "method", "exact"), "")


# what explain() adds for a plan that is not known to be the cheapest
_METHOD_NOTES = {"approximate": " [approximate search]", "greedy": " [greedy fallback]"}


# --------------------------------------------------------------------------
# the reference's greedy planner, for comparison and as an upper bound
# --------------------------------------------------------------------------
def _greedy_applies(src: DTensorSpec, dst: DTensorSpec) -> bool:
    return src.shard_order == default_shard_order(src.placements) and dst.shard_order == default_shard_order(
        dst.placements
    )


def plan_greedy(src_spec: DTensorSpec, dst_spec: DTensorSpec) -> tuple[tuple[int, Placement, Placement], ...]:
    """PyTorch's default greedy walk: ``(mesh_dim, src, dst)`` per step (default shard orders only).

    Inner mesh dims are first undone where the nested sharding of the target
    disagrees, then every mesh dim is moved outer to inner.

    Example:
        >>> from dtensor_np import DeviceMesh, Shard, Replicate, DTensorSpec, TensorMeta
        >>> mesh = DeviceMesh((2, 2))
        >>> src = DTensorSpec(mesh, (Shard(0), Shard(0)), TensorMeta((8,), "f4"))
        >>> [(m, str(a), str(b)) for m, a, b in plan_greedy(src, src.with_placements((Replicate(), Shard(0))))]
        [(1, 'S(0)', 'R'), (0, 'S(0)', 'R'), (1, 'R', 'S(0)')]
    """
    _validate(src_spec, dst_spec)
    mesh = src_spec.mesh
    current = list(src_spec.placements)
    target = list(dst_spec.placements)
    steps: list[tuple[int, Placement, Placement]] = []
    if mesh.ndim > 1 and src_spec.num_shards > 1:
        for m in reversed(range(mesh.ndim)):
            want = target[m]
            if isinstance(want, Shard):
                before_now = [i for i in range(m) if current[i].is_shard(want.dim)]
                before_want = [i for i in range(m) if target[i].is_shard(want.dim)]
                if before_now != before_want:
                    want = _R
            if current[m] != want:
                steps += _greedy_step(m, current[m], want)
                current[m] = want
    for m in range(mesh.ndim):
        if current[m] != target[m]:
            steps += _greedy_step(m, current[m], target[m])
            current[m] = target[m]
    return tuple(steps)


def _greedy_step(m: int, a: Placement, b: Placement) -> list[tuple[int, Placement, Placement]]:
    """The greedy walk's step from ``a`` to ``b`` on mesh dim ``m``: two where a Shard becomes a Partial (a new
    Partial only comes from Replicate: ``S -> R -> P``)."""
    if isinstance(a, Shard) and isinstance(b, Partial):
        return [(m, a, _R), (m, _R, b)]
    return [(m, a, b)]


def greedy_collectives(src_spec: DTensorSpec, dst_spec: DTensorSpec) -> int:
    """Collectives the greedy plan issues (steps on mesh dims of size 1 are free)."""
    return count_collectives_greedy(plan_greedy(src_spec, dst_spec), src_spec.mesh.shape)


def count_collectives_greedy(steps: tuple[tuple[int, Placement, Placement], ...], mesh_shape: tuple[int, ...]) -> int:
    n = 0
    for m, a, b in steps:
        if mesh_shape[m] == 1 or a == b:
            continue
        if isinstance(a, Replicate):
            continue  # R -> S is a local chunk, R -> P a local partition
        n += 1
    return n


def backward_target(spec: DTensorSpec) -> DTensorSpec:
    """The spec the gradient of an array of ``spec`` comes back in: the same placements, a ``Partial`` made ``Replicate``.

    The backward of a redistribute from ``spec`` (PyTorch's ``Redistribute.backward``):
    the cotangent moves back to the input's placements, except that a pending
    reduction is not recreated; a replicated cotangent is kept, since turning
    it back into a Partial would only cost a reduction later.  So a parameter
    ``Shard(0)`` on "dp" gets a ``Shard(0)`` gradient (reduce-scattered from
    the Partial sums of the data-parallel backward), a ``Partial`` input a
    ``Replicate`` one.

    Example:
        >>> from dtensor_np import DeviceMesh, DTensorSpec, TensorMeta
        >>> spec = DTensorSpec(DeviceMesh((2, 2)), (Shard(0), Partial()), TensorMeta((4,), "f4"))
        >>> str(backward_target(spec))
        'S(0)R'
    """
    placements = tuple(_R if isinstance(p, Partial) else p for p in spec.placements)
    return spec if placements == spec.placements else spec.with_placements(placements, spec.shard_order)


# --------------------------------------------------------------------------
# pure per-step information for executors and graph lowering
# --------------------------------------------------------------------------
def _spec_after(placements: tuple[Placement, ...], live_order: ShardOrder, src: DTensorSpec) -> DTensorSpec:
    """The full spec of a search state (size-1 mesh dims put back into the shard order, outermost)."""
    mesh = src.mesh
    trivial = [m for m, size in enumerate(mesh.shape) if size == 1]
    if trivial:
        default = default_shard_order(placements)
        nontrivial_default = tuple((d, tuple(m for m in ms if m not in trivial)) for d, ms in default)
        if tuple((d, ms) for d, ms in nontrivial_default if ms) == tuple(live_order):
            live_order = default  # the default order, size-1 mesh dims in it too
        else:  # size-1 mesh dims first in their tensor dim's order
            live = dict(live_order)
            order: dict[int, tuple[int, ...]] = {}
            for d in range(src.ndim):
                ones = tuple(m for m in trivial if placements[m].is_shard(d))
                order[d] = ones + live.get(d, ())
            live_order = _freeze(order)
    # the placements come from a valid spec, move by move, and the order is the search's (sorted,
    # no empty entries): the spec needs no validating again
    return DTensorSpec.from_normal(mesh=mesh, placements=placements, tensor_meta=src.tensor_meta, shard_order=live_order)


@dataclass(frozen=True, slots=True)
class CollectiveCall:
    """The backend call that runs one collective step: kind, rank groups, and its static arguments.

    ``op`` for reductions; ``axis`` for all_gather and reduce_scatter;
    ``split_axis``/``concat_axis`` for all_to_all; ``in_sizes``/``out_sizes``
    every world rank's length along those axes (None: the backend splits
    evenly).  ``mesh_dims`` are the mesh dims the groups run along.
    :meth:`arguments` gives the keyword arguments of the backend's method.

    Example:
        >>> from dtensor_np import DeviceMesh, DTensorSpec, TensorMeta
        >>> src = DTensorSpec(DeviceMesh((2,)), (Shard(0),), TensorMeta((5,), "f4"))
        >>> call = collective_call(plan_redistribute(src, src.with_placements((Replicate(),)))[0])
        >>> call.kind, call.groups, call.arguments()
        ('all_gather', ((0, 1),), {'axis': 0, 'in_sizes': {0: 3, 1: 2}})
    """

    kind: str
    groups: Groups
    mesh_dims: tuple[int, ...]
    op: Optional[str] = None
    axis: Optional[int] = None
    split_axis: Optional[int] = None
    concat_axis: Optional[int] = None
    in_sizes: Optional[tuple[int, ...]] = None
    out_sizes: Optional[tuple[int, ...]] = None

    def __post_init__(self) -> None:
        if self.kind not in COLLECTIVE_KINDS:
            raise ShardingError(f"a collective's kind must be one of {COLLECTIVE_KINDS}, got {self.kind!r}")

    def arguments(self) -> dict[str, Any]:
        """The keyword arguments of the backend method (and ``prepare``) that runs this call."""
        def sizes(values: Optional[tuple[int, ...]]) -> Optional[dict[int, int]]:
            return None if values is None else dict(enumerate(values))

        if self.kind == "all_gather":
            return {"axis": self.axis, "in_sizes": sizes(self.in_sizes)}
        if self.kind == "reduce_scatter":
            return {"op": self.op, "axis": self.axis, "out_sizes": sizes(self.out_sizes)}
        if self.kind == "all_reduce":
            return {"op": self.op}
        return {"split_axis": self.split_axis, "concat_axis": self.concat_axis,
                "in_sizes": sizes(self.in_sizes), "out_sizes": sizes(self.out_sizes)}

    def out_shape(self, rank: int, shape: tuple[int, ...], world_size: int) -> tuple[int, ...]:
        """The shape ``rank`` gets from its input of ``shape`` (the collective's own arithmetic)."""
        layout = group_layout(self.groups, world_size)
        group = layout.group_of(rank)
        op = OPS[self.kind].parse(len(shape), group, **self.arguments())
        return op.out_shape(tuple(shape), layout.position[rank], len(group))


def collective_call(step: Step) -> CollectiveCall:
    """The backend call that runs a collective step (sizes from the specs before and after it).

    Sizes map every world rank to its length along the axis (``torch.chunk``
    sizes, nested in shard order); the redistribute executor, the lowering pass
    and ``plan_view`` all call the collective with these.
    """
    if not step.is_collective:
        raise ShardingError(f"{step} is a local step, not a collective")
    before, after = step.before, step.after
    ranks = before.mesh.all_ranks

    def sizes(spec: DTensorSpec, axis: int) -> tuple[int, ...]:
        return tuple(spec.local_shape_of_rank(r)[axis] for r in ranks)

    groups = before.mesh.groups(step.mesh_dims)
    kind = step.kind
    if kind == "all_gather":
        axis = step.src.dim  # type: ignore[union-attr]
        return CollectiveCall(kind, groups, step.mesh_dims, axis=axis, in_sizes=sizes(before, axis))
    if kind == "all_reduce":
        return CollectiveCall(kind, groups, step.mesh_dims, op=step.src.reduce_op)  # type: ignore[union-attr]
    if kind == "reduce_scatter":
        axis = step.dst.dim  # type: ignore[union-attr]
        return CollectiveCall(kind, groups, step.mesh_dims, op=step.src.reduce_op, axis=axis,  # type: ignore[union-attr]
                              out_sizes=sizes(after, axis))
    concat_axis, split_axis = step.src.dim, step.dst.dim  # type: ignore[union-attr]  # all_to_all: S(concat) -> S(split)
    return CollectiveCall(kind, groups, step.mesh_dims, split_axis=split_axis, concat_axis=concat_axis,
                          in_sizes=sizes(before, concat_axis), out_sizes=sizes(after, split_axis))
