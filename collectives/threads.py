"""Sharing a node's cores among its MPI ranks: one BLAS thread pool per rank, sized to fit.

NumPy's BLAS (OpenBLAS in the wheels) starts one thread per core in every
process.  Under ``mpiexec -n 4`` on a 2-core node that is 8 busy threads on 2
cores, while MPI busy-polls in whichever rank waits: a 256x1024 matmul then
takes hundreds of milliseconds instead of one.  So when the MPI backend starts,
every rank limits its BLAS pool to ``cores // ranks on this node`` (at least 1)
with threadpoolctl, once.  The ranks on a node are read from the launcher's
environment (``MPI_LOCALNRANKS`` from MPICH's Hydra, ``OMPI_COMM_WORLD_LOCAL_SIZE``
from Open MPI, ...); without it the whole world is assumed to share the node,
which errs towards fewer threads.  A rank the launcher pinned to fewer cores
than the node has (``mpiexec -bind-to core:4``) keeps that set as its share.

The user's own choice wins: nothing is changed when ``OMP_NUM_THREADS``,
``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS`` or ``BLIS_NUM_THREADS`` is set,
and ``DTENSOR_NP_THREADS=N`` sets the pool to ``N`` threads per rank
(``DTENSOR_NP_THREADS=0``: leave the pools alone).

Example:
    >>> threads_per_rank(cores=16, local_ranks=4, environ={})
    4
    >>> threads_per_rank(cores=2, local_ranks=4, environ={})
    1
    >>> threads_per_rank(cores=16, local_ranks=4, environ={"OMP_NUM_THREADS": "2"}) is None  # the user's choice
    True
    >>> threads_per_rank(cores=4, local_ranks=4, environ={}, node_cores=16)  # pinned to 4 cores already
    4
"""
from __future__ import annotations

import os
from typing import Mapping, Optional

__all__ = ["threads_per_rank", "share_cores_among_ranks", "USER_THREAD_VARIABLES"]

USER_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


def threads_per_rank(
    cores: int, local_ranks: int, environ: Mapping[str, str], node_cores: Optional[int] = None
) -> Optional[int]:
    """The BLAS threads each rank should use, or None to leave the pools as they are.

    ``cores`` is what this process may run on; when that is fewer than the
    node's ``node_cores``, the launcher has already pinned the rank to its
    share, which is then used as it is.
    """
    setting = environ.get("DTENSOR_NP_THREADS", "").strip()
    if setting:
        if not setting.isdigit():
            raise ValueError(f"DTENSOR_NP_THREADS must be a whole number of threads per rank, got {setting!r}")
        return int(setting) or None
    if any(environ.get(name) for name in USER_THREAD_VARIABLES):
        return None
    if node_cores is not None and cores < node_cores:  # pinned by the launcher: that set is the share
        return max(1, cores)
    return max(1, cores // max(1, local_ranks))


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


_LOCAL_SIZE_VARIABLES = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE", "PALS_LOCAL_SIZE")
_applied: list[Optional[int]] = []  # the decision, taken once per process


def _local_ranks(world_size: int) -> int:
    """Ranks on this node, from the launcher's environment; the whole world when it does not say."""
    for name in _LOCAL_SIZE_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return world_size


def share_cores_among_ranks(world_size: int) -> Optional[int]:
    """Limit this rank's BLAS threads to its share of the node's cores, once per process.

    No communication (the node's rank count comes from the launcher's
    environment, else the world size is assumed to share one node), so it is
    safe whichever ranks call it.  Returns the limit applied, or None when the
    pools were left alone.
    """
    if not _applied:
        limit = threads_per_rank(_cores(), _local_ranks(world_size), os.environ, os.cpu_count())
        if limit is not None:
            from threadpoolctl import threadpool_limits

            threadpool_limits(limits=limit, user_api="blas")
        _applied.append(limit)
    return _applied[0]
