"""Hypothesis strategies shared by the tests: meshes, placements, shapes, dtypes; and ``per_rank``."""

from __future__ import annotations

import itertools
import math
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


def per_rank(world: Any, mesh: dt.DeviceMesh, make: Callable[[int], Any]) -> Any:
    """``from_local``'s ``local`` argument: ``make(rank)`` under MPI, ``{rank: make(rank)}`` simulated."""
    if mesh.backend == "mpi":
        return make(world.ranks[0])
    return {r: make(r) for r in range(mesh.world_size)}
