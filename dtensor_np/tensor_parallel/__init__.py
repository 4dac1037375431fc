"""Tensor parallelism for traced graphs: parallel styles and the graph transform.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> from dtensor_np.graph import trace
    >>> params = {"fc1.weight": np.ones((8, 4)), "fc2.weight": np.ones((4, 8))}
    >>> mlp = lambda p, x: np.maximum(x @ p["fc1.weight"].T, 0) @ p["fc2.weight"].T
    >>> g = trace(mlp, params, np.ones((2, 4)))
    >>> tp, local = tensor_parallel_transform(g, params, dt.DeviceMesh((4,)),
    ...                                       {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    >>> tp(local, np.ones((2, 4))).tolist()
    [[32.0, 32.0, 32.0, 32.0], [32.0, 32.0, 32.0, 32.0]]
"""

from .params import flatten_params, plan_placements
from .sharding import node_sharding, rule_of
from .styles import ColwiseParallel, ParallelStyle, RowwiseParallel
from .transform import local_parameters, shard_graph, tensor_parallel_transform, tp_mesh_dim

__all__ = [
    "ParallelStyle",
    "ColwiseParallel",
    "RowwiseParallel",
    "tensor_parallel_transform",
    "shard_graph",
    "local_parameters",
    "tp_mesh_dim",
    "flatten_params",
    "plan_placements",
    "node_sharding",
    "rule_of",
]
