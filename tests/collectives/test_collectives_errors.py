"""Bad calls raise the right error, on every rank, before any data moves (no hang).

After each bad call a good collective must still work, which shows that no rank
was left inside a collective.  The helpers (all_true, gather_descriptors,
barrier) and, under MPI, the launch and CUDA checks are covered here too so
that they share one MPI start-up.
"""
from __future__ import annotations

import numpy as np
import pytest
from collectives_testing import Failures, held

from collectives import CollectiveError, launched_by_mpiexec, mpi_world_size
from collectives.device import detect_cuda_aware_mpi, query_mpi_cuda_support


def test_bad_calls_raise_on_every_rank_and_helpers_agree(world):
    failures = Failures(world)
    _check_bad_calls(world, failures)
    _check_helpers(world, failures)
    failures.raise_if_any()


def _check_bad_calls(world, failures: Failures) -> None:
    backend, n = world.backend, world.size
    everyone = (tuple(range(n)),)
    good = {r: np.arange(6.0).reshape(2, 3) for r in range(n)}

    def still_works(context: str) -> None:
        out = backend.all_reduce(held(world, good), everyone)
        for r in world.ranks:
            failures.expect(np.array_equal(out[r], n * good[r]), f"after {context}: wrong all_reduce")

    objects = {r: np.array([object(), object()]) for r in range(n)}
    only_rank0_objects = {r: objects[r] if r == 0 else np.zeros(2) for r in range(n)}
    dtype_mismatch = {r: np.zeros(2, np.float32 if r == 0 else np.float64) for r in range(n)}
    shape_mismatch = {r: np.zeros(2 + (r == n - 1)) for r in range(n)}
    ints = {r: np.zeros(3, np.int64) for r in range(n)}
    cases = [
        ("object dtype", lambda: backend.all_gather(held(world, objects), everyone), TypeError, "object"),
        ("object dtype, check=False",
         lambda: backend.all_reduce(held(world, objects), everyone, check=False), TypeError, "object"),
        ("str dtype", lambda: backend.broadcast(held(world, {r: np.array(["a"]) for r in range(n)}), everyone),
         TypeError, "<U1"),
        ("object dtype on rank 0 only", lambda: backend.all_reduce(held(world, only_rank0_objects), everyone),
         TypeError, "object"),
        ("avg of ints", lambda: backend.all_reduce(held(world, ints), everyone, op="avg"), TypeError, "avg"),
        ("unknown op", lambda: backend.all_reduce(held(world, good), everyone, op="prod"),
         CollectiveError, "'prod'"),
        ("groups not a partition (rank twice)",
         lambda: backend.all_reduce(held(world, good), ((*range(n), 0),)), CollectiveError, "partition"),
        ("groups with a rank outside the world",
         lambda: backend.all_gather(held(world, good), ((*range(n), n),)), CollectiveError, "partition"),
        ("root out of range", lambda: backend.broadcast(held(world, good), everyone, root=n),
         CollectiveError, "root"),
        ("wrong key set", lambda: backend.all_gather({}, everyone), CollectiveError, "expected shards for ranks"),
        ("axis out of range", lambda: backend.all_gather(held(world, good), everyone, axis=2),
         CollectiveError, "axis 2"),
        ("same split and concat axis",
         lambda: backend.all_to_all(held(world, good), everyone, split_axis=1, concat_axis=-1),
         CollectiveError, "split_axis != concat_axis"),
        ("in_sizes missing ranks",
         lambda: backend.all_gather(held(world, good), everyone, in_sizes={}), CollectiveError, "in_sizes"),
        ("in_sizes not matching the arrays",
         lambda: backend.all_gather(held(world, good), everyone, in_sizes={r: 1 for r in range(n)}),
         CollectiveError, "in_sizes"),
        ("out_sizes not adding up",
         lambda: backend.reduce_scatter(held(world, good), everyone, out_sizes={r: 3 for r in range(n)}),
         CollectiveError, "out_sizes"),
    ]
    if n > 1:
        cases += [
            ("dtype mismatch across ranks", lambda: backend.all_reduce(held(world, dtype_mismatch), everyone),
             CollectiveError, "dtype mismatch"),
            ("dtype mismatch in all_gather", lambda: backend.all_gather(held(world, dtype_mismatch), everyone),
             CollectiveError, "dtype mismatch"),
            ("shape mismatch", lambda: backend.all_reduce(held(world, shape_mismatch), everyone),
             CollectiveError, "shape mismatch"),
            ("shape mismatch in broadcast", lambda: backend.broadcast(held(world, shape_mismatch), everyone),
             CollectiveError, "shape mismatch"),
            ("rank missing from groups",
             lambda: backend.all_reduce(held(world, good), (tuple(range(n - 1)),)), CollectiveError, "partition"),
        ]
    for context, call, error, match in cases:
        failures.raises(call, error, match, context)
        still_works(context)


def _check_helpers(world, failures: Failures) -> None:
    backend, n = world.backend, world.size
    failures.expect(backend.all_true({r: True for r in world.ranks}) is True, "all_true of all True")
    failures.expect(
        backend.all_true({r: r != n - 1 for r in world.ranks}) is False, "all_true with one False"
    )
    descriptors = backend.gather_descriptors({r: tuple(range(r, 2 * r + 1)) for r in world.ranks})
    failures.expect(
        descriptors == {r: tuple(range(r, 2 * r + 1)) for r in range(n)}, f"descriptors {descriptors}"
    )
    failures.expect(backend.gather_descriptors({r: () for r in world.ranks}) == {r: () for r in range(n)},
                    "empty descriptors")
    failures.raises(
        lambda: backend.gather_descriptors({r: tuple(range(17 if r == 0 else 2)) for r in world.ranks}),
        CollectiveError, "at most 16", "too long descriptor on rank 0",
    )
    backend.barrier()
    if world.kind == "mpi":
        failures.expect(launched_by_mpiexec(), "launched_by_mpiexec() under mpiexec")
        failures.expect(mpi_world_size() == n, f"mpi_world_size() {mpi_world_size()} != {n}")
        # the mpich wheel from PyPI is not CUDA-aware, and says so through MPIX_GPU_query_support
        failures.expect(query_mpi_cuda_support() is False, f"ctypes query {query_mpi_cuda_support()}")
        failures.expect(detect_cuda_aware_mpi({}) is False, "default decision")


@pytest.mark.worlds(simulated=(2,), mpi=())
def test_failures_helper_reports_local_messages(world):
    failures = Failures(world)
    failures.expect(False, "a local failure")
    with pytest.raises(AssertionError, match="a local failure"):
        failures.raise_if_any()
