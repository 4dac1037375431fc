"""Prepared MPI collectives (the redistribute hot path) give exactly what the general methods give."""

from __future__ import annotations

import numpy as np
import pytest

from collectives import chunk_sizes


def _groups(n):
    yield (tuple(range(n)),)
    if n == 4:
        yield ((0, 2), (1, 3))


def _sizes(groups, lengths):
    """World rank -> length, the group's members taking ``lengths`` in order."""
    return {r: lengths[i] for g in groups for i, r in enumerate(g)}


@pytest.mark.worlds(simulated=(), mpi=(2, 4))
def test_prepared_collectives_equal_the_general_ones(world):
    backend = world.backend
    rank = world.ranks[0]
    rng = np.random.default_rng(5)
    checked = 0
    for groups in _groups(world.size):
        k = len(groups[0])
        position = next(g.index(rank) for g in groups if rank in g)
        for dtype in ("float32", "float64", "int64", "complex64", "bool"):
            for total, axis in ((4 * k, 0), (2 * k + 1, 0), (3 * k, 1), (k + 1, 1)):
                pieces = chunk_sizes(total, k)
                mine = pieces[position]
                shape = [3, 2]
                shape[axis] = mine
                x = (rng.standard_normal(tuple(shape)) * 10).astype(dtype)
                in_sizes = _sizes(groups, pieces)
                # all_gather of uneven and even pieces, leading and non-leading axis
                want = backend.all_gather({rank: x}, groups, axis=axis, in_sizes=in_sizes, check=False)[rank]
                got = backend.prepare_all_gather(groups, x.shape, x.dtype, axis=axis, in_sizes=in_sizes)(x)
                np.testing.assert_array_equal(got, want)
                # all_to_all from `axis` to the other axis
                other = 1 - axis
                full_other = x.shape[other]
                out_sizes = _sizes(groups, chunk_sizes(full_other, k))
                want = backend.all_to_all(
                    {rank: x}, groups, split_axis=other, concat_axis=axis, in_sizes=in_sizes,
                    out_sizes=out_sizes, check=False,
                )[rank]
                got = backend.prepare_all_to_all(
                    groups, x.shape, x.dtype, split_axis=other, concat_axis=axis, in_sizes=in_sizes,
                    out_sizes=out_sizes,
                )(x)
                np.testing.assert_array_equal(got, want)
                # reductions on a common shape
                full_shape = [3, 2]
                full_shape[axis] = total
                y = (rng.standard_normal(tuple(full_shape)) * 10).astype(dtype)
                ops = ("sum", "max", "min") if dtype != "bool" else ("sum", "max")
                for op in ops + (("avg",) if np.dtype(dtype).kind in "fc" else ()):
                    want = backend.all_reduce({rank: y}, groups, op=op, check=False)[rank]
                    got = backend.prepare_all_reduce(groups, y.shape, y.dtype, op=op)(y)
                    np.testing.assert_array_equal(got, want)
                    want = backend.reduce_scatter(
                        {rank: y}, groups, op=op, axis=axis, out_sizes=in_sizes, check=False
                    )[rank]
                    got = backend.prepare_reduce_scatter(
                        groups, y.shape, y.dtype, op=op, axis=axis, out_sizes=in_sizes
                    )(y)
                    np.testing.assert_array_equal(got, want)
                checked += 1
    # a non-contiguous input and a result kept alive across calls are both handled
    groups = (tuple(range(world.size)),)
    prepared = backend.prepare_all_reduce(groups, (256, 128), np.float64, op="sum")  # 256 KiB: recycled buffers
    base = np.ones((256, 256))
    first = prepared(base[:, ::2])
    kept = first.copy()
    second = prepared(np.full((256, 128), 2.0))
    np.testing.assert_array_equal(first, kept)  # a later result never overwrites a live one
    np.testing.assert_array_equal(second, np.full((256, 128), 2.0 * world.size))
    del first, kept
    third = prepared(np.full((256, 128), 3.0))
    np.testing.assert_array_equal(second, np.full((256, 128), 2.0 * world.size))
    np.testing.assert_array_equal(third, np.full((256, 128), 3.0 * world.size))
    assert checked > 0
