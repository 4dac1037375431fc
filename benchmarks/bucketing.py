"""Bucketing benchmark: many small all_gathers / reduce_scatters / all_reduces one by one against one bucket.

Run::

    mpiexec -n 2 python benchmarks/bucketing.py --json OUT.json
    mpiexec -n 2 python benchmarks/bucketing.py --quick            # a short run

An FSDP-style graph over ``--params`` float32 parameters of ``--kib`` KiB
each (64 of 16 KiB by default, shape ``(rows, 64)``) is traced and sharded
on a 1-D mesh of every rank:

* all_gather: ``fn(params) = params`` with the parameters ``Shard(0)`` and the
  outputs replicated (one ``S(0)->R`` per parameter);
* reduce_scatter: the same with the inputs ``Partial()`` and the outputs
  ``Shard(0)`` (one ``P(sum)->S(0)`` per parameter, like FSDP gradients);
* all_reduce: inputs ``Partial()``, outputs replicated (one ``P(sum)->R``
  per parameter, like DDP gradients).

Each graph is timed in the forms the passes produce:

=================  ==========================================================
variant            what runs
=================  ==========================================================
redistribute       the sharded graph: one blocking collective per parameter
                   (the redistribute executor's prepared MPI calls)
lowered            ``passes.lower``: one non-blocking collective per parameter,
                   every one started before the first wait
bucketed           ``passes.bucket_all_gather`` / ``bucket_reduce_scatter`` /
                   ``bucket_all_reduce`` (``--cap-mb``, 25 MiB: one bucket):
                   copy-in, one collective, split-out
flat               FSDP's flat parameters (``dt.fsdp``, :mod:`dtensor_np.passes.flat_params`):
                   the parameters already live in one flat buffer per bucket, so
                   the graph runs one collective with no copy-in or split-out
flat+views         ``flat`` and, for all_gather, the parameters cut out as views
                   (``unflatten``); for reduce_scatter, the gradients written
                   into the flat buffer first (``flatten``, one copy each)
raw one-by-one     plain mpi4py: one blocking ``Allgather`` /
                   ``Reduce_scatter_block`` / ``Allreduce`` per parameter into buffers
                   allocated before the loop (the floor for one by one)
raw flat           plain mpi4py: one collective on all parameters already in
                   one flat buffer (the floor for a bucket: no copies)
=================  ==========================================================

The graph variants are called exactly as a user calls them
(``graph(local_params)``), so interpreter overhead is included.  Every
variant is checked to give the same arrays as the redistribute graph before
timing.  An iteration is ``Barrier``, start the clock, run, stop the clock;
variants are interleaved iteration by iteration (alternating order); an
iteration's time is the slowest rank's (one ``Allreduce(MAX)`` after the
loop), and the table reports medians after warm-up.  ``speedup`` is the
median of ``redistribute`` (and of ``lowered``) over the median of
``bucketed``.  The inputs are small integers in float32, so sums are exact
whatever order an MPI call reduces in, and every variant is checked bit for
bit.

MPICH 5 picks a slow ``Ireduce_scatter_block`` algorithm (recursive halving)
for blocks of about 256 KiB to 1 MiB on 2 ranks (3.5 times its blocking
``Reduce_scatter_block`` here), which is where a 64 x 16 KiB bucket lands;
``MPIR_CVAR_IREDUCE_SCATTER_BLOCK_INTRA_ALGORITHM=sched_pairwise`` (and
``MPIR_CVAR_IREDUCE_SCATTER_INTRA_ALGORITHM=sched_pairwise``) fixes both its
speed and its summation order (see ``dtensor_np.passes.bucketing``).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from mpi4py import MPI  # noqa: E402

from cli import write_rows  # noqa: E402  (benchmarks/cli.py, next to this script)
from timing import timed  # noqa: E402

import dtensor_np as dt  # noqa: E402
from dtensor_np.graph import graph_collectives, trace  # noqa: E402
from dtensor_np.passes import bucket_all_gather, bucket_all_reduce, bucket_reduce_scatter, lower  # noqa: E402
from dtensor_np.passes.flat_params import FlatLayout  # noqa: E402
from dtensor_np.tensor_parallel import shard_graph  # noqa: E402

COLS = 64
VARIANTS = ("redistribute", "lowered", "bucketed", "flat", "flat+views", "raw one-by-one", "raw flat")


def fsdp_graphs(kind: str, params: dict[str, np.ndarray], mesh: dt.DeviceMesh, cap_mb: float):
    """(redistribute graph, lowered, bucketed) for one collective per parameter."""
    g = trace(lambda p: p, params)
    if kind == "all_gather":
        specs = tuple(dt.DTensorSpec(mesh, (dt.Shard(0),), v.aval.meta) for v in g.inputs)
        sharded = shard_graph(g, specs)
        bucketed = bucket_all_gather(sharded, cap_mb)
    else:
        specs = tuple(dt.DTensorSpec(mesh, (dt.Partial(),), v.aval.meta) for v in g.inputs)
        out = dt.Shard(0) if kind == "reduce_scatter" else dt.Replicate()
        sharded = shard_graph(g, specs, output_specs=[(out,)] * len(g.inputs))
        bucket = bucket_reduce_scatter if kind == "reduce_scatter" else bucket_all_reduce
        bucketed = bucket(sharded, cap_mb)
    return sharded, specs, lower(sharded), bucketed


def flat_runners(kind: str, params: dict[str, np.ndarray], local: dict[str, Any], mesh: dt.DeviceMesh, rank: int):
    """(the flat bucket's collective alone, with its unflatten / flatten) as ``dt.fsdp`` runs them, and their results."""
    names = sorted(params)
    layout = FlatLayout.of([dt.DTensorSpec(mesh, (dt.Replicate(),), dt.TensorMeta(params[n].shape, params[n].dtype))
                            for n in names], 0)
    g = trace(lambda b: b, np.zeros(layout.aval.shape, layout.dtype))
    if kind == "all_gather":
        graph = lower(shard_graph(g, (layout.storage_spec(),), output_specs=[layout.gathered_spec()]))
        row = layout.shard_rows(rank, [params[n] for n in names])

        def views() -> Any:
            return layout.unflatten(rank, graph(row))

        return (lambda: graph(row)), views, dict(zip(names, views()))
    graph = lower(shard_graph(g, (layout.partial_spec(),), output_specs=[layout.storage_spec()]))
    grads = [local[n] for n in names]
    flat = layout.flatten(rank, *grads)

    def packed() -> Any:
        return graph(layout.flatten(rank, *grads))

    return (lambda: graph(flat)), packed, packed()


def raw_runners(
    kind: str, locals_: list[np.ndarray], comm: MPI.Intracomm
) -> tuple[Callable[[], Any], Callable[[], Any], list[np.ndarray]]:
    """(one blocking mpi4py collective per parameter, one collective on a ready flat buffer, the former's outputs)."""
    k = comm.size
    if kind == "all_gather":
        recvs = [np.empty((k,) + x.shape, x.dtype) for x in locals_]
        flat_send = np.concatenate([x.reshape(-1) for x in locals_])
        flat_recv = np.empty((k, flat_send.size), flat_send.dtype)

        def one_by_one() -> None:
            for x, out in zip(locals_, recvs):
                comm.Allgather(x, out)

        return one_by_one, lambda: comm.Allgather(flat_send, flat_recv), [r.reshape((-1,) + r.shape[2:]) for r in recvs]
    if kind == "all_reduce":
        sums = [np.empty_like(x) for x in locals_]
        flat_send = np.concatenate([x.reshape(-1) for x in locals_])
        flat_sum = np.empty_like(flat_send)

        def one_by_one_ar() -> None:
            for x, out in zip(locals_, sums):
                comm.Allreduce(x, out, MPI.SUM)

        return one_by_one_ar, lambda: comm.Allreduce(flat_send, flat_sum, MPI.SUM), sums
    recvs = [np.empty((x.shape[0] // k,) + x.shape[1:], x.dtype) for x in locals_]
    flat_send = np.stack([np.concatenate([x.reshape(k, -1)[p] for x in locals_]) for p in range(k)])
    flat_recv = np.empty(flat_send.shape[1], flat_send.dtype)

    def one_by_one_rs() -> None:
        for x, out in zip(locals_, recvs):
            comm.Reduce_scatter_block(x, out, MPI.SUM)

    return one_by_one_rs, lambda: comm.Reduce_scatter_block(flat_send, flat_recv, MPI.SUM), recvs


def run_kind(kind: str, args: argparse.Namespace, comm: MPI.Intracomm, mesh: dt.DeviceMesh) -> dict[str, Any]:
    rows = max(comm.size, args.kib * 1024 // (4 * COLS))
    rows -= rows % comm.size
    rng = np.random.default_rng(7)
    # small integers: sums are exact in any order, so every variant's result can be checked bit for bit
    # whatever reduction order each MPI call picks
    params = {f"layer{i:03d}.weight": rng.integers(-64, 64, (rows, COLS)).astype(np.float32) for i in range(args.params)}
    sharded, specs, lowered, bucketed = fsdp_graphs(kind, params, mesh, args.cap_mb)
    if kind == "all_gather":
        local = {
            name: dt.distribute_tensor(x, mesh, [dt.Shard(0)], src_data_rank=None).to_local() for name, x in params.items()
        }
    else:  # every rank holds a partial sum of the gradient
        local = {name: (x * (comm.rank + 1)).astype(np.float32) for name, x in params.items()}
    reference = sharded(local)
    for graph in (lowered, bucketed):
        out = graph(local)
        assert all(np.array_equal(out[k], reference[k]) for k in reference), f"{kind}: outputs differ"
    raw_each, raw_flat, raw_outputs = raw_runners(kind, [np.ascontiguousarray(local[k]) for k in sorted(local)], comm)
    raw_each()  # the hand-written collectives give the same arrays (exact: small integers)
    assert all(np.array_equal(reference[k], x) for k, x in zip(sorted(local), raw_outputs)), f"{kind}: DTensor != raw MPI"
    if kind == "all_reduce":  # FSDP's flat buffers are gathered and reduce-scattered, not all-reduced
        flat_only = flat_views = (lambda: None)  # reported as nan
    else:
        flat_only, flat_views, flat_out = flat_runners(kind, params, local, mesh, comm.rank)
        if kind == "all_gather":
            assert all(np.array_equal(flat_out[k], reference[k]) for k in reference), "flat: outputs differ"
        else:  # this rank's row of the reduced flat buffer: its run of the flat vector of summed gradients
            total = comm.size * (comm.size + 1) // 2  # rank r holds (r + 1) * x
            whole = np.concatenate([params[k].reshape(-1) * total for k in sorted(params)])
            row = np.asarray(flat_out).reshape(-1)
            mine = whole[comm.rank * row.size:(comm.rank + 1) * row.size]
            assert np.array_equal(row[:mine.size], mine), "flat: outputs differ"
    fns = [lambda: sharded(local), lambda: lowered(local), lambda: bucketed(local), flat_only, flat_views, raw_each,
           raw_flat]
    timed(fns, args.warmup, comm)
    times = np.median(timed(fns, args.iters, comm), axis=1) * 1e6
    med = dict(zip(VARIANTS, (float(t) for t in times)))
    if kind == "all_reduce":
        med["flat"] = med["flat+views"] = float("nan")
    return {
        "kind": kind,
        "ranks": comm.size,
        "params": args.params,
        "param_bytes": rows * COLS * 4,
        "collectives": {
            "redistribute": graph_collectives(sharded)[kind],
            "bucketed": graph_collectives(bucketed)[kind],
        },
        **{f"{v.replace(' ', '_').replace('-', '_')}_us": med[v] for v in VARIANTS},
        "speedup_vs_redistribute": med["redistribute"] / med["bucketed"],
        "speedup_vs_lowered": med["lowered"] / med["bucketed"],
        "flat_vs_raw_flat": med["flat"] / med["raw flat"],
        "flat_views_vs_raw_flat": med["flat+views"] / med["raw flat"],
        "iters": args.iters,
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'collective':<15}{'ranks':>6}{'params':>7}{'bytes':>8}{'colls':>8}"
        f"{'redistribute':>14}{'lowered':>10}{'bucketed':>10}{'flat':>10}{'flat+views':>12}{'raw 1-by-1':>12}"
        f"{'raw flat':>10}{'speedup':>9}{'vs lowered':>11}{'flat/raw':>10}{'+views/raw':>11}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        colls = f"{r['collectives']['redistribute']}->{r['collectives']['bucketed']}"
        lines.append(
            f"{r['kind']:<15}{r['ranks']:>6}{r['params']:>7}{r['param_bytes'] // 1024:>6}Ki{colls:>8}"
            f"{r['redistribute_us']:>12.1f}us{r['lowered_us']:>8.1f}us{r['bucketed_us']:>8.1f}us"
            f"{r['flat_us']:>8.1f}us{r['flat+views_us']:>10.1f}us"
            f"{r['raw_one_by_one_us']:>10.1f}us{r['raw_flat_us']:>8.1f}us"
            f"{r['speedup_vs_redistribute']:>8.2f}x{r['speedup_vs_lowered']:>10.2f}x"
            f"{r['flat_vs_raw_flat']:>9.2f}x{r['flat_views_vs_raw_flat']:>10.2f}x"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", metavar="OUT.json", help="write the rows as JSON (rank 0)")
    parser.add_argument("--params", type=int, default=64, help="parameters per graph (default 64)")
    parser.add_argument("--kib", type=int, default=16, help="KiB per parameter, float32 (default 16)")
    parser.add_argument("--cap-mb", type=float, default=25.0, help="bucket cap in MiB (default 25)")
    parser.add_argument("--iters", type=int, default=300, help="timed iterations (default 300)")
    parser.add_argument("--warmup", type=int, default=30, help="warm-up iterations (default 30)")
    parser.add_argument("--quick", action="store_true", help="40 iterations after 5 of warm-up")
    args = parser.parse_args(argv)
    if args.quick:
        args.iters, args.warmup = 40, 5
    comm = MPI.COMM_WORLD
    mesh = dt.init_device_mesh((comm.size,), backend="mpi")
    rows = [run_kind(kind, args, comm, mesh) for kind in ("all_gather", "reduce_scatter", "all_reduce")]
    if comm.rank == 0:
        print(f"# {comm.size} ranks, {MPI.Get_library_version().splitlines()[0]}, {platform.machine()}, "
              f"median us per graph call (slowest rank) over {args.iters} iterations after {args.warmup} warm-up")
        print(table(rows))
        write_rows(rows, args.json)


if __name__ == "__main__":
    main()
