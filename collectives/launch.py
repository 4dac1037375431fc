"""Was this process started by ``mpiexec``?  Answered from the environment, without MPI."""
from __future__ import annotations

import os

__all__ = ["launched_by_mpiexec", "mpi_world_size"]

# Set by the launchers of MPICH/Intel MPI (Hydra: PMI_*, MPI_LOCALNRANKS),
# Open MPI (OMPI_*, PMIX_*), MVAPICH (MV2_*) and Cray/HPE (ALPS, PALS).
_RANK_VARIABLES = (
    "PMI_RANK",
    "PMI_SIZE",
    "PMIX_RANK",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "MPI_LOCALNRANKS",
    "MV2_COMM_WORLD_RANK",
    "MV2_COMM_WORLD_SIZE",
    "ALPS_APP_PE",
    "PALS_RANKID",
)
_SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE")


def launched_by_mpiexec() -> bool:
    """True when an MPI launcher started this process (checks env vars only).

    Does not import ``mpi4py.MPI``, so it is safe to call before deciding
    whether to initialise MPI at all.

    Example:
        >>> launched_by_mpiexec()  # a plain `python` process
        False
    """
    environ = os.environ
    return any(environ.get(name) for name in _RANK_VARIABLES)


def mpi_world_size() -> int | None:
    """The size of ``COMM_WORLD`` when launched by mpiexec, else None.

    Read from the launcher's environment when it says; otherwise MPI is asked.

    Example:
        >>> mpi_world_size() is None  # a plain `python` process
        True
    """
    if not launched_by_mpiexec():
        return None
    for name in _SIZE_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    from mpi4py import MPI

    return MPI.COMM_WORLD.Get_size()
