"""The moments (``var``, ``std``, ``nanvar``, ``nanstd``, ``nanmean``, ``mean``, ``average``) of a row-sharded
array against NumPy's own function on this rank's block, timed interleaved in the same run.

Each row is the median over the iterations of the slowest rank: the DTensor call (its collective included; a
pending ``mean`` reduced) and NumPy's call on the blocks this process holds (``--simulated K``: all K blocks,
one after the other, as the simulated ranks run; under ``mpiexec``: the rank's own block), and their ratio.

Example::

    python benchmarks/moments.py --simulated 2                 # every rank in this process
    python benchmarks/moments.py --kernel                      # a rank's local pass alone against np.var
    mpiexec -n 2 python benchmarks/moments.py --json OUT.json  # a 2048x1024 float64 block per rank
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli import write_rows  # noqa: E402
from timing import timed_with  # noqa: E402

import dtensor_np as dt  # noqa: E402

CALLS: dict[str, Callable[..., Any]] = {
    "var": np.var, "std": np.std, "nanvar": np.nanvar, "nanstd": np.nanstd, "nanmean": np.nanmean,
    "mean": np.mean, "average": np.average,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--simulated", type=int, default=0, help="ranks simulated in this process (default: MPI)")
    parser.add_argument("--rows", type=int, default=2048, help="rows per rank")
    parser.add_argument("--cols", type=int, default=1024)
    parser.add_argument("--iters", type=int, default=15)
    parser.add_argument("--calls", default=",".join(CALLS))
    parser.add_argument("--kernel", action="store_true",
                        help="time only a rank's local pass (block_moments) against NumPy's var/nanvar of the block")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.kernel:
        return kernels(args)
    if args.simulated:
        k, mesh, comm = args.simulated, dt.DeviceMesh((args.simulated,)), None
    else:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        k, mesh = comm.size, dt.DeviceMesh((comm.size,), backend="mpi")
    rng = np.random.default_rng(0)
    full = 1e3 + rng.standard_normal((args.rows * k, args.cols))
    full[::7, 3] = np.nan  # the nan* functions skip something; the others see NaN in one column
    x = dt.distribute_tensor(full, mesh, [dt.Shard(0)])
    blocks = [np.ascontiguousarray(b) for b in x.local_shards().values()]

    def barrier() -> None:
        if comm is not None:
            comm.Barrier()

    def slowest(times: np.ndarray) -> None:
        if comm is not None:
            from mpi4py import MPI
            comm.Allreduce(MPI.IN_PLACE, times, MPI.MAX)

    rows = []
    warnings.simplefilter("ignore", RuntimeWarning)
    for name in args.calls.split(","):
        func = CALLS[name]
        for axis in (None, 0, 1):
            def ours(func=func, axis=axis) -> None:
                out = func(x, axis=axis)
                if any(isinstance(p, dt.Partial) for p in out.placements):
                    out.redistribute([dt.Replicate()])

            def numpy(func=func, axis=axis) -> None:
                for b in blocks:
                    func(b, axis=axis)

            times = timed_with([ours, numpy], args.iters, barrier, slowest)
            dtensor_ms, numpy_ms = np.median(times, axis=1) * 1e3
            rows.append({"call": name, "axis": axis, "ranks": k, "dtensor_ms": round(float(dtensor_ms), 3),
                         "numpy_block_ms": round(float(numpy_ms), 3), "ratio": round(float(dtensor_ms / numpy_ms), 2)})
            if comm is None or comm.rank == 0:
                print(f"{name:8s} axis={str(axis):4s} DTensor {dtensor_ms:8.2f} ms  NumPy on the block(s) "
                      f"{numpy_ms:8.2f} ms  ratio {dtensor_ms / numpy_ms:5.2f}", flush=True)
    if comm is None or comm.rank == 0:
        write_rows(rows, args.json)


def kernels(args: argparse.Namespace) -> None:
    """The local pass of ``var``/``nanvar`` on one block against NumPy's function on it (no collective)."""
    from dtensor_np.propagation.moments import block_moments

    block = 1e3 + np.random.default_rng(0).standard_normal((args.rows, args.cols))
    block[::7, 3] = np.nan
    f8 = np.dtype(np.float64)
    rows = []
    warnings.simplefilter("ignore", RuntimeWarning)
    for name, func, nan in (("var", np.var, False), ("nanvar", np.nanvar, True)):
        for axis in ((0, 1), (0,), (1,)):
            times = timed_with([lambda: block_moments(block, axis, f8, f8, nan), lambda: func(block, axis=axis)],
                               args.iters, lambda: None, lambda times: None)
            ours, numpy = np.median(times, axis=1) * 1e3
            rows.append({"kernel": name, "axis": axis, "block_moments_ms": round(float(ours), 3),
                         "numpy_ms": round(float(numpy), 3), "ratio": round(float(ours / numpy), 2)})
            print(f"{name:7s} axis={str(axis):7s} block_moments {ours:7.2f} ms  np.{name} {numpy:7.2f} ms  "
                  f"ratio {ours / numpy:5.2f}", flush=True)
    write_rows(rows, args.json)


if __name__ == "__main__":
    main()
