"""Statistical functions of the Array API namespace: NumPy's reductions and scans on DTensors.

``max``, ``min``, ``mean``, ``prod``, ``sum``, ``std`` and ``var`` are
NumPy's functions (NumPy 2's default dtypes are the standard's: a sum of
``int8`` is ``int64``, of ``float32`` stays ``float32``; ``std``/``var`` take
``correction=``).  A reduction over a sharded dim reduces each rank's block
and leaves a pending sum/max/min that one ``all_reduce`` settles when needed.
``cumulative_sum``/``cumulative_prod`` are ``numpy.cumsum``/``numpy.cumprod``
(the scan rule) plus the standard's ``include_initial=`` (the identity
prepended along ``axis``, with ``concat``); ``axis`` may be left out for 1-d
arrays only.

Example:
    >>> import dtensor_np as dt
    >>> xp = dt.array_api.namespace(dt.DeviceMesh((2,)))
    >>> x = xp.asarray([[1, 2], [3, 4]], dtype=xp.int8)
    >>> s = xp.sum(x, axis=0)
    >>> s.dtype, s.full_tensor().tolist()
    (dtype('int64'), [4, 6])
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from ..devices import Sharding
from ..dtensor import DTensor
from ..propagation.common import axis_index

__all__ = ["FUNCTIONS", "cumulative_prod", "cumulative_sum"]


def _scan_axis(x: DTensor, axis: Optional[int], name: str) -> int:
    if axis is not None:
        return axis_index(axis, x.ndim)
    if x.ndim != 1:
        raise ValueError(f"{name}: axis must be given for an array of {x.ndim} dims (it may be left out for 1-d only)")
    return 0


def _cumulative(scan: Callable[..., DTensor], identity: int, name: str, x: DTensor, axis: Optional[int], dtype: Any,
                include_initial: bool) -> DTensor:
    axis = _scan_axis(x, axis, name)
    out = scan(x, axis=axis, dtype=dtype)
    if not include_initial:
        return out
    shape = out.shape[:axis] + (1,) + out.shape[axis + 1:]
    xp = x.__array_namespace__()
    initial = xp.full(shape, identity, dtype=out.dtype, device=Sharding(out.mesh, out.placements))
    return np.concat([initial, out], axis=axis)


def cumulative_sum(x: DTensor, /, *, axis: Optional[int] = None, dtype: Any = None,
                   include_initial: bool = False) -> DTensor:
    """Running sums along ``axis`` (``numpy.cumsum``), with a leading 0 when ``include_initial``."""
    return _cumulative(np.cumsum, 0, "cumulative_sum", x, axis, dtype, include_initial)


def cumulative_prod(x: DTensor, /, *, axis: Optional[int] = None, dtype: Any = None,
                    include_initial: bool = False) -> DTensor:
    """Running products along ``axis`` (``numpy.cumprod``), with a leading 1 when ``include_initial``."""
    return _cumulative(np.cumprod, 1, "cumulative_prod", x, axis, dtype, include_initial)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    **{name: getattr(np, name) for name in ("max", "mean", "min", "prod", "std", "sum", "var")},
    "cumulative_sum": cumulative_sum,
    "cumulative_prod": cumulative_prod,
}
