"""The agreement's shared-memory exchange (collectives.handshake) against an MPI Allgather of the same rows."""
from __future__ import annotations

import time

import numpy as np
import pytest

pytestmark = pytest.mark.worlds(simulated=(), mpi=(2, 4))


def _handshake(world):
    from mpi4py import MPI

    from collectives.handshake import node_handshake

    comm = MPI.COMM_WORLD.Dup()
    shake = node_handshake(comm, 32)
    assert shake is not None, "expected a shared-memory handshake: every rank of this job runs on one node"
    return comm, shake


def test_every_rank_reads_every_row_of_each_round_in_rank_order(world):
    """Rows that change every round, ranks that arrive late by turns: each round gives an Allgather's rows."""
    comm, shake = _handshake(world)
    rank, size = comm.Get_rank(), comm.Get_size()
    wrong = []
    for round_ in range(300):
        mine = np.random.default_rng([round_, rank]).integers(-2**62, 2**62, 4).tobytes()
        if round_ % 7 == rank % 7:  # this rank is late (the others wait, and may run a round ahead of it after)
            time.sleep(0.001)
        rows = bytes(shake.exchange(mine))
        if round_ % 3 == 0:  # a rank that hurries on to its next round must not overwrite a row not yet read
            expected = np.empty(32 * size, np.uint8)
            comm.Allgather(np.frombuffer(mine, np.uint8), expected)
            if rows != expected.tobytes():
                wrong.append(round_)
    assert not wrong, f"rank {rank}: rows differ from an Allgather's in rounds {wrong[:10]}"
    assert shake.round == 300


def test_a_waiting_rank_lets_mpi_progress_a_nonblocking_collective(world):
    """Rank 0 waits in the handshake while the others wait for a non-blocking Allreduce it has started: the
    handshake pokes MPI's progress engine, so the Allreduce completes and the others arrive."""
    comm, shake = _handshake(world)
    data = np.full(1 << 20, float(comm.Get_rank()))  # 8 MiB: MPI moves it in pieces, each needing progress
    out = np.empty_like(data)
    request = comm.Iallreduce(data, out)
    if comm.Get_rank() == 0:
        shake.exchange(bytes(32))
        request.Wait()
    else:
        request.Wait()
        shake.exchange(bytes(32))
    assert out[0] == sum(range(comm.Get_size())) and out[-1] == out[0]


def test_the_default_agreement_exchanges_through_shared_memory(world):
    """Every rank of this job shares a node: the backend's agreement takes the handshake, not an Allgather."""
    assert world.backend._handshake is not None
