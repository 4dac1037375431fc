"""The signal family of issue 37 (differences, convolutions, polynomials, linear algebra) beyond the catalogue's cases.

``tests/test_numpy_api.py`` runs one case per name on three placements.  Here:
uneven and empty shards (5, 1 and 0 rows over 1-4 ranks), every argument
form (``n``, ``prepend``/``append``, spacings, edge orders, modes, ``full=``,
``w=``, ``cov=``, ``rcond``...), both operands sharded, 2-D meshes, NumPy's
errors and result types, and the exact collectives and bytes of every
function that communicates along a sharded operand dim.  Every result is
checked against NumPy on the full array, whole and shard by shard, on every
rank (:class:`test_numpy_ops.Checks`); under ``mpiexec -n 2`` in one job.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np
import pytest

import dtensor_np as dt
from dtensor_np import Replicate, Shard
from test_numpy_ops import Checks

SHAPES = ((5, 3), (1, 3), (0, 3), (4, 6))


def _placements(ndim: int) -> list[Any]:
    return [Shard(d) for d in range(ndim)] + [Replicate()]


def _signal(n: int, seed: int = 0) -> np.ndarray:
    return np.round(np.random.default_rng(seed).standard_normal(n) * 4, 3)


# (name, call(x, ax), exact) for an array x and the axis the function works along
AXIS_CALLS: dict[str, tuple[Callable[[Any, int], Any], bool]] = {
    "diff": (lambda x, ax: np.diff(x, axis=ax), True),
    "diff n=3": (lambda x, ax: np.diff(x, n=3, axis=ax), True),
    "diff prepend scalar, append array": (
        lambda x, ax: np.diff(x, axis=ax, prepend=-1.5, append=np.ones(tuple(1 if d == ax else s for d, s in
                                                                              enumerate(x.shape)))), True),
    "diff n=0": (lambda x, ax: np.diff(x, n=0, axis=ax), True),
    "gradient": (lambda x, ax: np.gradient(x, axis=ax), True),
    "gradient spacing 0.5 edge 2": (lambda x, ax: np.gradient(x, 0.5, axis=ax, edge_order=2), True),
    "gradient coordinates": (lambda x, ax: np.gradient(x, np.cumsum(np.arange(1.0, x.shape[ax] + 1)) ** 1.5,
                                                       axis=ax), True),
    "trapezoid": (lambda x, ax: np.trapezoid(x, dx=0.25, axis=ax), False),
    "trapezoid x": (lambda x, ax: np.trapezoid(x, x=np.arange(x.shape[ax]) ** 2.0, axis=ax), False),
    "unwrap": (lambda x, ax: np.unwrap(x * 3.0, axis=ax), False),
}


@pytest.mark.worlds(simulated=(1, 2, 3, 4), mpi=(2,))
def test_signal_family_matches_numpy_on_uneven_and_empty_shards(world):
    report = Checks(world)
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    rng = np.random.default_rng(0)
    for shape in SHAPES:
        for dtype in ("f8", "i8"):
            a = (rng.standard_normal(shape) * 3).astype(dtype)
            for placement in _placements(2):
                x = dt.distribute_tensor(a, mesh, [placement])
                for ax in (0, 1):
                    for name, (call, exact) in AXIS_CALLS.items():
                        report.same(f"{name} axis={ax} {dtype}{shape} {placement}", lambda: call(a, ax),
                                    lambda: call(x, ax), exact=exact)
                report.same(f"gradient all axes {dtype}{shape} {placement}", lambda: np.gradient(a, 2.0, 3.0),
                            lambda: np.gradient(x, 2.0, 3.0), exact=True)
                report.same(f"kron {dtype}{shape} {placement}", lambda: np.kron(a, [[1, -1], [2, 3]]),
                            lambda: np.kron(x, [[1, -1], [2, 3]]), exact=True)
                report.same(f"diagflat {dtype}{shape} {placement}", lambda: np.diagflat(a, -1),
                            lambda: np.diagflat(x, -1), exact=True)
                report.same(f"trace {dtype}{shape} {placement}", lambda: np.trace(a, 1), lambda: np.trace(x, 1))
                report.same(f"norm nuc {dtype}{shape} {placement}", lambda: np.linalg.norm(a, "nuc"),
                            lambda: np.linalg.norm(x, "nuc"))
                report.same(f"norm inf axes {dtype}{shape} {placement}",
                            lambda: np.linalg.norm(a, np.inf, axis=(1, 0), keepdims=True),
                            lambda: np.linalg.norm(x, np.inf, axis=(1, 0), keepdims=True))
    for n in (1, 2, 7, 12):
        s = _signal(n)
        for placement in _placements(1):
            x = dt.distribute_tensor(s, mesh, [placement])
            for kernel in ([2.0], [1.0, -1.0], [0.5, 1.0, -2.0, 0.25], _signal(9, 1)):
                k = np.array(kernel)
                for kp in (Replicate(), Shard(0)):
                    dk = dt.distribute_tensor(k, mesh, [kp])
                    for mode in ("full", "same", "valid"):
                        for f in (np.convolve, np.correlate):
                            report.same(f"{f.__name__} {n} {len(k)} {mode} {placement} kernel {kp}",
                                        lambda: f(s, k, mode), lambda: f(x, dk, mode), exact=True)
                            report.same(f"{f.__name__} swapped {n} {len(k)} {mode} {placement} kernel {kp}",
                                        lambda: f(k, s * 1j, mode), lambda: f(dk, x * 1j, mode), exact=True)
            report.same(f"ediff1d {n} {placement}", lambda: np.ediff1d(s, to_end=[7.0], to_begin=[1, 2]),
                        lambda: np.ediff1d(x, to_end=[7.0], to_begin=[1, 2]), exact=True)
            report.same(f"diag {n} {placement}", lambda: np.diag(s, 2), lambda: np.diag(x, 2), exact=True)
            report.same(f"vander {n} {placement}", lambda: np.vander(s, 4, increasing=True),
                        lambda: np.vander(x, 4, increasing=True), exact=True)
            report.same(f"polyval {n} {placement}", lambda: np.polyval(s, s), lambda: np.polyval(x, x), exact=True)
            report.same(f"vdot {n} {placement}", lambda: np.vdot(s * 1j, s + 1), lambda: np.vdot(x * 1j, x + 1))
    report.finish()


@pytest.mark.worlds(simulated=(1, 2, 3, 4), mpi=())
def test_least_squares_match_numpy(world):
    report = Checks(world)
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    rng = np.random.default_rng(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.RankWarning)
        for m, n, k in ((9, 3, None), (9, 3, 2), (3, 5, None), (5, 5, 1), (0, 2, None)):
            a = rng.standard_normal((m, n))
            if m == 5:
                a[:, 4] = a[:, 3]  # rank deficient: no residuals
            b = rng.standard_normal((m,) if k is None else (m, k))
            for pa in _placements(2):
                for pb in (Shard(0), Replicate()):
                    x, y = (dt.distribute_tensor(v, mesh, [p]) for v, p in ((a, pa), (b, pb)))
                    for rcond in (None, 0.1):
                        report.same(f"lstsq {a.shape} {b.shape} {pa} {pb} rcond={rcond}",
                                    lambda: np.linalg.lstsq(a, b, rcond), lambda: np.linalg.lstsq(x, y, rcond))
        points = np.linspace(-1.0, 2.0, 11)
        for columns in ((), (3,)):
            values = rng.standard_normal((11,) + columns)
            weights = rng.random(11) + 0.5
            for placement in (Shard(0), Replicate()):
                y = dt.distribute_tensor(values, mesh, [placement])
                x = dt.distribute_tensor(points, mesh, [placement])
                for kwargs in ({}, {"full": True}, {"w": weights}, {"cov": True}, {"cov": "unscaled", "w": weights},
                               {"rcond": 0.5, "full": True}):
                    report.same(f"polyfit {columns} {placement} {sorted(kwargs)}",
                                lambda: np.polyfit(points, values, 3, **kwargs),
                                lambda: np.polyfit(x, y, 3, **kwargs), rtol=1e-9, atol=1e-9)
                report.same(f"polyfit deg 12 of 11 points {placement} (rank deficient)",
                            lambda: np.polyfit(points, values, 12, full=True)[2:4],
                            lambda: np.polyfit(x, y, 12, full=True)[2:4])
    report.finish()


@pytest.mark.worlds(simulated=(4,), mpi=())
def test_two_dim_mesh(world):
    report = Checks(world)
    mesh = dt.DeviceMesh((2, 2), backend=world.kind)
    a = np.random.default_rng(3).standard_normal((5, 6))
    for placements in ([Shard(0), Shard(1)], [Shard(1), Shard(0)], [Shard(0), Shard(0)], [Replicate(), Shard(0)]):
        x = dt.distribute_tensor(a, mesh, placements)
        for ax in (0, 1):
            for name, (call, exact) in AXIS_CALLS.items():
                report.same(f"{name} axis={ax} {placements}", lambda: call(a, ax), lambda: call(x, ax), exact=exact)
        report.same(f"kron {placements}", lambda: np.kron(a, np.ones((2, 3))), lambda: np.kron(x, np.ones((2, 3))),
                    exact=True)
        report.same(f"diagflat {placements}", lambda: np.diagflat(a), lambda: np.diagflat(x), exact=True)
        report.same(f"lstsq {placements}", lambda: np.linalg.lstsq(a, a[:, 0]), lambda: np.linalg.lstsq(x, x[:, 0]))
        report.same(f"convolve {placements}", lambda: np.convolve(a[:, 0], [1.0, 2.0, 3.0]),
                    lambda: np.convolve(x[:, 0], [1.0, 2.0, 3.0]), exact=True)
    report.finish()


def _counts(call: Callable[[], Any]) -> tuple[dict[str, int], dict[str, int]]:
    with warnings.catch_warnings(), dt.comm_counter() as c:
        warnings.simplefilter("ignore")
        call()
    return ({k: v for k, v in c.counts.items() if v}, {k: v for k, v in c.bytes.items() if v})


# name -> (call, {world size: (collectives, bytes)}), on x: 8 x 8 float64 rows sharded, v: 16 values sharded
_ROW = 64  # bytes of one row of x
EXPECTED: dict[str, tuple[Callable[[Any, Any, Any], Any], dict[int, tuple[dict, dict]]]] = {
    "diff: one row per boundary": (lambda x, v, m: np.diff(x, axis=0),
                                   {n: ({"all_to_all": 1}, {"all_to_all": _ROW}) for n in (2, 4)}),
    "diff n=2: two rows": (lambda x, v, m: np.diff(x, n=2, axis=0),
                           {2: ({"all_to_all": 1}, {"all_to_all": _ROW}), 4: ({"all_to_all": 1}, {"all_to_all": 2 * _ROW})}),
    "gradient: a row each way": (lambda x, v, m: np.gradient(x, axis=0, edge_order=2),
                                 {2: ({"all_to_all": 1}, {"all_to_all": _ROW}),
                                  4: ({"all_to_all": 1}, {"all_to_all": 2 * _ROW})}),
    "trapezoid: the next row, then Partial(sum)": (lambda x, v, m: np.trapezoid(x, axis=0),
                                                   {n: ({"all_to_all": 1}, {"all_to_all": _ROW}) for n in (2, 4)}),
    "convolve same, kernel 3: one value each way": (
        lambda x, v, m: np.convolve(v, [1.0, 2.0, 3.0], "same"),
        {2: ({"all_to_all": 1}, {"all_to_all": 8}), 4: ({"all_to_all": 1}, {"all_to_all": 16})}),
    "correlate valid, kernel 3: the output's chunks shift": (
        lambda x, v, m: np.correlate(v, [1.0, 2.0, 3.0]),
        {2: ({"all_to_all": 1}, {"all_to_all": 8}), 4: ({"all_to_all": 1}, {"all_to_all": 16})}),
    "convolve, sharded kernel: gathered": (
        lambda x, v, m: np.convolve(v, dt.distribute_tensor(np.ones(4), m, [Shard(0)]), "valid"),
        {2: ({"all_to_all": 1, "all_gather": 1}, {"all_to_all": 16, "all_gather": 16}),
         4: ({"all_to_all": 1, "all_gather": 1}, {"all_to_all": 24, "all_gather": 8})}),
    "unwrap: diff's halo and a scan": (lambda x, v, m: np.unwrap(x, axis=0),
                                       {n: ({"all_to_all": 1, "scan": 1}, {"all_to_all": _ROW, "scan": _ROW})
                                        for n in (2, 4)}),
    "ediff1d": (lambda x, v, m: np.ediff1d(v), {n: ({"all_to_all": 1}, {"all_to_all": 8}) for n in (2, 4)}),
    "diagflat: rows line up": (lambda x, v, m: np.diagflat(v), {n: ({}, {}) for n in (2, 4)}),
    "kron: rows line up": (lambda x, v, m: np.kron(x, np.ones((2, 2))), {n: ({}, {}) for n in (2, 4)}),
    "kron, 5 rows: a row of a, not two of the result": (
        lambda x, v, m: np.kron(dt.distribute_tensor(np.ones((5, 8)), m, [Shard(0)]), np.ones((2, 2))),
        {n: ({"all_to_all": 1}, {"all_to_all": _ROW}) for n in (2, 4)}),
    "lstsq: one gather of (n+1) x (n+k) blocks": (
        lambda x, v, m: np.linalg.lstsq(x[:, :3], x[:, 3]),
        {2: ({"all_gather": 1}, {"all_gather": 4 * 4 * 8}), 4: ({"all_gather": 1}, {"all_gather": 3 * 4 * 8})}),
    "polyfit: one gather": (lambda x, v, m: np.polyfit(v, v * v, 2),
                            {n: ({"all_gather": 1}, {"all_gather": 4 * 4 * 8}) for n in (2, 4)}),
    "polyfit cov: the same gather, with the Gram blocks": (
        lambda x, v, m: np.polyfit(v, v * v, 2, cov=True),
        {n: ({"all_gather": 1}, {"all_gather": 7 * 4 * 8}) for n in (2, 4)}),
    "polyval, sharded coefficients: one gather": (
        lambda x, v, m: np.polyval(dt.distribute_tensor(np.arange(4.0), m, [Shard(0)]), x),
        {2: ({"all_gather": 1}, {"all_gather": 16}), 4: ({"all_gather": 1}, {"all_gather": 8})}),
    "vander": (lambda x, v, m: np.vander(v, 3), {n: ({}, {}) for n in (2, 4)}),
    "eigvals: the matrix gathered": (lambda x, v, m: np.linalg.eigvals(x),
                                     {n: ({"all_gather": 1}, {"all_gather": 8 * _ROW // n}) for n in (2, 4)}),
    "cond of a batch: no collective": (lambda x, v, m: np.linalg.cond(x.reshape(8, 2, 4)[:, :, :2]),
                                       {n: ({}, {}) for n in (2, 4)}),
    "trace, vdot, norm: Partial, one all_reduce": (
        lambda x, v, m: (np.trace(x), np.vdot(x, x), np.linalg.norm(x, axis=0)),
        {n: ({"all_reduce": 1}, {"all_reduce": _ROW}) for n in (2, 4)}),
}


@pytest.mark.worlds(simulated=(1, 2, 4), mpi=())
def test_collectives_and_bytes(world):
    report = Checks(world)
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    a = np.random.default_rng(2).standard_normal((8, 8))
    x = dt.distribute_tensor(a, mesh, [Shard(0)])
    v = dt.distribute_tensor(np.linspace(0.0, 3.0, 16), mesh, [Shard(0)])
    for name, (call, expected) in EXPECTED.items():
        want = expected.get(world.size, ({}, {}))
        got = _counts(lambda: call(x, v, mesh))
        report.expect(got == want, f"{name}: expected {want}, got {got}")
    report.finish()


def test_numpy_errors_and_result_types():
    mesh = dt.DeviceMesh((2,))
    x = dt.distribute_tensor(np.arange(6.0).reshape(3, 2), mesh, [Shard(0)])
    v = dt.distribute_tensor(np.arange(5.0), mesh, [Shard(0)])
    cases = [
        (lambda: np.diff(v[0]), ValueError, "at least one dimensional"),
        (lambda: np.diff(v, n=-1), ValueError, "order must be non-negative"),
        (lambda: np.diff(x, axis=2), np.exceptions.AxisError, "axis 2"),
        (lambda: np.diff(x, prepend=np.ones((1, 3))), ValueError, ""),
        (lambda: np.gradient(v, edge_order=3), ValueError, "edge_order"),
        (lambda: np.gradient(v[:1]), ValueError, "too small"),
        (lambda: np.gradient(v, np.ones(4)), ValueError, "match the length"),
        (lambda: np.gradient(x, 1.0, 2.0, 3.0), TypeError, "invalid number of arguments"),
        (lambda: np.convolve(v, np.ones(0)), ValueError, ""),
        (lambda: np.convolve(v, [1.0], mode="middle"), ValueError, ""),
        (lambda: np.convolve(x, [1.0]), ValueError, ""),
        (lambda: np.linalg.lstsq(v, v), np.linalg.LinAlgError, ""),
        (lambda: np.linalg.lstsq(x, v), np.linalg.LinAlgError, "Incompatible dimensions"),
        (lambda: np.polyfit(v, v, -1), ValueError, "deg"),
        (lambda: np.polyfit(x, v, 1), TypeError, "1D vector for x"),
        (lambda: np.polyfit(v[:2], v[:2], 2, cov=True), ValueError, "exceed order"),
        (lambda: np.ediff1d(v > 1), TypeError, "boolean subtract"),
        (lambda: np.ediff1d(v, to_begin=1j), TypeError, "same_kind"),
        (lambda: np.trace(v), ValueError, "at least two dimensions"),
        (lambda: np.diag(x.reshape(3, 2, 1)), ValueError, "1- or 2-d"),
        (lambda: np.linalg.norm(x, "fro", axis=0), ValueError, "Invalid norm order"),
        (lambda: np.linalg.norm(x, 3, axis=(0, 1)), ValueError, "Invalid norm order for matrices"),
        (lambda: np.linalg.multi_dot([x]), ValueError, "at least two"),
        (lambda: np.linalg.eig(x), np.linalg.LinAlgError, ""),
        (lambda: np.vdot(x, v), ValueError, "different lengths"),
    ]
    for call, error, match in cases:
        with pytest.raises(error, match=match or None):
            call()
    square = dt.distribute_tensor(np.array([[2.0, 1.0], [1.0, 3.0]]), mesh, [Shard(0)])
    assert type(np.linalg.eig(square)).__name__ == "EigResult"
    assert type(np.linalg.slogdet(square)).__name__ == "SlogdetResult"
    assert np.diag(square).readonly  # a view of the diagonal, read-only as NumPy's
    grads = np.gradient(x)
    assert isinstance(grads, tuple) and len(grads) == 2 and grads[0].dtype == np.float64
    assert np.diff(v > 1).dtype == np.bool_
    with pytest.warns(np.exceptions.RankWarning):
        np.polyfit(v, v, 7)
    lstsq = np.linalg.lstsq(x, x[:, 0])
    assert isinstance(lstsq, tuple) and lstsq[2].dtype == np.int32 and lstsq[1].shape == (1,)
    # eigenvalues real on one rank and complex on the other: complex on both, as NumPy decides on the whole batch
    batch = np.stack([np.diag([1.0, 2.0]), np.array([[0.0, 1.0], [-1.0, 0.0]])])
    w = np.linalg.eigvals(dt.distribute_tensor(batch, mesh, [Shard(0)]))
    assert w.dtype == np.complex128 and all(s.dtype == np.complex128 for s in w.local_shards().values())
    assert np.allclose(w.full_tensor(), np.linalg.eigvals(batch))
