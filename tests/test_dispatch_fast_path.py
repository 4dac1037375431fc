"""The dispatch fast path (dtensor_np.dispatch) gives what the slow path gives, and the aliasing policy holds.

For every op of the dispatch benchmark's table: the first call (the slow path,
which builds the entry), a repeated call (the fast path: counted, not timed),
a call after the cache is cleared and a call after an item assignment rebound
the operand all give NumPy's values with one spec.  Scalars that compare equal
but differ in type or sign are different keys.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dtensor_np as dt
from dtensor_np import Replicate, Shard
from collectives import BoundedCache
from dtensor_np.fast_path import FAST_PATH, fast_path_stats

clear_fast_path = dt.clear_caches  # every cache: the fast path's entries go with the decisions they came from


def _benchmark() -> Any:
    """benchmarks/dispatch.py (loaded from the script, which is no package): its op tables OPS and NUMPY."""
    folder = Path(__file__).resolve().parents[1] / "benchmarks"
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location("dispatch_benchmark", folder / "dispatch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


OPS = dict(_benchmark().OPS)
NUMPY = _benchmark().NUMPY  # NumPy's spelling where the DTensor call has none (x.at[i].set)
OPS.update({  # more operator forms and keywords
    "2.0 * x": lambda x, w: 2.0 * x,
    "x - 3": lambda x, w: x - 3,
    "np.add(x, x, dtype=np.float32)": lambda x, w: np.add(x, x, dtype=np.float32),
})


def _same(got: Any, expected_full: np.ndarray, spec: Any = None) -> None:
    assert isinstance(got, dt.DTensor)
    if spec is not None:
        assert got.spec is spec
    full = got.full_tensor()
    assert full.dtype == expected_full.dtype and full.shape == expected_full.shape
    np.testing.assert_allclose(full, expected_full, rtol=1e-12, atol=1e-12)


def _shards_equal(a: Any, b: Any) -> None:
    assert a.spec is b.spec
    for r in a.shards:
        assert a.shards[r].dtype == b.shards[r].dtype
        np.testing.assert_array_equal(a.shards[r], b.shards[r])


@pytest.mark.worlds(simulated=(1, 2, 4), mpi=(2,))
@pytest.mark.parametrize("name", list(OPS))
def test_fast_path_matches_the_slow_path(world, name):
    op = OPS[name]
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    rng = np.random.default_rng(1)
    full_x, full_w = rng.standard_normal((64, 64)), rng.standard_normal((64, 64))
    x = dt.distribute_tensor(full_x, mesh, [Shard(0)])
    w = dt.distribute_tensor(full_w, mesh, [Replicate()])
    expected = NUMPY.get(name, op)(full_x.copy(), full_w)

    def fresh() -> Any:  # a handle of its own: x[0] = 1 rebinds its operand
        return dt.DTensor(x.local_shards(), x.spec)

    clear_fast_path()
    before = fast_path_stats()
    slow = op(fresh(), w)
    built = fast_path_stats()
    # one entry per call that ran through a rule (a write through a view: the view's index and the update)
    assert built["misses"] == before["misses"] + built["entries"] and built["entries"] >= 1, name
    _same(slow, expected)
    fast = op(fresh(), w)
    after = fast_path_stats()
    assert after["hits"] == built["hits"] + built["entries"] and after["misses"] == built["misses"], name
    _shards_equal(fast, slow)
    _same(fast, expected, slow.spec)

    clear_fast_path()  # the slow path again, then the fast path again
    assert fast_path_stats()["entries"] == 0
    _shards_equal(op(fresh(), w), slow)
    _shards_equal(op(fresh(), w), slow)

    # an item assignment rebinds the operand to new values (same spec): the entry serves it
    y = fresh()
    y[1] = 5.0
    full_y = full_x.copy()
    full_y[1] = 5.0
    hits = fast_path_stats()["hits"]
    _same(op(y, w), NUMPY.get(name, op)(full_y.copy(), full_w), slow.spec)
    assert fast_path_stats()["hits"] > hits
    _same(x, full_x)  # no other handle changed


@pytest.mark.worlds(simulated=(2,), mpi=(2,))
def test_keys_tell_apart_equal_scalars_of_other_types_and_signs(world):
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    a = np.arange(6)
    xi = dt.distribute_tensor(a, mesh, [Shard(0)])
    xf = dt.distribute_tensor(a - 2.5, mesh, [Shard(0)])
    for _ in range(2):
        for s in (2, 2.0, True, np.float32(2), np.int8(2)):
            assert (xi + s).dtype == (a + s).dtype
            np.testing.assert_array_equal((xi + s).full_tensor(), a + s)
        for s in (0.0, -0.0, float("nan"), 0.0):
            np.testing.assert_array_equal(np.copysign(xf, s).full_tensor(), np.copysign(a - 2.5, s))
    np.testing.assert_array_equal(np.sum(xi, axis=0, keepdims=True).full_tensor(), a.sum(0, keepdims=True))
    np.testing.assert_array_equal(np.sum(xi, axis=0).full_tensor(), a.sum(0))


@pytest.mark.worlds(simulated=(2,), mpi=(2,))
def test_calls_that_cannot_be_keyed_take_the_slow_path(world):
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    x = dt.distribute_tensor(np.arange(4.0), mesh, [Shard(0)])
    clear_fast_path()
    np.testing.assert_array_equal(np.add(x, [1.0, 2.0, 3.0, 4.0][0]).full_tensor(), np.arange(4.0) + 1)
    assert fast_path_stats()["entries"] == 1
    np.testing.assert_array_equal((x + np.ones(4)).full_tensor(), np.arange(4.0) + 1)  # a replicated constant
    assert fast_path_stats()["entries"] == 1  # an array argument is never a key
    out = dt.distribute_tensor(np.zeros(4), mesh, [Shard(0)])
    np.add(x, x, out=out)  # out= rebinds: the slow path
    np.testing.assert_array_equal(out.full_tensor(), 2 * np.arange(4.0))
    np.testing.assert_array_equal(np.concatenate([x, x]).full_tensor(), np.concatenate([np.arange(4.0)] * 2))
    assert fast_path_stats()["entries"] == 1  # neither a list of DTensors nor out= made an entry


def test_the_cache_is_bounded_first_in_first_out():
    cache = BoundedCache(3, name="tests.bounded")
    for k in range(5):
        cache.put(k, k)
    assert list(cache) == [2, 3, 4]
    cache.put(3, "again")  # an existing key: nothing evicted
    assert list(cache) == [2, 3, 4] and cache[3] == "again"
    assert FAST_PATH.maxsize == fast_path_stats()["maxsize"] > 0
    with pytest.raises(ValueError):
        BoundedCache(0, name="tests.empty")


@pytest.mark.worlds(simulated=(1, 2), mpi=(2,))
def test_local_arrays_are_read_only_views(world):
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    full = np.arange(12.0).reshape(6, 2)
    x = dt.distribute_tensor(full, mesh, [Shard(0)])
    local = x.to_local()
    arrays = [local] if world.kind == "mpi" else list(local.shards.values())
    arrays += list(x.local_shards().values())
    for a in arrays:
        assert not a.flags.writeable
        assert any(np.shares_memory(a, s) for s in x.shards.values())  # a view: no copy
        with pytest.raises(ValueError):
            a[...] = -1
    np.testing.assert_array_equal(x.full_tensor(), full)
    # a writable copy is one call away, and writing to it leaves x alone
    mine = np.array(arrays[0])
    mine[...] = -1
    np.testing.assert_array_equal(x.full_tensor(), full)
    # a replicated array's full_tensor() is its shard: read-only too
    r = dt.distribute_tensor(full, mesh, [Replicate()])
    assert not r.full_tensor().flags.writeable


@pytest.mark.worlds(simulated=(2, 4), mpi=(2,))
def test_a_redistribute_that_only_keeps_rows_returns_read_only_views(world):
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    full = np.arange(16.0).reshape(8, 2)
    r = dt.distribute_tensor(full, mesh, [Replicate()])
    s = r.redistribute([Shard(0)])
    for rank, block in s.shards.items():
        assert np.shares_memory(block, r.shards[rank]) and not block.flags.writeable
    np.testing.assert_array_equal(s.full_tensor(), full)
    cols = r.redistribute([Shard(1)])  # columns are not contiguous: a copy
    for rank, block in cols.shards.items():
        assert not np.shares_memory(block, r.shards[rank]) and block.flags.c_contiguous
    # ops and updates on the views never write to them
    y = s * 2 + 1
    s2 = dt.DTensor(s.local_shards(), s.spec)
    s2[0] = 100.0
    np.testing.assert_array_equal(r.full_tensor(), full)
    np.testing.assert_array_equal(y.full_tensor(), full * 2 + 1)
    expected = full.copy()
    expected[0] = 100.0
    np.testing.assert_array_equal(s2.full_tensor(), expected)


def test_value_dependent_shapes_are_never_served_from_the_fast_path():
    """Two arrays of one spec with different counts of nonzeros (or unique values) get their own shapes."""
    mesh = dt.DeviceMesh((2,))
    first = dt.distribute_tensor(np.array([0.0, 1.0, 2.0, 0.0, 3.0]), mesh, [dt.Shard(0)])
    second = dt.distribute_tensor(np.array([0.0, 0.0, 5.0, 0.0, 0.0]), mesh, [dt.Shard(0)])
    for _ in range(2):
        assert np.nonzero(first)[0].full_tensor().tolist() == [1, 2, 4]
        assert np.nonzero(second)[0].full_tensor().tolist() == [2]
        assert np.unique(first).shape == (4,) and np.unique(second).shape == (2,)


def _set_row(x: Any) -> Any:
    x[1] = 5.0
    return x


UNEVEN_OPS = {  # the cached paths: operators, x[i], x[i] = v, reductions; each on a DTensor or an ndarray
    "x + x": lambda x: x + x,
    "2.0 * x": lambda x: 2.0 * x,
    "x - 3": lambda x: x - 3,
    "np.maximum(x, 0)": lambda x: np.maximum(x, 0),
    "x[1]": lambda x: x[1],
    "x[1:4]": lambda x: x[1:4],
    "x[:, 1:]": lambda x: x[:, 1:],
    "x[1] = 5": _set_row,
    "np.sum(x, axis=0)": lambda x: np.sum(x, axis=0),
    "np.sum(x)": lambda x: np.sum(x),
    "x.max(axis=1)": lambda x: x.max(axis=1),
}
SUMS = ("np.sum(x, axis=0)", "np.sum(x)")


@pytest.mark.worlds(simulated=(1, 2, 3, 4), mpi=(2, 4))
def test_the_fast_path_on_uneven_and_empty_shards(world):
    """(5, 3), (0, 3) and (3, 0) arrays on every placement (uneven and empty shards): the slow call, the cached
    call (served by the fast path) and a call on a handle an item assignment rebound give NumPy's value, or
    NumPy's exception family, on every rank; every rank's mismatches are agreed on at the end."""
    from strategies import rounding_tolerance
    from test_numpy_ops import Checks

    checks = Checks(world)
    meshes = [dt.DeviceMesh((world.size,), backend=world.kind)]
    if world.size == 4:
        meshes.append(dt.DeviceMesh((2, 2), backend=world.kind))
    for shape in ((5, 3), (0, 3), (3, 0)):
        full = np.arange(float(np.prod(shape))).reshape(shape) - 7.0
        rebound = full.copy()
        if shape[0]:
            rebound[0] = -1.0
        atol = rounding_tolerance(full.dtype, world.size + 1, float(np.sum(np.abs(full))))
        for mesh in meshes:
            combos = ([[p] for p in (Replicate(), Shard(0), Shard(1))] if mesh.ndim == 1
                      else [[Shard(0), Shard(1)], [Shard(0), Shard(0)]])
            for placements in combos:
                x = dt.distribute_tensor(full, mesh, placements)
                for name, op in UNEVEN_OPS.items():
                    ctx = f"{name} on {shape} {placements} mesh {mesh.shape}"
                    tolerance = {"rtol": 0, "atol": atol} if name in SUMS else {"exact": True}
                    try:
                        op(full.copy())
                        refused = False
                    except Exception:  # noqa: BLE001 - NumPy refuses: Checks.same wants the same family
                        refused = True

                    def numpy_call(op=op, values=full):
                        return op(values.copy())

                    def dtensor_call(op=op, handle=x):
                        return op(dt.DTensor(handle.local_shards(), handle.spec))  # a handle of its own

                    clear_fast_path()
                    checks.same(f"{ctx} (slow)", numpy_call, dtensor_call, **tolerance)
                    hits = fast_path_stats()["hits"]
                    checks.same(f"{ctx} (cached)", numpy_call, dtensor_call, **tolerance)
                    checks.expect(refused or fast_path_stats()["hits"] > hits,
                                  f"{ctx}: the repeated call was not served by the fast path")
                    y = dt.DTensor(x.local_shards(), x.spec)
                    if shape[0]:
                        y[0] = -1.0  # rebinds y's shards to new values, same spec
                    checks.same(f"{ctx} (rebound)", lambda op=op: op(rebound.copy()),
                                lambda op=op, handle=y: dtensor_call(op, handle), **tolerance)
    checks.finish()
