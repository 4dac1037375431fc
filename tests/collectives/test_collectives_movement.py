"""all_gather, all_to_all, broadcast and scatter against NumPy on the full data.

Each test runs on the simulated backend (world sizes 1, 2, 3, 4, 8) and under
MPI (2 and 4 processes); one test function covers many cases, since every
MPI case pays a process start-up.
"""
from __future__ import annotations

import numpy as np
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
    split_along,
    torch_chunks,
    unchanged,
)

# (shape of every member's array, axis); the axis length is set per member
GATHER_LAYOUTS = (((3, 2), 0), ((2, 3, 2), 1), ((2, 3), -1))
ALL_DTYPES = DTYPES + ((BFLOAT16,) if BFLOAT16 is not None else ())


def test_all_gather_and_all_to_all_match_numpy(world):
    failures = Failures(world)
    _check_all_gather(world, failures)
    _check_all_to_all(world, failures)
    failures.raise_if_any()


def _check_all_gather(world, failures: Failures) -> None:
    backend, n = world.backend, world.size
    rng = np.random.default_rng(1)
    for groups in partitions(n):
        for dtype in ALL_DTYPES:
            for base_shape, axis in GATHER_LAYOUTS:
                for uneven in (False, True):
                    lengths = {r: int(rng.integers(0, 4)) if uneven else 2 for r in range(n)}
                    inputs = {}
                    for r in range(n):
                        shape = list(base_shape)
                        shape[axis] = lengths[r]
                        inputs[r] = make_array(rng, tuple(shape), dtype)
                        if uneven:  # uneven cases also exercise strided inputs
                            inputs[r] = non_contiguous(inputs[r])
                    copies = {r: inputs[r].copy() for r in world.ranks}
                    context = f"all_gather groups={groups} {np.dtype(dtype)} axis={axis} lengths={lengths}"
                    out = backend.all_gather(
                        held(world, inputs), groups, axis=axis, in_sizes=lengths if uneven else None
                    )
                    failures.expect(sorted(out) == list(world.ranks), f"{context}: keys {sorted(out)}")
                    for r in world.ranks:
                        expected = np.concatenate([inputs[m] for m in group_of(groups, r)], axis=axis)
                        failures.equal(out[r], expected, f"{context} rank {r}")
                    unchanged(failures, inputs, copies, context)
                    independent(failures, out, held(world, inputs), context)


def _check_all_to_all(world, failures: Failures) -> None:
    """Shard(i) -> Shard(j): member q holds chunk q of a global array along i and ends
    with chunk p along j, for even and torch.chunk-uneven (including empty) pieces."""
    backend, n = world.backend, world.size
    rng = np.random.default_rng(2)
    cases = (((4, 6), 0, 1), ((4, 6), 1, 0), ((2, 5, 3), 2, 1), ((5, 2, 3), 0, -1), ((3, 4), 1, 0))
    for groups in partitions(n):
        for dtype in ALL_DTYPES:
            for full_shape, shard_axis, target_axis in cases:
                inputs, expected, in_sizes, out_sizes = {}, {}, {}, {}
                for index, group in enumerate(groups):
                    k = len(group)
                    full = make_array(rng, full_shape, dtype)
                    before = split_along(full, shard_axis, torch_chunks(full_shape[shard_axis], k))
                    after = split_along(full, target_axis, torch_chunks(full_shape[target_axis], k))
                    for position, r in enumerate(group):
                        inputs[r] = before[position] if index % 2 else non_contiguous(before[position])
                        expected[r] = after[position]
                        in_sizes[r] = before[position].shape[shard_axis]
                        out_sizes[r] = after[position].shape[target_axis]
                copies = {r: inputs[r].copy() for r in world.ranks}
                context = f"all_to_all groups={groups} {np.dtype(dtype)} {full_shape} S({shard_axis})->S({target_axis})"
                out = backend.all_to_all(
                    held(world, inputs), groups, split_axis=target_axis, concat_axis=shard_axis,
                    in_sizes=in_sizes, out_sizes=out_sizes,
                )
                for r in world.ranks:
                    failures.equal(out[r], expected[r], f"{context} rank {r}")
                unchanged(failures, inputs, copies, context)
                independent(failures, out, held(world, inputs), context)
    # sizes left to the defaults: torch.chunk of each member's own split length,
    # every member's own length along concat_axis
    for groups in partitions(n):
        inputs = {r: make_array(rng, (3, 5), np.float64) for r in range(n)}
        out = backend.all_to_all(held(world, inputs), groups, split_axis=1, concat_axis=0)
        for r in world.ranks:
            group = group_of(groups, r)
            p = group.index(r)
            pieces = [split_along(inputs[q], 1, torch_chunks(5, len(group)))[p] for q in group]
            failures.equal(out[r], np.concatenate(pieces, axis=0), f"all_to_all defaults {groups} rank {r}")


def test_broadcast_and_scatter_match_numpy(world):
    backend, n = world.backend, world.size
    failures = Failures(world)
    rng = np.random.default_rng(3)
    for groups in partitions(n):
        k_min = min(len(g) for g in groups)
        for dtype in ALL_DTYPES:
            for root in sorted({0, k_min - 1}):
                shape = (3, 5)
                sources = {g: make_array(rng, shape, dtype) for g in groups}
                inputs = {}
                for g in groups:
                    for position, r in enumerate(g):
                        # only the root's data is read: others pass a zero-copy placeholder
                        inputs[r] = (
                            non_contiguous(sources[g]) if position == root
                            else np.broadcast_to(np.zeros((), dtype), shape)
                        )
                copies = {r: inputs[r].copy() for r in world.ranks}
                context = f"broadcast groups={groups} {np.dtype(dtype)} root={root}"
                out = backend.broadcast(held(world, inputs), groups, root=root)
                for r in world.ranks:
                    failures.equal(out[r], sources[group_of(groups, r)], f"{context} rank {r}")
                unchanged(failures, inputs, copies, context)
                independent(failures, out, held(world, inputs), context)

                for axis, explicit in ((0, False), (1, False), (-1, True)):
                    out_sizes = None
                    if explicit:
                        out_sizes = {}
                        for g in groups:
                            cuts = np.sort(rng.integers(0, shape[axis] + 1, size=len(g) - 1))
                            sizes = np.diff([0, *cuts, shape[axis]])
                            out_sizes.update({r: int(s) for r, s in zip(g, sizes)})
                    context = f"scatter groups={groups} {np.dtype(dtype)} root={root} axis={axis} sizes={out_sizes}"
                    out = backend.scatter(
                        held(world, inputs), groups, root=root, axis=axis, out_sizes=out_sizes
                    )
                    for r in world.ranks:
                        g = group_of(groups, r)
                        sizes = (
                            [out_sizes[m] for m in g] if explicit
                            else torch_chunks(shape[axis], len(g))
                        )
                        piece = split_along(sources[g], axis, sizes)[g.index(r)]
                        failures.equal(out[r], piece, f"{context} rank {r}")
                    unchanged(failures, inputs, copies, context)
                    independent(failures, out, held(world, inputs), context)
    failures.raise_if_any()
