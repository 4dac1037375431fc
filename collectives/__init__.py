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

The types of the arguments: ``Array`` (a NumPy or CuPy array), ``Group`` (a
tuple of world ranks), ``Groups`` (a tuple of groups), ``Shards`` (rank ->
array), ``Shapes`` (rank -> shape), ``Sizes`` (rank -> sizes along an axis),
``ReduceOp`` (one of ``REDUCE_OPS``); ``KINDS`` names every collective:

    >>> from collectives import KINDS, REDUCE_OPS, Array, Group, Groups, ReduceOp, Shapes, Shards, Sizes
    >>> "all_gather" in KINDS, REDUCE_OPS
    (True, ('sum', 'avg', 'max', 'min'))
    >>> groups: Groups = ((0, 2), (1, 3)); shapes: Shapes = {0: (2,)}; sizes: Sizes = {0: (1, 1)}
    >>> shards: Shards = {0: np.ones(2)}; group: Group = groups[0]; op: ReduceOp = "sum"; a: Array = shards[0]
"""
from .arguments import GroupLayout, group_layout
from .backend import Backend, Prepared
from .caches import BoundedCache, cache_info, clear_caches, memo, register_cache
from .chunks import chunk_size_and_offset, chunk_sizes, offsets
from .counting import KINDS, CommCounter, comm_counter
from .device import array_module, cuda_aware_mpi, is_device_array, on_device_of, ufunc_at
from .errors import CollectiveError
from .handles import Handle
from .keys import frozen, static_key
from .launch import launched_by_mpiexec, mpi_world_size
from .mpi import MpiBackend
from .recycling import allocator, release_buffers
from .registry import get_backend
from .simulated import SimulatedBackend
from .spmd import SpmdError, check_spmd, checking_spmd
from .types import REDUCE_OPS, Array, Group, Groups, ReduceOp, Shapes, Shards, Sizes

__all__ = [
    "KINDS",
    "REDUCE_OPS",
    "Array",
    "Backend",
    "BoundedCache",
    "CollectiveError",
    "CommCounter",
    "GroupLayout",
    "Group",
    "Groups",
    "Handle",
    "MpiBackend",
    "Prepared",
    "ReduceOp",
    "Shapes",
    "Shards",
    "SimulatedBackend",
    "SpmdError",
    "Sizes",
    "allocator",
    "cache_info",
    "array_module",
    "chunk_size_and_offset",
    "check_spmd",
    "checking_spmd",
    "chunk_sizes",
    "clear_caches",
    "comm_counter",
    "cuda_aware_mpi",
    "frozen",
    "get_backend",
    "group_layout",
    "is_device_array",
    "launched_by_mpiexec",
    "memo",
    "mpi_world_size",
    "offsets",
    "on_device_of",
    "register_cache",
    "release_buffers",
    "static_key",
    "ufunc_at",
]
