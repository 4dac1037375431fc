"""Traced graphs: a small, immutable IR of NumPy programs, its tracer, verifier and interpreters.

``trace(fn, *example_args)`` records a plain NumPy function as a
:class:`Graph`; ``graph(*args)`` runs it; ``verify(graph)`` checks it;
``print(graph)`` shows one line per node.  Passes such as
``dtensor_np.tensor_parallel.tensor_parallel_transform`` return new graphs,
which carry a sharding on every node and run across a mesh.

Example:
    >>> import numpy as np
    >>> g = trace(lambda x, y: (x * y).sum(axis=0), np.ones((2, 3)), ShapeDtype((2, 3), "f8"))
    >>> print(g)
    graph(x: f64[2,3], y: f64[2,3]):
      %0: f64[2,3] = multiply(x, y)
      %1: f64[3] = sum(%0, axis=0)
      return %1
    >>> g(np.ones((2, 3)), np.full((2, 3), 2.0)).tolist()
    [4.0, 4.0, 4.0]
"""

from .distributed import graph_collectives, run_sharded
from .evaluate import evaluate
from .graph import Graph
from .ir import CallParams, Constant, GraphSharding, Input, MeshOp, Node, NodeSharding, Redistribute, ShapeDtype, Var
from .tracer import Tracer, trace
from .verify import GraphError, verify

__all__ = [
    "trace",
    "Tracer",
    "ShapeDtype",
    "Var",
    "Node",
    "CallParams",
    "Input",
    "Graph",
    "Constant",
    "Redistribute",
    "MeshOp",
    "NodeSharding",
    "GraphSharding",
    "verify",
    "GraphError",
    "evaluate",
    "run_sharded",
    "graph_collectives",
]
