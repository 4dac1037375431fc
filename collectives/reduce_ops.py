"""Reduce ops: validation, the in-order local reduction, and the MPI op for each dtype.

NumPy defines the results: ``sum`` is ``np.add`` (so a bool sum is a logical
or), ``avg`` is the sum divided by the group size (refused for integer and
bool dtypes), ``max``/``min`` are ``np.maximum``/``np.minimum`` (NaN-propagating;
lexicographic for complex).  MPI's predefined ops are used only where they give
exactly that: integer sum/max/min, float and complex sum, and bool via
``LOR``/``LAND``.  Everything else (float16, bfloat16, float max/min whose
NaN handling differs in MPI, complex max/min, ...) uses a cached user-defined
``MPI.Op`` that views the buffers as the NumPy dtype and applies the ufunc.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Optional
from typing import TYPE_CHECKING

import numpy as np

from .caches import memo
from .device import array_module
from .dtypes import bytes_datatype, has_predefined_mpi_type, movement_datatype
from .errors import CollectiveError
from .types import REDUCE_OPS, Array

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = [
    "REDUCE_OPS",
    "combine_in_order",
    "divide_by_group_size",
    "finisher",
    "mpi_reduction",
    "validate_reduce_op",
    "validate_reduction",
]

_UFUNC_NAMES = {"sum": "add", "avg": "add", "max": "maximum", "min": "minimum"}


def validate_reduce_op(op: str, kind: str) -> None:
    """Raise ``CollectiveError`` unless ``op`` is one of ``REDUCE_OPS``."""
    if op not in _UFUNC_NAMES:
        raise CollectiveError(f"{kind}: op must be one of {REDUCE_OPS}, got {op!r}")


def validate_reduction(dtype: np.dtype, op: str, kind: str) -> None:
    """Raise ``TypeError`` if arrays of ``dtype`` cannot be reduced with ``op``.

    Example:
        >>> validate_reduction(np.dtype("int64"), "avg", "all_reduce")
        Traceback (most recent call last):
        ...
        TypeError: all_reduce: op 'avg' needs a floating or complex dtype, got int64
    """
    problem = _reduction_problem(dtype, op)
    if problem:
        raise TypeError(f"{kind}: {problem}")


@memo(maxsize=None, name="collectives.reduction_problems")
def _reduction_problem(dtype: np.dtype, op: str) -> str:
    if op == "avg" and dtype.kind in "biu":
        return f"op 'avg' needs a floating or complex dtype, got {dtype}"
    probe = np.zeros(2, dtype)
    try:
        combined = getattr(np, _UFUNC_NAMES[op])(probe[:1], probe[1:])
        if op == "avg":
            np.true_divide(combined, 2, out=combined)
    except TypeError as exc:
        return f"cannot reduce arrays of dtype {dtype} with op {op!r} ({exc})"
    return ""


def combine_in_order(arrays: Sequence[Array], op: str) -> Array:
    """Reduce ``arrays`` left to right into a new C-contiguous array.

    One fixed order, so every member given this result sees the same bits.

    Example:
        >>> combine_in_order([np.array([1.0, 4.0]), np.array([3.0, 2.0])], "max")
        array([3., 4.])
    """
    xp = array_module(arrays[0])
    ufunc = getattr(xp, _UFUNC_NAMES[op])
    result = xp.array(arrays[0], order="C")  # a new array, also from a NumPy scalar
    for x in arrays[1:]:
        ufunc(result, x, out=result)
    if op == "avg":
        divide_by_group_size(result, len(arrays))
    return result


def divide_by_group_size(result: Array, group_size: int) -> Array:
    """Turn a sum into an average in place (``avg``); returns ``result``."""
    array_module(result).true_divide(result, group_size, out=result)
    return result


def finisher(op: str, group_size: int) -> Optional[Callable[[Array], Array]]:
    """What turns MPI's reduced buffer into the result: None, or for ``avg`` the division by the group size.

    Example:
        >>> finisher("sum", 4) is None, finisher("avg", 4)(np.array([8.0])).tolist()
        (True, [2.0])
    """
    if op != "avg":
        return None
    return functools.partial(divide_by_group_size, group_size=group_size)


@memo(maxsize=None, name="collectives.mpi_reductions", persistent=True)
def mpi_reduction(dtype: np.dtype, op: str) -> tuple[MPI.Datatype, MPI.Op, bool]:
    """``(datatype, mpi_op, runs_numpy)`` reducing ``dtype`` with ``op`` like NumPy.

    ``runs_numpy`` is True for a user-defined op, whose buffers must be host memory.
    """
    from mpi4py import MPI

    if has_predefined_mpi_type(dtype):
        if dtype.kind == "b":
            return movement_datatype(dtype), (MPI.LAND if op == "min" else MPI.LOR), False
        if dtype.kind in "iu":
            native = {"sum": MPI.SUM, "avg": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[op]
            return movement_datatype(dtype), native, False
        if op in ("sum", "avg"):
            return movement_datatype(dtype), MPI.SUM, False
    return bytes_datatype(dtype.itemsize), _numpy_user_op(dtype, _UFUNC_NAMES[op]), True


@memo(maxsize=None, name="collectives.mpi_user_ops", persistent=True)
def _numpy_user_op(dtype: np.dtype, ufunc_name: str) -> MPI.Op:
    """A commutative ``MPI.Op`` applying ``numpy.<ufunc_name>`` to ``dtype`` elements."""
    from mpi4py import MPI

    ufunc = getattr(np, ufunc_name)

    def reduce_into(inbuf: memoryview, inoutbuf: memoryview, datatype: MPI.Datatype) -> None:
        inout = np.frombuffer(inoutbuf, dtype)
        with np.errstate(all="call", call=_note_fp_event):  # never raise inside MPI: noted, raised after
            ufunc(np.frombuffer(inbuf, dtype), inout, out=inout)

    return MPI.Op.Create(reduce_into, commute=True)


FP_EVENTS = ("divide", "over", "under", "invalid")
"""NumPy's floating-point error categories, in the order of the bits of :func:`fp_events_mask`."""
_fp_events: set[str] = set()


def _note_fp_event(message: str, flag: int) -> None:
    """NumPy's error callback inside a user-defined MPI op: remember the category (``overflow`` -> ``over``)."""
    for category in FP_EVENTS:
        if message.startswith(category):
            _fp_events.add(category)


def take_fp_events() -> int:
    """The floating-point events user-defined MPI ops met on this rank since the last call, as a bit mask."""
    mask = sum(1 << i for i, category in enumerate(FP_EVENTS) if category in _fp_events)
    _fp_events.clear()
    return mask


def raise_fp_events(mask: int, what: str) -> None:
    """Do what ``np.geterr()`` says for the floating-point events in ``mask`` (raise, warn, call or ignore).

    Example:
        >>> with np.errstate(over="raise"):
        ...     raise_fp_events(0b0010, "all_reduce max of float16")
        Traceback (most recent call last):
        ...
        FloatingPointError: overflow encountered in all_reduce max of float16
    """
    modes = np.geterr()
    names = {"divide": "divide by zero", "over": "overflow", "under": "underflow", "invalid": "invalid value"}
    for i, category in enumerate(FP_EVENTS):
        if not mask & (1 << i):
            continue
        mode = modes[category]
        text = f"{names[category]} encountered in {what}"
        if mode == "raise":
            raise FloatingPointError(text)
        if mode == "warn":
            import warnings

            warnings.warn(text, RuntimeWarning, stacklevel=3)
        elif mode == "call":
            callback = np.geterrcall()
            if callback is not None:
                callback(text, 1 << i)
