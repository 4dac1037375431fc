"""Dead-code elimination: nodes whose results nothing uses are dropped.

A differentiated graph keeps forward values no gradient needs (the
exponent's branch of ``x ** 2``, a mask for an unused cotangent); on a mesh
they cost a local call each per rank, or a collective.  Pruning depends only
on the graph, so every rank drops the same nodes and still makes the same
collectives.  A lowered collective's start is kept with its wait (the wait
reads it), and a wait whose result nothing reads is kept too, so no started
collective is left unfinished.

Example:
    >>> import numpy as np
    >>> from dtensor_np.graph import trace
    >>> g = trace(lambda x: (np.exp(x), np.sin(x))[0], np.ones(2))
    >>> [n.op for n in g.nodes], [n.op for n in prune(g).nodes]
    (['exp', 'sin'], ['exp'])
"""

from __future__ import annotations

from dataclasses import replace

from ..graph.graph import Graph
from ..graph.ir import MeshOp

__all__ = ["prune"]


def prune(graph: Graph) -> Graph:
    """``graph`` without the nodes no output depends on (waits of started collectives kept); pure.

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> g = dt.trace(lambda x: (np.exp(x), x + 1)[1], dt.ShapeDtype((2,), "f8"))
        >>> [n.op for n in g.nodes], [n.op for n in prune(g).nodes]
        (['exp', 'add'], ['add'])
    """
    needed = {v.id for v in graph.outputs}
    kept = []
    for node in reversed(graph.nodes):
        waits = isinstance(node.fn, MeshOp) and node.fn.waits
        if waits or any(v.id in needed for v in node.outputs):
            kept.append(node)
            needed.update(v.id for v in node.inputs)
    return replace(graph, nodes=tuple(reversed(kept)))
