"""Dead-code elimination: nodes whose results nothing uses are dropped.

A differentiated graph keeps forward values no gradient needs (the
exponent's branch of ``x ** 2``, a mask for an unused cotangent); on a mesh
they cost a local call each per rank.  Nodes that communicate are kept
whatever their use, so every rank still makes the same collectives.

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
from ..graph.ir import MeshOp, Redistribute

__all__ = ["prune"]


def prune(graph: Graph) -> Graph:
    """``graph`` without the nodes no output depends on (collectives kept); pure.

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> g = dt.trace(lambda x: (np.exp(x), x + 1)[1], dt.ShapeDtype((2,), "f8"))
        >>> [n.op for n in g.nodes], [n.op for n in prune(g).nodes]
        (['exp', 'add'], ['add'])
    """
    needed = {v.id for v in graph.outputs}
    kept = []
    for node in reversed(graph.nodes):
        communicates = isinstance(node.fn, Redistribute) or (isinstance(node.fn, MeshOp) and node.fn.communicates)
        if communicates or any(v.id in needed for v in node.outputs):
            kept.append(node)
            needed.update(v.id for v in node.inputs)
    return replace(graph, nodes=tuple(reversed(kept)))
