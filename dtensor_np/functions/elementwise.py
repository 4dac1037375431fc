"""Elementwise NumPy functions written with others: ``nan_to_num``, ``real_if_close``, ``sort_complex``; and the
cases of the elementwise functions that run on the local blocks as they are (``fix``, ``angle``, ``i0``,
``sinc``, ``isneginf``, ``isposinf``, ``iscomplex``, ``isreal``: their rule is
:data:`dtensor_np.propagation.elementwise.ONE_ARRAY_ELEMENTWISE`).

``nan_to_num`` is three ``where`` (local on every placement); with
``copy=False`` it writes into its argument, as NumPy's does (through the view
model: a view's base sees the write).  ``real_if_close`` tests every imaginary
part: one ``all_reduce`` of a boolean when the input is sharded.
``sort_complex`` is ``sort`` (its rule: an ``all_to_all`` where the last axis
is sharded) and a cast.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.array([1.0, np.nan, np.inf, -np.inf]), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> np.nan_to_num(x, posinf=9.0, neginf=-9.0).full_tensor().tolist()
    [1.0, 0.0, 9.0, -9.0]
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..numpy_catalogue import Case
from ..propagation.elementwise import ONE_ARRAY_ELEMENTWISE
from ..propagation.registry import register_composite

__all__ = ["CASES", "nan_to_num", "real_if_close", "sort_complex"]


def _finite(x: Any, nan: float, posinf: Optional[float], neginf: Optional[float]) -> Any:
    info = np.finfo(x.dtype)
    high = info.max if posinf is None else posinf
    low = info.min if neginf is None else neginf
    return np.where(np.isnan(x), nan, np.where(np.isposinf(x), high, np.where(np.isneginf(x), low, x)))


@register_composite(np.nan_to_num)
def nan_to_num(x: Any, copy: bool = True, nan: float = 0.0, posinf: Optional[float] = None,
               neginf: Optional[float] = None) -> Any:
    """``np.nan_to_num``: NaN to ``nan``, infinities to ``posinf``/``neginf`` (default: the dtype's extremes)."""
    kind = x.dtype.kind
    if kind == "c":
        result = _finite(np.real(x), nan, posinf, neginf) + 1j * _finite(np.imag(x), nan, posinf, neginf)
        result = result.astype(x.dtype)
    elif kind == "f":
        result = _finite(x, nan, posinf, neginf).astype(x.dtype)
    else:
        result = np.copy(x) if copy else x
    if copy:
        return result
    if result is not x:
        np.copyto(x, result)
    return x


@register_composite(np.real_if_close)
def real_if_close(a: Any, tol: float = 100) -> Any:
    """``np.real_if_close``: the real part when every imaginary part is under ``tol`` (times the dtype's epsilon
    where ``tol > 1``); one ``all_reduce`` of a boolean on a sharded input."""
    if a.dtype.kind != "c":
        return a
    if tol > 1:
        tol = np.finfo(a.dtype).eps * tol
    return np.real(a) if bool(np.all(np.abs(np.imag(a)) < tol)) else a


@register_composite(np.sort_complex)
def sort_complex(a: Any) -> Any:
    """``np.sort_complex``: sorted along the last axis (real part first, then imaginary), as complex."""
    b = np.sort(a, axis=-1)
    if b.dtype.kind == "c":
        return b
    char = b.dtype.char
    return b.astype("F" if char in "bhBH" else "G" if char == "g" else "D")


def _with_specials(shape: tuple[int, ...]) -> np.ndarray:
    values = np.arange(1, int(np.prod(shape)) + 1, dtype=float) / 4 - 2
    values[1::5], values[2::7], values[3::6] = np.nan, np.inf, -np.inf
    return values.reshape(shape)


def _nan_to_num_in_place(x: Any) -> Any:
    view = x[:, 1:]
    result = np.nan_to_num(view, copy=False, nan=-1.0)
    return result is view, x


def _complex(shape: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(shape))
    return ((np.arange(n) % 5 - 2) + 1j * (np.arange(n) % 3 - 1)).reshape(shape) / 4


CASES = {
    "numpy.nan_to_num": Case(lambda x: np.nan_to_num(x, posinf=9.0), data=_with_specials),
    "numpy.real_if_close": Case(lambda x: np.real_if_close(x + 1e-18j), untouched=None, axis=0),
    "numpy.sort_complex": Case(lambda x: np.sort_complex(x), dtype="complex128", data=_complex, axis=1),
}
CASES.update({  # the same names called another way ("name: how"): in the tests, not in the table
    "numpy.nan_to_num: copy=False on a view": Case(_nan_to_num_in_place, data=_with_specials, axis=1),
    "numpy.sort_complex: of int16": Case(lambda x: np.sort_complex(x), dtype="int16", axis=1),
})
for _f in ONE_ARRAY_ELEMENTWISE:
    if _f in (np.real, np.imag, np.round, np.around):
        continue  # cases in functions.ruled
    _dtype = "complex128" if _f in (np.angle, np.iscomplex, np.isreal) else "float64"
    _data = _complex if _dtype == "complex128" else (_with_specials if _f in (np.isneginf, np.isposinf) else None)
    CASES[f"numpy.{_f.__name__}"] = Case(lambda x, f=_f: f(x), dtype=_dtype, data=_data, tolerance=8.0)
