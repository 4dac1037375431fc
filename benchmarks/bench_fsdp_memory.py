"""Peak memory per rank of one FSDP training step: with and without reshard_after_forward, and with micro-batches.

Run::

    python benchmarks/bench_fsdp_memory.py --ranks 4                    # each configuration its own mpiexec -n 4 job
    python benchmarks/bench_fsdp_memory.py --ranks 4 --tp 2             # 2x2 (dp, tp)
    mpiexec -n 4 python benchmarks/bench_fsdp_memory.py                 # every configuration in one job
    mpiexec -n 2 python benchmarks/bench_fsdp_memory.py --quick --json OUT.json

With ``--ranks N`` every configuration runs in fresh processes, so its RSS
is not hidden by memory an earlier configuration left with the allocator;
in one job the later configurations' ``rss_mib`` reads low.

The model and data are those of ``python -m dtensor_np.examples.train``
(float64), larger by default (4 layers, d_model 256).  Every configuration
builds its own ``dt.fsdp`` step and runs two steps (loss and gradients plus
the AdamW update) on every rank:

* ``traced_mib``: the second step's peak of Python-traced memory
  (``tracemalloc``, which sees NumPy's buffers) above what was allocated when
  the step began (parameter shards, optimiser state and batch are not counted);
* ``rss_mib``: over the first step, the rise of the process's peak resident
  set (``VmHWM``, reset through ``/proc/self/clear_refs``) above its size when
  the step began (later steps reuse what the allocator kept); it includes the
  step's one-off caches and is coarser than ``traced_mib``.

The table gives the largest value over the ranks, and the loss of the
measured step, checked against the same step on one device
(``dt.value_and_grad`` on the full batch) to 1e-9 relative: the script exits
non-zero when one differs.  ``gathers``/``reduce_scatters`` are the
collectives one step issues.
"""
from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import subprocess
import sys
import tempfile
import tracemalloc
from typing import Any, Optional

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from mpi4py import MPI  # noqa: E402

import dtensor_np as dt  # noqa: E402
from dtensor_np.examples import train as example  # noqa: E402

MIB = 2.0**20
CONFIGS = (("baseline", False, 1), ("reshard_after_forward", True, 1), ("micro_batches=2", False, 2),
           ("micro_batches=4", False, 4), ("reshard + micro_batches=4", True, 4))


def _status_kib(field: str) -> Optional[int]:
    """A ``/proc/self/status`` field in KiB (None off Linux)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current resident set
        return True
    except OSError:
        return False


def measure(name: str, reshard: bool, k: int, mesh: dt.DeviceMesh, args: argparse.Namespace) -> dict[str, Any]:
    cfg = example.Config(args.layers, args.d_model, args.heads, args.d_ff, args.seq)
    text = example.corpus(20_000, 0)
    vocab = sorted(set(text))
    params = example.init_params(np.random.default_rng(0), cfg, len(vocab))
    fn = functools.partial(example.loss_fn, cfg=cfg)
    x, y = example.batch(text, vocab, cfg, args.batch, 0, 0)
    rows = args.batch // k
    tp = mesh.shape[1] > 1
    step = dt.fsdp(fn, params, x[:rows], y[:rows], mesh=mesh, tp_plan=example.plan(cfg) if tp else None,
                   bucket_mb=args.bucket_mb, reshard_after_forward=reshard)
    opt = dt.optim.adamw(1e-3)
    flat = step.shard(params)
    state = opt.init(flat)
    counts = step.collectives(k)

    def one_step(flat: Any, state: Any) -> Any:
        loss, grads = step.value_and_grad(flat, x, y, micro_batches=k)
        return float(loss), opt.update(grads, state, flat)

    gc.collect()
    rss_before = _status_kib("VmRSS")
    reset = _reset_peak_rss()
    one_step(flat, state)  # the first step: RSS (later steps reuse what the allocator kept)
    hwm = _status_kib("VmHWM")
    gc.collect()
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    loss, _ = one_step(flat, state)  # the second step: traced memory, caches filled
    peak = tracemalloc.get_traced_memory()[1]
    want, _ = dt.value_and_grad(fn)(params, x, y)
    comm = MPI.COMM_WORLD
    traced = comm.allreduce((peak - before) / MIB, op=MPI.MAX)
    rss = comm.allreduce((hwm - rss_before) / 1024 if reset and hwm and rss_before else float("nan"), op=MPI.MAX)
    return {"config": name, "ranks": comm.size, "dp": mesh.shape[0], "tp": mesh.shape[1],
            "reshard_after_forward": reshard, "micro_batches": k, "traced_mib": traced, "rss_mib": rss,
            "params_mib": sum(v.nbytes for v in params.values()) / MIB, "buckets": step.buckets,
            "gathers": counts.get("all_gather", 0), "reduce_scatters": counts.get("reduce_scatter", 0),
            "loss": loss, "one_device_loss": float(want), "loss_ok": bool(abs(loss - float(want)) <= 1e-9 * abs(want))}


def _table(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    first = rows[0]
    print(f"{first['ranks']} ranks ({first['dp']} dp x {first['tp']} tp), {args.layers} layers, d_model "
          f"{args.d_model}, batch {args.batch}: parameters {first['params_mib']:.1f} MiB in "
          f"{first['buckets']} buckets; peak per rank above the step's start (max over ranks)")
    print(f"| {'configuration':<26} | traced MiB | RSS MiB | all_gathers | reduce_scatters | loss = one device |")
    print(f"|{'-' * 28}|-----------:|--------:|------------:|----------------:|:-----------------:|")
    for r in rows:
        print(f"| {r['config']:<26} | {r['traced_mib']:10.1f} | {r['rss_mib']:7.1f} | {r['gathers']:11d} | "
              f"{r['reduce_scatters']:15d} | {'yes' if r['loss_ok'] else 'NO'} ({r['loss']:.6f}) |")


def _fresh_jobs(args: argparse.Namespace, argv: list[str]) -> list[dict[str, Any]]:
    """Every configuration in its own ``mpiexec -n RANKS`` job; their rows."""
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    passed, skip = [], False
    for a in argv:  # the model options go through; --ranks and --json do not
        if skip:
            skip = False
        elif a in ("--ranks", "--json"):
            skip = True
        elif not a.startswith(("--ranks=", "--json=")):
            passed.append(a)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(len(CONFIGS)):
            out = os.path.join(tmp, f"{i}.json")
            command = [mpiexec, "-n", str(args.ranks), sys.executable, os.path.abspath(__file__), *passed,
                       "--config", str(i), "--json", out]
            subprocess.run(command, check=False)
            with open(out) as f:
                rows += json.load(f)
    return rows


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=None, help="run each configuration as mpiexec -n RANKS")
    parser.add_argument("--config", type=int, default=None, help="only this configuration (an index)")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--d-ff", type=int, default=1024)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--bucket-mb", type=float, default=2.0)
    parser.add_argument("--quick", action="store_true", help="a tiny model: checks the script, not the memory")
    parser.add_argument("--json", default=None, help="write the rows here (rank 0)")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.quick:
        args.layers, args.d_model, args.d_ff, args.seq, args.batch, args.bucket_mb = 2, 32, 64, 8, 8, 0.01
    if args.ranks is not None:
        rows = _fresh_jobs(args, argv)
    else:
        rows = _measure_all(args)
        if rows is None:
            return 0
        if args.config is not None:  # one configuration of a --ranks run: its driver prints the table
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
            return 0 if all(r["loss_ok"] for r in rows) else 1
    _table(rows, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if len(rows) == len(CONFIGS if args.config is None else [0]) and all(r["loss_ok"] for r in rows) else 1


def _measure_all(args: argparse.Namespace) -> Optional[list[dict[str, Any]]]:
    """The rows of the configurations, measured in this job (None on ranks other than 0)."""
    comm = MPI.COMM_WORLD
    if comm.size % args.tp:
        raise SystemExit(f"expected --tp dividing the {comm.size} ranks, got {args.tp}")
    mesh = dt.init_device_mesh((comm.size // args.tp, args.tp), dim_names=("dp", "tp"), backend="mpi")
    tracemalloc.start()
    rows = []
    for i, (name, reshard, k) in enumerate(CONFIGS):
        if args.config is None or args.config == i:
            rows.append(measure(name, reshard, k, mesh, args))
            gc.collect()
    return rows if comm.rank == 0 else None


if __name__ == "__main__":
    sys.exit(main())
