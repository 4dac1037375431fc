"""Element-wise functions of the Array API namespace: NumPy's ufuncs of the same names, one rule each.

NumPy 2 spells every element-wise function of the standard (``acos``,
``pow``, ``bitwise_left_shift``, ``copysign``, ``nextafter``, ...) with the
standard's semantics (``maximum``/``minimum`` propagate NaN, ``sign`` of a
complex number is ``x / |x|``, ``floor``/``ceil``/``trunc``/``round`` keep
integer dtypes), so each is NumPy's function called on the DTensors: the
ufunc's sharding rule keeps shards where they are (broadcasting redistributes
an operand only when the placements disagree).  ``clip`` alone needs a wrapper:
the standard names its bounds ``min``/``max`` and keeps ``x``'s dtype.

Example:
    >>> import dtensor_np as dt
    >>> xp = dt.array_api.namespace(dt.DeviceMesh((2,)))
    >>> x = xp.asarray([-1.5, 0.5, 2.5])
    >>> xp.pow(x, 2).full_tensor().tolist(), xp.round(x).full_tensor().tolist()
    ([2.25, 0.25, 6.25], [-2.0, 0.0, 2.0])
    >>> xp.clip(xp.asarray([1, 5, 9], dtype=xp.int8), min=2, max=6).full_tensor().tolist()
    [2, 5, 6]
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..dtensor import DTensor

__all__ = ["FUNCTIONS", "NAMES", "clip"]

NAMES = (
    "abs acos acosh add asin asinh atan atan2 atanh bitwise_and bitwise_left_shift bitwise_invert bitwise_or "
    "bitwise_right_shift bitwise_xor ceil conj copysign cos cosh divide equal exp expm1 floor floor_divide greater "
    "greater_equal hypot imag isfinite isinf isnan less less_equal log log1p log2 log10 logaddexp logical_and "
    "logical_not logical_or logical_xor maximum minimum multiply negative nextafter not_equal positive pow real "
    "reciprocal remainder round sign signbit sin sinh square sqrt subtract tan tanh trunc"
).split()
"""The element-wise functions that are NumPy's of the same name (``clip`` is not: see :func:`clip`)."""


def clip(x: DTensor, /, min: Any = None, max: Any = None) -> DTensor:
    """``numpy.clip(x, min, max)`` in ``x``'s dtype (NumPy would promote to an array bound's dtype)."""
    if min is None and max is None:
        return x
    out = np.clip(x, min, max)
    return out if out.dtype == x.dtype else out.astype(x.dtype)


FUNCTIONS: dict[str, Callable[..., Any]] = {name: getattr(np, name) for name in NAMES}
FUNCTIONS["clip"] = clip
