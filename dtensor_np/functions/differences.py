"""Differences, derivatives, integrals and convolutions along an axis: ``diff``, ``ediff1d``, ``gradient``,
``trapezoid``, ``convolve``, ``correlate``, ``unwrap``.

Along an axis that is not sharded nothing moves.  Along a sharded axis
every rank needs a few rows of its neighbours (a *halo*), never the whole
axis:

=============  ==========================================================================================
``diff``       rule (:mod:`dtensor_np.propagation.halo`): one ``Alltoallv`` (counted ``all_to_all``) of
               ``n`` rows per block boundary; ``prepend``/``append`` are replicated along the axis
``gradient``   rule: one ``all_to_all`` per sharded axis, a row each way (two at an edge of order 2);
               coordinate arrays replicated (gathered when sharded: ``all_gather``)
``trapezoid``  rule: one ``all_to_all`` of one row per boundary (and of ``x``'s when it is sharded); the sum
               is ``Partial(sum)``, one ``all_reduce`` when read
``convolve``   rule (:mod:`dtensor_np.propagation.convolution`): the longer operand stays sharded, the
``correlate``  shorter (``m`` values) is replicated (``all_gather`` if sharded); one ``all_to_all`` of
               ``m - 1`` values per boundary
``ediff1d``    composite: ``ravel`` (a ``rechunk`` for an array sharded on another dim than its first),
               ``diff`` (one ``all_to_all``), and ``concatenate`` with ``to_begin``/``to_end`` (one
               ``rechunk`` of the few rows that change owner)
``unwrap``     composite: ``diff`` with a row prepended (one ``all_to_all``), elementwise steps, ``cumsum``
               (one ``scan``)
=============  ==========================================================================================

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.array([0.0, 3.0, 6.5, 0.2, 3.1, 6.4]), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> with dt.comm_counter() as c:
    ...     u = np.unwrap(x)
    >>> np.allclose(u.full_tensor(), np.unwrap(x.full_tensor())), c.counts["all_to_all"], c.counts["scan"]
    (True, 1, 1)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..numpy_catalogue import Case
from ..propagation.registry import register_composite

__all__ = ["CASES", "REFUSED", "as_operand", "ediff1d", "unwrap"]


def as_operand(value: Any) -> Any:
    """``value`` as an array: a DTensor (or a traced array) as it is, anything else through ``np.asanyarray``.

    Example:
        >>> as_operand([1, 2]).tolist()
        [1, 2]
    """
    return value if hasattr(value, "__array_function__") and hasattr(value, "dtype") else np.asanyarray(value)


def _edge(value: Any, dtype: np.dtype, name: str) -> Any:
    """``to_begin``/``to_end`` flattened in ``ary``'s dtype (NumPy's ``same_kind`` check first)."""
    value = as_operand(value)
    if not np.can_cast(value.dtype, dtype, casting="same_kind"):
        raise TypeError(f"dtype of `{name}` must be compatible with input `ary` under the `same_kind` rule.")
    return np.ravel(value).astype(dtype)


@register_composite(np.ediff1d)
def ediff1d(ary: Any, to_end: Any = None, to_begin: Any = None) -> Any:
    """``np.ediff1d``: the differences of the flattened array, between ``to_begin`` and ``to_end``.

    Collectives on a sharded operand: those of ``ravel``, ``diff`` (one ``all_to_all`` of one element per
    boundary) and, with ``to_begin``/``to_end``, ``concatenate`` (one ``rechunk``: only the elements whose
    owner changes move).

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([1, 2, 4, 7, 0]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.ediff1d(x, to_begin=-99, to_end=[88, 99]).full_tensor().tolist()
        [-99, 1, 2, 3, -7, 88, 99]
    """
    ary = np.ravel(as_operand(ary))
    dtype = ary.dtype
    if dtype == np.bool_:
        raise TypeError("numpy boolean subtract, the `-` operator, is not supported, use the bitwise_xor, the `^` "
                        "operator, or the logical_xor function instead.")
    parts = [] if to_begin is None else [_edge(to_begin, dtype, "to_begin")]
    parts.append(np.diff(ary))
    if to_end is not None:
        parts.append(_edge(to_end, dtype, "to_end"))
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _put(array: Any, value: Any, where: Any) -> Any:
    """``np.copyto(array, value, where=where)`` as a new array (``value`` cast to ``array``'s dtype first)."""
    return np.where(where, np.asarray(value).astype(array.dtype), array)


@register_composite(np.unwrap)
def unwrap(p: Any, discont: Any = None, axis: int = -1, *, period: Any = 2 * np.pi) -> Any:
    """``np.unwrap``: jumps larger than ``discont`` corrected by multiples of ``period`` along ``axis``.

    NumPy's steps, with the differences ``diff`` of ``p`` with one row prepended (the first corrected by
    nothing): along a sharded axis one ``all_to_all`` (the halo of ``diff``) and one ``scan`` (``cumsum``);
    elementwise otherwise.

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([0.0, 3.0, 6.5, 9.0]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.round(np.unwrap(x), 6).full_tensor().tolist()
        [0.0, 3.0, 0.216815, 2.716815]
    """
    p = as_operand(p)
    dd = np.diff(p, axis=axis, prepend=np.zeros((), p.dtype))  # row 0 is p[0]: masked below
    if discont is None:
        discont = period / 2
    dtype = np.result_type(dd.dtype, period)
    if np.issubdtype(dtype, np.integer):
        interval_high, rem = divmod(period, 2)
        boundary_ambiguous = rem == 0
    else:
        interval_high = period / 2
        boundary_ambiguous = True
    interval_low = -interval_high
    ddmod = np.mod(dd - interval_low, period) + interval_low
    if boundary_ambiguous:
        ddmod = _put(ddmod, interval_high, (ddmod == interval_low) & (dd > 0))
    ph_correct = ddmod - dd
    shape = [1] * p.ndim
    shape[axis] = p.shape[axis]
    first = (np.arange(p.shape[axis]) == 0).reshape(shape)
    ph_correct = _put(ph_correct, 0, first | (abs(dd) < discont))
    up = p.astype(dtype)
    result = np.where(first, up, p + np.cumsum(ph_correct, axis=axis))
    return result if result.dtype == dtype else result.astype(dtype)


def _signal(shape: tuple[int, ...]) -> np.ndarray:
    return np.round(np.sin(np.arange(int(np.prod(shape))) * 0.7) * 8, 2).reshape(shape)


CASES = {
    "numpy.diff": Case(lambda x: np.diff(x, n=2, axis=0, append=1.0), untouched=1, axis=0),
    "numpy.ediff1d": Case(lambda x: np.ediff1d(x, to_end=[9.0, 8.0], to_begin=-1.0), shape=(20,), untouched=None,
                          axis=0),
    "numpy.gradient": Case(lambda x: np.gradient(x, np.array([0.0, 1.0, 1.5, 3.0, 4.5]), axis=0, edge_order=2),
                           untouched=1, axis=0),
    "numpy.trapezoid": Case(lambda x: np.trapezoid(x, dx=0.5, axis=0), untouched=1, axis=0, tolerance=16),
    "numpy.convolve": Case(lambda x: np.convolve(x, [1.0, -2.0, 0.5], mode="same"), shape=(20,), untouched=None,
                           axis=0, data=_signal),
    "numpy.correlate": Case(lambda x: np.correlate([0.5, 1.0, -1.0, 2.0], x, mode="full"), shape=(20,),
                            untouched=None, axis=0, data=_signal),
    "numpy.unwrap": Case(lambda x: np.unwrap(x, axis=0), untouched=1, axis=0, data=_signal, tolerance=64),
}

REFUSED: dict[str, Any] = {}
