"""Rules for ``packbits`` and ``unpackbits``: whole along the packed axis, local along the others.

Packing eight elements into a byte needs them on one rank: where the packed
axis is sharded, its sharding moves to another dim first (one
``all_to_all``, :func:`~.whole_axes.whole_decision`), and the result keeps
the input's placements on every other dim.  With ``axis=None`` NumPy packs
the flattened array: a 1-D input is its own axis, an n-D input is gathered
(``all_gather``: the row-major order of a flattened sharded array is not held
by any rank), and the result is replicated.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.eye(4, 16, dtype=bool), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> y = np.packbits(x, axis=1)
    >>> y.shape, y.placements, y.full_tensor()[:, 0].tolist()
    ((4, 2), (Shard(dim=0),), [128, 64, 32, 16])
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ..spec import DTensorSpec, TensorMeta
from .common import axis_index
from .registry import Decision, OpRule, register
from .signature_bind import signature_binder
from .whole_axes import whole_decision

__all__ = ["BIT_FUNCTIONS"]

BIT_FUNCTIONS = (np.packbits, np.unpackbits)


def _check_dtype(func: Callable[..., Any], spec: DTensorSpec) -> None:
    """NumPy's TypeError for a dtype it refuses, raised before anything moves."""
    func(np.zeros((0,) * spec.ndim, spec.dtype), axis=None)


def _flat_length(func: Callable[..., Any], n: int, count: Any) -> int:
    """The length of ``func`` of ``n`` flattened elements (``count`` as ``unpackbits`` reads it)."""
    if func is np.packbits:
        return (n + 7) // 8
    if count is None:
        return 8 * n
    if count < -8 * n:
        raise ValueError("-count larger than number of elements")
    return count if count >= 0 else 8 * n + count


def _bits_rule(func: Callable[..., Any]) -> OpRule:
    def decide(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
        (spec,) = specs
        kwargs = dict(key)
        _check_dtype(func, spec)
        if kwargs["axis"] is None and spec.ndim != 1:
            meta = TensorMeta((_flat_length(func, math.prod(spec.shape), kwargs.get("count")),), np.dtype(np.uint8))
            return whole_decision(spec, range(spec.ndim), (meta,), lambda rank, x: func(x, **kwargs))
        axis = 0 if kwargs["axis"] is None else axis_index(kwargs["axis"], spec.ndim, "axis")
        shape = list(spec.shape)
        shape[axis] = _flat_length(func, shape[axis], kwargs.get("count"))
        metas = (TensorMeta(tuple(shape), np.dtype(np.uint8)),)
        return whole_decision(spec, (axis,), metas, lambda rank, x: func(x, **kwargs))

    return OpRule(func.__name__, signature_binder(func, "numpy"), decide)


for _func in BIT_FUNCTIONS:
    register(_func)(_bits_rule(_func))
