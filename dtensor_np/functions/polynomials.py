"""Polynomials: ``polyval``, ``vander``, ``polyfit`` and the coefficient arithmetic ``polyadd polysub polymul
polydiv polyder polyint roots poly``.

The data (the points ``x``, the values ``y``) are what is sharded; the
coefficient arrays are short.

=========================  ==================================================================================
``polyval``                composite: Horner's scheme elementwise in ``x`` (no collective on ``x``); the
                           coefficients are replicated (``unstack``: one ``all_gather`` of a sharded ``p``)
``vander``                 composite: ``cumprod`` along the new columns; the rows stay where ``x``'s are
``polyfit``                rule (:mod:`dtensor_np.propagation.least_squares`): QR of every rank's block of the
                           Vandermonde matrix, one ``all_gather`` of the ``(deg + 1) x (deg + 1 + k)`` blocks
                           (``full=``, ``w=``, ``cov=`` included); never a gather of ``x`` or ``y``
``polyadd`` ... ``poly``   rule (:mod:`dtensor_np.propagation.gathered_operands`): coefficients replicated (an
                           ``all_gather`` of a sharded one), NumPy's function on every rank
=========================  ==================================================================================

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.arange(6.0), dt.DeviceMesh((3,)), [dt.Shard(0)])
    >>> with dt.comm_counter() as c:
    ...     y = np.polyval([1.0, 0.0, -1.0], x)
    >>> y.full_tensor().tolist(), str(y.spec), c.total
    ([-1.0, 0.0, 3.0, 8.0, 15.0, 24.0], 'S(0)', 0)
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ..numpy_catalogue import Case
from ..propagation.registry import register_composite
from .differences import as_operand

__all__ = ["CASES", "REFUSED", "polyval", "vander"]


@register_composite(np.polyval)
def polyval(p: Any, x: Any) -> Any:
    """``np.polyval``: Horner's scheme, ``y = y * x + p[i]``, elementwise in ``x`` (no collective on ``x``); a
    sharded ``p`` is replicated once (``unstack``: one ``all_gather``).

    Example:
        >>> import dtensor_np as dt
        >>> p = dt.distribute_tensor(np.array([2.0, 0.0, 1.0]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.polyval(p, np.array([1.0, 2.0])).full_tensor().tolist()
        [3.0, 9.0]
    """
    p, x = as_operand(p), as_operand(x)
    if p.ndim == 0:
        raise TypeError("iteration over a 0-d array")
    y = np.zeros_like(x)
    for pv in np.unstack(p):
        y = y * x + pv
    return y


@register_composite(np.vander)
def vander(x: Any, N: Any = None, increasing: bool = False) -> Any:
    """``np.vander``: the powers of ``x`` as columns, by ``cumprod`` along them (NumPy's ``multiply.accumulate``):
    the rows stay where ``x``'s elements are, no collective.

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([1, 2, 3]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.vander(x, 3).full_tensor().tolist()
        [[1, 1, 1], [4, 2, 1], [9, 3, 1]]
    """
    x = as_operand(x)
    if x.ndim != 1:
        raise ValueError("x must be a one-dimensional array or sequence.")
    n = len(x) if N is None else operator.index(N)
    if n < 0:
        raise ValueError("negative dimensions are not allowed")
    dtype = np.promote_types(x.dtype, int)
    ones = np.ones_like(x, dtype=dtype)[:, np.newaxis]
    if n <= 1:
        return np.copy(ones[:, :n])
    powers = np.cumprod(np.broadcast_to(x.astype(dtype)[:, np.newaxis], (x.shape[0], n - 1)), axis=1)
    return np.concatenate([ones, powers] if increasing else [np.flip(powers, axis=1), ones], axis=1)


def _wavy(shape: tuple[int, ...]) -> np.ndarray:
    return np.sin(np.arange(int(np.prod(shape))) * 0.9).reshape(shape) * 3 + 1


_COEFFICIENTS = dict(shape=(5,), untouched=None, axis=0, gathers=True)

CASES = {
    "numpy.polyval": Case(lambda x: np.polyval([1.5, -2.0, 0.25], x)),
    "numpy.vander": Case(lambda x: np.vander(x, 4), shape=(6,), untouched=0),
    "numpy.polyfit": Case(lambda x: np.polyfit(np.linspace(-1.0, 2.0, 12), x, 3, full=True), shape=(12,),
                          untouched=None, axis=0, data=_wavy, tolerance=1e4),
    "numpy.polyadd": Case(lambda x: np.polyadd(x, [1.0, 2.0]), **_COEFFICIENTS),
    "numpy.polysub": Case(lambda x: np.polysub([1.0, 2.0], x), **_COEFFICIENTS),
    "numpy.polymul": Case(lambda x: np.polymul(x, [1.0, -2.0, 3.0]), **_COEFFICIENTS),
    "numpy.polydiv": Case(lambda x: np.polydiv(x, [2.0, 1.0]), **_COEFFICIENTS),
    "numpy.polyder": Case(lambda x: np.polyder(x, 2), **_COEFFICIENTS),
    "numpy.polyint": Case(lambda x: np.polyint(x, 2, [1.0, 3.0]), **_COEFFICIENTS),
    "numpy.roots": Case(lambda x: np.roots(x), **_COEFFICIENTS),
    "numpy.poly": Case(lambda x: np.poly(x), **_COEFFICIENTS),
}

REFUSED: dict[str, Any] = {}
