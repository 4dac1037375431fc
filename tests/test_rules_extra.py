"""The rules of issue 20 item 3 (scans, arg/moment reductions, sort, flip, unique, tile, take...) against NumPy.

Every test takes the ``world`` fixture (simulated 1, 2, 4 ranks; ``mpiexec -n 2``),
builds the same full arrays on every rank, and compares each result with NumPy
on the full array: global shape and dtype, ``full_tensor()`` and every held
rank's local shard (:class:`test_numpy_ops.Checks`, whose verdict every rank
agrees on).  Shards are uneven and empty (5 and 1 rows over 2 and 4 ranks);
the collectives each rule's docstring states are counted.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dtensor_np as dt
from strategies import sorted_unique
from dtensor_np import Replicate, Shard, ShardingError
from dtensor_np.propagation import layout_ops, reorder, roll, scans, statistics
from dtensor_np.propagation.registry import _RULES
from test_numpy_ops import Checks

WORLDS = pytest.mark.worlds(simulated=(1, 2, 4), mpi=(2,))
SHAPES = ((5, 3), (1, 3), (0, 3), (4, 6))


def arrays(shape: tuple[int, ...], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "f8": rng.standard_normal(shape) + 50.0,  # far from 0: var must not cancel
        "i8": rng.integers(-3, 4, size=shape),  # ties for argmax, repeats for unique
        "f4": rng.standard_normal(shape).astype(np.float32),
    }


def counted(call: Callable[[], Any]) -> tuple[Any, Any]:
    with dt.comm_counter() as c:
        out = call()
    return out, c


# (name, call on an array) for one array argument; `axis` is the axis the op works along
AXIS_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "cumsum": lambda x, ax: np.cumsum(x, axis=ax),
    "cumprod": lambda x, ax: np.cumprod(x, axis=ax),
    "cumulative_sum": lambda x, ax: np.cumulative_sum(x, axis=ax),
    "var": lambda x, ax: np.var(x, axis=ax),
    "std ddof=1 keepdims": lambda x, ax: np.std(x, axis=ax, ddof=1, keepdims=True),
    "argmax": lambda x, ax: np.argmax(x, axis=ax),
    "argmin keepdims": lambda x, ax: np.argmin(x, axis=ax, keepdims=True),
    "sort": lambda x, ax: np.sort(x, axis=ax),
    "argsort stable": lambda x, ax: np.argsort(x, axis=ax, stable=True),
    "flip": lambda x, ax: np.flip(x, axis=ax),
    "repeat 2": lambda x, ax: np.repeat(x, 2, axis=ax),
    "repeat per row": lambda x, ax: np.repeat(x, np.arange(x.shape[ax]) % 3, axis=ax),
    "unstack": lambda x, ax: np.unstack(x, axis=ax),
    "take": lambda x, ax: np.take(x, [0, x.shape[ax] - 1, 0], axis=ax),
    "roll 2": lambda x, ax: np.roll(x, 2, axis=ax),
    "roll -7": lambda x, ax: np.roll(x, -7, axis=ax),
}
WHOLE_OPS: dict[str, Callable[[Any], Any]] = {
    "cumsum flat": lambda x: np.cumsum(x),
    "var all": lambda x: np.var(x),
    "argmax flat": lambda x: np.argmax(x),
    "argmin flat": lambda x: np.argmin(x),
    "sort flat": lambda x: np.sort(x, axis=None),
    "flip all": lambda x: np.flip(x),
    "tril -1": lambda x: np.tril(x, -1),
    "triu 1": lambda x: np.triu(x, k=1),
    "triu -2": lambda x: np.triu(x, -2),
    "broadcast_to": lambda x: np.broadcast_to(x, (2,) + x.shape),
    "tile (2, 1)": lambda x: np.tile(x, (2, 1)),
    "tile 3": lambda x: np.tile(x, 3),
    "tile (2, 1, 1)": lambda x: np.tile(x, (2, 1, 1)),
    "around 1": lambda x: np.around(x, 1),
    "concatenate None": lambda x: np.concatenate([x, x], axis=None),
    "roll flat 3": lambda x: np.roll(x, 3),
    "roll both axes": lambda x: np.roll(x, (1, -2), axis=(0, 1)),
    "nonzero": lambda x: np.nonzero(x > 50.0) if x.dtype.kind == "f" else np.nonzero(x),
    "flatnonzero": lambda x: np.flatnonzero(x),
    "argwhere": lambda x: np.argwhere(x),
    "unique": lambda x: np.unique(x),
    # the Array API's unique_* sort their values (NumPy 2.4's own give hash order): against NumPy's sorted ones
    "unique_values": lambda x: np.unique_values(x) if isinstance(x, dt.DTensor) else sorted_unique("unique_values", x),
    **{name: (lambda x, name=name: tuple(getattr(np, name)(x) if isinstance(x, dt.DTensor) else sorted_unique(name, x)))
       for name in ("unique_counts", "unique_inverse", "unique_all")},
    "unique return all": lambda x: np.unique(x, return_index=True, return_inverse=True, return_counts=True),
}


@WORLDS
def test_axis_ops_match_numpy_on_uneven_and_empty_shards(world):
    report = Checks(world)
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    for shape in SHAPES:
        for kind, a in arrays(shape).items():
            for placement in (Shard(0), Shard(1), Replicate()):
                x = dt.distribute_tensor(a, mesh, [placement])
                for ax in (0, 1, -1):
                    for name, f in AXIS_OPS.items():
                        if name == "take" and a.shape[ax] == 0:
                            continue
                        exact = name not in ("var", "std ddof=1 keepdims", "cumsum", "cumulative_sum", "cumprod")
                        rtol = 1e-4 if kind == "f4" else 1e-12
                        report.same(f"{name} axis={ax} {kind}{shape} {placement}", lambda: f(a, ax), lambda: f(x, ax),
                                    exact=exact, rtol=None if exact else rtol, atol=None if exact else 1e-9)
                for name, f in WHOLE_OPS.items():
                    report.same(f"{name} {kind}{shape} {placement}", lambda: f(a), lambda: f(x), exact=name != "var all",
                                rtol=None if name != "var all" else 1e-4 if kind == "f4" else 1e-12)
    report.finish()


@WORLDS
def test_two_array_ops_and_meshgrid_match_numpy(world):
    report = Checks(world)
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    rng = np.random.default_rng(1)
    for shape in SHAPES:
        a = rng.standard_normal(shape)
        for placement in (Shard(0), Shard(1), Replicate()):
            x = dt.distribute_tensor(a, mesh, [placement])
            for ax in (0, 1):
                if shape[ax]:
                    i = rng.integers(0, shape[ax], size=shape)
                    for ip in (Shard(0), Shard(1), Replicate()):
                        idx = dt.distribute_tensor(i, mesh, [ip])
                        report.same(f"take_along_axis {ax} {shape} {placement} idx {ip}",
                                    lambda: np.take_along_axis(a, i, axis=ax), lambda: np.take_along_axis(x, idx, axis=ax),
                                    exact=True)
                    idx = dt.distribute_tensor(np.array([shape[ax] - 1, 0]), mesh, [Shard(0)])
                    report.same(f"take DTensor indices {ax} {shape} {placement}",
                                lambda: np.take(a, [shape[ax] - 1, 0], axis=ax), lambda: np.take(x, idx, axis=ax), exact=True)
            counts = rng.integers(0, 3, size=shape[0])
            dcounts = dt.distribute_tensor(counts, mesh, [Shard(0)])
            report.same(f"repeat DTensor repeats {shape} {placement}", lambda: np.repeat(a, counts, axis=0),
                        lambda: np.repeat(x, dcounts, axis=0), exact=True)
            row = a[:1]
            y = dt.distribute_tensor(row, mesh, [placement])
            report.same(f"broadcast_arrays {shape} {placement}", lambda: np.broadcast_arrays(a, row),
                        lambda: np.broadcast_arrays(x, y), exact=True)
        u, v = rng.standard_normal(shape[0]), rng.standard_normal(7)
        for pu in (Shard(0), Replicate()):
            du = dt.distribute_tensor(u, mesh, [pu])
            dv = dt.distribute_tensor(v, mesh, [Shard(0)])
            for indexing in ("xy", "ij"):
                for sparse in (False, True):
                    report.same(f"meshgrid {indexing} sparse={sparse} {pu}",
                                lambda: np.meshgrid(u, v, indexing=indexing, sparse=sparse),
                                lambda: tuple(np.meshgrid(du, dv, indexing=indexing, sparse=sparse)), exact=True)
    report.finish()


@pytest.mark.worlds(simulated=(4,), mpi=(4,))
def test_two_dim_mesh(world):
    report = Checks(world)
    mesh = dt.DeviceMesh((2, 2), backend=world.kind)
    a = arrays((5, 3))["i8"].astype(float)
    for placements in ([Shard(0), Shard(1)], [Shard(1), Shard(0)], [Shard(0), Shard(0)], [Replicate(), Shard(0)]):
        x = dt.distribute_tensor(a, mesh, placements)
        for ax in (0, 1, None):
            for name, f in (("argmax", np.argmax), ("argmin", np.argmin), ("var", np.var), ("std", np.std)):
                report.same(f"{name} {ax} {placements}", lambda: f(a, axis=ax), lambda: f(x, axis=ax))
            if ax is not None:
                report.same(f"cumsum {ax} {placements}", lambda: np.cumsum(a, axis=ax), lambda: np.cumsum(x, axis=ax))
                report.same(f"flip {ax} {placements}", lambda: np.flip(a, ax), lambda: np.flip(x, ax), exact=True)
        report.same(f"tril {placements}", lambda: np.tril(a, 1), lambda: np.tril(x, 1), exact=True)
    report.finish()


@WORLDS
def test_collective_counts_along_a_sharded_axis(world):
    """Each rule communicates exactly as its docstring says (and not at all on one rank)."""
    report = Checks(world)
    n = world.size
    mesh = dt.DeviceMesh((n,), backend=world.kind)
    a = np.random.default_rng(2).standard_normal((8, 8))
    x = dt.distribute_tensor(a, mesh, [Shard(0)])
    v = dt.distribute_tensor(a[0], mesh, [Shard(0)])
    x5 = dt.distribute_tensor(a[:5], mesh, [Shard(0)])
    idx = dt.distribute_tensor(np.zeros((8, 8), np.int64), mesh, [Shard(0)])
    bins = dt.distribute_tensor(np.sort(a[0]), mesh, [Shard(0)])
    expected = {
        "cumsum": (lambda: np.cumsum(x, axis=0), {"scan": 1}),
        "cumprod (moves to dim 1)": (lambda: np.cumprod(x, axis=0), {"all_to_all": 1}),
        "argmax": (lambda: np.argmax(x, axis=0), {"all_gather": 1}),
        "argmin flat": (lambda: np.argmin(x), {"all_gather": 1}),
        "var": (lambda: np.var(x, axis=0), {"all_gather": 1}),
        "std all": (lambda: np.std(x), {"all_gather": 1}),
        "sort (moves to dim 1)": (lambda: np.sort(x, axis=0), {"all_to_all": 1}),
        "sort 1-d (gathers)": (lambda: np.sort(v), {"all_gather": 1}),
        "flip": (lambda: np.flip(x, 0), {"all_to_all": 1}),
        "repeat 2 (chunks line up)": (lambda: np.repeat(x, 2, axis=0), {}),
        "repeat 2 (5 rows: one rechunk)": (lambda: np.repeat(x5, 2, axis=0), {"all_to_all": 1}),
        "tril": (lambda: np.tril(x, 2), {}),
        "broadcast_to": (lambda: np.broadcast_to(x, (3, 8, 8)), {}),
        "tile (1, 2)": (lambda: np.tile(x, (1, 2)), {}),
        "tile (2, 1) (gathers)": (lambda: np.tile(x, (2, 1)), {"all_gather": 1}),
        "unstack (gathers)": (lambda: np.unstack(x, axis=0), {"all_gather": 1}),
        "take_along_axis 0 (gathers arr)": (lambda: np.take_along_axis(x, idx, axis=0), {"all_gather": 1}),
        "unique (gathers)": (lambda: np.unique(x), {"all_gather": 1}),
        "roll (one exchange)": (lambda: np.roll(x, 3, axis=0), {"all_to_all": 1}),
        "nonzero (gathers)": (lambda: np.nonzero(x > 0), {"all_gather": 1}),
        "searchsorted, sorted array sharded (gathers it)": (lambda: np.searchsorted(bins, x), {"all_gather": 1}),
        "searchsorted, replicated bins": (lambda: np.searchsorted(np.sort(a[0]), x), {}),
    }
    for name, (call, counts) in expected.items():
        _, c = counted(call)
        want = counts if n > 1 else {}
        got = {k: v for k, v in c.counts.items() if v}
        report.expect(got == want, f"{name}: expected {want}, got {got}")
    report.finish()


# every op of the new rules, called on an array sharded on dim 0 and working along dim 1 only
UNTOUCHED: dict[str, Callable[[Any, Any], Any]] = {
    "cumsum": lambda x, i: np.cumsum(x, axis=1),
    "cumprod": lambda x, i: np.cumprod(x, axis=1),
    "cumulative_sum": lambda x, i: np.cumulative_sum(x, axis=1),
    "cumulative_prod": lambda x, i: np.cumulative_prod(x, axis=1),
    "var": lambda x, i: np.var(x, axis=1),
    "std": lambda x, i: np.std(x, axis=1),
    "argmax": lambda x, i: np.argmax(x, axis=1),
    "argmin": lambda x, i: np.argmin(x, axis=1),
    "sort": lambda x, i: np.sort(x, axis=1),
    "argsort": lambda x, i: np.argsort(x, axis=1),
    "flip": lambda x, i: np.flip(x, axis=1),
    "tril": lambda x, i: np.tril(x),
    "triu": lambda x, i: np.triu(x, 1),
    "broadcast_to": lambda x, i: np.broadcast_to(x, (2, 8, 6)),
    "broadcast_arrays": lambda x, i: np.broadcast_arrays(x, x),
    "tile": lambda x, i: np.tile(x, (1, 2)),
    "repeat": lambda x, i: np.repeat(x, 3, axis=1),
    "unstack": lambda x, i: np.unstack(x, axis=1),
    "take": lambda x, i: np.take(x, [0, 2], axis=1),
    "take_along_axis": lambda x, i: np.take_along_axis(x, i, axis=1),
    "meshgrid": lambda x, i: np.meshgrid(i[:, 0], i[:, 1], indexing="ij"),
    "around": lambda x, i: np.around(x, 2),
    "roll": lambda x, i: np.roll(x, 2, axis=1),
    "searchsorted": lambda x, i: np.searchsorted(np.arange(6.0), x),
}
DATA_DEPENDENT = {"unique", "unique_values", "unique_counts", "unique_inverse", "unique_all", "nonzero", "flatnonzero",
                  "argwhere"}


@WORLDS
def test_ops_along_untouched_axes_issue_no_collective(world):
    """Walks the rule table of the new modules: every op works along dim 1 of an array sharded on dim 0 without communicating."""
    modules = (layout_ops, reorder, scans, statistics, roll)
    new = {rule.name for f, rule in _RULES.items() if rule.decide.__module__ in {m.__name__ for m in modules}
           or getattr(rule.bind, "__module__", "") in {m.__name__ for m in modules}}
    missing = new - set(UNTOUCHED) - DATA_DEPENDENT
    assert not missing, f"rules without an untouched-axis case: {sorted(missing)}"
    report = Checks(world)
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    a = np.random.default_rng(3).standard_normal((8, 6))
    x = dt.distribute_tensor(a, mesh, [Shard(0)])
    i = dt.distribute_tensor(np.random.default_rng(4).integers(0, 6, size=(8, 6)), mesh, [Shard(0)])
    for name, call in UNTOUCHED.items():
        out, c = counted(lambda: call(x, i))
        report.expect(c.total == 0, f"{name}: expected no collective, got {c}")
        first = out[0] if isinstance(out, (tuple, list)) else out
        report.expect(any(isinstance(p, Shard) for p in first.placements) or name == "meshgrid",
                      f"{name}: expected the result to stay sharded, got {first.spec}")
    report.finish()


@settings(max_examples=25)
@given(st.lists(st.sampled_from([0.0, 1.0, -1.0, 2.0, np.nan, np.inf]), min_size=1, max_size=9),
       st.sampled_from([1, 2, 4]))
def test_argmax_argmin_ties_and_nan_pick_numpys_index(values, ranks):
    """First index on ties, the first NaN wins, as NumPy does, whatever the chunking."""
    a = np.array(values)
    x = dt.distribute_tensor(a, dt.DeviceMesh((ranks,)), [Shard(0)])
    assert int(np.argmax(x)) == int(np.argmax(a))
    assert int(np.argmin(x)) == int(np.argmin(a))


@settings(max_examples=25)
@given(st.integers(1, 12), st.sampled_from([1, 2, 4]), st.integers(0, 2), st.floats(-1e6, 1e6))
def test_var_matches_numpy_far_from_zero(n, ranks, ddof, shift):
    a = np.random.default_rng(n).standard_normal(n) + shift
    x = dt.distribute_tensor(a, dt.DeviceMesh((ranks,)), [Shard(0)])
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning) if n - ddof <= 0 else _nothing():
        got = np.var(x, ddof=ddof).full_tensor()
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning) if n - ddof <= 0 else _nothing():
        expected = np.var(a, ddof=ddof)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12 * max(1.0, abs(shift)))


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


@WORLDS
def test_searchsorted_matches_numpy_for_every_placement_pair(world):
    report = Checks(world)
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    rng = np.random.default_rng(5)
    for n_bins in (0, 1, 5):
        bins = np.sort(rng.integers(-3, 4, size=n_bins).astype(float))
        v = rng.integers(-4, 5, size=(5, 3)).astype(float)
        for pb in (Shard(0), Replicate()):
            b = dt.distribute_tensor(bins, mesh, [pb])
            for pv in (Shard(0), Shard(1), Replicate()):
                x = dt.distribute_tensor(v, mesh, [pv])
                for side in ("left", "right"):
                    report.same(f"searchsorted {n_bins} bins {pb} v {pv} {side}", lambda: np.searchsorted(bins, v, side=side),
                                lambda: np.searchsorted(b, x, side=side), exact=True)
                report.same(f"searchsorted numpy bins, v {pv}", lambda: np.searchsorted(bins, v),
                            lambda: np.searchsorted(bins, x), exact=True)
            report.same(f"searchsorted scalar {pb}", lambda: np.searchsorted(bins, 1.0), lambda: np.searchsorted(b, 1.0),
                        exact=True)
            order = np.argsort(bins[::-1])
            report.same(f"searchsorted sorter {pb}", lambda: np.searchsorted(bins[::-1], v, sorter=order),
                        lambda: np.searchsorted(dt.distribute_tensor(bins[::-1].copy(), mesh, [pb]), x, sorter=order),
                        exact=True)
    report.finish()


def test_data_dependent_ops_refused_under_trace():
    for f in (np.nonzero, np.flatnonzero, np.argwhere, np.where, np.trim_zeros,
              lambda a: np.extract(a > 0, a), lambda a: np.compress(a > 0, a), lambda a: np.intersect1d(a, a),
              lambda a: np.setdiff1d(a, a), lambda a: np.union1d(a, a), lambda a: np.setxor1d(a, a)):
        with pytest.raises(TypeError, match="data-dependent output shape"):
            dt.trace(f, np.arange(3.0))
    for f in (np.unique, np.unique_values, np.unique_counts):
        with pytest.raises(TypeError, match="data-dependent output shape"):
            dt.trace(f, np.arange(3.0))
    with pytest.raises(TypeError, match="numpy.repeat has a data-dependent output shape"):
        dt.trace(lambda a, r: np.repeat(a, r), np.arange(3.0), np.arange(3))
    assert dt.trace(lambda a: np.repeat(a, 2), np.arange(3.0))(np.arange(3.0)).tolist() == [0, 0, 1, 1, 2, 2]


def test_refusals_say_what_was_expected():
    mesh = dt.DeviceMesh((2,))
    x = dt.distribute_tensor(np.ones((4, 3)), mesh, [Shard(0)])
    with pytest.raises(ShardingError, match="expected an axis"):
        np.take(x, [0])
    with pytest.raises(ShardingError, match="expected axis=None"):
        np.unique(x, axis=0)
    with pytest.raises(ShardingError, match="expected include_initial=False"):
        np.cumulative_sum(x, axis=0, include_initial=True)
    with pytest.raises(ValueError):
        np.broadcast_to(x, (5, 3))
    with pytest.raises(ValueError, match="empty sequence"):
        np.argmax(dt.distribute_tensor(np.ones((0, 3)), mesh, [Shard(0)]), axis=0)


_A = np.random.default_rng(5).standard_normal((4, 5))
_I = np.random.default_rng(6).integers(0, 5, size=(4, 3))
VJP_CASES: dict[str, Callable[[Any], Any]] = {
    "cumsum": lambda a: np.cumsum(a, axis=1) + np.cumsum(a)[:1].sum(),
    "var/std": lambda a: np.var(a, axis=0) + np.std(a, axis=1, ddof=1).sum() + np.var(a, keepdims=True).sum(),
    "flip": lambda a: np.flip(a, 0) * np.arange(5),
    "broadcast_to": lambda a: np.broadcast_to(a[:1], (3, 4, 5)) * np.arange(5),
    "tile": lambda a: np.tile(a, (2, 1, 3)) * np.arange(15),
    "take": lambda a: np.take(a, [0, 2, 0], axis=1),
    "tril/triu": lambda a: np.tril(a, -1) * 2 + np.triu(a, 1) * 3,
    "sort": lambda a: np.sort(a, axis=0) * np.arange(5) + np.sort(a, axis=None)[:3].sum(),
    "take_along_axis": lambda a: np.take_along_axis(a, _I, axis=1) * np.arange(3),
}


@pytest.mark.filterwarnings("ignore:Degrees of freedom <= 0:RuntimeWarning")  # as NumPy warns for the same call
@pytest.mark.parametrize("name", sorted(VJP_CASES))
def test_vjp_rules_equal_central_differences_and_shard(name):
    """The new VJP rules against central differences, on NumPy arrays and on a row-sharded DTensor."""
    from test_autodiff import _central

    fn = VJP_CASES[name]
    weights = np.random.default_rng(7).standard_normal(np.shape(fn(_A)))
    want = _central(lambda a: float(np.sum(fn(a) * weights)), _A.copy())
    loss = lambda a: np.sum(fn(a) * weights)  # noqa: E731
    np.testing.assert_allclose(dt.grad(loss)(_A.copy()), want, rtol=1e-5, atol=1e-6)
    x = dt.distribute_tensor(_A, dt.DeviceMesh((2,)), [Shard(0)])
    np.testing.assert_allclose(dt.grad(loss)(x).full_tensor(), want, rtol=1e-5, atol=1e-6)


@WORLDS
def test_reshape_recuts_a_misaligned_sharded_run_without_a_gather(world):
    """Flattening a row-sharded matrix (and the reverse) whose chunks do not line up moves only the elements that
    change owner: one rechunk (counted as all_to_all), the result sharded, equal to NumPy on every rank."""
    report = Checks(world)
    n = world.size
    mesh = dt.DeviceMesh((n,), backend=world.kind)
    cases = [((23, 5), (115,)), ((115,), (23, 5)), ((7, 3, 2), (21, 2)), ((5, 4), (4, 5)), ((9,), (3, 3)),
             ((1, 6), (6,)), ((0, 3), (0,))]
    for ishape, oshape in cases:
        a = np.arange(int(np.prod(ishape)), dtype=float).reshape(ishape)
        x = dt.distribute_tensor(a, mesh, [Shard(0)])
        report.same(f"reshape {ishape} -> {oshape}", lambda: a.reshape(oshape), lambda: x.reshape(oshape), exact=True)
        out, c = counted(lambda: x.reshape(oshape))
        if ishape[0] > 1:
            report.expect(c.counts["all_gather"] == 0 and c.total <= 1, f"{ishape} -> {oshape}: {c.counts}")
            report.expect(out.placements == (Shard(0),), f"{ishape} -> {oshape}: {out.placements}")
    report.finish()


def test_arguments_bind_as_numpy_binds_them():
    """A name given by position and by keyword, or one positional argument too many, is NumPy's TypeError."""
    x = dt.distribute_tensor(np.ones((4, 3)), dt.DeviceMesh((2,)), [Shard(0)])
    for call in (lambda: np.flip(x, 0, axis=0), lambda: np.roll(x, 1, 0, shift=1), lambda: np.var(x, 0, axis=0),
                 lambda: np.repeat(x, 2, 0, 5)):
        with pytest.raises(TypeError, match="got multiple values for argument|positional arguments"):
            call()
    a = np.ones((4, 3))  # NumPy refuses the same calls on plain arrays
    for call in (lambda: np.flip(a, 0, axis=0), lambda: np.roll(a, 1, 0, shift=1), lambda: np.var(a, 0, axis=0),
                 lambda: np.repeat(a, 2, 0, 5)):
        with pytest.raises(TypeError):
            call()
