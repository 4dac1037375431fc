"""Power iteration, written for one machine, run unchanged on a row-sharded matrix.

``power_iteration(A)`` is plain Array API code (``xp = A.__array_namespace__()``):
on a NumPy array it is NumPy; on a DTensor made by ``dt.array_api.namespace``
each matrix-vector product and norm runs on the shards.  With rows sharded
(``default="shard_first"``), one step issues an all_gather of ``v`` (each rank
needs the whole vector for its rows) and an all_reduce for the norm; with
columns sharded, ``A @ v`` is a partial sum settled by a reduce_scatter.

    python examples/power_iteration.py                  # 4 simulated ranks in this process
    python examples/power_iteration.py --ranks 3 --default shard_last
    mpiexec -n 2 python examples/power_iteration.py     # two MPI processes
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

import dtensor_np as dt
from examples_common import compare, mesh_from_args


def power_iteration(A: Any, iters: int = 100) -> tuple[Any, Any]:
    """The dominant eigenvalue and unit eigenvector of the symmetric matrix ``A``."""
    xp = A.__array_namespace__()
    v = xp.ones(A.shape[1], dtype=A.dtype, device=A.device)
    v = v / xp.linalg.vector_norm(v)
    for _ in range(iters):
        w = A @ v
        v = w / xp.linalg.vector_norm(w)
    return v @ (A @ v), v


def main(argv: Optional[Sequence[str]] = None) -> None:
    mesh, default = mesh_from_args(__doc__.splitlines()[0], argv)
    xp = dt.array_api.namespace(mesh, default=default)
    rng = np.random.default_rng(0)
    B = rng.normal(size=(13, 13))
    A = B @ B.T  # the same data on every rank: asarray keeps each rank's block, no communication
    lam, v = power_iteration(xp.asarray(A))
    lam_np, v_np = power_iteration(A)
    print(dt.visualize_sharding(xp.asarray(A)), flush=True)
    print(compare("eigenvalue", float(lam), lam_np), flush=True)
    print(compare("eigenvector", v, v_np), flush=True)


if __name__ == "__main__":
    main()
