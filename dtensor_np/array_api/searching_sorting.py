"""Searching and sorting functions of the Array API namespace: NumPy's, plus the standard's ``descending``.

``argmax``, ``argmin``, ``nonzero``, ``searchsorted`` and ``where`` are
NumPy's functions of the same names (``where`` with NumPy's one-argument
form too, ``nonzero(condition)``); ``count_nonzero`` is the sum of
``x != 0`` (a local count per rank and one ``all_reduce`` over sharded
reduced dims), in the default index dtype.  ``sort``/``argsort`` are
``numpy.sort``/``numpy.argsort`` with ``stable=``; NumPy has no descending
order, so a descending ``sort`` is the ascending one flipped, and a
descending ``argsort`` sorts the flipped array and maps its indices back
(``n - 1 - i`` of the flipped result), which keeps equal values in their
original order as ``stable=True`` asks.

Example:
    >>> import dtensor_np as dt
    >>> xp = dt.array_api.namespace(dt.DeviceMesh((2,)))
    >>> x = xp.asarray([0, 3, 0, 5])
    >>> int(xp.count_nonzero(x)), xp.where(x > 1, x, -1).full_tensor().tolist()
    (2, [-1, 3, -1, 5])
"""

from __future__ import annotations

from typing import Any, Callable, Union

import numpy as np

from ..dtensor import DTensor

__all__ = ["FUNCTIONS", "argsort", "count_nonzero", "sort", "where"]

_NOT_GIVEN: Any = object()


def count_nonzero(x: DTensor, /, *, axis: Union[int, tuple[int, ...], None] = None,
                  keepdims: bool = False) -> DTensor:
    """The number of non-zero elements (NaN counts) along ``axis``, in the default index dtype."""
    return np.sum(np.not_equal(x, 0), axis=axis, keepdims=keepdims)


def sort(x: DTensor, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> DTensor:
    """``numpy.sort`` along ``axis``, ascending or descending."""
    out = np.sort(x, axis=axis, stable=stable)
    return np.flip(out, axis=axis) if descending else out


def argsort(x: DTensor, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> DTensor:
    """``numpy.argsort`` along ``axis``; a descending order keeps equal values in their original order."""
    if not descending:
        return np.argsort(x, axis=axis, stable=stable)
    order = np.flip(np.argsort(np.flip(x, axis=axis), axis=axis, stable=stable), axis=axis)
    return (x.shape[axis] - 1) - order


def where(condition: DTensor, x1: Any = _NOT_GIVEN, x2: Any = _NOT_GIVEN, /) -> Any:
    """``numpy.where``: the standard's three arguments, or NumPy's one, the indices of the true elements
    (``nonzero(condition)``, as scikit-learn's ``roc_curve`` calls ``xp.where(mask)``).

    Example:
        >>> import dtensor_np as dt
        >>> xp = dt.array_api.namespace(dt.DeviceMesh((2,)))
        >>> [i.full_tensor().tolist() for i in xp.where(xp.asarray([True, False, True]))]
        [[0, 2]]
    """
    if x1 is _NOT_GIVEN and x2 is _NOT_GIVEN:
        return np.nonzero(condition)
    if x1 is _NOT_GIVEN or x2 is _NOT_GIVEN:
        raise ValueError("either both or neither of x and y should be given")  # NumPy's words
    return np.where(condition, x1, x2)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    **{name: getattr(np, name) for name in ("argmax", "argmin", "nonzero", "searchsorted")},
    "where": where,
    "argsort": argsort,
    "count_nonzero": count_nonzero,
    "sort": sort,
}
