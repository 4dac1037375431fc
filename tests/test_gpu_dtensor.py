"""DTensors with CuPy shards: distribute, redistribute, NumPy ops and the TP graph, on the GPU.

Skipped cleanly without CuPy or a CUDA device (CI has neither).  Under MPI
the pip MPI wheels are not CUDA-aware, so every collective stages through
host memory; results must still equal NumPy on the full arrays.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import dtensor_np as dt
from dtensor_np import Partial, Replicate, Shard

HAS_CUPY = importlib.util.find_spec("cupy") is not None
R = Replicate()


@pytest.mark.gpu
@pytest.mark.worlds(simulated=(1, 2, 4), mpi=(2, 4) if HAS_CUPY else ())
def test_cupy_dtensors_match_numpy(world, cupy):
    mesh_shape = (2, world.size // 2) if world.size % 2 == 0 and world.size > 2 else (world.size,)
    mesh = dt.DeviceMesh(mesh_shape, backend=world.kind)
    rng = np.random.default_rng(0)
    full = rng.standard_normal((7, 5)).astype(np.float32)
    options = [Shard(0), Shard(1), R]
    for src in _products(options, len(mesh_shape)):
        x = dt.distribute_tensor(cupy.asarray(full), mesh, list(src))
        assert all(isinstance(a, cupy.ndarray) for a in x.local_shards().values())
        for dst in _products(options + [Partial()], len(mesh_shape)):
            if any(isinstance(b, Partial) and not isinstance(a, Replicate) for a, b in zip(src, dst)):
                continue
            y = x.redistribute(list(dst))
            assert all(isinstance(a, cupy.ndarray) for a in y.local_shards().values())
            np.testing.assert_allclose(cupy.asnumpy(y.full_tensor()), full, rtol=1e-6, atol=1e-6)

    w = rng.standard_normal((5, 3)).astype(np.float32)
    xd = dt.distribute_tensor(cupy.asarray(full), mesh, [Shard(1)] + [R] * (len(mesh_shape) - 1))
    wd = dt.distribute_tensor(cupy.asarray(w), mesh, [Shard(0)] + [R] * (len(mesh_shape) - 1))
    with dt.comm_counter() as c:
        out = np.maximum(xd @ wd, 0).sum(axis=0)
        got = cupy.asnumpy(out.full_tensor())
    np.testing.assert_allclose(got, np.maximum(full @ w, 0).sum(axis=0), rtol=1e-4, atol=1e-4)
    assert c.counts["all_reduce"] == (1 if mesh.shape[0] > 1 else 0)


def _products(options, n):
    if n == 1:
        return [(o,) for o in options]
    return [(a,) + rest for a in options for rest in _products(options, n - 1)]
