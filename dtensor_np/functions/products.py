"""Products NumPy writes as functions of others: ``cross``, ``matvec``, ``vecmat``.

``np.cross`` of 3-vectors along the last axis is ``np.linalg.cross`` (its rule:
local where the vector axis is not sharded, the axis gathered where it is: 3
elements a row); other axes are moved last first (views).  ``np.matvec(A, v)``
is ``A @ v[..., None]`` and ``np.vecmat(v, A)`` is ``conj(v)[..., None, :] @ A``
(``matmul``'s rule: a sharded contraction dim leaves a pending sum, reduced by
one all_reduce).

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> a = dt.distribute_tensor(np.eye(3), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> np.cross(a, np.array([0.0, 0.0, 1.0])).full_tensor().tolist()
    [[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..numpy_catalogue import Case
from ..propagation.registry import register_composite

__all__ = ["CASES", "cross", "matvec", "vecmat"]


@register_composite(np.cross)
def cross(a: Any, b: Any, axisa: int = -1, axisb: int = -1, axisc: int = -1, axis: Any = None) -> Any:
    """``np.cross`` of 3-vectors (``np.linalg.cross`` along the moved axes); 2-vectors as NumPy's (z only)."""
    if axis is not None:
        axisa = axisb = axisc = axis
    a = np.moveaxis(a, axisa, -1)
    b = np.moveaxis(b, axisb, -1)
    if a.shape[-1] not in (2, 3) or b.shape[-1] not in (2, 3):
        raise ValueError("incompatible dimensions for cross product\n(dimension must be 2 or 3)")
    if a.shape[-1] == 2 and b.shape[-1] == 2:
        return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]
    if a.shape[-1] == 2:
        a = np.concatenate([a, np.zeros(a.shape[:-1] + (1,), dtype=a.dtype)], axis=-1)
    if b.shape[-1] == 2:
        b = np.concatenate([b, np.zeros(b.shape[:-1] + (1,), dtype=b.dtype)], axis=-1)
    return np.moveaxis(np.linalg.cross(a, b), -1, axisc)


@register_composite(np.matvec)
def matvec(x1: Any, x2: Any) -> Any:
    """``np.matvec``: ``x1 @ x2[..., None]``, the last dim dropped."""
    return np.matmul(x1, x2[..., None])[..., 0]


@register_composite(np.vecmat)
def vecmat(x1: Any, x2: Any) -> Any:
    """``np.vecmat``: ``conj(x1)[..., None, :] @ x2``, the new dim dropped."""
    return np.matmul(np.conj(x1)[..., None, :], x2)[..., 0, :]


CASES = {
    "numpy.cross": Case(lambda x: np.cross(x, np.array([1.0, -2.0, 0.5])), shape=(5, 3), untouched=0, axis=1),
    "numpy.matvec": Case(lambda x: np.matvec(x, np.arange(4.0)), untouched=0, axis=1, tolerance=16.0),
    "numpy.vecmat": Case(lambda x: np.vecmat(np.arange(5.0), x), untouched=1, axis=0, tolerance=16.0),
}
