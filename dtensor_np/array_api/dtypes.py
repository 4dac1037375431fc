"""Data types and data type functions of the Array API namespace: NumPy dtypes, NumPy's rules.

The data types are NumPy dtype objects (``xp.float64 == np.dtype("float64")``),
which is what ``x.dtype`` of a DTensor is.  ``finfo``, ``iinfo``,
``can_cast`` and ``result_type`` take DTensors as well as dtypes (a DTensor
stands for its dtype: no data is read), ``isdtype`` takes dtypes only, as the
standard says; all answer with NumPy's rules.  ``astype`` runs the ``astype``
sharding rule (each rank casts its shard).

Example:
    >>> import dtensor_np as dt
    >>> xp = dt.array_api.namespace(dt.DeviceMesh((2,)))
    >>> x = xp.asarray([1, 2, 3], dtype=xp.int8)
    >>> xp.result_type(x, xp.float32), xp.can_cast(x, xp.int16), xp.isdtype(x.dtype, "integral")
    (dtype('float32'), True, True)
    >>> xp.finfo(xp.float32).eps, xp.iinfo(x).max
    (1.1920928955078125e-07, 127)
    >>> xp.astype(x, xp.float64).dtype
    dtype('float64')
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

from ..dtensor import DTensor

__all__ = ["DTYPES", "FUNCTIONS", "FInfo", "astype", "can_cast", "finfo", "iinfo", "result_type"]

DTYPES: dict[str, np.dtype] = dict(np.__array_namespace_info__().dtypes())


def _dtype_of(value: Any) -> Any:
    """A DTensor's dtype (the data type it stands for); anything else as it is."""
    return value.dtype if isinstance(value, DTensor) else value


class FInfo(NamedTuple):
    """Machine limits of a floating-point data type, as Python floats (``numpy.finfo`` holds NumPy scalars)."""

    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: np.dtype


def finfo(type: Any, /) -> FInfo:
    """``numpy.finfo`` of a floating-point dtype or DTensor (of a complex one: its real dtype's)."""
    info = np.finfo(_dtype_of(type))
    return FInfo(int(info.bits), float(info.eps), float(info.max), float(info.min), float(info.smallest_normal),
                 np.dtype(info.dtype))


def iinfo(type: Any, /) -> Any:
    """``numpy.iinfo`` of an integer dtype or DTensor."""
    return np.iinfo(_dtype_of(type))


def can_cast(from_: Any, to: Any, /) -> bool:
    """Whether ``from_`` (a dtype or DTensor) casts to ``to`` under the promotion rules (``numpy.can_cast``)."""
    return bool(np.can_cast(_dtype_of(from_), to))


def result_type(*arrays_and_dtypes: Any) -> np.dtype:
    """The promoted dtype of DTensors, dtypes and Python scalars (``numpy.result_type``, NEP 50 scalars)."""
    if not arrays_and_dtypes:
        raise ValueError("at least one array or dtype is required")
    return np.result_type(*(_dtype_of(a) for a in arrays_and_dtypes))


def astype(x: DTensor, dtype: Any, /, *, copy: bool = True, device: Any = None) -> DTensor:
    """``x`` cast to ``dtype`` (each rank casts its shard), then moved to ``device`` when given.

    Values are immutable, so ``copy=True`` with the same dtype gives a new
    handle on the same shards, and ``copy=False`` gives ``x`` itself.
    """
    if not isinstance(x, DTensor):
        raise TypeError(f"astype: expected a DTensor, got {type(x).__name__}")
    if not isinstance(copy, bool):
        raise TypeError(f"astype: copy must be a bool, got {copy!r}")
    out = x if np.dtype(dtype) == x.dtype else x.astype(dtype)
    if device is not None:
        out = out.to_device(device)
    if out is x and copy:
        out = DTensor(x.shards, x.spec, namespace=x.namespace)
    return out


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "astype": astype,
    "can_cast": can_cast,
    "finfo": finfo,
    "iinfo": iinfo,
    "isdtype": np.isdtype,
    "result_type": result_type,
}
