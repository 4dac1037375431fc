"""dtensor_np: distributed tensors for NumPy and CuPy over MPI, with PyTorch DTensor semantics.

Build a mesh, place arrays on it with ``Shard``, ``Replicate`` and
``Partial``, call NumPy functions on them; the same script runs with every
rank simulated in one process and under ``mpiexec -n N``.

Example:
    >>> import numpy as np
    >>> import dtensor_np as dt
    >>> mesh = dt.init_device_mesh((2, 2), dim_names=("dp", "tp"), backend="simulated")
    >>> mesh.rank_groups("tp")
    [[0, 1], [2, 3]]
    >>> x = dt.distribute_tensor(np.arange(8.0).reshape(4, 2), mesh, [dt.Shard(0), dt.Replicate()])
    >>> float(x.redistribute([dt.Replicate(), dt.Shard(1)]).full_tensor().sum())
    28.0

``Placement`` is the type of a placement (``Shard``, ``Replicate`` or ``Partial``):

    >>> all(isinstance(p, dt.Placement) for p in x.placements)
    True
"""

# First: the modules that may run compiled are loaded by the guard that keeps a stale build out
# (dtensor_np.native), before anything imports them.
from . import native

for _name in native.COMPILED:
    native.load(_name)
del _name

from collectives import CommCounter, SpmdError, cache_info, check_spmd, clear_caches, comm_counter

from .dispatch import fallback_counts, replicate_fallback
from .conversion import ImplicitGatherWarning, implicit_gather
from .devices import Sharding
from .dtensor import DTensor, distribute_tensor
from . import views  # noqa: F401  (NumPy's views: registers them with DTensor)
from . import constants  # noqa: F401  (plain arrays in a call: replicated constants)
from . import functions  # noqa: F401  (NumPy functions that are compositions of others)
from .errors import ShardingError
from .layout import Layout
from .local_tensor import LocalTensor, local_map
from .mesh import DeviceMesh
from .placements import Partial, Placement, Replicate, Shard
from .planner import CostModel, Step, explain, plan_greedy, plan_redistribute
from .runtime import init_device_mesh
from .spec import DTensorSpec, TensorMeta, compute_local_shape_and_global_offset
from .visualize import plan_view, sharding_table, visualize_sharding
from .graph import Graph, ShapeDtype, trace
from .tensor_parallel import ColwiseParallel, ParallelStyle, RowwiseParallel, tensor_parallel_transform
from . import array_api
from .autodiff import grad, grad_graph, value_and_grad, vjp
from . import optim
from .fsdp import FSDPStep, fsdp
from . import checkpoint
from . import random

__all__ = [
    "ShardingError",
    "Layout",
    "DeviceMesh",
    "init_device_mesh",
    "Placement",
    "Shard",
    "Replicate",
    "Partial",
    "TensorMeta",
    "DTensorSpec",
    "compute_local_shape_and_global_offset",
    "DTensor",
    "distribute_tensor",
    "Sharding",
    "LocalTensor",
    "local_map",
    "Step",
    "CostModel",
    "plan_redistribute",
    "plan_greedy",
    "explain",
    "replicate_fallback",
    "fallback_counts",
    "clear_caches",
    "ImplicitGatherWarning",
    "implicit_gather",
    "cache_info",
    "comm_counter",
    "CommCounter",
    "check_spmd",
    "SpmdError",
    "visualize_sharding",
    "sharding_table",
    "plan_view",
    "trace",
    "ShapeDtype",
    "Graph",
    "tensor_parallel_transform",
    "ParallelStyle",
    "ColwiseParallel",
    "RowwiseParallel",
    "array_api",
    "grad",
    "grad_graph",
    "value_and_grad",
    "vjp",
    "fsdp",
    "FSDPStep",
    "optim",
    "checkpoint",
    "random",
]

__version__ = "0.1.0"
