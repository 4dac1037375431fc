"""Counting the collectives issued: ``comm_counter()`` for tests and benchmarks."""
from __future__ import annotations

from types import TracebackType

from .ops import KINDS

__all__ = ["KINDS", "CommCounter", "active", "comm_counter", "record", "record_implicit_gather"]

active: list[CommCounter] = []
"""The counters recording right now (``record`` adds to each; a hot path may test it before calling)."""


class CommCounter:
    """Counts of collectives (and bytes) issued while it is active.

    ``counts[kind]`` is the number of calls of ``kind`` (every kind starts at
    0); ``bytes[kind]`` adds, per call, the largest input array among the
    shards this process passed.  One call counts 1 on both backends, whatever
    the number of groups; asynchronous ops count when issued.  Counters nest:
    every active counter records.  ``implicit_gathers`` and ``implicit_bytes``
    count the arrays gathered whole because a library asked for a NumPy array
    (``np.asarray(x)``; their collectives are counted in ``counts`` too).

    Example:
        >>> import numpy as np
        >>> from collectives import SimulatedBackend, comm_counter
        >>> with comm_counter() as counter:
        ...     _ = SimulatedBackend(2).all_reduce({0: np.ones(4), 1: np.ones(4)}, ((0, 1),))
        >>> counter.counts["all_reduce"], counter.bytes["all_reduce"]
        (1, 32)
    """

    def __init__(self) -> None:
        self.counts: dict[str, int] = dict.fromkeys(KINDS, 0)
        self.bytes: dict[str, int] = dict.fromkeys(KINDS, 0)
        self.implicit_gathers = 0
        self.implicit_bytes = 0

    @property
    def total(self) -> int:
        """The number of collectives of every kind."""
        return sum(self.counts.values())

    def __enter__(self) -> CommCounter:
        active.append(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for i in range(len(active) - 1, -1, -1):
            if active[i] is self:
                del active[i]
                break

    def __repr__(self) -> str:
        issued = {kind: n for kind, n in self.counts.items() if n}
        if self.implicit_gathers:
            issued["implicit_gathers"] = self.implicit_gathers
        return f"CommCounter({issued})"


def comm_counter() -> CommCounter:
    """A new counter; use it as ``with comm_counter() as c: ...``.

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> x = dt.distribute_tensor(np.arange(4.0), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> with comm_counter() as c:
        ...     _ = x.full_tensor()
        >>> c.counts["all_gather"]
        1
    """
    return CommCounter()


def record(kind: str, nbytes: int) -> None:
    """Count one collective of ``kind`` moving an input of ``nbytes`` (backends call this)."""
    for counter in active:
        counter.counts[kind] += 1
        counter.bytes[kind] += nbytes


def record_implicit_gather(nbytes: int) -> None:
    """Count one array gathered whole for a NumPy conversion (``np.asarray(x)``), of ``nbytes``."""
    for counter in active:
        counter.implicit_gathers += 1
        counter.implicit_bytes += nbytes
