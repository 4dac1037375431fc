"""Manipulation functions of the Array API namespace: NumPy's shape functions on DTensors.

Most are NumPy's functions of the same name (``concat``, ``permute_dims``,
``moveaxis``, ``reshape``, ``squeeze``, ``stack``, ``flip``, ``roll``,
``repeat``, ``tile``, ``broadcast_to``); their sharding rules keep a dim's
shards where they can and move only what changes owner.  Wrappers give the
standard's forms: ``broadcast_arrays`` is a list of ``broadcast_to`` results,
``concat(axis=None)`` joins the flattened arrays, and
``unstack`` is the arrays ``x[..., i, ...]`` along ``axis`` (each one index,
taken from the ranks that hold it).  ``reshape(copy=False)`` is taken like
``copy=None``: values are never written in place, so sharing cannot be seen.

Example:
    >>> import dtensor_np as dt
    >>> xp = dt.array_api.namespace(dt.DeviceMesh((2,)))
    >>> x = xp.reshape(xp.arange(6), (2, 3))
    >>> xp.permute_dims(x, (1, 0)).shape, xp.expand_dims(x, axis=0).shape, xp.concat([x, x], axis=None).shape
    ((3, 2), (1, 2, 3), (12,))
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..dtensor import DTensor

__all__ = ["FUNCTIONS", "broadcast_arrays", "concat", "reshape", "unstack"]


def broadcast_arrays(*arrays: DTensor) -> list[DTensor]:
    """Each array broadcast to their common shape (``numpy.broadcast_to`` of each, as NumPy does), as a list."""
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    return [a if a.shape == shape else np.broadcast_to(a, shape) for a in arrays]


def concat(arrays: Sequence[DTensor], /, *, axis: Optional[int] = 0) -> DTensor:
    """``numpy.concat``; ``axis=None`` joins the flattened arrays."""
    if axis is None:
        return np.concat([np.reshape(a, (-1,)) for a in arrays], axis=0)
    return np.concat(arrays, axis=axis)


def reshape(x: DTensor, /, shape: Sequence[int], *, copy: Optional[bool] = None) -> DTensor:
    """``numpy.reshape`` (``copy`` is accepted: no value is ever written in place, so a copy is never needed)."""
    if copy not in (None, True, False):
        raise TypeError(f"reshape: copy must be True, False or None, got {copy!r}")
    return np.reshape(x, shape)


def unstack(x: DTensor, /, *, axis: int = 0) -> tuple[DTensor, ...]:
    """The arrays along ``axis``, as ``numpy.unstack``: ``x[..., i, ...]`` for each ``i``."""
    moved = np.moveaxis(x, axis, 0)
    return tuple(moved[i] for i in range(moved.shape[0]))


FUNCTIONS: dict[str, Callable[..., Any]] = {
    **{name: getattr(np, name)
       for name in ("broadcast_to", "expand_dims", "flip", "moveaxis", "permute_dims", "repeat", "roll", "squeeze",
                    "stack", "tile")},
    "broadcast_arrays": broadcast_arrays,
    "concat": concat,
    "reshape": reshape,
    "unstack": unstack,
}
