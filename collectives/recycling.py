"""Reusing large result buffers once nobody holds them any more.

A collective returns a new array every call.  ``malloc`` serves arrays of at
least 128 KiB (glibc's smallest mmap threshold) from ``mmap`` or from the top
of the heap, which it gives back to the kernel when a free leaves enough
there; the next array of that size then has its pages faulted in and zeroed
by the kernel while MPI or NumPy writes them, which can cost more than the
copy itself (a 512 KiB slice copy measured 20 us into a reused buffer and 50
to 70 us into a fresh one).  A :class:`BufferSlot` belongs to one prepared
call (one output shape and dtype).  It keeps the base array of the result it
last handed out; when the reference count shows that nothing else refers to
that base (no result, no view of it, no exported buffer), the next call
writes into it again.  Callers get a fresh view, so what they do to the array
object (reshape, flags) never reaches the base.

The reuse test is cheap on purpose (it runs right after a collective has
pushed Python's own data out of the CPU caches): one atomic ``list.pop`` that
claims the base, one reference count, one view; no lock and no bookkeeping.
Two threads taking from one slot at once each get a buffer nobody else holds.

Only arrays of at least ``DTENSOR_NP_RECYCLE_MIN_BYTES`` (default 128 KiB)
get a slot, and all slots together keep at most
``DTENSOR_NP_RECYCLE_MAX_BYTES`` (default 256 MiB; 0 turns recycling off) of
bases: when a new base would pass that, the slots that allocated longest ago
let go of theirs.  :func:`release_buffers` lets go of all.

Example:
    >>> import numpy as np
    >>> slot = BufferSlot((1024, 1024), np.float64)
    >>> a = slot.take(); address = a.ctypes.data
    >>> del a
    >>> b = slot.take()          # `a` is gone: its memory is reused
    >>> b.ctypes.data == address
    True
    >>> c = slot.take()          # `b` is still alive: a new buffer
    >>> c.ctypes.data != address
    True
"""
from __future__ import annotations

import os
import sys
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

__all__ = ["BufferSlot", "allocator", "release_buffers", "recycled_bytes"]

_getrefcount = sys.getrefcount


def _env_bytes(name: str, default: int) -> int:
    try:
        return max(0, int(os.environ.get(name, default)))
    except ValueError:
        return default


MIN_BYTES = _env_bytes("DTENSOR_NP_RECYCLE_MIN_BYTES", 128 << 10)
MAX_BYTES = _env_bytes("DTENSOR_NP_RECYCLE_MAX_BYTES", 256 << 20)

_lock = threading.Lock()  # guards the bookkeeping below (taken on allocation only)
_held: OrderedDict[int, BufferSlot] = OrderedDict()  # id(slot) -> slot holding a base, oldest first
_held_bytes = 0


class BufferSlot:
    """Arrays of one shape and dtype; reuses the last one handed out once nothing refers to it."""

    __slots__ = ("shape", "dtype", "nbytes", "cell")

    def __init__(self, shape: tuple[int, ...], dtype: Any) -> None:
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.cell: list[np.ndarray] = []  # the kept base, if any

    def take(self) -> np.ndarray:
        """A C-contiguous array of the slot's shape and dtype, contents undefined."""
        cell = self.cell
        if cell:
            try:
                base = cell.pop()  # claims it: no other thread can get it from here
            except IndexError:
                pass
            else:
                if _getrefcount(base) == _FREE:  # nothing but this frame refers to it
                    cell.append(base)
                    return base.view()
        return self._allocate()

    def _allocate(self) -> np.ndarray:
        global _held_bytes
        base = np.empty(self.shape, self.dtype)
        with _lock:
            self.cell[:] = [base]
            key = id(self)
            if key not in _held:
                _held[key] = self
                _held_bytes += self.nbytes
                while _held_bytes > MAX_BYTES and _held:
                    _, oldest = _held.popitem(last=False)
                    oldest.cell.clear()
                    _held_bytes -= oldest.nbytes
        return base.view()


def _free_count() -> int:
    """The reference count ``take`` sees for a base nothing else holds (the same code shape)."""
    cell = [np.empty(1, np.uint8)]
    base = cell.pop()
    return _getrefcount(base)


_FREE = _free_count()


def allocator(shape: tuple[int, ...], dtype: Any) -> Any:
    """``None`` (allocate with ``np.empty``) for small arrays, else the ``take`` of a new slot.

    Example:
        >>> allocator((2,), "f8") is None     # a small array: plain np.empty
        True
    """
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if MAX_BYTES == 0 or nbytes < max(MIN_BYTES, 1) or nbytes > MAX_BYTES:
        return None
    return BufferSlot(shape, dtype).take


def release_buffers() -> None:
    """Let every slot go of its kept base (the memory is freed once no result uses it).

    Example:
        >>> release_buffers()    # safe at any time
    """
    global _held_bytes
    with _lock:
        for slot in _held.values():
            slot.cell.clear()
        _held.clear()
        _held_bytes = 0


def recycled_bytes() -> int:
    """Bytes of bases kept for reuse right now (in use by callers or not)."""
    return _held_bytes


def _self_test() -> bool:
    """True when ``take`` reuses a dropped result and never one still held."""
    global MAX_BYTES
    saved = MAX_BYTES
    MAX_BYTES = 1 << 20
    try:
        slot = BufferSlot((1,), np.uint8)
        first = slot.take()
        address = first.ctypes.data
        second = slot.take()  # `first` is alive: new memory
        fresh_while_held = second.ctypes.data != address
        address = second.ctypes.data
        del first, second
        third = slot.take()  # nothing holds it: the same memory
        reused = third.ctypes.data == address
        del third
    finally:
        release_buffers()
        MAX_BYTES = saved
    return reused and fresh_while_held


if not _self_test():  # pragma: no cover - a Python whose reference counts this module misreads
    MAX_BYTES = 0
