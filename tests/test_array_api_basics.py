"""The Array API namespace (``dt.array_api.namespace``): every name of the standard, and its semantics.

Each test with the ``world`` fixture runs on simulated worlds of 1, 2, 3, 4
and 8 ranks and under ``mpiexec -n 2`` and ``-n 4``, on a 1-D mesh and, for
even worlds, a 2-D one, with every default placement policy; shapes are
uneven (5 rows over 4 ranks: 2, 2, 1, 0), so shards are often empty.
Results are checked against NumPy on the full arrays and on every held local
shard (``Checks`` from ``test_numpy_ops``), and the collectives of creation
are counted (none).  Functions whose sharding rule is being written
elsewhere (sorting, scans, ``unique_*``, ``numpy.linalg``...) run under
``dt.replicate_fallback()`` here, which checks this namespace's part of them
(``descending=``, ``include_initial=``, the named tuples) against NumPy.

The Array API's own test suite runs separately (see README, "Array API").
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

import dtensor_np as dt
from strategies import sorted_unique
from dtensor_np import Partial, Replicate, Shard, Sharding, ShardingError
from dtensor_np.array_api import elementwise
from test_numpy_ops import Checks, mesh_shapes

R = Replicate()

# The names of the 2024.12 standard (array-api's src/array_api_stubs/_2024_12, each module's __all__).
MAIN = """
arange asarray empty empty_like eye from_dlpack full full_like linspace meshgrid ones ones_like tril triu zeros
zeros_like astype can_cast finfo iinfo isdtype result_type abs acos acosh add asin asinh atan atan2 atanh bitwise_and
bitwise_left_shift bitwise_invert bitwise_or bitwise_right_shift bitwise_xor ceil clip conj copysign cos cosh divide
equal exp expm1 floor floor_divide greater greater_equal hypot imag isfinite isinf isnan less less_equal log log1p
log2 log10 logaddexp logical_and logical_not logical_or logical_xor maximum minimum multiply negative nextafter
not_equal positive pow real reciprocal remainder round sign signbit sin sinh square sqrt subtract tan tanh trunc take
take_along_axis matmul matrix_transpose tensordot vecdot broadcast_arrays broadcast_to concat expand_dims flip moveaxis
permute_dims repeat reshape roll squeeze stack tile unstack argmax argmin count_nonzero nonzero searchsorted where
unique_all unique_counts unique_inverse unique_values argsort sort cumulative_sum cumulative_prod max mean min prod
std sum var all any diff __array_namespace_info__
""".split()
LINALG = """
cholesky cross det diagonal eigh eigvalsh inv matmul matrix_norm matrix_power matrix_rank matrix_transpose outer pinv
qr slogdet solve svd svdvals tensordot trace vecdot vector_norm
""".split()
FFT = "fft ifft fftn ifftn rfft irfft rfftn irfftn hfft ihfft fftfreq rfftfreq fftshift ifftshift".split()
DTYPES = "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float32 float64 complex64 complex128".split()
ARRAY = """
__abs__ __add__ __and__ __array_namespace__ __bool__ __complex__ __dlpack__ __dlpack_device__ __eq__ __float__
__floordiv__ __ge__ __gt__ __index__ __int__ __invert__ __le__ __lshift__ __lt__ __matmul__ __mod__ __mul__ __ne__
__neg__ __or__ __pos__ __pow__ __rshift__ __sub__ __truediv__ __xor__ to_device dtype device mT ndim shape size T
""".split()


@functools.lru_cache
def shard_middle(mesh_ndim: int):
    """A policy given as a function: the middle dim split on the first mesh dim (0-d arrays replicated)."""

    def policy(shape: tuple[int, ...]) -> list:
        return [Shard(len(shape) // 2) if shape else R] + [R] * (mesh_ndim - 1)

    return policy


def expected_placements(policy, shape: tuple[int, ...], mesh: dt.DeviceMesh) -> tuple:
    if callable(policy):
        return tuple(policy(shape))
    if policy == "replicate" or not shape:
        return (R,) * mesh.ndim
    return (Shard(0 if policy == "shard_first" else len(shape) - 1),) * mesh.ndim


def split_twice(x: dt.DTensor) -> bool:
    """Whether a tensor dim of ``x`` is split over several mesh dims (``shard_first`` on a 2-D mesh).

    The element-wise rules keep one split per tensor dim and gather the inner
    ones first (``propagation.common.single_sharding``), so such arrays move.
    """
    return any(len(mesh_dims) > 1 for _, mesh_dims in x.spec.shard_order)


def namespaces(world):
    for shape in mesh_shapes(world.size):
        mesh = dt.DeviceMesh(shape, backend=world.kind)
        for policy in ("shard_first", "shard_last", "replicate", shard_middle(mesh.ndim)):
            yield mesh, policy, dt.array_api.namespace(mesh, policy)


def test_namespace_has_every_name_of_the_standard():
    mesh = dt.DeviceMesh((2,))
    xp = dt.array_api.namespace(mesh)
    assert xp.__array_api_version__ == "2024.12" and xp.__name__ == "dtensor_np.array_api"
    assert xp is dt.array_api.namespace(mesh, "shard_first") and xp is not dt.array_api.namespace(mesh, "replicate")
    assert [n for n in MAIN if not callable(getattr(xp, n, None))] == []
    assert [n for n in LINALG if not callable(getattr(xp.linalg, n, None))] == []
    assert [n for n in FFT if not callable(getattr(xp.fft, n, None))] == []
    for name in DTYPES:
        assert getattr(xp, name) == np.dtype(name) and isinstance(getattr(xp, name), np.dtype)
    assert (xp.e, xp.pi, xp.newaxis) == (math.e, math.pi, None) and math.isnan(xp.nan) and xp.inf == math.inf
    x = xp.ones((3, 2))
    assert [n for n in ARRAY if not hasattr(x, n)] == []
    # the shared functions of the main namespace and linalg, and the standard's names on the wrappers
    assert xp.linalg.matmul.__name__ == "matmul" and xp.pow.__name__ == "pow" and xp.sum.__name__ == "sum"
    info = xp.__array_namespace_info__()
    assert info.devices() == [mesh] and info.default_device() is mesh
    assert info.capabilities()["boolean indexing"] is True and info.capabilities()["max dimensions"] >= 32
    assert info.default_dtypes(device=mesh) == {"real floating": np.dtype("float64"), "complex floating":
                                                np.dtype("complex128"), "integral": np.dtype("int64"),
                                                "indexing": np.dtype("int64")}
    assert sorted(info.dtypes()) == sorted(DTYPES) and sorted(info.dtypes(kind=("bool", "real floating"))) == [
        "bool", "float32", "float64"]
    with pytest.raises(ShardingError, match="not this namespace's mesh"):
        info.dtypes(device=dt.DeviceMesh((3,)))
    # an array made without the namespace answers the default one of its mesh
    y = dt.distribute_tensor(np.ones(3), mesh, [R])
    assert y.__array_namespace__() is xp and y.__array_namespace__(api_version="2023.12") is xp
    with pytest.raises(ValueError, match="2024.12"):
        y.__array_namespace__(api_version="2019.01")
    with pytest.raises(ShardingError, match="default must be one of"):
        dt.array_api.namespace(mesh, "shard_middle")


def test_creation_functions_place_by_policy_without_communication(world):
    checks = Checks(world)
    for mesh, policy, xp in namespaces(world):
        tag = f"mesh {mesh.shape} policy {policy}"
        template = xp.asarray(np.arange(15.0).reshape(5, 3))
        with dt.comm_counter() as c:  # every rank makes its own block
            made = [
                ("zeros", xp.zeros((5, 3)), np.zeros((5, 3))),
                ("ones int8", xp.ones(5, dtype=xp.int8), np.ones(5, np.int8)),
                ("full int", xp.full((5, 2), 7), np.full((5, 2), 7)),
                ("full float32", xp.full((3,), 2.5, dtype=xp.float32), np.full(3, 2.5, np.float32)),
                ("full bool", xp.full((2, 5), True), np.full((2, 5), True)),
                ("eye", xp.eye(5, 4, k=1), np.eye(5, 4, k=1)),
                ("eye k=-2 int", xp.eye(5, k=-2, dtype=xp.int32), np.eye(5, k=-2, dtype=np.int32)),
                ("zeros 0-d", xp.zeros(()), np.zeros(())),
                ("zeros_like", xp.zeros_like(template), np.zeros((5, 3))),
                ("ones_like int8", xp.ones_like(template, dtype=xp.int8), np.ones((5, 3), np.int8)),
                ("full_like", xp.full_like(template, 3), np.full((5, 3), 3.0)),
            ]
            empty = xp.empty((5, 3), dtype=xp.complex64)
            empty_like = xp.empty_like(template)
        checks.expect(c.total == 0, f"{tag}: creation issued collectives {c.counts}")
        placed = [
            ("arange", xp.arange(1, 11, 3), np.arange(1, 11, 3)),
            ("arange float", xp.arange(5.0), np.arange(5.0)),
            ("linspace", xp.linspace(0, 1, 7), np.linspace(0, 1, 7)),
            ("linspace open float32", xp.linspace(0, 1, 5, endpoint=False, dtype=xp.float32),
             np.linspace(0, 1, 5, endpoint=False, dtype=np.float32)),
            ("asarray nested", xp.asarray([[1, 2], [3, 4], [5, 6]]), np.array([[1, 2], [3, 4], [5, 6]])),
            ("asarray dtype", xp.asarray(np.arange(5), dtype=xp.float32), np.arange(5, dtype=np.float32)),
            ("asarray scalar", xp.asarray(2.5), np.asarray(2.5)),
            ("from_dlpack", xp.from_dlpack(np.arange(6.0)), np.arange(6.0)),
            ("fftfreq", xp.fft.fftfreq(7, d=0.5), np.fft.fftfreq(7, d=0.5)),
            ("rfftfreq float32", xp.fft.rfftfreq(8, dtype=xp.float32), np.fft.rfftfreq(8).astype(np.float32)),
        ]
        for name, out, expected in made + placed:
            checks.expect(out.__array_namespace__() is xp, f"{tag} {name}: another namespace")
            want = expected_placements(policy, expected.shape, mesh)
            if "_like" in name:
                want = template.placements
            checks.expect(out.placements == want, f"{tag} {name}: placements {out.placements}, expected {want}")
            checks.result(f"{tag} {name}", out, expected)
        for name, out in (("empty", empty), ("empty_like", empty_like)):
            checks.expect(out.shape == (5, 3) and out.placements == expected_placements(policy, (5, 3), mesh)
                          and out.__array_namespace__() is xp, f"{tag} {name}: {out!r}")
        checks.expect(empty.dtype == np.complex64 and empty_like.dtype == np.float64, f"{tag}: empty dtypes")
        # device=: a Sharding places explicitly, the mesh (x.device) by the policy; *_like keeps x's placements
        explicit = [Shard(1)] + [R] * (mesh.ndim - 1)
        z = xp.zeros((8, 4), device=Sharding(mesh, explicit))
        checks.expect(z.placements == tuple(explicit), f"{tag}: device=Sharding gave {z.placements}")
        z = xp.zeros(5, device=z.device)
        checks.expect(z.placements == expected_placements(policy, (5,), mesh), f"{tag}: device=mesh {z.placements}")
        like = xp.ones_like(xp.zeros((8, 4), device=Sharding(mesh, explicit)))
        checks.expect(like.placements == tuple(explicit), f"{tag}: ones_like placements {like.placements}")
        like = xp.zeros_like(like, device=mesh)
        checks.expect(like.placements == expected_placements(policy, (8, 4), mesh), f"{tag}: *_like(device=mesh)")
        pending = dt.distribute_tensor(np.ones(4), mesh, [Partial()] * mesh.ndim)
        checks.result(f"{tag} full_like of a Partial", xp.full_like(pending, 2.0), np.full(4, 2.0))
        checks.result(f"{tag} eye on Partial", xp.eye(3, device=Sharding(mesh, [Partial()] * mesh.ndim)), np.eye(3))
        other = dt.DeviceMesh((1,) * 2, backend=world.kind) if world.size == 1 else dt.DeviceMesh((1, world.size),
                                                                                                 backend=world.kind)
        checks.raises(f"{tag}: a Sharding of another mesh", lambda: xp.zeros(3, device=Sharding(other, [R, R])),
                      ShardingError, "another mesh")
        checks.raises(f"{tag}: a string device", lambda: xp.zeros(3, device="cpu"), TypeError, "DeviceMesh")
        checks.raises(f"{tag}: negative shape", lambda: xp.ones((2, -1)), ValueError, "negative")
    checks.finish()


def test_asarray_copy_astype_and_dtype_functions(world):
    checks = Checks(world)
    for mesh, policy, xp in namespaces(world):
        tag = f"mesh {mesh.shape} policy {policy}"
        x = xp.asarray(np.arange(10).reshape(5, 2))
        # a DTensor of this namespace: itself unless a copy is asked for (a new handle on the same shards)
        checks.expect(xp.asarray(x) is x and xp.asarray(x, copy=False) is x, f"{tag}: asarray(x) is not x")
        y = xp.asarray(x, copy=True)
        checks.expect(y is not x and y.shards == x.shards and y.spec is x.spec, f"{tag}: asarray(copy=True)")
        # conversions are copies: refused by copy=False
        checks.raises(f"{tag}: host data with copy=False", lambda: xp.asarray([1, 2], copy=False), ValueError,
                      "copy=False")
        checks.raises(f"{tag}: a cast with copy=False", lambda: xp.asarray(x, dtype=xp.float32, copy=False),
                      ValueError, "copy=False")
        checks.result(f"{tag} asarray(x, dtype)", xp.asarray(x, dtype=xp.float32),
                      np.arange(10, dtype=np.float32).reshape(5, 2))
        moved = xp.asarray(x, device=Sharding(mesh, [R] * mesh.ndim))
        checks.expect(moved.placements == (R,) * mesh.ndim, f"{tag}: asarray(device=Sharding) {moved.placements}")
        checks.result(f"{tag} asarray moved", moved, np.arange(10).reshape(5, 2))
        # an array made outside a namespace: a new handle of this one
        plain = dt.distribute_tensor(np.arange(4.0), mesh, [R] * mesh.ndim)
        adopted = xp.asarray(plain)
        checks.expect(adopted is not plain and adopted.__array_namespace__() is xp, f"{tag}: asarray(plain)")
        checks.expect(xp.from_dlpack(x) is x, f"{tag}: from_dlpack(DTensor) is not asarray")
        # astype: a cast (each rank casts its shard), copy= and device=
        with dt.comm_counter() as c:
            cast = xp.astype(x, xp.float32)
        checks.expect(c.total == 0 or split_twice(x), f"{tag}: astype communicated {c.counts}")
        checks.result(f"{tag} astype", cast, np.arange(10, dtype=np.float32).reshape(5, 2))
        checks.expect(xp.astype(x, x.dtype, copy=False) is x, f"{tag}: astype(copy=False) copied")
        same = xp.astype(x, x.dtype)
        checks.expect(same is not x and same.spec is x.spec, f"{tag}: astype(copy=True)")
        there = xp.astype(x, xp.int8, device=Sharding(mesh, [R] * mesh.ndim))
        checks.expect(there.placements == (R,) * mesh.ndim and there.dtype == np.int8, f"{tag}: astype(device=)")
        # dtype functions take DTensors for their dtypes
        checks.expect(xp.result_type(x, xp.float32) == np.float64, f"{tag}: result_type {xp.result_type(x, xp.float32)}")
        checks.expect(xp.result_type(xp.astype(x, xp.int8), 1) == np.int8, f"{tag}: result_type with a Python int")
        checks.expect(xp.can_cast(x, xp.float64) and not xp.can_cast(x, xp.int8), f"{tag}: can_cast")
        checks.expect(xp.iinfo(x).max == np.iinfo(np.int64).max and xp.iinfo(xp.uint8).bits == 8, f"{tag}: iinfo")
        checks.raises(f"{tag}: isdtype of a DTensor", lambda: xp.isdtype(x, "integral"), TypeError, "")
    for dtype in ("float32", "float64", "complex64", "complex128"):
        info = xp.finfo(np.dtype(dtype))
        real = np.finfo(dtype)
        assert (info.bits, info.eps, info.max, info.min, info.smallest_normal) == (
            real.bits, float(real.eps), float(real.max), float(real.min), float(real.smallest_normal))
        assert all(type(v) is float for v in (info.eps, info.max, info.min, info.smallest_normal))
        assert info.dtype == np.dtype(dtype.replace("complex64", "float32").replace("complex128", "float64"))
    assert xp.isdtype(xp.int8, ("integral", "real floating")) and not xp.isdtype(xp.bool, "numeric")
    checks.finish()


def _inputs(rng: np.random.Generator, name: str) -> tuple[np.ndarray, ...]:
    """Full NumPy arguments for an element-wise function of the standard (values in its domain)."""
    shape = (5, 3)
    if name.startswith("bitwise") or name in ("floor_divide", "remainder"):
        a, b = rng.integers(-20, 20, shape), rng.integers(1, 5, shape)
        return (a,) if name == "bitwise_invert" else (a, b)
    if name.startswith("logical"):
        a, b = rng.integers(0, 2, shape).astype(bool), rng.integers(0, 2, shape).astype(bool)
        return (a,) if name == "logical_not" else (a, b)
    if name in ("real", "imag", "conj"):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape),)
    if name in ("acosh",):
        return (1 + np.abs(rng.standard_normal(shape)),)
    if name in ("acos", "asin", "atanh"):
        return (rng.uniform(-0.9, 0.9, shape),)
    if name in ("log", "log1p", "log2", "log10", "sqrt", "pow"):
        a = np.abs(rng.standard_normal(shape)) + 0.1
        return (a, rng.standard_normal(shape)) if name == "pow" else (a,)
    a, b = rng.standard_normal(shape) * 3, rng.standard_normal(shape)
    a[0, 0], b[1, 1] = np.nan, -0.0
    binary = ("add atan2 copysign divide equal greater greater_equal hypot less less_equal logaddexp maximum minimum "
              "multiply nextafter not_equal subtract").split()
    return (a, b) if name in binary else (a,)


def test_every_elementwise_function_equals_numpy(world):
    checks = Checks(world)
    rng = np.random.default_rng(5)
    for mesh, policy, xp in namespaces(world):
        for name in elementwise.NAMES:
            args = _inputs(rng, name)
            tag = f"{name} mesh {mesh.shape} policy {policy}"
            out = checks.same(tag, lambda: getattr(np, name)(*args),
                              lambda: getattr(xp, name)(*(xp.asarray(a) for a in args)), exact=True)
            checks.expect(out is None or out.__array_namespace__() is xp, f"{tag}: result of another namespace")
        # the rules added for real/imag/round keep shards in place
        z = xp.asarray(rng.standard_normal((5, 3)) + 2j)
        with dt.comm_counter() as c:
            parts = (xp.real(z), xp.imag(z), xp.round(xp.real(z)))
        checks.expect(split_twice(z) or (c.total == 0 and all(p.placements == z.placements for p in parts)),
                      f"real/imag/round {c.counts}")
        # Python scalars on either side, and clip in x's dtype with the standard's min=/max=
        xi = xp.asarray(np.arange(-4, 6, dtype=np.int8))
        checks.result(f"{mesh.shape} 2 - x", xp.subtract(2, xi), np.subtract(2, np.arange(-4, 6, dtype=np.int8)))
        lo = xp.asarray(np.full(10, -2, dtype=np.int16))
        checks.result(f"{mesh.shape} clip", xp.clip(xi, min=lo, max=3),
                      np.clip(np.arange(-4, 6, dtype=np.int8), -2, 3))
        checks.expect(xp.clip(xi) is xi, "clip without bounds")
    checks.finish()


def test_statistics_searching_manipulation_and_linear_algebra(world):
    checks = Checks(world)
    rng = np.random.default_rng(7)
    for mesh, policy, xp in namespaces(world):
        tag = f"mesh {mesh.shape} policy {policy}"
        a = rng.integers(-3, 4, (5, 4)).astype(np.int8)
        f = rng.standard_normal((5, 4)).astype(np.float32)
        x, y = xp.asarray(a), xp.asarray(f)
        checks.result(f"{tag} sum int8 -> int64", xp.sum(x, axis=0), np.sum(a, axis=0))
        checks.result(f"{tag} sum float32", xp.sum(y, axis=1, keepdims=True), np.sum(f, axis=1, keepdims=True),
                      rtol=1e-5)
        checks.result(f"{tag} prod uint8 -> uint64", xp.prod(xp.asarray(a.astype(np.uint8)), axis=1),
                      np.prod(a.astype(np.uint8), axis=1))
        checks.result(f"{tag} mean/max/min", xp.stack([xp.mean(y), xp.max(y), xp.min(y)]),
                      np.stack([np.mean(f), np.max(f), np.min(f)]), rtol=1e-5)
        with dt.comm_counter() as c:  # counts per rank; a sharded reduced dim leaves a pending sum
            nz = xp.count_nonzero(x, axis=0)
        checks.expect(c.total == 0 or split_twice(x), f"{tag}: count_nonzero {c.counts}")
        checks.result(f"{tag} count_nonzero", nz, np.count_nonzero(a, axis=0).astype(np.int64))
        checks.result(f"{tag} count_nonzero all", xp.count_nonzero(x, keepdims=True),
                      np.count_nonzero(a, keepdims=True, axis=(0, 1)).astype(np.int64))
        checks.result(f"{tag} concat axis=None", xp.concat([x, xp.asarray(a[:2])], axis=None),
                      np.concat([a, a[:2]], axis=None))
        checks.result(f"{tag} concat axis=1", xp.concat([x, x], axis=1), np.concat([a, a], axis=1))
        checks.result(f"{tag} expand_dims", xp.expand_dims(x, axis=0), np.expand_dims(a, 0))
        checks.result(f"{tag} reshape copy", xp.reshape(x, (4, 5), copy=False), a.reshape(4, 5))
        checks.result(f"{tag} permute_dims", xp.permute_dims(x, (1, 0)), a.T)
        checks.result(f"{tag} matrix_transpose", xp.matrix_transpose(y), f.T)
        checks.result(f"{tag} matmul", xp.matmul(y, xp.matrix_transpose(y)), f @ f.T, rtol=1e-5, atol=1e-5)
        checks.result(f"{tag} tensordot", xp.tensordot(y, y, axes=2), np.tensordot(f, f, axes=2), rtol=1e-5)
        checks.result(f"{tag} linalg.outer", xp.linalg.outer(xp.sum(y, axis=0), xp.ones(3)),
                      np.outer(f.sum(0), np.ones(3)), rtol=1e-5)
        checks.result(f"{tag} where with scalars", xp.where(x > 0, x, 0), np.where(a > 0, a, 0))
        checks.raises(f"{tag} matrix_transpose of 1-d", lambda: xp.matrix_transpose(xp.ones(3)), ValueError, "2 dims")
        checks.raises(f"{tag} cumulative_sum 2-d without axis", lambda: xp.cumulative_sum(x), ValueError,
                      "axis must be given")
    checks.finish()


def test_sorting_scans_unique_linalg_and_fft_follow_the_standard(world):
    """This namespace's part of sort/argsort, scans, unique_*, linalg and fft, through their sharding rules."""
    checks = Checks(world)
    rng = np.random.default_rng(9)
    for mesh, policy, xp in namespaces(world):
        tag = f"mesh {mesh.shape} policy {policy}"
        a = rng.integers(0, 4, (5, 6))  # many equal values: stability shows
        x = xp.asarray(a)
        for axis in (0, 1, -1):
            checks.result(f"{tag} sort axis {axis}", xp.sort(x, axis=axis), np.sort(a, axis=axis))
            checks.result(f"{tag} sort descending axis {axis}", xp.sort(x, axis=axis, descending=True),
                          -np.sort(-a, axis=axis))
            checks.result(f"{tag} argsort axis {axis}", xp.argsort(x, axis=axis),
                          np.argsort(a, axis=axis, stable=True))
            checks.result(f"{tag} argsort descending axis {axis}", xp.argsort(x, axis=axis, descending=True),
                          np.argsort(-a, axis=axis, stable=True))
            checks.result(f"{tag} cumulative_sum axis {axis}", xp.cumulative_sum(x, axis=axis,
                                                                               include_initial=True),
                          np.cumulative_sum(a, axis=axis, include_initial=True))
            checks.result(f"{tag} cumulative_prod axis {axis}",
                          xp.cumulative_prod(x, axis=axis, dtype=xp.float64),
                          np.cumulative_prod(a, axis=axis, dtype=np.float64))
        v = xp.asarray(a[0].astype(float))
        checks.result(f"{tag} cumulative_sum 1-d", xp.cumulative_sum(v, include_initial=True),
                      np.cumulative_sum(a[0].astype(float), include_initial=True))
        for name in ("unique_all", "unique_counts", "unique_inverse"):  # sorted, as array-api-compat and -strict
            got, want = getattr(xp, name)(x), sorted_unique(name, a)
            checks.expect(type(got).__name__ == type(want).__name__ and got._fields == want._fields,
                          f"{tag} {name}: {type(got).__name__}{got._fields}")
            for field in want._fields:
                checks.result(f"{tag} {name}.{field}", getattr(got, field), getattr(want, field))
        checks.result(f"{tag} unique_values", xp.unique_values(x), sorted_unique("unique_values", a))
        s = rng.standard_normal((4, 4))
        spd = s @ s.T + 4 * np.eye(4)
        m = xp.asarray(spd)
        for name, args in (("eigh", ()), ("qr", ()), ("slogdet", ()), ("svd", ())):
            got, want = getattr(xp.linalg, name)(m), getattr(np.linalg, name)(spd)
            checks.expect(got._fields == want._fields, f"{tag} linalg.{name} fields {got._fields}")
            checks.expect(all(p.__array_namespace__() is xp for p in got), f"{tag} linalg.{name} namespace")
        checks.result(f"{tag} linalg.svd values", xp.linalg.svd(m).S, np.linalg.svd(spd).S)
        checks.result(f"{tag} linalg.vector_norm", xp.linalg.vector_norm(m, axis=1), np.linalg.vector_norm(spd,
                                                                                                        axis=1))
        checks.result(f"{tag} std correction", xp.std(m, axis=0, correction=1), np.std(spd, axis=0, ddof=1))
        checks.result(f"{tag} searchsorted right", xp.searchsorted(xp.asarray(np.arange(6.0)), xp.asarray(
            [0.5, 2.0, 7.0]), side="right"), np.searchsorted(np.arange(6.0), [0.5, 2.0, 7.0], side="right"))
        grid = xp.meshgrid(xp.arange(3), xp.arange(4), indexing="ij")
        checks.expect(isinstance(grid, list) and len(grid) == 2, f"{tag} meshgrid gives {type(grid).__name__}")
        checks.result(f"{tag} meshgrid", grid[1], np.meshgrid(np.arange(3), np.arange(4), indexing="ij")[1])
        checks.result(f"{tag} tril", xp.tril(m, k=-1), np.tril(spd, k=-1))
        checks.result(f"{tag} fft", xp.fft.fft(xp.asarray(spd, dtype=xp.complex64), axis=0),
                      np.fft.fft(spd.astype(np.complex64), axis=0), rtol=1e-5, atol=1e-5)
        broadcast = xp.broadcast_arrays(xp.ones((1, 3)), xp.ones((2, 1)))
        checks.expect(isinstance(broadcast, list) and broadcast[0].shape == (2, 3), f"{tag} broadcast_arrays")
        stack = np.stack([np.eye(3), np.diag([1.0, 1e-3, 0.0]), np.ones((3, 3))])
        rtol = np.array([0.5, 1e-6, 1e-6])
        checks.result(f"{tag} matrix_rank array rtol", xp.linalg.matrix_rank(xp.asarray(stack), rtol=xp.asarray(rtol)),
                      np.linalg.matrix_rank(stack, rtol=rtol))
        checks.result(f"{tag} pinv array rtol", xp.linalg.pinv(xp.asarray(stack), rtol=xp.asarray(rtol)),
                      np.linalg.pinv(stack, rtol=rtol), rtol=1e-10, atol=1e-12)
    checks.finish()


def test_dlpack_exports_only_a_whole_array_on_one_rank(world):
    checks = Checks(world)
    for mesh, policy, xp in namespaces(world):
        x = xp.asarray(np.arange(6.0).reshape(2, 3))
        checks.expect(x.__dlpack_device__() == (1, 0), f"dlpack device {x.__dlpack_device__()}")
        if mesh.size() == 1:
            checks.expect(np.array_equal(np.from_dlpack(x), np.arange(6.0).reshape(2, 3)), "from_dlpack(x)")
            # copy=False shares the buffer read-only (versioned DLPack only)
            x.__dlpack__(copy=False, max_version=(1, 0))
            checks.raises("unversioned copy=False", lambda: x.__dlpack__(copy=False), BufferError, "readonly")
        else:  # the whole array on every rank: the standard's explicit copy (scikit-learn's move_to uses it)
            for ctx, got in (("from_dlpack(x)", lambda: np.from_dlpack(x)),
                             ("from_dlpack(x, device='cpu')", lambda: np.from_dlpack(x, device="cpu")),
                             ("xp.from_dlpack(x, device='cpu')", lambda: xp.from_dlpack(x, device="cpu"))):
                checks.expect(np.array_equal(got(), np.arange(6.0).reshape(2, 3)), f"{ctx} on {mesh.shape}")
            checks.raises(f"dlpack copy=False on {mesh.shape}", lambda: x.__dlpack__(copy=False), BufferError,
                          "gathered copy")
        checks.raises("from_dlpack(copy=False) of host data", lambda: xp.from_dlpack(np.ones(2), copy=False),
                      BufferError, "copy")
    checks.finish()


def test_bad_input_of_the_namespace(world):
    """The entries of docs/errors.md, "The Array API namespace": on every rank, before anything moves."""
    checks = Checks(world)
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    other = dt.DeviceMesh((1, world.size), backend=world.kind)
    xp = dt.array_api.namespace(mesh)
    x, x2 = xp.asarray(np.arange(5.0)), xp.asarray(np.ones((3, 2)))
    elsewhere = dt.array_api.namespace(other).asarray(np.arange(5.0))
    entries = [
        (lambda: dt.array_api.namespace(mesh, "shard_middle"), ShardingError,
         "default must be one of ('shard_first', 'shard_last', 'replicate') or a function shape -> placements, "
         "got 'shard_middle'"),
        (lambda: dt.array_api.namespace((2,)), TypeError, "namespace needs a DeviceMesh, got tuple"),
        (lambda: xp.zeros(3, device=Sharding(other, [R, R])), ShardingError, "is on another mesh than this namespace's"),
        (lambda: xp.zeros(3, device="cpu"), TypeError,
         "expected a device of a dtensor_np array (a DeviceMesh or a dt.Sharding), got 'cpu'"),
        (lambda: xp.ones((2, -1)), ValueError, "negative dimensions are not allowed, got shape (2, -1)"),
        (lambda: xp.zeros(2.0), TypeError, "shape must be an int or a sequence of ints, got 2.0"),
        (lambda: xp.asarray([1, 2], copy=False), ValueError,
         "asarray(copy=False): a list must be copied to become a distributed array"),
        (lambda: xp.asarray(x, dtype=xp.float32, copy=False), ValueError,
         "asarray(copy=False): making a float32 of the array needs a copy"),
        (lambda: xp.asarray(elsewhere), ShardingError, "asarray: the array is on"),
        (lambda: xp.astype(x, xp.int8, copy=None), TypeError, "astype: copy must be a bool, got None"),
        (lambda: xp.from_dlpack(np.ones(2), copy=False), BufferError, "from_dlpack(copy=False): host data must be copied"),
        (lambda: xp.isdtype(x, "integral"), TypeError, ""),
        (lambda: xp.cumulative_sum(x2), ValueError, "cumulative_sum: axis must be given for an array of 2 dims"),
        (lambda: xp.matrix_transpose(x), ValueError, "x.mT needs at least 2 dims, got a 1-d array"),
        (lambda: xp.diff(x, n=-1), ValueError, "order must be non-negative but got -1"),
        (lambda: xp.diff(xp.asarray(1.0)), ValueError, "diff requires input that is at least one dimensional"),
        (lambda: xp.__array_namespace_info__().dtypes(device=other), ShardingError, "is not this namespace's mesh"),
        (lambda: x.__array_namespace__(api_version="2019.01"), ValueError, "dtensor_np implements the Array API 2024.12"),
        (lambda: np.lib.stride_tricks.sliding_window_view(x, 1), ShardingError,
         "no sharding rule for numpy.lib.stride_tricks.sliding_window_view"),
    ]
    if world.size > 1:
        entries.append((lambda: x.__dlpack__(copy=False), BufferError,
                        "a DTensor over several ranks is exported as a gathered copy; got copy=False"))
    for i, (call, error, fragment) in enumerate(entries):
        with dt.comm_counter() as c:
            checks.raises(f"entry {i} ({fragment[:40]})", call, error, fragment)
        checks.expect(c.total == 0, f"entry {i} ({fragment[:40]}) communicated: {c.counts}")
    checks.finish()
