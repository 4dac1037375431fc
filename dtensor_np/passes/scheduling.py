"""Scheduling: start every collective as early as its inputs allow, wait for it just before its first use.

:func:`schedule` reorders the nodes of a sharded graph (any order in which
every value is defined before it is read is a valid program; this pass picks
one that overlaps communication with compute):

* *eager* nodes run as soon as their inputs exist: collective starts, and
  local steps and bucket copy-ins whose every consumer is eager (they only
  feed a start);
* *lazy* nodes run only when something needs their outputs: waits, and the
  local work after them (bucket split-outs, chunks of a received value);
* every other node (the program's compute, constants, unlowered
  redistributes) keeps its relative order.

So the compute between a start and its wait is everything that does not
need the collective's result: it runs while the collective is in flight.
A pass that wants a start later than its inputs allow (FSDP's one bucket
ahead prefetch) feeds it through an :class:`~dtensor_np.passes.ops.After`
node: ``after(x, token)`` is ``x``, available once ``token`` is.
The order is a pure function of the graph, the same on every rank, so under
MPI every rank starts its non-blocking collectives in the same order.  The
input graph may list nodes in any order (a pass that merges nodes appends
them); a cycle is an error.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> from dtensor_np.graph import trace
    >>> from dtensor_np.tensor_parallel import shard_graph
    >>> from dtensor_np.passes import lower
    >>> mesh = dt.DeviceMesh((2,))
    >>> window = lambda v: np.lib.stride_tricks.sliding_window_view(v, 1, axis=0)  # no sharding rule: runs replicated
    >>> g = trace(lambda p, x: (np.exp(x), window(p["w"])), {"w": np.ones((4, 2))}, np.ones(3))
    >>> specs = (dt.DTensorSpec(mesh, (dt.Shard(0),), g.inputs[0].aval.meta),
    ...          dt.DTensorSpec(mesh, (dt.Replicate(),), g.inputs[1].aval.meta))
    >>> print(lower(shard_graph(g, specs)))  # the gather of w overlaps exp(x)
    graph(p.w: f64[4,2] S(0), x: f64[3] R) on DeviceMesh((2,)):
      %0: f64[4,2] R = all_gather.start(p.w)  # S(0)->R all_gather on mesh dim 0
      %1: f64[3] R = exp(x)
      %2: f64[4,2] R = wait(%0)
      %3: f64[4,2,1] R = sliding_window_view(%2, 1, axis=0)  # replicated: no sharding rule for numpy.lib.stride_tricks.sliding_window_view
      return %1, %3
"""

from __future__ import annotations

import heapq
from dataclasses import replace

from ..graph.graph import Graph
from ..graph.ir import MeshOp, Node
from ..graph.verify import GraphError

__all__ = ["schedule", "eager_nodes"]


def _is_start(node: Node) -> bool:
    return isinstance(node.fn, MeshOp) and node.fn.pending


def eager_nodes(graph: Graph) -> set[int]:
    """Indices of the nodes :func:`schedule` runs as early as possible (see the module doc)."""
    consumers: dict[int, list[int]] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            consumers.setdefault(v.id, []).append(i)
    outputs = {v.id for v in graph.outputs}
    eager = {i for i, node in enumerate(graph.nodes) if _is_start(node)}
    changed = True
    while changed:  # local mesh ops that only feed eager nodes become eager too
        changed = False
        for i, node in enumerate(graph.nodes):
            if i in eager or not isinstance(node.fn, MeshOp) or node.fn.communicates:
                continue
            users = [u for v in node.outputs for u in consumers.get(v.id, [])]
            if users and all(u in eager for u in users) and not any(v.id in outputs for v in node.outputs):
                eager.add(i)
                changed = True
    return eager


def schedule(graph: Graph) -> Graph:
    """``graph`` with its nodes reordered: starts early, waits late, compute in its own order (see the module doc).

    Pure: a new graph with the same nodes; idempotent.

    Example:
        >>> import dataclasses, numpy as np, dtensor_np as dt
        >>> from dtensor_np.graph import trace
        >>> from dtensor_np.tensor_parallel import shard_graph
        >>> from dtensor_np.passes import lower
        >>> window = lambda v: np.lib.stride_tricks.sliding_window_view(v, 1, axis=0)  # no sharding rule: runs replicated
        >>> g = trace(lambda p, x: (np.exp(x), window(p)), np.ones((4, 2)), np.ones(3))
        >>> mesh = dt.DeviceMesh((2,))
        >>> low = lower(shard_graph(g, (dt.DTensorSpec(mesh, (dt.Shard(0),), g.inputs[0].aval.meta),
        ...                             dt.DTensorSpec(mesh, (dt.Replicate(),), g.inputs[1].aval.meta))))
        >>> late = dataclasses.replace(low, nodes=low.nodes[1:2] + low.nodes[:1] + low.nodes[2:])
        >>> [n.op for n in late.nodes], [n.op for n in schedule(late).nodes]
        (['exp', 'all_gather.start', 'wait', 'sliding_window_view'], ['all_gather.start', 'exp', 'wait', 'sliding_window_view'])
    """
    nodes = graph.nodes
    producer: dict[int, int] = {}
    for i, node in enumerate(nodes):
        for v in node.outputs:
            producer[v.id] = i
    eager = eager_nodes(graph)
    lazy = {i for i, node in enumerate(nodes) if isinstance(node.fn, MeshOp) and i not in eager}
    available: set[int] = {v.id for v in graph.inputs}
    emitted: list[int] = []
    done = [False] * len(nodes)
    # eager nodes wait on a count of inputs not yet available
    missing: dict[int, int] = {}
    waiting_on: dict[int, list[int]] = {}
    ready: list[int] = []
    for i in sorted(eager):
        ids = {v.id for v in nodes[i].inputs} - available
        missing[i] = len(ids)
        for vid in ids:
            waiting_on.setdefault(vid, []).append(i)
        if not ids:
            heapq.heappush(ready, i)

    def emit(i: int) -> None:
        done[i] = True
        emitted.append(i)
        for v in nodes[i].outputs:
            available.add(v.id)
            for j in waiting_on.pop(v.id, ()):
                missing[j] -= 1
                if missing[j] == 0:
                    heapq.heappush(ready, j)

    def flush() -> None:
        while ready:
            j = heapq.heappop(ready)
            if not done[j]:
                emit(j)

    def demand(root: int) -> None:
        """Emit node ``root`` after (recursively) the producers of its inputs; no recursion limit."""
        stack: list[tuple[int, bool]] = [(root, False)]
        on_path: set[int] = set()
        while stack:
            i, expanded = stack.pop()
            if done[i]:
                continue
            if expanded:
                on_path.discard(i)
                emit(i)
                flush()
                continue
            if i in on_path:
                raise GraphError(f"node {i} ({nodes[i].op}) depends on itself: the graph has a cycle")
            on_path.add(i)
            stack.append((i, True))
            for v in reversed(nodes[i].inputs):
                if v.id not in available:
                    j = producer.get(v.id)
                    if j is None:
                        raise GraphError(f"node {i} ({nodes[i].op}) reads {v}, which no input or node defines")
                    if j in on_path:
                        raise GraphError(f"node {j} ({nodes[j].op}) depends on itself: the graph has a cycle")
                    stack.append((j, False))

    flush()
    for i in range(len(nodes)):
        if i not in eager and i not in lazy:
            demand(i)
    for v in graph.outputs:
        if v.id not in available and v.id in producer:
            demand(producer[v.id])
    for i in range(len(nodes)):  # whatever nothing needs (dead code), in its own order
        demand(i)
    return replace(graph, nodes=tuple(nodes[i] for i in emitted))
