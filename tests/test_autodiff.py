"""Gradients: against central finite differences (float64, every op family with a VJP rule), and on DTensors
against the single-device gradients of the same program for random shardings (simulated and under mpiexec)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dtensor_np as dt
from dtensor_np import Partial, Replicate, Shard
from dtensor_np.planner import backward_target
from test_numpy_ops import Checks

_FAMILY_DRAWS = np.random.default_rng(0)  # builds FAMILIES at import only; tests draw from their own


def _central(f, x, eps=1e-6):
    g = np.zeros_like(x)
    flat, gflat = x.reshape(-1), g.reshape(-1)
    for i in range(flat.size):
        keep = flat[i]
        flat[i] = keep + eps
        up = f(x)
        flat[i] = keep - eps
        down = f(x)
        flat[i] = keep
        gflat[i] = (up - down) / (2 * eps)
    return g


POS = lambda s, rng=_FAMILY_DRAWS: rng.uniform(0.5, 2.0, s)  # noqa: E731
ANY = lambda s, rng=_FAMILY_DRAWS: rng.standard_normal(s)  # noqa: E731
UNIT = lambda s, rng=_FAMILY_DRAWS: rng.uniform(-0.8, 0.8, s)  # noqa: E731

# name: (function of the arrays, the arrays)
FAMILIES = {
    "exp": (lambda a: np.exp(a), [ANY((3, 4))]),
    "log": (lambda a: np.log(a), [POS((3, 4))]),
    "log1p/expm1": (lambda a: np.log1p(a) + np.expm1(a), [POS((5,))]),
    "tanh/sin/cos": (lambda a: np.tanh(a) * np.sin(a) + np.cos(a), [ANY((2, 3))]),
    "sqrt/square/reciprocal": (lambda a: np.sqrt(a) + np.square(a) + np.reciprocal(a), [POS((4,))]),
    "abs/arctan": (lambda a: np.abs(a) + np.arctan(a), [POS((3,)) - 3.0]),
    "arcsin/arccos/arctanh": (lambda a: np.arcsin(a) + np.arccos(a) * np.arctanh(a), [UNIT((4,))]),
    "sinh/cosh/tan": (lambda a: np.sinh(a) + np.cosh(a) + np.tan(a), [UNIT((2, 2))]),
    "add/sub broadcast": (lambda a, b: a + b - a * 2, [ANY((3, 4)), ANY((4,))]),
    "mul/div broadcast": (lambda a, b: a * b / (b + 3.0), [ANY((3, 1)), POS((1, 4))]),
    "power": (lambda a, b: a ** b + a ** 2.0, [POS((3,)), POS((3,))]),
    "maximum/minimum": (lambda a, b: np.maximum(a, b) + np.minimum(a, 0.1), [ANY((5,)), ANY((5,))]),
    "logaddexp/arctan2": (lambda a, b: np.logaddexp(a, b) + np.arctan2(a, b), [ANY((3,)), POS((3,))]),
    "where/clip": (lambda a, b: np.where(a > 0, a * b, b) + np.clip(a, -0.5, 0.5), [ANY((6,)), ANY((6,))]),
    "matmul 2-D": (lambda a, b: a @ b, [ANY((3, 4)), ANY((4, 2))]),
    "matmul batched broadcast": (lambda a, b: a @ b, [ANY((2, 3, 4)), ANY((4, 5))]),
    "matmul vector": (lambda a, b, c: (a @ b) * (b @ c), [ANY((4,)), ANY((4, 4)), ANY((4,))]),
    "dot/outer": (lambda a, b: np.dot(a, b).sum() + np.outer(a[0], b[:, 0]), [ANY((2, 3)), ANY((3, 2))]),
    "tensordot": (lambda a, b: np.tensordot(a, b, axes=([1, 2], [0, 1])), [ANY((2, 3, 4)), ANY((3, 4, 2))]),
    "einsum": (lambda a, b: np.einsum("bij,jk->bik", a, b) + np.einsum("bij->bi", a)[..., None], [ANY((2, 3, 4)), ANY((4, 1))]),
    "sum/mean axes keepdims": (lambda a: np.sum(a, axis=(0, 2)) + np.mean(a, axis=1, keepdims=True).sum(), [ANY((2, 3, 4))]),
    "max/min/prod": (lambda a: np.max(a, axis=0) + np.min(a) + np.prod(a, axis=1, keepdims=True).sum(), [ANY((3, 4))]),
    "reshape/transpose/swap/move": (lambda a: np.moveaxis(np.swapaxes(a.reshape(4, 3, 2).T, 0, 1), 0, -1).ravel(), [ANY((2, 3, 4))]),
    "expand/squeeze": (lambda a: np.squeeze(np.expand_dims(a, (0, 2)), 0) * 2, [ANY((3, 4))]),
    "concatenate/stack": (lambda a, b: np.concatenate([a, b * 2], axis=1) + np.stack([a, b], axis=1).sum(1, keepdims=False)[:, :1], [ANY((3, 2)), ANY((3, 2))]),
    "arccosh/deg2rad/rad2deg/fabs": (lambda a: np.arccosh(a + 1.0) + np.deg2rad(a) * np.rad2deg(a) + np.fabs(a - 1.2),
                                     [POS((4,))]),
    "hypot/logaddexp2/fmax/fmin/float_power/copysign": (
        lambda a, b: np.hypot(a, b) + np.logaddexp2(a, b) + np.fmax(a, b) * np.fmin(a, 0.7) + np.float_power(a, b)
        + np.copysign(a, b - 1.0), [POS((5,)), POS((5,))]),
    "linalg aliases/matrix_transpose/vecdot": (
        lambda a, b: np.linalg.matmul(a, b) + np.linalg.tensordot(a, b, axes=1) + np.matrix_transpose(a @ b)
        + np.linalg.outer(a[0], b[:, 0]) + np.vecdot(a, b.T)[:, None], [ANY((3, 3)), ANY((3, 3))]),
    "roll/repeat": (lambda a: np.roll(a, 2, axis=1) + np.repeat(a, 2, axis=0)[::2] + np.roll(a, (1, -1), (0, 1))
                    + np.repeat(a, 3).reshape(3, 12)[:, ::3], [ANY((3, 4))]),
    "trace/inv/det": (lambda a: np.linalg.trace(a) + np.linalg.inv(a).sum(axis=(-1, -2)) + np.linalg.det(a),
                      [ANY((2, 3, 3)) + 3 * np.eye(3)]),
    "softmax cross-entropy": (lambda z, y: -np.sum(y * (z - np.max(z, axis=1, keepdims=True) - np.log(np.sum(np.exp(z - np.max(z, axis=1, keepdims=True)), axis=1, keepdims=True)))), [ANY((4, 5)), _FAMILY_DRAWS.dirichlet(np.ones(5), 4)]),
}
del POS, ANY, UNIT, _FAMILY_DRAWS  # FAMILIES is built: no test can draw from the import-time generator


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_gradients_equal_central_differences(name):
    fn, arrays = FAMILIES[name]
    arrays = [np.array(a, dtype=np.float64) for a in arrays]
    rng = np.random.default_rng(sorted(FAMILIES).index(name))  # this test's own, whatever ran before
    weights = rng.standard_normal(np.shape(fn(*arrays)))  # a random cotangent: every output element counts
    loss = lambda *xs: float(np.sum(fn(*xs) * weights))  # noqa: E731
    grads = dt.grad(lambda *xs: np.sum(fn(*xs) * weights), argnums=tuple(range(len(arrays))))(*arrays)
    grads = grads if isinstance(grads, tuple) else (grads,)
    for k, (g, a) in enumerate(zip(grads, arrays)):
        want = _central(lambda x: loss(*(x if j == k else arrays[j] for j in range(len(arrays)))), a.copy())
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6, err_msg=f"{name}: argument {k}")


def test_value_and_grad_vjp_and_pytrees():
    rng = np.random.default_rng(1)  # this test's own, whatever ran before
    params = {"w1": rng.standard_normal((4, 8)), "b1": np.zeros(8), "w2": rng.standard_normal((8, 1))}
    x, y = rng.standard_normal((5, 4)), rng.standard_normal((5, 1))

    def loss(p, x, y):
        h = np.tanh(x @ p["w1"] + p["b1"])
        return np.mean((h @ p["w2"] - y) ** 2)

    value, grads = dt.value_and_grad(loss)(params, x, y)
    assert set(grads) == set(params) and all(grads[k].shape == params[k].shape for k in params)
    assert np.isclose(float(value), loss(params, x, y))
    for k in params:
        want = _central(lambda v: loss({**params, k: v}, x, y), params[k].copy())
        np.testing.assert_allclose(grads[k], want, rtol=1e-5, atol=1e-7, err_msg=k)
    out, vjp_fn = dt.vjp(lambda a, b: a * b, np.arange(3.0), np.full(3, 2.0))
    ga, gb = vjp_fn(np.ones(3))
    assert out.tolist() == [0.0, 2.0, 4.0] and ga.tolist() == [2.0] * 3 and gb.tolist() == [0.0, 1.0, 2.0]
    (value, aux), g = dt.value_and_grad(lambda a: (np.sum(a * a), a + 1), has_aux=True)(np.ones(2))
    assert float(value) == 2.0 and aux.tolist() == [2.0, 2.0] and g.tolist() == [2.0, 2.0]
    # astype: the cotangent is cast back (float32 rounding spoils finite differences: the exact gradient is 3)
    g = dt.grad(lambda a: np.sum((a.astype(np.float32) * 2).astype(np.float64) + a))(np.arange(3.0))
    assert g.dtype == np.float64 and g.tolist() == [3.0, 3.0, 3.0]
    with pytest.raises(TypeError, match="floating-point"):
        dt.grad(lambda a: np.sum(a))(np.arange(3))
    with pytest.raises(TypeError, match="scalar"):
        dt.grad(lambda a: a * 2)(np.ones(3))


def _placements(draw, mesh_ndim, ndim, partial_ok):
    choices = [Replicate()] + [Shard(d) for d in range(ndim)] + ([Partial()] if partial_ok else [])
    return [draw(st.sampled_from(choices)) for _ in range(mesh_ndim)]


def test_dtensor_gradients_equal_single_device(world):
    """An MLP loss and op families, inputs placed at random (uneven and empty shards): the gradients equal the
    single-device ones on every rank, with their parameters' placements (Partial ones made Replicate)."""
    n = world.size
    mesh_shapes = [(n,)] + ([(2, n // 2)] if n % 2 == 0 and n >= 4 else [])

    def mlp(p, x, y):
        h = np.maximum(x @ p["w1"] + p["b1"], 0.0)
        z = h @ p["w2"]
        return np.mean((z - y) ** 2) + 0.01 * np.sum(p["w1"] * p["w1"])

    @settings(max_examples=12 if world.kind == "mpi" else 25)
    @given(st.data())
    def check(data):
        shape = data.draw(st.sampled_from(mesh_shapes))
        mesh = dt.DeviceMesh(shape, backend=world.kind)
        rows = data.draw(st.integers(1, 7))
        seed = data.draw(st.integers(0, 1000))
        rng = np.random.default_rng(seed)
        full = {"w1": rng.standard_normal((3, 5)), "b1": rng.standard_normal(5), "w2": rng.standard_normal((5, 2))}
        x, y = rng.standard_normal((rows, 3)), rng.standard_normal((rows, 2))
        want_value, want = dt.value_and_grad(mlp)(full, x, y)
        params = {k: dt.distribute_tensor(v, mesh, _placements(data.draw, mesh.ndim, v.ndim, k == "b1"))
                  for k, v in full.items()}
        xs = dt.distribute_tensor(x, mesh, _placements(data.draw, mesh.ndim, 2, False))
        ys = dt.distribute_tensor(y, mesh, _placements(data.draw, mesh.ndim, 2, False))
        value, grads = dt.value_and_grad(mlp)(params, xs, ys)
        checks = Checks(world)  # every rank records its mismatches, then all fail together
        checks.expect(np.isclose(float(value), float(want_value), rtol=1e-10, atol=0),
                      f"loss {float(value)!r}, expected {float(want_value)!r}")
        for k in full:
            want_placements = backward_target(params[k].spec).placements
            checks.expect(grads[k].placements == want_placements,
                          f"{k}: placements {grads[k].placements}, expected {want_placements}")
            for rank, local in grads[k].local_shards().items():
                block = want[k][grads[k].spec.local_index(rank)]
                checks.expect(local.shape == block.shape and np.allclose(local, block, rtol=1e-9, atol=1e-12),
                              f"{k} rank {rank}: got {local!r}, expected {block!r}")
        checks.finish()

    check()


@pytest.mark.worlds(simulated=(2, 4), mpi=(2,))
def test_every_family_on_randomly_placed_dtensors_equals_single_device(world):
    """Every op family above, its arrays placed at random (Shard of any dim, Replicate; uneven shards): the
    gradients of the same program equal the single-device ones, on every rank."""
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    rng = np.random.default_rng(11)  # the same draws on every rank
    failures = []
    for name in sorted(FAMILIES):
        fn, arrays = FAMILIES[name]
        arrays = [np.array(a, dtype=np.float64) for a in arrays]
        weights = np.random.default_rng(5).standard_normal(np.shape(fn(*arrays)))
        argnums = tuple(range(len(arrays)))
        loss = lambda *xs: np.sum(fn(*xs) * weights)  # noqa: E731
        want = dt.grad(loss, argnums=argnums)(*arrays)
        want = want if isinstance(want, tuple) else (want,)
        placed = []
        for a in arrays:
            choices = [dt.Replicate()] + [dt.Shard(d) for d in range(a.ndim)]
            placed.append(dt.distribute_tensor(a, mesh, [choices[int(rng.integers(len(choices)))]]))
        try:
            got = dt.grad(loss, argnums=argnums)(*placed)
        except dt.ShardingError as e:  # an op whose sharding rule refuses these placements says so
            failures.append(f"{name}: {e}")
            continue
        got = got if isinstance(got, tuple) else (got,)
        for k, (g, w, p) in enumerate(zip(got, want, placed)):
            if not np.allclose(g.full_tensor(), w, rtol=1e-9, atol=1e-11):
                failures.append(f"{name} argument {k} placed {p.placements}: gradients differ")
            for rank, local in g.local_shards().items():
                if not np.allclose(local, w[g.spec.local_index(rank)], rtol=1e-9, atol=1e-11):
                    failures.append(f"{name} argument {k} rank {rank}: local gradient differs")
    assert not failures, "\n".join(failures)
