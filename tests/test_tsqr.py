"""TSQR (dtensor_np.propagation.tsqr): qr, svd and the functions of singular values of row-sharded tall matrices
(and column-sharded wide ones) against NumPy, on uneven and empty shards, rank-deficient and ill-conditioned
inputs; the factors the same on every rank and every mesh (signs fixed); one all_gather of the small R blocks,
whose size does not grow with the rows."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import dtensor_np as dt
from dtensor_np import Replicate, Shard
from dtensor_np.propagation.tsqr import flip_singular_vectors, positive_diagonal
from strategies import check_identical
from test_numpy_ops import Checks

LA = np.linalg


def cases() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    tall = rng.normal(size=(23, 4))
    deficient = tall.copy()
    deficient[:, 3] = deficient[:, 0] - 2 * deficient[:, 1]  # rank 3
    ill = tall * np.array([1.0, 1e-3, 1e-6, 1e-9])  # condition number near 1e10
    return {
        "tall": tall,
        "short shards": rng.normal(size=(5, 3)),  # on 4 ranks: 2, 2, 1, 0 rows, fewer than the columns
        "rank-deficient": deficient,
        "ill-conditioned": ill,
        "complex": rng.normal(size=(13, 3)) + 1j * rng.normal(size=(13, 3)),
        "float32": rng.normal(size=(23, 4)).astype(np.float32),
        "batch": rng.normal(size=(3, 17, 3)),
        "wide": rng.normal(size=(3, 23)),  # its columns sharded
    }


def meshes(world) -> list[dt.DeviceMesh]:
    out = [dt.DeviceMesh((world.size,), backend=world.kind)]
    if world.size == 4:
        out.append(dt.DeviceMesh((2, 2), backend=world.kind))
    return out


def placements(mesh: dt.DeviceMesh, a: np.ndarray, name: str) -> list:
    split = a.ndim - 1 if name == "wide" else a.ndim - 2
    if mesh.ndim == 1:
        return [Shard(split)]
    return [Shard(split), Shard(split)] if name != "batch" else [Shard(0), Shard(split)]


def tolerance(a: np.ndarray, name: str) -> float:
    return 1e-4 if a.dtype == np.float32 else 1e-6 if name == "ill-conditioned" else 1e-10


def close(checks: Checks, ctx: str, got: Any, expected: Any, tol: float) -> None:
    got = np.asarray(got)
    ok = got.shape == np.shape(expected) and np.allclose(got, expected, rtol=tol, atol=tol * np.max(np.abs(expected), initial=1))
    checks.expect(bool(ok), f"{ctx}: {got.ravel()[:4]} ... against {np.ravel(expected)[:4]} ...")


@pytest.mark.worlds(simulated=(1, 2, 3, 4), mpi=(2, 4))
def test_tsqr_matches_numpy_with_signs_fixed(world):
    checks = Checks(world)
    for name, a in cases().items():
        tol = tolerance(a, name)
        full_rank = name not in ("rank-deficient",)
        for mesh in meshes(world):
            x = dt.distribute_tensor(a, mesh, placements(mesh, a, name))
            ctx = f"{name} {x.spec} on {mesh.shape}"
            eye = np.eye(min(a.shape[-2:]))
            if name != "wide":  # qr: Q sharded like x, R replicated, diag(R) >= 0; R (full rank) is NumPy's up to signs
                with dt.comm_counter() as c:
                    q, r = LA.qr(x)
                checks.expect(c.total == c.counts["all_gather"] == (world.size > 1), f"{ctx}: qr collectives {c.counts}")
                checks.expect(q.placements == (x.placements if world.size > 1 else r.placements) and all(
                    not isinstance(p, Shard) or p.dim < a.ndim - 2 for p in r.placements), f"{ctx}: {q.spec}, {r.spec}")
                qf, rf = q.full_tensor(), r.full_tensor()
                if world.size == 1:  # one rank holds the matrix: NumPy's own factors, signs fixed here to compare
                    qf, rf = positive_diagonal(qf, rf)
                close(checks, f"{ctx} Q R", qf @ rf, a, tol)
                close(checks, f"{ctx} Q^H Q", np.conj(np.swapaxes(qf, -1, -2)) @ qf, eye + 0 * qf[..., :1, :1], 1e-4 if a.dtype == np.float32 else 1e-9)
                d = np.diagonal(rf, axis1=-2, axis2=-1)
                checks.expect(bool(np.all(d.real >= 0) and np.allclose(d.imag, 0)), f"{ctx}: diag(R) {d}")
                if full_rank:
                    close(checks, f"{ctx} R", rf, positive_diagonal(*LA.qr(a))[1], tol)
                    close(checks, f"{ctx} |R| mode r", np.abs(LA.qr(x, mode="r").full_tensor()), np.abs(rf), tol)
                check_identical(checks, world, f"{ctx} R", r)
            u, s, vh = LA.svd(x, full_matrices=False)
            uf, sf, vhf = u.full_tensor(), s.full_tensor(), vh.full_tensor()
            if world.size == 1:
                uf, vhf = flip_singular_vectors(uf, vhf, by_rows_of_vh=name != "wide")
            close(checks, f"{ctx} svd S", sf, LA.svd(a, compute_uv=False), tol)
            close(checks, f"{ctx} U S Vh", (uf * sf[..., None, :]) @ vhf, a, tol)
            if full_rank:
                eu, _, ev = LA.svd(a, full_matrices=False)
                eu, ev = flip_singular_vectors(eu, ev, by_rows_of_vh=name != "wide")
                close(checks, f"{ctx} svd U", uf, eu, max(tol, 1e-8) * (1e4 if name == "ill-conditioned" else 1))
                close(checks, f"{ctx} svd Vh", vhf, ev, max(tol, 1e-8) * (1e4 if name == "ill-conditioned" else 1))
            for out in (s, vh if name != "wide" else u):
                check_identical(checks, world, f"{ctx} svd", out)
            close(checks, f"{ctx} svdvals", LA.svdvals(x).full_tensor(), LA.svdvals(a), tol)
            rank = LA.matrix_rank(x).full_tensor()
            checks.expect(np.array_equal(rank, LA.matrix_rank(a)), f"{ctx}: matrix_rank {rank}")
            if a.ndim == 2 and name != "wide":  # lstsq: the first level of TSQR (propagation/least_squares.py)
                rcond = 1e-10 if name == "rank-deficient" else None
                got, want = LA.lstsq(x, x[:, 0] * 2.0 - x[:, 1], rcond)[0], LA.lstsq(a, a[:, 0] * 2.0 - a[:, 1], rcond)[0]
                close(checks, f"{ctx} lstsq", got.full_tensor(), want, max(tol, 1e-8))
            cut = {"rtol": 1e-10} if name == "rank-deficient" else {}
            close(checks, f"{ctx} pinv", LA.pinv(x, **cut).full_tensor(), LA.pinv(a, **cut), tol)
            if full_rank:
                close(checks, f"{ctx} cond", LA.cond(x).full_tensor(), LA.cond(a), max(tol, 1e-8))
            for order in (2, -2, "nuc"):
                close(checks, f"{ctx} norm {order}", LA.matrix_norm(x, ord=order).full_tensor(),
                      LA.matrix_norm(a, ord=order), max(tol, 1e-8))
    checks.finish()


@pytest.mark.worlds(simulated=(2, 4), mpi=(2,))
def test_tsqr_moves_the_small_factors_only(world):
    """One all_gather of every rank's d x d R block: the same bytes for 10x the rows (never the matrix)."""
    checks = Checks(world)
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    d, sent = 6, {}
    xp = dt.array_api.namespace(mesh)
    for rows in (40 * world.size, 400 * world.size):
        a = np.random.default_rng(rows).normal(size=(rows, d))
        x = dt.distribute_tensor(a, mesh, [Shard(0)])
        for name, f in (("qr", LA.qr), ("svd", lambda x: LA.svd(x, full_matrices=False)), ("pinv", LA.pinv),
                        ("lstsq", lambda x: LA.lstsq(x, x[:, 0])[0]), ("xp.linalg.qr", xp.linalg.qr),
                        ("xp.linalg.svd", lambda x: xp.linalg.svd(x, full_matrices=False))):
            with dt.comm_counter() as c:
                f(x)
            sent.setdefault(name, []).append((c.counts["all_gather"], c.bytes["all_gather"], c.total))
    for name, ((n1, b1, t1), (n2, b2, t2)) in sent.items():
        checks.expect(n1 == n2 == t1 == t2 == 1, f"{name}: collectives {sent[name]}, expected one all_gather")
        checks.expect(b1 == b2 and b1 <= (d + 1) * (d + 2) * 8, f"{name}: all_gather of {b1} then {b2} bytes")
    checks.finish()


def test_tsqr_stays_off_matrices_it_does_not_fit():
    """Square matrices with a batch dim to move to keep the all_to_all; qr 'complete' keeps the gather."""
    mesh = dt.DeviceMesh((4,))
    x = dt.distribute_tensor(np.random.default_rng(0).normal(size=(8, 4, 4)), mesh, [Shard(1)])
    with dt.comm_counter() as c:
        LA.svd(x, full_matrices=False)
    assert c.counts["all_to_all"] == 1 and c.total == 1, c.counts
    tall = dt.distribute_tensor(np.random.default_rng(0).normal(size=(12, 3)), mesh, [Shard(0)])
    q, r = LA.qr(tall, mode="complete")
    assert q.shape == (12, 12) and q.placements == (Replicate(),)
    np.testing.assert_allclose(q.full_tensor() @ r.full_tensor(), tall.full_tensor(), atol=1e-12)


@pytest.mark.gpu
@pytest.mark.worlds(simulated=(1, 2, 4), mpi=())
def test_tsqr_on_cupy_shards(world, cupy):
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    a = np.random.default_rng(0).normal(size=(2, 23, 4))
    x = dt.distribute_tensor(cupy.asarray(a), mesh, [Shard(1)])
    q, r = LA.qr(x)
    u, s, vh = LA.svd(x, full_matrices=False)
    assert all(isinstance(v, cupy.ndarray) for t in (q, r, u, s) for v in t.local_shards().values())
    np.testing.assert_allclose(cupy.asnumpy((q @ r).full_tensor()), a, atol=1e-10)
    np.testing.assert_allclose(cupy.asnumpy(s.full_tensor()), LA.svd(a, compute_uv=False), rtol=1e-10)
    np.testing.assert_allclose(cupy.asnumpy(r.full_tensor()), positive_diagonal(*LA.qr(a))[1], atol=1e-10)
