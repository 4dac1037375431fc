"""Interned values: a mesh, a placement or a spec exists once, so ``==`` and ``hash`` are identity.

A class made with the :class:`Interned` metaclass validates and normalises a
new value as usual (its ``__init__``), then looks its canonical key (the
class's ``_key()``) up among the values made before and returns the one
already there.  So two equal specs are one object: dict lookups keyed by
specs hash at C speed (``object.__hash__``) and compare by identity, which is
what lets one cache serve ``DTensor.redistribute``, the op dispatcher and the
graph interpreter.  The table holds values weakly, so a value nobody uses any
more is freed, and a value equal to it made later is the only one alive.
Calls with plain scalar arguments (``Shard(0)``, ``Partial("max")``) skip the
validation after the first time.

The scalar-argument table of each class is a
:class:`collectives.BoundedCache` (registered with the other caches: see
:func:`collectives.cache_info`): a plain ``dict`` whose ``put`` evicts the
oldest entry once full.  An evicted entry is only a lost shortcut: the next
call validates again.

Example:
    >>> from dtensor_np import Shard, DeviceMesh
    >>> Shard(0) is Shard(0), DeviceMesh((2, 2)) is DeviceMesh((2, 2))
    (True, True)
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from collectives import BoundedCache, static_key

__all__ = ["Interned"]

_SCALARS = frozenset({int, str, float, bool, type(None)})
_SIMPLE_LIMIT = 4096


class Interned(type):
    """Metaclass of immutable values that exist once (see the module doc).

    A class using it defines ``_key()`` (a hashable tuple of its normalised
    fields), ``__reduce__`` through its constructor, has a ``__weakref__``
    slot, and keeps ``object``'s identity ``__eq__``/``__hash__``.
    """

    def __init__(cls, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> None:
        super().__init__(name, bases, namespace)
        cls._interned = weakref.WeakValueDictionary()  # canonical key -> the value
        cls._simple = BoundedCache(_SIMPLE_LIMIT, name=f"{cls.__module__}.{cls.__qualname__}.constructor_calls")  # typed scalar arguments -> the value
        cls._lock = threading.Lock()

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        simple = None
        if not kwargs and all(a.__class__ in _SCALARS for a in args):
            simple = static_key(args)  # Shard(0) and Shard(False) differ
            found = cls._simple.get(simple)
            if found is not None:
                return found
        made = super().__call__(*args, **kwargs)
        return cls._intern(made._key(), made, simple)

    def _intern(cls, key: Any, made: Any, simple: Any = None) -> Any:
        """The value already held under ``key``, else ``made``, now held (and ``simple`` noted for it)."""
        with cls._lock:
            value = cls._interned.get(key)
            if value is None:
                cls._interned[key] = value = made
            if simple is not None:
                cls._simple.put(simple, value)
        return value

    def from_normal(cls, **fields: Any) -> Any:
        """The value of ``fields`` that are already normal (as the class's validation leaves them,
        given in its ``_key()`` order), made without validating them again: one dict lookup when
        the value exists.  Only for callers that derive the fields from valid values (the
        redistribute planner's intermediate specs); anything else goes through the constructor.
        """
        key = tuple(fields.values())
        value = cls._interned.get(key)
        if value is not None:
            return value
        made = object.__new__(cls)
        for name, field in fields.items():
            object.__setattr__(made, name, field)
        if made._key() != key:
            raise TypeError(f"{cls.__name__}.from_normal expected the fields of _key() in its order, got {list(fields)}")
        return cls._intern(key, made)
