"""Every feature on CuPy shards, against NumPy on the full arrays: NumPy ops and reductions, indexing and
updates, autodiff, the eager fast path, FSDP (x TP) with an optimiser step, on uneven and empty shards; and
the Array API namespace over such shards.

Each program runs twice: on NumPy shards everywhere (CI), and on CuPy shards where CuPy and a CUDA
device are found (skipped cleanly elsewhere).  Every result must stay on the device that holds its inputs:
each shard of a result is an array of the inputs' module.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Callable

import numpy as np
import pytest

import dtensor_np as dt
from dtensor_np import Replicate, Shard

HAS_CUPY = importlib.util.find_spec("cupy") is not None


def _mlp(p: dict, x: Any, y: Any) -> Any:
    h = np.maximum(x @ p["w1"] + p["b1"], 0.0)
    return np.mean((h @ p["w2"] - y) ** 2) + 0.01 * np.sum(p["w1"] * p["w1"])


def _fsdp_loss(p: dict, x: Any, y: Any) -> Any:
    h = np.tanh(x @ p["fc1.weight"].T + p["fc1.bias"])
    return np.mean((h @ p["fc2.weight"].T + p["fc2.bias"] - y) ** 2)


def _checker(kind: type, to_numpy: Callable[[Any], np.ndarray]) -> Callable[[Any, Any, str], None]:
    """``check(got, want, what)``: ``got`` a DTensor whose every shard is a ``kind``, equal to ``want`` (NumPy)."""

    def check(got: Any, want: Any, what: str) -> None:
        assert isinstance(got, dt.DTensor), f"{what}: expected a DTensor, got {type(got).__name__}"
        for rank, local in got.local_shards().items():
            assert isinstance(local, kind), f"{what}: rank {rank} holds {type(local).__name__}, expected {kind.__name__}"
        np.testing.assert_allclose(to_numpy(got.full_tensor()), want, rtol=1e-12, atol=1e-12, err_msg=what)

    return check


def _every_feature(world: Any, xp: Any, to_numpy: Callable[[Any], np.ndarray]) -> None:
    """Runs each feature on shards of module ``xp`` and compares with NumPy on the full arrays."""
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    kind = type(xp.asarray(np.zeros(1)))
    rng = np.random.default_rng(0)
    full = rng.standard_normal((7, 5))  # 7 rows: uneven shards on 2 and 4 ranks
    check = _checker(kind, to_numpy)

    for placement in (Shard(0), Shard(1), Replicate()):
        x = dt.distribute_tensor(xp.asarray(full), mesh, [placement])
        where = f"{placement} on {world}"
        # NumPy functions, reductions and contractions
        check(np.exp(x) + x * 2.0 - 1.0, np.exp(full) + full * 2.0 - 1.0, f"elementwise, {where}")
        check(np.sum(x, axis=0), full.sum(axis=0), f"sum axis 0, {where}")
        check(np.max(x, axis=1), full.max(axis=1), f"max axis 1, {where}")
        check(np.mean(x, axis=1, keepdims=True), full.mean(axis=1, keepdims=True), f"mean keepdims, {where}")
        check(x @ x.T, full @ full.T, f"matmul, {where}")
        check(np.einsum("ij,ij->j", x, x), np.einsum("ij,ij->j", full, full), f"einsum, {where}")
        check(np.transpose(x).reshape(35), full.T.reshape(35), f"transpose and reshape, {where}")
        assert float(np.sum(x)) == pytest.approx(float(full.sum()), rel=1e-12), where
        # indexing and updates (index arrays from NumPy, as a user writes them)
        check(x[1:6:2, 1:], full[1:6:2, 1:], f"basic indexing, {where}")
        rows = np.array([6, 0, 3, 3])
        check(x[rows], full[rows], f"integer array indexing, {where}")
        mask = full[:, 0] > 0
        check(x[mask], full[mask], f"boolean mask, {where}")
        added = full.copy()
        np.add.at(added, rows, 1.5)
        check(x.at[rows].add(1.5), added, f"at[].add with repeated rows, {where}")
        bumped = full.copy()
        bumped[1:3, 0] += 2.0
        for _ in range(2):  # the second call takes the fast path the first one left
            check(x.at[1:3, 0].add(2.0), bumped, f"at[].add on a slice, {where}")
        for op, ufunc in (("multiply", np.multiply), ("min", np.minimum), ("max", np.maximum)):
            updated = full.copy()
            ufunc.at(updated, (rows, slice(1, 3)), 0.25)
            check(getattr(x.at[rows, 1:3], op)(0.25), updated, f"at[].{op}, {where}")
        y = x.redistribute([placement])
        earlier = y[1:4]  # a view: it sees the writes, as in NumPy
        copied = y[1:4].copy()
        old = {rank: (shard, to_numpy(shard).copy()) for rank, shard in y.local_shards().items()}
        y[2, :] = 7.0
        y[mask, 0] = -1.0
        y[4] = np.arange(5.0)  # a NumPy value into the shards' module
        expected = full.copy()
        expected[2, :] = 7.0
        expected[mask, 0] = -1.0
        expected[4] = np.arange(5.0)
        check(y, expected, f"setitem, {where}")
        check(earlier, expected[1:4], f"setitem is seen by an earlier view, {where}")
        check(copied, full[1:4], f"setitem leaves an earlier copy unchanged, {where}")
        for rank, (shard, before) in old.items():  # no buffer written in place
            np.testing.assert_array_equal(to_numpy(shard), before, err_msg=f"rank {rank}'s old shard, {where}")
        # the eager fast path: the same op again, answered from the dispatch cache
        for _ in range(3):
            check(x * x + x, full * full + full, f"repeated op, {where}")

    # empty shards: one row over every rank leaves all but one shard empty
    one = full[:1]
    e = dt.distribute_tensor(xp.asarray(one), mesh, [Shard(0)])
    check(np.sum(e * 2.0, axis=0), (one * 2.0).sum(axis=0), f"empty shards, {world}")
    check(e.redistribute([Replicate()]), one, f"redistribute from empty shards, {world}")

    # autodiff: the gradients of a sharded MLP equal the single-device NumPy ones, on the inputs' device
    params_full = {"w1": rng.standard_normal((3, 5)), "b1": rng.standard_normal(5), "w2": rng.standard_normal((5, 2))}
    xs, ys = rng.standard_normal((7, 3)), rng.standard_normal((7, 2))
    want_value, want = dt.value_and_grad(_mlp)(params_full, xs, ys)
    places = {"w1": [Shard(1)], "b1": [Shard(0)], "w2": [Shard(0)]}
    params = {k: dt.distribute_tensor(xp.asarray(v), mesh, places[k]) for k, v in params_full.items()}
    batch = [dt.distribute_tensor(xp.asarray(a), mesh, [Shard(0)]) for a in (xs, ys)]
    value, grads = dt.value_and_grad(_mlp)(params, *batch)
    assert float(value) == pytest.approx(float(want_value), rel=1e-10), f"loss on {world}"
    for name in params_full:
        check(grads[name], want[name], f"gradient of {name} on {world}")

    # sharded training: an FSDP step (x TP on a 2x2 mesh) and an AdamW update of its flat shards
    fsdp_params = {"fc1.weight": rng.standard_normal((6, 3)), "fc1.bias": rng.standard_normal(6),
                   "fc2.weight": rng.standard_normal((2, 6)), "fc2.bias": rng.standard_normal(2)}
    want_loss, want_grads = dt.value_and_grad(_fsdp_loss)(fsdp_params, xs, ys)
    opt = dt.optim.adamw(0.1)
    want_new, _ = opt.update(want_grads, opt.init(fsdp_params), fsdp_params)
    meshes = [(dt.DeviceMesh((world.size,), ("dp",), backend=world.kind), None)]
    if world.size == 4:
        meshes.append((dt.DeviceMesh((2, 2), ("dp", "tp"), backend=world.kind),
                       {"fc1": dt.ColwiseParallel(), "fc2": dt.RowwiseParallel()}))
    on_device = {k: xp.asarray(v) for k, v in fsdp_params.items()}
    for train_mesh, plan in meshes:
        where = f"fsdp on {train_mesh.shape}, {world}"
        step = dt.fsdp(_fsdp_loss, on_device, xp.asarray(xs), xp.asarray(ys), mesh=train_mesh, tp_plan=plan)
        flat = step.shard(on_device)
        loss, grads = step.value_and_grad(flat, xp.asarray(xs), xp.asarray(ys))
        assert float(loss) == pytest.approx(float(want_loss), rel=1e-12), where
        new, _ = opt.update(grads, opt.init(flat), flat)
        for got_tree, want_tree, what in ((grads, want_grads, "gradient"), (new, want_new, "AdamW step")):
            for key, shard in got_tree.items():
                for rank, local in shard.local_shards().items():
                    assert isinstance(local, kind), f"{what} {key} on rank {rank}, {where}: {type(local).__name__}"
            for name, value in step.unshard(got_tree).items():
                np.testing.assert_allclose(to_numpy(value), want_tree[name], rtol=1e-10, atol=1e-12,
                                           err_msg=f"{what} of {name}, {where}")


def _namespace(world: Any, xp: Any, to_numpy: Callable[[Any], np.ndarray]) -> None:
    """The Array API namespace (what scikit-learn and SciPy call) over shards of module ``xp``."""
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    kind = type(xp.asarray(np.zeros(1)))
    full = np.random.default_rng(1).standard_normal((7, 5))

    check = _checker(kind, to_numpy)

    ns = dt.array_api.namespace(mesh, default="shard_first")
    a = ns.asarray(xp.asarray(full))
    check(a, full, f"namespace asarray, {world}")
    check(ns.sum(a * a, axis=0), (full * full).sum(axis=0), f"namespace sum, {world}")
    check(ns.linalg.vector_norm(a, axis=1), np.linalg.norm(full, axis=1), f"namespace vector_norm, {world}")
    check(ns.sort(a, axis=0), np.sort(full, axis=0), f"namespace sort, {world}")
    check(ns.cumulative_sum(a, axis=0), np.cumsum(full, axis=0), f"namespace cumulative_sum, {world}")
    check(ns.matmul(ns.matrix_transpose(a), a), full.T @ full, f"namespace matmul, {world}")
    check(ns.where(a > 0, a, ns.zeros_like(a)), np.where(full > 0, full, 0.0), f"namespace where, {world}")


PROGRAMS = pytest.mark.parametrize("program", [_every_feature, _namespace], ids=["features", "namespace"])


@PROGRAMS
@pytest.mark.worlds(simulated=(1, 2, 4), mpi=(2,))
def test_on_numpy_shards(world, program):
    program(world, np, np.asarray)


@PROGRAMS
@pytest.mark.gpu
@pytest.mark.worlds(simulated=(1, 2, 4), mpi=(2, 4) if HAS_CUPY else ())
def test_on_cupy_shards(world, cupy, program):
    program(world, cupy, cupy.asnumpy)
