"""Predicates and elementwise helpers: ``isclose``, ``allclose``, ``array_equal``, ``array_equiv``, ``iscomplex``,
``isreal``, ``iscomplexobj``, ``isrealobj``, ``isneginf``, ``isposinf``, ``nan_to_num``, ``real_if_close``,
``angle``, ``fix``, ``sinc``, ``i0``; the questions about an array ``ndim``, ``shape``, ``size``, ``iterable``,
``isscalar``, ``may_share_memory`` and ``shares_memory``.

Elementwise ones are NumPy's own compositions of ufuncs and ``np.where``: no communication, every placement kept.
The ones that answer with a Python bool on every rank (``allclose``, ``array_equal``, ``array_equiv``, and
``real_if_close``'s test) take one ``all_reduce`` of a bool (none for a replicated array); two operands with
different placements are first placed alike (the elementwise rule's redistribute).  ``ndim``, ``shape``,
``size``, ``iscomplexobj``, ``isrealobj``, ``iterable`` and ``isscalar`` read the spec: Python values, no
communication.  ``may_share_memory``/``shares_memory`` answer by the view model: two DTensors share memory when
they are views of one base whose elements overlap (NumPy's answer for the NumPy twins of the views, worked out
on their strides); a DTensor never shares memory with a NumPy array (its buffers are its own).

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
from ..propagation.placing import blockwise
from ..propagation.registry import register_composite
from ..strides import proxy
from ..views import twin_strides
from .reshaping import as_array, cast, is_array

__all__ = ["CASES", "REFUSED", "isclose", "allclose", "array_equal", "array_equiv", "iscomplex", "isreal",
           "iscomplexobj", "isrealobj", "isneginf", "isposinf", "nan_to_num", "real_if_close", "angle", "fix",
           "sinc", "i0", "ndim", "shape", "size", "may_share_memory", "shares_memory"]


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


@register_composite(np.iscomplex)
def iscomplex(x: Any) -> Any:
    """``np.iscomplex``: ``x.imag != 0`` for a complex array, else all False; elementwise, no communication.

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([1 + 1j, 2 + 0j]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.iscomplex(x).full_tensor().tolist()
        [True, False]
    """
    ax = as_array(x)
    if issubclass(ax.dtype.type, np.complexfloating):
        return _plain(np.imag(ax) != 0)
    return _plain(np.zeros_like(ax, dtype=bool))


@register_composite(np.isreal)
def isreal(x: Any) -> Any:
    """``np.isreal``: ``x.imag == 0``, elementwise, no communication.

    Example:
        >>> import dtensor_np as dt
        >>> np.isreal(dt.distribute_tensor(np.array([1j, 2.0]), dt.DeviceMesh((2,)), [dt.Replicate()])).dtype
        dtype('bool')
    """
    return np.imag(as_array(x)) == 0


@register_composite(np.iscomplexobj)
def iscomplexobj(x: Any) -> bool:
    """``np.iscomplexobj``: whether the dtype is complex (the spec's: no communication).

    Example:
        >>> import dtensor_np as dt
        >>> np.iscomplexobj(dt.distribute_tensor(np.ones(2, complex), dt.DeviceMesh((2,)), [dt.Shard(0)]))
        True
    """
    try:
        kind = x.dtype.type
    except AttributeError:
        kind = np.asarray(x).dtype.type
    return issubclass(kind, np.complexfloating)


@register_composite(np.isrealobj)
def isrealobj(x: Any) -> bool:
    """``np.isrealobj``: not :func:`iscomplexobj` (no communication).

    Example:
        >>> import dtensor_np as dt
        >>> np.isrealobj(dt.distribute_tensor(np.ones(2), dt.DeviceMesh((2,)), [dt.Shard(0)]))
        True
    """
    return not iscomplexobj(x)


def _signed_inf(x: Any, out: Any, negative: bool, name: str) -> Any:
    is_inf = np.isinf(x)
    try:
        sign = np.signbit(x)
    except TypeError as e:
        raise TypeError(f"This operation is not supported for {as_array(x).dtype} values because it would be "
                        "ambiguous.") from e
    if not negative:
        sign = ~sign
    return np.logical_and(is_inf, sign) if out is None else np.logical_and(is_inf, sign, out=out)


@register_composite(np.isneginf)
def isneginf(x: Any, out: Any = None) -> Any:
    """``np.isneginf``: ``isinf(x) & signbit(x)``, elementwise, no communication.

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([-np.inf, np.inf, 1.0]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.isneginf(x).full_tensor().tolist()
        [True, False, False]
    """
    return _signed_inf(x, out, True, "isneginf")


@register_composite(np.isposinf)
def isposinf(x: Any, out: Any = None) -> Any:
    """``np.isposinf``: ``isinf(x) & ~signbit(x)``, elementwise, no communication.

    Example:
        >>> import dtensor_np as dt
        >>> np.isposinf(dt.distribute_tensor(np.array([np.inf, 1.0]), dt.DeviceMesh((2,)), [dt.Shard(0)])).shape
        (2,)
    """
    return _signed_inf(x, out, False, "isposinf")


def _finite(d: Any, nan: Any, maxf: Any, minf: Any) -> Any:
    """``d`` with NaN, +inf and -inf replaced (NumPy's ``copyto`` into ``d``'s dtype)."""
    fixed = np.where(np.isnan(d), nan, np.where(np.isposinf(d), maxf, np.where(np.isneginf(d), minf, d)))
    return cast(fixed, d.dtype)


@register_composite(np.nan_to_num)
def nan_to_num(x: Any, copy: bool = True, nan: Any = 0.0, posinf: Any = None, neginf: Any = None) -> Any:
    """``np.nan_to_num``: NaN and infinities replaced, elementwise, no communication; ``copy=False`` writes into a
    DTensor ``x`` (rebound: a view writes through to its base), as NumPy writes in place.

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([np.nan, np.inf, -1.0]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.nan_to_num(x, posinf=9.0).full_tensor().tolist()
        [0.0, 9.0, -1.0]
    """
    x = as_array(x)
    if not issubclass(x.dtype.type, np.inexact):
        result = x if not copy else np.copy(x)
        return _plain(result)
    real_dtype = np.real(np.zeros((), x.dtype)).dtype
    info = np.finfo(real_dtype)
    maxf = info.max if posinf is None else posinf
    minf = info.min if neginf is None else neginf
    if issubclass(x.dtype.type, np.complexfloating):
        parts = (_finite(np.real(x), nan, maxf, minf), _finite(np.imag(x), nan, maxf, minf))
        fixed = np.where(np.isfinite(x), x, cast(parts[0] + parts[1] * 1j, x.dtype))
    else:
        fixed = _finite(x, nan, maxf, minf)
    if not copy and is_array(x) and hasattr(x, "_rebind"):
        x[...] = fixed
        return x
    return _plain(fixed)


@register_composite(np.real_if_close)
def real_if_close(a: Any, tol: float = 100) -> Any:
    """``np.real_if_close``: ``a.real`` (a view) when every imaginary part is below ``tol``: one ``all_reduce`` of a
    bool decides, on every rank.

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([1 + 1e-15j, 2 + 0j]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.real_if_close(x).dtype
        dtype('float64')
    """
    a = as_array(a)
    if not issubclass(a.dtype.type, np.complexfloating):
        return a
    if tol > 1:
        tol = np.finfo(a.dtype.type).eps * tol
    if builtins.bool(np.all(np.absolute(np.imag(a)) < tol)):
        a = np.real(a)
    return a


@register_composite(np.angle)
def angle(z: Any, deg: bool = False) -> Any:
    """``np.angle``: ``arctan2(z.imag, z.real)`` (in degrees with ``deg``), elementwise, no communication.

    Example:
        >>> import dtensor_np as dt
        >>> z = dt.distribute_tensor(np.array([1j, -1.0 + 0j]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.angle(z, deg=True).full_tensor().tolist()
        [90.0, 180.0]
    """
    z = as_array(z)
    if issubclass(z.dtype.type, np.complexfloating):
        zimag, zreal = np.imag(z), np.real(z)
    else:
        zimag, zreal = 0, z
    a = np.arctan2(zimag, zreal)
    if deg:
        a = a * (180 / np.pi)
    return a


@register_composite(np.fix)
def fix(x: Any, out: Any = None) -> Any:
    """``np.fix``: ``np.trunc`` (NumPy 2.4's own), elementwise, no communication.

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([-1.5, 1.5]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.fix(x).full_tensor().tolist()
        [-1.0, 1.0]
    """
    return np.trunc(x) if out is None else np.trunc(x, out=out)


@register_composite(np.sinc)
def sinc(x: Any) -> Any:
    """``np.sinc``: ``sin(pi x) / (pi x)`` (1 at 0), NumPy's formula, elementwise, no communication.

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([0.0, 1.0]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.round(np.sinc(x), 12).full_tensor().tolist()
        [1.0, 0.0]
    """
    x = np.pi * as_array(x)
    eps = np.finfo(x.dtype).eps if x.dtype.kind == "f" else 1e-20
    y = np.where(x != 0, x, eps)
    return np.sin(y) / y


@register_composite(np.i0)
def i0(x: Any) -> Any:
    """``np.i0``: NumPy's own ``i0`` on every rank's block (elementwise: the same arithmetic per element), no
    communication.

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([0.0, 10.0]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> bool(np.all(np.i0(x).full_tensor() == np.i0(np.array([0.0, 10.0]))))
        True
    """
    x = as_array(x)
    if x.dtype.kind == "c":
        raise TypeError("i0 not supported for complex values")
    if x.dtype.kind != "f":
        x = x.astype(float)
    return blockwise(x, func=np.i0)


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


def _base_of(x: Any) -> Any:
    """The base of a DTensor (itself when it owns its data), or None for anything else."""
    if not is_array(x) or not hasattr(x, "spec"):
        return None
    return x.base if x.base is not None else x


def _twin(x: Any, base_twin: np.ndarray) -> np.ndarray:
    """``x``'s NumPy twin: its view chain applied to its base's stride proxy (no data)."""
    for step in getattr(x, "_chain", ()):
        base_twin = step.twin(base_twin)
    return base_twin


def _memory(a: Any, b: Any, exact: bool, max_work: Any) -> bool:
    base = _base_of(a)
    if base is None or base is not _base_of(b):
        return False  # other bases, or a NumPy array: a DTensor's buffers are its own
    whole = proxy(base.shape, twin_strides(base), base.dtype)
    ta, tb = _twin(a, whole), _twin(b, whole)
    check = np.shares_memory if exact else np.may_share_memory
    return builtins.bool(check(ta, tb) if max_work is None else check(ta, tb, max_work=max_work))


@register_composite(np.shares_memory)
def shares_memory(a: Any, b: Any, max_work: Any = None) -> bool:
    """``np.shares_memory`` by the view model: views of one base whose elements overlap (NumPy's exact answer for
    their NumPy twins); arrays of different bases, or a DTensor and a NumPy array, never (no communication).

    Example:
        >>> import dtensor_np as dt
        >>> a = dt.distribute_tensor(np.zeros((4, 2)), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.shares_memory(a[:2], a[1:]), np.shares_memory(a[0], a[1]), np.shares_memory(a, a.copy())
        (True, False, False)
    """
    return _memory(a, b, True, max_work)


@register_composite(np.may_share_memory)
def may_share_memory(a: Any, b: Any, max_work: Any = None) -> bool:
    """``np.may_share_memory`` by the view model: views of one base whose memory bounds overlap (NumPy's answer for
    their NumPy twins); arrays of different bases, or a DTensor and a NumPy array, never (no communication).

    Example:
        >>> import dtensor_np as dt
        >>> b = dt.distribute_tensor(np.zeros(6), dt.DeviceMesh((2,)), [dt.Replicate()])
        >>> [np.may_share_memory(b[::2], b[1::2]), np.shares_memory(b[::2], b[1::2])]
        [True, False]
    """
    return _memory(a, b, False, max_work)


CASES = {
    "numpy.isclose": Case(lambda x: np.isclose(x, x + 1e-9 * (x > 2), rtol=0.0, atol=1e-10)),
    "numpy.allclose": Case(lambda x: np.allclose(x, x * (1 + 1e-7)), untouched=None),
    "numpy.array_equal": Case(lambda x: (np.array_equal(x, x + 0.0), np.array_equal(x, x[::-1])), untouched=None),
    "numpy.array_equiv": Case(lambda x: (np.array_equiv(x, x[:1]), np.array_equiv(x, x)), untouched=None),
    "numpy.iscomplex": Case(lambda x: np.iscomplex(x + 1j * (x > 2)), untouched=0),
    "numpy.isreal": Case(lambda x: np.isreal(x + 1j * (x > 2)), untouched=0),
    "numpy.iscomplexobj": Case(lambda x: (np.iscomplexobj(x), np.iscomplexobj(x + 0j)), untouched=0),
    "numpy.isrealobj": Case(lambda x: (np.isrealobj(x), np.isrealobj(x + 0j)), untouched=0),
    "numpy.isneginf": Case(lambda x: np.isneginf(np.log(x - 1.25)), untouched=0),
    "numpy.isposinf": Case(lambda x: np.isposinf(1.0 / (x - 1.25)), untouched=0),
    "numpy.nan_to_num": Case(lambda x: np.nan_to_num(np.log(x - 2.0), neginf=-7.0), untouched=0),
    "numpy.real_if_close": Case(lambda x: np.real_if_close(x + 1e-15j), untouched=None),
    "numpy.angle": Case(lambda x: np.angle(x - 2.0 + 1j * x[::-1], deg=True), untouched=None),
    "numpy.fix": Case(lambda x: np.fix(x - 2.6)),
    "numpy.sinc": Case(lambda x: np.sinc(x - 2.5)),
    "numpy.i0": Case(lambda x: np.i0(x * 2.0 - 5.0)),
    "numpy.ndim": Case(lambda x: np.ndim(x)),
    "numpy.shape": Case(lambda x: np.shape(x)),
    "numpy.size": Case(lambda x: (np.size(x), np.size(x, 1))),
    "numpy.iterable": Case(lambda x: (np.iterable(x), np.iterable(np.sum(x)))),
    "numpy.isscalar": Case(lambda x: np.isscalar(x)),
    "numpy.may_share_memory": Case(lambda x: (np.may_share_memory(x[0:4:2], x[1:5:2]), np.may_share_memory(x, x.copy()),
                                              np.may_share_memory(x[0], x[1])), untouched=1),
    "numpy.shares_memory": Case(lambda x: (np.shares_memory(x[0:4:2], x[1:5:2]), np.shares_memory(x[1:], x[:2]),
                                           np.shares_memory(x.T, x), np.shares_memory(x, np.ones(3))), untouched=1),
}

REFUSED: dict[str, Refused] = {}
"""Every name of this family takes DTensors."""
