"""Uncached redistribute planning time and plan cost: the exhaustive search (before) against the A* search (after).

For every mesh, ``--pairs`` random (source, target) pairs for a 64x64x64
float32 array, seeded: sources from {S(0), S(1), S(2), R, P(sum)} and targets
from {S(0), S(1), S(2), R} on every mesh dim, the same pairs for both sides.

* before: ``planner.plan_exhaustive`` (Dijkstra over every state, the
  planner's search until now), once per pair, stopped after ``--cap`` seconds:
  a stopped pair counts as ``--cap`` in the times, which are then lower bounds
  (marked ``>``), and has no cost.
* after: ``dtensor_np.plan_redistribute`` with its plan cache cleared, the
  fastest of ``--reps`` runs per pair (the others are the shared machine's
  noise); which search ran (exact, approximate, greedy fallback) is counted.
  The first line says whether the search ran compiled (``dtensor_np.native``;
  ``DTENSOR_NP_PURE=1`` runs the source: the same plans, about 30 times
  slower on 5 and 6 mesh dims).
* cost: every plan's cost (``planner.plan_cost``, the planner's cost model)
  over the greedy plan's (``planner.greedy_cost``, the same model):
  min/median/max and how many pairs are strictly cheaper than greedy.
  ``after = before``: pairs where after costs the same as before (of the
  pairs before finished), and the largest after/before.

``--mixed N`` adds N pairs over everything the planner takes (meshes of 1 to
6 dims with sizes 1 to 4, arrays of 1 to 4 dims with uneven sides, Partial of
every reduce op, shard orders other than the default): after's time and
method by number of mesh dims of size > 1, and cost over greedy's where the
shard orders are the default (greedy ignores orders).  ``--mixed-live 5,6``
draws them on meshes of 5 or 6 dims, all of size 2 to 4 (the slowest plans).

``--full`` times ``plan_redistribute(..., exact=True)`` instead, the full
search alone with no budget (the cheapest plan of every pair), uncached: the
fastest of ``--reps`` runs per pair, its work (the search's own count), and
on how many pairs the default plan costs more (with ``--mixed``, on those
pairs too); run it on two trees to compare two versions of the search.

Run: ``python benchmarks/planner.py [--pairs 30] [--cap 10] [--mixed 300] [--json OUT.json]``
(single process, no MPI).  ``--meshes "2,2;2,2,2"`` picks meshes,
``--no-before`` skips the exhaustive side.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import seeded_pairs  # noqa: E402

import dtensor_np as dt  # noqa: E402
from dtensor_np import DeviceMesh, DTensorSpec, Partial, Replicate, Shard, TensorMeta  # noqa: E402
from dtensor_np import native, planner  # noqa: E402
from dtensor_np.placements import REDUCE_OPS  # noqa: E402

MESHES = ((2, 2), (2, 2, 2), (2, 2, 2, 2), (4, 4, 4, 4), (2, 2, 2, 2, 2), (8, 8, 4, 2, 2), (2, 2, 2, 2, 2, 2))
SOURCES = (Shard(0), Shard(1), Shard(2), Replicate(), Partial("sum"))
TARGETS = (Shard(0), Shard(1), Shard(2), Replicate())
META = TensorMeta((64, 64, 64), "float32")


def pairs(mesh_shape: tuple[int, ...], n: int, seed: int) -> list[tuple[DTensorSpec, DTensorSpec]]:
    """``n`` random pairs on one mesh; the same for a given (mesh, seed), and the same that
    ``torch_planner.py`` plans (``seeded_pairs.draw``)."""
    mesh = DeviceMesh(mesh_shape)
    return [(DTensorSpec(mesh, src, META), DTensorSpec(mesh, dst, META))
            for src, dst in seeded_pairs.draw(mesh_shape, n, seed, SOURCES, TARGETS)]


def mixed_pairs(n: int, seed: int, live: Optional[tuple[int, ...]] = None) -> list[tuple[DTensorSpec, DTensorSpec]]:
    """``n`` random pairs over everything the planner takes: meshes of 1 to 6 dims (sizes 1 to 4, at
    most 4096 ranks), arrays of 1 to 4 dims with uneven sides, Partial of every reduce op (a new
    Partial only from Replicate), shard orders other than the default.  With ``live``, meshes of
    one of those numbers of dims, every one of size 2 to 4 (other pairs than without it)."""
    rng = random.Random(f"mixed:{seed}" if live is None else f"mixed:{seed}:live:{live}")
    out = []
    while len(out) < n:
        if live is None:
            mesh_shape = tuple(rng.choice((1, 2, 2, 3, 4)) for _ in range(rng.randint(1, 6)))
        else:
            mesh_shape = tuple(rng.choice((2, 2, 3, 4)) for _ in range(rng.choice(live)))
        if math.prod(mesh_shape) > 4096:
            continue
        shape = tuple(rng.randint(1, 64) for _ in range(rng.randint(1, 4)))
        ops = [Partial(rng.choice(REDUCE_OPS)) for _ in mesh_shape]
        src = tuple(rng.choice([Shard(d) for d in range(len(shape))] + [Replicate(), ops[m]]) for m in range(len(mesh_shape)))
        dst = tuple(
            rng.choice([Shard(d) for d in range(len(shape))] + [Replicate()] + ([ops[m]] if src[m] in (Replicate(), ops[m]) else []))
            for m in range(len(mesh_shape))
        )
        mesh, meta = DeviceMesh(mesh_shape), TensorMeta(shape, "float32")
        out.append((DTensorSpec(mesh, src, meta, shuffled(src, rng)), DTensorSpec(mesh, dst, meta, shuffled(dst, rng))))
    return out


def shuffled(placements: tuple, rng: random.Random) -> Any:
    """A random shard order for ``placements`` (half the time the default: None)."""
    if rng.random() < 0.5:
        return None
    by_dim: dict[int, list[int]] = {}
    for m, p in enumerate(placements):
        if isinstance(p, Shard):
            by_dim.setdefault(p.dim, []).append(m)
    return tuple((d, tuple(rng.sample(ms, len(ms)))) for d, ms in sorted(by_dim.items()))


def run_mixed(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for src, dst in mixed_pairs(args.mixed, args.seed, args.mixed_live):
        after_ms, after = time_after(src, dst, args.reps)
        greedy = planner.greedy_cost(src, dst) if planner._greedy_applies(src, dst) else None
        rows.append({
            "mesh": list(src.mesh.shape), "live": sum(size > 1 for size in src.mesh.shape), "src": str(src),
            "dst": str(dst), "after_ms": after_ms, "method": after.method,
            "cost_over_greedy": None if greedy is None else ratio(planner.plan_cost(after, src), greedy),
        })
    return rows


def mixed_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| mesh dims of size > 1 | pairs | after ms median / max | after exact/approx/greedy | "
             "after cost/greedy min / median / max (default orders) |", "|---|---|---|---|---|"]
    for live in sorted({r["live"] for r in rows}):
        group = [r for r in rows if r["live"] == live]
        methods = [sum(r["method"] == m for r in group) for m in ("exact", "approximate", "greedy")]
        ratios = [r["cost_over_greedy"] for r in group if r["cost_over_greedy"] is not None]
        lines.append(f"| {live} | {len(group)} | {times([r['after_ms'] for r in group], 0)} | "
                     f"{'/'.join(map(str, methods))} | {spread(ratios)} |")
    return "\n".join(lines)


def time_after(src: DTensorSpec, dst: DTensorSpec, reps: int, exact: bool = False) -> tuple[float, Any]:
    """The fastest uncached ``plan_redistribute`` (``exact``: with ``exact=True``) of ``reps``, in ms, and the plan."""
    best = float("inf")
    plan = None
    for _ in range(reps):
        planner._plan_cached.cache_clear()
        start = time.perf_counter()
        plan = dt.plan_redistribute(src, dst, exact=exact)
        best = min(best, time.perf_counter() - start)
    return best * 1e3, plan


def time_before(src: DTensorSpec, dst: DTensorSpec, cap: float) -> tuple[float, Optional[Any]]:
    """The exhaustive search's time in ms (``cap`` when stopped) and plan (None when stopped)."""
    start = time.perf_counter()
    try:
        plan = planner.plan_exhaustive(src, dst, time_limit_s=cap)
    except TimeoutError:
        return cap * 1e3, None
    return (time.perf_counter() - start) * 1e3, plan


def ratio(cost: float, reference: float) -> float:
    """cost / reference, 1 when both are 0 (a pair that needs no step)."""
    if reference == 0:
        return 1.0 if cost == 0 else float("inf")
    return cost / reference


def spread(values: list[float]) -> str:
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}" if values else "-"


def times(values: list[float], capped: int) -> str:
    mark = ">" if capped else ""
    median_mark = ">" if capped * 2 >= len(values) else ""
    return f"{median_mark}{statistics.median(values):.2f} / {mark}{max(values):.2f}"


def run_mesh(mesh_shape: tuple[int, ...], args: argparse.Namespace) -> dict[str, Any]:
    rows = []
    for src, dst in pairs(mesh_shape, args.pairs, args.seed):
        greedy = planner.greedy_cost(src, dst)
        after_ms, after = time_after(src, dst, args.reps)
        row: dict[str, Any] = {
            "src": str(src), "dst": str(dst), "greedy_cost": greedy,
            "after_ms": after_ms, "after_cost": planner.plan_cost(after, src), "method": after.method,
        }
        if not args.no_before:
            before_ms, before = time_before(src, dst, args.cap)
            row["before_ms"] = before_ms
            row["before_cost"] = None if before is None else planner.plan_cost(before, src)
        rows.append(row)
        print(f"  {row['src']:>36} -> {row['dst']:<30} after {after_ms:8.3f} ms ({row['method']}), "
              f"cost/greedy {ratio(row['after_cost'], greedy):.3f}"
              + ("" if args.no_before else f"; before {row['before_ms']:9.1f} ms"
                 + ("" if row["before_cost"] is None else f", cost/greedy {ratio(row['before_cost'], greedy):.3f}")),
              file=sys.stderr, flush=True)
    return {"mesh": list(mesh_shape), "rows": rows}


def run_full(pairs_: list[tuple[DTensorSpec, DTensorSpec]], reps: int) -> dict[str, Any]:
    """``plan_redistribute(..., exact=True)`` (the full search with no budget: the cheapest plan of every
    pair) on ``pairs_``, uncached: its time, its work (the search's count: moves looked at, expansions and
    sharper bounds) and its cost, and the default plan's cost over it."""
    times, work, costs, over = [], [], [], []
    for src, dst in pairs_:
        exact_ms, plan = time_after(src, dst, reps, exact=True)
        times.append(exact_ms)
        cost = planner.plan_cost(plan, src)
        costs.append(cost)
        over.append(ratio(planner.plan_cost(dt.plan_redistribute(src, dst), src), cost))
        work.append(planner.search_result(src, dst, budget=math.inf).work)
    return {"times": times, "work": work, "costs": costs, "default_over_exact": over}


def full_row(name: str, full: dict[str, Any]) -> str:
    """One row of the ``--full`` table."""
    def spread90(values: list[float], digits: int) -> str:
        ordered = sorted(values)
        p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
        return " / ".join(f"{v:.{digits}f}" for v in (statistics.median(ordered), p90, ordered[-1]))
    costlier = [x for x in full["default_over_exact"] if x > 1 + 1e-9]
    worse = f"{len(costlier)} ({max(costlier):.3f})" if costlier else "0"
    return (f"| {name} | {len(full['times'])} | {spread90(full['times'], 2)} | {spread90(full['work'], 0)} | {worse} | "
            f"{sum(full['costs']):.6f} |")


def summary(result: dict[str, Any], with_before: bool) -> str:
    rows = result["rows"]
    eps = 1e-9
    after_ratio = [ratio(r["after_cost"], r["greedy_cost"]) for r in rows]
    methods = [sum(r["method"] == m for r in rows) for m in ("exact", "approximate", "greedy")]
    cells = [
        "x".join(map(str, result["mesh"])),
        times([r["after_ms"] for r in rows], 0),
        "/".join(map(str, methods)),
        spread(after_ratio),
        str(sum(x < 1 - eps for x in after_ratio)),
    ]
    if with_before:
        finished = [r for r in rows if r["before_cost"] is not None]
        before_ratio = [ratio(r["before_cost"], r["greedy_cost"]) for r in finished]
        versus = [ratio(r["after_cost"], r["before_cost"]) for r in finished]
        capped = len(rows) - len(finished)
        cells[1:1] = [times([r["before_ms"] for r in rows], capped)]
        cells[4:4] = [spread(before_ratio), str(sum(x < 1 - eps for x in before_ratio))]
        cells += [f"{sum(abs(v - 1) <= eps for v in versus)}/{len(finished)}", f"{max(versus):.3f}" if versus else "-"]
    return "| " + " | ".join(cells) + " |"


def header(with_before: bool) -> str:
    names = ["mesh", "after ms median / max", "after exact/approx/greedy", "after cost/greedy min / median / max",
             "after < greedy"]
    if with_before:
        names[1:1] = ["before ms median / max"]
        names[4:4] = ["before cost/greedy min / median / max", "before < greedy"]
        names += ["after = before", "after/before max"]
    return "| " + " | ".join(names) + " |\n|" + "---|" * len(names)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cap", type=float, default=10.0, help="seconds the exhaustive search may take per pair")
    parser.add_argument("--reps", type=int, default=5, help="uncached runs per pair (the fastest counts)")
    parser.add_argument("--meshes", default=";".join(",".join(map(str, m)) for m in MESHES))
    parser.add_argument("--no-before", action="store_true", help="skip the exhaustive search")
    parser.add_argument("--mixed", type=int, default=0, metavar="N",
                        help="also N pairs over every placement kind, array rank, reduce op and shard order")
    parser.add_argument("--mixed-live", type=lambda text: tuple(int(x) for x in text.split(",")), default=None,
                        metavar="5,6", help="the --mixed pairs on meshes of these numbers of dims, all of size > 1")
    parser.add_argument("--json", help="write every pair's numbers here")
    parser.add_argument("--full", action="store_true", help="time the full search alone, with no budget")
    args = parser.parse_args(argv)
    meshes = [tuple(int(x) for x in m.split(",")) for m in args.meshes.split(";") if m]
    load = os.getloadavg()
    print(f"# {date.today()}, Python {platform.python_version()}, {os.cpu_count()} cores, "
          f"load average {load[0]:.2f} at the start; plan_search: {native.status()['dtensor_np.plan_search']}, "
          f"its core: {native.status()['dtensor_np.plan_core']}",
          flush=True)
    if args.full:
        print("| mesh (mesh dims of size > 1) | pairs | exact=True ms median / p90 / max | work median / p90 / max "
              "| default plan costlier: pairs (most, times) | sum of plan costs |\n|---|---|---|---|---|---|")
        for mesh_shape in meshes:
            print(full_row("x".join(map(str, mesh_shape)), run_full(pairs(mesh_shape, args.pairs, args.seed), args.reps)),
                  flush=True)
        if args.mixed:
            drawn = mixed_pairs(args.mixed, args.seed, args.mixed_live)
            for live in sorted({sum(size > 1 for size in src.mesh.shape) for src, _ in drawn}):
                group = [(src, dst) for src, dst in drawn if sum(size > 1 for size in src.mesh.shape) == live]
                print(full_row(f"--mixed ({live})", run_full(group, args.reps)), flush=True)
        print(f"# load average {os.getloadavg()[0]:.2f} at the end")
        return 0
    results = []
    for mesh_shape in meshes:
        print(f"mesh {mesh_shape}", file=sys.stderr, flush=True)
        results.append(run_mesh(mesh_shape, args))
    print(header(not args.no_before))
    for result in results:
        print(summary(result, not args.no_before))
    mixed = run_mixed(args) if args.mixed else []
    if mixed:
        print()
        print(mixed_table(mixed))
    print(f"# load average {os.getloadavg()[0]:.2f} at the end")
    if args.json:
        Path(args.json).write_text(json.dumps({"meshes": results, "mixed": mixed}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
