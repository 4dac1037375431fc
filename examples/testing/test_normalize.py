"""Tests of ``normalize`` with dtensor_np's pytest plugin and dtensor_np.testing.

``pytest`` runs each test on simulated meshes (every rank in this process);
``pytest --dt-mpi`` also runs each mesh of two or more ranks in its own
``mpiexec`` job.  The same test body serves both.
"""
from __future__ import annotations

import numpy as np
import pytest

import dtensor_np as dt
from dtensor_np.testing import assert_dtensor_equal, check_op, raises_on_all_ranks
from normalize import normalize

DATA = np.random.default_rng(0).normal(size=(7, 3))  # 7 rows: uneven shards on 2 and 4 ranks


@pytest.mark.world_sizes(1, 2, 4)
def test_normalize_rows_sharded(mesh):
    x = dt.distribute_tensor(DATA, mesh, [dt.Shard(0)])
    y = normalize(x)
    assert_dtensor_equal(y, normalize(DATA), rtol=1e-12, atol=1e-12, placements=[dt.Shard(0)])


@pytest.mark.mesh_shapes((2, 2))
def test_normalize_on_every_placement(mesh):
    assert check_op(normalize, DATA, mesh=mesh, rtol=1e-12, atol=1e-12) == 9


@pytest.mark.world_sizes(2)
def test_a_wrong_placement_is_refused_on_every_rank(mesh):
    with raises_on_all_ranks(dt.ShardingError, match="out of range"):
        dt.distribute_tensor(DATA, mesh, [dt.Shard(2)])


@pytest.mark.world_sizes(2)
def test_results_written_by_every_rank(mesh, shared_tmp_path):
    y = normalize(dt.distribute_tensor(DATA, mesh, [dt.Shard(0)]))
    np.save(shared_tmp_path / "column_means.npy", np.mean(y, axis=0).full_tensor())
    assert np.allclose(np.load(shared_tmp_path / "column_means.npy"), 0.0, atol=1e-12)
