"""Hypothesis strategies shared by the tests: meshes, placements, shapes, dtypes, the planner's spec pairs; and ``per_rank``,
``rounding_tolerance``, ``check_identical`` and ``planner_benchmark`` (benchmarks/planner.py's seeded pairs)."""

from __future__ import annotations

import itertools
import math
import sys
import zlib
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

import dtensor_np as dt

DTYPES = ("float32", "float64", "int64", "bool", "complex64")
REDUCE_OPS = ("sum", "avg", "max", "min")


def factorizations(n: int, max_ndim: int = 3) -> list[tuple[int, ...]]:
    """Every mesh shape (1-D to ``max_ndim``-D, sizes >= 1) whose size is ``n``."""
    shapes = []
    for ndim in range(1, max_ndim + 1):
        for combo in itertools.product(range(1, n + 1), repeat=ndim):
            if math.prod(combo) == n:
                shapes.append(combo)
    return shapes


def mesh_shapes(world_size: int, max_ndim: int = 3) -> st.SearchStrategy[tuple[int, ...]]:
    """Mesh shapes of exactly ``world_size`` ranks, preferring ones without size-1 dims."""
    shapes = factorizations(world_size, max_ndim)
    useful = [s for s in shapes if 1 not in s or world_size == 1] or shapes
    return st.sampled_from(useful + shapes)


def placement(tensor_ndim: int, partial: bool = True, ops: tuple[str, ...] = REDUCE_OPS) -> st.SearchStrategy:
    options = [st.just(dt.Replicate())]
    if tensor_ndim:
        options.append(st.integers(0, tensor_ndim - 1).map(dt.Shard))
    if partial:
        options.append(st.sampled_from(ops).map(dt.Partial))
    return st.one_of(options)


def placements(mesh_ndim: int, tensor_ndim: int, partial: bool = True, ops: tuple[str, ...] = REDUCE_OPS) -> st.SearchStrategy:
    return st.tuples(*[placement(tensor_ndim, partial, ops) for _ in range(mesh_ndim)])


def tensor_shapes(min_ndim: int = 1, max_ndim: int = 3, max_side: int = 9) -> st.SearchStrategy[tuple[int, ...]]:
    """Shapes with sides from 0 to ``max_side`` (so smaller than the mesh, empty and size 1 all occur)."""
    return st.lists(st.integers(0, max_side), min_size=min_ndim, max_size=max_ndim).map(tuple)


def full_array(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    """A deterministic array: the same on every rank for the same seed."""
    rng = np.random.default_rng(seed)
    kind = np.dtype(dtype).kind
    if kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if kind in "iu":
        return rng.integers(-50, 50, size=shape).astype(dtype)
    if kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def rounding_tolerance(dtype: Any, terms: int, scale: float) -> float:
    """The absolute error ``terms`` rounded steps (a sum of ``terms + 1`` values in any order, a division) may make
    on values of magnitude up to ``scale``: ``terms * eps(dtype) * scale``; 0 for integers and bools (exact)."""
    dtype = np.dtype(dtype)
    if dtype.kind not in "fc":
        return 0.0
    return terms * float(np.finfo(dtype).eps) * scale


def check_identical(checks: Any, world: Any, ctx: str, out: Any) -> None:
    """Ranks holding the same part of ``out`` hold the same bytes (every rank tells every rank the crc32 of its
    shard, keyed by its coordinates on the mesh dims that shard ``out``), recorded in ``checks`` (``expect``); a
    pending result (a ``Partial`` sum) once it is reduced."""
    if any(isinstance(p, dt.Partial) for p in out.placements):
        out = out.redistribute([dt.Replicate() if isinstance(p, dt.Partial) else p for p in out.placements])
    sharding = [m for m, p in enumerate(out.placements) if isinstance(p, dt.Shard)]
    mine = {r: (*(out.mesh.coordinate_of(r)[m] for m in sharding), zlib.crc32(np.ascontiguousarray(s).tobytes()) & 0x7FFFFFFF)
            for r, s in out.local_shards().items()}
    told = world.backend.gather_descriptors(mine)
    seen: dict[tuple[int, ...], int] = {}
    for r in sorted(told):
        key, crc = tuple(told[r][:-1]), told[r][-1]
        checks.expect(seen.setdefault(key, crc) == crc, f"{ctx}: rank {r} holds other bytes than another rank")


def per_rank(world: Any, mesh: dt.DeviceMesh, make: Callable[[int], Any]) -> Any:
    """``from_local``'s ``local`` argument: ``make(rank)`` under MPI, ``{rank: make(rank)}`` simulated."""
    if mesh.backend == "mpi":
        return make(world.ranks[0])
    return {r: make(r) for r in range(mesh.world_size)}


@st.composite
def planner_meshes(draw, max_ndim=6, max_live=3, max_ranks=64, sizes=(2, 3, 4), min_live=0):
    """1- to ``max_ndim``-dim meshes with ``min_live`` (or all, if fewer) to ``max_live`` dims of size > 1
    (those that fit in ``max_ranks`` ranks)."""
    ndim = draw(st.integers(1, max_ndim))
    live = draw(st.integers(min(min_live, ndim, max_live), min(max_live, ndim)))
    where = draw(st.permutations(range(ndim)))[:live]
    shape = [1] * ndim
    ranks = 1
    for m in sorted(where):
        size = draw(st.sampled_from([s for s in sizes if ranks * s <= max_ranks] or [1]))
        shape[m] = size
        ranks *= size
    return tuple(shape)


@st.composite
def shard_orders(draw, placements):
    """A shard order for ``placements``: the mesh dims of every tensor dim in a drawn order."""
    by_dim: dict[int, list[int]] = {}
    for m, p in enumerate(placements):
        if isinstance(p, dt.Shard):
            by_dim.setdefault(p.dim, []).append(m)
    if not draw(st.booleans()):
        return None
    return tuple((d, tuple(draw(st.permutations(ms)))) for d, ms in sorted(by_dim.items()))


@st.composite
def spec_pairs(draw, max_ndim=6, max_live=3, max_ranks=64, sizes=(2, 3, 4), dtype="float32", with_orders=True,
               min_live=0, max_tensor_ndim=4):
    """A source and a target spec the planner accepts (no Partial of another reduce op): meshes of 1 to
    ``max_ndim`` dims (:func:`planner_meshes`), arrays of 1 to ``max_tensor_ndim`` dims with sides 0 to 9,
    every placement kind, Partial of every reduce op, shard orders other than the default."""
    mesh_shape = draw(planner_meshes(max_ndim, max_live, max_ranks, sizes, min_live))
    shape = tuple(draw(st.lists(st.integers(0, 9), min_size=1, max_size=max_tensor_ndim)))
    ops = [draw(st.sampled_from(REDUCE_OPS)) for _ in mesh_shape]

    def placement(m, allowed):
        options = [dt.Shard(d) for d in range(len(shape))] + [dt.Replicate(), dt.Partial(ops[m])]
        return draw(st.sampled_from([p for p in options if allowed(p)]))

    src = tuple(placement(m, lambda p: True) for m in range(len(mesh_shape)))
    dst = []
    for m, a in enumerate(src):
        if mesh_shape[m] == 1:  # one rank: any placement, any reduce op
            anything = [dt.Shard(0), dt.Replicate(), dt.Partial(draw(st.sampled_from(REDUCE_OPS)))]
            dst.append(draw(st.sampled_from(anything)))
        else:
            dst.append(placement(m, lambda p, a=a: not isinstance(p, dt.Partial) or not isinstance(a, dt.Partial) or a == p))
    dst = tuple(dst)
    mesh = dt.DeviceMesh(mesh_shape)
    meta = dt.TensorMeta(shape, dtype)
    src_order = draw(shard_orders(src)) if with_orders else None
    dst_order = draw(shard_orders(dst)) if with_orders else None
    return dt.DTensorSpec(mesh, src, meta, src_order), dt.DTensorSpec(mesh, dst, meta, dst_order)


def planner_benchmark() -> ModuleType:
    """benchmarks/planner.py (a script beside ``seeded_pairs.py``, not a package): its ``pairs`` and
    ``mixed_pairs`` are the planner tests' pairs too."""
    folder = str(Path(__file__).resolve().parents[1] / "benchmarks")
    sys.path.insert(0, folder)
    try:
        import planner
    finally:
        sys.path.remove(folder)
    return planner


def sorted_unique(name: str, a: np.ndarray) -> Any:
    """NumPy's ``np.<name>(a)`` (``unique_values``, ``unique_counts``, ``unique_inverse``, ``unique_all``) with its values
    sorted, as array-api-compat and array-api-strict give them (NumPy 2.4 gives hash order): NaNs distinct, the
    inverse in ``a``'s shape."""
    values, index, inverse, counts = np.unique(a, return_index=True, return_inverse=True, return_counts=True,
                                               equal_nan=False)
    if name == "unique_values":
        return values
    want = getattr(np, name)(a)
    parts = {"values": values, "indices": index, "inverse_indices": inverse.reshape(a.shape), "counts": counts}
    return type(want)(*(parts[field] for field in want._fields))


def world_meshes(world: Any) -> list[Any]:
    """The meshes a test runs on for a world: 1-D over every rank, and 2 x n/2 from 4 ranks on."""
    import dtensor_np as dt

    n = world.size
    found = [dt.DeviceMesh((n,), backend=world.kind)]
    if n >= 4 and n % 2 == 0:
        found.append(dt.DeviceMesh((2, n // 2), backend=world.kind))
    return found
