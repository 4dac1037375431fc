"""Training-step benchmark: one FSDP (x TP) step of the example transformer against the single-process step.

Run::

    mpiexec -n 2 python benchmarks/train_step.py --json OUT.json       # dp=2, and dp=1 x tp=2
    mpiexec -n 2 python benchmarks/train_step.py --quick

Every rank first keeps freed memory for the next step as the training job
does (``keep_freed_memory``; ``--release-memory``: glibc's defaults), and the
table gives the page faults of one fsdp step (the most of any rank).  The
model and data are those of ``python -m dtensor_np.examples.train`` (float64).
A step is the loss and gradients plus an AdamW update:

* ``single``: the program on one device (``dt.value_and_grad`` on the full
  batch, AdamW on the parameter dict): every rank runs it at the same time on
  its own core, so it sees the same machine as the parallel step;
* ``fsdp``: ``dt.fsdp`` on a (dp, tp) mesh of every rank, AdamW on the flat
  shards (each rank does 1/ranks of the batch's work, plus communication).

Steps are interleaved (timing.py: barrier, clock, step; the slowest rank per
step), and the table gives medians, the speedup ``single / fsdp`` and the
collectives one step issues.  Both runs start from the same parameters; the
losses of the first step are checked equal before timing.

``--floor`` (one process, no mpiexec needed) puts each layout's step (one
device, and dp, tp, dp x tp on simulated meshes of this process) beside its
floor: the NumPy kernels of one step recorded with their arguments and run
alone as a dataflow (step_floor.py), the collectives' time on the simulated mesh, and the
rest, the Python around the kernels (and the page faults of memory the
allocator gave back), as a share of the step; beside PyTorch eager for the
same model (one thread) where torch is installed; and the page faults per
step with the step's user and system CPU time (getrusage: the system time is
the kernel's work on the faults).  Times are CPU times of this process (``time.process_time``: steadier
than the wall clock on a shared machine).  It calls the training job's
``keep_freed_memory`` first, as ``python -m dtensor_np.examples.train`` does
(``--release-memory``: glibc's defaults)::

    python benchmarks/train_step.py --floor --json OUT.json
    python benchmarks/train_step.py --floor --release-memory
"""
from __future__ import annotations

import os

if __name__ == "__main__":  # run as the script: one BLAS thread (a process per core; torch's column is set to one
    for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # thread too), before NumPy
        os.environ[_variable] = "1"

import argparse  # noqa: E402
import functools  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from mpi4py import MPI  # noqa: E402

from cli import write_rows  # noqa: E402
from timing import timed, timed_with  # noqa: E402
import step_floor  # noqa: E402

import dtensor_np as dt  # noqa: E402
from dtensor_np.autodiff import grad_graph  # noqa: E402
from dtensor_np.examples import train as example  # noqa: E402
from dtensor_np.passes.pruning import prune  # noqa: E402


def model(args: argparse.Namespace) -> tuple[Any, dict[str, np.ndarray], np.ndarray, np.ndarray, Any, Any]:
    """``(config, parameters, x, y, loss function, AdamW)`` of the example transformer at the sizes asked."""
    cfg = example.Config(args.layers, args.d_model, args.heads, args.d_ff, args.seq)
    text = example.corpus(20_000, 0)
    vocab = sorted(set(text))
    params = example.init_params(np.random.default_rng(0), cfg, len(vocab))
    x, y = example.batch(text, vocab, cfg, args.batch, 0, 0)
    return cfg, params, x, y, functools.partial(example.loss_fn, cfg=cfg), dt.optim.adamw(1e-3)


def run(dp: int, tp: int, args: argparse.Namespace, comm: MPI.Intracomm) -> dict[str, Any]:
    cfg, params, x, y, fn, opt = model(args)
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
    faults = comm.allreduce(step_floor.page_faults(fsdp, 3), op=MPI.MAX)
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
        "fsdp_page_faults": faults,
        "iters": args.iters,
    }


def floor(dp: int, tp: int, args: argparse.Namespace) -> dict[str, Any]:
    """One layout's step beside its kernels timed alone, in this process (``dp = 0``: one device, no mesh)."""
    cfg, params, x, y, fn, opt = model(args)
    if dp == 0:
        value_and_grad: Any = dt.value_and_grad(fn)
        joint, held = prune(grad_graph(dt.graph.trace(fn, params, x, y), (0,))), params  # value_and_grad's graph
    else:
        mesh = dt.DeviceMesh((dp, tp), ("dp", "tp"))
        step = dt.fsdp(fn, params, x, y, mesh=mesh, tp_plan=example.plan(cfg) if tp > 1 else None,
                       bucket_mb=args.bucket_mb)
        value_and_grad, joint, held = step.value_and_grad, None, step.shard(params)
    state = opt.init(held)
    calls, comm_s = step_floor.record_step(value_and_grad, opt, held, state, (x, y), joint)
    program = calls.program()

    def one_step() -> Any:
        loss, grads = value_and_grad(held, x, y)
        return opt.update(grads, state, held), loss

    def kernels() -> None:
        step_floor.replay(calls, program)

    timed_with([one_step, kernels], args.warmup, lambda: None, lambda t: None, clock=time.process_time)
    times = timed_with([one_step, kernels], args.iters, lambda: None, lambda t: None, clock=time.process_time)
    times = np.median(times, axis=1) * 1e3
    faults, user_ms, sys_ms = step_floor.usage(one_step, 5)
    step_ms, kernel_ms, comm_ms = float(times[0]), float(times[1]), comm_s * 1e3
    torch_ms = torch_eager_ms(cfg, params, x, y, args.iters, args.warmup)
    return {
        "layout": "one device" if dp == 0 else f"{dp}x{tp} simulated",
        "batch": args.batch,
        "step_ms": step_ms,
        "kernels_ms": kernel_ms,
        "kernel_calls": len(calls),
        "comm_ms": comm_ms,
        "python_ms": step_ms - kernel_ms - comm_ms,
        "python_share": (step_ms - kernel_ms - comm_ms) / step_ms,
        "torch_ms": torch_ms,
        "page_faults": faults,
        "user_ms": user_ms,
        "sys_ms": sys_ms,
        "iters": args.iters,
    }


def torch_eager_ms(cfg: Any, params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray, iters: int,
                   warmup: int) -> float | None:
    """The same model's step (loss, backward, AdamW) in PyTorch eager on one thread, median ms; None without torch."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    p = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    tx, ty = torch.tensor(x), torch.tensor(y)
    opt = torch.optim.AdamW(list(p.values()), lr=1e-3, weight_decay=0.01)

    def layer_norm(name: str, h: Any) -> Any:
        mu = h.mean(-1, keepdim=True)
        var = ((h - mu) ** 2).mean(-1, keepdim=True)
        return (h - mu) / torch.sqrt(var + 1e-5) * p[name + ".gain"] + p[name + ".bias"]

    def linear(name: str, h: Any) -> Any:
        return h @ p[name + ".weight"].T + p[name + ".bias"]

    def loss_fn() -> Any:
        b, s, _ = tx.shape
        d, heads = cfg.d_model, cfg.heads
        h = tx @ p["embed"] + p["pos"]
        mask = torch.triu(torch.full((s, s), -float("inf"), dtype=h.dtype), 1)
        for i in range(cfg.layers):
            pre = f"blocks.{i}."
            a_in = layer_norm(pre + "ln1", h)
            q, k, v = (linear(pre + f"attn.{n}", a_in).reshape(b, s, heads, d // heads).transpose(1, 2)
                       for n in ("q", "k", "v"))
            scores = q @ k.transpose(-1, -2) / float(np.sqrt(d // heads)) + mask
            w = torch.exp(scores - scores.max(-1, keepdim=True).values)
            w = w / w.sum(-1, keepdim=True)
            h = h + linear(pre + "attn.o", (w @ v).transpose(1, 2).reshape(b, s, d))
            f = linear(pre + "mlp.fc1", layer_norm(pre + "ln2", h))
            f = 0.5 * f * (1.0 + torch.tanh(float(np.sqrt(2.0 / np.pi)) * (f + 0.044715 * f ** 3)))
            h = h + linear(pre + "mlp.fc2", f)
        z = layer_norm("ln_f", h) @ p["embed"].T
        z = z - z.max(-1, keepdim=True).values
        log_probs = z - torch.log(torch.exp(z).sum(-1, keepdim=True))
        return -(ty * log_probs).sum(-1).mean()

    def step() -> None:
        opt.zero_grad()
        loss_fn().backward()
        opt.step()

    times = timed_with([step], warmup + iters, lambda: None, lambda t: None, clock=time.process_time)[0, warmup:]
    return float(np.median(times) * 1e3)


def main_floor(args: argparse.Namespace) -> None:
    keep = getattr(example, "keep_freed_memory", None)  # absent before it was written (a tree measured before)
    memory = "glibc default" if args.release_memory or keep is None else f"kept: {keep()}"
    layouts = [(0, 1), (2, 1), (1, 2), (2, 2)]
    rows = [{**floor(dp, tp, args), "freed_memory": memory} for dp, tp in layouts]
    print(f"# one process, {platform.machine()}, float64, batch {args.batch}, {rows[0]['kernel_calls']} kernels "
          f"(one device), median CPU ms (process_time) over {args.iters} steps after {args.warmup} warm-up; "
          f"freed memory: {memory}")
    print(f"{'layout':<16}{'step':>10}{'kernels':>10}{'comm':>9}{'python':>9}{'share':>8}{'torch eager':>13}{'faults':>8}{'user':>9}{'sys':>8}")
    for r in rows:
        torch_col = "-" if r["torch_ms"] is None else f"{r['torch_ms']:.1f}ms"
        print(f"{r['layout']:<16}{r['step_ms']:>8.1f}ms{r['kernels_ms']:>8.1f}ms{r['comm_ms']:>7.1f}ms"
              f"{r['python_ms']:>7.1f}ms{r['python_share'] * 100:>7.1f}%{torch_col:>13}{r['page_faults']:>8.0f}"
              f"{r['user_ms']:>7.1f}ms{r['sys_ms']:>6.1f}ms")
    if rows[0]["torch_ms"] is None:
        print("# torch eager: - (torch is not installed)")
    write_rows(rows, args.json)


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
    parser.add_argument("--floor", action="store_true",
                        help="one process: each layout's step beside its kernels timed alone (and torch eager)")
    parser.add_argument("--release-memory", action="store_true",
                        help="leave glibc's malloc as it is (no keep_freed_memory, which the training job calls)")
    args = parser.parse_args(argv)
    if args.quick:
        args.iters, args.warmup, args.layers, args.d_model, args.d_ff, args.seq = 3, 1, 1, 16, 32, 8
    if args.floor:
        return main_floor(args)
    comm = MPI.COMM_WORLD
    n = comm.size
    kept = False if args.release_memory else example.keep_freed_memory()  # as the training job does
    meshes = [(n, 1)] + ([(n // 2, 2)] if n % 2 == 0 else [])
    rows = [run(dp, tp, args, comm) for dp, tp in meshes]
    if comm.rank == 0:
        print(f"# {n} ranks, {MPI.Get_library_version().splitlines()[0]}, {platform.machine()}, float64, "
              f"median ms per step (slowest rank) over {args.iters} steps after {args.warmup} warm-up; "
              f"freed memory kept: {kept}")
        print(f"{'mesh (dp x tp)':<16}{'params':>9}{'batch':>7}{'single':>11}{'fsdp':>11}{'speedup':>9}{'faults':>8}"
              "  collectives per step")
        for r in rows:
            print(f"{r['mesh']:<16}{r['params']:>9,}{r['batch']:>7}{r['single_ms']:>9.1f}ms{r['fsdp_ms']:>9.1f}ms"
                  f"{r['speedup']:>8.2f}x{r['fsdp_page_faults']:>8.0f}  {r['collectives']}")
        write_rows(rows, args.json)


if __name__ == "__main__":
    main()
