"""exchange (one Alltoallv with any counts matrix) against NumPy, every world; and its argument checks."""
from __future__ import annotations

import numpy as np
import pytest
from collectives_testing import Failures
from hypothesis import given, settings
from hypothesis import strategies as st

from collectives import CollectiveError, comm_counter
from collectives.ops import Exchange, Rechunk
from collectives.ops.rechunk import overlaps


def _groups(n, split):
    return (tuple(range(0, n, 2)), tuple(range(1, n, 2))) if split and n % 2 == 0 else (tuple(range(n)),)


def test_exchange_sends_each_member_the_rows_named_for_it(world):
    backend, n = world.backend, world.size

    @settings(max_examples=25 if world.kind == "mpi" else 60)
    @given(st.data())
    def check(data):
        groups = _groups(n, data.draw(st.booleans()))
        axis = data.draw(st.integers(0, 2))
        dtype = data.draw(st.sampled_from(["float64", "int32", "bool", "complex64"]))
        counts = {}
        for g in groups:
            for r in g:
                counts[r] = tuple(data.draw(st.integers(0, 3)) for _ in g)
        inputs = {}
        for r in range(n):
            shape = [2, 3, 2]
            shape[axis] = sum(counts[r])
            rows = 100 * r + np.arange(shape[axis])  # row i of rank r is 100 r + i
            inputs[r] = np.broadcast_to(rows.reshape([-1 if d == axis else 1 for d in range(3)]), shape).astype(dtype)
        failures = Failures(world)
        with comm_counter() as counter:
            out = backend.exchange({r: inputs[r] for r in world.ranks}, groups, axis=axis, send_counts=counts)
        failures.expect(counter.counts["all_to_all"] == 1 and counter.total == 1,
                        f"expected one all_to_all, got {dict(counter.counts)}")
        for r in world.ranks:
            g = next(g for g in groups if r in g)
            p = g.index(r)
            want = [np.take(inputs[q], np.arange(sum(counts[q][:p]), sum(counts[q][:p + 1])), axis=axis) for q in g]
            failures.equal(out[r], np.concatenate(want, axis=axis), f"exchange rank {r}", contiguous=False)
        failures.raise_if_any()  # every rank fails together, each with its own message

    check()


def test_exchange_with_rechunk_counts_is_rechunk():
    op = Rechunk.parse(1, (0, 1, 2), axis=0, in_sizes={0: 3, 1: 0, 2: 2}, out_sizes={0: 1, 1: 2, 2: 2})
    moved = overlaps(op.in_sizes, op.out_sizes)
    same = Exchange.parse(1, (0, 1, 2), axis=0, send_counts=dict(enumerate(moved)))
    members = [np.arange(3), np.arange(3, 3), np.arange(3, 5)]
    assert [x.tolist() for x in same.simulate(members)] == [x.tolist() for x in op.simulate(members)]


def test_exchange_refuses_bad_counts(world):
    backend, n = world.backend, world.size
    group = (tuple(range(n)),)
    shards = {r: np.zeros((n, 2)) for r in world.ranks}
    with pytest.raises(CollectiveError, match=r"send_counts\[\d+\] must be \d+ non-negative ints"):
        backend.exchange(shards, group, axis=0, send_counts={r: (1,) * (n + 1) for r in range(n)})
    with pytest.raises(CollectiveError, match=r"send_counts must give a row for every rank"):
        backend.exchange(shards, group, axis=0, send_counts={})
    with pytest.raises(CollectiveError, match=r"rows to send along axis 0"):
        backend.exchange(shards, group, axis=0, send_counts={r: (2,) * n for r in range(n)})
