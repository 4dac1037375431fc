"""dt.random draws against NumPy's Generator, in the same run: what a counter-based draw costs.

Run::

    python benchmarks/random_draws.py                      # one process, a simulated 1-D mesh of --ranks
    python benchmarks/random_draws.py --elements 4MiB --json OUT.json   # 4 * 2**20 values
    mpiexec -n 4 python benchmarks/random_draws.py         # every rank draws its own block

Each row draws ``--elements`` float64 (or bool, int64) values on a 1-D mesh
with ``Shard(0)``.  ``dt_ms`` is the time of the ``dt.random`` draw on the
mesh (simulated: every rank's block in this process, i.e. the whole array;
MPI: this rank's block, the slowest rank's time), ``numpy_ms`` the time of
``numpy.random.default_rng`` drawing the same number of values that the
side draws (the whole array simulated, one rank's block under MPI), and
``ratio = dt_ms / numpy_ms``.  The two sides are interleaved iteration by
iteration (``timing.timed_with``) and a row is the median.  NumPy's
Generator keeps state and gives different numbers on every mesh; the ratio
is the price of numbers that do not depend on the mesh (Threefry's 20
rounds over each element's own counter, with vectorised integer NumPy ops).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import collectives  # noqa: E402
import dtensor_np as dt  # noqa: E402
from cli import parse_size, write_rows  # noqa: E402
from timing import timed_with  # noqa: E402

DRAWS: dict[str, tuple[Callable[..., Any], Callable[[np.random.Generator, int], Any]]] = {
    "normal": (lambda k, n, **kw: dt.random.normal(k, (n,), **kw), lambda g, n: g.standard_normal(n)),
    "uniform": (lambda k, n, **kw: dt.random.uniform(k, (n,), **kw), lambda g, n: g.random(n)),
    "bernoulli(0.9)": (lambda k, n, **kw: dt.random.bernoulli(k, (n,), p=0.9, **kw), lambda g, n: g.random(n) < 0.9),
    "randint(0, 1000)": (lambda k, n, **kw: dt.random.randint(k, (n,), 0, 1000, **kw),
                         lambda g, n: g.integers(0, 1000, n)),
}


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--elements", type=parse_size, default=parse_size("1MiB"),
                        help="values per draw (KiB/MiB suffixes count 2**10/2**20 values)")
    parser.add_argument("--ranks", type=int, default=4, help="simulated ranks (ignored under mpiexec)")
    parser.add_argument("--iters", type=int, default=7)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    under_mpi = collectives.launched_by_mpiexec() and (collectives.mpi_world_size() or 1) > 1
    if under_mpi:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        mesh = dt.DeviceMesh((comm.size,), backend="mpi")

        def barrier() -> None:
            comm.Barrier()

        def slowest(times: np.ndarray) -> None:
            comm.Allreduce(MPI.IN_PLACE, times, MPI.MAX)
    else:
        mesh = dt.DeviceMesh((args.ranks,), backend="simulated")

        def barrier() -> None:
            return None

        def slowest(times: np.ndarray) -> None:
            return None

    key = dt.random.key(0)
    rng = np.random.default_rng(0)
    rows = []
    for name, (draw, numpy_draw) in DRAWS.items():
        x = draw(key, args.elements, mesh=mesh, placements=[dt.Shard(0)])
        held = sum(int(s.size) for s in x.local_shards().values())  # what this process draws
        times = timed_with([lambda: draw(key, args.elements, mesh=mesh, placements=[dt.Shard(0)]),
                            lambda: numpy_draw(rng, held)], args.iters, barrier, slowest)
        dt_ms, numpy_ms = np.median(times, axis=1) * 1e3
        rows.append({"draw": name, "elements": args.elements, "ranks": mesh.size(), "backend": mesh.backend,
                     "drawn_here": held, "dt_ms": round(float(dt_ms), 3), "numpy_ms": round(float(numpy_ms), 3),
                     "ratio": round(float(dt_ms / numpy_ms), 2)})
    root = not under_mpi or comm.rank == 0
    if root:
        for r in rows:
            print(f"{r['draw']:18s} {r['elements']:>10d} values on {r['ranks']} {r['backend']} ranks "
                  f"(this process draws {r['drawn_here']}): dt.random {r['dt_ms']:8.2f} ms, "
                  f"NumPy {r['numpy_ms']:8.2f} ms, ratio {r['ratio']:.1f}")
        write_rows(rows, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
