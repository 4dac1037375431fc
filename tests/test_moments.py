"""Issue 41 item 2: the moments ``mean``, ``var``, ``std``, ``average``, ``nanmean``, ``nanvar``, ``nanstd`` in one
local pass and one small collective (:mod:`dtensor_np.propagation.moments`).

Every case builds the same full array on every rank and compares the result with
NumPy on the full array (:class:`test_numpy_ops.Checks`: global shape, dtype,
``full_tensor()`` and every held shard), on uneven and empty shards, 1-D and 2-D
meshes and ``Partial`` input; results replicated over the reduced mesh dims must
be bitwise identical on every rank; the collectives are counted (one per call).
Tolerances come from the dtype's epsilon and the number of reduced items; the
stability test holds the DTensor result to NumPy's own error against an exact
reference, for data far from zero.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable

import numpy as np
import pytest

import dtensor_np as dt
from dtensor_np import Partial, Replicate, Shard
from strategies import check_identical
from test_numpy_ops import Checks

CALLS: dict[str, Callable[..., Any]] = {
    "var": lambda x, ax: np.var(x, axis=ax),
    "var ddof=1 keepdims": lambda x, ax: np.var(x, axis=ax, ddof=1, keepdims=True),
    "std ddof=2": lambda x, ax: np.std(x, axis=ax, ddof=2),
    "std dtype=f4": lambda x, ax: np.std(x, axis=ax, dtype=np.float32),
    "nanvar": lambda x, ax: np.nanvar(x, axis=ax),
    "nanvar ddof=1 keepdims": lambda x, ax: np.nanvar(x, axis=ax, ddof=1, keepdims=True),
    "nanstd correction=1": lambda x, ax: np.nanstd(x, axis=ax, correction=1),
    "nanmean": lambda x, ax: np.nanmean(x, axis=ax),
    "nanmean keepdims": lambda x, ax: np.nanmean(x, axis=ax, keepdims=True),
    "mean": lambda x, ax: np.mean(x, axis=ax),
    "average": lambda x, ax: np.average(x, axis=ax),
    "average weights returned": lambda x, ax: np.average(x, axis=ax, weights=np.abs(x) + 1.0, returned=True),
    "x.var() method": lambda x, ax: x.var(axis=ax, ddof=1),
    "x.std() method": lambda x, ax: x.std(axis=ax),
}
AXES = (None, 0, -1, (0, 1))


def data(shape: tuple[int, ...], kind: str) -> np.ndarray:
    """Values far from 0 with NaNs (a NaN row part and an all-NaN last column) for the float kinds."""
    rng = np.random.default_rng(math.prod(shape) + len(kind))
    noise = rng.standard_normal(shape)
    if kind == "i8":
        return rng.integers(-5, 6, size=shape)
    if kind == "c16":
        return 1e3 + noise + 1j * (rng.standard_normal(shape) - 7.0)
    a = (10.0 + noise).astype(np.float16) if kind.startswith("f2") else (1e3 + noise).astype(kind[:2])
    if kind.endswith("nan") and a.size:
        a[::2, 0] = np.nan
        a[:, -1] = np.nan
    return a


def tolerance(dtype: np.dtype, items: int) -> float:
    """A relative error bound: about ``items`` roundings of the result's dtype (float64 for integers)."""
    eps = np.finfo(np.result_type(dtype, np.float16)).eps
    return 16 * eps * max(items, 4)


def counted(call: Callable[[], Any]) -> tuple[Any, Any]:
    with dt.comm_counter() as c:
        out = call()
    return out, c


def layouts(world: Any) -> list[tuple[dt.DeviceMesh, list[Any]]]:
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    out = [(mesh, [Shard(0)]), (mesh, [Shard(1)]), (mesh, [Replicate()])]
    if world.size == 4:
        grid = dt.DeviceMesh((2, 2), backend=world.kind)
        out += [(grid, [Shard(0), Shard(1)]), (grid, [Shard(1), Shard(0)]), (grid, [Shard(0), Shard(0)])]
    return out


@pytest.mark.worlds(simulated=(1, 2, 3, 4), mpi=(2,))
def test_moments_match_numpy_on_every_layout(world):
    """Every call, axis and layout against NumPy: uneven and empty shards, NaNs, float32/complex/int input."""
    checks = Checks(world)
    cases = [((5, 3), "f8nan"), ((1, 3), "f8"), ((0, 3), "f8"), ((6, 4), "f4nan"), ((5, 2), "c16"), ((5, 3), "i8"),
             ((4, 3), "f2nan")]
    for mesh, placements in layouts(world):
        for shape, kind in cases:
            a = data(shape, kind)
            x = dt.distribute_tensor(a, mesh, placements)
            for name, call in CALLS.items():
                if kind in ("c16", "i8") and name.startswith("nan") and "keepdims" in name:
                    continue  # nan* of complex/int input: the same rules as the plain ones, checked once each
                for ax in AXES:
                    ctx = f"{name} axis={ax} {kind}{shape} {placements} on {mesh.shape}"
                    items = math.prod(shape) if ax is None else int(np.prod(np.take(shape, ax)))
                    with warnings.catch_warnings(), np.errstate(all="ignore"):
                        warnings.simplefilter("ignore")
                        rtol = tolerance(np.asarray(call(a, ax)).dtype if a.size else a.dtype, items)
                    # dtype=f4 of float64 data: NumPy's float32 mean is off by eps32 |x|, and so is its std of
                    # one value (ours carries the rounding in S1: nearer 0)
                    atol = rtol * float(np.nanmax(np.abs(a), initial=1.0)) if "dtype=f4" in name else rtol
                    out = checks.same(ctx, lambda: call(a, ax), lambda: call(x, ax), rtol=rtol, atol=atol)
                    for part in out if isinstance(out, tuple) else () if out is None else (out,):
                        check_identical(checks, world, ctx, part)
    checks.finish()


@pytest.mark.worlds(simulated=(1, 2, 3, 4), mpi=(2,))
def test_a_given_mean_as_numpy(world):
    """NumPy 2's ``mean=`` (the deviations from a mean the caller has; also another value than the mean): the
    keepdims mean as a DTensor and as a plain array, a row vector that broadcasts, ddof, NaNs, every layout;
    one all_reduce of counts and sums at most (and one more to settle a pending mean)."""
    checks = Checks(world)
    for mesh, placements in layouts(world):
        for shape, kind in (((5, 3), "f8nan"), ((6, 4), "f4"), ((0, 3), "f8"), ((5, 2), "c16")):
            a = data(shape, kind)
            x = dt.distribute_tensor(a, mesh, placements)
            for name, func in (("var", np.var), ("std", np.std), ("nanvar", np.nanvar), ("nanstd", np.nanstd)):
                for ax in (None, 0, -1, (0, 1)):
                    mean_func = np.nanmean if name.startswith("nan") else np.mean
                    with warnings.catch_warnings(), np.errstate(all="ignore"):
                        warnings.simplefilter("ignore")
                        m = mean_func(a, axis=ax, keepdims=True)
                    given = [("the mean", m, lambda: mean_func(x, axis=ax, keepdims=True)),
                             ("a plain array", m, lambda: m),
                             ("zeros", np.zeros_like(m), lambda: np.zeros_like(m))]
                    if ax == 0 and len(shape) == 2:
                        given.append(("a broadcast row", m[0], lambda: m[0]))
                    for label, numpy_mean, dtensor_mean in given:
                        for ddof in (0, 1):
                            ctx = f"{name}(axis={ax}, ddof={ddof}, mean={label}) {kind}{shape} {placements} on {mesh.shape}"
                            items = math.prod(shape) if ax is None else int(np.prod(np.take(shape, ax)))
                            rtol = tolerance(np.result_type(a.dtype, np.float16), items)
                            with warnings.catch_warnings(), np.errstate(all="ignore"):
                                warnings.simplefilter("ignore")
                                mean_x = dtensor_mean()
                                checks.same(ctx, lambda: func(a, axis=ax, ddof=ddof, mean=numpy_mean),
                                            lambda: func(x, axis=ax, ddof=ddof, mean=mean_x), rtol=rtol, atol=rtol)
                                mean_x = dtensor_mean()  # (a new pending mean: the call settles it)
                                _, c = counted(lambda: func(x, axis=ax, ddof=ddof, mean=mean_x))
                            pending = isinstance(mean_x, dt.DTensor) and any(isinstance(p, Partial)
                                                                             for p in mean_x.placements)
                            shards = [p.dim for p in placements if isinstance(p, Shard)]
                            twice = len(set(shards)) < len(shards)  # one dim on two mesh dims: gathered to one first
                            checks.expect(c.total <= 1 + pending + twice, f"{ctx}: {c.counts} collectives")
    checks.raises("a mean that does not broadcast", lambda: np.var(x, axis=0, mean=np.zeros((7, 1))), ValueError,
                  "expected mean= of a shape that broadcasts")
    checks.finish()


@pytest.mark.worlds(simulated=(2, 4), mpi=(2,))
def test_one_collective_per_call_never_the_data(world):
    """A sharded reduced dim: one ``all_gather`` of 4 float64 numbers per rank and result element (``nanmean``: one
    ``all_reduce`` of 2); an unsharded one: nothing moves."""
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    a = data((9, 3), "f8nan")
    rows = dt.distribute_tensor(a, mesh, [Shard(0)])
    cols = dt.distribute_tensor(a.T.copy(), mesh, [Shard(1)])
    checks = Checks(world)
    for name, call in (("var", np.var), ("std", np.std), ("nanvar", np.nanvar), ("nanstd", np.nanstd)):
        _, c = counted(lambda: call(rows, axis=0))
        checks.expect(c.total == 1 and c.counts["all_gather"] == 1 and c.bytes["all_gather"] == 4 * 3 * 8,
                      f"{name} axis=0: {c.counts} {c.bytes}")
        _, c = counted(lambda: call(rows))
        checks.expect(c.total == 1 and c.bytes["all_gather"] == 4 * 8, f"{name} all: {c.counts} {c.bytes}")
        _, c = counted(lambda: call(cols, axis=0))
        checks.expect(c.total == 0, f"{name} along an unsharded axis: {c.counts}")
    # weights sharded as the data: the weighted sum and the weights' sum in one all_reduce (and NumPy's check
    # for weights summing to 0, an uncounted flag)
    out, c = counted(lambda: np.average(rows, axis=0, weights=np.abs(rows) + 1.0, returned=True))
    checks.expect(c.total == 1 and c.counts["all_reduce"] == 1 and c.bytes["all_reduce"] == 2 * 3 * 8,
                  f"average with weights: {c.counts} {c.bytes}")
    checks.result("average with weights", out[0], np.average(a, axis=0, weights=np.abs(a) + 1.0))
    out, c = counted(lambda: np.mean(rows, axis=0).full_tensor())  # a pending sum over the global count
    checks.expect(c.total == 1 and c.bytes["all_reduce"] == 3 * 8, f"mean: {c.counts} {c.bytes}")
    _, c = counted(lambda: np.nanmean(rows, axis=0))
    checks.expect(c.total == 1 and c.counts["all_reduce"] == 1 and c.bytes["all_reduce"] == 2 * 3 * 8, f"nanmean {c}")
    # a pending input is summed first (its own all_reduce), then reduced where it lies
    pending = np.sum(dt.distribute_tensor(np.stack([a, a]) / 2, mesh, [Shard(0)]), axis=0)
    out, c = counted(lambda: np.nanvar(pending, axis=1))
    checks.expect(c.counts["all_reduce"] == 1 and c.total == 1, f"nanvar of a pending value: {c.counts}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        checks.result("nanvar of a pending value", out, np.nanvar(a, axis=1))
    checks.finish()


@pytest.mark.worlds(simulated=(1, 2, 3, 4), mpi=(2,))
def test_as_stable_as_numpy_far_from_zero(world):
    """``offset + noise`` (spread ``s``): the DTensor's error against the exact value (Python's fractions of the
    same numbers) is at most NumPy's own two-pass error plus ``8 log2(n)`` roundings and the second-order term
    ``(16 eps offset / s)^2`` of a mean off by a few roundings.  Raw power sums would be off by about
    ``eps (offset / s)^2``: 200 times the value for float64 at 1e9 and ``s = 1``."""
    from fractions import Fraction
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    checks = Checks(world)
    for dtype, offset, n in ((d, o, n) for d in ("f4", "f8") for o, n in ((1e9, 37), (1e9, 5), (-3e7, 64), (1e4, 1000))):
        eps = float(np.finfo(dtype).eps)
        spread = 1.0 if dtype == "f8" else abs(offset) * 1e-3
        a = (offset + np.random.default_rng(n).standard_normal((n, 2)) * spread).astype(dtype)
        a[::3, 1] = np.nan
        x = dt.distribute_tensor(a, mesh, [Shard(0)])
        for name, func in (("var", np.var), ("nanvar", np.nanvar), ("std", np.std), ("nanstd", np.nanstd)):
            for col in range(1 if name in ("var", "std") else 2):
                values = [Fraction(float(v)) for v in a[:, col] if not np.isnan(v)]
                mean = sum(values) / len(values)
                exact = float(sum((v - mean) ** 2 for v in values) / len(values))
                exact = math.sqrt(exact) if name.endswith("std") else exact
                ours = float(func(x, axis=0).full_tensor()[col])
                theirs = float(func(a, axis=0)[col])
                bound = abs(theirs - exact) + (8 * eps * math.log2(n) + (16 * eps * abs(offset) / spread) ** 2) * exact
                checks.expect(abs(ours - exact) <= bound,
                              f"{name} {dtype} offset {offset} n {n} col {col}: {ours!r}, exact {exact!r}, NumPy {theirs!r}")
    checks.finish()


@pytest.mark.worlds(simulated=(2, 4), mpi=(2,))
def test_warnings_and_nan_as_numpy(world):
    """An all-NaN column (on the rank that holds it, as every other rank): NumPy's warning on every rank and NaN;
    ddof past the count: NumPy's warning and value."""
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    a = np.arange(24.0).reshape(6, 4)
    a[:, 1] = np.nan
    a[1:, 2] = np.nan
    for placements in ([Shard(0)], [Shard(1)]):
        x = dt.distribute_tensor(a, mesh, placements)
        for func, ddof, message in ((np.nanvar, 0, "Degrees of freedom <= 0 for slice."),
                                    (np.nanstd, 1, "Degrees of freedom <= 0 for slice."),
                                    (np.nanmean, None, "Mean of empty slice")):
            options = {} if ddof is None else {"ddof": ddof}
            with pytest.warns(RuntimeWarning, match=message):
                got = func(x, axis=0, **options).full_tensor()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                np.testing.assert_allclose(got, func(a, axis=0, **options), rtol=1e-13, equal_nan=True)
        with pytest.warns(RuntimeWarning, match="Degrees of freedom <= 0 for slice"):
            got = np.var(dt.distribute_tensor(a[:2, :1], mesh, placements), axis=0, ddof=3).full_tensor()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            np.testing.assert_array_equal(got, np.var(a[:2, :1], axis=0, ddof=3))


def test_out_and_array_api_route_to_the_same_rules():
    """``out=`` rebinds; the Array API namespace's ``var``/``std``/``mean`` are the same calls."""
    mesh = dt.DeviceMesh((2,))
    a = data((5, 3), "f8")
    x = dt.distribute_tensor(a, mesh, [Shard(0)])
    out = dt.distribute_tensor(np.zeros(3), mesh, [Replicate()])
    assert np.var(x, axis=0, out=out) is out
    np.testing.assert_allclose(out.full_tensor(), np.var(a, axis=0), rtol=1e-12)
    xp = x.__array_namespace__()
    with dt.comm_counter() as c:
        v = xp.var(x, axis=0, correction=1)
    np.testing.assert_allclose(v.full_tensor(), np.var(a, axis=0, ddof=1), rtol=1e-12)
    assert c.counts["all_gather"] == 1 and c.total == 1, c
    np.testing.assert_allclose(xp.std(x).full_tensor(), np.std(a), rtol=1e-12)


@pytest.mark.gpu
def test_moments_on_cupy_shards(cupy):
    """CuPy shards: the moments run on the device (the block's own module) and match NumPy."""
    mesh = dt.DeviceMesh((2,))
    a = data((7, 3), "f8nan")
    x = dt.distribute_tensor(cupy.asarray(a), mesh, [Shard(0)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for func in (np.var, np.std, np.nanvar, np.nanstd, np.nanmean):
            for ax in (None, 0, 1):
                got = func(x, axis=ax)
                assert all(type(s).__module__.startswith("cupy") for s in got.local_shards().values()), func
                np.testing.assert_allclose(cupy.asnumpy(got.full_tensor()), func(a, axis=ax), rtol=1e-12,
                                           equal_nan=True)


def test_nan_moments_differentiate():
    """``dt.grad`` through ``nanmean``/``nanvar``/``nanstd`` (rules now, composites before): central differences
    where ``a`` is a number, 0 at its NaNs; on NumPy arrays and on a row-sharded DTensor."""
    from test_autodiff import _central

    a = np.random.default_rng(5).standard_normal((4, 5))
    a[1, 2] = a[3, 0] = np.nan
    weights = np.random.default_rng(7).standard_normal(5)

    def loss(v: Any) -> Any:
        return (np.sum(np.nanmean(v, axis=0) * weights) + np.sum(np.nanvar(v, axis=1, ddof=1))
                + np.sum(np.nanstd(v, axis=0, keepdims=True) * weights))

    want = np.where(np.isnan(a), 0.0, np.nan_to_num(_central(lambda v: float(loss(v)), a.copy())))
    np.testing.assert_allclose(dt.grad(loss)(a.copy()), want, rtol=1e-5, atol=1e-6)
    x = dt.distribute_tensor(a, dt.DeviceMesh((2,)), [Shard(0)])
    np.testing.assert_allclose(dt.grad(loss)(x).full_tensor(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["f4", "f8"])
def test_large_blocks_sum_as_exactly_as_numpy(dtype):
    """A 2048 x 512 block per rank: the local sums (einsum along a dim, pairwise over the rest) are within a few
    roundings of NumPy's pairwise ones against a long-double reference: a float32 sum in order over the whole
    block was 1000 times further off than NumPy's."""
    a = (5 + np.random.default_rng(1).standard_normal((4096, 512))).astype(dtype)
    x = dt.distribute_tensor(a, dt.DeviceMesh((2,)), [Shard(0)])
    eps = float(np.finfo(dtype).eps)
    for ax in (None, 0, 1):
        exact = np.var(a.astype(np.longdouble), axis=ax)
        ours = np.abs(np.var(x, axis=ax).full_tensor() - exact) / exact
        theirs = np.abs(np.var(a, axis=ax) - exact) / exact
        assert np.max(ours) <= 4 * np.max(theirs) + 16 * eps, (dtype, ax, np.max(ours), np.max(theirs))
