"""``get_backend``: a backend by name."""
from __future__ import annotations

from .errors import CollectiveError
from .mpi import MpiBackend
from .backend import Backend
from .simulated import SimulatedBackend

__all__ = ["get_backend"]

_mpi_backend: MpiBackend | None = None
_simulated: dict[int, SimulatedBackend] = {}  # one per world size: they hold no state but their caches


def get_backend(name: str, world_size: int | None = None) -> Backend:
    """``"simulated"`` (needs ``world_size``) or ``"mpi"`` (one shared backend over ``COMM_WORLD``).

    The same backend object comes back for the same arguments, so prepared
    collectives are worked out once per process.

    Example:
        >>> get_backend("simulated", 4).world_size
        4
    """
    global _mpi_backend
    if name == "simulated":
        if world_size is None:
            raise CollectiveError("get_backend('simulated') needs world_size, got None")
        backend = _simulated.get(world_size) if isinstance(world_size, int) else None
        if backend is None:
            backend = SimulatedBackend(world_size)
            _simulated[world_size] = backend
        return backend
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
