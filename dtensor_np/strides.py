"""The memory layout a DTensor's NumPy twin would have: the strides that decide whether NumPy views or copies.

A DTensor has no memory of its own to lay out, but NumPy's answer to
"is this ``reshape`` (``ravel``) a view?" depends on the strides of the array
it is asked of.  So every DTensor carries the strides its NumPy twin would
have (in bytes, for its dtype): ``None`` for a C-contiguous twin (every new
array, unless said otherwise below), else a tuple.

The strides of a view are NumPy's own: the view's op is applied to a
*proxy*, an array of the twin's shape and strides over a one-element buffer
(``numpy.lib.stride_tricks.as_strided``), and NumPy works the new strides out.
Only ops that never read the data are ever applied to a proxy (transposes,
basic indexing, ``reshape(copy=False)``, ``diagonal``, ``real``/``imag``,
``broadcast_to``); so a proxy of any size costs nothing.  A new array made
from arrays with other layouts follows NumPy's ``order="K"`` (:func:`k_order`):
the axes in the order of the inputs' strides.

Example:
    >>> t = transposed_strides((4, 6), None, np.dtype("f8"), (1, 0))
    >>> t, reshape_view_strides((6, 4), t, np.dtype("f8"), (24,))   # a.T.reshape(-1): NumPy copies
    ((8, 48), None)
    >>> reshape_view_strides((4, 6), None, np.dtype("f8"), (2, 12))  # a.reshape(2, 12): a view
    (96, 8)
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from collectives import memo

__all__ = [
    "Strides",
    "c_strides",
    "proxy",
    "strides_of",
    "normal",
    "transposed_strides",
    "reshape_view_strides",
    "k_order",
    "advanced_strides",
    "memory_order",
    "contiguous_in",
]

Strides = Optional[tuple[int, ...]]
"""A twin's strides in bytes, or None for C-contiguous."""


def c_strides(shape: Sequence[int], itemsize: int) -> tuple[int, ...]:
    """The strides of a C-contiguous array of ``shape``.

    Example:
        >>> c_strides((2, 3, 4), 8)
        (96, 32, 8)
    """
    out = []
    step = itemsize
    for n in reversed(tuple(shape)):
        out.append(step)
        step *= max(n, 1)
    return tuple(reversed(out))


def proxy(shape: Sequence[int], strides: Strides, dtype: np.dtype) -> np.ndarray:
    """An array of ``shape`` and ``strides`` over a one-element buffer: apply only ops that read no data to it."""
    dtype = np.dtype(dtype)
    buffer = np.zeros(max(dtype.itemsize, 1), np.uint8).view(dtype)
    given = c_strides(shape, dtype.itemsize) if strides is None else strides
    return as_strided(buffer, shape=tuple(shape), strides=given, writeable=False)


def normal(shape: Sequence[int], strides: Optional[Sequence[int]], itemsize: int) -> Strides:
    """``strides`` as kept: None when an array of ``shape`` with them is C-contiguous (NumPy's flag: the strides of
    dims of length 1 do not count, an empty array is contiguous).

    Example:
        >>> normal((3, 1), (8, 64), 8), normal((3, 2), (8, 24), 8)
        (None, (8, 24))
    """
    if strides is None or 0 in tuple(shape):
        return None
    expected = c_strides(shape, itemsize)
    if all(n <= 1 or s == e for n, s, e in zip(shape, strides, expected)):
        return None
    return tuple(strides)


def strides_of(array: np.ndarray) -> Strides:
    """``array``'s strides, as this module keeps them (None when C-contiguous)."""
    return normal(array.shape, array.strides, array.itemsize)


def transposed_strides(shape: Sequence[int], strides: Strides, dtype: np.dtype, axes: Sequence[int]) -> Strides:
    """The strides of ``np.transpose(twin, axes)``."""
    return strides_of(np.transpose(proxy(shape, strides, dtype), tuple(axes)))


def reshape_view_strides(shape: Sequence[int], strides: Strides, dtype: np.dtype, new_shape: Sequence[int],
                         order: str = "C") -> Optional[Strides]:
    """The strides of ``twin.reshape(new_shape, order=order)`` when NumPy views it (as NumPy gives them, not
    normalised), else None: NumPy copies."""
    twin = proxy(shape, strides, dtype)
    try:
        viewed = np.reshape(twin, tuple(new_shape), order=order, copy=False)  # type: ignore[call-overload]
    except ValueError:
        return None
    return tuple(viewed.strides)


def k_order(out_shape: Sequence[int], inputs: Sequence[tuple[Sequence[int], Strides]], itemsize: int) -> Strides:
    """The strides NumPy gives a new array of ``out_shape`` made in ``order="K"`` from ``inputs``
    (their shapes and strides): the axes in the order of the strides of the inputs of that shape, where they
    agree, else C order.

    Example:
        >>> k_order((6, 4), [((6, 4), (8, 48))], 8)   # np.exp(a.T): Fortran order, as a.T
        (8, 48)
        >>> k_order((6, 4), [((6, 4), (8, 48)), ((6, 4), None)], 8) is None   # orders disagree: C
        True
    """
    shape = tuple(out_shape)
    orders = set()
    for in_shape, strides in inputs:
        if tuple(in_shape) != shape:
            continue
        orders.add(memory_order(shape, c_strides(shape, itemsize) if strides is None else strides))
    if len(orders) != 1:
        return None
    (order,) = orders
    return contiguous_in(order, shape, itemsize)


def memory_order(shape: Sequence[int], strides: Sequence[int]) -> tuple[int, ...]:
    """The dims from outermost to innermost in memory: by stride, largest first (equal strides keep their order),
    dims of length 0 or 1 (whose strides do not count) first.

    Example:
        >>> memory_order((6, 4), (8, 48)), memory_order((2, 1, 3), (24, 8, 8))
        ((1, 0), (1, 0, 2))
    """
    live = [d for d in range(len(shape)) if shape[d] > 1]
    ranked = sorted(live, key=lambda d: -abs(strides[d]))  # stable
    return tuple(d for d in range(len(shape)) if shape[d] <= 1) + tuple(ranked)


def contiguous_in(order: Sequence[int], shape: Sequence[int], itemsize: int) -> Strides:
    """The strides of a new contiguous array of ``shape`` laid out in ``order`` (outermost dim first), as kept.

    Example:
        >>> contiguous_in((1, 0), (6, 4), 8), contiguous_in((0, 1), (6, 4), 8)
        ((8, 48), None)
    """
    strides = [0] * len(shape)
    step = itemsize
    for d in reversed(tuple(order)):
        strides[d] = step
        step *= max(shape[d], 1)
    return normal(shape, strides, itemsize)




def _layout_key(item: object) -> object:
    """What of an index item decides the layout of an advanced index's result: its kind and an array's shape."""
    if isinstance(item, (list, tuple)):
        item = np.asarray(item)
    if isinstance(item, np.ndarray) or hasattr(item, "shape") and hasattr(item, "dtype"):
        return ("array", tuple(item.shape), np.dtype(item.dtype).kind == "b")
    if isinstance(item, slice):
        return "slice"
    if item is None or item is Ellipsis:
        return item
    if isinstance(item, (bool, np.bool_)):
        return ("bool", bool(item))
    return "int"


def advanced_strides(shape: Sequence[int], strides: Strides, itemsize: int, index: object,
                     out_shape: Sequence[int]) -> Strides:
    """The strides of NumPy's result of an advanced index ``twin[index]`` (a new array, laid out as NumPy lays it
    out: ``a[:, [0, 1]]`` is Fortran-ordered), found by NumPy itself on a small array of the twin's stride order.

    Example:
        >>> advanced_strides((4, 6), None, 8, (slice(None), [0, 1]), (4, 2))   # NumPy: a[:, [0, 1]].strides
        (8, 32)
    """
    items = index if isinstance(index, tuple) else (index,)
    key = (tuple(shape), strides, itemsize, tuple(_layout_key(i) for i in items), tuple(out_shape))
    return _advanced_strides(key)


@memo(maxsize=1024, name="dtensor_np.advanced_index_layouts")
def _advanced_strides(key: tuple) -> Strides:
    shape, strides, itemsize, items, out_shape = key
    if 0 in shape or 0 in out_shape:
        return None
    small_shape = tuple(min(n, 2) for n in shape)
    given = c_strides(shape, itemsize) if strides is None else strides
    order = memory_order(shape, given)
    small = np.empty([small_shape[d] for d in order], np.uint8).transpose(np.argsort(order))
    small_items: list[object] = []
    for item in items:
        if isinstance(item, tuple) and item[0] == "array":
            _, item_shape, boolean = item
            small_items.append(np.ones(item_shape, bool) if boolean else np.zeros(item_shape, np.intp))
        elif isinstance(item, tuple) and item[0] == "bool":
            small_items.append(item[1])
        elif item == "slice":
            small_items.append(slice(None))
        elif item == "int":
            small_items.append(0)
        else:
            small_items.append(item)
    try:
        picked = small[tuple(small_items)]
    except (IndexError, ValueError):  # a boolean mask of the whole shape, shrunk differently: C order
        return None
    if picked.ndim != len(out_shape):
        return None
    return contiguous_in(memory_order(picked.shape, picked.strides), out_shape, itemsize)
