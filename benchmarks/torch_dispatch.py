"""PyTorch DTensor's eager op overhead: one op on DTensors against the same torch call on the local shard (gloo, CPU).

The counterpart of ``dispatch.py`` for PyTorch: the same ops (their torch spelling), shapes
and timing method, so PyTorch DTensor's per-op overhead can be set beside dtensor_np's.  It
needs only torch and NumPy (not dtensor_np, not mpi4py); keep torch out of the project's
venv::

    python3 -m venv /work/venv-torch && /work/venv-torch/bin/pip install torch==2.13.0 numpy
    /work/venv-torch/bin/torchrun --nproc-per-node 2 benchmarks/torch_dispatch.py --json OUT.json
    /work/venv-torch/bin/python benchmarks/torch_dispatch.py --quick     # spawns 2 ranks itself

Run plainly, the script spawns ``--ranks`` (default 2) workers with ``torch.multiprocessing``
joined in a gloo group through a ``FileStore``; under ``torchrun`` it uses ``env://``.  Each
worker sets ``torch.set_num_threads(1)`` and builds ``init_device_mesh("cpu", (world,))``.

``x`` is a 64x64 float64 DTensor ``Shard(0)``, ``w`` a 64x64 float64 ``Replicate``.  For every
op the DTensor call and the same torch call on ``x.to_local()`` / ``w.to_local()`` are timed
interleaved (``timing.timed_with``: ``dist.barrier()``, the clock, one call); a row is the
best of ``--repeats`` medians of ``--iters`` calls on the slowest rank, ``overhead_us =
dtensor_us - local_us``.  Each op is called a few times first (PyTorch caches its sharding
propagation too), and its result is checked against torch on the full tensors.  An op
PyTorch DTensor refuses gets a row with ``"error"`` and no times.

``--json`` writes rows ``{"op", "backend": "torch-gloo", "ranks", "local_us", "dtensor_us",
"overhead_us", "iters", "repeats", "torch"}`` (rank 0), as ``dispatch.py`` does.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
from typing import Any, Callable

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli import write_rows  # noqa: E402
from timing import timed_with  # noqa: E402

N = 64


def _setitem(x: Any, w: Any) -> Any:
    x[0] = 1
    return x


# name (dispatch.py's) -> f(x, w) in torch; LOCAL: the call on a local shard where it differs.
OPS: dict[str, Callable[[Any, Any], Any]] = {
    "x + x": lambda x, w: x + x,
    "x * 2.0": lambda x, w: x * 2.0,
    "np.maximum(x, 0)": lambda x, w: torch.clamp_min(x, 0.0),
    "np.exp(x)": lambda x, w: torch.exp(x),
    "x @ w": lambda x, w: x @ w,
    "np.sum(x, axis=1)": lambda x, w: torch.sum(x, dim=1),
    "x.T": lambda x, w: x.T,
    "np.sum(x)": lambda x, w: torch.sum(x),
    "np.max(x, axis=0)": lambda x, w: torch.amax(x, dim=0),
    "x.mean(axis=1)": lambda x, w: x.mean(dim=1),
    "x.reshape(2, 32, 64)": lambda x, w: x.reshape(2, 32, 64),
    "np.swapaxes(x, 0, 1)": lambda x, w: torch.transpose(x, 0, 1),
    "x[:, 1:5]": lambda x, w: x[:, 1:5],
    "x[1:5]": lambda x, w: x[1:5],
    "x[0] = 1": _setitem,
}
LOCAL: dict[str, Callable[[Any, Any], Any]] = {
    "x.reshape(2, 32, 64)": lambda x, w: x.reshape(1, -1, 64),  # a rank's block of 2 ranks
}


def _full(value: Any) -> torch.Tensor:
    return value.full_tensor() if isinstance(value, DTensor) else value


def run_op(name: str, x: Any, w: Any, full_x: torch.Tensor, full_w: torch.Tensor, iters: int,
           repeats: int) -> tuple[float, float]:
    """(local_us, dtensor_us): the best of ``repeats`` medians of ``iters`` calls, slowest rank."""
    op, local_op = OPS[name], LOCAL.get(name, OPS[name])
    xh = x.redistribute(x.device_mesh, x.placements)  # a handle of its own (x[0] = 1 writes to it)
    got = _full(op(xh, w))
    if not torch.allclose(got, op(full_x.clone(), full_w)):
        raise SystemExit(f"{name}: the DTensor result differs from torch's")
    xl, wl = x.to_local().clone(), w.to_local()

    def local() -> Any:
        return local_op(xl, wl)

    def dtensor() -> Any:
        return op(xh, w)

    def to_slowest(times: np.ndarray) -> None:
        dist.all_reduce(torch.from_numpy(times), op=dist.ReduceOp.MAX)  # shares memory with ``times``

    for _ in range(5):
        dtensor()
        local()
    best = np.full(2, np.inf)
    for _ in range(repeats):
        times = timed_with([local, dtensor], iters, dist.barrier, to_slowest)
        best = np.minimum(best, np.median(times, axis=1) * 1e6)
    return float(best[0]), float(best[1])


def worker(rank: int, world: int, init_method: str, args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world)
    try:
        mesh = init_device_mesh("cpu", (world,))
        gen = torch.Generator().manual_seed(0)
        full_x = torch.randn((N, N), dtype=torch.float64, generator=gen)
        full_w = torch.randn((N, N), dtype=torch.float64, generator=gen)
        x = distribute_tensor(full_x, mesh, [Shard(0)])
        w = distribute_tensor(full_w, mesh, [Replicate()])
        iters = args.iters if args.iters is not None else (200 if args.quick else 1000)
        names = [n.strip() for n in args.ops.split(",")] if args.ops else list(OPS)
        if rank == 0:
            print(f"# torch DTensor eager ops vs torch on the local shard (gloo, CPU): {world} ranks; x {N}x{N} "
                  f"float64 S(0), w {N}x{N} R; best of {args.repeats} medians of {iters} calls, slowest rank",
                  flush=True)
            print(f"# python {platform.python_version()}, torch {torch.__version__}, threads "
                  f"{torch.get_num_threads()}, {platform.machine()}", flush=True)
            print(f"{'op':<22} {'local us':>9} {'dtensor us':>11} {'overhead us':>12}", flush=True)
        rows = []
        for name in names:
            row: dict[str, Any] = {"op": name, "backend": "torch-gloo", "ranks": world, "iters": iters,
                                   "repeats": args.repeats, "torch": torch.__version__}
            try:
                local_us, dtensor_us = run_op(name, x, w, full_x, full_w, iters, args.repeats)
            except SystemExit:
                raise
            except Exception as e:  # noqa: BLE001  (an op DTensor refuses: every rank refuses it alike)
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
                if rank == 0:
                    print(f"{name:<22} {'refused':>9}  {row['error']}", flush=True)
            else:
                row.update(local_us=round(local_us, 3), dtensor_us=round(dtensor_us, 3),
                           overhead_us=round(dtensor_us - local_us, 3))
                if rank == 0:
                    print(f"{name:<22} {local_us:9.2f} {dtensor_us:11.2f} {dtensor_us - local_us:12.2f}", flush=True)
            rows.append(row)
            dist.barrier()
        if rank == 0:
            write_rows(rows, args.json)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", metavar="OUT.json", help="write the rows as JSON (rank 0)")
    parser.add_argument("--iters", type=int, default=None, help="calls per median (default 1000; 200 with --quick)")
    parser.add_argument("--repeats", type=int, default=3, help="medians per row, the best is kept (default 3)")
    parser.add_argument("--ops", help="comma-separated ops (default: all)")
    parser.add_argument("--quick", action="store_true", help="short run: 200 calls per median")
    parser.add_argument("--ranks", type=int, default=2, help="workers to spawn (default 2; ignored under torchrun)")
    args = parser.parse_args(argv)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # under torchrun
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), "env://", args)
        return
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(args.ranks, f"file://{os.path.join(tmp, 'store')}", args), nprocs=args.ranks)


if __name__ == "__main__":
    main()
