"""rechunk (one Alltoallv: only rows that change owner move) and exscan against NumPy, every world."""
from __future__ import annotations

import numpy as np
from collectives_testing import Failures
from hypothesis import given, settings
from hypothesis import strategies as st

from collectives import comm_counter
from collectives.ops.rechunk import overlaps


def _groups(n, split):
    return (tuple(range(0, n, 2)), tuple(range(1, n, 2))) if split and n % 2 == 0 else (tuple(range(n)),)


@st.composite
def _sizes(draw, n):
    return [draw(st.integers(0, 4)) for _ in range(n)]


def test_rechunk_moves_only_the_rows_that_change_owner(world):
    backend, n = world.backend, world.size

    @settings(max_examples=30 if world.kind == "mpi" else 60)
    @given(st.data())
    def check(data):
        groups = _groups(n, data.draw(st.booleans()))
        axis = data.draw(st.integers(0, 2))
        dtype = data.draw(st.sampled_from(["float64", "int32", "bool", "float16"]))
        before, after = {}, {}
        for g in groups:
            sizes = data.draw(_sizes(len(g)))
            total = sum(sizes)
            cuts = sorted(data.draw(st.lists(st.integers(0, total), min_size=len(g) - 1, max_size=len(g) - 1)))
            before.update(zip(g, sizes))
            after.update((r, b - a) for r, a, b in zip(g, [0, *cuts], [*cuts, total]))
        inputs = {}
        for g in groups:
            start = 0
            for r in g:
                shape = [2, 3, 2]
                shape[axis] = before[r]
                rows = np.arange(start, start + before[r])
                start += before[r]
                inputs[r] = np.broadcast_to(rows.reshape([-1 if d == axis else 1 for d in range(3)]), shape).astype(dtype)
        failures = Failures(world)
        with comm_counter() as counter:
            out = backend.rechunk({r: inputs[r] for r in world.ranks}, groups, axis=axis, in_sizes=before,
                                  out_sizes=after)
        failures.expect(counter.counts["all_to_all"] == 1, f"expected one all_to_all, got {dict(counter.counts)}")
        for r in world.ranks:
            g = next(g for g in groups if r in g)
            whole = np.concatenate([inputs[q] for q in g], axis=axis)
            start = sum(after[q] for q in g[:g.index(r)])
            want = np.take(whole, np.arange(start, start + after[r]), axis=axis)
            failures.equal(out[r], want, f"rechunk rank {r}", contiguous=False)
        failures.raise_if_any()  # every rank fails together, each with its own message

    check()


def test_overlaps_are_the_rows_sent():
    assert overlaps((3, 1), (2, 2)) == [[2, 1], [0, 1]]
    assert overlaps((0, 4, 0), (1, 1, 2)) == [[0, 0, 0], [1, 1, 2], [0, 0, 0]]
    moved = overlaps((5, 0, 2, 3), (1, 6, 0, 3))
    assert [sum(row) for row in moved] == [5, 0, 2, 3] and [sum(col) for col in zip(*moved)] == [1, 6, 0, 3]


def test_exscan_is_numpys_exclusive_cumulative_reduction(world):
    backend, n = world.backend, world.size
    for groups in {_groups(n, False), _groups(n, True)}:
        for dtype in ("float64", "int64", "float16", "bool"):
            for op in ("sum", "max", "min"):
                if dtype == "bool" and op == "sum":
                    continue
                inputs = {r: (np.arange(6).reshape(2, 3) * (r + 1) % 5).astype(dtype) for r in range(n)}
                with comm_counter() as counter:
                    out = backend.exscan({r: inputs[r] for r in world.ranks}, groups, op=op)
                assert counter.counts["scan"] == 1
                ufunc = {"sum": np.add, "max": np.maximum, "min": np.minimum}[op]
                for r in world.ranks:
                    g = next(g for g in groups if r in g)
                    before = [inputs[q] for q in g[:g.index(r)]]
                    if before:
                        want = before[0].copy()
                        for x in before[1:]:
                            want = ufunc(want, x)
                    else:
                        want = np.full((2, 3), {"sum": 0, "max": -np.inf, "min": np.inf}[op]).astype(dtype) \
                            if dtype.startswith("float") else None
                        if want is None:
                            info = np.iinfo(dtype) if dtype != "bool" else None
                            value = (op == "min") if info is None else (info.min if op == "max" else info.max)
                            want = np.full((2, 3), value if op != "sum" else 0, dtype)
                    np.testing.assert_array_equal(out[r], want.astype(dtype), err_msg=f"{dtype} {op} rank {r}")
