"""all_reduce and reduce_scatter against NumPy on the full data, for every reduce op."""
from __future__ import annotations

import numpy as np
import pytest
from collectives_testing import (
    BFLOAT16,
    DTYPES,
    Failures,
    group_of,
    held,
    independent,
    make_array,
    non_contiguous,
    partitions,
    reduce_in_group_order,
    split_along,
    torch_chunks,
    unchanged,
)

ALL_DTYPES = DTYPES + ((BFLOAT16,) if BFLOAT16 is not None else ())
OPS = ("sum", "avg", "max", "min")


def _ops_for(dtype) -> tuple[str, ...]:
    return ("sum", "max", "min") if np.dtype(dtype).kind in "biu" else OPS


def test_all_reduce_and_reduce_scatter_match_numpy(world):
    failures = Failures(world)
    _check_all_reduce(world, failures)
    _check_reduce_scatter(world, failures)
    failures.raise_if_any()


def _check_all_reduce(world, failures: Failures) -> None:
    backend, n = world.backend, world.size
    rng = np.random.default_rng(4)
    for groups in partitions(n):
        for dtype in ALL_DTYPES:
            for op in _ops_for(dtype):
                for shape in ((3, 4), (), (0, 2)):
                    inputs = {r: make_array(rng, shape, dtype) for r in range(n)}
                    if shape == (3, 4):
                        inputs = {r: non_contiguous(x) if r % 2 else x for r, x in inputs.items()}
                    copies = {r: inputs[r].copy() for r in world.ranks}
                    context = f"all_reduce groups={groups} {np.dtype(dtype)} {op} shape={shape}"
                    out = backend.all_reduce(held(world, inputs), groups, op=op)
                    for r in world.ranks:
                        expected = reduce_in_group_order((inputs[m] for m in group_of(groups, r)), op)
                        failures.equal(out[r], expected, f"{context} rank {r}")
                    unchanged(failures, inputs, copies, context)
                    independent(failures, out, held(world, inputs), context)

    # NaN propagates like np.maximum/np.minimum (MPI's own MAX/MIN would not)
    for op in ("max", "min", "sum"):
        inputs = {r: np.array([np.nan if r == 0 else 1.0, float(r), np.nan], np.float32) for r in range(n)}
        out = backend.all_reduce(held(world, inputs), (tuple(range(n)),), op=op)
        expected = reduce_in_group_order((inputs[m] for m in range(n)), op)
        for r in world.ranks:
            failures.equal(out[r], expected, f"all_reduce NaN {op} rank {r}")

    # complex max/min are lexicographic, like NumPy
    inputs = {r: np.array([1 + 2j * r, 1 - 1j * r, r + 0j], np.complex128) for r in range(n)}
    for op in ("max", "min"):
        out = backend.all_reduce(held(world, inputs), (tuple(range(n)),), op=op)
        expected = reduce_in_group_order((inputs[m] for m in range(n)), op)
        for r in world.ranks:
            failures.equal(out[r], expected, f"all_reduce complex {op} rank {r}")

    # non-integer data: the reduction order may differ, so compare with a tight tolerance
    inputs = {r: np.random.default_rng(100 + r).standard_normal((5, 7)) for r in range(n)}
    out = backend.all_reduce(held(world, inputs), (tuple(range(n)),), op="avg")
    expected = np.mean(np.stack([inputs[m] for m in range(n)]), axis=0)
    for r in world.ranks:
        failures.close(out[r], expected, f"all_reduce random avg rank {r}", rtol=1e-12)

    # the simulated backend gives every member bitwise the same result
    if world.kind == "simulated":
        out = backend.all_reduce(inputs, (tuple(range(n)),), op="sum")
        for r in range(1, n):
            failures.expect(out[r].tobytes() == out[0].tobytes(), f"member {r} differs bitwise")


def _check_reduce_scatter(world, failures: Failures) -> None:
    backend, n = world.backend, world.size
    rng = np.random.default_rng(5)
    layouts = (((5, 3), 0), ((2, 7, 3), 1), ((2, 3, 4), -1), ((0, 3), 1))
    for groups in partitions(n):
        for dtype in ALL_DTYPES:
            for op in _ops_for(dtype):
                for shape, axis in layouts:
                    for explicit in (False, True):
                        out_sizes = None
                        if explicit:
                            out_sizes = {}
                            for g in groups:
                                cuts = np.sort(rng.integers(0, shape[axis] + 1, size=len(g) - 1))
                                sizes = np.diff([0, *cuts, shape[axis]])
                                out_sizes.update({r: int(s) for r, s in zip(g, sizes)})
                        inputs = {r: make_array(rng, shape, dtype) for r in range(n)}
                        if explicit:
                            inputs = {r: non_contiguous(x) for r, x in inputs.items()}
                        copies = {r: inputs[r].copy() for r in world.ranks}
                        context = (f"reduce_scatter groups={groups} {np.dtype(dtype)} {op} "
                                   f"shape={shape} axis={axis} sizes={out_sizes}")
                        out = backend.reduce_scatter(
                            held(world, inputs), groups, op=op, axis=axis, out_sizes=out_sizes
                        )
                        for r in world.ranks:
                            g = group_of(groups, r)
                            total = reduce_in_group_order((inputs[m] for m in g), op)
                            sizes = [out_sizes[m] for m in g] if explicit else torch_chunks(shape[axis], len(g))
                            expected = split_along(total, axis, sizes)[g.index(r)]
                            failures.equal(out[r], expected, f"{context} rank {r}")
                        unchanged(failures, inputs, copies, context)
                        independent(failures, out, held(world, inputs), context)


def test_float_errors_in_a_reduction_follow_numpy_errstate_on_every_rank(world):
    """float16 overflows and float max/min run as NumPy inside MPI: the error comes after the collective, on every
    rank, as np.errstate says (never an MPI abort from inside the reduction)."""
    backend = world.backend
    groups = (tuple(range(world.size)),)
    big = {r: np.full((2, 3), 40000, np.float16) for r in world.ranks}
    nan = {r: np.array([np.nan if r == 0 else 1.0, 2.0]) for r in world.ranks}
    if world.size > 1:
        with np.errstate(over="raise"):
            with pytest.raises(FloatingPointError, match="overflow"):
                backend.all_reduce(big, groups, op="sum")
            with pytest.raises(FloatingPointError, match="overflow"):
                backend.reduce_scatter({r: np.full((world.size, 3), 40000, np.float16) for r in world.ranks}, groups)
    with np.errstate(over="ignore"):
        out = backend.all_reduce(big, groups, op="sum")
        want = np.inf if world.size > 1 else 40000
        assert all(np.all(out[r] == want) for r in world.ranks)
    with np.errstate(all="raise"):  # max with NaN: no floating-point error in NumPy either
        out = backend.all_reduce(nan, groups, op="max")
        assert all(np.isnan(out[r][0]) and out[r][1] == 2.0 for r in world.ranks)
    # the ranks are in step afterwards
    out = backend.all_reduce({r: np.ones(2) for r in world.ranks}, groups)
    assert all(np.all(out[r] == world.size) for r in world.ranks)
