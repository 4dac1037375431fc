"""A first look at a mesh: rank groups, a sharded array's blocks, one redistribute.

    python examples/hello_mesh.py                 # every rank simulated in this process
    mpiexec -n 4 python examples/hello_mesh.py    # four real MPI processes
"""

from __future__ import annotations

import numpy as np

import dtensor_np as dt


def main() -> None:
    mesh = dt.init_device_mesh((2, 2), dim_names=("dp", "tp"))
    full = np.arange(30.0).reshape(5, 6)
    x = dt.distribute_tensor(full, mesh, [dt.Shard(0), dt.Shard(1)])
    lines = [
        f"backend: {mesh.backend}, mesh {mesh.shape} {mesh.dim_names}",
        f"dp groups: {mesh.rank_groups('dp')}   tp groups: {mesh.rank_groups('tp')}",
        str(dt.visualize_sharding(x)),
    ]
    for rank, local in x.local_shards().items():
        lines.append(f"rank {rank} at {mesh.coordinate_of(rank)} holds {local.shape}:\n{local}")
    y = x.redistribute([dt.Replicate(), dt.Shard(0)])
    lines.append(str(dt.plan_view(x.spec, y.spec)))
    assert np.array_equal(y.full_tensor(), full)
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
