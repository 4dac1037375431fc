"""Shapes and joining: ``append``, ``insert``, ``delete``, ``block``, ``pad``, ``resize``, ``fliplr``, ``flipud``,
``rot90``, ``rollaxis``, ``trim_zeros`` (and the cases of the ``split`` family, which :mod:`dtensor_np.views` runs).

What moves where:

* ``append``, ``insert``, ``delete``, ``block``, ``pad`` and ``resize`` lay rows out anew along one axis with
  :func:`~dtensor_np.propagation.row_maps.row_map`: no communication along an axis that is not sharded; along a
  sharded axis one ``exchange`` (an ``Alltoallv``, counted as ``all_to_all``) of the rows that change owner
  between the input's and the output's ``torch.chunk`` layouts, never a gather.  Inserted values, appended plain
  arrays and the constant rows of ``pad`` are replicated: they are made where they land.  ``pad`` issues one
  such exchange per padded sharded axis; ``reflect_type="odd"`` two more per reflection round (the reflected and
  the edge rows); ``linear_ramp`` moves the edge rows and takes one all_reduce of a bool (NumPy's linspace
  checks whether any step is zero, over the whole edge); the statistic modes slice the ``stat_length`` edge rows
  (a ``rechunk`` of those rows) and reduce them (``all_reduce``; ``median`` sorts them: the ``sort`` rule).
  ``axis=None`` (``append``, ``insert``, ``delete``) and ``resize`` flatten first: ``ravel``'s rule (a ``rechunk``
  when only the first dim is sharded; an inner sharded dim is gathered).
* ``fliplr``, ``flipud``, ``rot90``, ``rollaxis``: views, as NumPy's (``flip``/``transpose``/basic indexing of
  the view model); reading one along a sharded flipped axis moves the rows that change owner (``flip``'s rule).
* ``trim_zeros``: one ``all_reduce`` (min) of ``2 * ndim`` integers finds the ends, then NumPy's basic slice (a
  view; along a sharded axis the kept rows that change owner move, one ``rechunk``).

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.arange(6.0), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> with dt.comm_counter() as c:
    ...     y = np.pad(x, (0, 2), mode="wrap")      # the rows 0, 1 go to rank 1; rank 0's row 3 moves too
    >>> y.full_tensor().tolist(), c.counts["all_to_all"]
    ([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 0.0, 1.0], 1)
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
from numpy.lib.array_utils import normalize_axis_index, normalize_axis_tuple

from ..numpy_catalogue import Case
from ..propagation.registry import register_composite
from ..propagation.reorder import DATA_DEPENDENT_SHAPE
from ..propagation.row_maps import row_map

__all__ = ["CASES", "append", "insert", "delete", "block", "pad", "resize", "fliplr", "flipud", "rot90",
           "rollaxis", "trim_zeros", "concatenate_rows", "runs"]


def is_array(x: Any) -> bool:
    """A DTensor or a traced array (anything but an ndarray that takes part in ``__array_function__``)."""
    kind = type(x)
    return kind is not np.ndarray and hasattr(kind, "__array_function__") and hasattr(x, "shape")


def as_array(x: Any, dtype: Any = None) -> Any:
    """``x`` as it is when a DTensor (cast to ``dtype`` if given), else ``np.asarray(x, dtype)``."""
    if is_array(x):
        return x if dtype is None or x.dtype == np.dtype(dtype) else x.astype(dtype)
    return np.asarray(x, dtype=dtype)


def cast(x: Any, dtype: Any) -> Any:
    """``x`` in ``dtype`` (itself when it has it already): ``astype`` with NumPy's unsafe casting."""
    return x if x.dtype == np.dtype(dtype) else x.astype(dtype)


def static(x: Any) -> Any:
    """An index argument's value on the host: a DTensor's is gathered (``full_tensor``: the index's bytes)."""
    if is_array(x) and hasattr(x, "full_tensor"):
        full = x.full_tensor()
        return full.get() if hasattr(full, "get") and not isinstance(full, np.ndarray) else np.array(full)
    return x


def runs(rows: Any, pieces: Any = 0) -> tuple[tuple[int, int, int, int], ...]:
    """Source rows (of piece ``pieces``, or of ``pieces[j]`` for row ``j``), in output order, as :func:`row_map`
    segments of consecutive rows of one piece.

    Example:
        >>> runs(np.array([0, 1, 2, 5, 5, 4]))
        ((0, 0, 1, 3), (0, 5, 1, 1), (0, 5, 1, 1), (0, 4, 1, 1))
        >>> runs(np.array([0, 0, 1]), np.array([0, 1, 0]))
        ((0, 0, 1, 1), (1, 0, 1, 1), (0, 1, 1, 1))
    """
    rows = np.asarray(rows, np.intp).reshape(-1)
    if rows.size == 0:
        return ()
    pieces = np.broadcast_to(np.asarray(pieces, np.intp), rows.shape)
    cuts = np.flatnonzero((np.diff(rows) != 1) | (np.diff(pieces) != 0)) + 1
    starts = np.concatenate([[0], cuts]).astype(np.intp)
    ends = np.concatenate([cuts, [rows.size]]).astype(np.intp)
    return tuple((int(pieces[s]), int(rows[s]), 1, int(e - s)) for s, e in zip(starts, ends))


def concatenate_rows(arrays: Sequence[Any], axis: int = 0) -> Any:
    """NumPy's ``concatenate`` of ``arrays`` along ``axis`` without a gather: a sharded ``axis`` moves only the rows
    that change owner (one ``exchange``; :func:`~dtensor_np.propagation.row_maps.row_map`)."""
    arrays = [as_array(a) for a in arrays]
    if not arrays:
        raise ValueError("need at least one array to concatenate")
    if any(a.ndim == 0 for a in arrays):
        raise ValueError("zero-dimensional arrays cannot be concatenated")
    axis = normalize_axis_index(axis, arrays[0].ndim)
    segments = tuple((i, 0, 1, a.shape[axis]) for i, a in enumerate(arrays) if a.shape[axis])
    return row_map(*arrays, axis=axis, segments=segments)


# -- append / insert / delete ----------------------------------------------------------------------------
@register_composite(np.append)
def append(arr: Any, values: Any, axis: Optional[int] = None) -> Any:
    """``np.append``: ``concatenate`` of ``arr`` and ``values`` (both flattened when ``axis`` is None).

    Along a sharded axis one ``exchange`` of the rows that change owner (appended plain values are made where
    they land); none along an unsharded axis.

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.arange(4.0), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> with dt.comm_counter() as c:
        ...     y = np.append(x, [7.0, 8.0])
        >>> y.full_tensor().tolist(), c.counts["all_to_all"]
        ([0.0, 1.0, 2.0, 3.0, 7.0, 8.0], 1)
    """
    arr = as_array(arr)
    if axis is None:
        if arr.ndim != 1:
            arr = np.ravel(arr)
        values = np.ravel(as_array(values))
        axis = arr.ndim - 1
    return concatenate_rows((arr, values), axis=axis)


def _axis_of(arr: Any, axis: Any) -> tuple[Any, int]:
    """``arr`` flattened when ``axis`` is None, and the axis (NumPy's ``insert``/``delete``)."""
    if axis is None:
        if arr.ndim != 1:
            arr = np.ravel(arr)
        return arr, arr.ndim - 1
    return arr, normalize_axis_index(axis, arr.ndim)


def _block_shape(arr: Any, axis: int, rows: int) -> tuple[int, ...]:
    shape = list(arr.shape)
    shape[axis] = rows
    return tuple(shape)


@register_composite(np.insert)
def insert(arr: Any, obj: Any, values: Any, axis: Optional[int] = None) -> Any:
    """``np.insert``: ``values`` (cast to ``arr``'s dtype, broadcast as NumPy does) placed before the rows ``obj``
    names (an int, a slice, a sequence of ints or a boolean mask; a DTensor ``obj`` is gathered: its bytes only).

    Along a sharded axis one ``exchange``: the rows of ``arr`` that change owner move, the inserted rows (a
    replicated value) are made where they land; along an unsharded axis no communication.

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.arange(4.0), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.insert(x, [1, 3], [-1.0, -2.0]).full_tensor().tolist()
        [0.0, -1.0, 1.0, 2.0, -2.0, 3.0]
    """
    arr, axis = _axis_of(as_array(arr), axis)
    n = arr.shape[axis]
    obj = static(obj)
    if isinstance(obj, slice):
        indices = np.arange(*obj.indices(n), dtype=np.intp)
    else:
        indices = np.array(obj)
        if indices.dtype == bool:
            if indices.ndim != 1:
                raise ValueError("boolean array argument obj to insert must be one dimensional")
            indices = np.flatnonzero(indices)
        elif indices.ndim > 1:
            raise ValueError("index array argument obj to insert must be one dimensional or scalar")
    if indices.size == 1:
        index = indices.item()
        if index < -n or index > n:
            raise IndexError(f"index {obj} is out of bounds for axis {axis} with size {n}")
        if index < 0:
            index += n
        values = as_array(values, arr.dtype)
        if values.ndim < arr.ndim:
            values = values.reshape((1,) * (arr.ndim - values.ndim) + tuple(values.shape))
        if indices.ndim == 0:
            values = np.moveaxis(values, 0, axis)
        numnew = values.shape[axis]
        block = np.broadcast_to(values, _block_shape(arr, axis, numnew))
        segments = ((0, 0, 1, index), (1, 0, 1, numnew), (0, index, 1, n - index))
        return row_map(arr, block, axis=axis, segments=tuple(s for s in segments if s[3]))
    if indices.size == 0 and not isinstance(obj, np.ndarray):
        indices = indices.astype(np.intp)
    if indices.dtype.kind not in "iu":
        raise IndexError("arrays used as indices must be of integer (or boolean) type")
    indices = indices.astype(np.intp)
    indices[indices < 0] += n
    numnew = len(indices)
    order = indices.argsort(kind="mergesort")
    indices[order] += np.arange(numnew)
    old_mask = np.ones(n + numnew, dtype=bool)
    old_mask[indices] = False  # NumPy's IndexError for an index out of bounds
    piece = np.zeros(n + numnew, np.intp)
    rows = np.empty(n + numnew, np.intp)
    rows[old_mask] = np.arange(n)
    rows[indices] = np.arange(numnew)  # value row i lands at indices[i]
    piece[indices] = 1
    block = np.broadcast_to(as_array(values, arr.dtype), _block_shape(arr, axis, numnew))
    return row_map(arr, block, axis=axis, segments=runs(rows, piece))


@register_composite(np.delete)
def delete(arr: Any, obj: Any, axis: Optional[int] = None) -> Any:
    """``np.delete``: the rows ``obj`` does not name (an int, a slice, a sequence of ints or a boolean mask; a DTensor
    ``obj`` is gathered: its bytes only).

    Along a sharded axis one ``exchange`` of the kept rows that change owner; none along an unsharded axis.

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.arange(12.0).reshape(6, 2), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> with dt.comm_counter() as c:
        ...     y = np.delete(x, [0, 1], axis=0)
        >>> y.full_tensor()[:, 0].tolist(), c.counts["all_to_all"]
        ([4.0, 6.0, 8.0, 10.0], 1)
    """
    arr, axis = _axis_of(as_array(arr), axis)
    n = arr.shape[axis]
    obj = static(obj)
    if isinstance(obj, (int, np.integer)) and not isinstance(obj, (bool, np.bool_)):
        if obj < -n or obj >= n:
            raise IndexError(f"index {obj} is out of bounds for axis {axis} with size {n}")
    kept = np.delete(np.arange(n, dtype=np.intp), obj)
    return row_map(arr, axis=axis, segments=runs(kept))


# -- block ------------------------------------------------------------------------------------------------
def _format_index(index: Sequence[Any]) -> str:
    return "arrays" + "".join(f"[{i}]" for i in index)


def _depths(arrays: Any, parent: list[Any]) -> tuple[list[Any], int]:
    """NumPy's ``_block_check_depths_match``: the index of the first leaf (None at the end: an empty list) and the
    largest leaf ndim."""
    if type(arrays) is tuple:
        raise TypeError(f"{_format_index(parent)} is a tuple. Only lists can be used to arrange blocks, and np.block "
                        "does not allow implicit conversion from tuple to ndarray.")
    if type(arrays) is list and arrays:
        found = [_depths(a, parent + [i]) for i, a in enumerate(arrays)]
        first, ndim = found[0]
        for index, nd in found[1:]:
            ndim = max(ndim, nd)
            if len(index) != len(first):
                raise ValueError(f"List depths are mismatched. First element was at depth {len(first)}, but there "
                                 f"is an element at depth {len(index)} ({_format_index(index)})")
            if index[-1] is None:
                first = index
        return first, ndim
    if type(arrays) is list:
        return parent + [None], 0
    return parent, np.ndim(arrays) if not is_array(arrays) else arrays.ndim


def _at_least(a: Any, ndim: int) -> Any:
    if is_array(a):
        return a.reshape((1,) * (ndim - a.ndim) + tuple(a.shape)) if a.ndim < ndim else a
    return np.array(a, ndmin=ndim, copy=None)


def _block(arrays: Any, depth: int, list_ndim: int, result_ndim: int) -> Any:
    if depth < list_ndim:
        parts = [_block(a, depth + 1, list_ndim, result_ndim) for a in arrays]
        return concatenate_rows(parts, axis=result_ndim - (list_ndim - depth))
    return _at_least(arrays, result_ndim)


@register_composite(np.block)
def block(arrays: Any) -> Any:
    """``np.block``: nested lists of arrays joined innermost list along the last axis, outward along the axes before.

    Each join is :func:`concatenate_rows`: along a sharded axis one ``exchange`` of the rows that change owner.

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.eye(2), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.block([[x, np.zeros((2, 1))], [np.ones((1, 2)), np.ones((1, 1))]]).full_tensor().tolist()
        [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 1.0, 1.0]]
    """
    bottom, arr_ndim = _depths(arrays, [])
    if bottom and bottom[-1] is None:
        raise ValueError(f"List at {_format_index(bottom)} cannot be empty")
    list_ndim = len(bottom)
    result_ndim = max(arr_ndim, list_ndim)
    out = _block(arrays, 0, list_ndim, result_ndim)
    return np.copy(out) if list_ndim == 0 else out


# -- pad ---------------------------------------------------------------------------------------------------
def _as_pairs(x: Any, ndim: int, as_index: bool = False) -> list:
    """NumPy's ``_as_pairs``: ``x`` broadcast to ``(ndim, 2)`` (rounded to ints, checked non-negative, for widths)."""
    if x is None:
        return [(None, None)] * ndim
    x = np.array(x)
    if as_index:
        x = np.round(x).astype(np.intp, copy=False)
    if x.ndim < 3:
        if x.size == 1:
            x = x.ravel()
            if as_index and x < 0:
                raise ValueError("index can't contain negative values")
            return [(x[0], x[0])] * ndim
        if x.size == 2 and x.shape != (2, 1):
            x = x.ravel()
            if as_index and (x[0] < 0 or x[1] < 0):
                raise ValueError("index can't contain negative values")
            return [(x[0], x[1])] * ndim
    if as_index and x.min() < 0:
        raise ValueError("index can't contain negative values")
    return np.broadcast_to(x, (ndim, 2)).tolist()


_PAD_KWARGS = {"empty": [], "edge": [], "wrap": [], "constant": ["constant_values"], "linear_ramp": ["end_values"],
               "maximum": ["stat_length"], "mean": ["stat_length"], "median": ["stat_length"],
               "minimum": ["stat_length"], "reflect": ["reflect_type"], "symmetric": ["reflect_type"]}


def _rows(a: Any, axis: int, lo: int, hi: int) -> Any:
    return a[(slice(None),) * axis + (slice(lo, hi),)]


def _copy_pad(a: Any, axis: int, pair: tuple[int, int], mode: str) -> Any:
    """Padding that copies rows (edge, reflect/symmetric even, wrap): NumPy's own ``pad`` of the row numbers."""
    source = np.pad(np.arange(a.shape[axis], dtype=np.intp), pair, mode=mode)
    return row_map(a, axis=axis, segments=runs(source))


def _filled(a: Any, axis: int, pair: tuple[int, int], before: Any, after: Any) -> Any:
    """``a`` with ``pair`` rows of ``before``'s and ``after``'s (one row each, or ``pair[i]`` rows) around it."""
    n = a.shape[axis]
    left = (1, 0, 0 if before.shape[axis] == 1 else 1, pair[0])
    right = (2, 0, 0 if after.shape[axis] == 1 else 1, pair[1])
    segments = tuple(s for s in (left, (0, 0, 1, n), right) if s[3])
    return row_map(a, before, after, axis=axis, segments=segments)


def _odd_reflect(a: Any, axis: int, pair: tuple[int, int], include_edge: bool) -> Any:
    """``reflect_type="odd"``: NumPy's rounds of ``2 * edge - reflected rows`` (``_set_reflect_both``), each round
    reading the rows it needs (two ``row_map`` s) and laying the new ones around the array (a third)."""
    period = a.shape[axis]
    left_pad, right_pad = pair
    while left_pad > 0 or right_pad > 0:
        length = a.shape[axis]
        if include_edge:
            old, offset = length // period * period, 1
        else:
            old, offset = (length - 1) // (period - 1) * (period - 1), 0
        cl, cr = min(old, left_pad), min(old, right_pad)
        wanted = [(0, cl - offset, -1, cl)] if cl else []
        if cr:
            wanted.append((0, length + offset - 2, -1, cr))
        edges = tuple(s for s in ((0, 0, 0, cl), (0, length - 1, 0, cr)) if s[3])
        chunk = row_map(a, axis=axis, segments=tuple(wanted))
        new = 2 * row_map(a, axis=axis, segments=edges) - chunk
        segments = tuple(s for s in ((1, 0, 1, cl), (0, 0, 1, length), (1, cl, 1, cr)) if s[3])
        a = row_map(a, new, axis=axis, segments=segments)
        left_pad, right_pad = left_pad - cl, right_pad - cr
    return a


def _linear_ramps(a: Any, axis: int, pair: tuple[int, int], ends: tuple[Any, Any]) -> tuple[Any, Any]:
    """NumPy's ``_get_linear_ramps``: ``np.linspace(end, edge, width, endpoint=False)`` along ``axis``, NumPy's
    arithmetic (one all_reduce of a bool: whether any step is zero)."""
    n = a.shape[axis]
    dtype = a.dtype
    ramps = []
    for end, (lo, hi), width in zip(ends, ((0, 1), (n - 1, n)), pair):
        stop = np.squeeze(_rows(a, axis, lo, hi), axis)
        dt = np.result_type(end, stop.dtype, 1.0)
        delta = np.subtract(stop, end, dtype=dt)
        y = np.arange(0, width, dtype=dt).reshape((-1,) + (1,) * delta.ndim)
        if width > 0:
            step = delta / width
            if bool(np.any(step == 0)):
                y = (y / width) * delta
            else:
                y = y * step
        else:
            y = y * delta
        y = cast(y + np.asarray(end)[()], dt)
        y = np.moveaxis(y, 0, axis)
        if np.issubdtype(dtype, np.integer):
            y = np.floor(y)
        ramps.append(cast(y, dtype))
    return ramps[0], np.flip(ramps[1], axis)


def _median_keepdims(chunk: Any, axis: int) -> Any:
    """NumPy's ``median`` of ``chunk`` along ``axis`` (kept): the middle row(s) of the sorted rows; NaN where the
    rows hold one."""
    n = chunk.shape[axis]
    ordered = np.sort(chunk, axis=axis)
    mid = n // 2
    middle = _rows(ordered, axis, mid, mid + 1) if n % 2 else _rows(ordered, axis, mid - 1, mid + 1)
    result = np.mean(middle, axis=axis, keepdims=True)
    if n and ordered.dtype.kind in "fc":
        result = np.where(np.isnan(_rows(ordered, axis, n - 1, n)), np.nan, result)
    return result


def _stats(a: Any, axis: int, pair: tuple[int, int], lengths: tuple[Any, Any], mode: str) -> tuple[Any, Any]:
    """NumPy's ``_get_stats``: the statistic of the first/last ``stat_length`` rows (rounded for integers)."""
    n = a.shape[axis]
    left, right = (n if v is None or n < v else v for v in lengths)
    if (left == 0 or right == 0) and mode in ("maximum", "minimum"):
        raise ValueError("stat_length of 0 yields no value for padding")

    def stat(lo: int, hi: int) -> Any:
        chunk = _rows(a, axis, lo, hi)
        if mode == "median":
            value = _median_keepdims(chunk, axis)
        else:
            value = {"maximum": np.amax, "minimum": np.amin, "mean": np.mean}[mode](chunk, axis=axis, keepdims=True)
        if np.issubdtype(a.dtype, np.integer):
            value = np.round(value)
        return cast(value, a.dtype)

    first = stat(0, left)
    if left == right == n:
        return first, first
    return first, stat(n - right, n)


def _pad_widths(pad_width: Any, ndim: int) -> list:
    if isinstance(pad_width, dict):
        seq: list[Any] = [(0, 0)] * ndim
        for axis, width in pad_width.items():
            seq[axis] = (width, width) if isinstance(width, int) else tuple(width)
        pad_width = seq
    pad_width = np.asarray(pad_width)
    if pad_width.dtype.kind != "i":
        raise TypeError("`pad_width` must be of integral type.")
    return [(int(a), int(b)) for a, b in _as_pairs(pad_width, ndim, as_index=True)]


@register_composite(np.pad)
def pad(array: Any, pad_width: Any, mode: Any = "constant", **kwargs: Any) -> Any:
    """``np.pad`` in every mode but a callable one, axis by axis in NumPy's order (so the corners are NumPy's).

    Along a sharded axis each padded axis is one ``exchange`` of the rows that change owner (the edge rows a
    mode copies, and the rows the longer output re-cuts); constant rows are made where they land.  See the module
    docstring for ``reflect_type="odd"``, ``linear_ramp`` and the statistic modes.  Along unsharded axes: local,
    except ``linear_ramp``'s one all_reduce of a bool when the edge is sharded.  ``mode="empty"`` pads with zeros
    (NumPy leaves the values undefined).

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.arange(4.0), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.pad(x, 2, mode="reflect").full_tensor().tolist()
        [2.0, 1.0, 0.0, 1.0, 2.0, 3.0, 2.0, 1.0]
    """
    array = as_array(array)
    widths = _pad_widths(pad_width, array.ndim)
    if callable(mode):
        raise TypeError("numpy.pad on DTensors: a callable mode writes each 1-d vector of the padded array in place "
                        "(NumPy's legacy interface); pad x.full_tensor() with it, or use a named mode")
    try:
        unsupported = set(kwargs) - set(_PAD_KWARGS[mode])
    except (KeyError, TypeError):
        raise ValueError(f"mode '{mode}' is not supported") from None
    if unsupported:
        raise ValueError(f"unsupported keyword arguments for mode '{mode}': {unsupported}")
    ndim = array.ndim
    if mode not in ("constant", "empty") and array.size == 0:
        for axis, pair in enumerate(widths):
            if array.shape[axis] == 0 and any(pair):
                raise ValueError(f"can't extend empty axis {axis} using modes other than 'constant' or 'empty'")
    method = kwargs.get("reflect_type", "even")
    if mode in ("reflect", "symmetric") and method not in ("even", "odd"):
        raise ValueError(f"unsupported reflect_type {method!r}")  # NumPy's silently treats it as "even"
    constants = _as_pairs(kwargs.get("constant_values", 0), ndim)
    ends = _as_pairs(kwargs.get("end_values", 0), ndim)
    lengths = _as_pairs(kwargs.get("stat_length"), ndim, as_index=True)
    out = array
    for axis in range(ndim):
        pair = widths[axis]
        if not any(pair):
            continue
        n = out.shape[axis]
        if mode in ("constant", "empty") or out.size == 0:
            values = constants[axis] if mode == "constant" else (0, 0)
            row = _block_shape(out, axis, 1)
            out = _filled(out, axis, pair, *(np.full(row, v, dtype=out.dtype) for v in values))
        elif mode == "edge" or (mode in ("reflect", "symmetric", "wrap") and (method == "even" or n == 1)):
            out = _copy_pad(out, axis, pair, "edge" if n == 1 and mode != "wrap" else mode)
        elif mode in ("reflect", "symmetric"):
            out = _odd_reflect(out, axis, pair, mode == "symmetric")
        elif mode == "linear_ramp":
            out = _filled(out, axis, pair, *_linear_ramps(out, axis, pair, ends[axis]))
        else:
            out = _filled(out, axis, pair, *_stats(out, axis, pair, lengths[axis], mode))
    return out if out is not array else np.copy(array)


# -- resize -----------------------------------------------------------------------------------------------
@register_composite(np.resize)
def resize(a: Any, new_shape: Any) -> Any:
    """``np.resize``: the flattened array repeated (or cut) to ``prod(new_shape)`` elements, reshaped.

    ``ravel``'s rule flattens (a ``rechunk`` when only the first dim is sharded; an inner sharded dim is gathered),
    one ``exchange`` lays the repeated rows out, and ``reshape``'s rule re-cuts them (a ``rechunk``).

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.arange(3.0), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.resize(x, (2, 4)).full_tensor().tolist()
        [[0.0, 1.0, 2.0, 0.0], [1.0, 2.0, 0.0, 1.0]]
    """
    if isinstance(new_shape, (int, np.integer)):
        new_shape = (new_shape,)
    a = np.ravel(as_array(a))
    new_size = 1
    for dim in new_shape:
        new_size *= dim
        if dim < 0:
            raise ValueError("all elements of `new_shape` must be non-negative")
    if a.size == 0 or new_size == 0:
        return row_map(a, np.zeros(1, a.dtype), axis=0, segments=((1, 0, 0, new_size),) if new_size else ()
                       ).reshape(tuple(new_shape))
    whole, rest = divmod(new_size, a.size)
    segments = ((0, 0, 1, a.size),) * whole + (((0, 0, 1, rest),) if rest else ())
    return np.reshape(row_map(a, axis=0, segments=segments), tuple(new_shape))


# -- views: fliplr, flipud, rot90, rollaxis -----------------------------------------------------------------
def _reversed(m: Any, ndim: int, index: tuple) -> Any:
    m = as_array(m)
    if m.ndim < ndim:
        raise ValueError(f"Input must be >= {ndim}-d.")
    return m[index]


@register_composite(np.fliplr)
def fliplr(m: Any) -> Any:
    """``np.fliplr``: ``m[:, ::-1]``, a view (reading it along a sharded dim 1 moves the rows that change owner).

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.arange(4.0).reshape(2, 2), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> y = np.fliplr(x)
        >>> y.full_tensor().tolist(), y.base is x
        ([[1.0, 0.0], [3.0, 2.0]], True)
    """
    return _reversed(m, 2, (slice(None), slice(None, None, -1)))


@register_composite(np.flipud)
def flipud(m: Any) -> Any:
    """``np.flipud``: ``m[::-1, ...]``, a view (reading it along a sharded dim 0 moves the rows that change owner).

    Example:
        >>> import dtensor_np as dt
        >>> np.flipud(dt.distribute_tensor(np.arange(3.0), dt.DeviceMesh((2,)), [dt.Shard(0)])).full_tensor().tolist()
        [2.0, 1.0, 0.0]
    """
    return _reversed(m, 1, (slice(None, None, -1), Ellipsis))


@register_composite(np.rot90)
def rot90(m: Any, k: int = 1, axes: Sequence[int] = (0, 1)) -> Any:
    """``np.rot90``: NumPy's composition of ``flip`` and ``transpose``, a view (``flip``'s moves when read).

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.arange(4.0).reshape(2, 2), dt.DeviceMesh((2,)), [dt.Shard(1)])
        >>> np.rot90(x).full_tensor().tolist(), np.rot90(x, 2).base is x
        ([[1.0, 3.0], [0.0, 2.0]], True)
    """
    axes = tuple(axes)
    if len(axes) != 2:
        raise ValueError("len(axes) must be 2.")
    m = as_array(m)
    if axes[0] == axes[1] or abs(axes[0] - axes[1]) == m.ndim:
        raise ValueError("Axes must be different.")
    if axes[0] >= m.ndim or axes[0] < -m.ndim or axes[1] >= m.ndim or axes[1] < -m.ndim:
        raise ValueError(f"Axes={axes} out of range for array of ndim={m.ndim}.")
    k %= 4
    if k == 0:
        return m[:]
    if k == 2:
        return np.flip(np.flip(m, axes[0]), axes[1])
    order = list(range(m.ndim))
    order[axes[0]], order[axes[1]] = order[axes[1]], order[axes[0]]
    if k == 1:
        return np.transpose(np.flip(m, axes[1]), order)
    return np.flip(np.transpose(m, order), axes[1])


@register_composite(np.rollaxis)
def rollaxis(a: Any, axis: int, start: int = 0) -> Any:
    """``np.rollaxis``: a transpose, a view (no communication).

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.zeros((2, 3, 4)), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> y = np.rollaxis(x, 2)
        >>> y.shape, str(y.spec), y.base is x
        ((4, 2, 3), 'S(1)', True)
    """
    n = a.ndim
    axis = normalize_axis_index(axis, n)
    if start < 0:
        start += n
    if not 0 <= start < n + 1:
        raise np.exceptions.AxisError(f"'start' arg requires {-n} <= start < {n + 1}, but {start} was passed in")
    if axis < start:
        start -= 1
    if axis == start:
        return a[...]
    order = list(range(n))
    order.remove(axis)
    order.insert(start, axis)
    return np.transpose(a, order)


# -- trim_zeros -----------------------------------------------------------------------------------------------
@register_composite(np.trim_zeros)
def trim_zeros(filt: Any, trim: str = "fb", axis: Any = None) -> Any:
    """``np.trim_zeros``: the leading/trailing zeros cut off ``filt`` along ``axis`` (all axes when None): a view.

    One ``all_reduce`` (min) of ``2 * ndim`` integers (the first and last nonzero index along every axis), then
    NumPy's basic slice (along a sharded axis the kept rows that change owner move, one ``rechunk``).

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([0.0, 0.0, 1.0, 2.0, 0.0]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.trim_zeros(x).full_tensor().tolist()
        [1.0, 2.0]
    """
    filt = as_array(filt)
    if is_array(filt) and not hasattr(filt, "full_tensor"):
        raise TypeError(DATA_DEPENDENT_SHAPE.format(name="trim_zeros"))
    trim = trim.lower()
    if trim not in {"fb", "bf", "f", "b"}:
        raise ValueError(f"unexpected character(s) in `trim`: {trim!r}")
    ndim = filt.ndim
    axes = tuple(range(ndim)) if axis is None else normalize_axis_tuple(axis, ndim, argname="axis")
    if not axes:
        return filt
    nonzero = filt != 0
    ends = []
    for d in range(ndim):
        index = np.arange(filt.shape[d], dtype=np.intp).reshape((-1,) + (1,) * (ndim - d - 1))
        ends.append(np.where(nonzero, index, filt.shape[d]))  # first: min of these
        ends.append(np.where(nonzero, -index, 1))  # last: -min of these
    found = np.min(np.stack(ends), axis=tuple(range(1, ndim + 1)))
    values = [int(v) for v in (found.full_tensor() if hasattr(found, "full_tensor") else found)]
    start = values[0::2]
    stop = [1 - v for v in values[1::2]]
    if any(s >= filt.shape[d] for d, s in enumerate(start)):  # all zero: an empty slice
        start = stop = [0] * ndim
    else:
        if "f" not in trim:
            start = [None] * ndim
        if "b" not in trim:
            stop = [None] * ndim
    sl = tuple(slice(start[d], stop[d]) if d in axes else slice(None) for d in range(ndim))
    return filt[sl[0]] if len(sl) == 1 else filt[sl]


CASES = {
    "numpy.append": Case(lambda x: np.append(x, np.ones((2, 4)), axis=0), untouched=1, axis=0),
    "numpy.insert": Case(lambda x: np.insert(x, [1, 4, 4, 0], -1.0, axis=0), untouched=1, axis=0),
    "numpy.delete": Case(lambda x: np.delete(x, [0, 2, 3], axis=0), untouched=1, axis=0),
    "numpy.block": Case(lambda x: np.block([[x, x], [x, np.zeros((5, 4))]]), untouched=None, axis=0),
    "numpy.pad": Case(lambda x: np.pad(x, ((2, 3), (0, 0)), mode="reflect"), untouched=1, axis=0),
    "numpy.resize": Case(lambda x: np.resize(x[0], (3, 7)), untouched=None, axis=1),
    "numpy.fliplr": Case(lambda x: np.fliplr(x), untouched=0, axis=1),
    "numpy.flipud": Case(lambda x: np.flipud(x), untouched=1, axis=0),
    "numpy.rot90": Case(lambda x: np.rot90(x, 1), untouched=0, axis=1),
    "numpy.rollaxis": Case(lambda x: np.rollaxis(x, 1), untouched=0, axis=1),
    "numpy.trim_zeros": Case(lambda x: np.trim_zeros(x, axis=0), untouched=None, axis=0,
                             data=lambda shape: np.pad(np.arange(1.0, 7.0).reshape(3, 2), ((1, 1), (1, 1)))),
    "numpy.split: along a sharded axis 0": Case(lambda x: np.split(x, [1, 3], axis=0), untouched=1, axis=0),
    "numpy.array_split: along a sharded axis 0": Case(lambda x: np.array_split(x, 3, axis=0), untouched=1, axis=0),
    "numpy.hsplit: untouched rows": Case(lambda x: np.hsplit(x, 2), untouched=0, axis=1),
    "numpy.vsplit: at one index": Case(lambda x: np.vsplit(x, [2]), untouched=1, axis=0),
    "numpy.dsplit: of a 3-d array": Case(lambda x: np.dsplit(x.reshape(5, 2, 2), 2), untouched=0, axis=None),
}
