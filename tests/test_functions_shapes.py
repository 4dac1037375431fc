"""The shapes, selecting and predicates families (issue 37) beyond the harness's cases.

* Against NumPy on uneven and empty shards and 2-D meshes (the global result and every rank's local shard,
  :class:`test_numpy_ops.Checks`): 1 to 4 simulated ranks and ``mpiexec -n 2`` (one MPI job).
* In-place functions write through views: a view's base changes as NumPy's does (views by slices, steps,
  transposes and reshapes), and a first argument that is not a DTensor is refused with a TypeError naming it.
* The exact collectives of every function that communicates (``comm_counter``), and none where it must not.
* Views stay views (``fliplr``, ``flipud``, ``rot90``, ``rollaxis``), and ``shares_memory``/``may_share_memory``
  give NumPy's answers for views of one base.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import dtensor_np as dt
from dtensor_np import Replicate, Shard
from test_numpy_ops import Checks

R = Replicate()
ALL_WORLDS = pytest.mark.worlds(simulated=(1, 2, 3, 4), mpi=(2,))
SIMULATED = pytest.mark.worlds(simulated=(1, 2, 3, 4), mpi=())


def meshes(world: Any) -> list[dt.DeviceMesh]:
    shapes = [(world.size,)] + ([(2, world.size // 2)] if world.size % 2 == 0 and world.size > 2 else [])
    return [dt.DeviceMesh(s, backend=world.kind) for s in shapes]


def placements(mesh: dt.DeviceMesh, ndim: int) -> list[list[Any]]:
    if mesh.ndim == 1:
        return [[R]] + [[Shard(d)] for d in range(ndim)]
    return [[Shard(0), Shard(1 % ndim)], [Shard(0), Shard(0)]]


def counted(call: Callable[[], Any]) -> tuple[Any, dict[str, int]]:
    with dt.comm_counter() as c:
        out = call()
    return out, {k: v for k, v in c.counts.items() if v}


RESHAPING: dict[str, Callable[[Any], Any]] = {
    "insert int": lambda a: np.insert(a, 2, -1, axis=0),
    "insert list": lambda a: np.insert(a, [0, 3, 3, 1], [[7], [8], [9], [6]], axis=0),
    "insert slice axis 1": lambda a: np.insert(a, slice(0, 3, 2), -2, axis=1),
    "insert flat": lambda a: np.insert(a, [1, 5], 4),
    "insert out of bounds": lambda a: np.insert(a, 9, 0, axis=0),
    "delete slice": lambda a: np.delete(a, slice(None, None, 2), axis=0),
    "delete list": lambda a: np.delete(a, [0, 2], axis=1),
    "delete mask": lambda a: np.delete(a, np.arange(a.shape[0]) % 2 == 1, axis=0),
    "delete flat": lambda a: np.delete(a, [1, 2, 3]),
    "delete out of bounds": lambda a: np.delete(a, 7, axis=0),
    "append 0": lambda a: np.append(a, np.full((2, a.shape[1]), 7, a.dtype), axis=0),
    "append 1": lambda a: np.append(a, a, axis=1),
    "append flat": lambda a: np.append(a, [1, 2]),
    "pad constant": lambda a: np.pad(a, ((1, 2), (2, 0)), constant_values=((5, 6), (7, 8))),
    "pad edge": lambda a: np.pad(a, ((3, 1), (0, 2)), mode="edge"),
    "pad reflect": lambda a: np.pad(a, ((2, 4), (1, 1)), mode="reflect"),
    "pad symmetric odd": lambda a: np.pad(a, ((2, 7), (1, 0)), mode="symmetric", reflect_type="odd"),
    "pad reflect odd": lambda a: np.pad(a, ((6, 1), (0, 1)), mode="reflect", reflect_type="odd"),
    "pad wrap": lambda a: np.pad(a, ((7, 2), (1, 1)), mode="wrap"),
    "pad linear_ramp": lambda a: np.pad(a, ((2, 3), (1, 2)), mode="linear_ramp", end_values=((4, -3), (0, 9))),
    "pad maximum": lambda a: np.pad(a, ((1, 2), (1, 1)), mode="maximum", stat_length=2),
    "pad mean": lambda a: np.pad(a, ((2, 2), (0, 1)), mode="mean"),
    "pad median": lambda a: np.pad(a, ((1, 1), (1, 0)), mode="median", stat_length=((3, 2), (1, 2))),
    "pad minimum": lambda a: np.pad(a, 1, mode="minimum"),
    "pad bad mode": lambda a: np.pad(a, 1, mode="nearest"),
    "resize": lambda a: np.resize(a, (4, 5)),
    "resize flat": lambda a: np.resize(a, 7),
    "block": lambda a: np.block([[a, np.ones((a.shape[0], 1), a.dtype)], [np.zeros((2, a.shape[1] + 1), a.dtype)]]),
    "trim_zeros": lambda a: np.trim_zeros(np.pad(a, 1), axis=0),
    "trim_zeros b": lambda a: np.trim_zeros(np.pad(a, 2), "b"),
    "fliplr": lambda a: np.fliplr(a),
    "flipud": lambda a: np.flipud(a),
    "rot90 3": lambda a: np.rot90(a, 3),
    "rollaxis": lambda a: np.rollaxis(a, 1),
}

SELECTING: dict[str, Callable[[Any], Any]] = {
    "choose": lambda a: np.choose(np.mod(a, 3).astype(int), [a, -a, a * 2]),
    "choose clip": lambda a: np.choose(a.astype(int), [a, -a], mode="clip"),
    "choose invalid": lambda a: np.choose(a.astype(int) + 5, [a, -a]),
    "select": lambda a: np.select([a < 2, a > 5], [a * 10, -a], default=a),
    "compress": lambda a: np.compress([True, False, True, True, False][:a.shape[0]], a, axis=0),
    "compress flat": lambda a: np.compress(np.arange(6) % 2 == 0, a),
    "extract": lambda a: np.extract(np.mod(a, 3) == 1, a),
    "isin": lambda a: np.isin(a, [1, 4, 9, 11]),
    "isin invert": lambda a: np.isin(a, np.array([2.0, 3.0]), invert=True),
    "argpartition 1": lambda a: np.take_along_axis(a, np.argpartition(a, 1, axis=1), axis=1)[:, 1],
    "partition 0": lambda a: np.partition(a, (0, a.shape[0] - 1), axis=0)[[0, -1]] if a.shape[0] else a,
    "partition 1-d": lambda a: np.sort(np.partition(a[:, 0], a.shape[0] // 2)[: a.shape[0] // 2 + 1]),
    "lexsort": lambda a: np.lexsort((a[:, 0], np.mod(a[:, 1], 2))),
    "sort_complex": lambda a: np.sort_complex(a),
    "apply_along_axis 0": lambda a: np.apply_along_axis(lambda v: np.cumsum(v[::-1]), 0, a),
    "apply_along_axis scalar": lambda a: np.apply_along_axis(np.max, 1, a),
    "apply_over_axes": lambda a: np.apply_over_axes(np.sum, a, (0, 1)),
    "unique via union1d": lambda a: np.union1d(np.mod(a, 4), [9]),
    "intersect1d": lambda a: np.intersect1d(np.mod(a, 5), [0, 2, 3, 8]),
    "intersect1d indices": lambda a: np.intersect1d(np.mod(a, 5), [2, 3], return_indices=True),
    "setdiff1d": lambda a: np.setdiff1d(np.mod(a, 5), [1, 2]),
    "setxor1d": lambda a: np.setxor1d(np.mod(a, 5), [1, 7]),
    "ravel_multi_index": lambda a: np.ravel_multi_index((np.mod(a, 3).astype(int), np.ones_like(a, int)), (3, 4)),
    "unravel_index": lambda a: np.unravel_index(np.mod(a, 12).astype(int), (3, 4), order="F"),
    "isclose": lambda a: np.isclose(a, a + 1e-9, rtol=0.0, atol=1e-12),
    "nan_to_num": lambda a: np.nan_to_num(np.log(a - 3.0), nan=-1.0),
}


BASE = np.array([[3, 0, 7], [1, 9, 4], [8, 2, 6], [5, 11, 10], [0, 13, 12]], float)


def _inputs(mesh: dt.DeviceMesh) -> list[tuple[np.ndarray, list[Any], dict[str, Callable[[Any], Any]]]]:
    """Every placement of 5 x 3 (uneven blocks); on a 1-D mesh also 1 x 3 and 0 x 3 (empty blocks) and integers."""
    every = {**RESHAPING, **SELECTING}
    out = [(BASE, pl, every) for pl in placements(mesh, 2)]
    if mesh.ndim == 1:
        first = [Shard(0)]
        out += [(BASE[:1], first, every), (BASE[:0], first, every), (BASE.astype(np.int64), first, RESHAPING)]
    return out


@ALL_WORLDS
def test_shapes_and_selection_match_numpy(world):
    checks = Checks(world)
    for mesh in meshes(world):
        for a, pl, calls in _inputs(mesh):
            x = dt.distribute_tensor(a, mesh, pl)
            for name, call in calls.items():
                checks.same(f"{name} {a.shape} {a.dtype} {mesh} {pl}", lambda: call(a.copy()), lambda: call(x))
    checks.finish()


@SIMULATED
def test_partition_along_a_sharded_axis_is_a_valid_partition(world):
    """A 1-d array: the distributed selection (NumPy's values at the ``kth`` positions, the others on the right
    side); an array whose other dims are short: the same per row."""
    checks = Checks(world)
    rng = np.random.default_rng(7)
    for mesh in meshes(world):
        for length in (0, 1, 6, 23):
            for kind in ("normal", "ties", "nan"):
                a = rng.standard_normal(length) if kind != "ties" else rng.integers(0, 3, length).astype(float)
                if kind == "nan":
                    a[::3] = np.nan
                x = dt.distribute_tensor(a, mesh, [Shard(0)] + [R] * (mesh.ndim - 1))
                kths = [(0,), (length - 1,), (1, length // 2)] if length > 1 else []
                for kth in kths:
                    got = np.partition(x, kth).full_tensor()
                    index = np.argpartition(x, kth).full_tensor()
                    want = np.sort(a)
                    for values in (got, a[index]):
                        for k in kth:
                            checks.expect(np.array_equal(values[k], want[k], equal_nan=True),
                                          f"{mesh} {kind} {length} kth {kth}: {values} at {k}, NumPy's {want[k]}")
                            left, right = values[:k], values[k + 1:]
                            ok = (np.isnan(right).all() if np.isnan(want[k]) else
                                  bool((left <= want[k]).all() and ((right >= want[k]) | np.isnan(right)).all()))
                            checks.expect(ok, f"{mesh} {kind} {length} kth {kth}: {values} not partitioned at {k}")
                    checks.expect(sorted(index.tolist()) == list(range(length)), f"argpartition {index}")
        b = rng.standard_normal((3, 17))
        x = dt.distribute_tensor(b, mesh, [Shard(1)] + [R] * (mesh.ndim - 1))
        got = np.partition(x, (2, 9), axis=1).full_tensor()
        checks.expect(np.array_equal(got[:, [2, 9]], np.sort(b, axis=1)[:, [2, 9]]), f"rows: {got}")
        checks.expect(np.array_equal(np.sort(got, axis=1), np.sort(b, axis=1)), f"rows are permutations: {got}")
    checks.finish()


# -- in place, through views -------------------------------------------------------------------------------
VIEWS: dict[str, Callable[[Any], Any]] = {
    "slice": lambda a: a[1:4],
    "step": lambda a: a[::2],
    "transpose": lambda a: a.T,
    "columns": lambda a: a[:, 1:],
    "reshape": lambda a: a.reshape(3, 2, 2)[1:],
}

IN_PLACE: dict[str, Callable[[Any], None]] = {
    "place": lambda v: np.place(v, v > 4, [-1.0, -2.0]),
    "put": lambda v: np.put(v, [0, 3, -1, 3], [9.0, 8.0, 7.0]),
    "put wrap": lambda v: np.put(v, [-20, 11], [5.0], mode="wrap"),
    "put_along_axis": lambda v: np.put_along_axis(v, np.zeros((1,) + v.shape[1:], int), -3.0, axis=0),
    "put_along_axis last": lambda v: np.put_along_axis(v, np.ones(v.shape[:-1] + (1,), int), [[-4.0]][0][0], axis=-1),
    "putmask": lambda v: np.putmask(v, v > 5, [10.0, 20.0, 30.0]),
    "fill_diagonal": lambda v: np.fill_diagonal(v, [1.5, 2.5]) if v.ndim == 2 else np.fill_diagonal(v[0], 2.0),
    "nan_to_num": lambda v: np.nan_to_num(v, copy=False),
    "choose out": lambda v: np.choose(np.zeros(v.shape, int), [v * 2], out=v),
}


@SIMULATED
def test_in_place_functions_write_through_views(world):
    checks = Checks(world)
    base = np.arange(12.0).reshape(4, 3)
    for mesh in meshes(world):
        for pl in placements(mesh, 2)[1:]:
            for view_name, view in VIEWS.items():
                for name, write in IN_PLACE.items():
                    want = base.copy()
                    try:
                        write(view(want))
                        expected: Any = want
                    except Exception as e:  # noqa: BLE001
                        expected = e
                    a = dt.distribute_tensor(base, mesh, pl)
                    try:
                        write(view(a))
                    except Exception as e:  # noqa: BLE001
                        checks.expect(isinstance(expected, Exception) and type(e).__mro__[1:] and
                                      isinstance(e, (ValueError, TypeError, IndexError)),
                                      f"{name} on {view_name} {pl}: raised {e!r}, NumPy {expected!r}")
                        continue
                    if isinstance(expected, Exception):
                        checks.expect(False, f"{name} on {view_name} {pl}: NumPy raised {expected!r}")
                        continue
                    checks.result(f"{name} through {view_name} {pl}", a, expected, exact=True)
    checks.finish()


def test_in_place_functions_refuse_a_first_argument_that_is_not_a_dtensor():
    x = dt.distribute_tensor(np.ones(3), dt.DeviceMesh((2,)), [Shard(0)])
    for call, name in ((lambda: np.put(np.zeros(3), [0], x), "put"),
                       (lambda: np.place(np.zeros(3), x > 0, [1.0]), "place"),
                       (lambda: np.putmask(np.zeros(3), x > 0, x), "putmask"),
                       (lambda: np.put_along_axis(np.zeros(3), np.array([0]), x[:1], axis=0), "put_along_axis")):
        with pytest.raises(TypeError, match=f"numpy.{name}: .* must be a DTensor"):
            call()


# -- the collectives ------------------------------------------------------------------------------------------
def _x(shape: tuple[int, ...], placement: Any, mesh: Any, dtype: str = "float64") -> Any:
    return dt.distribute_tensor(np.arange(int(np.prod(shape))).reshape(shape).astype(dtype), mesh, [placement])


NONE: dict[str, int] = {}
A2A = {"all_to_all": 1}
REDUCE = {"all_reduce": 1}
GATHER = {"all_gather": 1}

COLLECTIVES: list[tuple[str, tuple[int, ...], Any, Callable[[Any], Any], dict[str, int]]] = [
    # (name, shape, placement, call, counts) on 4 ranks
    ("delete along sharded", (10, 3), Shard(0), lambda x: np.delete(x, 0, axis=0), A2A),
    ("delete along unsharded", (10, 3), Shard(0), lambda x: np.delete(x, 0, axis=1), NONE),
    ("delete nothing moves", (8, 3), Shard(0), lambda x: np.delete(x, [], axis=0), NONE),
    ("insert along sharded", (10, 3), Shard(0), lambda x: np.insert(x, 4, 1.0, axis=0), A2A),
    ("insert along unsharded", (10, 3), Shard(1), lambda x: np.insert(x, 1, 1.0, axis=0), NONE),
    ("append along sharded", (10, 3), Shard(0), lambda x: np.append(x, x, axis=0), A2A),
    ("block along sharded", (8, 3), Shard(0), lambda x: np.block([[x], [x]]), A2A),
    ("block along unsharded", (8, 3), Shard(0), lambda x: np.block([x, x]), NONE),
    ("pad reflect sharded", (10, 3), Shard(0), lambda x: np.pad(x, ((2, 3), (0, 0)), mode="reflect"), A2A),
    ("pad both axes, one sharded", (10, 3), Shard(0), lambda x: np.pad(x, 2, mode="wrap"), A2A),
    ("pad constant unsharded", (10, 3), Shard(0), lambda x: np.pad(x, ((0, 0), (1, 1))), NONE),
    ("pad odd one round", (10, 3), Shard(0), lambda x: np.pad(x, ((2, 2), (0, 0)), mode="reflect",
                                                                  reflect_type="odd"), {"all_to_all": 3}),
    ("pad linear_ramp unsharded", (10, 3), Shard(0), lambda x: np.pad(x, ((0, 0), (2, 1)), mode="linear_ramp"),
     {"all_reduce": 2}),
    ("pad maximum unsharded", (10, 3), Shard(0), lambda x: np.pad(x, ((0, 0), (1, 1)), mode="maximum"), NONE),
    ("resize 1-d", (10,), Shard(0), lambda x: np.resize(x, 13), A2A),
    ("resize 2-d", (10, 3), Shard(0), lambda x: np.resize(x, (7, 5)), {"all_to_all": 3}),
    ("trim_zeros", (10,), Shard(0), lambda x: np.trim_zeros(np.where(x < 3, 0.0, x)), {"all_reduce": 1, **A2A}),
    ("fliplr view read", (10, 4), Shard(1), lambda x: np.fliplr(x), A2A),
    ("rot90 along unsharded", (10, 4), Shard(0), lambda x: np.rot90(x, 2, axes=(1, 0))[:, 0], A2A),
    ("rollaxis", (10, 4), Shard(0), lambda x: np.rollaxis(x, 1), NONE),
    ("choose raise", (10,), Shard(0), lambda x: np.choose(np.mod(x, 2).astype(int), [x, -x]), REDUCE),
    ("choose wrap", (10,), Shard(0), lambda x: np.choose(x.astype(int), [x, -x], mode="wrap"), NONE),
    ("select", (10,), Shard(0), lambda x: np.select([x > 3], [x]), NONE),
    ("compress plain along sharded", (10, 2), Shard(0), lambda x: np.compress([1] + [0] * 8 + [1], x, axis=0), A2A),
    ("compress dtensor condition", (10,), Shard(0), lambda x: np.compress(x > 7, x), {"all_gather": 1, **A2A}),
    ("extract lined-up", (10,), Shard(0), lambda x: np.extract(x > 6, x), A2A),
    ("put static", (10, 3), Shard(0), lambda x: np.put(x, [0, 29], [1.0, 2.0]), NONE),
    ("fill_diagonal", (10, 3), Shard(0), lambda x: np.fill_diagonal(x, 5.0, wrap=True), NONE),
    ("putmask cycled", (10, 3), Shard(1), lambda x: np.putmask(x, x > 4, [1.0, 2.0]), NONE),
    ("put_along_axis unsharded axis", (10, 3), Shard(0),
     lambda x: np.put_along_axis(x, np.zeros((10, 1), int), 1.0, axis=1), NONE),
    ("put_along_axis sharded axis, plain indices", (10, 3), Shard(0),
     lambda x: np.put_along_axis(x, np.zeros((1, 3), int), 1.0, axis=0), NONE),
    ("place", (12,), Shard(0), lambda x: np.place(x, x > 4, [1.0, 2.0]), {"scan": 1}),
    ("partition free dim", (8, 8), Shard(1), lambda x: np.partition(x, 3, axis=1), A2A),
    ("partition unsharded", (8, 8), Shard(0), lambda x: np.partition(x, 3, axis=1), NONE),
    ("lexsort 2 keys, free dim", (8, 8), Shard(1), lambda x: np.lexsort((x, -x), axis=1), {"all_to_all": 2}),
    ("piecewise rows", (10, 3), Shard(0), lambda x: np.piecewise(x, [x < 4], [lambda v: v * 2, 1.0]), {"all_to_all": 2}),
    ("piecewise columns", (10, 3), Shard(1), lambda x: np.piecewise(x, [x < 4], [lambda v: v * 2, 1.0]),
     {"all_gather": 3, "all_to_all": 1}),
    ("apply_along_axis unsharded", (8, 8), Shard(0), lambda x: np.apply_along_axis(np.cumsum, 1, x), NONE),
    ("apply_along_axis sharded", (8, 8), Shard(1), lambda x: np.apply_along_axis(np.cumsum, 1, x), A2A),
    ("apply_over_axes", (8, 8), Shard(0), lambda x: np.apply_over_axes(np.sum, x, 1), NONE),
    ("isin plain test", (10,), Shard(0), lambda x: np.isin(x, [1, 2]), NONE),
    ("isin dtensor test", (10,), Shard(0), lambda x: np.isin(x, x[::-1] % 3), {"all_gather": 1, **A2A}),
    ("union1d", (10,), Shard(0), lambda x: np.union1d(x, [3, 30]), GATHER),
    ("intersect1d", (10,), Shard(0), lambda x: np.intersect1d(x, x), {"all_gather": 2}),
    ("setdiff1d", (10,), Shard(0), lambda x: np.setdiff1d(x, [3]), GATHER),
    ("setxor1d", (10,), Shard(0), lambda x: np.setxor1d(x, [3, 30]), GATHER),
    ("ix_", (10,), Shard(0), lambda x: np.ix_(x, [0, 1]), NONE),
    ("ravel_multi_index raise", (10,), Shard(0),
     lambda x: np.ravel_multi_index((x.astype(int), x.astype(int)), (10, 10)), REDUCE),
    ("unravel_index", (10,), Shard(0), lambda x: np.unravel_index(x.astype(int), (5, 2)), REDUCE),
    ("allclose", (10, 3), Shard(0), lambda x: np.allclose(x, x), REDUCE),
    ("array_equal", (10, 3), Shard(0), lambda x: np.array_equal(x, x), REDUCE),
    ("array_equiv", (10, 3), Shard(0), lambda x: np.array_equiv(x, x[:1]), {"all_gather": 1, **REDUCE}),
    ("real_if_close", (10,), Shard(0), lambda x: np.real_if_close(x + 0j), REDUCE),
    ("isclose", (10, 3), Shard(0), lambda x: np.isclose(x, 1.0), NONE),
    ("elementwise helpers", (10, 3), Shard(1), lambda x: (np.sinc(x), np.i0(x), np.fix(x), np.angle(x + 1j),
                                                          np.isposinf(x), np.isneginf(x), np.iscomplex(x),
                                                          np.isreal(x), np.nan_to_num(x)), NONE),
    ("questions", (10, 3), Shard(1), lambda x: (np.ndim(x), np.shape(x), np.size(x, 0), np.iterable(x),
                                                np.isscalar(x), np.iscomplexobj(x), np.isrealobj(x),
                                                np.shares_memory(x, x[1:]), np.may_share_memory(x, x.T)), NONE),
]


@pytest.mark.parametrize("name, shape, placement, call, counts", COLLECTIVES, ids=[c[0] for c in COLLECTIVES])
def test_collectives(name, shape, placement, call, counts):
    mesh = dt.DeviceMesh((4,))
    x = _x(shape, placement, mesh)
    _, got = counted(lambda: call(x))
    assert got == counts
    replicated = _x(shape, R, mesh)
    assert counted(lambda: call(replicated))[1] == {}, "a replicated array communicates nothing"


def test_partition_of_a_1d_array_moves_no_whole_array():
    """The radix selection (all_reduce rounds, one all_gather of a few keys), one all_gather of the counts, one
    exchange; far fewer bytes than a gather of the array (32,000 bytes)."""
    a = np.random.default_rng(3).standard_normal(4000)
    x = dt.distribute_tensor(a, dt.DeviceMesh((4,)), [Shard(0)])
    with dt.comm_counter() as c:
        y = np.partition(x, 2000)
    assert c.counts["all_to_all"] == 1 and c.counts["all_gather"] == 2 and c.counts["all_reduce"] <= 9
    assert set(k for k, v in c.counts.items() if v) == {"all_gather", "all_reduce", "all_to_all"}
    assert c.bytes["all_gather"] + c.bytes["all_reduce"] < 8000
    assert y.full_tensor()[2000] == np.sort(a)[2000]
    assert str(y.spec) == "S(0)"


# -- views and memory ---------------------------------------------------------------------------------------
@SIMULATED
def test_flips_and_rotations_are_views(world):
    checks = Checks(world)
    for mesh in meshes(world):
        for pl in placements(mesh, 2):
            for name, view in (("fliplr", np.fliplr), ("flipud", np.flipud), ("rot90", np.rot90),
                               ("rot90 2", lambda m: np.rot90(m, 2)), ("rot90 4", lambda m: np.rot90(m, 4)),
                               ("rollaxis", lambda m: np.rollaxis(m, 1)), ("rollaxis same", lambda m: np.rollaxis(m, 0, 1))):
                a = np.arange(12.0).reshape(3, 4)
                x = dt.distribute_tensor(a, mesh, pl)
                v, w = view(a), view(x)
                checks.expect(w.base is x, f"{name} {pl}: not a view of x")
                v[0, 1] = -1.0
                w[0, 1] = -1.0
                checks.result(f"{name} {pl} base after a write", x, a, exact=True)
                checks.result(f"{name} {pl} view", w, v, exact=True)
    checks.finish()


def test_shares_memory_answers_as_numpy():
    a = np.zeros((6, 4))
    x = dt.distribute_tensor(a, dt.DeviceMesh((2,)), [Shard(0)])
    views = {"whole": lambda m: m, "rows": lambda m: m[1:3], "later rows": lambda m: m[3:], "even": lambda m: m[::2],
             "odd": lambda m: m[1::2], "column": lambda m: m[:, 1], "T": lambda m: m.T, "reshape": lambda m: m.reshape(24),
             "flip": lambda m: m[::-1, 1:2], "diagonal": lambda m: m.diagonal()}
    for (na, fa) in views.items():
        for (nb, fb) in views.items():
            for check in (np.shares_memory, np.may_share_memory):
                assert check(fa(x), fb(x)) == check(fa(a), fb(a)), (check.__name__, na, nb)
    assert not np.shares_memory(x, x.copy()) and not np.may_share_memory(x, a)
    assert not np.shares_memory(x, np.ones(3))


def test_traced_shapes_run_as_eager():
    """The composites record their calls under dt.trace; the graph gives NumPy's values."""
    for call in (lambda x: np.pad(x, ((1, 2), (0, 1)), mode="symmetric"), lambda x: np.insert(x, 1, 5.0, axis=0),
                 lambda x: np.delete(x, [0, 2], axis=1), lambda x: np.block([[x, x]]), lambda x: np.rot90(x),
                 lambda x: np.select([x > 1], [x]), lambda x: np.isin(x, [1.0]), lambda x: np.i0(x)):
        graph = dt.trace(call, dt.ShapeDtype((4, 3), "f8"))
        a = np.arange(12.0).reshape(4, 3)
        np.testing.assert_array_equal(np.asarray(graph(a)), call(a))


def test_data_dependent_functions_refuse_tracing():
    for call in (lambda x: np.union1d(x, [1.0]), lambda x: np.setdiff1d(x, x), lambda x: np.trim_zeros(x),
                 lambda x: np.compress(x > 1, x), lambda x: np.extract(x > 1, x)):
        with pytest.raises(TypeError, match="data-dependent"):
            dt.trace(call, dt.ShapeDtype((4,), "f8"))
