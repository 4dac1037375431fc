"""Cache keys of call arguments: :func:`frozen` (a hashable, readable form) and :func:`static_key` (a typed key).

Every cache keyed by a call's static arguments builds its key with these two
functions, whatever layer it is in (the collectives' prepared calls, the
sharding rules' decisions, the dispatch fast path):

* :func:`frozen` makes containers hashable and keeps the values readable:
  mappings become sorted tuples of pairs, lists and tuples become tuples,
  a 0-d NumPy array its scalar, a dtype-like NumPy type its ``np.dtype``.
* :func:`static_key` tells apart what ``==`` confuses: ``2``, ``2.0``,
  ``True`` and ``np.int64(2)`` are four keys, ``0.0`` and ``-0.0`` two,
  and a NaN equals itself.  Every item is keyed by its exact type, so a
  value that a cached call accepted never lets a value of another type
  through unchecked.

This module is the ground floor: it imports nothing of the project.

Example:
    >>> frozen({"in_sizes": {1: 2, 0: 3}, "axis": [0]})
    (('axis', (0,)), ('in_sizes', ((0, 3), (1, 2))))
    >>> static_key(2) == static_key(2.0), static_key(0.0) == static_key(-0.0), static_key([1, (2, None)])
    (False, False, (<class 'list'>, (<class 'int'>, 1), (<class 'tuple'>, (<class 'int'>, 2), (<class 'NoneType'>, None))))
"""

from __future__ import annotations

from typing import Any, Hashable, Mapping, Optional

import numpy as np

__all__ = ["frozen", "static_key", "PLAIN_TYPES", "FLOAT_TYPES"]

PLAIN_TYPES = frozenset({int, bool, str, type(None), np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8,
                         np.uint16, np.uint32, np.uint64, np.longlong, np.ulonglong, bytes})
"""Types whose values are their own key (with the type): ``==`` on them means the same value."""
FLOAT_TYPES = frozenset({float, np.float16, np.float32, np.float64, np.longdouble})
"""Types keyed by value except zeros and NaNs, which are keyed by their ``repr`` (``-0.0`` is not ``0.0``)."""
_COMPLEX_TYPES = frozenset({complex, np.complex64, np.complex128, np.clongdouble})


def frozen(value: Any) -> Hashable:
    """A hashable stand-in for a call argument, its values readable (mappings and sequences become tuples).

    A NumPy array of more than 0 dims has none: ``TypeError``.  Other values are
    returned as they are (an unhashable one fails where it is hashed).

    Example:
        >>> frozen([np.float32, {"b": 1, "a": [2]}, np.array(3)])
        (dtype('float32'), (('a', (2,)), ('b', 1)), np.int64(3))
    """
    c = value.__class__
    if c in PLAIN_TYPES or c in FLOAT_TYPES:
        return value
    if c is tuple or c is list:
        for v in value:  # a tuple of plain values (rank groups, shapes) is its own frozen form
            if v.__class__ not in PLAIN_TYPES:
                return tuple([frozen(v) for v in value])
        return value if c is tuple else tuple(value)
    if c is dict or isinstance(value, Mapping):
        return tuple(sorted((k, frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple([frozen(v) for v in value])
    if isinstance(value, np.ndarray):
        if value.ndim != 0:
            raise TypeError(f"expected a scalar or a hashable value, got a NumPy array of shape {value.shape}")
        return value[()]
    if (isinstance(value, type) and issubclass(value, np.generic)) or isinstance(value, np.dtype):
        return np.dtype(value)
    return value


_ENDS = frozenset({int, type(None)})


def _slice_key(value: slice) -> Optional[Hashable]:
    """A slice's key: its ends' types and values (``slice(1, None)`` is not ``slice(1.0, None)``)."""
    start, stop, step = value.start, value.stop, value.step
    if start.__class__ in _ENDS and stop.__class__ in _ENDS and step.__class__ in _ENDS:
        return (slice, start.__class__, start, stop.__class__, stop, step.__class__, step)
    ends = (static_key(start), static_key(stop), static_key(step))
    return None if None in ends else (slice, *ends)


def static_key(value: Any) -> Optional[Hashable]:
    """The typed key of a static argument (see the module doc), or None for a value that has none.

    Containers (tuple, list, slice, dict, frozenset) are keyed item by item;
    any other hashable value by ``(type, value)``; an unhashable value (an
    array, a DTensor) has no key.

    Example:
        >>> static_key(slice(1, None)) == static_key(slice(1.0, None)), static_key(np.zeros(2))
        (False, None)
    """
    c = value.__class__
    if c in PLAIN_TYPES:
        return (c, value)
    if c in FLOAT_TYPES:
        return (c, value if value == value and value != 0 else repr(value))
    if c is tuple or c is list:
        items: list[Any] = [c]
        for v in value:
            vc = v.__class__
            if vc in PLAIN_TYPES:
                items.append((vc, v))
            elif vc is slice:
                item = _slice_key(v)
                if item is None:
                    return None
                items.append(item)
            else:
                item = static_key(v)
                if item is None:
                    return None
                items.append(item)
        return tuple(items)
    if c is slice:
        return _slice_key(value)
    if c in _COMPLEX_TYPES:
        return (c, repr(value))
    if c is dict:
        items = [(static_key(k), static_key(v)) for k, v in value.items()]
        return None if any(None in pair for pair in items) else (dict, *sorted(items, key=repr))
    if c is frozenset:
        items = [static_key(v) for v in value]
        return None if None in items else (frozenset, frozenset(items))
    try:
        hash(value)
    except TypeError:
        return None
    return (c, value)
