"""Lowering: every redistribute node becomes explicit collectives (start + wait) and local steps.

:func:`lower` expands each ``redistribute`` node of a sharded graph into the
steps :func:`~dtensor_np.planner.plan_redistribute` plans for it: a collective step
into a :class:`~dtensor_np.passes.ops.Collective` start and its
:data:`~dtensor_np.passes.ops.WAIT`, a local step (``chunk``,
``partition``) into a :class:`~dtensor_np.passes.ops.LocalStep`.  Each new
node carries the specs before and after its step; the last step's output is
the redistribute's own output variable, so the nodes that read it are
unchanged.  The result is then :func:`~dtensor_np.passes.schedule`-d (starts
early, waits late) and verified.

The lowered graph runs the same collectives with the same arguments as the
redistribute executor, so its outputs equal the unlowered graph's (bit for
bit on the simulated backend, and under MPI whenever MPI's blocking and
non-blocking collectives reduce in the same order).

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> from dtensor_np.graph import trace
    >>> from dtensor_np.tensor_parallel import shard_graph
    >>> mesh = dt.DeviceMesh((2, 2))
    >>> window = lambda v: np.lib.stride_tricks.sliding_window_view(v, 1, axis=0)  # no sharding rule: runs replicated
    >>> g = trace(lambda x: window(x), np.ones((4, 4)))
    >>> sharded = shard_graph(g, (dt.DTensorSpec(mesh, (dt.Shard(0), dt.Shard(1)), g.inputs[0].aval.meta),))
    >>> print(lower(sharded))
    graph(x: f64[4,4] S(0)S(1)) on DeviceMesh((2, 2)):
      %0: f64[4,4] RS(1) = all_gather.start(x)  # S(0)S(1)->RS(1) all_gather on mesh dim 0
      %1: f64[4,4] RS(1) = wait(%0)
      %2: f64[4,4] RR = all_gather.start(%1)  # RS(1)->RR all_gather on mesh dim 1
      %3: f64[4,4] RR = wait(%2)
      %4: f64[4,4,1] RR = sliding_window_view(%3, 1, axis=0)  # replicated: no sharding rule for numpy.lib.stride_tricks.sliding_window_view
      return %4
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterator

from ..errors import ShardingError
from ..graph.graph import Graph
from ..graph.ir import Node, NodeSharding, Redistribute, Var
from ..graph.verify import verify
from ..planner import plan_redistribute
from .ops import WAIT, Collective, LocalStep, local_step_function
from .scheduling import schedule

__all__ = ["lower", "is_lowered", "fresh_ids", "require_sharded"]


def require_sharded(graph: Graph, what: str) -> None:
    """TypeError / ShardingError unless ``graph`` is a sharded :class:`Graph`."""
    if not isinstance(graph, Graph):
        raise TypeError(f"{what} needs a Graph, got {type(graph).__name__}")
    if graph.sharding is None:
        raise ShardingError(
            f"{what} needs a sharded graph (from shard_graph or tensor_parallel_transform); this one has no mesh"
        )


def fresh_ids(graph: Graph) -> Iterator[int]:
    """Variable ids no input or node of ``graph`` uses, in increasing order."""
    used = [v.id for v in graph.inputs] + [v.id for n in graph.nodes for v in n.outputs]
    n = 1 + max(used, default=-1)
    while True:
        yield n
        n += 1


def is_lowered(graph: Graph) -> bool:
    """True when ``graph`` has no redistribute node left.

    Example:
        >>> from dtensor_np.graph import trace, ShapeDtype
        >>> is_lowered(trace(lambda x: x + 1, ShapeDtype((2,), "f4")))
        True
    """
    return not any(isinstance(n.fn, Redistribute) for n in graph.nodes)


def _lower_node(node: Node, ids: Iterator[int]) -> list[Node]:
    """The nodes that replace one redistribute node."""
    (x,), (out,) = node.inputs, node.outputs
    src, dst = node.fn.src, node.fn.dst
    steps = plan_redistribute(src, dst)
    if not steps:  # only size-1 mesh dims differ: nothing moves
        relabel = NodeSharding((src,), (dst,), local_step_function(None))
        return [Node(LocalStep("relabel"), (x,), (out,), sharding=relabel)]
    new: list[Node] = []
    for i, step in enumerate(steps):
        target = out if i == len(steps) - 1 else Var(next(ids), x.aval)
        before, after = step.before, step.after
        if step.is_collective:
            pending = Var(next(ids), x.aval)
            start = Collective.from_step(step)
            new.append(Node(start, (x,), (pending,), sharding=NodeSharding((before,), (after,))))
            new.append(Node(WAIT, (pending,), (target,), sharding=NodeSharding((after,), (after,))))
        else:
            op = LocalStep(step.kind, step.mesh_dims)
            local = local_step_function(step)
            new.append(Node(op, (x,), (target,), sharding=NodeSharding((before,), (after,), local)))
        x = target
    return new


def lower(graph: Graph) -> Graph:
    """A new graph with every redistribute node expanded into async collectives and local steps, scheduled.

    ``graph`` must be sharded (from ``shard_graph`` or
    ``tensor_parallel_transform``); it is not modified.  An already lowered
    graph is only rescheduled.

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> from dtensor_np.graph import trace, graph_collectives
        >>> from dtensor_np.tensor_parallel import tensor_parallel_transform, ColwiseParallel
        >>> params = {"fc.weight": np.arange(12.0).reshape(4, 3)}
        >>> g = trace(lambda p, x: x @ p["fc.weight"].T, params, np.ones((2, 3)))
        >>> tp, local = tensor_parallel_transform(g, params, dt.DeviceMesh((2,)), {"fc": ColwiseParallel()})
        >>> low = lower(tp)
        >>> [n.op for n in low.nodes], graph_collectives(low)["all_gather"]
        (['transpose', 'matmul', 'all_gather.start', 'wait'], 1)
        >>> np.array_equal(low(local, np.ones((2, 3))), tp(local, np.ones((2, 3))))
        True
    """
    require_sharded(graph, "lower")
    ids = fresh_ids(graph)
    nodes: list[Node] = []
    for node in graph.nodes:
        if isinstance(node.fn, Redistribute):
            nodes.extend(_lower_node(node, ids))
        else:
            nodes.append(node)
    return verify(schedule(replace(graph, nodes=tuple(nodes))), check_shapes=False)
