"""Collectives for dtensor_np: the only code that talks to MPI or moves device memory.

The higher layer passes "per-rank shards" — a mapping from world rank to that
rank's array (every rank of the world with ``SimulatedBackend``, only this
process's rank with ``MpiBackend``) — and gets back a new ``dict`` with the
same keys.  ``groups`` partitions the world; each group runs the collective
independently, and a rank's position in its group is its index in it.

Example:
    >>> import numpy as np
    >>> from collectives import get_backend
    >>> backend = get_backend("simulated", 4)
    >>> shards = {r: np.array([r]) for r in range(4)}
    >>> backend.all_gather(shards, ((0, 2), (1, 3)))[1]
    array([1, 3])
"""
from .counting import CommCounter, comm_counter
from .device import array_module, cuda_aware_mpi
from .errors import CollectiveError
from .handles import Handle
from .launch import launched_by_mpiexec, mpi_world_size
from .layout import chunk_sizes
from .mpi import MpiBackend
from .protocol import Array, Backend, Groups, ReduceOp
from .registry import get_backend
from .simulated import SimulatedBackend

__all__ = [
    "Array",
    "Backend",
    "CollectiveError",
    "CommCounter",
    "Groups",
    "Handle",
    "MpiBackend",
    "ReduceOp",
    "SimulatedBackend",
    "array_module",
    "chunk_sizes",
    "comm_counter",
    "cuda_aware_mpi",
    "get_backend",
    "launched_by_mpiexec",
    "mpi_world_size",
]
