"""NumPy's own answer for a call's output shapes and dtypes, from arrays with an empty leading batch.

The functions of ``numpy.linalg`` and ``numpy.fft`` broadcast over leading
dims, so calling one on zeros of shape ``(0, *shape)`` computes nothing, yet
checks the arguments as NumPy does (its own ``LinAlgError`` for a
non-square matrix, ``ValueError`` for a bad ``norm=``) and returns results
of shape ``(0, *out_shape)`` with NumPy's dtypes and result types
(``EighResult``...).  Rules call it before anything moves, so a refused
call raises on every rank.

Example:
    >>> import numpy as np
    >>> from dtensor_np import DeviceMesh, DTensorSpec, TensorMeta, Replicate
    >>> spec = DTensorSpec(DeviceMesh((1,)), (Replicate(),), TensorMeta((5, 3), "f4"))
    >>> metas, kind = numpy_outputs(lambda x: np.linalg.svd(x, full_matrices=False), [empty_batch(spec)])
    >>> [m.shape for m in metas], kind.__name__
    ([(5, 3), (3,), (3, 3)], 'SVDResult')
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..spec import DTensorSpec, TensorMeta

__all__ = ["empty_batch", "numpy_outputs"]


def empty_batch(spec: DTensorSpec, batch: bool = True) -> np.ndarray:
    """Zeros of shape ``(0, *spec.shape)`` (``batch``) or ``(0,) * spec.ndim``, of the spec's dtype: nothing allocated."""
    return np.zeros((0,) + spec.shape if batch else (0,) * spec.ndim, spec.dtype)


def numpy_outputs(call: Callable[..., Any], arrays: Sequence[Any], batch: bool = True) -> tuple[tuple[TensorMeta, ...], Optional[type]]:
    """The metas of ``call(*arrays)``'s results (the leading batch dim dropped when ``batch``) and its tuple type.

    The tuple type is None for one array, ``tuple`` or NumPy's namedtuple
    for several.  NumPy's errors propagate; its warnings are silenced here
    (the real call warns as NumPy does).
    """
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        result = call(*arrays)
    kind = type(result) if isinstance(result, tuple) else None
    values = result if isinstance(result, tuple) else (result,)
    metas = []
    for v in values:
        v = np.asarray(v)
        metas.append(TensorMeta(v.shape[1:] if batch else v.shape, v.dtype))
    return tuple(metas), kind
