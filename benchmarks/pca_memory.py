"""Peak memory per rank of ``PCA(svd_solver="full").fit`` on a row-sharded float64 matrix (scikit-learn,
``array_api_dispatch=True``).

Run (from outside the repository, so that ``PYTHONPATH`` picks the tree measured)::

    mpiexec -n 2 python benchmarks/pca_memory.py                        # 400,000 x 32, the tree installed
    PYTHONPATH=/path/to/other/tree mpiexec -n 2 python .../pca_memory.py   # another tree (before/after)
    mpiexec -n 2 python benchmarks/pca_memory.py --rows 40000 --cols 16 --json OUT.json

Every rank draws its own rows (``DTensor.from_local``: the matrix is never whole anywhere), then fits once:

* ``traced_mib``: the fit's peak of Python-traced memory (``tracemalloc``, which sees NumPy's buffers) above
  what was allocated when it began (the rank's shard of X is not counted);
* ``maxrss_mib``: the process's peak resident set (``resource.getrusage(RUSAGE_SELF).ru_maxrss``) at the end,
  the interpreter, libraries and the shard included;
* ``shard_mib``: the size of the rank's shard of X, for scale (X whole is ``ranks`` times it);
* the collectives of the fit (``comm_counter``: counts and the bytes of the largest input of each call).

The largest value over the ranks is printed; ``explained_variance_`` is checked against NumPy's on the
gathered matrix (after the measurement).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import tracemalloc

os.environ.setdefault("SCIPY_ARRAY_API", "1")  # before SciPy is imported: scikit-learn's array-API dispatch

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import dtensor_np as dt  # noqa: E402

MIB = 2.0**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--cols", type=int, default=32)
    parser.add_argument("--components", type=int, default=8)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    import sklearn
    from sklearn.decomposition import PCA

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    mesh = dt.DeviceMesh((size,), backend="mpi")
    rows = [len(c) for c in np.array_split(np.arange(args.rows), size)]
    local = np.random.default_rng(rank).normal(size=(rows[rank], args.cols)) * np.linspace(1.0, 3.0, args.cols)
    x = dt.DTensor.from_local(local, mesh, [dt.Shard(0)], shape=(args.rows, args.cols))
    comm.Barrier()
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    with sklearn.config_context(array_api_dispatch=True), dt.comm_counter() as counter:
        pca = PCA(n_components=args.components, svd_solver="full").fit(x)
    traced = (tracemalloc.get_traced_memory()[1] - start) / MIB
    tracemalloc.stop()
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux
    variance = np.asarray(pca.explained_variance_.full_tensor())
    whole = x.full_tensor()
    expected = PCA(n_components=args.components, svd_solver="full").fit(whole).explained_variance_
    ok = bool(np.allclose(variance, expected, rtol=1e-8))
    row = {
        "tree": os.path.dirname(os.path.dirname(os.path.abspath(dt.__file__))),
        "ranks": size, "rows": args.rows, "cols": args.cols,
        "traced_mib": round(max(comm.allgather(traced)), 1),
        "maxrss_mib": round(max(comm.allgather(maxrss)), 1),
        "shard_mib": round(local.nbytes / MIB, 1),
        "collectives": {k: [counter.counts[k], counter.bytes[k]] for k in counter.counts if counter.counts[k]},
        "matches_numpy": all(comm.allgather(ok)),
    }
    if rank == 0:
        print(json.dumps(row))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(row, f, indent=1)
    if not row["matches_numpy"]:
        raise SystemExit("explained_variance_ differs from NumPy's")


if __name__ == "__main__":
    main()
