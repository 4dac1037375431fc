"""Calls along a sharded dim that move only what they must: ``concatenate`` (and the stacks made of it) keeps
the result sharded and moves the rows that change owner, ``prod`` gathers one product per rank,
``packbits``/``unpackbits`` move the packed axis's sharding to another dim.

Against NumPy on the full arrays, on 1, 2, 3 and 4 simulated ranks, a 2x2 mesh and ``mpiexec -n 2``, with
uneven and empty shards; the bytes each moves are counted (never the whole input gathered).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import dtensor_np as dt
from dtensor_np import Replicate, Shard
from test_numpy_ops import Checks

WORLDS = pytest.mark.worlds(simulated=(1, 2, 3, 4), mpi=(2,))
ROWS = (0, 1, 5, 7)


def _placements(mesh: dt.DeviceMesh, ndim: int = 2) -> list[list]:
    kinds = [Shard(d) for d in range(ndim)] + [Replicate()]
    return [list(p) for p in itertools.product(kinds, repeat=mesh.ndim)]


def _meshes(world) -> list[dt.DeviceMesh]:
    meshes = [dt.DeviceMesh((world.size,), backend=world.kind)]
    if world.size == 4:
        meshes.append(dt.DeviceMesh((2, 2), backend=world.kind))
    return meshes


@WORLDS
def test_concatenate_along_a_sharded_dim_keeps_it_sharded(world):
    checks = Checks(world)
    for mesh in _meshes(world):
        for ra, rb in itertools.product(ROWS, repeat=2):
            a = np.arange(ra * 3.0).reshape(ra, 3)
            b = -np.arange(rb * 3, dtype=np.int64).reshape(rb, 3) - 1
            for pa, pb in itertools.product(_placements(mesh), repeat=2):
                x, y = dt.distribute_tensor(a, mesh, pa), dt.distribute_tensor(b, mesh, pb)
                where = f"{mesh} {ra}x{rb} {pa} {pb}"
                checks.same(f"concatenate {where}", lambda: np.concatenate([a, b, a]),
                            lambda: np.concatenate([x, y, x]), exact=True)
                checks.same(f"vstack {where}", lambda: np.vstack([b, a]), lambda: np.vstack([y, x]), exact=True)
    checks.finish()


@WORLDS
def test_concatenate_moves_only_the_rows_that_change_owner(world):
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    a = np.arange(4000.0).reshape(1000, 4)
    x = dt.distribute_tensor(a, mesh, [Shard(0)])
    with dt.comm_counter() as c:
        z = np.concatenate([x, x])
    assert np.array_equal(z.full_tensor(), np.concatenate([a, a]))
    if world.size == 1:
        return
    assert z.placements == (Shard(0),) and c.counts["all_gather"] == 0 and c.counts["all_to_all"] == 2
    # the rows that change owner, each once (at most the 2000 rows of the result; per process under MPI, at most
    # its block): gathering both inputs would pass 2000 rows to every rank
    assert c.bytes["all_to_all"] <= (2000 if world.kind == "simulated" else 2000 // world.size + 1) * 32


@WORLDS
def test_prod_along_a_sharded_dim_gathers_one_product_per_rank(world):
    checks = Checks(world)
    for mesh in _meshes(world):
        for rows in ROWS:
            a = (np.arange(rows * 5).reshape(rows, 5) % 7 + 1) / 3
            for p in _placements(mesh):
                x = dt.distribute_tensor(a, mesh, p)
                for axis, keepdims, dtype in itertools.product((0, 1, None), (False, True), (None, np.int64)):
                    checks.same(f"prod {mesh} {rows} {p} {axis} {keepdims} {dtype}",
                                lambda: np.prod(a, axis=axis, keepdims=keepdims, dtype=dtype),
                                lambda: np.prod(x, axis=axis, keepdims=keepdims, dtype=dtype), rtol=1e-13)
                checks.same(f"multiply.reduce {p}", lambda: np.multiply.reduce(a, axis=0),
                            lambda: np.multiply.reduce(x, axis=0), rtol=1e-13)
    checks.finish()
    x = dt.distribute_tensor(np.ones((1000, 10)), dt.DeviceMesh((world.size,), backend=world.kind), [Shard(0)])
    with dt.comm_counter() as c:
        np.prod(x, axis=0)
    assert c.total == (1 if world.size > 1 else 0) and c.bytes["all_gather"] <= 10 * 8 * world.size * world.size


@WORLDS
def test_packbits_and_unpackbits_match_numpy(world):
    checks = Checks(world)
    rng = np.random.default_rng(0)
    for mesh in _meshes(world):
        for shape in ((5, 11), (0, 9), (13,), (3, 0)):
            bits = rng.integers(0, 2, size=shape).astype(bool)
            for p in _placements(mesh, len(shape)):
                x = dt.distribute_tensor(bits, mesh, p)
                for axis, order in itertools.product([None, *range(len(shape))], ("big", "little")):
                    where = f"{mesh} {shape} {p} axis={axis} {order}"
                    packed = np.packbits(bits, axis=axis, bitorder=order)
                    y = checks.same(f"packbits {where}", lambda: packed,
                                    lambda: np.packbits(x, axis=axis, bitorder=order), exact=True)
                    if y is None or packed.size == 0:  # NumPy pads an empty unpack with uninitialised bytes
                        continue
                    for count in (None, 3, -2):
                        checks.same(f"unpackbits {where} count={count}",
                                    lambda: np.unpackbits(packed, axis=axis, count=count, bitorder=order),
                                    lambda: np.unpackbits(y, axis=axis, count=count, bitorder=order), exact=True)
    checks.finish()
    x = dt.distribute_tensor(np.ones(4), dt.DeviceMesh((world.size,), backend=world.kind), [Shard(0)])
    with pytest.raises(TypeError, match="integer or boolean"):
        np.packbits(x)
    with pytest.raises(TypeError, match="unsigned byte"):
        np.unpackbits(x)
