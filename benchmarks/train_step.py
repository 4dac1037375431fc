"""Training-step benchmark: one FSDP (x TP) step of the example transformer against the single-process step.

Run::

    mpiexec -n 2 python benchmarks/train_step.py --json OUT.json       # dp=2, and dp=1 x tp=2
    mpiexec -n 2 python benchmarks/train_step.py --quick

The model and data are those of ``python -m dtensor_np.examples.train``
(float64).  A step is the loss and gradients plus an AdamW update:

* ``single``: the program on one device (``dt.value_and_grad`` on the full
  batch, AdamW on the parameter dict): every rank runs it at the same time on
  its own core, so it sees the same machine as the parallel step;
* ``fsdp``: ``dt.fsdp`` on a (dp, tp) mesh of every rank, AdamW on the flat
  shards (each rank does 1/ranks of the batch's work, plus communication).

Steps are interleaved (timing.py: barrier, clock, step; the slowest rank per
step), and the table gives medians, the speedup ``single / fsdp`` and the
collectives one step issues.  Both runs start from the same parameters; the
losses of the first step are checked equal before timing.
"""
from __future__ import annotations

import argparse
import functools
import os
import platform
import sys
from typing import Any

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from mpi4py import MPI  # noqa: E402

from cli import write_rows  # noqa: E402
from timing import timed  # noqa: E402

import dtensor_np as dt  # noqa: E402
from dtensor_np.examples import train as example  # noqa: E402


def run(dp: int, tp: int, args: argparse.Namespace, comm: MPI.Intracomm) -> dict[str, Any]:
    cfg = example.Config(args.layers, args.d_model, args.heads, args.d_ff, args.seq)
    text = example.corpus(20_000, 0)
    vocab = sorted(set(text))
    params = example.init_params(np.random.default_rng(0), cfg, len(vocab))
    x, y = example.batch(text, vocab, cfg, args.batch, 0, 0)
    fn = functools.partial(example.loss_fn, cfg=cfg)
    opt = dt.optim.adamw(1e-3)
    mesh = dt.init_device_mesh((dp, tp), dim_names=("dp", "tp"), backend="mpi")
    step = dt.fsdp(fn, params, x, y, mesh=mesh, tp_plan=example.plan(cfg) if tp > 1 else None, bucket_mb=args.bucket_mb)
    flat = step.shard(params)
    single_grad = dt.value_and_grad(fn)
    single_state, fsdp_state = opt.init(params), opt.init(flat)

    def single() -> Any:
        loss, grads = single_grad(params, x, y)
        return opt.update(grads, single_state, params), loss

    def fsdp() -> Any:
        loss, grads = step.value_and_grad(flat, x, y)
        return opt.update(grads, fsdp_state, flat), loss

    want, got = float(single()[1]), float(fsdp()[1])
    assert abs(want - got) <= 1e-9 * abs(want), f"losses differ: {want} vs {got}"
    timed([single, fsdp], args.warmup, comm)
    times = np.median(timed([single, fsdp], args.iters, comm), axis=1) * 1e3
    n_params = sum(v.size for v in params.values())
    return {
        "mesh": f"{dp}x{tp}",
        "ranks": comm.size,
        "params": int(n_params),
        "batch": args.batch,
        "single_ms": float(times[0]),
        "fsdp_ms": float(times[1]),
        "speedup": float(times[0] / times[1]),
        "buckets": step.buckets,
        "collectives": step.collectives(),
        "iters": args.iters,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", metavar="OUT.json")
    parser.add_argument("--layers", type=int, default=example.Config.layers)
    parser.add_argument("--d-model", type=int, default=example.Config.d_model)
    parser.add_argument("--heads", type=int, default=example.Config.heads)
    parser.add_argument("--d-ff", type=int, default=example.Config.d_ff)
    parser.add_argument("--seq", type=int, default=example.Config.seq)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--bucket-mb", type=float, default=1.0)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="3 iterations after 1, a small model")
    args = parser.parse_args(argv)
    if args.quick:
        args.iters, args.warmup, args.layers, args.d_model, args.d_ff, args.seq = 3, 1, 1, 16, 32, 8
    comm = MPI.COMM_WORLD
    n = comm.size
    meshes = [(n, 1)] + ([(n // 2, 2)] if n % 2 == 0 else [])
    rows = [run(dp, tp, args, comm) for dp, tp in meshes]
    if comm.rank == 0:
        print(f"# {n} ranks, {MPI.Get_library_version().splitlines()[0]}, {platform.machine()}, float64, "
              f"median ms per step (slowest rank) over {args.iters} steps after {args.warmup} warm-up")
        print(f"{'mesh (dp x tp)':<16}{'params':>9}{'batch':>7}{'single':>11}{'fsdp':>11}{'speedup':>9}  collectives per step")
        for r in rows:
            print(f"{r['mesh']:<16}{r['params']:>9,}{r['batch']:>7}{r['single_ms']:>9.1f}ms{r['fsdp_ms']:>9.1f}ms"
                  f"{r['speedup']:>8.2f}x  {r['collectives']}")
        write_rows(rows, args.json)


if __name__ == "__main__":
    main()
