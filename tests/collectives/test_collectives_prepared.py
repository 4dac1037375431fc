"""Prepared MPI collectives (the redistribute hot path) give NumPy's answer on every path.

A prepared call has one body (its op's ``MpiCall``) and several ways in: the
hot path (a C-contiguous array of the prepared shape), the same call on a
strided view or a byte-swapped array, the non-blocking ``start``, and the
general method.  Each is checked against the answer NumPy computes from every
member's input (each rank can rebuild any rank's input from its seed).
"""

from __future__ import annotations

import numpy as np
import pytest

from collectives import chunk_sizes
from strategies import rounding_tolerance


def _groups(n):
    yield (tuple(range(n)),)
    if n == 4:
        yield ((0, 2), (1, 3))


def _sizes(groups, lengths):
    """World rank -> length, the group's members taking ``lengths`` in order."""
    return {r: lengths[i] for g in groups for i, r in enumerate(g)}


def _input(rank, shape, dtype, salt):
    """Rank ``rank``'s input for call ``salt``: every rank can build every rank's."""
    rng = np.random.default_rng([salt, rank])
    return (rng.standard_normal(tuple(shape)) * 10).astype(dtype)


def _ways(backend, prepared, rank, x, general):
    """The result of every way into one prepared call (and the general method) on this rank's ``x``."""
    strided = np.empty(x.shape + (2,), x.dtype)[..., 0]
    strided[...] = x
    swapped = x.astype(x.dtype.newbyteorder())
    yield "hot path", prepared.run({rank: x})[rank]
    yield "strided", prepared.run({rank: strided})[rank]
    if x.dtype.itemsize > 1 and x.dtype.kind != "b":
        yield "byte-swapped", prepared.run({rank: swapped})[rank]
    yield "start/wait", prepared.start({rank: x}).wait()[rank]
    yield "general", general({rank: x})[rank]


def _reduce(arrays, op):
    out = arrays[0].copy()
    for a in arrays[1:]:
        out = {"sum": np.add, "avg": np.add, "max": np.maximum, "min": np.minimum}[op](out, a)
    return out / len(arrays) if op == "avg" else out


def _check(got, want, terms, what, scale=0.0):
    """Equal when ``terms`` is 0; else within ``terms`` roundings of values up to ``scale`` (a sum's sum of |terms|)."""
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape, got.dtype, want.dtype)
    if terms:
        np.testing.assert_allclose(got, want, rtol=0, atol=rounding_tolerance(want.dtype, terms, scale), err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


@pytest.mark.worlds(simulated=(), mpi=(2, 4))
def test_prepared_collectives_give_numpys_answer_on_every_path(world):
    backend = world.backend
    rank = world.ranks[0]
    checked = 0
    salt = 0
    for groups in _groups(world.size):
        group = next(g for g in groups if rank in g)
        k = len(group)
        for dtype in ("float32", "float64", "int64", "complex64", "bool"):
            inexact = np.dtype(dtype).kind in "fc"
            for total, axis in ((4 * k, 0), (2 * k + 1, 0), (3 * k, 1), (k + 1, 1)):
                salt += 1
                pieces = chunk_sizes(total, k)
                shapes = {}
                for q, n in zip(group, pieces):
                    shape = [3, 2]
                    shape[axis] = n
                    shapes[q] = tuple(shape)
                inputs = {q: _input(q, shapes[q], dtype, salt) for q in group}
                x = inputs[rank]
                in_sizes = _sizes(groups, pieces)
                # all_gather of uneven and even pieces, leading and non-leading axis
                prepared = backend.prepare_all_gather(groups, {rank: x.shape}, x.dtype, axis=axis, in_sizes=in_sizes)
                want = np.concatenate([inputs[q] for q in group], axis=axis)
                general = lambda s: backend.all_gather(s, groups, axis=axis, in_sizes=in_sizes)  # noqa: E731
                for way, got in _ways(backend, prepared, rank, x, general):
                    _check(got, want, 0, f"all_gather {dtype} {shapes} axis {axis}: {way}")
                # all_to_all from `axis` to the other axis
                other = 1 - axis
                out_sizes = _sizes(groups, chunk_sizes(x.shape[other], k))
                prepared = backend.prepare_all_to_all(
                    groups, {rank: x.shape}, x.dtype, split_axis=other, concat_axis=axis, in_sizes=in_sizes,
                    out_sizes=out_sizes,
                )
                mine = group.index(rank)
                cuts = np.cumsum((0,) + chunk_sizes(x.shape[other], k))
                lead = (slice(None),) * other
                want = np.concatenate(
                    [inputs[q][lead + (slice(cuts[mine], cuts[mine + 1]),)] for q in group], axis=axis
                )
                general = lambda s: backend.all_to_all(  # noqa: E731
                    s, groups, split_axis=other, concat_axis=axis, in_sizes=in_sizes, out_sizes=out_sizes
                )
                for way, got in _ways(backend, prepared, rank, x, general):
                    _check(got, want, 0, f"all_to_all {dtype} axis {axis}: {way}")
                # reductions on a common shape
                full_shape = [3, 2]
                full_shape[axis] = total
                whole = {q: _input(q, full_shape, dtype, 10**6 + salt) for q in group}
                y = whole[rank]
                ops = ("sum", "max", "min") if dtype != "bool" else ("sum", "max")
                for op in ops + (("avg",) if inexact else ()):
                    reduced = _reduce([whole[q] for q in group], op)
                    terms = 0 if not inexact or op in ("max", "min") else 2 * k  # k - 1 additions and a division, in NumPy's sum too
                    scale = float(np.max(sum(np.abs(whole[q]) for q in group)))  # any summation order's bound
                    prepared = backend.prepare_all_reduce(groups, {rank: y.shape}, y.dtype, op=op)
                    general = lambda s: backend.all_reduce(s, groups, op=op)  # noqa: E731
                    for way, got in _ways(backend, prepared, rank, y, general):
                        _check(got, reduced.astype(y.dtype), terms, f"all_reduce {op} {dtype}: {way}", scale)
                    prepared = backend.prepare_reduce_scatter(
                        groups, {rank: y.shape}, y.dtype, op=op, axis=axis, out_sizes=in_sizes
                    )
                    lead = (slice(None),) * axis
                    cuts = np.cumsum((0,) + pieces)
                    want = reduced.astype(y.dtype)[lead + (slice(cuts[mine], cuts[mine + 1]),)]
                    general = lambda s: backend.reduce_scatter(  # noqa: E731
                        s, groups, op=op, axis=axis, out_sizes=in_sizes
                    )
                    for way, got in _ways(backend, prepared, rank, y, general):
                        _check(got, want, terms, f"reduce_scatter {op} {dtype} axis {axis}: {way}", scale)
                checked += 1
    # a result kept alive across calls is never overwritten by a later one (recycled output buffers)
    groups = (tuple(range(world.size)),)
    prepared = backend.prepare_all_reduce(groups, {rank: (256, 128)}, np.float64, op="sum")  # 256 KiB: recycled
    run = lambda x: prepared.run({rank: x})[rank]  # noqa: E731
    first = run(np.ones((256, 256))[:, ::2])
    kept = first.copy()
    second = run(np.full((256, 128), 2.0))
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_array_equal(second, np.full((256, 128), 2.0 * world.size))
    del first, kept
    third = run(np.full((256, 128), 3.0))
    np.testing.assert_array_equal(second, np.full((256, 128), 2.0 * world.size))
    np.testing.assert_array_equal(third, np.full((256, 128), 3.0 * world.size))
    # an input of another shape than the prepared one is refused, not sent
    with pytest.raises(ValueError, match=r"prepared for rank \d+'s input of shape \(256, 128\)"):
        run(np.ones((2, 2)))
    assert checked > 0
