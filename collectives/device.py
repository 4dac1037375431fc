"""Where arrays live (host or CUDA device) and how they reach MPI.

This is the only module that decides about device memory: ``cuda_aware_mpi()``
is decided once per process, and ``stage_for_mpi()`` is the one helper the
MPI backend calls for every op.  CuPy is imported lazily and is never required:
an array can only be a CuPy array if CuPy has already been imported.
"""
from __future__ import annotations

import ctypes
import importlib
import os
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import NamedTuple

import numpy as np

from .caches import memo
from .types import Array

__all__ = [
    "CUDA_AWARE_ENV",
    "Staged",
    "array_module",
    "cuda_aware_mpi",
    "detect_cuda_aware_mpi",
    "is_device_array",
    "on_device_of",
    "query_mpi_cuda_support",
    "stage_for_mpi",
    "ufunc_at",
]

CUDA_AWARE_ENV = "DTENSOR_NP_CUDA_AWARE"
"""Set to 1 or 0 to override the CUDA-awareness query of the MPI library."""

_MPIX_GPU_SUPPORT_CUDA = 0  # MPICH's enum value for CUDA in MPIX_GPU_query_support


def is_device_array(x: object) -> bool:
    """True when ``x`` is a ``cupy.ndarray`` (False whenever CuPy is not imported).

    Example:
        >>> import numpy as np
        >>> is_device_array(np.ones(2))
        False
    """
    cupy = sys.modules.get("cupy")
    return cupy is not None and isinstance(x, cupy.ndarray)


def array_module(x: object) -> ModuleType:
    """``cupy`` for a CuPy array, else ``numpy``.

    Example:
        >>> import numpy as np
        >>> array_module(np.zeros(2)).__name__
        'numpy'
    """
    if type(x) is np.ndarray or not is_device_array(x):
        return np
    return sys.modules["cupy"]


def on_device_of(target: object, value: object) -> object:
    """``value`` on ``target``'s device: a NumPy array copied to the GPU for a CuPy ``target``.

    Anything else (a scalar, an array of the same library) comes back as it is.

    Example:
        >>> import numpy as np
        >>> v = np.arange(3)
        >>> on_device_of(np.zeros(3), v) is v
        True
    """
    if isinstance(value, np.ndarray) and is_device_array(target):
        return sys.modules["cupy"].asarray(value)
    return value


def ufunc_at(ufunc: np.ufunc, target: Array, index: tuple, value: object) -> None:
    """``ufunc.at(target, index, value)`` on a NumPy or a CuPy ``target``, in place (repeated indices apply once each).

    On a CuPy array, ``np.add`` runs on the device (``cupy.add.at``, or
    ``cupyx.scatter_add`` before CuPy 13), index arrays and values moved there
    first.  Every other ufunc runs in host memory, the array copied back once:
    CuPy 14 has no ``multiply.at``, and its ``minimum.at`` and ``maximum.at``
    (like ``cupyx.scatter_min``) round float64 elements to float32.

    Example:
        >>> import numpy as np
        >>> a = np.zeros(3)
        >>> ufunc_at(np.add, a, (np.array([0, 0, 2]),), 1.0)
        >>> a
        array([2., 0., 1.])
    """
    if not is_device_array(target):
        ufunc.at(target, index, value)
        return
    cupy = sys.modules["cupy"]
    if ufunc is np.add:
        add_at = getattr(cupy.add, "at", None) or importlib.import_module("cupyx").scatter_add
        add_at(target, tuple(on_device_of(target, i) for i in index), on_device_of(target, value))
        return
    host = cupy.asnumpy(target)
    ufunc.at(host, tuple(cupy.asnumpy(i) if is_device_array(i) else i for i in index),
             cupy.asnumpy(value) if is_device_array(value) else value)
    target[...] = cupy.asarray(host)


def query_mpi_cuda_support() -> bool | None:
    """Ask the loaded MPI library through ctypes whether it is CUDA-aware.

    MPICH answers ``MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &flag)`` and
    Open MPI ``MPIX_Query_cuda_support()``.  Returns None when the library has
    neither.  Initialises MPI (imports ``mpi4py.MPI``) if needed.
    """
    from mpi4py import MPI  # loads and initialises libmpi

    if not MPI.Is_initialized():
        return None
    for library in _loaded_mpi_libraries():
        mpich_query = getattr(library, "MPIX_GPU_query_support", None)
        if mpich_query is not None:
            flag = ctypes.c_int(0)
            mpich_query.argtypes = (ctypes.c_int, ctypes.POINTER(ctypes.c_int))
            mpich_query.restype = ctypes.c_int
            if mpich_query(_MPIX_GPU_SUPPORT_CUDA, ctypes.byref(flag)) == 0:
                return bool(flag.value)
        openmpi_query = getattr(library, "MPIX_Query_cuda_support", None)
        if openmpi_query is not None:
            openmpi_query.argtypes = ()
            openmpi_query.restype = ctypes.c_int
            return bool(openmpi_query())
    return None


def _loaded_mpi_libraries() -> list[ctypes.CDLL]:
    """The process's global symbols, then every libmpi mapped into this process."""
    libraries = [ctypes.CDLL(None)]
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libmpi" in line and "/" in line}
    except OSError:
        paths = set()
    for path in sorted(paths):
        name = os.path.basename(path)
        if name.startswith(("libmpi.", "libmpi_")) or name.startswith("libmpich"):
            try:
                libraries.append(ctypes.CDLL(path))
            except OSError:
                pass
    return libraries


def detect_cuda_aware_mpi(
    environ: Mapping[str, str] = os.environ,
    query: Callable[[], bool | None] = query_mpi_cuda_support,
) -> bool:
    """Decide CUDA-awareness: ``DTENSOR_NP_CUDA_AWARE=1/0`` wins, else ask the library.

    Example:
        >>> detect_cuda_aware_mpi({"DTENSOR_NP_CUDA_AWARE": "0"})
        False
    """
    setting = environ.get(CUDA_AWARE_ENV, "").strip().lower()
    if setting in ("1", "true", "yes", "on"):
        return True
    if setting in ("0", "false", "no", "off"):
        return False
    try:
        return bool(query())
    except Exception:  # no MPI library, or a query that misbehaves: be safe
        return False


@memo(maxsize=None, name="collectives.cuda_aware_mpi", persistent=True)
def cuda_aware_mpi() -> bool:
    """Whether CuPy buffers may be handed straight to MPI (decided once per process).

    Example:
        >>> isinstance(cuda_aware_mpi(), bool)
        True
    """
    return detect_cuda_aware_mpi()


class Staged(NamedTuple):
    """An array ready for MPI, and how to bring MPI's results back to the caller.

    ``buffer`` is what MPI reads, ``xp`` allocates the arrays MPI writes
    into, ``sync`` must run right before the MPI call (finishes queued device
    work) and ``restore`` converts a result back to the caller's array type.
    """

    buffer: Array
    xp: ModuleType
    sync: Callable[[], None] | None
    restore: Callable[[Array], Array] | None


def stage_for_mpi(x: Array, *, host_only: bool = False, transfer: bool = True) -> Staged:
    """Prepare the local array ``x`` for MPI.

    NumPy arrays pass through.  CuPy arrays go to MPI directly when the MPI
    library is CUDA-aware (and ``host_only`` is False, e.g. a reduction that
    runs a NumPy user op), else through host memory: ``cupy.asnumpy`` before,
    ``cupy.asarray`` after.  With ``transfer=False`` only the decision is made
    (``buffer`` is ``x`` unchanged): for inputs whose data is never read, such
    as the non-root arrays of a broadcast.
    """
    if type(x) is np.ndarray:
        return Staged(x, np, None, None)
    if not is_device_array(x):
        return Staged(np.asarray(x), np, None, None)
    cupy = sys.modules["cupy"]
    if cuda_aware_mpi() and not host_only:
        return Staged(x, cupy, cupy.cuda.get_current_stream().synchronize, None)
    return Staged(cupy.asnumpy(x) if transfer else x, np, None, cupy.asarray)
