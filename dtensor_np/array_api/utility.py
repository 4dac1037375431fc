"""Utility functions of the Array API namespace: ``all``, ``any`` (NumPy's) and ``diff``.

``diff`` is NumPy's definition written with the namespace's own pieces, as
NumPy writes it: ``prepend``/``append`` joined with ``concat``, then ``n``
times the difference of the array without its first and without its last
element along ``axis`` (``not_equal`` for booleans).  Each slice of a sharded
dim moves only the elements that change owner, so a first difference costs
two ``all_to_all`` exchanges of about one element row per rank boundary.

Example:
    >>> import dtensor_np as dt
    >>> xp = dt.array_api.namespace(dt.DeviceMesh((2,)), "replicate")
    >>> bool(xp.all(xp.asarray([True, False]))), bool(xp.any(xp.asarray([True, False])))
    (False, True)
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Optional

import numpy as np

from ..dtensor import DTensor
from ..propagation.common import axis_index

__all__ = ["FUNCTIONS", "diff"]


def diff(x: DTensor, /, n: int = 1, axis: int = -1, prepend: Optional[DTensor] = None,
         append: Optional[DTensor] = None) -> DTensor:
    """The ``n``-th forward difference along ``axis`` (``numpy.diff``).

    The standard's keywords, and NumPy's positions too (``xp.diff(x, 2)``, as scikit-learn's ``roc_curve``
    calls it).
    """
    n = operator.index(n)
    if n < 0:
        raise ValueError(f"order must be non-negative but got {n}")
    if x.ndim == 0:
        raise ValueError("diff requires input that is at least one dimensional")
    axis = axis_index(axis, x.ndim)
    parts = [p for p in (prepend, x, append) if p is not None]
    out = np.concat(parts, axis=axis) if len(parts) > 1 else x
    before = (slice(None),) * axis
    for _ in range(n):
        later, earlier = out[before + (slice(1, None),)], out[before + (slice(None, -1),)]
        out = np.not_equal(later, earlier) if out.dtype == np.bool_ else np.subtract(later, earlier)
    return out


FUNCTIONS: dict[str, Callable[..., Any]] = {"all": np.all, "any": np.any, "diff": diff}
