"""CuPy arrays: computed with CuPy on the simulated backend, staged through host memory
under MPI (the PyPI MPI wheels are not CUDA-aware).  Skipped without CuPy or a CUDA device."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from collectives_testing import Failures, group_of, held, make_array, reduce_in_group_order, split_along, torch_chunks

from collectives import array_module

HAS_CUPY = importlib.util.find_spec("cupy") is not None


@pytest.mark.gpu
@pytest.mark.worlds(simulated=(1, 2, 4), mpi=(2, 4) if HAS_CUPY else ())
def test_cupy_arrays_match_numpy(world, cupy):
    backend, n = world.backend, world.size
    failures = Failures(world)
    rng = np.random.default_rng(7)
    groups_list = [(tuple(range(n)),)] + ([((0, 2), (1, 3))] if n == 4 else [])

    def check(out, expected, context):
        for r in world.ranks:
            failures.expect(isinstance(out[r], cupy.ndarray), f"{context}: rank {r} got {type(out[r])}")
            failures.equal(cupy.asnumpy(out[r]), expected[r], f"{context} rank {r}")

    for groups in groups_list:
        for dtype in (np.float32, np.int64, np.float16, np.complex64, np.bool_):
            host = {r: make_array(rng, (3, 4), dtype) for r in range(n)}
            device = {r: cupy.asarray(x) for r, x in host.items()}
            failures.expect(array_module(device[0]) is cupy, "array_module of a cupy array")
            shards = held(world, device)
            ctx = f"{groups} {np.dtype(dtype)}"

            lengths = {r: r % 3 for r in range(n)}
            gather_host = {r: host[r][:, :lengths[r]] for r in range(n)}
            out = backend.all_gather(held(world, {r: cupy.asarray(x) for r, x in gather_host.items()}),
                                     groups, axis=1, in_sizes=lengths)
            check(out, {r: np.concatenate([gather_host[m] for m in group_of(groups, r)], axis=1)
                        for r in world.ranks}, f"all_gather {ctx}")

            for op in ("sum", "max", "min") + (("avg",) if np.dtype(dtype).kind in "fc" else ()):
                if np.dtype(dtype).kind == "c" and op in ("max", "min"):
                    continue  # CuPy has no complex maximum/minimum
                out = backend.all_reduce(shards, groups, op=op)
                check(out, {r: reduce_in_group_order((host[m] for m in group_of(groups, r)), op)
                            for r in world.ranks}, f"all_reduce {op} {ctx}")
                handle = backend.ireduce_scatter(shards, groups, op=op, axis=1)
                expected = {}
                for r in world.ranks:
                    g = group_of(groups, r)
                    total = reduce_in_group_order((host[m] for m in g), op)
                    expected[r] = split_along(total, 1, torch_chunks(4, len(g)))[g.index(r)]
                check(handle.wait(), expected, f"ireduce_scatter {op} {ctx}")

            out = backend.iall_to_all(shards, groups, split_axis=1, concat_axis=0).wait()
            expected = {}
            for r in world.ranks:
                g = group_of(groups, r)
                pieces = [split_along(host[q], 1, torch_chunks(4, len(g)))[g.index(r)] for q in g]
                expected[r] = np.concatenate(pieces, axis=0)
            check(out, expected, f"all_to_all {ctx}")

            out = backend.broadcast(shards, groups, root=0)
            check(out, {r: host[group_of(groups, r)[0]] for r in world.ranks}, f"broadcast {ctx}")
            out = backend.scatter(shards, groups, root=0, axis=0)
            expected = {}
            for r in world.ranks:
                g = group_of(groups, r)
                expected[r] = split_along(host[g[0]], 0, torch_chunks(3, len(g)))[g.index(r)]
            check(out, expected, f"scatter {ctx}")

            for r in world.ranks:
                failures.expect(bool((cupy.asnumpy(device[r]) == host[r]).all()), f"input of rank {r} changed")
    failures.raise_if_any()


@pytest.mark.gpu
def test_cupy_staging_and_packing(monkeypatch, cupy):
    """The one staging helper: host round trip by default, CuPy buffers when CUDA-aware;
    and the packing the MPI backend does on whichever module holds the data."""
    from collectives import device
    from collectives.packing import block_receiver, piece_packer

    x = cupy.arange(24, dtype=cupy.float32).reshape(4, 6)
    monkeypatch.setattr(device, "cuda_aware_mpi", lambda: False)
    staged = device.stage_for_mpi(x)
    assert isinstance(staged.buffer, np.ndarray) and staged.xp is np and staged.sync is None
    assert isinstance(staged.restore(staged.buffer), cupy.ndarray)
    assert device.stage_for_mpi(x, transfer=False).buffer is x

    monkeypatch.setattr(device, "cuda_aware_mpi", lambda: True)
    staged = device.stage_for_mpi(x)
    assert staged.buffer is x and staged.xp is cupy and staged.restore is None
    staged.sync()
    assert isinstance(device.stage_for_mpi(x, host_only=True).buffer, np.ndarray)

    for sizes in ((2, 2, 2), (3, 0, 2, 1)):
        packed = piece_packer(x.shape, sizes, 1, x.dtype, cupy)(x)
        assert isinstance(packed, cupy.ndarray) and packed.size == x.size
        shapes = [(4, s) for s in sizes]
        recv_shape, finish = block_receiver(shapes, 1, x.dtype, cupy)
        restored = finish(packed.reshape(recv_shape))
        assert bool((restored == x).all())
