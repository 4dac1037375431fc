"""Every cache of dtensor_np and collectives, registered in one place: ``memo``, ``clear_caches``, ``cache_info``.

A function cache is made with :func:`memo` (``functools.lru_cache`` underneath,
so a hit costs what an ``lru_cache`` hit costs: the wrapper is the
``lru_cache`` object itself), a table that is read as a plain ``dict`` on a
hot path with :class:`BoundedCache`; both register themselves under a name.
:func:`clear_caches` empties every cache (the next call of each function works
its value out again: only time is lost), :func:`cache_info` reports each
one's hits, misses, entries and bound.  Caches whose values are resources held
for the whole process (committed MPI datatypes, the CUDA-aware-MPI decision)
are ``persistent``: listed by :func:`cache_info`, left alone by
:func:`clear_caches`.

This module is the ground floor: it imports nothing of the project, so every
layer above can register its caches here.

Example:
    >>> @memo(maxsize=16, name="doc.square")
    ... def square(n: int) -> int:
    ...     return n * n
    >>> square(3), square(3), cache_info()["doc.square"]["hits"]
    (9, 9, 1)
    >>> clear_caches(); cache_info()["doc.square"]["entries"]
    0
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable, Optional, TypeVar

__all__ = ["memo", "BoundedCache", "register_cache", "clear_caches", "cache_info"]

F = TypeVar("F", bound=Callable[..., Any])


class _Entry:
    """One registered cache: how to empty it and how to report on it."""

    __slots__ = ("clear", "info", "persistent")

    def __init__(self, clear: Callable[[], None], info: Callable[[], dict[str, Any]], persistent: bool) -> None:
        self.clear = clear
        self.info = info
        self.persistent = persistent


_REGISTRY: dict[str, _Entry] = {}
_LOCK = threading.Lock()


def register_cache(name: str, clear: Callable[[], None], info: Callable[[], dict[str, Any]], *,
                   persistent: bool = False) -> None:
    """Register a cache that is neither a :func:`memo` nor a :class:`BoundedCache`.

    ``info()`` returns ``{"hits", "misses", "entries", "maxsize"}`` (None where a count is not kept).
    A name taken already (a module loaded twice, a class made in a loop) gets ``#2``, ``#3``... appended.

    Example:
        >>> table: dict = {}
        >>> register_cache("doc.table", table.clear, lambda: {"hits": None, "misses": None,
        ...                "entries": len(table), "maxsize": None})
        >>> cache_info()["doc.table"]["entries"]
        0
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"a cache's name must be a non-empty string, got {name!r}")
    with _LOCK:
        unique, n = name, 1
        while unique in _REGISTRY:
            n += 1
            unique = f"{name}#{n}"
        _REGISTRY[unique] = _Entry(clear, info, persistent)


def _qualified(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def memo(maxsize: Optional[int] = 1024, *, name: Optional[str] = None, persistent: bool = False) -> Callable[[F], F]:
    """Cache a pure function (``functools.lru_cache(maxsize)``) and register it (default name: its qualified name).

    The arguments are the key, as ``lru_cache`` keys them (``1``, ``1.0`` and
    ``True`` are one key: check argument types before a memo'd call where they
    matter).  ``maxsize=None``: unbounded (for small domains such as dtypes).

    Example:
        >>> @memo(maxsize=8, name="doc.double")
        ... def double(n: int) -> int:
        ...     return 2 * n
        >>> double(4), double.cache_info().misses
        (8, 1)
    """

    def wrap(fn: F) -> F:
        cached = functools.lru_cache(maxsize=maxsize)(fn)

        def info() -> dict[str, Any]:
            i = cached.cache_info()
            return {"hits": i.hits, "misses": i.misses, "entries": i.currsize, "maxsize": i.maxsize}

        register_cache(name or _qualified(fn), cached.cache_clear, info, persistent=persistent)
        return cached  # type: ignore[return-value]

    return wrap


class BoundedCache(dict):
    """A registered dict of at most ``maxsize`` entries: ``put`` evicts the oldest (first in, first out) when full.

    Read it as a dict (``cache.get(key)``, at C speed); write it with ``put``.
    Lookups are not counted (a hot path reads it); ``hits`` and ``misses`` are
    the counts its owner keeps in :attr:`counts`, where it keeps them.

    Example:
        >>> c = BoundedCache(2, name="doc.bounded")
        >>> for k in "abc":
        ...     c.put(k, k.upper())
        >>> sorted(c), c.get("a"), c.maxsize, cache_info()["doc.bounded"]["entries"]
        (['b', 'c'], None, 2, 2)
    """

    __slots__ = ("maxsize", "counts")

    def __init__(self, maxsize: int, *, name: str) -> None:
        super().__init__()
        if maxsize < 1:
            raise ValueError(f"maxsize must be at least 1, got {maxsize}")
        self.maxsize = maxsize
        self.counts: dict[str, Optional[int]] = {"hits": None, "misses": None}
        register_cache(name, self.clear, self._info)

    def _info(self) -> dict[str, Any]:
        return {"hits": self.counts["hits"], "misses": self.counts["misses"], "entries": len(self),
                "maxsize": self.maxsize}

    def put(self, key: Any, value: Any) -> None:
        """Store ``value`` under ``key``, first evicting the oldest entries beyond ``maxsize - 1``."""
        if key not in self:
            while len(self) >= self.maxsize:
                try:
                    del self[next(iter(self))]
                except (KeyError, RuntimeError, StopIteration):  # another thread evicted it first
                    break
        self[key] = value


def clear_caches() -> None:
    """Empty every registered cache except the persistent ones (plans, decisions, the dispatch fast path...).

    Nothing changes but time: the next call of each op plans and decides again.

    Example:
        >>> clear_caches()
    """
    with _LOCK:
        entries = list(_REGISTRY.values())
    for entry in entries:
        if not entry.persistent:
            entry.clear()


def cache_info() -> dict[str, dict[str, Any]]:
    """``{name: {"hits", "misses", "entries", "maxsize", "persistent"}}`` for every registered cache, by name.

    Example:
        >>> info = cache_info()
        >>> all(set(v) == {"hits", "misses", "entries", "maxsize", "persistent"} for v in info.values())
        True
    """
    with _LOCK:
        items = sorted(_REGISTRY.items())
    return {name: {**entry.info(), "persistent": entry.persistent} for name, entry in items}
