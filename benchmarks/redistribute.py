"""Redistribute benchmark: ``DTensor.redistribute`` against the hand-written mpi4py collective.

Run (2 ranks: the 1-D transitions; 4 ranks: the 2x2-mesh transitions)::

    mpiexec -n 2 python benchmarks/redistribute.py --json OUT.json
    mpiexec -n 4 python benchmarks/redistribute.py --json OUT4.json
    mpiexec -n 2 python benchmarks/redistribute.py --quick          # a short run
    mpiexec -n 2 python benchmarks/redistribute.py --quick --profile prof/   # + pyinstrument reports
    mpiexec -n 2 python benchmarks/redistribute.py --quick --agreement both  # each row with the default
                                                                             # agreement on, then off

``--json`` writes a list of rows ``{"transition", "bytes", "ranks",
"dtensor_us", "raw_mpi_us", "ratio", ...}``; ``bytes`` is the size of the
*global* tensor (float32, shape ``(rows, cols)``, as square as the size allows),
``ranks`` the world size.  Every row also carries ``plan_us``: the time of the
cached plan lookup ``DTensor.redistribute`` does before it communicates (target
spec and compiled runner for a (spec, placements) pair seen before).

Both sides are measured in the same run, interleaved iteration by iteration
(alternating which goes first).  An iteration is: ``Barrier``, start the clock,
run, stop the clock; the time of an iteration is the slowest rank's (one
``Allreduce(MAX)`` over all recorded times after the loop), and a row reports
medians over the iterations, after warm-up.

The raw side is the plain mpi4py buffer collective that does the same work,
into buffers allocated once, before the loop:

==========================  ===================================================
transition                  raw mpi4py
==========================  ===================================================
S(0)->R                     ``Allgather`` of the local rows into the full array
P->R                        ``Allreduce(SUM)``
P->S(0)                     ``Reduce_scatter_block(SUM)``
S(0)->S(1)                  pack the local block's column pieces piece-major
                            (one NumPy copy into a send buffer) + ``Alltoall``
                            (the received row blocks are the result: no unpack)
R->S(0)                     a NumPy slice copy of this rank's rows (no MPI)
[S(0),S(1)]->[R,R] (2x2)    ``Allgather`` on the dp communicator, ``Allgather``
                            on the tp communicator, one NumPy copy that puts the
                            column blocks side by side (what the plan does)
[P,P]->[R,R] (2x2)          ``Allreduce(SUM)`` over all 4 ranks
==========================  ===================================================
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import platform
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from mpi4py import MPI  # noqa: E402

from cli import add_agreement_option, add_size_options, agreement_modes, chosen_sizes, format_size, global_shape, write_rows  # noqa: E402,E501  (next to this script)
from timing import pooled_rounds, timed  # noqa: E402

import dtensor_np as dt  # noqa: E402
from collectives.spmd import default_agreement  # noqa: E402
from dtensor_np import Partial, Replicate, Shard  # noqa: E402

DTYPE = np.float32


@dataclass(frozen=True)
class Case:
    name: str
    mesh_shape: tuple[int, ...]
    src: tuple[Any, ...]
    dst: tuple[Any, ...]


CASES_1D = (
    Case("S(0)->R", (2,), (Shard(0),), (Replicate(),)),
    Case("P->R", (2,), (Partial(),), (Replicate(),)),
    Case("P->S(0)", (2,), (Partial(),), (Shard(0),)),
    Case("S(0)->S(1)", (2,), (Shard(0),), (Shard(1),)),
    Case("R->S(0)", (2,), (Replicate(),), (Shard(0),)),
)
CASES_2D = (
    Case("[S(0),S(1)]->[R,R]", (2, 2), (Shard(0), Shard(1)), (Replicate(), Replicate())),
    Case("[P,P]->[R,R]", (2, 2), (Partial(), Partial()), (Replicate(), Replicate())),
)


# -- the raw mpi4py side ----------------------------------------------------------------


def raw_runner(case: Case, comm: MPI.Intracomm, subcomms: dict[int, MPI.Intracomm],
               local: np.ndarray, shape: tuple[int, int]) -> tuple[Callable[[], None], np.ndarray]:
    """The hand-written version of ``case`` on this rank's ``local`` block, and its output buffer."""
    rows, cols = shape
    name = case.name
    if name == "S(0)->R":
        out = np.empty(shape, DTYPE)
        return (lambda: comm.Allgather(local, out)), out
    if name == "P->R":
        out = np.empty_like(local)
        return (lambda: comm.Allreduce(local, out, MPI.SUM)), out
    if name == "P->S(0)":
        out = np.empty((rows // comm.size, cols), DTYPE)
        return (lambda: comm.Reduce_scatter_block(local, out, MPI.SUM)), out
    if name == "S(0)->S(1)":
        k = comm.size
        r, c = local.shape
        send = np.empty((k, r, c // k), DTYPE)
        pieces = local.reshape(r, k, c // k).transpose(1, 0, 2)
        out = np.empty((rows, cols // k), DTYPE)

        def run() -> None:
            np.copyto(send, pieces)
            comm.Alltoall(send, out)

        return run, out
    if name == "R->S(0)":
        r = rows // comm.size
        start = comm.rank * r
        out = np.empty((r, cols), DTYPE)
        piece = local[start:start + r]
        return (lambda: np.copyto(out, piece)), out
    if name == "[S(0),S(1)]->[R,R]":
        dp, tp = subcomms[0], subcomms[1]
        r, c = local.shape
        mid = np.empty((rows, c), DTYPE)
        gathered = np.empty((tp.size, rows, c), DTYPE)
        out = np.empty(shape, DTYPE)
        side_by_side = out.reshape(rows, tp.size, c)
        blocks = gathered.transpose(1, 0, 2)

        def run() -> None:
            dp.Allgather(local, mid)
            tp.Allgather(mid, gathered)
            np.copyto(side_by_side, blocks)

        return run, out
    if name == "[P,P]->[R,R]":
        out = np.empty_like(local)
        return (lambda: comm.Allreduce(local, out, MPI.SUM)), out
    raise AssertionError(name)


# -- measuring --------------------------------------------------------------------------


def time_lookup(x: dt.DTensor, dst: tuple[Any, ...], comm: MPI.Intracomm, n: int = 2000) -> tuple[float, float]:
    """Median times (us, slowest rank) of the cached plan lookup ``DTensor.redistribute`` does first.

    The first is for the same spec object (what a loop redistributing one DTensor sees), the second
    for an equal spec in a new object (specs are interned, so that is the same object again).
    """
    from dtensor_np.redistribute import redistribution

    def lookup_redistribute(spec: dt.DTensorSpec, placements: list[Any], order: Any) -> Any:
        return redistribution(spec, tuple(placements), order)  # what DTensor.redistribute does with a list

    spec = x.spec
    lookup_redistribute(spec, list(dst), None)
    samples = np.empty(n)
    clock = time.perf_counter
    for i in range(n):
        t0 = clock()
        lookup_redistribute(spec, list(dst), None)
        samples[i] = clock() - t0
    recent = float(np.median(samples))
    # An equal spec in another object (e.g. a new DTensor of the same layout): the hashed cache.
    copies = [dt.DTensorSpec(spec.mesh, spec.placements, spec.tensor_meta, spec.shard_order) for _ in range(200)]
    hashed = np.empty(len(copies))
    for i, other in enumerate(copies):
        t0 = clock()
        lookup_redistribute(other, list(dst), None)
        hashed[i] = clock() - t0
    value = np.array([recent, float(np.median(hashed))])
    comm.Allreduce(MPI.IN_PLACE, value, MPI.MAX)
    return float(value[0]) * 1e6, float(value[1]) * 1e6


def profile_row(name: str, fn: Callable[[], Any], iters: int, comm: MPI.Intracomm, out_dir: str) -> None:
    """Run ``fn`` ``iters`` times on every rank, sampled by pyinstrument on rank 0; write its text report.

    The report (``OUT_DIR/<transition>_<size>.txt``) shows where the DTensor side spends its time
    across the calls: the lookup, the prepared MPI call, building the result.
    """
    profiler = None
    if comm.rank == 0:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.0001)
        profiler.start()
    for _ in range(iters):
        fn()
    comm.Barrier()
    if profiler is not None:
        profiler.stop()
        safe = "".join(c if c.isalnum() else "_" for c in name).strip("_")
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, f"{safe}.txt")
        with open(path, "w") as f:
            f.write(profiler.output_text(unicode=False, color=False, show_all=True))
        print(f"  profile of {iters} DTensor calls: {path}", flush=True)


def check_same(case: Case, y: dt.DTensor, raw_out: np.ndarray, size: int, comm: MPI.Intracomm) -> None:
    """Stop every rank (with every rank's complaint) when the DTensor result differs from the raw one anywhere."""
    got = y.to_local()
    problem = None
    if got.shape != raw_out.shape or got.dtype != raw_out.dtype:
        problem = f"DTensor gave {got.shape} {got.dtype}, raw {raw_out.shape} {raw_out.dtype}"
    elif not np.allclose(got, raw_out, rtol=1e-5, atol=1e-5):
        problem = "DTensor and raw MPI results differ"
    complaints = [f"rank {r}: {p}" for r, p in enumerate(comm.allgather(problem)) if p]
    if complaints:  # every rank knows: all exit together instead of some waiting in the next Barrier
        raise SystemExit(f"{case.name} {size} B: " + "; ".join(complaints))


def run_case(case: Case, size: int, comm: MPI.Intracomm, subcomms: dict[int, MPI.Intracomm],
             budget_s: float, min_iters: int, max_iters: int, profile_dir: str | None = None,
             control: bool = False, rounds: int = 3) -> dict[str, Any]:
    """One row: ``rounds`` rounds, each with new output buffers on both sides, times pooled.

    Which physical pages an output buffer gets moves a copy or a collective into it by up to
    20 % at 0.1 to 16 MiB (two raw runs into two buffers differ that much), so each round
    allocates the raw side's outputs anew and keeps the DTensor result of the round before
    alive, which makes the DTensor side's recycled buffer a new one too.
    """
    k = comm.size if len(case.mesh_shape) == 1 else 2
    shape = global_shape(size, k)
    mesh = dt.init_device_mesh(case.mesh_shape, backend="mpi")
    full = np.random.default_rng(0).standard_normal(shape).astype(DTYPE)
    x = dt.distribute_tensor(full, mesh, list(case.src), src_data_rank=None)
    del full
    local = x.to_local()
    dst = list(case.dst)

    def dtensor() -> None:
        x.redistribute(dst)

    def new_round() -> tuple[list[Callable[[], Any]], Any]:
        raw, raw_out = raw_runner(case, comm, subcomms, local, shape)
        fns = [dtensor, raw]
        if control:  # the same raw call into buffers of its own: how far two raw runs differ
            fns.append(raw_runner(case, comm, subcomms, local, shape)[0])
        raw()
        result = x.redistribute(dst)
        check_same(case, result, raw_out, size, comm)
        return fns, result  # the result holds the recycled buffer: this round's calls get a new one

    times, iters = pooled_rounds(rounds, new_round, lambda fns, n: timed(fns, n, comm),
                                 budget_s, min_iters, max_iters, 4e-6)
    medians = [float(v) * 1e6 for v in np.median(times, axis=1)]
    dtensor_us, raw_us = medians[:2]
    plan_us, plan_hashed_us = time_lookup(x, case.dst, comm)
    if profile_dir:
        profile_row(f"{case.name}_{format_size(size)}", dtensor, iters, comm, profile_dir)
    return {
        "transition": case.name,
        "bytes": size,
        "ranks": comm.size,
        "dtensor_us": round(dtensor_us, 3),
        "raw_mpi_us": round(raw_us, 3),
        "ratio": round(dtensor_us / raw_us, 4),
        "plan_us": round(plan_us, 3),
        "plan_hashed_us": round(plan_hashed_us, 3),
        "iters": iters,
        **({"control_us": round(medians[2], 3), "control_ratio": round(medians[2] / raw_us, 4)} if control else {}),
    }


def table(rows: list[dict[str, Any]]) -> str:
    control = any("control_ratio" in r for r in rows)
    head = (f"{'transition':<20} {'bytes':>8} {'ranks':>5} {'dtensor_us':>12} {'raw_mpi_us':>12} {'ratio':>7}"
            + (f" {'control':>8}" if control else "") + f" {'plan_us':>8} {'iters':>6}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['transition']:<20} {format_size(r['bytes']):>8} {r['ranks']:>5} {r['dtensor_us']:>12.1f} "
            f"{r['raw_mpi_us']:>12.1f} {r['ratio']:>7.2f}"
            + (f" {r.get('control_ratio', float('nan')):>8.2f}" if control else "")
            + f" {r['plan_us']:>8.2f} {r['iters']:>6}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_size_options(parser, "a small time budget")
    parser.add_argument("--transitions", help="comma-separated transitions to run (default: all for this world size)")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds of measuring per row and side (default 1.5; 0.3 with --quick)")
    parser.add_argument("--min-iters", type=int, default=None, help="at least this many iterations (default 25)")
    parser.add_argument("--max-iters", type=int, default=5000, help="at most this many iterations")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per row, each with new output "
                        "buffers on both sides; the row pools their iterations (default 3)")
    parser.add_argument("--control", action="store_true", help="also time the raw call into a second set of "
                        "buffers (column control_ratio = raw2 / raw): the run-to-run floor of the ratio")
    parser.add_argument("--profile", metavar="DIR", help="after each row, profile the DTensor side with "
                        "pyinstrument (rank 0) and write a text report per row into DIR")
    add_agreement_option(parser)
    args = parser.parse_args(argv)

    comm = MPI.COMM_WORLD
    world = comm.size
    if args.profile:
        if importlib.util.find_spec("pyinstrument") is None:
            raise SystemExit("--profile needs pyinstrument: pip install -e '.[bench]'")
    sizes = chosen_sizes(args)
    budget = args.budget if args.budget is not None else (0.3 if args.quick else 1.5)
    min_iters = args.min_iters if args.min_iters is not None else (10 if args.quick else 25)
    if world == 4:
        cases = CASES_2D
    elif world >= 2:
        cases = tuple(Case(c.name, (world,), c.src, c.dst) for c in CASES_1D)
    else:
        raise SystemExit("run under mpiexec with 2 ranks (1-D transitions) or 4 ranks (2x2 mesh)")
    if args.transitions:
        wanted = [t.strip() for t in args.transitions.split(",")]
        unknown = sorted(set(wanted) - {c.name for c in cases})
        if unknown:
            raise SystemExit(f"unknown transitions {unknown} for {world} ranks: expected some of "
                             f"{[c.name for c in cases]}")
        cases = tuple(c for c in cases if c.name in wanted)
    subcomms: dict[int, MPI.Intracomm] = {}
    if world == 4:  # the hand-written sub-communicators of a row-major 2x2 mesh
        subcomms[0] = comm.Split(comm.rank % 2, comm.rank // 2)  # dp: ranks {0, 2}, {1, 3}
        subcomms[1] = comm.Split(comm.rank // 2, comm.rank % 2)  # tp: ranks {0, 1}, {2, 3}

    if comm.rank == 0:
        print(f"# dtensor_np redistribute vs raw mpi4py: {world} ranks, float32, medians of the slowest rank; "
              f"bytes = global tensor size", flush=True)
        print(f"# python {platform.python_version()}, numpy {np.__version__}, mpi4py "
              f"{__import__('mpi4py').__version__}, {MPI.Get_library_version().replace(chr(0), '').splitlines()[0].strip()}",
              flush=True)
    rows = []
    for case in cases:
        for size, agree in ((size, agree) for size in sizes for agree in agreement_modes(args)):
            with default_agreement(agree):
                row = run_case(case, size, comm, subcomms, budget, min_iters, args.max_iters, args.profile,
                               args.control, max(1, args.rounds))
            row["agreement"] = agree
            gc.collect()  # the row's arrays went with run_case's frame; nothing else to free
            rows.append(row)
            if comm.rank == 0:
                print(f"{row['transition']:<20} {format_size(size):>8} {'agree' if agree else 'no-agree':>8}  "
                      f"dtensor {row['dtensor_us']:10.1f} us  "
                      f"raw {row['raw_mpi_us']:10.1f} us  ratio {row['ratio']:5.2f}  plan {row['plan_us']:.2f} us"
                      + (f"  control {row['control_ratio']:.2f}" if "control_ratio" in row else ""),
                      flush=True)
    if comm.rank == 0:
        print()
        print(table(rows))
        lookups = [r["plan_us"] for r in rows]
        hashed = [r["plan_hashed_us"] for r in rows]
        print(f"\ncached plan lookup (DTensor.redistribute before communicating): median {np.median(lookups):.2f} us, "
              f"max {max(lookups):.2f} us (same spec object); median {np.median(hashed):.2f} us, "
              f"max {max(hashed):.2f} us (an equal spec in a new object)")
        write_rows(rows, args.json)


if __name__ == "__main__":
    main()
