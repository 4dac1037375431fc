"""Predicates: ``isclose``, ``allclose``, ``array_equal``, ``array_equiv``; the questions about an array
``ndim``, ``shape`` and ``size``.

``isclose`` is NumPy's own composition of ufuncs and ``np.where``: no communication, every placement kept.  The
ones that answer with a Python bool on every rank (``allclose``, ``array_equal``, ``array_equiv``) take one
``all_reduce`` of a bool (none for a replicated array); two operands with different placements are first placed
alike (the elementwise rule's redistribute).  ``ndim``, ``shape`` and ``size`` read
the spec: Python values, no communication.  (``iscomplex``, ``nan_to_num``, ``shares_memory`` and the other
elementwise and metadata helpers: :mod:`.elementwise`, :mod:`.metadata`.)

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.linspace(0, 1, 6), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> with dt.comm_counter() as c:
    ...     same = np.allclose(x, x + 1e-12)
    >>> same, c.counts["all_reduce"]
    (True, 1)
"""

from __future__ import annotations

import builtins
import math
import warnings
from typing import Any

import numpy as np
from numpy.lib.array_utils import normalize_axis_tuple

from ..numpy_catalogue import Case, Refused
from ..propagation.registry import register_composite
from .reshaping import as_array, cast, is_array

__all__ = ["CASES", "REFUSED", "isclose", "allclose", "array_equal", "array_equiv", "ndim", "shape", "size"]


def _scalar_or_array(a: Any) -> Any:
    return a if isinstance(a, (int, float, complex)) else as_array(a)


def _plain(a: Any) -> Any:
    """A 0-d result as NumPy gives it (a NumPy scalar, ``result[()]``); anything else as it is."""
    return a[()] if not is_array(a) and isinstance(a, np.ndarray) and a.ndim == 0 else a


@register_composite(np.isclose)
def isclose(a: Any, b: Any, rtol: Any = 1.e-5, atol: Any = 1.e-8, equal_nan: bool = False) -> Any:
    """``np.isclose``: NumPy's formula ``|a - b| <= atol + rtol * |b|`` (and ``a == b``), elementwise, no
    communication.

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([1.0, 2.0, np.nan]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.isclose(x, [1.0, 2.1, np.nan], equal_nan=True).full_tensor().tolist()
        [True, False, True]
    """
    x, y, atol, rtol = (_scalar_or_array(v) for v in (a, b, atol, rtol))
    dtype = getattr(y, "dtype", None)
    if dtype is not None and dtype.kind != "m":
        y = cast(y, np.result_type(y.dtype if is_array(y) else y, 1.0))
    elif isinstance(y, int):
        y = float(y)
    if not (np.all(np.isfinite(atol)) and np.all(np.isfinite(rtol))):
        message = f"One of rtol or atol is not valid, atol: {atol}, rtol: {rtol}"
        mode = np.geterr()["invalid"]
        if mode == "warn":
            warnings.warn(message, RuntimeWarning, stacklevel=2)
        elif mode == "raise":
            raise FloatingPointError(message)
        elif mode == "print":
            print(message)
    with np.errstate(invalid="ignore"):
        result = np.less_equal(abs(x - y), atol + rtol * abs(y)) & np.isfinite(y) | (x == y)
        if equal_nan:
            result = result | (np.isnan(x) & np.isnan(y))
    return _plain(result)


@register_composite(np.allclose)
def allclose(a: Any, b: Any, rtol: Any = 1.e-5, atol: Any = 1.e-8, equal_nan: bool = False) -> bool:
    """``np.allclose``: a Python bool on every rank: :func:`isclose` (local) and one ``all_reduce`` of a bool.

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.ones(4), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.allclose(x, 1.0), np.allclose(x, 1.1)
        (True, False)
    """
    return builtins.bool(np.all(isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)))


@register_composite(np.array_equal)
def array_equal(a1: Any, a2: Any, equal_nan: bool = False) -> bool:
    """``np.array_equal``: a Python bool on every rank (same shape, then one ``all_reduce`` of a bool).

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([1.0, np.nan]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.array_equal(x, x), np.array_equal(x, [1.0, np.nan], equal_nan=True)
        (False, True)
    """
    try:
        a1, a2 = as_array(a1), as_array(a2)
    except Exception:  # noqa: BLE001 - NumPy's answer: not equal
        return False
    if tuple(a1.shape) != tuple(a2.shape):
        return False
    same = a1 == a2
    if equal_nan and a1.dtype.kind in "fc" and a2.dtype.kind in "fc":
        same = same | (np.isnan(a1) & np.isnan(a2))
    return builtins.bool(np.all(same))


@register_composite(np.array_equiv)
def array_equiv(a1: Any, a2: Any) -> bool:
    """``np.array_equiv``: broadcastable and equal everywhere: a Python bool on every rank (one ``all_reduce``).

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.ones((2, 3)), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.array_equiv(x, [1.0, 1.0, 1.0]), np.array_equiv(x, [1.0, 1.0])
        (True, False)
    """
    try:
        a1, a2 = as_array(a1), as_array(a2)
        np.broadcast_shapes(tuple(a1.shape), tuple(a2.shape))
    except Exception:  # noqa: BLE001 - NumPy's answer: not equivalent
        return False
    return builtins.bool(np.all(a1 == a2))


@register_composite(np.ndim)
def ndim(a: Any) -> int:
    """``np.ndim``: the spec's number of dims (no communication).

    Example:
        >>> import dtensor_np as dt
        >>> np.ndim(dt.distribute_tensor(np.ones((2, 3)), dt.DeviceMesh((2,)), [dt.Shard(0)]))
        2
    """
    try:
        return a.ndim
    except AttributeError:
        return np.asarray(a).ndim


@register_composite(np.shape)
def shape(a: Any) -> tuple[int, ...]:
    """``np.shape``: the spec's global shape (no communication).

    Example:
        >>> import dtensor_np as dt
        >>> np.shape(dt.distribute_tensor(np.ones((2, 3)), dt.DeviceMesh((2,)), [dt.Shard(0)]))
        (2, 3)
    """
    try:
        return a.shape
    except AttributeError:
        return np.asarray(a).shape


@register_composite(np.size)
def size(a: Any, axis: Any = None) -> int:
    """``np.size``: the number of elements (along ``axis``) from the spec (no communication).

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.ones((2, 3)), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.size(x), np.size(x, 1), np.size(x, (0, 1))
        (6, 3, 6)
    """
    if axis is None:
        try:
            return a.size
        except AttributeError:
            return np.asarray(a).size
    dims = shape(a)
    axes = normalize_axis_tuple(axis, len(dims), allow_duplicate=False)
    return math.prod(dims[ax] for ax in axes)


CASES = {
    "numpy.isclose": Case(lambda x: np.isclose(x, x + 1e-9 * (x > 2), rtol=0.0, atol=1e-10)),
    "numpy.allclose": Case(lambda x: np.allclose(x, x * (1 + 1e-7)), untouched=None),
    "numpy.array_equal": Case(lambda x: (np.array_equal(x, x + 0.0), np.array_equal(x, x[::-1])), untouched=None),
    "numpy.array_equiv": Case(lambda x: (np.array_equiv(x, x[:1]), np.array_equiv(x, x)), untouched=None),
    "numpy.ndim": Case(lambda x: np.ndim(x)),
    "numpy.shape": Case(lambda x: np.shape(x)),
    "numpy.size": Case(lambda x: (np.size(x), np.size(x, 1))),
}

REFUSED: dict[str, Refused] = {}
"""Every name of this family takes DTensors."""
