"""Linear algebra of the Array API namespace: the main namespace's four functions and ``xp.linalg``.

``matmul``, ``tensordot``, ``vecdot`` and ``matrix_transpose`` (``x.mT``)
are in both the main namespace and ``xp.linalg``.  Every other ``xp.linalg``
function is ``numpy.linalg``'s of the same name (NumPy 2 follows the standard
there: ``matrix_norm``, ``vector_norm``, ``svdvals``, ``cross``, ``trace``,
``diagonal``, ``rtol=``...), run on the DTensors through its sharding rule;
``outer`` is ``numpy.outer`` (the same on 1-d arrays, and it has a rule).
``eigh``, ``qr``, ``slogdet`` and ``svd`` return the standard's named tuples.

Example:
    >>> import dtensor_np as dt
    >>> xp = dt.array_api.namespace(dt.DeviceMesh((2,)))
    >>> a = xp.reshape(xp.arange(6.0), (2, 3))
    >>> xp.matmul(a, xp.matrix_transpose(a)).full_tensor().tolist()
    [[5.0, 14.0], [14.0, 50.0]]
    >>> xp.linalg.matmul is not None, SVDResult._fields
    (True, ('U', 'S', 'Vh'))
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

from ..dtensor import DTensor

__all__ = ["FUNCTIONS", "LINALG", "EighResult", "QRResult", "SlogdetResult", "SVDResult", "eigh",
           "matrix_transpose", "qr", "slogdet", "svd"]


class EighResult(NamedTuple):
    eigenvalues: DTensor
    eigenvectors: DTensor


class QRResult(NamedTuple):
    Q: DTensor
    R: DTensor


class SlogdetResult(NamedTuple):
    sign: DTensor
    logabsdet: DTensor


class SVDResult(NamedTuple):
    U: DTensor
    S: DTensor
    Vh: DTensor


def matrix_transpose(x: DTensor, /) -> DTensor:
    """The transpose of the last two dims (``x.mT``)."""
    return x.mT


def eigh(x: DTensor, /) -> EighResult:
    """Eigenvalues (ascending) and eigenvectors of symmetric/Hermitian matrices (``numpy.linalg.eigh``)."""
    return EighResult(*np.linalg.eigh(x))


def qr(x: DTensor, /, *, mode: str = "reduced") -> QRResult:
    """The QR decomposition (``numpy.linalg.qr``)."""
    return QRResult(*np.linalg.qr(x, mode=mode))


def slogdet(x: DTensor, /) -> SlogdetResult:
    """Sign and log of the absolute value of the determinant (``numpy.linalg.slogdet``)."""
    return SlogdetResult(*np.linalg.slogdet(x))


def svd(x: DTensor, /, *, full_matrices: bool = True) -> SVDResult:
    """The singular value decomposition (``numpy.linalg.svd``)."""
    return SVDResult(*np.linalg.svd(x, full_matrices=full_matrices))


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "matmul": np.matmul,
    "matrix_transpose": matrix_transpose,
    "tensordot": np.tensordot,
    "vecdot": np.vecdot,
}
"""The linear algebra functions of the main namespace (also in ``xp.linalg``)."""

LINALG: dict[str, Callable[..., Any]] = {
    **FUNCTIONS,
    **{name: getattr(np.linalg, name)
       for name in ("cholesky cross det diagonal eigvalsh inv matrix_norm matrix_power matrix_rank pinv solve "
                    "svdvals trace vector_norm").split()},
    **{f.__name__: f for f in (eigh, qr, slogdet, svd)},
    "outer": np.outer,
}
"""The functions of the ``linalg`` extension (``xp.linalg``)."""
