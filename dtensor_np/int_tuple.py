"""Helpers for (nested) int tuples, the shapes and strides of a :class:`~dtensor_np.layout.Layout`.

Everything here is lexicographic (row-major): the last coordinate moves fastest.

Example:
    >>> flatten(((2, 3), 4))
    (2, 3, 4)
    >>> suffix_product((2, 3, 4))
    (12, 4, 1)
    >>> index_to_coordinate(5, (2, 3))
    (1, 2)
    >>> coordinate_to_index((1, 2), (2, 3))
    5
"""

from __future__ import annotations

import math
from typing import Union

import numpy as np

IntTuple = Union[int, tuple["IntTuple", ...]]

__all__ = [
    "IntTuple",
    "is_int",
    "is_integer",
    "as_ints",
    "is_tuple",
    "flatten",
    "product",
    "suffix_product",
    "index_to_coordinate",
    "coordinate_to_index",
    "inner_product",
    "congruent",
]


def is_int(x: object) -> bool:
    """True for a plain int (bools are not ints here)."""
    return isinstance(x, int) and not isinstance(x, bool)


def is_integer(x: object) -> bool:
    """True for a Python or NumPy integer, as NumPy takes in a shape (bools are not integers here).

    Example:
        >>> is_integer(4), is_integer(np.int64(4)), is_integer(True), is_integer(4.0)
        (True, True, False, False)
    """
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def as_ints(value: object, what: str, expected: str = "a sequence of ints") -> tuple[int, ...]:
    """A sequence of Python or NumPy integers as a tuple of ints; a ``TypeError`` naming ``what`` otherwise.

    Strings, bools, floats and things that are not sequences are refused (the
    way NumPy refuses them in a shape); NumPy integers and 1-d integer arrays
    are taken.

    Example:
        >>> as_ints(np.array([2, 3]), "mesh shape")
        (2, 3)
        >>> as_ints((2.0, 3), "shape")
        Traceback (most recent call last):
        ...
        TypeError: shape must be a sequence of ints, got (2.0, 3)
    """
    try:
        items = None if isinstance(value, (str, bytes, dict)) else tuple(value)  # type: ignore[arg-type]
    except TypeError:  # not iterable (an int, None, a 0-d array)
        items = None
    if items is None or not all(is_integer(v) for v in items):
        raise TypeError(f"{what} must be {expected}, got {value!r}")
    return tuple(int(v) for v in items)


def is_tuple(x: object) -> bool:
    """True for a tuple (an int tuple's nested level)."""
    return isinstance(x, tuple)


def flatten(t: IntTuple) -> tuple[int, ...]:
    """All the ints of a nested int tuple, in order: ``flatten(((2, 3), 4)) == (2, 3, 4)``."""
    if is_int(t):
        return (t,)  # type: ignore[return-value]
    out: list[int] = []
    for x in t:  # type: ignore[union-attr]
        out.extend(flatten(x))
    return tuple(out)


def product(t: IntTuple) -> int:
    """The product of every int in ``t``: ``product(((2, 3), 4)) == 24``."""
    return math.prod(flatten(t))


def suffix_product(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides of a flat shape: ``suffix_product((2, 3, 4)) == (12, 4, 1)``."""
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    return tuple(strides)


def index_to_coordinate(index: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The row-major coordinate of a flat index: ``index_to_coordinate(5, (2, 3)) == (1, 2)``."""
    coord = []
    for size in reversed(shape):
        coord.append(index % size)
        index //= size
    return tuple(reversed(coord))


def coordinate_to_index(coord: tuple[int, ...], shape: tuple[int, ...]) -> int:
    """The flat row-major index of a coordinate: ``coordinate_to_index((1, 2), (2, 3)) == 5``."""
    return inner_product(coord, suffix_product(shape))


def inner_product(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """``sum(x * y)`` over two flat int tuples of equal length."""
    if len(a) != len(b):
        raise ValueError(f"inner_product needs equal lengths, got {len(a)} and {len(b)}")
    return sum(x * y for x, y in zip(a, b))


def congruent(a: IntTuple, b: IntTuple) -> bool:
    """True when ``a`` and ``b`` have the same nesting structure."""
    if is_int(a) and is_int(b):
        return True
    if is_tuple(a) and is_tuple(b):
        return len(a) == len(b) and all(congruent(x, y) for x, y in zip(a, b))  # type: ignore[arg-type]
    return False
