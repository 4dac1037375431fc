"""Linear algebra of the Array API namespace: the main namespace's four functions and ``xp.linalg``.

``matmul``, ``tensordot``, ``vecdot`` and ``matrix_transpose`` (``x.mT``)
are in both the main namespace and ``xp.linalg``.  Every other ``xp.linalg``
function is ``numpy.linalg``'s of the same name (NumPy 2 follows the standard
there: ``matrix_norm``, ``vector_norm``, ``svdvals``, ``cross``, ``trace``,
``diagonal``, ``rtol=``...), run on the DTensors through its sharding rule;
``outer`` is ``numpy.outer`` (the same on 1-d arrays, and it has a rule).
``eigh``, ``qr``, ``slogdet`` and ``svd`` return the standard's named tuples.  Beyond the standard, ``eig``
and ``eigvals`` (as in PyTorch's namespace; SciPy's ``polyroots`` calls them where they exist).

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
           "matrix_rank", "matrix_transpose", "pinv", "qr", "slogdet", "svd"]


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


def matrix_rank(x: DTensor, /, *, rtol: Any = None) -> DTensor:
    """The rank of each matrix (``numpy.linalg.matrix_rank``); ``rtol`` may be a DTensor, one value per matrix.

    With an array ``rtol`` the rank is counted from ``svdvals`` here, as NumPy
    does, so every step runs through its own sharding rule.

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> xp = dt.array_api.namespace(dt.DeviceMesh((2,)))
        >>> x = xp.asarray(np.stack([np.eye(3), np.diag([1.0, 1e-3, 0.0])]))
        >>> matrix_rank(x, rtol=xp.asarray(np.array([0.5, 1e-6]))).full_tensor().tolist()
        [3, 2]
    """
    if not isinstance(rtol, DTensor):
        return np.linalg.matrix_rank(x, rtol=rtol)
    s = np.linalg.svdvals(x)
    if s.shape[-1] == 0:
        return np.sum(s > 0, axis=-1)
    return np.sum(s > np.max(s, axis=-1, keepdims=True) * rtol[..., None], axis=-1)


def pinv(x: DTensor, /, *, rtol: Any = None) -> DTensor:
    """The Moore-Penrose pseudo-inverse (``numpy.linalg.pinv``); ``rtol`` may be a DTensor, one value per matrix.

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> xp = dt.array_api.namespace(dt.DeviceMesh((2,)))
        >>> x = xp.asarray(np.array([[[2.0, 0.0], [0.0, 1e-9]]]))
        >>> pinv(x, rtol=xp.asarray(np.array([1e-6]))).full_tensor().tolist()
        [[[0.5, 0.0], [0.0, 0.0]]]
    """
    if not isinstance(rtol, DTensor) or 0 in x.shape[-2:]:
        return np.linalg.pinv(x, rtol=rtol) if not isinstance(rtol, DTensor) else np.linalg.pinv(x)
    u, s, vt = np.linalg.svd(np.conjugate(x), full_matrices=False)
    large = s > rtol[..., None] * np.max(s, axis=-1, keepdims=True)
    inverse = np.where(large, 1 / np.where(large, s, 1), 0)
    return np.matmul(np.matrix_transpose(vt), inverse[..., None] * np.matrix_transpose(u))


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
       for name in ("cholesky cross det diagonal eigvalsh inv matrix_norm matrix_power solve "
                    "svdvals trace vector_norm").split()},
    # beyond the standard, as PyTorch's namespace: SciPy's polynomial roots use them where a namespace has them
    "eig": np.linalg.eig,
    "eigvals": np.linalg.eigvals,
    **{f.__name__: f for f in (eigh, matrix_rank, pinv, qr, slogdet, svd)},
    "outer": np.outer,
}
"""The functions of the ``linalg`` extension (``xp.linalg``)."""
