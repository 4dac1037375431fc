"""A node's ranks exchange one small row through shared memory: an ``Allgather`` of a few bytes without MPI.

The default agreement (:mod:`collectives.spmd`) runs before every collective:
each rank contributes a 32-byte row and reads everyone's.  When every rank of
the communicator lives on one node, :class:`NodeHandshake` does that through
an MPI-3 shared window (``MPI_Win_allocate_shared``): a rank writes its row into
its slot, then a round number beside it, and waits until every slot carries
the round.  About 0.6-0.9 us at 2 ranks where an ``Allgather`` of 32 bytes
takes 1.7-2.2 us on the same machine (``benchmarks/redistribute.py``
``--agreement``).  Ranks on several nodes keep the ``Allgather``
(:func:`node_handshake` returns None); so does ``DTENSOR_NP_AGREE=mpi``.

Two slots per rank, used by round parity: a rank writes round ``k + 2`` only
after every rank wrote ``k + 1``, which each does after reading round ``k``, so
a row is never overwritten before every rank has read it, and every rank reads
the same rows (the same decision on every rank, as with an ``Allgather``).  A
waiting rank spins a few times, then yields its core (ranks may outnumber
cores) and now and then lets MPI progress (``Iprobe``), so non-blocking
collectives that other ranks wait on still complete.  On x86-64 stores and
loads keep their program order; elsewhere ``MPI_Win_sync`` orders them.

Example, under ``mpiexec -n 2`` (``tests/collectives/test_handshake.py`` checks
each round against an ``Allgather`` of the same rows)::

    shake = node_handshake(MPI.COMM_WORLD.Dup(), 8)
    rows = bytes(shake.exchange(b"rank %3d" % MPI.COMM_WORLD.rank))
    assert rows == b"rank   0rank   1"
"""
from __future__ import annotations

import os
import platform
from typing import Any, Optional

__all__ = ["NodeHandshake", "node_handshake"]

_SPINS = 20  # busy reads before a waiting rank yields its core (4 ranks on 2 cores: 5 us a round, 50 us at 1000)
_PROGRESS_EVERY = 32  # yields between two pokes of MPI's progress engine
_ORDERED = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "x86")  # total store order


class NodeHandshake:
    """The rows of one communicator's ranks in one shared window (made by :func:`node_handshake`)."""

    __slots__ = ("comm", "window", "rank", "size", "row_bytes", "rounds", "round", "_mine", "_own", "_others",
                 "_rows", "_any")

    def __init__(self, comm: Any, window: Any, memory: memoryview, row_bytes: int) -> None:
        from mpi4py import MPI

        self.comm, self.window, self.row_bytes = comm, window, row_bytes
        self.rank, self.size = rank, size = comm.Get_rank(), comm.Get_size()
        block = size * row_bytes
        self.rounds = memory[2 * block: 2 * block + 2 * size * 8].cast("q")  # [parity][rank]: each slot's round
        self.round = 0
        # per parity: this rank's row slot, its round slot, the other ranks' round slots, and every row
        self._rows = tuple(memory[p * block: (p + 1) * block] for p in (0, 1))
        self._mine = tuple(rows[rank * row_bytes: (rank + 1) * row_bytes] for rows in self._rows)
        self._own = (rank, size + rank)
        self._others = tuple(tuple(p * size + r for r in range(size) if r != rank) for p in (0, 1))
        self._any = (MPI.ANY_SOURCE, MPI.ANY_TAG)

    def exchange(self, mine: bytes) -> memoryview:
        """Put ``mine`` (``row_bytes`` long) in this rank's slot; every rank's row, in rank order.

        The view is valid until this rank's next ``exchange`` (copy what must outlive it).
        """
        round_ = self.round = self.round + 1  # the watchdog reads ``round_``: one wait, however long it spins
        parity = round_ & 1
        self._mine[parity][:] = mine
        if not _ORDERED:
            self.window.Sync()  # the row before its round number
        rounds = self.rounds
        rounds[self._own[parity]] = round_
        for slot in self._others[parity]:
            if rounds[slot] != round_:
                self._wait(slot, round_)
        if not _ORDERED:
            self.window.Sync()  # the rows after their round numbers
        return self._rows[parity]

    def _wait(self, slot: int, round_: int) -> None:
        """Until ``slot`` holds ``round_``: spin, then yield the core, poking MPI's progress now and then."""
        rounds, spins = self.rounds, 0
        while rounds[slot] != round_:
            spins += 1
            if spins > _SPINS:
                os.sched_yield()
                if spins % _PROGRESS_EVERY == 0:
                    self.comm.Iprobe(*self._any)
            if not _ORDERED:
                self.window.Sync()


def node_handshake(comm: Any, row_bytes: int) -> Optional[NodeHandshake]:
    """A :class:`NodeHandshake` over ``comm``, or None where its ranks span nodes or a shared window fails.

    Collective over ``comm``: every rank calls it, and every rank gets a handshake or every rank gets None.
    """
    from mpi4py import MPI

    if row_bytes <= 0 or row_bytes % 8:
        raise ValueError(f"node_handshake: expected a row of a positive multiple of 8 bytes, got {row_bytes}")
    size = comm.Get_size()
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        if node.Get_size() != size:
            return None
        window, memory = None, None
        try:
            nbytes = 2 * size * (row_bytes + 8) if comm.Get_rank() == 0 else 0
            window = MPI.Win.Allocate_shared(nbytes, 1, comm=node)
            buffer, _ = window.Shared_query(0)
            memory = memoryview(buffer).cast("B")
            if comm.Get_rank() == 0:
                memory[:] = bytes(len(memory))
            if not _ORDERED:
                window.Lock_all(MPI.MODE_NOCHECK)  # Win_sync orders loads and stores inside an access epoch
            made = True
        except MPI.Exception:
            made = False
        if not comm.allreduce(made, op=MPI.LAND):  # every rank has its window (zeroed by rank 0), or none uses one
            if window is not None:
                window.Free()
            return None
        return NodeHandshake(comm, window, memory, row_bytes)
    finally:
        node.Free()
