"""Eager dispatch benchmark: the time of one NumPy op on DTensors against the same NumPy call on the local shards.

Run (2 ranks under MPI, or simulated ranks in one process)::

    mpiexec -n 2 python benchmarks/dispatch.py --json OUT.json
    python benchmarks/dispatch.py --ranks 2 --json OUT_SIM.json      # simulated, 2 ranks
    mpiexec -n 2 python benchmarks/dispatch.py --quick                 # a short run
    mpiexec -n 2 python benchmarks/dispatch.py --ops "x + x,x.T"       # some rows only
    mpiexec -n 2 python benchmarks/dispatch.py --agreement both        # each row with the default agreement on, off

``x`` is a 64x64 float64 array placed ``Shard(0)`` (32x64 per rank on 2 ranks),
``w`` a 64x64 float64 ``Replicate``.  For every op the DTensor call and the same
NumPy call on the local shards (this rank's under MPI; every simulated rank's
shard, one after the other, when simulated) are timed in the same run,
interleaved call by call (:func:`timing.timed_with`: a barrier, the clock, one
call).  A row reports, for each side, the best of ``--repeats`` medians of
``--iters`` calls, on the slowest rank; ``overhead_us = dtensor_us - local_us``.
Every op is called a few times before it is timed, so the rows measure the
repeated call (the dispatch fast path), and its result is checked against
NumPy on the full arrays (the script exits non-zero on a mismatch).

``x[1:5]`` takes rows that rank 0 holds, and its result (``Shard(0)``, 2 rows a
rank) moves rows to rank 1: a communicating op, unlike every other row.
``x[0] = 1`` rebinds a DTensor handle to a new value (a copy of the shard with
the row set); its local side is NumPy's in-place ``a[0] = 1``. ``x[1:5][0] = 1``
writes through a view (``x[1:5]``, a view as in NumPy): the view is made and the
write composed into one update of ``x`` (``x.at[1].set(1)``); beside it,
``x.at[1].set(1)`` itself, whose local side is NumPy's ``y = a.copy(); y[1] = 1``.

``--json`` writes a list of rows ``{"op", "backend", "ranks", "local_us",
"dtensor_us", "overhead_us", "iters", "repeats"}`` (rank 0).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from cli import add_agreement_option, agreement_modes, write_rows  # noqa: E402  (next to this script)
from timing import timed_with  # noqa: E402

import dtensor_np as dt  # noqa: E402
import collectives  # noqa: E402
from collectives.spmd import default_agreement  # noqa: E402

N = 64


def _setitem(x: Any, w: Any) -> Any:
    x[0] = 1
    return x


def _view_setitem(x: Any, w: Any) -> Any:
    x[1:5][0] = 1  # a write through a view: x (its base) is written
    return x


def _functional_set(x: Any, w: Any) -> Any:
    y = x.copy()  # NumPy's counterpart of x.at[1].set(1): a new array with one row set
    y[1] = 1
    return y


# name -> f(x, w): the same callable runs on DTensors, on the local shards and on the full arrays,
# except where LOCAL names the call on a local shard (a shape op's local shape differs).
OPS: dict[str, Callable[[Any, Any], Any]] = {
    "x + x": lambda x, w: x + x,
    "x * 2.0": lambda x, w: x * 2.0,
    "np.maximum(x, 0)": lambda x, w: np.maximum(x, 0),
    "np.exp(x)": lambda x, w: np.exp(x),
    "x @ w": lambda x, w: x @ w,
    "np.sum(x, axis=1)": lambda x, w: np.sum(x, axis=1),
    "x.T": lambda x, w: x.T,
    "np.sum(x)": lambda x, w: np.sum(x),
    "np.max(x, axis=0)": lambda x, w: np.max(x, axis=0),
    "x.mean(axis=1)": lambda x, w: x.mean(axis=1),
    "x.reshape(2, 32, 64)": lambda x, w: x.reshape(2, 32, 64),
    "np.swapaxes(x, 0, 1)": lambda x, w: np.swapaxes(x, 0, 1),
    "x[:, 1:5]": lambda x, w: x[:, 1:5],
    "x[1:5]": lambda x, w: x[1:5],
    "x[0] = 1": _setitem,
    "x[1:5][0] = 1": _view_setitem,
    "x.at[1].set(1)": lambda x, w: x.at[1].set(1.0),
}
# NumPy's counterpart on whole arrays where the DTensor call has no NumPy spelling
NUMPY: dict[str, Callable[[Any, Any], Any]] = {
    "x.at[1].set(1)": _functional_set,
}
LOCAL: dict[str, Callable[[Any, Any], Any]] = {
    "x.at[1].set(1)": _functional_set,
    "x.reshape(2, 32, 64)": lambda x, w: x.reshape(1, -1, 64),  # a rank's block of 2 ranks
}


def _full(value: Any) -> Any:
    return value.full_tensor() if isinstance(value, dt.DTensor) else value


def check(name: str, x: Any, w: Any, full_x: np.ndarray, full_w: np.ndarray) -> None:
    """The op on DTensors gives NumPy's result on the full arrays (SystemExit otherwise)."""
    op = OPS[name]
    got = _full(op(dt.DTensor(x.local_shards(), x.spec), w))
    expected = NUMPY.get(name, op)(full_x.copy(), full_w)
    if not np.allclose(got, expected):
        raise SystemExit(f"{name}: the DTensor result differs from NumPy's")


def run_op(name: str, x: Any, w: Any, iters: int, repeats: int, barrier: Callable[[], Any],
           to_slowest: Callable[[np.ndarray], Any]) -> tuple[float, float]:
    """(local_us, dtensor_us): the best of ``repeats`` medians of ``iters`` calls, slowest rank."""
    op = OPS[name]
    local_op = LOCAL.get(name, op)
    xh = dt.DTensor(x.local_shards(), x.spec)  # a handle of its own (x[0] = 1 rebinds it)
    pairs = [(np.array(x.local_shards()[r]), w.local_shards()[r]) for r in sorted(x.local_shards())]
    if len(pairs) == 1:
        (xl, wl), = pairs

        def local() -> Any:
            return local_op(xl, wl)
    else:
        def local() -> Any:
            return [local_op(a, b) for a, b in pairs]

    def dtensor() -> Any:
        return op(xh, w)

    for _ in range(5):  # the first call takes the slow path; the rows time repeated calls
        dtensor()
        local()
    best = np.full(2, np.inf)
    for _ in range(repeats):
        times = timed_with([local, dtensor], iters, barrier, to_slowest)
        best = np.minimum(best, np.median(times, axis=1) * 1e6)
    return float(best[0]), float(best[1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", metavar="OUT.json", help="write the rows as JSON (rank 0)")
    parser.add_argument("--iters", type=int, default=None, help="calls per median (default 1000; 200 with --quick)")
    parser.add_argument("--repeats", type=int, default=3, help="medians per row, the best is kept (default 3)")
    parser.add_argument("--ranks", type=int, default=2, help="simulated ranks when not under mpiexec (default 2)")
    parser.add_argument("--ops", help="comma-separated ops (default: all): " + "; ".join(OPS))
    parser.add_argument("--quick", action="store_true", help="short run: 200 calls per median")
    add_agreement_option(parser)
    args = parser.parse_args(argv)
    iters = args.iters if args.iters is not None else (200 if args.quick else 1000)
    names = list(OPS)
    if args.ops:
        names = [n.strip() for n in args.ops.split(",")]
        unknown = [n for n in names if n not in OPS]
        if unknown:
            raise SystemExit(f"unknown ops {unknown}: expected some of {list(OPS)}")

    if collectives.launched_by_mpiexec() and collectives.mpi_world_size() > 1:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        ranks, backend, rank = comm.size, "mpi", comm.rank

        def barrier() -> None:
            comm.Barrier()

        def to_slowest(times: np.ndarray) -> None:
            comm.Allreduce(MPI.IN_PLACE, times, MPI.MAX)
    else:
        ranks, backend, rank = args.ranks, "simulated", 0

        def barrier() -> None:
            pass

        def to_slowest(times: np.ndarray) -> None:
            pass

    mesh = dt.init_device_mesh((ranks,), backend=backend)
    rng = np.random.default_rng(0)
    full_x = rng.standard_normal((N, N))
    full_w = rng.standard_normal((N, N))
    x = dt.distribute_tensor(full_x, mesh, [dt.Shard(0)])
    w = dt.distribute_tensor(full_w, mesh, [dt.Replicate()])
    if rank == 0:
        print(f"# dtensor_np eager dispatch vs NumPy on the local shards: {backend}, {ranks} ranks; x {N}x{N} float64 "
              f"S(0), w {N}x{N} R; best of {args.repeats} medians of {iters} calls, slowest rank", flush=True)
        print(f"# python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}", flush=True)
        print(f"{'op':<22} {'local us':>9} {'dtensor us':>11} {'overhead us':>12}", flush=True)
    rows = []
    for name, agree in ((name, agree) for name in names for agree in agreement_modes(args)):
        with default_agreement(agree):
            check(name, x, w, full_x, full_w)
            local_us, dtensor_us = run_op(name, x, w, iters, args.repeats, barrier, to_slowest)
        row = {"op": name, "backend": backend, "ranks": ranks, "local_us": round(local_us, 3),
               "dtensor_us": round(dtensor_us, 3), "overhead_us": round(dtensor_us - local_us, 3),
               "iters": iters, "repeats": args.repeats, "agreement": agree}
        rows.append(row)
        if rank == 0:
            print(f"{name + ('' if agree else ' (no agreement)'):<22} {local_us:9.2f} {dtensor_us:11.2f} "
                  f"{dtensor_us - local_us:12.2f}", flush=True)
    if rank == 0:
        write_rows(rows, args.json)


if __name__ == "__main__":
    main()
