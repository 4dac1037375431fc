"""Every public name of ../shared/API.md imports under that name, and behaves as written there."""

from __future__ import annotations

import numpy as np

import dtensor_np as dt
from dtensor_np import Partial, Replicate, Shard
from dtensor_np.layout import Layout
from dtensor_np.passes import bucket_all_gather, bucket_reduce_scatter
from dtensor_np.propagation import OutputSharding, einop_rule, pointwise_rule

TOP_LEVEL = [
    "DeviceMesh", "Shard", "Replicate", "Partial", "TensorMeta", "DTensorSpec",
    "compute_local_shape_and_global_offset", "plan_redistribute", "explain", "init_device_mesh",
    "distribute_tensor", "DTensor", "comm_counter", "trace", "ShapeDtype", "tensor_parallel_transform",
    "ColwiseParallel", "RowwiseParallel", "ShardingError",
]


def test_every_contract_name_is_exported():
    missing = [name for name in TOP_LEVEL if not hasattr(dt, name)]
    assert not missing
    assert all(name in dt.__all__ for name in TOP_LEVEL)
    assert callable(bucket_all_gather) and callable(bucket_reduce_scatter)
    assert callable(einop_rule) and callable(pointwise_rule) and OutputSharding is not None
    assert issubclass(dt.ShardingError, ValueError)


def test_contract_examples():
    L = Layout((2, 3), (3, 1))
    assert L.numel() == 6 and L.all_ranks_from_zero() == list(range(6))
    mesh = dt.DeviceMesh((2, 2), dim_names=("dp", "tp"))
    assert (mesh.shape, mesh.ndim, mesh.size(), mesh.dim_names) == ((2, 2), 2, 4, ("dp", "tp"))
    assert mesh.coordinate_of(3) == tuple(int(i) for i in np.unravel_index(3, (2, 2)))
    assert str(Shard(0)) == "S(0)" and str(Replicate()) == "R" and str(Partial()) == "P(sum)"
    spec = dt.DTensorSpec(mesh, [Shard(0), Replicate()], dt.TensorMeta((4, 4), "float32"))
    assert spec.dim_map == [0, -1] and spec.sums == [] and spec.num_shards == 2
    plan = dt.plan_redistribute(spec, spec.with_placements((Replicate(), Shard(1))))
    assert all(hasattr(step, a) for step in plan for a in ("mesh_dim", "src", "dst"))
    assert dt.explain(plan, spec).startswith("S(0)R->")
    x = dt.distribute_tensor(np.arange(16.0).reshape(4, 4), mesh, [Shard(0), Replicate()])
    y = x.redistribute([Replicate(), Shard(1)])
    assert (x.mesh, x.placements, x.shape, x.dtype, x.ndim) == (mesh, (Shard(0), Replicate()), (4, 4), np.float64, 2)
    assert set(x.local_shards()) == {0, 1, 2, 3} and isinstance(x.to_local(), dt.LocalTensor)
    np.testing.assert_array_equal(y.full_tensor(), np.arange(16.0).reshape(4, 4))
    with dt.comm_counter() as c:
        np.sum(x, axis=1).full_tensor()
    assert set(c.counts) >= {"all_gather", "all_reduce", "reduce_scatter", "all_to_all", "broadcast", "scatter"}
