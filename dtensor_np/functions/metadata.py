"""NumPy functions that read an array's dtype or shape only: ``result_type``, ``can_cast``, ``min_scalar_type``,
``common_type``, ``iscomplexobj``, ``isrealobj``, ``einsum_path``, ``tril_indices_from``, ``triu_indices_from``,
``diag_indices_from``, ``apply_over_axes``, ``isfortran`` (``a.flags.fnc``: NumPy's flags of the array's NumPy
twin); ``shares_memory`` and ``may_share_memory`` (NumPy's answers for the
views' layouts over their owner: :func:`dtensor_np.views.memory_twins`).

None of them moves data: the dtype and the shape are on every rank (``min_scalar_type`` of a 0-d array reads
its one value, replicated or reduced like ``item()``).  The index functions return NumPy arrays, as NumPy does
(they are made from the shape; mixed into DTensor calls they are replicated constants).
``apply_over_axes(func, a, axes)`` calls ``func`` once per axis, as NumPy does: its collectives are ``func``'s.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.ones((4, 4), np.float32), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> np.result_type(x, np.int16), np.iscomplexobj(x), np.tril_indices_from(x)[0][:4].tolist()
    (dtype('float32'), False, [0, 1, 1, 2])
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..numpy_catalogue import Case
from ..propagation.registry import register_composite
from ..views import memory_twins

__all__ = ["CASES", "result_type", "can_cast", "min_scalar_type", "common_type", "iscomplexobj", "isrealobj",
           "einsum_path", "tril_indices_from", "triu_indices_from", "diag_indices_from", "apply_over_axes", "isfortran",
           "shares_memory", "may_share_memory"]


def _dtype_of(value: Any) -> Any:
    """A DTensor's (or a tracer's) dtype in its place; anything else as it is."""
    return value.dtype if hasattr(value, "dtype") and hasattr(value, "placements") else value


def _shaped(value: Any) -> Any:
    """A NumPy array of ``value``'s shape and dtype holding no memory (a broadcast scalar)."""
    if hasattr(value, "placements"):
        return np.broadcast_to(np.zeros((), value.dtype), value.shape)
    return value


@register_composite(np.isfortran)
def isfortran(a: Any) -> bool:
    """``np.isfortran``: Fortran-ordered and not C-ordered (``a.flags.fnc``: the flags of ``a``'s NumPy twin).

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.zeros((2, 3)), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.isfortran(x), np.isfortran(x.T)
        (False, True)
    """
    return a.flags.fnc


@register_composite(np.result_type)
def result_type(*arrays_and_dtypes: Any) -> Any:
    """``np.result_type``: a DTensor counts by its dtype (NumPy 2 does not look at array values)."""
    return np.result_type(*[_dtype_of(a) for a in arrays_and_dtypes])


@register_composite(np.can_cast)
def can_cast(from_: Any, to: Any, casting: str = "safe") -> bool:
    """``np.can_cast`` of a DTensor's dtype."""
    return np.can_cast(_dtype_of(from_), to, casting)


@register_composite(np.min_scalar_type)
def min_scalar_type(a: Any) -> Any:
    """``np.min_scalar_type``: an array's dtype, or for a 0-d array the smallest that holds its value."""
    if a.ndim:
        return a.dtype
    kind = a.dtype.kind
    value = complex(a) if kind == "c" else float(a) if kind == "f" else bool(a) if kind == "b" else int(a)
    return np.min_scalar_type(a.dtype.type(value))


@register_composite(np.common_type)
def common_type(*arrays: Any) -> Any:
    """``np.common_type`` from the dtypes."""
    return np.common_type(*[_shaped(a) for a in arrays])


@register_composite(np.iscomplexobj)
def iscomplexobj(x: Any) -> bool:
    """``np.iscomplexobj``: a complex dtype."""
    return issubclass(x.dtype.type, np.complexfloating)


@register_composite(np.isrealobj)
def isrealobj(x: Any) -> bool:
    """``np.isrealobj``: not a complex dtype."""
    return not issubclass(x.dtype.type, np.complexfloating)


@register_composite(np.einsum_path)
def einsum_path(*operands: Any, optimize: Any = "greedy", einsum_call: bool = False) -> Any:
    """``np.einsum_path`` from the operands' shapes (the same path and report as on NumPy arrays)."""
    return np.einsum_path(*[_shaped(o) for o in operands], optimize=optimize, einsum_call=einsum_call)


def _indices_from(fn: Callable[..., Any]) -> Callable[..., Any]:
    def from_shape(arr: Any, k: int = 0) -> tuple[np.ndarray, np.ndarray]:
        if arr.ndim != 2:
            raise ValueError("input array must be 2-d")
        return fn(arr.shape[-2], k=k, m=arr.shape[-1])

    from_shape.__name__ = f"{fn.__name__}_from"
    from_shape.__doc__ = f"``np.{fn.__name__}_from``: ``np.{fn.__name__}`` of the array's shape (NumPy arrays)."
    return from_shape


tril_indices_from = register_composite(np.tril_indices_from)(_indices_from(np.tril_indices))
triu_indices_from = register_composite(np.triu_indices_from)(_indices_from(np.triu_indices))


@register_composite(np.diag_indices_from)
def diag_indices_from(arr: Any) -> tuple[np.ndarray, ...]:
    """``np.diag_indices_from``: ``np.diag_indices`` of the array's (equal) dims (NumPy arrays)."""
    if arr.ndim < 2:
        raise ValueError("input array must be at least 2-d")
    if len(set(arr.shape)) != 1:
        raise ValueError("All dimensions of input must be of equal length")
    return np.diag_indices(arr.shape[0], arr.ndim)


@register_composite(np.apply_over_axes)
def apply_over_axes(func: Callable[..., Any], a: Any, axes: Any) -> Any:
    """``np.apply_over_axes``: ``func(a, axis)`` for each axis in turn, a dropped axis put back (size 1)."""
    value = a
    for axis in np.atleast_1d(np.asarray(axes)).tolist():
        axis = axis + a.ndim if axis < 0 else axis
        result = func(value, axis)
        if result.ndim != value.ndim:
            result = np.expand_dims(result, axis)
            if result.ndim != value.ndim:
                raise ValueError("function is not returning an array of the correct shape")
        value = result
    return value


def _memory(numpy_function: Callable[..., bool]) -> Callable[..., bool]:
    def shares(a: Any, b: Any, max_work: Any = None) -> bool:
        twins = memory_twins(a, b)
        if twins is None:
            return False  # different owners, or a DTensor and an ndarray: no memory in common
        return bool(numpy_function(*twins, max_work=max_work))

    shares.__name__ = numpy_function.__name__
    shares.__doc__ = (f"``np.{numpy_function.__name__}``: NumPy's answer for the two arrays' layouts over their owner "
                      "(views of one DTensor; different DTensors share nothing).")
    return shares


shares_memory = register_composite(np.shares_memory)(_memory(np.shares_memory))
may_share_memory = register_composite(np.may_share_memory)(_memory(np.may_share_memory))


def _memory_case(function: Callable[..., bool]) -> Case:
    def call(x: Any) -> tuple[bool, ...]:
        left, right, strided = x[:, :2], x[:, 2:], x[:, 1::2]
        return (function(x, x), function(left, right), function(left, strided), function(x.T[1], left),
                function(x.T[3], left), function(x, np.ones(3)), function(x, x.copy()))

    return Case(call, axis=1)


CASES: dict[str, Case] = {
    "numpy.shares_memory": _memory_case(np.shares_memory),
    "numpy.may_share_memory": _memory_case(np.may_share_memory),
    "numpy.isfortran": Case(lambda x: (np.isfortran(x), np.isfortran(x.T), np.isfortran(x[:, 1:].T))),
    "numpy.result_type": Case(lambda x: np.result_type(x, np.int16, 1.0)),
    "numpy.can_cast": Case(lambda x: (np.can_cast(x, np.float32), np.can_cast(x, np.complex128))),
    "numpy.min_scalar_type": Case(lambda x: np.min_scalar_type(x)),
    "numpy.min_scalar_type: of one element": Case(lambda x: np.min_scalar_type(x[2, 1]), untouched=None, axis=0),
    "numpy.common_type": Case(lambda x: np.common_type(x, np.ones(2, np.float32))),
    "numpy.iscomplexobj": Case(lambda x: (np.iscomplexobj(x), np.iscomplexobj(x + 0j))),
    "numpy.isrealobj": Case(lambda x: (np.isrealobj(x), np.isrealobj(x + 0j))),
    "numpy.einsum_path": Case(lambda x: np.einsum_path("ij,jk,kl->il", x, np.ones((4, 3)), np.ones((3, 2)),
                                                        optimize="optimal")[0]),
    "numpy.tril_indices_from": Case(lambda x: np.tril_indices_from(x, 1)),
    "numpy.triu_indices_from": Case(lambda x: np.triu_indices_from(x)),
    "numpy.diag_indices_from": Case(lambda x: np.diag_indices_from(x), shape=(4, 4)),
    "numpy.apply_over_axes": Case(lambda x: np.apply_over_axes(np.sum, x, [0, 2]), shape=(5, 4, 3), untouched=1,
                                  axis=0, tolerance=16.0),
}
