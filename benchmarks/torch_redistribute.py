"""PyTorch DTensor's ``redistribute`` against its own raw ``torch.distributed`` call (gloo, CPU).

The counterpart of ``redistribute.py`` for PyTorch: the same 1-D transitions, sizes, shapes
and timing method, so that PyTorch DTensor's overhead over its raw collective can be set
beside dtensor_np's overhead over raw mpi4py.  It needs only torch and NumPy (not
dtensor_np, not mpi4py); keep torch out of the project's venv::

    python3 -m venv /tmp/torchvenv && . /tmp/torchvenv/bin/activate && pip install torch==2.13.0 numpy
    python benchmarks/torch_redistribute.py --json OUT.json       # starts 2 ranks itself (about 2.5 min)
    python benchmarks/torch_redistribute.py --quick               # 1 KiB, 64 KiB, 1 MiB, short budget
    torchrun --nproc-per-node 2 benchmarks/torch_redistribute.py --json OUT.json   # or under torchrun

Run plainly, the script spawns ``--ranks`` (default 2) worker processes with
``torch.multiprocessing`` and joins them in a gloo process group through a ``FileStore`` in a
temporary directory; under ``torchrun`` (``RANK``/``WORLD_SIZE`` set) it uses ``env://``
instead.  Each worker sets ``torch.set_num_threads(1)`` and builds
``init_device_mesh("cpu", (world,))``.

``--json`` writes a list of rows ``{"transition", "bytes", "ranks", "dtensor_us", "raw_us",
"ratio", "iters", "torch"}`` (plus ``alt``/``alt_us``/``alt_ratio`` where a row times a second
raw variant, below).  ``bytes`` is the size of the *global* float32 tensor of shape
``(rows, cols)``, as square as the size allows (as in ``redistribute.py``).

The DTensor side is ``x.redistribute(mesh, [dst])`` on a DTensor built once (the result is
dropped each time); ``x`` comes from ``distribute_tensor`` for Shard/Replicate sources and
from ``DTensor.from_local(local, mesh, [Partial()])`` for Partial ones (every rank's ``local``
is the full global shape, with its own values).  The raw side is the plain
``torch.distributed`` call doing the same work, into tensors allocated once before the loop:

==========  ======================================================================
transition  raw torch.distributed (what is timed)
==========  ======================================================================
S(0)->R     ``all_gather_single(full, local)`` (the non-deprecated name of
            ``all_gather_into_tensor``; same gloo op)
P->R        ``buf.copy_(local)`` then ``all_reduce(buf)`` (SUM, in place): torch's
            ``all_reduce`` is in-place, and this is the out-of-place reduction that
            MPI's ``Allreduce(send, recv)`` and DTensor's functional ``all_reduce``
            (which clones its input) both do.  ``alt``: ``all_reduce`` in place on a
            preallocated zero buffer, no copy (the bare collective).
P->S(0)     ``reduce_scatter_single(out, local)`` (the non-deprecated name of
            ``reduce_scatter_tensor``; gloo supports it in torch 2.13)
S(0)->S(1)  pack the local block's column pieces piece-major (one ``copy_`` into a send
            buffer), then ``all_to_all_single(out, send)``; the received row blocks
            are the result (what ``redistribute.py`` times with ``Alltoall``).  DTensor
            does not use all-to-all on a CPU mesh ("CPU process group does not
            support alltoall yet, falling back with allgather + chunk"), so ``alt``
            times what it issues: ``all_gather_single`` of the local rows into a
            preallocated ``(rows, cols)`` tensor, then ``copy_`` of this rank's
            ``cols/k`` columns of it into a preallocated ``(rows, cols/k)`` output.
R->S(0)     ``out.copy_(local[start:stop])``: a slice copy of this rank's rows (no
            communication)
==========  ======================================================================

Timing is ``timing.py``'s method: the sides take turns in an order that rotates by one each
iteration; an iteration is ``dist.barrier()``, ``perf_counter``, the call, ``perf_counter``;
one ``all_reduce(MAX)`` of all recorded times after the loop makes each entry the slowest
rank's.  A warm-up picks the iteration count (about ``--budget`` seconds for the row, all
sides together; at least ``--min-iters``, at most ``--max-iters``), and a row pools
``--rounds`` rounds, each with new raw output tensors and the previous DTensor result kept
alive.  Rows report medians.  Before timing, each round checks that the DTensor result
equals the raw result (``torch.allclose``).
"""
from __future__ import annotations

import argparse
import gc
import os
import platform
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Placement, Replicate, Shard, distribute_tensor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli import add_size_options, chosen_sizes, format_size, global_shape, write_rows  # noqa: E402
from timing import Runner, pooled_rounds, timed_with  # noqa: E402

DTYPE = torch.float32


@dataclass(frozen=True)
class Case:
    name: str
    src: Placement
    dst: Placement


CASES = (
    Case("S(0)->R", Shard(0), Replicate()),
    Case("P->R", Partial(), Replicate()),
    Case("P->S(0)", Partial(), Shard(0)),
    Case("S(0)->S(1)", Shard(0), Shard(1)),
    Case("R->S(0)", Replicate(), Shard(0)),
)


# -- the raw torch.distributed side -----------------------------------------------------


def raw_runners(case: Case, local: torch.Tensor, shape: tuple[int, int],
                rank: int, k: int) -> tuple[Runner, torch.Tensor, tuple[str, Runner, torch.Tensor] | None]:
    """The hand-written version of ``case`` on this rank's ``local`` block and its output tensor.

    The third item is an alternative raw version ``(description, run, output)`` or None.
    """
    rows, cols = shape
    name = case.name
    if name == "S(0)->R":
        out = torch.empty(shape, dtype=DTYPE)
        return (lambda: dist.all_gather_single(out, local)), out, None
    if name == "P->R":
        out = torch.empty_like(local)

        def run() -> None:
            out.copy_(local)
            dist.all_reduce(out)

        zeros = torch.zeros_like(local)
        return run, out, ("all_reduce in place, no copy", lambda: dist.all_reduce(zeros), None)
    if name == "P->S(0)":
        out = torch.empty((rows // k, cols), dtype=DTYPE)
        return (lambda: dist.reduce_scatter_single(out, local)), out, None
    if name == "S(0)->S(1)":
        r, c = local.shape
        send = torch.empty((k, r, c // k), dtype=DTYPE)
        pieces = local.view(r, k, c // k).permute(1, 0, 2)
        send_flat = send.view(k * r, c // k)
        out = torch.empty((rows, cols // k), dtype=DTYPE)

        def run() -> None:
            send.copy_(pieces)
            dist.all_to_all_single(out, send_flat)

        gathered = torch.empty((rows, c), dtype=DTYPE)
        block = gathered[:, rank * (c // k):(rank + 1) * (c // k)]
        alt_out = torch.empty((rows, c // k), dtype=DTYPE)

        def issued() -> None:
            dist.all_gather_single(gathered, local)
            alt_out.copy_(block)

        return run, out, ("all_gather_single + copy_ of the column block (what DTensor issues on gloo)",
                          issued, alt_out)
    if name == "R->S(0)":
        r = rows // k
        out = torch.empty((r, cols), dtype=DTYPE)
        piece = local[rank * r:(rank + 1) * r]
        return (lambda: out.copy_(piece)), out, None
    raise AssertionError(name)


# -- measuring ----------------------------------------------------------------------------


def timed(fns: list[Runner], iters: int) -> np.ndarray:
    """``timing.py``'s loop with ``dist.barrier()`` and an ``all_reduce(MAX)`` of the times."""
    def to_slowest(times: np.ndarray) -> None:
        dist.all_reduce(torch.from_numpy(times), op=dist.ReduceOp.MAX)  # shares memory with ``times``

    return timed_with(fns, iters, dist.barrier, to_slowest)


def check_same(name: str, got: torch.Tensor, want: torch.Tensor, size: int, what: str = "raw") -> None:
    """Stop every rank (with every rank's complaint) when the DTensor result differs from ``what`` anywhere."""
    problem = None
    if got.shape != want.shape or got.dtype != want.dtype:
        problem = f"DTensor gave {tuple(got.shape)} {got.dtype}, {what} {tuple(want.shape)} {want.dtype}"
    elif not torch.allclose(got, want, rtol=1e-5, atol=1e-5):
        problem = f"DTensor and {what} results differ"
    problems: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(problems, problem)  # every rank knows: all exit together
    complaints = [f"rank {r}: {p}" for r, p in enumerate(problems) if p]
    if complaints:
        raise SystemExit(f"{name} {size} B: " + "; ".join(complaints))


def run_case(case: Case, size: int, mesh: DeviceMesh, budget_s: float, min_iters: int,
             max_iters: int, rounds: int) -> dict[str, Any]:
    """One row: ``rounds`` rounds, each with new raw outputs (and the last DTensor result kept), pooled."""
    rank, k = dist.get_rank(), dist.get_world_size()
    shape = global_shape(size, k)
    gen = torch.Generator().manual_seed(0)
    full = torch.randn(shape, generator=gen, dtype=DTYPE)
    if isinstance(case.src, Partial):
        # Every rank's own addend of the full shape (rank 0's is ``full``).
        local = full + rank if rank else full
        x = DTensor.from_local(local, mesh, [Partial()])
    else:
        x = distribute_tensor(full, mesh, [case.src])
        local = x.to_local()
    del full
    dst = [case.dst]

    def dtensor() -> None:
        x.redistribute(mesh, dst)

    alt_name = None

    def new_round() -> tuple[list[Runner], Any]:
        nonlocal alt_name
        raw, raw_out, alt = raw_runners(case, local, shape, rank, k)
        fns = [dtensor, raw]
        raw()
        result = x.redistribute(mesh, dst)
        got = result.to_local()
        check_same(case.name, got, raw_out, size)
        if alt is not None:
            alt_name, alt_run, alt_out = alt
            fns.append(alt_run)
            alt_run()
            if alt_out is not None:
                check_same(case.name, got, alt_out, size, "alt raw")
        return fns, (raw_out, result)

    # the calls fill the budget (+ 30 us each); the gloo barriers around them (about 0.15 ms
    # each here) come on top, so a row takes a few times ``budget_s`` of wall time
    times, iters = pooled_rounds(rounds, new_round, timed, budget_s, min_iters, max_iters, 30e-6)
    medians = [float(v) * 1e6 for v in np.median(times, axis=1)]
    dtensor_us, raw_us = medians[:2]
    row: dict[str, Any] = {
        "transition": case.name,
        "bytes": size,
        "ranks": k,
        "dtensor_us": round(dtensor_us, 3),
        "raw_us": round(raw_us, 3),
        "ratio": round(dtensor_us / raw_us, 4),
        "iters": iters,
        "torch": torch.__version__,
    }
    if alt_name is not None:
        row.update(alt=alt_name, alt_us=round(medians[2], 3), alt_ratio=round(dtensor_us / medians[2], 4))
    return row


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'transition':<12} {'bytes':>8} {'ranks':>5} {'dtensor_us':>12} {'raw_us':>12} {'ratio':>7}"
            f" {'alt_us':>12} {'alt_ratio':>9} {'iters':>6}")
    lines = [head, "-" * len(head)]
    for r in rows:
        alt = (f" {r['alt_us']:>12.1f} {r['alt_ratio']:>9.2f}" if "alt_us" in r else f" {'':>12} {'':>9}")
        lines.append(f"{r['transition']:<12} {format_size(r['bytes']):>8} {r['ranks']:>5} {r['dtensor_us']:>12.1f} "
                     f"{r['raw_us']:>12.1f} {r['ratio']:>7.2f}{alt} {r['iters']:>6}")
    return "\n".join(lines)


def worker(rank: int, world: int, init_method: str, args: argparse.Namespace) -> None:
    """One rank: join the gloo group, run every row, print and (rank 0) write the JSON."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world)
    try:
        mesh = init_device_mesh("cpu", (world,))
        sizes = chosen_sizes(args)
        budget = args.budget if args.budget is not None else (0.3 if args.quick else 1.0)
        min_iters = args.min_iters
        cases = CASES
        if args.transitions:
            wanted = [t.strip() for t in args.transitions.split(",")]
            unknown = sorted(set(wanted) - {c.name for c in cases})
            if unknown:
                raise SystemExit(f"unknown transitions {unknown}: expected some of {[c.name for c in cases]}")
            cases = tuple(c for c in cases if c.name in wanted)
        if rank == 0:
            print(f"# torch DTensor redistribute vs raw torch.distributed (gloo, CPU): {world} ranks, float32, "
                  f"medians of the slowest rank; bytes = global tensor size", flush=True)
            print(f"# python {platform.python_version()}, torch {torch.__version__}, numpy {np.__version__}, "
                  f"threads {torch.get_num_threads()}", flush=True)
        rows = []
        for case in cases:
            for size in sizes:
                row = run_case(case, size, mesh, budget, min_iters, args.max_iters, max(1, args.rounds))
                gc.collect()
                rows.append(row)
                if rank == 0:
                    print(f"{row['transition']:<12} {format_size(size):>8}  dtensor {row['dtensor_us']:10.1f} us  "
                          f"raw {row['raw_us']:10.1f} us  ratio {row['ratio']:5.2f}"
                          + (f"  alt {row['alt_us']:10.1f} us  alt_ratio {row['alt_ratio']:5.2f}"
                             if "alt_us" in row else ""), flush=True)
        if rank == 0:
            print()
            print(table(rows))
            alts = {r["transition"]: r["alt"] for r in rows if "alt" in r}
            for name, what in alts.items():
                print(f"alt ({name}): {what}")
            write_rows(rows, args.json)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_size_options(parser, "a budget of 0.3 s")
    parser.add_argument("--transitions", help="comma-separated transitions to run (default: all)")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds of measuring per row, all sides together (default 1.0; 0.3 with --quick)")
    parser.add_argument("--min-iters", type=int, default=10, help="at least this many iterations (default 10)")
    parser.add_argument("--max-iters", type=int, default=2000, help="at most this many iterations (default 2000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per row, each with new raw outputs; "
                        "the row pools their iterations (default 3)")
    parser.add_argument("--ranks", type=int, default=2, help="worker processes to spawn (default 2; "
                        "ignored under torchrun)")
    args = parser.parse_args(argv)

    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # under torchrun
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), "env://", args)
        return
    if args.ranks < 2:
        raise SystemExit("--ranks must be at least 2")
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(args.ranks, f"file://{os.path.join(tmp, 'store')}", args), nprocs=args.ranks)


if __name__ == "__main__":
    main()
