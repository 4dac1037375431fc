"""Selecting and placing: ``choose``, ``select``, ``compress``, ``extract``, ``place``, ``put``,
``put_along_axis``, ``putmask``, ``fill_diagonal``, ``partition``, ``argpartition``, ``lexsort``,
``piecewise``, ``apply_along_axis``, ``isin``, ``setdiff1d``, ``intersect1d``, ``union1d``, ``setxor1d``,
``ravel_multi_index``, ``unravel_index`` (and the cases of ``take`` and ``take_along_axis``, which have rules;
``sort_complex``, ``apply_over_axes`` and ``ix_``: :mod:`.elementwise`, :mod:`.metadata`,
:mod:`.ndarray_methods`).

What moves where (on a sharded operand dim; none of them communicates along a dim it does not work along,
except where said):

* elementwise, no communication: ``choose``, ``select``, ``isin`` (a DTensor ``test_elements`` is gathered: its
  bytes only), ``ravel_multi_index`` and ``unravel_index`` (``mode="raise"``: one ``all_reduce`` of a bool, the
  bounds check).  ``choose(mode="raise")`` takes the same one ``all_reduce``.
* in place, through the view model (the first argument, a DTensor, rebound with ``a[...] = new``, so a view
  writes through to its base; anything else is refused with a TypeError naming it): ``place`` (one scan of the
  mask, ``cumsum``'s rule: an ``exscan``; the flattening ``ravel``'s rule), ``put`` and ``fill_diagonal``
  (static positions: every rank writes its own elements, no communication; a DTensor ``ind``/``v``/``val`` is
  gathered, its bytes only), ``put_along_axis`` (``indices``/``values`` whole along ``axis``: gathered over a
  sharded ``axis``, their bytes only; ``arr`` never moves), ``putmask`` (elementwise; cycled values are made
  where they land).
* data-dependent (eager only): ``compress`` and ``extract`` select rows like ``x[mask]`` (along a sharded axis one
  ``exchange`` or ``rechunk`` of the kept rows that change owner; a DTensor condition that is not lined up
  with the array is gathered, its bytes only); ``setdiff1d``, ``intersect1d``, ``union1d``, ``setxor1d`` take the
  distinct values of each block, then one ``all_gather`` of those (:func:`~dtensor_np.propagation.placing.
  distinct`), and compute on the replicated results (``assume_unique=True`` and ``return_indices=True`` gather the
  arrays, whose order NumPy's result keeps); ``piecewise`` selects ``x[cond]`` and writes each function's values
  back where they came from (one ``rechunk`` each way where only the first dim is sharded; else the condition and
  the values are gathered, their bytes only).
* ``partition``/``argpartition``: local along an unsharded axis; along a sharded one the ``sort`` rule's move
  (one ``all_to_all``, NumPy's exact result), or, for a 1-d array, a distributed selection (no gather).
  ``lexsort``: the ``sort`` rule's whole axes.
* ``apply_along_axis``: along an unsharded axis local; a sharded axis is made whole first by a redistribute (one
  ``all_to_all``; an ``all_gather`` when no other dim can take the sharding); the rank holding the first slice
  tells every rank the result's shape and dtype (an uncounted ``gather_descriptors``).

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> a = dt.distribute_tensor(np.zeros(5), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> v = a[1:4]
    >>> with dt.comm_counter() as c:
    ...     np.put(v, [0, 2], [7.0, 8.0])      # writes through the view into a
    >>> a.full_tensor().tolist(), c.total
    ([0.0, 7.0, 0.0, 8.0, 0.0], 0)
"""

from __future__ import annotations

import collections.abc
from typing import Any, Callable, Sequence

import numpy as np
from numpy.lib.array_utils import normalize_axis_index

from ..numpy_catalogue import Case, Refused
from ..propagation.placing import (Callback, apply_blocks, cycled, described, distinct, first_result,
                                   isin_elements, lexsort_keys, lookup, partition_along, put_along, scatter_masked,
                                   whole_along)
from ..propagation.registry import register_composite
from ..propagation.reorder import DATA_DEPENDENT_SHAPE
from .reshaping import as_array, cast, is_array, static

__all__ = ["CASES", "REFUSED", "choose", "select", "compress", "extract", "place", "put", "put_along_axis",
           "putmask", "fill_diagonal", "partition", "argpartition", "lexsort", "piecewise",
           "apply_along_axis", "isin", "setdiff1d", "intersect1d", "union1d", "setxor1d", "ravel_multi_index",
           "unravel_index"]


def _target(a: Any, name: str, argname: str) -> Any:
    """The array an in-place function writes into: a DTensor (a TypeError naming anything else)."""
    if not (is_array(a) and hasattr(a, "_rebind")):
        raise TypeError(f"numpy.{name}: {argname} must be a DTensor to write into in place, got "
                        f"{type(a).__name__}; call numpy.{name} on a NumPy array, or distribute it first")
    return a


def _write(a: Any, value: Any) -> None:
    """``a[...] = value``: ``a`` rebound (through its base for a view)."""
    a[...] = value


def _dtype_of(x: Any) -> Any:
    """What ``np.result_type`` takes for ``x``: a DTensor's dtype, a Python scalar as it is (weak), else an array."""
    if is_array(x):
        return x.dtype
    return x if type(x) in (int, float, complex, bool) else np.asarray(x)


def _probe(x: Any) -> Any:
    """A one-element stand-in of ``x`` for NumPy to work a result's dtype out on (Python scalars kept)."""
    if type(x) in (int, float, complex, bool):
        return x
    return np.zeros((), x.dtype if is_array(x) else np.asarray(x).dtype)


# -- choose / select -------------------------------------------------------------------------------------------
@register_composite(np.choose)
def choose(a: Any, choices: Any, out: Any = None, mode: str = "raise") -> Any:
    """``np.choose``: ``choices[a[i]][i]`` elementwise, by ``np.where`` over the choices (no communication; with
    ``mode="raise"`` one ``all_reduce`` of a bool checks ``a``; a DTensor ``choices`` sharded along its first dim
    broadcasts each choice from its owner).

    Example:
        >>> import dtensor_np as dt
        >>> a = dt.distribute_tensor(np.array([0, 1, 1, 0]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.choose(a, [[1, 2, 3, 4], [10, 20, 30, 40]]).full_tensor().tolist()
        [1, 20, 30, 4]
    """
    a = as_array(a)
    items = [choices[i] for i in range(len(choices))] if is_array(choices) else list(choices)
    items = [c if type(c) in (int, float, complex, bool) else as_array(c) for c in items]
    dtype = np.choose(np.zeros((), a.dtype), [_probe(c) for c in items], mode=mode).dtype  # NumPy's checks, dtype
    n = len(items)
    if mode == "raise":
        if bool(np.any((a < 0) | (a >= n))):
            raise ValueError("invalid entry in choice array")
    elif mode == "wrap":
        a = np.mod(a, n)
    else:
        a = np.clip(a, 0, n - 1)
    result = np.where(a == n - 1, items[-1], items[-1])
    for j in range(n - 2, -1, -1):
        result = np.where(a == j, items[j], result)
    result = cast(result, dtype)
    if out is not None:
        _write(_target(out, "choose", "out"), result)
        return out
    return result


@register_composite(np.select)
def select(condlist: Sequence[Any], choicelist: Sequence[Any], default: Any = 0) -> Any:
    """``np.select``: the first choice whose condition holds, elementwise (``np.where`` from the last; no
    communication).

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.arange(6.0), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.select([x < 2, x > 3], [x, x ** 2], default=-1.0).full_tensor().tolist()
        [0.0, 1.0, -1.0, -1.0, 16.0, 25.0]
    """
    if len(condlist) != len(choicelist):
        raise ValueError("list of cases must be same length as list of conditions")
    if len(condlist) == 0:
        raise ValueError("select with an empty condition list is not possible")
    choices = [c if type(c) in (int, float, complex) else as_array(c) for c in choicelist]
    default = default if type(default) in (int, float, complex) else as_array(default)
    try:
        dtype = np.result_type(*[_dtype_of(c) for c in choices + [default]])
    except TypeError as e:
        raise TypeError(f"Choicelist and default value do not have a common dtype: {e}") from None
    conds = [as_array(c) for c in condlist]
    for i, cond in enumerate(conds):
        if cond.dtype.type is not np.bool_:
            raise TypeError(f"invalid entry {i} in condlist: should be boolean ndarray")
    result = default
    for cond, choice in zip(conds[::-1], choices[::-1]):
        result = np.where(cond, choice, result)
    return cast(result, dtype)


# -- compress / extract ------------------------------------------------------------------------------------------
def _positions(condition: Any) -> Any:
    """The flat positions where ``condition`` is nonzero: a replicated DTensor (``flatnonzero``'s rule gathers a
    DTensor condition, its bytes only) or a NumPy array."""
    if is_array(condition):
        return np.flatnonzero(condition)
    return np.flatnonzero(np.asarray(condition))


def _check_positions(positions: Any, n: int, axis: int) -> None:
    if positions.shape[0] and int(positions[-1]) >= n:
        raise IndexError(f"index {int(positions[-1])} is out of bounds for axis {axis} with size {n}")


@register_composite(np.compress)
def compress(condition: Any, a: Any, axis: Any = None, out: Any = None) -> Any:
    """``np.compress``: the rows along ``axis`` where ``condition`` (1-d) holds (the flattened array when None).

    Data-dependent: eager only.  A DTensor ``condition`` is gathered (``flatnonzero``: its bytes only); the rows
    move like ``np.take`` (along a sharded axis one ``exchange`` of the kept rows that change owner).

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.arange(6.0).reshape(3, 2), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.compress([True, False, True], x, axis=0).full_tensor().tolist()
        [[0.0, 1.0], [4.0, 5.0]]
    """
    a = as_array(a)
    if np.ndim(condition) != 1:
        raise ValueError("condition must be a 1-d array")
    if axis is None:
        a, axis = np.ravel(a), 0
    axis = normalize_axis_index(axis, a.ndim)
    positions = _positions(condition)
    _check_positions(positions, a.shape[axis], axis)
    result = np.take(a, positions, axis=axis)
    if out is not None:
        _write(_target(out, "compress", "out"), result)
        return out
    return result


@register_composite(np.extract)
def extract(condition: Any, arr: Any) -> Any:
    """``np.extract``: the elements of ``arr`` where ``condition`` is nonzero, in C order (1-d).

    Data-dependent: eager only.  A DTensor ``condition`` of ``arr``'s shape selects like ``arr[condition]`` (every
    rank selects from its own block; one ``rechunk`` of the selected elements that change owner; a condition
    sharded on an inner dim is gathered first, its bytes only); any other condition like ``np.take`` of its flat
    positions.

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.arange(6.0), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.extract(np.mod(x, 2) == 0, x).full_tensor().tolist()
        [0.0, 2.0, 4.0]
    """
    _eager("extract", condition)
    arr = as_array(arr)
    if is_array(condition) and tuple(condition.shape) == tuple(arr.shape) and arr.ndim:
        return arr[condition if condition.dtype == bool else condition != 0]
    flat = np.ravel(arr)
    positions = _positions(np.ravel(as_array(condition)))
    _check_positions(positions, flat.shape[0], 0)
    return np.take(flat, positions, axis=0)


# -- in place: place, put, put_along_axis, putmask, fill_diagonal ----------------------------------------------
def _mask_of(a: Any, mask: Any, name: str) -> Any:
    """``mask`` as a boolean array of ``a``'s shape (NumPy's ``place``/``putmask`` take any mask of ``a``'s size)."""
    mask = as_array(mask)
    if mask.size != a.size:
        raise ValueError(f"{name}: mask and data must be the same size")
    if mask.shape != a.shape:
        mask = np.reshape(mask, a.shape)
    return mask if mask.dtype == bool else mask != 0


@register_composite(np.place)
def place(arr: Any, mask: Any, vals: Any) -> None:
    """``np.place``: the ``k``-th element where ``mask`` holds (C order) set to ``vals[k % len(vals)]``, in place.

    One scan of the flattened mask (``cumsum``'s rule: an ``exscan`` along a sharded dim; the flattening is
    ``ravel``'s rule) numbers the elements; the values are looked up where they land (a DTensor ``vals`` is
    gathered, its bytes only).  ``arr`` is rebound (a view writes through to its base).

    Example:
        >>> import dtensor_np as dt
        >>> a = dt.distribute_tensor(np.arange(6), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.place(a, a > 2, [40, 50])
        >>> a.full_tensor().tolist()
        [0, 1, 2, 40, 50, 40]
    """
    arr = _target(arr, "place", "arr")
    mask = _mask_of(arr, mask, "place")
    values = np.asarray(static(vals)).ravel()
    if values.size == 0:
        if bool(np.any(mask)):
            raise ValueError("Cannot insert from an empty array!")
        return
    values = values.astype(arr.dtype)
    if values.size == 1:
        new = values[0]
    else:
        number = np.cumsum(np.ravel(mask), dtype=np.intp) - 1
        new = np.reshape(lookup(values, np.mod(number, values.size)), arr.shape)
    _write(arr, np.where(mask, new, arr))


def _flat_values(values: Any, dtype: Any) -> np.ndarray:
    return np.asarray(static(values)).ravel().astype(dtype)


@register_composite(np.put)
def put(a: Any, ind: Any, v: Any, mode: str = "raise") -> None:
    """``np.put``: ``a.flat[ind] = v`` (``v`` repeated to ``len(ind)``; the last of repeated indices wins), in place.

    Static positions: every rank writes the elements of its own block, no communication (a DTensor ``ind`` or
    ``v`` is gathered, its bytes only).  ``a`` is rebound (a view writes through to its base).

    Example:
        >>> import dtensor_np as dt
        >>> a = dt.distribute_tensor(np.zeros((2, 3)), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.put(a, [0, 5], [1.0, 2.0])
        >>> a.full_tensor().tolist()
        [[1.0, 0.0, 0.0], [0.0, 0.0, 2.0]]
    """
    a = _target(a, "put", "a")
    if mode not in ("raise", "wrap", "clip"):
        np.put(np.zeros(1), [0], [0], mode=mode)  # NumPy's error
    index = np.asarray(static(ind)).ravel()
    if index.dtype.kind not in "iu":
        index = index.astype(np.intp, casting="same_kind" if index.dtype.kind != "f" else "unsafe")
    values = _flat_values(v, a.dtype)
    if index.size == 0 or values.size == 0:
        return
    n = a.size
    if mode == "raise":
        bad = (index < -n) | (index >= n)
        if bad.any():
            raise IndexError(f"index {int(index[bad][0])} is out of bounds for axis 0 with size {n}")
        index = np.where(index < 0, index + n, index)
    elif mode == "wrap":
        index = np.mod(index, n) if n else index
    else:
        index = np.clip(index, 0, n - 1)
    _write_at(a, index, np.resize(values, index.size))


def _write_at(a: Any, flat: np.ndarray, values: np.ndarray) -> None:
    """``a.flat[flat] = values`` (static positions and values: every rank writes its own elements)."""
    a[np.unravel_index(flat, a.shape)] = values


@register_composite(np.put_along_axis)
def put_along_axis(arr: Any, indices: Any, values: Any, axis: Any) -> None:
    """``np.put_along_axis``: in place; ``indices`` and ``values`` broadcast as NumPy does.

    ``arr`` never moves: every rank writes its own block; ``indices`` and ``values`` are placed like ``arr`` on the
    other dims and whole along ``axis`` (gathered over a sharded ``axis``: their bytes only).  ``axis=None`` is
    ``np.put`` of the flattened array.  ``arr`` is rebound (a view writes through to its base).

    Example:
        >>> import dtensor_np as dt
        >>> a = dt.distribute_tensor(np.zeros((4, 3)), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.put_along_axis(a, np.array([[0], [1], [2], [0]]), 9.0, axis=1)
        >>> a.full_tensor().tolist()
        [[9.0, 0.0, 0.0], [0.0, 9.0, 0.0], [0.0, 0.0, 9.0], [9.0, 0.0, 0.0]]
    """
    arr = _target(arr, "put_along_axis", "arr")
    indices = as_array(indices)
    if axis is None:
        if indices.ndim != 1:
            raise ValueError("when axis=None, `indices` must have a single dimension.")
        if indices.dtype.kind not in "iu":
            raise IndexError("`indices` must be an integer array")
        index = np.asarray(static(indices))
        values = np.broadcast_to(_flat_values(values, arr.dtype), index.shape)
        n = arr.size
        bad = (index < -n) | (index >= n)
        if bad.any():
            raise IndexError(f"index {int(index[bad][0])} is out of bounds for axis 0 with size {n}")
        _write_at(arr, np.where(index < 0, index + n, index), values)
        return
    axis = normalize_axis_index(axis, arr.ndim)
    if indices.dtype.kind not in "iu":
        raise IndexError("`indices` must be an integer array")
    if arr.ndim != indices.ndim:
        raise ValueError("`indices` and `arr` must have the same number of dimensions")
    np.broadcast_shapes(tuple(s if d != axis else 1 for d, s in enumerate(arr.shape)), tuple(indices.shape))
    shape = tuple(arr.shape[d] if d != axis else indices.shape[axis] for d in range(arr.ndim))
    indices = np.broadcast_to(indices, shape)
    if is_array(values):
        values = np.broadcast_to(cast(values, arr.dtype), shape)
    elif np.ndim(values) == 0:
        values = np.asarray(values).astype(arr.dtype)[()]
    else:
        values = np.broadcast_to(np.asarray(values).astype(arr.dtype), shape)
    _write(arr, put_along(arr, indices, values, axis=axis))


@register_composite(np.putmask)
def putmask(a: Any, mask: Any, values: Any) -> None:
    """``np.putmask``: ``a.flat[n] = values[n % len(values)]`` where ``mask.flat[n]``, in place.

    Elementwise, no communication: cycled values are made where they land (a DTensor ``values`` of ``a``'s size
    is used as it is; any other DTensor ``values`` is gathered, its bytes only).  ``a`` is rebound (a view writes
    through to its base).

    Example:
        >>> import dtensor_np as dt
        >>> a = dt.distribute_tensor(np.arange(6.0), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.putmask(a, a > 3, [-1.0, -2.0])
        >>> a.full_tensor().tolist()
        [0.0, 1.0, 2.0, 3.0, -1.0, -2.0]
    """
    a = _target(a, "putmask", "a")
    mask = _mask_of(a, mask, "putmask")
    if is_array(values) and values.size == a.size:
        new = cast(np.reshape(values, a.shape) if values.shape != a.shape else values, a.dtype)
    else:
        table = np.asarray(static(values)).ravel().astype(a.dtype)
        if table.size == 0:
            if a.size:
                raise ValueError("putmask: values must not be empty")  # NumPy does nothing: refused, not silent
            return
        new = table[0] if table.size == 1 else cycled(table, a)
    _write(a, np.where(mask, new, a))


@register_composite(np.fill_diagonal)
def fill_diagonal(a: Any, val: Any, wrap: bool = False) -> None:
    """``np.fill_diagonal``: the main diagonal (``wrap``: repeated every ``ncols + 1`` rows of a tall matrix) set to
    ``val`` (repeated along it), in place.

    Static positions: every rank writes the diagonal elements of its own block, no communication (a DTensor ``val``
    is gathered, its bytes only).  ``a`` is rebound (a view writes through to its base).

    Example:
        >>> import dtensor_np as dt
        >>> a = dt.distribute_tensor(np.zeros((3, 3)), dt.DeviceMesh((2,)), [dt.Shard(1)])
        >>> np.fill_diagonal(a, [1.0, 2.0])
        >>> a.full_tensor().tolist()
        [[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 1.0]]
    """
    a = _target(a, "fill_diagonal", "a")
    if a.ndim < 2:
        raise ValueError("array must be at least 2-d")
    end = None
    if a.ndim == 2:
        step = a.shape[1] + 1
        if not wrap:
            end = a.shape[1] * a.shape[1]
    else:
        if not np.all(np.diff(a.shape) == 0):
            raise ValueError("All dimensions of input must be of equal length")
        step = 1 + int(np.cumprod(a.shape[:-1]).sum())
    flat = np.arange(0, a.size if end is None else min(end, a.size), step, dtype=np.intp)
    values = _flat_values(val, a.dtype)
    if flat.size and values.size:
        _write_at(a, flat, np.resize(values, flat.size))


# -- ordering: partition, argpartition, lexsort -----------------------------------------------------------
def _partition(a: Any, kth: Any, axis: Any, kind: str, order: Any, arg: bool) -> Any:
    if order is not None:
        raise ValueError("Cannot specify order when the array has no fields.")
    if kind != "introselect":
        raise ValueError(f"select kind must be 'introselect' (got {kind!r})")
    a = as_array(a)
    kth = static(kth)
    if axis is None:
        a, axis = np.ravel(a), 0
    if a.ndim == 0:
        raise np.exceptions.AxisError(axis, 0)
    return partition_along(a, kth=kth, axis=normalize_axis_index(axis, a.ndim), arg=arg)


@register_composite(np.partition)
def partition(a: Any, kth: Any, axis: Any = -1, kind: str = "introselect", order: Any = None) -> Any:
    """``np.partition``: along an unsharded axis each rank partitions its block (NumPy's own result); along a
    sharded axis the ``sort`` rule's move (one ``all_to_all``), or, for a 1-d array, a distributed selection that
    moves the elements that change owner (a valid partition: the ``kth`` elements in place, smaller before, larger
    after; NumPy leaves the order inside each part undefined, and this one may differ from NumPy's).

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([[3, 1, 2], [9, 7, 8]]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.partition(x, 1, axis=1).full_tensor()[:, 1].tolist()
        [2, 8]
    """
    return _partition(a, kth, axis, kind, order, False)


@register_composite(np.argpartition)
def argpartition(a: Any, kth: Any, axis: Any = -1, kind: str = "introselect", order: Any = None) -> Any:
    """``np.argpartition``: the indices of :func:`partition`'s result, with its collectives.

    Example:
        >>> import dtensor_np as dt
        >>> i = np.argpartition(dt.distribute_tensor(np.array([3, 1, 2, 0]), dt.DeviceMesh((2,)), [dt.Shard(0)]), 1)
        >>> sorted(i.full_tensor()[:2].tolist())
        [1, 3]
    """
    return _partition(a, kth, axis, kind, order, True)


@register_composite(np.lexsort)
def lexsort(keys: Any, axis: int = -1) -> Any:
    """``np.lexsort``: the last key sorts first; the ``sort`` rule's whole axes (one ``all_to_all`` per key along a
    sharded axis, an ``all_gather`` per key when no other dim can take the sharding).

    Example:
        >>> import dtensor_np as dt
        >>> k = dt.distribute_tensor(np.array([[1, 0, 1, 0], [2, 2, 1, 1]]), dt.DeviceMesh((2,)), [dt.Shard(1)])
        >>> np.lexsort(k).full_tensor().tolist()
        [3, 2, 1, 0]
    """
    items = [keys[i] for i in range(keys.shape[0])] if is_array(keys) and keys.ndim > 1 else list(keys)
    if not items:
        raise TypeError("need sequence of keys with len > 0 in lexsort")
    return lexsort_keys(*[as_array(k) for k in items], axis=axis)


# -- functions applied: piecewise, apply_along_axis --------------------------------------------------------
@register_composite(np.piecewise)
def piecewise(x: Any, condlist: Any, funclist: Sequence[Any], *args: Any, **kw: Any) -> Any:
    """``np.piecewise``: NumPy's algorithm: ``y[cond] = f(x[cond])`` for each condition.

    Where ``x`` shards only its first dim: ``x[cond]`` selects without a gather (each rank its own elements, one
    ``rechunk`` of those that change owner), and a function's values move back the same way (one ``rechunk``:
    :func:`~dtensor_np.propagation.placing.scatter_masked`); a value that is not callable is written where the
    condition holds on every rank (no communication).  Where ``x`` shards another dim, the condition and the
    values are gathered (their bytes, never ``x``'s).

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.arange(-2.0, 3.0), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.piecewise(x, [x < 0, x >= 0], [-1.0, lambda v: v * 10]).full_tensor().tolist()
        [-1.0, -1.0, 0.0, 10.0, 20.0]
    """
    x = as_array(x)
    n2 = len(funclist)
    if np.isscalar(condlist) or (is_array(condlist) and condlist.ndim == 0) or (
            not isinstance(condlist[0], (list, np.ndarray)) and not is_array(condlist[0]) and x.ndim != 0):
        condlist = [condlist]
    if is_array(condlist) and condlist.ndim == x.ndim:
        condlist = [condlist]
    conds = [as_array(c, bool) for c in condlist]
    n = len(conds)
    if n == n2 - 1:
        other = conds[0]
        for c in conds[1:]:
            other = np.logical_or(other, c)
        conds.append(np.logical_not(other))
        n += 1
    elif n != n2:
        raise ValueError(f"with {n} condition(s), either {n} or {n + 1} functions are expected")
    y = np.zeros_like(x)
    for cond, func in zip(conds, funclist):
        if not isinstance(func, collections.abc.Callable):
            y[cond] = func
        else:
            vals = x[cond]
            if vals.size > 0:
                values = func(vals, *args, **kw)
                if is_array(values) and values.ndim == 1 and values.shape[0] == vals.shape[0] and is_array(cond):
                    y = scatter_masked(y, cond, cast(values, y.dtype))
                else:
                    y[cond] = values
    return y


@register_composite(np.apply_along_axis)
def apply_along_axis(func1d: Callable[..., Any], axis: int, arr: Any, *args: Any, **kwargs: Any) -> Any:
    """``np.apply_along_axis``: ``func1d`` on every 1-d slice along ``axis`` (NumPy arrays), on the rank holding it.

    Along an unsharded axis no communication but an uncounted ``gather_descriptors`` (the rank holding the first
    slice tells the others the result's shape and dtype; ``func1d`` runs twice on that slice).  A sharded axis is
    made whole first by a redistribute: its sharding moves to another dim (one ``all_to_all``), or, with no dim to
    take it, it is gathered (one ``all_gather``).  Eager only (``func1d`` runs on values).

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.arange(6.0).reshape(3, 2), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.apply_along_axis(lambda v: v[::-1] * 2, 1, x).full_tensor().tolist()
        [[2.0, 0.0], [6.0, 4.0], [10.0, 8.0]]
    """
    arr = as_array(arr)
    axis = normalize_axis_index(axis, arr.ndim)
    if any(s == 0 for d, s in enumerate(arr.shape) if d != axis):
        raise ValueError("Cannot apply_along_axis when any iteration dimensions are 0")
    if not hasattr(arr, "full_tensor"):
        raise TypeError("numpy.apply_along_axis runs a Python function on values: call it eagerly, outside dt.trace")
    func = Callback(func1d, args, kwargs)
    whole = whole_along(arr, axis=axis)
    meta = described(first_result(whole, axis=axis, func=func).full_tensor())
    return apply_blocks(whole, axis=axis, func=func, meta=meta)


# -- membership and sets ---------------------------------------------------------------------------------------
@register_composite(np.isin)
def isin(element: Any, test_elements: Any, assume_unique: bool = False, invert: bool = False, *,
         kind: Any = None) -> Any:
    """``np.isin``: elementwise on ``element``'s blocks (no communication); ``test_elements`` whole on every rank (a
    DTensor one is gathered: its bytes only).

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.arange(6), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.isin(x, [1, 4, 7]).full_tensor().tolist()
        [False, True, False, False, True, False]
    """
    element = as_array(element)
    if not is_array(element) and element.ndim == 0:
        return isin_elements(element.reshape(1), test_elements, assume_unique, invert, kind=kind)[0]
    test = test_elements if is_array(test_elements) else np.asarray(test_elements)
    if not is_array(test) and test.ndim == 0:
        test = test.reshape(1)
    return isin_elements(element, test, assume_unique, invert, kind=kind)


def _eager(name: str, *arrays: Any) -> None:
    """A TypeError under ``dt.trace``: the result's length comes from the values (as ``unique``'s)."""
    if any(is_array(a) and not hasattr(a, "full_tensor") for a in arrays):
        raise TypeError(DATA_DEPENDENT_SHAPE.format(name=name))


def _flat(a: Any) -> Any:
    return np.ravel(as_array(a))


@register_composite(np.union1d)
def union1d(ar1: Any, ar2: Any) -> Any:
    """``np.union1d``: the sorted distinct values of both arrays: each array's blocks' distinct values, one
    ``all_gather`` each, then local work on the replicated values.

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([3, 1, 3, 2]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.union1d(x, [5, 1]).full_tensor().tolist()
        [1, 2, 3, 5]
    """
    _eager("union1d", ar1, ar2)
    return distinct(np.concatenate([distinct(as_array(ar1)), distinct(as_array(ar2))]))


@register_composite(np.intersect1d)
def intersect1d(ar1: Any, ar2: Any, assume_unique: bool = False, return_indices: bool = False) -> Any:
    """``np.intersect1d``: NumPy's algorithm on the distinct values (each block's, one ``all_gather`` per array);
    ``assume_unique`` or ``return_indices`` gather the arrays (NumPy's positions).

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([3, 1, 3, 2]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.intersect1d(x, [2, 3, 7]).full_tensor().tolist()
        [2, 3]
    """
    _eager("intersect1d", ar1, ar2)
    ar1, ar2 = as_array(ar1), as_array(ar2)
    if not assume_unique:
        if return_indices:
            ar1, ind1 = np.unique(ar1, return_index=True)
            ar2, ind2 = np.unique(ar2, return_index=True)
        else:
            ar1, ar2 = distinct(ar1), distinct(ar2)
    else:
        ar1, ar2 = _whole_flat(ar1), _whole_flat(ar2)
    aux = np.concatenate([ar1, ar2])
    if return_indices:
        order = np.argsort(aux, kind="mergesort")
        aux = aux[order]
    else:
        aux = np.sort(aux)
    mask = aux[1:] == aux[:-1]
    int1d = aux[:-1][mask]
    if not return_indices:
        return int1d
    ar1_indices = order[:-1][mask]
    ar2_indices = order[1:][mask] - ar1.size
    if not assume_unique:
        ar1_indices = _index(ind1, ar1_indices)
        ar2_indices = _index(ind2, ar2_indices)
    return int1d, ar1_indices, ar2_indices


def _index(table: Any, indices: Any) -> Any:
    """``table[indices]``: a NumPy ``table`` looked up by DTensor ``indices`` where they are (no gather)."""
    return lookup(table, indices) if is_array(indices) and not is_array(table) else table[indices]


def _whole_flat(a: Any) -> Any:
    """The flattened array, whole on every rank (NumPy's ``assume_unique`` paths keep positions: gathered)."""
    flat = _flat(a)
    return whole_along(flat, axis=0) if is_array(flat) else flat


@register_composite(np.setdiff1d)
def setdiff1d(ar1: Any, ar2: Any, assume_unique: bool = False) -> Any:
    """``np.setdiff1d``: the distinct values of ``ar1`` not in ``ar2`` (each block's distinct values, one
    ``all_gather`` per array); with ``assume_unique`` ``ar1`` keeps its order and sharding (``isin`` against
    ``ar2``'s values, then ``ar1[mask]``: the kept elements that change owner move, one ``rechunk``).

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([5, 1, 3, 1]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.setdiff1d(x, [3]).full_tensor().tolist()
        [1, 5]
    """
    _eager("setdiff1d", ar1, ar2)
    ar1 = _flat(ar1) if assume_unique else distinct(as_array(ar1))
    ar2 = as_array(ar2)
    ar2 = distinct(ar2) if not assume_unique and is_array(ar2) else ar2
    return ar1[isin(ar1, ar2, assume_unique=True, invert=True)]


@register_composite(np.setxor1d)
def setxor1d(ar1: Any, ar2: Any, assume_unique: bool = False) -> Any:
    """``np.setxor1d``: the values in exactly one of the arrays, sorted: NumPy's algorithm on the distinct values
    (each block's, one ``all_gather`` per array; ``assume_unique`` gathers the arrays).

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([1, 2, 3, 2]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.setxor1d(x, [3, 4]).full_tensor().tolist()
        [1, 2, 4]
    """
    _eager("setxor1d", ar1, ar2)
    if assume_unique:
        ar1, ar2 = _whole_flat(ar1), _whole_flat(ar2)
    else:
        ar1, ar2 = distinct(as_array(ar1)), distinct(as_array(ar2))
    aux = np.concatenate([ar1, ar2])
    if aux.size == 0:
        return aux
    aux = np.sort(aux)
    flag = np.concatenate([[True], aux[1:] != aux[:-1], [True]])
    return aux[flag[1:] & flag[:-1]]


# -- index helpers: ravel_multi_index, unravel_index ------------------------------------------------------------
def _index_dtype_check(arrays: Sequence[Any]) -> None:
    for a in arrays:
        if a.dtype.kind not in "iu":
            raise TypeError("only int indices permitted")


@register_composite(np.ravel_multi_index)
def ravel_multi_index(multi_index: Sequence[Any], dims: Sequence[int], mode: Any = "raise", order: str = "C") -> Any:
    """``np.ravel_multi_index``: elementwise on the coordinate arrays (no communication; ``mode="raise"``: one
    ``all_reduce`` of a bool checks them).

    Example:
        >>> import dtensor_np as dt
        >>> i = dt.distribute_tensor(np.array([0, 1, 2]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.ravel_multi_index((i, [3, 0, 1]), (3, 4)).full_tensor().tolist()
        [3, 4, 9]
    """
    dims = (int(dims),) if np.ndim(dims) == 0 else tuple(int(d) for d in dims)
    if len(multi_index) != len(dims):
        raise ValueError(f"parameter multi_index must be a sequence of length {len(dims)}")
    modes = (mode,) * len(dims) if isinstance(mode, str) else tuple(mode)
    if len(modes) != len(dims) or any(m not in ("raise", "wrap", "clip") for m in modes):
        np.ravel_multi_index((0,) * len(dims), dims, mode=mode)  # NumPy's error
    if order not in ("C", "F"):
        raise ValueError("only 'C' or 'F' order is permitted")
    coords = [as_array(c) for c in multi_index]
    _index_dtype_check(coords)
    coords = [cast(c, np.intp) for c in coords]
    bad = None
    for d, (c, m, n) in enumerate(zip(coords, modes, dims)):
        if m == "raise":
            out_of_range = (c < 0) | (c >= n)
            bad = out_of_range if bad is None else bad | out_of_range
        elif m == "wrap":
            coords[d] = np.mod(c, n)
        else:
            coords[d] = np.clip(c, 0, n - 1)
    if bad is not None and bool(np.any(bad)):
        raise ValueError("invalid entry in coordinates array")
    sizes = dims[::-1] if order == "F" else dims
    ordered = coords[::-1] if order == "F" else coords
    flat = None
    for c, n in zip(ordered, sizes):
        flat = c if flat is None else flat * n + c
    return cast(flat, np.intp)


@register_composite(np.unravel_index)
def unravel_index(indices: Any, shape: Any, order: str = "C") -> tuple[Any, ...]:
    """``np.unravel_index``: elementwise on the flat indices (no communication but one ``all_reduce`` of a bool, the
    bounds check).

    Example:
        >>> import dtensor_np as dt
        >>> i = dt.distribute_tensor(np.array([3, 4, 9]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> [a.full_tensor().tolist() for a in np.unravel_index(i, (3, 4))]
        [[0, 1, 2], [3, 0, 1]]
    """
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(s) for s in shape)
    if order not in ("C", "F"):
        raise ValueError("only 'C' or 'F' order is permitted")
    indices = as_array(indices)
    _index_dtype_check([indices])
    indices = cast(indices, np.intp)
    size = int(np.prod(shape, dtype=np.int64))
    bad = (indices < 0) | (indices >= size)
    if bool(np.any(bad)):
        first = indices[bad] if indices.ndim else indices
        raise ValueError(f"index {int(np.ravel(first)[0])} is out of bounds for array with size {size}")
    out: list[Any] = [None] * len(shape)
    dims = range(len(shape) - 1, -1, -1) if order == "C" else range(len(shape))
    rest = indices
    for d in dims:
        out[d] = np.mod(rest, shape[d])
        rest = np.floor_divide(rest, shape[d])
    return tuple(out)


def _inplace(call: Callable[[Any], None]) -> Callable[[Any], Any]:
    """A case for an in-place function: called on a copy of ``x``, the copy is the result."""
    def run(x: Any) -> Any:
        y = x.copy()
        call(y)
        return y
    return run


def _through_view(call: Callable[[Any], None], index: Any = slice(1, None)) -> Callable[[Any], Any]:
    """A case writing through a view (``y[index]`` of a copy ``y`` of ``x``): the base ``y`` is the result."""
    def run(x: Any) -> Any:
        y = x.copy()
        call(y[index])
        return y
    return run


CASES = {
    "numpy.choose": Case(lambda x: np.choose(np.floor(x).astype(int), [x, -x, x * 2], mode="wrap"),
                         untouched=0, axis=None),
    "numpy.select": Case(lambda x: np.select([x < 1.5, x > 4.0], [x, x * 2], default=-1.0), untouched=0),
    "numpy.compress": Case(lambda x: np.compress([True, False, True, True, False], x, axis=0), untouched=1, axis=0),
    "numpy.extract": Case(lambda x: np.extract(np.mod(x * 4, 3) == 1, x), untouched=None, axis=0),
    "numpy.place": Case(_through_view(lambda v: np.place(v, v > 2.0, [-1.0, -2.0, -3.0])), untouched=None, axis=0),
    "numpy.put": Case(_through_view(lambda v: np.put(v, [0, 5, 15, -1, 5], [7.0, 8.0])), untouched=1, axis=0),
    "numpy.put_along_axis": Case(_inplace(lambda y: np.put_along_axis(
        y, np.array([[0], [3], [1], [2], [3]]), -5.0, axis=1)), untouched=0, axis=1),
    "numpy.putmask": Case(_through_view(lambda v: np.putmask(v, v > 2.0, [-1.0, -2.0, -3.0]),
                                        (slice(None), slice(1, None))), untouched=0),
    "numpy.fill_diagonal": Case(_inplace(lambda y: np.fill_diagonal(y, [9.0, 8.0], wrap=True)), untouched=0),
    "numpy.take: repeated indices": Case(lambda x: np.take(x, [4, 0, 0, 2], axis=0), untouched=1, axis=0),
    "numpy.take_along_axis: an argsort": Case(lambda x: np.take_along_axis(x, np.argsort(-x, axis=1), axis=1), untouched=0,
                                  axis=1),
    "numpy.partition": Case(lambda x: np.partition(x, (1, 3), axis=1), untouched=0, axis=1,
                            data=lambda shape: np.random.default_rng(1).permutation(20).reshape(shape)),
    "numpy.argpartition": Case(lambda x: np.argpartition(x, 2, axis=0), untouched=1, axis=0,
                               data=lambda shape: np.random.default_rng(2).permutation(20).reshape(shape)),
    "numpy.lexsort": Case(lambda x: np.lexsort((x[:, 0] % 1.0, np.floor(x[:, 1]))), untouched=None, axis=0),
    "numpy.piecewise": Case(lambda x: np.piecewise(x, [x < 2.0, x > 4.0], [0.5, lambda v: v * 3, -1.0]),
                            untouched=None, axis=0),
    "numpy.apply_along_axis": Case(lambda x: np.apply_along_axis(lambda v: v[::-1].cumsum(), 1, x), untouched=0,
                                   axis=1),
    "numpy.isin": Case(lambda x: np.isin(x, [0.5, 1.25, 3.0, 9.0]), untouched=0),
    "numpy.setdiff1d": Case(lambda x: np.setdiff1d(np.floor(x), [2.0, 3.0]), untouched=None, axis=0),
    "numpy.intersect1d": Case(lambda x: np.intersect1d(np.floor(x), [2.0, 3.0, 7.0]), untouched=None, axis=0),
    "numpy.union1d": Case(lambda x: np.union1d(np.floor(x), [2.5, 3.0]), untouched=None, axis=0),
    "numpy.setxor1d": Case(lambda x: np.setxor1d(np.floor(x), [2.0, 2.5]), untouched=None, axis=0),
    "numpy.ravel_multi_index": Case(lambda x: np.ravel_multi_index(
        (np.floor(x).astype(int), np.ones((5, 4), int)), (6, 2), mode="raise"), untouched=None, axis=0),
    "numpy.unravel_index": Case(lambda x: np.unravel_index(np.floor(x).astype(int), (2, 3)), untouched=None,
                                axis=0),
}

REFUSED: dict[str, Refused] = {}
"""Every name of this family takes DTensors."""
