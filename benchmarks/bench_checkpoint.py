"""dt.checkpoint save and load throughput against np.save/np.load of the same bytes per rank, in the same run.

For each size, a square float64 array sharded on its rows over 4 ranks (simulated in
this process, or the ranks of ``mpiexec -n N``) is

* saved with ``dt.checkpoint.save`` (Zarr v3 chunks, JSON metadata, atomic
  rename), against ``np.save`` of every rank's shard to its own ``.npy`` file;
* loaded with ``dt.checkpoint.load`` onto the same placements, and onto
  ``Shard(1)`` (a resharding load), against ``np.load`` of those files;

and the ratios (checkpoint time / NumPy time, median of ``--repeats``) are
printed, with the bytes each resharding load read against its block.  Files go
to ``--dir`` (default: a temporary directory), so both sides hit the same disk
and page cache.

Run::

    python benchmarks/bench_checkpoint.py                    # 4 simulated ranks
    mpiexec -n 4 python benchmarks/bench_checkpoint.py       # 4 MPI processes (a barrier around every call)
    python benchmarks/bench_checkpoint.py --sizes 1MiB --repeats 3
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli import format_size, parse_size  # noqa: E402

import collectives  # noqa: E402
import dtensor_np as dt  # noqa: E402
from dtensor_np.checkpoint import loading  # noqa: E402


def _timer(backend: Any) -> Callable[[Callable[[], Any], int], float]:
    """Median seconds of ``fn`` over ``repeats`` calls, the slowest rank's, with a barrier before each."""

    def run(fn: Callable[[], Any], repeats: int) -> float:
        times = []
        for _ in range(repeats):
            if backend is not None:
                backend.barrier()
            t0 = time.perf_counter()
            fn()
            if backend is not None:
                backend.barrier()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    return run


def _counting_open(counter: list[int]) -> Callable[[str], Any]:
    from zarr.storage import WrapperStore

    class Counted(WrapperStore):
        async def get(self, key, prototype=None, byte_range=None):  # type: ignore[no-untyped-def]
            buf = await self._store.get(key, prototype, byte_range)
            if buf is not None and not key.endswith("zarr.json"):
                counter[0] += len(buf)
            return buf

    original = loading.open_store
    return lambda path: Counted(original(path))


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1MiB,16MiB,64MiB", help="global array sizes, comma-separated")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where the files go (default: a temporary directory)")
    parser.add_argument("--json", default=None, help="write the rows here")
    args = parser.parse_args(argv)
    under_mpi = collectives.launched_by_mpiexec() and (collectives.mpi_world_size() or 1) > 1
    ranks = collectives.mpi_world_size() if under_mpi else 4
    mesh = dt.DeviceMesh((ranks,), backend="mpi" if under_mpi else "simulated")
    backend = collectives.get_backend("mpi") if under_mpi else None
    root = 0 in (backend.ranks if backend is not None else (0,))
    if args.dir is None:
        base = tempfile.mkdtemp(prefix="bench_ckpt_") if root else ""
        if backend is not None:
            from mpi4py import MPI

            base = MPI.COMM_WORLD.bcast(base, root=0)
    else:
        base = args.dir
    timer = _timer(backend)
    rows = []
    if root:
        print(f"{ranks} {mesh.backend} ranks; median of {args.repeats}; ratio = dt.checkpoint / np.save|np.load")
        print(f"{'size':>8} {'save':>8} {'np.save':>8} {'ratio':>6} {'load':>8} {'np.load':>8} {'ratio':>6} "
              f"{'reshard':>8} {'ratio':>6} {'read/block':>10}")
    for text in args.sizes.split(","):
        nbytes = parse_size(text)
        cols = max(ranks, int((nbytes // 8) ** 0.5))  # square: a resharding load onto columns reads its block
        rows_n = max(1, nbytes // (8 * cols))
        full = np.arange(rows_n * cols, dtype=np.float64).reshape(rows_n, cols)
        x = dt.distribute_tensor(full, mesh, [dt.Shard(0)])
        path = os.path.join(base, f"ckpt_{nbytes}")
        npy = {r: os.path.join(base, f"npy_{nbytes}_rank{r}.npy") for r in x.shards}

        def np_save() -> None:
            for r, a in x.shards.items():
                np.save(npy[r], a)

        def np_load() -> None:
            for r in x.shards:
                np.load(npy[r])

        spec = dt.checkpoint.Spec(full.shape, full.dtype, mesh, [dt.Shard(0)])
        spec1 = dt.checkpoint.Spec(full.shape, full.dtype, mesh, [dt.Shard(1)])
        t_save = timer(lambda: dt.checkpoint.save(path, {"x": x}), args.repeats)
        t_npsave = timer(np_save, args.repeats)
        t_load = timer(lambda: dt.checkpoint.load(path, {"x": spec}), args.repeats)
        t_npload = timer(np_load, args.repeats)
        t_reshard = timer(lambda: dt.checkpoint.load(path, {"x": spec1}), args.repeats)
        counter = [0]
        loading.open_store, original = _counting_open(counter), loading.open_store
        try:
            out = dt.checkpoint.load(path, {"x": spec1})["x"]
        finally:
            loading.open_store = original
        block = sum(a.nbytes for a in out.shards.values())
        ok = all(np.array_equal(a, full[out.spec.local_index(r)]) for r, a in out.shards.items())
        row = {"bytes": rows_n * cols * 8, "ranks": ranks, "backend": mesh.backend, "save_s": t_save,
               "np_save_s": t_npsave, "save_ratio": t_save / t_npsave, "load_s": t_load, "np_load_s": t_npload,
               "load_ratio": t_load / t_npload, "reshard_load_s": t_reshard, "reshard_ratio": t_reshard / t_npload,
               "reshard_read_bytes": counter[0], "reshard_block_bytes": block, "values_equal": ok}
        rows.append(row)
        if root:
            print(f"{format_size(row['bytes']):>8} {t_save * 1e3:7.1f}m {t_npsave * 1e3:7.1f}m {row['save_ratio']:6.2f} "
                  f"{t_load * 1e3:7.1f}m {t_npload * 1e3:7.1f}m {row['load_ratio']:6.2f} "
                  f"{t_reshard * 1e3:7.1f}m {row['reshard_ratio']:6.2f} {counter[0] / max(block, 1):10.3f}")
        if not ok:
            print("error: a resharded load differs from the array saved", file=sys.stderr)
            return 1
    if args.json and root:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    if backend is not None:
        backend.barrier()  # every rank is done with the files
    if args.dir is None and root:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
