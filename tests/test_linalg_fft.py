"""``numpy.linalg`` and ``numpy.fft`` on DTensors equal NumPy on the full arrays, with the collectives each rule documents.

Every test takes the ``world`` fixture (simulated 1, 2, 3, 4, 8 ranks; ``mpiexec``
2 and 4), builds the same full arrays on every rank from fixed seeds, and
checks each result three ways: its global shape and dtype, ``full_tensor()``
against NumPy, and (unless it is ``Partial``) every held rank's local shard
against the slice of the NumPy result its spec names.  Batch dims are sharded
unevenly (5 entries over 4 ranks: 2, 2, 1, 0) and emptily; matrix and
transform dims are sharded, replicated and pending (``Partial``); dtypes are
float32, float64, complex64 and complex128.  Mismatches are collected and the
verdict is agreed across ranks, so an MPI rank never waits alone in a
collective.
"""

from __future__ import annotations

import itertools
import os
import warnings
import zlib
from typing import Any, Callable, Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import dtensor_np as dt
from collectives import SimulatedBackend, chunk_sizes
from dtensor_np import Partial, Replicate, Shard, ShardingError
from dtensor_np.propagation.roll import roll_shards
from dtensor_np.propagation.whole_axes import gather_blocks
from test_numpy_ops import Checks

R = Replicate()
P = Partial()
UNDER_MPI = bool(os.environ.get("PYTEST_ISOLATE_MPI_IS_FORKED"))
MPI_CHECK_RATE = {2: 1.0, 4: 1.0}  # the share of sampled checks that run under mpiexec -n 2 and -n 4: all
DTYPES = ("float32", "float64", "complex64", "complex128")
LA = np.linalg


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def tolerance(dtype: Any) -> float:
    return 2e-3 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-9


class Report(Checks):
    """:class:`test_numpy_ops.Checks` with tolerances per dtype, NumPy's tuple types, and hash-sampled checks.

    Under MPI (4 processes share 2 cores) ``sampled`` checks run a fixed share of
    the cases, picked by a hash of their description: the same on every rank.
    """

    def __init__(self, world: Any) -> None:
        super().__init__(world)
        self.share = MPI_CHECK_RATE.get(world.size, 1.0) if world.kind == "mpi" else 1.0

    def sampled(self, ctx: str) -> bool:
        return self.share >= 1.0 or zlib.crc32(ctx.encode()) % 1000 < 1000 * self.share

    def same(self, ctx: str, numpy_call: Callable[[], Any], dtensor_call: Callable[[], Any], tol: float, *, always: bool = False) -> Any:  # type: ignore[override]
        """``dtensor_call()`` equals ``numpy_call()`` (a tuple of NumPy's type), or raises the same kind of error.

        Without ``always``, a sampled check (see the class doc).
        """
        if not always and not self.sampled(ctx):
            return None
        kinds: list[type] = []

        def numpy_side() -> Any:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = numpy_call()
            kinds.append(type(result))
            return result

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = super().same(ctx, numpy_side, dtensor_call, rtol=tol, atol=tol)
        if out is not None and kinds and issubclass(kinds[0], tuple) and type(out) is not kinds[0]:
            self.errors.append(f"{ctx}: expected a {kinds[0].__name__}, got {type(out).__name__}")
        return out

    def matches(self, ctx: str, out: Any, expected: Any, tol: float) -> None:
        self.result(ctx, out, expected, rtol=tol, atol=tol)


def meshes(world: Any) -> list[dt.DeviceMesh]:
    n = world.size
    shapes = [(n,)] + ([(2, n // 2)] if n % 2 == 0 and n >= 4 else [])
    return [dt.DeviceMesh(shape, backend=world.kind) for shape in shapes]


def layouts(mesh: dt.DeviceMesh, ndim: int, partial: bool = True) -> list[list[Any]]:
    """Placements: every single one on a 1-d mesh; on a 2-d mesh the pairs of distinct shards, and shard+partial."""
    singles = [R] + [Shard(d) for d in range(ndim)] + ([P] if partial else [])
    if mesh.ndim == 1:
        return [[p] for p in singles]
    pairs = [[Shard(a), Shard(b)] for a, b in itertools.permutations(range(ndim), 2)]
    pairs += [[Shard(0), Shard(0)], [Shard(ndim - 1), R]]
    if partial:
        pairs += [[P, Shard(ndim - 1)], [Shard(0), P]]
    return pairs


def random_array(seed: int, shape: Sequence[int], dtype: str) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


def spd(seed: int, shape: Sequence[int], dtype: str) -> np.ndarray:
    """Hermitian positive definite matrices (well conditioned), so every matrix function applies."""
    b = random_array(seed, shape, dtype).astype(np.complex128 if np.dtype(dtype).kind == "c" else np.float64)
    n = shape[-1]
    return (b @ np.conj(np.swapaxes(b, -1, -2)) + n * np.eye(n)).astype(dtype)


def counted(call: Callable[[], Any]) -> tuple[Any, dt.CommCounter]:
    with dt.comm_counter() as counter:
        out = call()
    return out, counter


def spec_str(x: dt.DTensor) -> str:
    return f"{x.shape} {x.dtype} {x.spec} on {x.mesh.shape}"


# ---------------------------------------------------------------------------
# numpy.linalg: whole matrices
# ---------------------------------------------------------------------------

MATRIX_FUNCTIONS: dict[str, Callable[[Any], Any]] = {
    "cholesky": LA.cholesky,
    "cholesky upper": lambda x: LA.cholesky(x, upper=True),
    "det": LA.det,
    "eigh": LA.eigh,
    "eigh U": lambda x: LA.eigh(x, UPLO="U"),
    "eigvalsh": LA.eigvalsh,
    "inv": LA.inv,
    "matrix_power 3": lambda x: LA.matrix_power(x, 3),
    "matrix_power -2": lambda x: LA.matrix_power(x, -2),
    "matrix_power 0": lambda x: LA.matrix_power(x, 0),
    "matrix_rank": LA.matrix_rank,
    "matrix_rank hermitian tol": lambda x: LA.matrix_rank(x, tol=0.5, hermitian=True),
    "pinv": LA.pinv,
    "pinv rtol": lambda x: LA.pinv(x, rtol=1e-3),
    "qr": LA.qr,
    "qr complete": lambda x: LA.qr(x, mode="complete"),
    "qr r": lambda x: LA.qr(x, mode="r"),
    "qr raw": lambda x: LA.qr(x, mode="raw"),
    "slogdet": LA.slogdet,
    "svd": LA.svd,
    "svd reduced": lambda x: LA.svd(x, full_matrices=False),
    "svd no uv": lambda x: LA.svd(x, compute_uv=False),
    "svdvals": LA.svdvals,
    "matrix_norm nuc": lambda x: LA.matrix_norm(x, ord="nuc"),
    "matrix_norm 2": lambda x: LA.matrix_norm(x, ord=2),
    "matrix_norm -2 keepdims": lambda x: LA.matrix_norm(x, ord=-2, keepdims=True),
}
SQUARE = ("cholesky", "det", "eigh", "eigvalsh", "inv", "matrix_power", "slogdet")
# factors whose signs (phases) NumPy leaves to LAPACK: TSQR fixes its own (dtensor_np.propagation.tsqr)
SIGNED = ("qr", "qr r", "svd", "svd reduced")


def _phases(mine: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """Per column: the phase c with ``mine * c`` closest to ``theirs`` (1 where they are orthogonal)."""
    inner = np.sum(np.conj(mine) * theirs, axis=-2)
    size = np.abs(inner)
    return np.where(size == 0, 1, inner / np.where(size == 0, 1, size))


def aligned(name: str, expected: Any, out: Any) -> Any:
    """NumPy's factors with each column of Q (row of R; singular vector pair) turned to the phase of ``out``'s:
    the comparison up to the signs NumPy leaves open (products such as Q R and U S Vh unchanged)."""
    if not isinstance(out, (tuple, dt.DTensor)) or name not in SIGNED:
        return expected
    got = [o.full_tensor() for o in (out if isinstance(out, tuple) else (out,))]
    if name == "qr r":
        c = _phases(np.swapaxes(expected, -1, -2), np.swapaxes(got[0], -1, -2))
        return (expected * c[..., :, None]).astype(expected.dtype)
    if name == "qr" and expected[0].shape[-1] == expected[1].shape[-2]:
        c = _phases(expected[0], got[0])
        return type(expected)((expected[0] * c[..., None, :]).astype(got[0].dtype),
                              (expected[1] * np.conj(c)[..., :, None]).astype(got[1].dtype))
    if name.startswith("svd"):
        u, s, vh = expected
        k = s.shape[-1]
        c = _phases(np.swapaxes(vh[..., :k, :], -1, -2), np.swapaxes(got[2][..., :k, :], -1, -2))
        u, vh = u.copy(), vh.copy()
        u[..., :k] *= np.conj(c)[..., None, :]
        vh[..., :k, :] *= c[..., :, None]
        return type(expected)(u, s, vh)
    return expected


def test_matrix_functions_equal_numpy(world):
    report = Report(world)
    for mesh in meshes(world):
        for case, (shape, dtype) in enumerate([((5, 4, 4), "float64"), ((4, 4), "complex64"), ((0, 3, 3), "float32"),
                                               ((5, 4, 3), "complex128"), ((2, 3, 5), "float32"), ((3, 6, 6), "complex128")]):
            a = spd(case, shape[:-1] + (shape[-2],), dtype)[..., : shape[-1]]
            for placements in layouts(mesh, len(shape)):
                x = dt.distribute_tensor(a, mesh, placements)
                for name, f in MATRIX_FUNCTIONS.items():
                    if name in SIGNED:  # NumPy's factors turned to this call's signs
                        out = f(x)
                        report.same(f"{name} of {spec_str(x)}", lambda: aligned(name, f(a), out), lambda: out,
                                    tolerance(dtype))
                    else:
                        report.same(f"{name} of {spec_str(x)}", lambda: f(a), lambda: f(x), tolerance(dtype))
    report.finish()


def test_matrix_functions_move_or_gather_only_the_matrix_dims(world):
    """Batch dims sharded: no collective.  A matrix dim sharded: one all_to_all to a long enough batch dim, else one all_gather."""
    report = Report(world)
    n = world.size
    mesh = dt.DeviceMesh((n,), backend=world.kind)
    a = spd(0, (8, 4, 4), "float64")
    for name, f in MATRIX_FUNCTIONS.items():
        x = dt.distribute_tensor(a, mesh, [Shard(0)])
        out, c = counted(lambda: f(x))
        first = out[0] if isinstance(out, tuple) else out
        report.expect(c.total == 0, f"{name}: batch sharded should not communicate, got {c}")
        report.expect(str(first.spec) == "S(0)", f"{name}: output {first.spec}, expected the batch sharding S(0)")
        for dim in (1, 2):
            x = dt.distribute_tensor(a, mesh, [Shard(dim)])
            out, c = counted(lambda: f(x))
            first = out[0] if isinstance(out, tuple) else out
            moves = 1 if n > 1 else 0
            report.expect(c.counts["all_to_all"] == moves and c.total == moves, f"{name} S({dim}): expected {moves} all_to_all, got {c}")
            report.expect(str(first.spec) == ("S(0)" if n > 1 else "R"), f"{name} S({dim}): output {first.spec}")
        x = dt.distribute_tensor(a[0], mesh, [Shard(0)])  # one matrix: nothing can take the sharding
        _, c = counted(lambda: f(x))
        report.expect(c.counts["all_gather"] == (n > 1) and c.total == (n > 1), f"{name} 2-d S(0): expected one all_gather, got {c}")
        x = dt.distribute_tensor(a, mesh, [P])
        _, c = counted(lambda: f(x))
        report.expect(c.counts["all_reduce"] == (n > 1) and c.total == (n > 1), f"{name} P(sum): the pending sum is reduced once, got {c}")
    if n % 2 == 0 and n >= 4:
        mesh2 = dt.DeviceMesh((2, n // 2), backend=world.kind)
        x = dt.distribute_tensor(a[0], mesh2, [Shard(1), Shard(0)])
        out, c = counted(lambda: LA.inv(x))
        report.expect(c.counts["all_gather"] == 1 and c.total == 1, f"inv of a matrix on S(1)S(0): one merged all_gather, got {c}")
        report.same("inv S(1)S(0)", lambda: LA.inv(a[0]), lambda: out, 1e-9, always=True)
        x = dt.distribute_tensor(a, mesh2, [Shard(1), Shard(2)])
        out, c = counted(lambda: LA.svd(x))
        report.expect(c.counts["all_to_all"] == 1 and c.counts["all_gather"] == 1 and c.total == 2, f"svd S(1)S(2): got {c}")
        report.expect(str(out.U.spec) == "S(0)R", f"svd S(1)S(2): U is {out.U.spec}, expected S(0)R")
    report.finish()


def test_failures_raise_on_every_rank(world):
    """A singular matrix held by one rank raises LinAlgError on all; bad arguments raise before anything moves."""
    report = Report(world)
    n = world.size
    mesh = dt.DeviceMesh((n,), backend=world.kind)
    a = spd(1, (n + 1, 3, 3), "float64")
    singular = a.copy()
    singular[-1] = 0.0  # held by the last rank that holds anything
    x = dt.distribute_tensor(singular, mesh, [Shard(0)])
    report.raises("inv of a batch with one singular matrix", lambda: LA.inv(x), LA.LinAlgError, "Singular matrix")
    report.raises("solve with one singular matrix", lambda: LA.solve(x, x), LA.LinAlgError, "Singular matrix")
    report.raises("cholesky of a batch with one zero matrix", lambda: LA.cholesky(x), LA.LinAlgError, "not positive definite")
    report.raises("matrix_power -1", lambda: LA.matrix_power(x, -1), LA.LinAlgError, "Singular matrix")
    report.same("det of the same batch", lambda: LA.det(singular), lambda: LA.det(x), 1e-9, always=True)  # det does not fail
    ok = dt.distribute_tensor(a, mesh, [Shard(0)])
    report.same("inv after the failures", lambda: LA.inv(a), lambda: LA.inv(ok), 1e-9, always=True)  # the ranks are in step
    rect = dt.distribute_tensor(np.ones((4, 3, 2)), mesh, [Shard(1)])
    for name, f in (("inv", LA.inv), ("det", LA.det), ("eigh", LA.eigh), ("cholesky", LA.cholesky)):
        _, c = counted(lambda: report.raises(f"{name} of non-square matrices", lambda: f(rect), LA.LinAlgError, "square"))
        report.expect(c.total == 0, f"{name}: the refusal communicated ({c})")
    vec = dt.distribute_tensor(np.ones(4), mesh, [Shard(0)])
    report.raises("det of a 1-d array", lambda: LA.det(vec), LA.LinAlgError, "at least two-dimensional")
    report.raises("diagonal of a 1-d array", lambda: LA.diagonal(vec), ValueError)
    report.raises("matrix_transpose of a 1-d array", lambda: LA.matrix_transpose(vec), ValueError)
    report.raises("matrix_rank tol as an array", lambda: LA.matrix_rank(ok, tol=np.ones(n + 1)), ShardingError, "tol")
    report.raises("pinv rtol as a DTensor", lambda: LA.pinv(ok, rtol=vec), ShardingError, "rtol")
    report.raises("matrix_norm bad ord", lambda: LA.matrix_norm(ok, ord=3), ValueError, "Invalid norm order")
    report.raises("fft with out by position", lambda: np.fft.fft(vec, None, -1, None, vec), ShardingError, "out")
    report.raises("fft bad norm", lambda: np.fft.fft(vec, norm="sideways"), ValueError, "Invalid norm value")
    report.raises("fft n=0", lambda: np.fft.fft(vec, n=0), ValueError, "Invalid number of FFT data points")
    report.raises("fft axis out of range", lambda: np.fft.fft(vec, axis=1), np.exceptions.AxisError)
    report.raises("fftn axes out of range", lambda: np.fft.fftn(vec, axes=(0, 2)), np.exceptions.AxisError)
    report.same("solve with a plain array (a replicated constant)", lambda: LA.solve(a, np.ones((n + 1, 3, 1))),
                lambda: LA.solve(ok, np.ones((n + 1, 3, 1))), 1e-9, always=True)
    report.raises("vecdot with keywords it does not take", lambda: np.vecdot(vec, vec, keepdims=True), ShardingError, "axis")
    report.finish()


# ---------------------------------------------------------------------------
# norms
# ---------------------------------------------------------------------------

VECTOR_ORDS = (2, 1, 0, np.inf, -np.inf, 3, -1.5)
MATRIX_ORDS = ("fro", 1, -1, np.inf, -np.inf)  # 'nuc', 2, -2 are whole-matrix functions (above)


def test_norms_equal_numpy(world):
    report = Report(world)
    for mesh in meshes(world):
        for case, (shape, dtype) in enumerate([((5, 4, 3), "float32"), ((6, 7), "complex128"), ((0, 3, 2), "float64"),
                                               ((3, 4, 5), "complex64"), ((5, 6), "int64")]):
            a = random_array(case, shape, dtype) if dtype != "int64" else np.arange(np.prod(shape)).reshape(shape) - 7
            tol = tolerance(dtype)
            for placements in layouts(mesh, len(shape)):
                x = dt.distribute_tensor(a, mesh, placements)
                for ord, axis, keepdims in itertools.product(VECTOR_ORDS, (None, -1, 0, (0, -1)), (False, True)):
                    kw = dict(ord=ord, axis=axis, keepdims=keepdims)
                    report.same(f"vector_norm {kw} of {spec_str(x)}", lambda: LA.vector_norm(a, **kw), lambda: LA.vector_norm(x, **kw), tol)
                for ord, keepdims in itertools.product(MATRIX_ORDS, (False, True)):
                    kw = dict(ord=ord, keepdims=keepdims)
                    report.same(f"matrix_norm {kw} of {spec_str(x)}", lambda: LA.matrix_norm(a, **kw), lambda: LA.matrix_norm(x, **kw), tol)
    report.finish()


def test_norm_collectives(world):
    """Ord 1, 0, +-inf along sharded dims: Partial, no collective; ord 2 (and 'fro'): one all_reduce; batch only: none."""
    report = Report(world)
    n = world.size
    a = random_array(3, (6, 5, 4), "float64")
    for mesh in meshes(world):
        big = n > 1
        reduced = [Shard(2)] + [Shard(1)] * (mesh.ndim - 1)  # every mesh dim shards a reduced dim
        x = dt.distribute_tensor(a, mesh, reduced)
        for ord, pending in ((1, "sum"), (0, "sum"), (np.inf, "max"), (-np.inf, "min")):
            out, c = counted(lambda: LA.vector_norm(x, ord=ord, axis=(1, 2)))
            report.expect(c.total == 0, f"vector_norm ord {ord} on {x.spec}: got {c}")
            report.expect(not big or Partial(pending) in out.placements, f"vector_norm ord {ord}: {out.spec}, expected P({pending})")
            report.matches(f"vector_norm ord {ord}", out, LA.vector_norm(a, ord=ord, axis=(1, 2)), 1e-9)
        for ord in (2, 3):
            out, c = counted(lambda: LA.vector_norm(x, ord=ord, axis=(1, 2)))
            report.expect(c.counts["all_reduce"] == big and c.total == big, f"vector_norm ord {ord} on {x.spec}: one all_reduce, got {c}")
        out, c = counted(lambda: LA.matrix_norm(x))
        report.expect(c.counts["all_reduce"] == big and c.total == big, f"matrix_norm fro on {x.spec}: one all_reduce, got {c}")
        batch = dt.distribute_tensor(a, mesh, [Shard(0)] + [R] * (mesh.ndim - 1))
        for f in (LA.matrix_norm, lambda t: LA.matrix_norm(t, ord=-1), lambda t: LA.vector_norm(t, axis=-1), LA.svdvals):
            out, c = counted(lambda: f(batch))
            report.expect(c.total == 0, f"a norm of a batch-sharded array communicated: {c}")
        cols = dt.distribute_tensor(a, mesh, [Shard(2)] + [R] * (mesh.ndim - 1))
        out, c = counted(lambda: LA.matrix_norm(cols, ord=1))
        report.expect(c.total == 0 and (not big or Partial("max") in out.placements), f"matrix_norm ord 1, columns sharded: {out.spec} {c}")
        rows = dt.distribute_tensor(a, mesh, [Shard(1)] + [R] * (mesh.ndim - 1))
        out, c = counted(lambda: LA.matrix_norm(rows, ord=1))
        report.expect(c.counts["all_reduce"] == big and c.total == big, f"matrix_norm ord 1, rows sharded: one all_reduce, got {c}")
    report.finish()


# ---------------------------------------------------------------------------
# diagonal, trace, matrix_transpose
# ---------------------------------------------------------------------------


def test_diagonal_trace_and_transpose(world):
    report = Report(world)
    for mesh in meshes(world):
        for case, (shape, dtype) in enumerate([((5, 4, 4), "float64"), ((3, 5, 7), "complex64"), ((7, 3), "int64"),
                                               ((2, 0, 3), "float32"), ((9, 9), "complex128")]):
            a = random_array(case, shape, dtype) if dtype != "int64" else np.arange(np.prod(shape)).reshape(shape)
            for placements in layouts(mesh, len(shape)):
                x = dt.distribute_tensor(a, mesh, placements)
                pending = [m for m, p in enumerate(x.placements) if isinstance(p, Partial)]
                for offset in (-3, -1, 0, 1, 2, 8):
                    if not report.sampled(f"diagonal {offset} {spec_str(x)}"):
                        continue
                    out, c = counted(lambda: LA.diagonal(x, offset=offset))
                    report.same(f"diagonal offset {offset} of {spec_str(x)}", lambda: LA.diagonal(a, offset=offset), lambda: out, tolerance(dtype), always=True)
                    report.expect(c.total == c.counts["all_to_all"] <= 1, f"diagonal of {x.spec}: at most one rechunk, got {c}")
                    report.expect(all(isinstance(out.placements[m], Partial) for m in pending), f"diagonal of {x.spec}: lost the pending sum: {out.spec}")
                    out, c = counted(lambda: LA.trace(x, offset=offset))
                    report.same(f"trace offset {offset} of {spec_str(x)}", lambda: LA.trace(a, offset=offset), lambda: out, tolerance(dtype), always=True)
                    report.expect(c.total == 0, f"trace of {x.spec}: no collective, got {c}")
                    report.same(f"trace dtype=complex128 of {spec_str(x)}", lambda: LA.trace(a, offset=offset, dtype=np.complex128),
                                lambda: LA.trace(x, offset=offset, dtype=np.complex128), tolerance(dtype))
                out, c = counted(lambda: LA.matrix_transpose(x))
                report.same(f"matrix_transpose of {spec_str(x)}", lambda: LA.matrix_transpose(a), lambda: out, tolerance(dtype))
                report.same(f"np.matrix_transpose of {spec_str(x)}", lambda: np.matrix_transpose(a), lambda: np.matrix_transpose(x), tolerance(dtype))
                report.expect(c.total == 0, f"matrix_transpose of {x.spec}: got {c}")
    report.finish()


# ---------------------------------------------------------------------------
# contractions and solve
# ---------------------------------------------------------------------------


def test_contractions_cross_and_vecdot(world):
    report = Report(world)
    for mesh in meshes(world):
        for dtype in ("float64", "complex64"):
            tol = tolerance(dtype)
            pairs = {
                "matmul": (LA.matmul, (5, 4, 3), (3, 2)),
                "matmul batched": (LA.matmul, (5, 4, 3), (5, 3, 6)),
                "tensordot": (lambda p, q: LA.tensordot(p, q, axes=2), (5, 4, 3), (4, 3)),
                "tensordot axes": (lambda p, q: LA.tensordot(p, q, axes=([0], [1])), (5, 4), (3, 5)),
                "outer": (LA.outer, (5,), (7,)),
                "vecdot": (LA.vecdot, (5, 4, 3), (4, 3)),
                "vecdot axis 0": (lambda p, q: LA.vecdot(p, q, axis=0), (6, 5), (6, 1)),
                "np.vecdot": (np.vecdot, (5, 3), (5, 3)),
                "cross": (LA.cross, (5, 4, 3), (4, 3)),
                "cross axis -2": (lambda p, q: LA.cross(p, q, axis=-2), (2, 3, 4), (3, 4)),
                "cross broadcast": (LA.cross, (5, 1, 3), (4, 3)),
            }
            for name, (f, sa, sb) in pairs.items():
                a, b = random_array(1, sa, dtype), random_array(2, sb, dtype)
                for pa, pb in itertools.product(layouts(mesh, len(sa)), layouts(mesh, len(sb))):
                    if not report.sampled(f"{name} {mesh.shape} {pa} {pb} {dtype}"):
                        continue
                    x, y = dt.distribute_tensor(a, mesh, pa), dt.distribute_tensor(b, mesh, pb)
                    report.same(f"{name} of {spec_str(x)}, {spec_str(y)}", lambda: f(a, b), lambda: f(x, y), tol, always=True)
            a, b = random_array(3, (6, 4, 3), dtype), random_array(4, (6, 4, 3), dtype)
            x, y = (dt.distribute_tensor(t, mesh, [Shard(0)] + [R] * (mesh.ndim - 1)) for t in (a, b))
            for name, f in (("matmul", lambda p, q: LA.matmul(p, LA.matrix_transpose(q))), ("vecdot", LA.vecdot), ("cross", LA.cross)):
                _, c = counted(lambda: f(x, y))
                report.expect(c.total == 0, f"{name} with batch dims sharded: got {c}")
            x = dt.distribute_tensor(a, mesh, [P] + [R] * (mesh.ndim - 1))
            y = dt.distribute_tensor(b, mesh, [R] * mesh.ndim)
            out, c = counted(lambda: LA.vecdot(x, y))
            report.expect(c.total == 0 and out.placements[0] == P, f"vecdot of a pending sum and a replica: {out.spec} {c}")
            report.matches("vecdot pending", out, LA.vecdot(a, b), tol)
    report.finish()


def test_solve(world):
    report = Report(world)
    for mesh in meshes(world):
        for dtype in DTYPES:
            tol = tolerance(dtype)
            for sa, sb in (((5, 4, 4), (5, 4, 2)), ((5, 4, 4), (4,)), ((4, 4), (3, 4, 2)), ((2, 1, 3, 3), (4, 3, 1)), ((0, 2, 2), (0, 2, 2))):
                a, b = spd(5, sa, dtype), random_array(6, sb, dtype)
                for pa, pb in itertools.product(layouts(mesh, len(sa)), layouts(mesh, len(sb))):
                    if not report.sampled(f"solve {mesh.shape} {sa} {sb} {pa} {pb} {dtype}"):
                        continue
                    x, y = dt.distribute_tensor(a, mesh, pa), dt.distribute_tensor(b, mesh, pb)
                    report.same(f"solve {spec_str(x)}, {spec_str(y)}", lambda: LA.solve(a, b), lambda: LA.solve(x, y), tol, always=True)
        a, b = spd(7, (6, 3, 3), "float64"), random_array(8, (6, 3, 5), "float64")
        rest = [R] * (mesh.ndim - 1)
        x, y = dt.distribute_tensor(a, mesh, [Shard(0)] + rest), dt.distribute_tensor(b, mesh, [Shard(0)] + rest)
        out, c = counted(lambda: LA.solve(x, y))
        report.expect(c.total == 0, f"solve with batch dims sharded: got {c}")
        y = dt.distribute_tensor(b, mesh, [Shard(2)] + rest)
        x = dt.distribute_tensor(a, mesh, [R] * mesh.ndim)
        out, c = counted(lambda: LA.solve(x, y))
        report.expect(c.total == 0 and str(out.spec).startswith("S(2)"), f"solve with b's columns sharded: {out.spec} {c}")
        y = dt.distribute_tensor(b, mesh, [P] + rest)
        out, c = counted(lambda: LA.solve(x, y))
        report.expect(c.total == 0 and out.placements[0] == P, f"solve of a pending b: {out.spec} {c}")
        report.matches("solve pending b", out, LA.solve(a, b), 1e-9)
    report.finish()


# ---------------------------------------------------------------------------
# numpy.fft
# ---------------------------------------------------------------------------

FFT = np.fft
# name -> (function, keywords, the dims of a 3-d array it transforms or shifts)
TRANSFORMS: dict[str, tuple[Callable[..., Any], dict, set]] = {}
for _f in (FFT.fft, FFT.ifft, FFT.rfft, FFT.irfft, FFT.hfft, FFT.ihfft):
    for _kw, _dims in (({}, {2}), ({"n": 7}, {2}), ({"axis": 0, "norm": "ortho"}, {0}), ({"axis": -2, "n": 4, "norm": "forward"}, {1})):
        TRANSFORMS[f"{_f.__name__} {_kw}"] = (_f, _kw, _dims)
for _f in (FFT.fftn, FFT.ifftn, FFT.rfftn, FFT.irfftn, FFT.fft2, FFT.ifft2, FFT.rfft2, FFT.irfft2):
    _all = {0, 1, 2} if _f.__name__.endswith("n") else {1, 2}
    for _kw, _dims in (({}, _all), ({"axes": (0,)}, {0}), ({"s": (4, 6), "axes": (-1, 0)}, {0, 2}), ({"axes": (-1, 0), "norm": "ortho"}, {0, 2})):
        TRANSFORMS[f"{_f.__name__} {_kw}"] = (_f, _kw, _dims)
SHIFTS: dict[str, tuple[Callable[..., Any], dict, set]] = {}
for _f in (FFT.fftshift, FFT.ifftshift):
    for _axes, _dims in ((None, {0, 1, 2}), (0, {0}), ((-1,), {2}), ((0, -1, 0), {0, 2})):
        SHIFTS[f"{_f.__name__} axes={_axes}"] = (_f, {"axes": _axes}, _dims)


def test_fft_transforms_equal_numpy(world):
    report = Report(world)
    for mesh in meshes(world):
        for case, (shape, dtype) in enumerate([((6, 5), "float32"), ((5, 4, 3), "complex128"), ((9,), "complex64"),
                                               ((2, 9), "float64"), ((4, 0, 3), "complex64")]):
            a = random_array(case, shape, dtype)
            for placements in layouts(mesh, len(shape)):
                x = dt.distribute_tensor(a, mesh, placements)
                pending = [m for m, p in enumerate(x.placements) if isinstance(p, Partial)]
                for name, (f, kw, _) in {**TRANSFORMS, **SHIFTS}.items():
                    if 0 in shape and f.__name__.startswith(("irfft", "hfft")):
                        continue  # NumPy's c2r transforms of a zero-length axis return uninitialised memory
                    out = report.same(f"{name} of {spec_str(x)}", lambda: f(a, **kw), lambda: f(x, **kw), tolerance(dtype))
                    if out is not None and pending:
                        report.expect(all(out.placements[m] == P for m in pending), f"{name} of {x.spec}: the pending sum was reduced: {out.spec}")
    report.finish()


def test_fft_collectives(world):
    """Unsharded transform axes: none.  A sharded one: one all_to_all (transpose, no transpose back) or one all_gather."""
    report = Report(world)
    n = world.size
    big = n > 1
    mesh = dt.DeviceMesh((n,), backend=world.kind)
    a = random_array(9, (8, 8, 5), "float64")
    x = dt.distribute_tensor(a, mesh, [Shard(0)])
    for name, (f, kw, dims) in TRANSFORMS.items():
        if 0 in dims:
            continue
        out, c = counted(lambda: f(x, **kw))
        report.expect(c.total == 0 and str(out.spec) == "S(0)", f"{name} over unsharded axes of {x.spec}: {out.spec} {c}")
    x = dt.distribute_tensor(a, mesh, [Shard(2)])
    out, c = counted(lambda: FFT.fft(x))
    report.expect(c.counts["all_to_all"] == big and c.total == big, f"fft along the sharded axis: one all_to_all, got {c}")
    report.expect(str(out.spec) == ("S(0)" if big else "R"), f"fft along the sharded axis: the sharding moves to dim 0, got {out.spec}")
    report.matches("fft along the sharded axis", out, FFT.fft(a), 1e-9)
    out, c = counted(lambda: FFT.fftn(x, axes=(0, 2)))
    report.expect(c.counts["all_to_all"] == big and c.total == big, f"fftn over (0, 2) of S(2): one all_to_all, got {c}")
    report.expect(str(out.spec) == ("S(1)" if big else "R"), f"fftn over (0, 2) of S(2): sharding on dim 1, got {out.spec}")
    report.matches("fftn over (0, 2)", out, FFT.fftn(a, axes=(0, 2)), 1e-9)
    out, c = counted(lambda: FFT.fftn(x))
    report.expect(c.counts["all_gather"] == big and c.total == big, f"fftn over every axis: one all_gather, got {c}")
    v = dt.distribute_tensor(a[:, 0, 0], mesh, [Shard(0)])
    out, c = counted(lambda: FFT.irfft(v, n=11))
    report.expect(c.counts["all_gather"] == big and c.total == big, f"irfft of a sharded vector: one all_gather, got {c}")
    p = dt.distribute_tensor(a, mesh, [P])
    out, c = counted(lambda: FFT.fftn(p, axes=(1, 2)))
    report.expect(c.total == 0 and out.placements == (P,), f"fftn of a pending sum: {out.spec} {c}")
    report.matches("fftn of a pending sum", out, FFT.fftn(a, axes=(1, 2)), 1e-9)
    # shifts: a sharded axis rolls with one exchange, and keeps its sharding
    for dim in range(3):
        x = dt.distribute_tensor(a, mesh, [Shard(dim)])
        for name, (f, kw, dims) in SHIFTS.items():
            out, c = counted(lambda: f(x, **kw))
            rolls = 1 if big and dim in dims else 0
            report.expect(c.total == c.counts["all_to_all"] <= rolls, f"{name} of {x.spec}: at most {rolls} exchange, got {c}")
            report.matches(f"{name} of {x.spec}", out, f(a, **kw), 0)
            report.expect(out.spec == x.spec, f"{name}: {out.spec}, expected {x.spec}")
    report.finish()


def test_fftfreq_is_numpy_and_combines_with_dtensors(world):
    report = Report(world)
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    a = random_array(10, (8, 6), "float64")
    x = dt.distribute_tensor(a, mesh, [Shard(0)])
    # no array argument: NumPy's own function, a plain ndarray; its values from the definition, f_k = k / (n d)
    freq = FFT.fftfreq(6, d=0.5)
    report.expect(type(freq) is np.ndarray and np.array_equal(freq, np.array([0, 1, 2, -3, -2, -1]) / 3.0),
                  f"fftfreq(6, d=0.5): {freq!r}")
    report.expect(np.array_equal(FFT.rfftfreq(6, d=2.0), np.array([0, 1, 2, 3]) / 12.0), "rfftfreq(6, d=2.0)")
    xp = dt.array_api.namespace(mesh)  # the namespace's: the same values, placed on the mesh
    placed = xp.fft.fftfreq(6, d=0.5)
    report.expect(isinstance(placed, dt.DTensor) and np.array_equal(placed.full_tensor(), freq),
                  f"xp.fft.fftfreq(6, d=0.5): {placed!r}")
    k = dt.distribute_tensor(np.broadcast_to(freq, (8, 6)).copy(), mesh, [Shard(0)])
    report.same("fft(x) * fftfreq", lambda: np.fft.fft(a) * freq, lambda: FFT.fft(x) * k, 1e-9, always=True)
    report.same("fftshift(fftfreq) as a DTensor", lambda: FFT.fftshift(np.broadcast_to(freq, (8, 6))), lambda: FFT.fftshift(k), 0, always=True)
    report.finish()


# ---------------------------------------------------------------------------
# random layouts (hypothesis), the roll and gather helpers, tracing
# ---------------------------------------------------------------------------

HYP = settings(max_examples=6 if UNDER_MPI else 25, deadline=None, phases=(Phase.explicit, Phase.reuse, Phase.generate),
               suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
RANDOM_FUNCTIONS = {
    "inv": (LA.inv, True),
    "eigvalsh": (LA.eigvalsh, True),
    "svdvals": (LA.svdvals, False),
    "slogdet": (LA.slogdet, True),
    "diagonal 1": (lambda x: LA.diagonal(x, offset=1), False),
    "trace -1": (lambda x: LA.trace(x, offset=-1), False),
    "vector_norm": (lambda x: LA.vector_norm(x, axis=(-1, 0)), False),
    "matrix_norm inf": (lambda x: LA.matrix_norm(x, ord=np.inf), False),
    "fftn": (lambda x: FFT.fftn(x, axes=(-1, -2)), False),
    "ihfft": (lambda x: FFT.ihfft(x, axis=-2), False),
    "fftshift": (FFT.fftshift, False),
}


@HYP
@given(data=st.data())
def test_random_layouts_equal_numpy(world, data):
    report = Report(world)
    mesh = data.draw(st.sampled_from(meshes(world)), label="mesh")
    ndim = data.draw(st.integers(2, 4), label="ndim")
    batch = tuple(data.draw(st.lists(st.integers(0, 9), min_size=ndim - 2, max_size=ndim - 2), label="batch"))
    rows = data.draw(st.integers(1, 7), label="rows")
    cols = data.draw(st.integers(1, 7), label="cols")
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    name = data.draw(st.sampled_from(sorted(RANDOM_FUNCTIONS)), label="function")
    f, square = RANDOM_FUNCTIONS[name]
    shape = batch + (rows, rows if square else cols)
    a = spd(ndim, batch + (rows, rows), dtype) if square else random_array(ndim, shape, dtype)
    options = [R, P] + [Shard(d) for d in range(ndim)]
    placements = [data.draw(st.sampled_from(options), label=f"mesh dim {m}") for m in range(mesh.ndim)]
    x = dt.distribute_tensor(a, mesh, placements)
    report.same(f"{name} of {spec_str(x)}", lambda: f(a), lambda: f(x), tolerance(dtype), always=True)
    report.finish()


class _SendCounting(SimulatedBackend):
    """A simulated backend that counts the rows (along axis 0) its prepared collectives send."""

    sent = 0

    def prepare(self, kind, groups, shapes, dtype, **arguments):
        self.sent += sum(shape[0] for shape in shapes.values())
        return super().prepare(kind, groups, shapes, dtype, **arguments)


def test_roll_by_one_exchange_is_np_roll_and_moves_only_rows_that_change_owner():
    """Every length, group size, layout (even, reversed, all rows on the first or the last member) and shift: one
    exchange gives np.roll, and it sends exactly the rows whose owner changes (a halo of |shift| rows a boundary)."""
    for n in range(0, 13):
        for k in range(1, 7):
            even = tuple(chunk_sizes(n, k))
            for sizes in {even, even[::-1], (n,) + (0,) * (k - 1), (0,) * (k - 1) + (n,)}:
                starts = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
                owner = np.repeat(np.arange(k), sizes)
                x = np.arange(n * 2).reshape(n, 2)
                for shift in range(-n - 2, n + 3):
                    shards = {r: x[starts[r] : starts[r + 1]] for r in range(k)}
                    backend = _SendCounting(k)
                    with dt.comm_counter() as c:
                        out = roll_shards(backend, shards, (tuple(range(k)),), 0, sizes, shift)
                    assert np.array_equal(np.concatenate([out[r] for r in range(k)]), np.roll(x, shift, 0)), (n, k, sizes, shift)
                    assert [len(out[r]) for r in range(k)] == list(sizes)
                    changing = int((owner != np.roll(owner, shift)).sum()) if n else 0  # rows whose owner changes
                    assert backend.sent == changing, (n, k, sizes, shift, backend.sent, changing)
                    assert c.total == c.counts["all_to_all"] <= (1 if k > 1 and changing else 0), (n, k, sizes, shift, c)
    sizes = (5, 5, 5, 5)
    backend = _SendCounting(4)
    roll_shards(backend, {r: np.zeros((5, 2)) for r in range(4)}, ((0, 1, 2, 3),), 0, sizes, 1)
    assert backend.sent == 4  # was 11, by two rechunks


def test_gather_blocks_is_one_all_gather(world):
    report = Report(world)
    for mesh in meshes(world):
        a = random_array(11, (5, 7, 3), "complex64")
        for placements in layouts(mesh, 3, partial=False):
            x = dt.distribute_tensor(a, mesh, placements)
            sharded = tuple(m for m, p in enumerate(x.placements) if isinstance(p, Shard))
            with dt.comm_counter() as c:
                out = gather_blocks(world.backend, x.spec, dict(x.shards), sharded)
            report.expect(c.counts["all_gather"] == (1 if sharded else 0) and c.total == c.counts["all_gather"], f"{x.spec}: {c}")
            for r, local in out.items():
                report.expect(np.array_equal(local, a), f"gather_blocks of {x.spec}: rank {r} got a wrong array")
    report.finish()


def test_traced_graphs_use_the_rules():
    g = dt.trace(lambda x: (np.linalg.inv(x) @ np.abs(np.fft.fft(x)), np.linalg.eigh(x)[0], np.linalg.diagonal(x)),
                 dt.ShapeDtype((3, 4, 4), "f4"))
    a = spd(12, (3, 4, 4), "float32")
    for got, expected in zip(g(a), (np.linalg.inv(a) @ np.abs(np.fft.fft(a)), np.linalg.eigh(a)[0], np.linalg.diagonal(a))):
        assert got.shape == expected.shape and got.dtype == expected.dtype
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("func", [LA.eigh, LA.qr, LA.slogdet, LA.svd])
def test_namedtuples_as_numpy(func):
    a = spd(13, (3, 3, 3), "float64")
    x = dt.distribute_tensor(a, dt.DeviceMesh((2,)), [Shard(1)])
    out, expected = func(x), func(a)
    assert type(out) is type(expected) and out._fields == expected._fields
