"""``get_backend``: a backend by name."""
from __future__ import annotations

from .errors import CollectiveError
from .mpi import MpiBackend
from .protocol import Backend
from .simulated import SimulatedBackend

__all__ = ["get_backend"]

_mpi_backend: MpiBackend | None = None


def get_backend(name: str, world_size: int | None = None) -> Backend:
    """``"simulated"`` (needs ``world_size``) or ``"mpi"`` (one shared backend over ``COMM_WORLD``).

    Example:
        >>> get_backend("simulated", 4).world_size
        4
    """
    global _mpi_backend
    if name == "simulated":
        if world_size is None:
            raise CollectiveError("get_backend('simulated') needs world_size, got None")
        return SimulatedBackend(world_size)
    if name == "mpi":
        if _mpi_backend is None:
            _mpi_backend = MpiBackend()
        if world_size is not None and world_size != _mpi_backend.world_size:
            raise CollectiveError(
                f"get_backend('mpi', {world_size}): expected world_size "
                f"{_mpi_backend.world_size} (the size of COMM_WORLD), got {world_size}"
            )
        return _mpi_backend
    raise CollectiveError(f"unknown backend {name!r}: expected 'simulated' or 'mpi'")
