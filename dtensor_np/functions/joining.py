"""Joining arrays: ``hstack``, ``vstack``, ``dstack``, ``column_stack``, ``row_stack``, ``atleast_1d/2d/3d``.

Each is NumPy's own composition: ``np.concatenate`` (or ``np.stack``) of the
arrays made at least 1-, 2- or 3-d by ``np.expand_dims``/``reshape`` (views:
no data moves).  The collectives are ``concatenate``'s: none where the joined
dim is not sharded; along a sharded dim the rows that change owner move
(``rechunk``), never a gather.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.arange(4.0), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> np.vstack([x, x]).full_tensor().tolist()
    [[0.0, 1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0]]
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..numpy_catalogue import Case
from ..propagation.registry import register_composite

__all__ = ["CASES", "atleast_1d", "atleast_2d", "atleast_3d", "hstack", "vstack", "dstack", "column_stack"]


def _at_least(ndim: int, arrays: Sequence[Any]) -> Any:
    """NumPy's shapes: ``() -> (1,) * ndim``; for 2-d ``(N,) -> (1, N)``; for 3-d ``(N,) -> (1, N, 1)`` and
    ``(M, N) -> (M, N, 1)`` (reshapes: views)."""
    made = []
    for a in arrays:
        if not hasattr(a, "ndim"):  # a list, a Python number: NumPy's asanyarray (a replicated constant when joined)
            a = np.asanyarray(a)
        if a.ndim < ndim:
            if a.ndim == 0:
                shape: tuple[int, ...] = (1,) * ndim
            elif ndim == 2 or a.ndim == 1:
                shape = ((1,) + tuple(a.shape) + (1,))[:ndim]
            else:
                shape = tuple(a.shape) + (1,)
            a = a.reshape(shape)
        made.append(a)
    return made[0] if len(made) == 1 else tuple(made)


def _cast(joined: Any, dtype: Any, casting: str) -> Any:
    """``joined`` in ``dtype`` where one is asked for (NumPy's ``dtype=``/``casting=`` of the stacking functions)."""
    if dtype is None:
        return joined
    if not np.can_cast(joined.dtype, dtype, casting=casting):
        raise TypeError(f"Cannot cast array data from {joined.dtype!r} to {np.dtype(dtype)!r} according to the rule "
                        f"{casting!r}")
    return joined.astype(dtype)


@register_composite(np.atleast_1d)
def atleast_1d(*arrays: Any) -> Any:
    """``np.atleast_1d``: an array of 1 dim or more (a 0-d one reshaped: a view, as NumPy's)."""
    return _at_least(1, arrays)


@register_composite(np.atleast_2d)
def atleast_2d(*arrays: Any) -> Any:
    """``np.atleast_2d``: a 1-d array as one row (a view, as NumPy's)."""
    return _at_least(2, arrays)


@register_composite(np.atleast_3d)
def atleast_3d(*arrays: Any) -> Any:
    """``np.atleast_3d``: NumPy's shapes, ``(N,) -> (1, N, 1)``, ``(M, N) -> (M, N, 1)`` (views)."""
    return _at_least(3, arrays)


@register_composite(np.hstack)
def hstack(tup: Sequence[Any], *, dtype: Any = None, casting: str = "same_kind") -> Any:
    """``np.hstack``: ``concatenate`` along dim 1 (dim 0 for 1-d arrays)."""
    arrays = [atleast_1d(a) for a in tup]
    axis = 0 if arrays and arrays[0].ndim == 1 else 1
    return _cast(np.concatenate(arrays, axis=axis), dtype, casting)


@register_composite(np.vstack, *([np.row_stack] if hasattr(np, "row_stack") else []))
def vstack(tup: Sequence[Any], *, dtype: Any = None, casting: str = "same_kind") -> Any:
    """``np.vstack``: ``concatenate`` of the arrays made at least 2-d, along dim 0."""
    return _cast(np.concatenate([atleast_2d(a) for a in tup], axis=0), dtype, casting)


@register_composite(np.dstack)
def dstack(tup: Sequence[Any]) -> Any:
    """``np.dstack``: ``concatenate`` of the arrays made at least 3-d, along dim 2."""
    return np.concatenate([atleast_3d(a) for a in tup], axis=2)


@register_composite(np.column_stack)
def column_stack(tup: Sequence[Any]) -> Any:
    """``np.column_stack``: 1-d arrays as columns, then ``concatenate`` along dim 1."""
    return np.concatenate([a.reshape(a.shape + (1,)) if a.ndim < 2 else a for a in tup], axis=1)


CASES = {
    "numpy.atleast_1d": Case(lambda x: np.atleast_1d(x[0, 0]), untouched=None),
    "numpy.atleast_2d": Case(lambda x: np.atleast_2d(x[0]), untouched=None, axis=1),
    "numpy.atleast_3d": Case(lambda x: np.atleast_3d(x), axis=1),
    "numpy.hstack": Case(lambda x: np.hstack([x, x]), axis=1),
    "numpy.vstack": Case(lambda x: np.vstack([x, x]), untouched=1, axis=0),
    "numpy.row_stack": Case(lambda x: np.vstack([x, x]), untouched=1, axis=0),
    "numpy.dstack": Case(lambda x: np.dstack([x, x])),
    "numpy.column_stack": Case(lambda x: np.column_stack([x[:, 0], x]), axis=1),
    # plain data mixed in (NumPy's asanyarray: replicated constants)
    "numpy.hstack: with a list and a number": Case(lambda x: np.hstack([x[0], [7.0, 8.0], 9]), untouched=None),
    "numpy.vstack: with a nested list": Case(lambda x: np.vstack([x, [[1.0, 2.0, 3.0, 4.0]]]), untouched=1, axis=0),
    "numpy.atleast_2d: of a list and an array": Case(lambda x: np.atleast_2d([1.0, 2.0], x[0])[1], untouched=None),
}
