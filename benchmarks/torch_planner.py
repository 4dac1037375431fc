"""PyTorch DTensor's redistribute planner, timed on ``planner.py``'s pairs: the peer of dtensor_np's search.

The same seeded (source, target) pairs as ``benchmarks/planner.py`` (a 64x64x64 float32 array;
sources from {S(0), S(1), S(2), R, P(sum)}, targets from {S(0), S(1), S(2), R} on every mesh dim;
the generator draws the same indices), planned by PyTorch's own planning function with its plan
cache bypassed (``_gen_transform_infos_non_cached``, the body of the cached ``_gen_transform_infos``
that ``redistribute`` calls): the default greedy planner, and with ``--graph`` its opt-in min-cost
graph planner (``use_graph_based_transform=True``), the fastest of ``--reps`` runs per pair.  It
needs only torch (not dtensor_np); keep torch out of the project's venv::

    python3 -m venv /tmp/torchvenv && . /tmp/torchvenv/bin/activate && pip install torch==2.13.0 numpy
    python benchmarks/torch_planner.py                      # greedy on every mesh (seconds)
    python benchmarks/torch_planner.py --graph --graph-pairs 10   # also the graph planner (minutes)

One process: a fake process group (``torch.testing._internal.distributed.fake_pg``) of as many
ranks as the mesh has, so that meshes of up to 1,024 ranks can be built; planning talks to no
rank.  Prints a Markdown table: per mesh, milliseconds median / max for each planner.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time
from datetime import date

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
from torch.distributed.tensor._redistribute import _gen_transform_infos_non_cached
from torch.testing._internal.distributed.fake_pg import FakeStore

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import seeded_pairs  # noqa: E402

MESHES = ((2, 2), (2, 2, 2), (2, 2, 2, 2), (4, 4, 4, 4), (2, 2, 2, 2, 2), (8, 8, 4, 2, 2), (2, 2, 2, 2, 2, 2))
# in the order of benchmarks/planner.py's SOURCES and TARGETS (seeded_pairs.draw then draws the same pairs)
SOURCES = (Shard(0), Shard(1), Shard(2), Replicate(), Partial("sum"))
TARGETS = (Shard(0), Shard(1), Shard(2), Replicate())
SHAPE = (64, 64, 64)


def timed(src: DTensorSpec, dst: DTensorSpec, graph: bool, reps: int) -> float:
    """The fastest of ``reps`` uncached plans, in ms."""
    best = math.inf
    for _ in range(reps):
        start = time.perf_counter()
        _gen_transform_infos_non_cached(src, dst, use_graph_based_transform=graph)
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--meshes", default=";".join(",".join(map(str, m)) for m in MESHES))
    parser.add_argument("--graph", action="store_true", help="also time the opt-in graph (min-cost) planner")
    parser.add_argument("--graph-pairs", type=int, default=None, help="the graph planner on the first N pairs only")
    args = parser.parse_args(argv)
    meshes = [tuple(int(x) for x in m.split(",")) for m in args.meshes.split(";") if m]
    torch.set_num_threads(1)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=max(math.prod(m) for m in meshes))
    print(f"# {date.today()}, Python {platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.2f} at the start", flush=True)
    head = "| mesh | greedy ms median / max |" + (" graph planner ms median / max (pairs) |" if args.graph else "")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    meta = TensorMeta(torch.Size(SHAPE), (SHAPE[1] * SHAPE[2], SHAPE[2], 1), torch.float32)
    for mesh_shape in meshes:
        mesh = DeviceMesh("cpu", torch.arange(math.prod(mesh_shape)).reshape(mesh_shape))
        greedy, graph = [], []
        for i, (a, b) in enumerate(seeded_pairs.draw(mesh_shape, args.pairs, args.seed, SOURCES, TARGETS)):
            src, dst = DTensorSpec(mesh, a, tensor_meta=meta), DTensorSpec(mesh, b, tensor_meta=meta)
            greedy.append(timed(src, dst, False, args.reps))
            if args.graph and (args.graph_pairs is None or i < args.graph_pairs):
                graph.append(timed(src, dst, True, 1))
                print(f"  {mesh_shape} pair {i}: graph {graph[-1]:.1f} ms", file=sys.stderr, flush=True)
        row = f"| {'x'.join(map(str, mesh_shape))} | {statistics.median(greedy):.3f} / {max(greedy):.3f} |"
        if args.graph:
            row += f" {statistics.median(graph):.1f} / {max(graph):.1f} ({len(graph)}) |"
        print(row, flush=True)
    print(f"# load average {os.getloadavg()[0]:.2f} at the end")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
