"""Plain arrays in a call with DTensors: replicated constants on the DTensors' mesh, with no communication.

A NumPy array, a list of numbers or a CuPy array that is an array operand of a
NumPy call with DTensors (``x + np.arange(3)``, ``np.dot(W, onehot)``,
``scores + np.tri(n)``, ``np.concatenate([x, a])``) is a ``Replicate()``
DTensor on the mesh of the call's first DTensor, as JAX takes a NumPy array
in an operation with sharded arrays: every rank already holds the whole
value, so nothing moves.  The value is copied once (the caller may write to
its array later; DTensor buffers are never written), onto the device when the
mesh's shards are CuPy arrays.  Every rank must pass the same value, as for
any replicated input: under :func:`dtensor_np.check_spmd` the ranks first
agree on a checksum of it (one small collective), and a rank-dependent array
raises ``SpmdError`` on every rank instead of a silent divergence.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.arange(6.0).reshape(3, 2), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> with dt.comm_counter() as c:
    ...     y = x + np.array([10.0, 20.0])
    >>> y.full_tensor().tolist(), str(y.spec), c.total
    ([[10.0, 21.0], [12.0, 23.0], [14.0, 25.0]], 'S(0)', 0)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives import SpmdError, checking_spmd

from .arrays import array_library, check_array, checksum
from .placements import Replicate
from .runtime import backend_for
from .sharded import register_constant_maker
from .spec import DTensorSpec, TensorMeta

__all__ = ["replicated_constant"]


def replicated_constant(value: Any, like: Any) -> Any:
    """``value`` (an ndarray, a list of numbers, a CuPy array) as a replicated DTensor on ``like``'s mesh.

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.ones(4), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> c = replicated_constant([1, 2], x)
        >>> str(c.spec), c.full_tensor().tolist()
        ('R', [1, 2])
    """
    array = value if hasattr(value, "dtype") and hasattr(value, "shape") else np.asarray(value)
    array = check_array(array, "a plain array in a call with DTensors")
    mesh = like.mesh
    shards = like.shards
    on_device = any(array_library(s) == "cupy" for s in shards.values())
    if on_device:
        import cupy  # noqa: PLC0415  (the mesh's shards are CuPy arrays: CuPy is there)
        array = cupy.array(array, copy=True)
    else:
        array = np.array(array.get() if array_library(array) == "cupy" else array, copy=True, order="C")
    backend = backend_for(mesh)
    if mesh.backend == "mpi" and checking_spmd():
        _agree(backend, array)
    spec = DTensorSpec(mesh, (Replicate(),) * mesh.ndim, TensorMeta(array.shape, array.dtype))
    return like._result_class({r: array for r in backend.ranks}, spec, namespace=like.namespace)


def _agree(backend: Any, array: Any) -> None:
    """Every rank raises SpmdError unless every rank's constant has one checksum (one small collective)."""
    me = backend.ranks[0]
    table = backend.gather_descriptors({me: (checksum(array), len(array.shape), array.dtype.num)})
    values = set(table.values())
    if len(values) > 1:
        first = table[min(table)]
        odd = sorted(r for r, v in table.items() if v != first)
        raise SpmdError(
            "a plain array in a call with DTensors must be the same on every rank (it is a replicated constant): "
            f"expected the value of rank {min(table)} on every rank, got another on rank(s) {odd}")


register_constant_maker(replicated_constant)
