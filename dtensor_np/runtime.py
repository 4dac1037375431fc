"""Where a mesh's arrays live: choosing and fetching the collectives backend.

This is the edge between the pure metadata (meshes, specs, plans) and the
``collectives`` layer: a mesh names its backend (``"simulated"`` or
``"mpi"``); :func:`backend_for` returns the object that moves its data.

Example:
    >>> mesh = init_device_mesh((2, 2), dim_names=("dp", "tp"))  # not under mpiexec: simulated
    >>> mesh.backend, backend_for(mesh).ranks
    ('simulated', (0, 1, 2, 3))
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import collectives

from .errors import ShardingError
from .int_tuple import product
from .mesh import BACKENDS, DeviceMesh, mesh_dim_names, mesh_shape

__all__ = ["init_device_mesh", "backend_for"]


def init_device_mesh(
    shape: Union[int, Sequence[int]],
    dim_names: Optional[Sequence[str]] = None,
    backend: Optional[str] = None,
) -> DeviceMesh:
    """A mesh ready for arrays: ``"mpi"`` under ``mpiexec`` with a world as large as the mesh, else simulated.

    Args:
        shape: mesh shape, e.g. ``(2, 2)``.
        dim_names: optional names, e.g. ``("dp", "tp")``.
        backend: ``None`` to choose as above, or ``"simulated"`` / ``"mpi"``.

    Raises:
        ShardingError: under ``mpiexec -n N`` with ``N > 1`` ranks and a mesh
            of another size, or ``backend="mpi"`` without a matching MPI world;
            for a shape that is not positive ints (NumPy integers are ints), or
            dim names that do not fit it.

    Example:
        >>> init_device_mesh((4,), backend="simulated")
        DeviceMesh((4,))
    """
    shape = mesh_shape(shape)
    dim_names = mesh_dim_names(dim_names, shape)
    size = product(shape)
    if backend is not None and backend not in BACKENDS:
        raise ShardingError(f"backend must be None, 'simulated' or 'mpi', got {backend!r}")
    world = collectives.mpi_world_size() if collectives.launched_by_mpiexec() else None
    if backend is None:
        if world is not None and world > 1:
            if world != size:
                raise ShardingError(
                    f"launched by mpiexec with {world} ranks, but the mesh {shape} has {size}: "
                    f"run `mpiexec -n {size} ...` or pass backend='simulated'"
                )
            backend = "mpi"
        else:
            backend = "simulated"
    if backend == "mpi":
        world = collectives.get_backend("mpi").world_size
        if world != size:
            raise ShardingError(f"backend='mpi' needs an MPI world of {size} ranks for mesh {shape}, got {world}")
    return DeviceMesh(shape, dim_names, backend=backend)


def backend_for(mesh: DeviceMesh) -> "collectives.Backend":
    """The collectives backend that holds and moves the arrays of ``mesh``."""
    if mesh.backend == "mpi":
        backend = collectives.get_backend("mpi")
        if backend.world_size != mesh.world_size:
            raise ShardingError(
                f"mesh {mesh.shape} spans {mesh.world_size} ranks but the MPI world has {backend.world_size}"
            )
        return backend
    return collectives.get_backend("simulated", mesh.world_size)
