"""Optimisers: the steps equal the update formulas written out here (PyTorch's SGD and AdamW), and on DTensors the
state is sharded like the parameters, an update issues no collective, and every rank holds the single-device values."""

from __future__ import annotations

import numpy as np
import pytest

import dtensor_np as dt
from dtensor_np import Partial, Replicate, Shard
from dtensor_np.optim import AdamState, SgdState, adamw, sgd, tree_map


def _reference_adamw(p, grads, lr, b1, b2, eps, wd):
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        p = p - lr * wd * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat = m / (1 - b1 ** t)
        v_hat = v / (1 - b2 ** t)
        p = p - lr * m_hat / (np.sqrt(v_hat) + eps)
    return p


def _reference_sgd(p, grads, lr, momentum, nesterov, wd):
    buf = None
    for g in grads:
        g = g + wd * p
        if momentum:
            buf = g.copy() if buf is None else momentum * buf + g
            g = g + momentum * buf if nesterov else buf
        p = p - lr * g
    return p


def _start_and_grads(rng):
    """A start point and five gradients, drawn once at import from a generator no test draws from."""
    return rng.standard_normal((4, 3)), [rng.standard_normal((4, 3)) for _ in range(5)]


P0, GRADS = _start_and_grads(np.random.default_rng(7))


def _run(opt, p, grads):
    state = opt.init({"w": p})
    params = {"w": p}
    for g in grads:
        params, state = opt.update({"w": g}, state, params)
    return params["w"], state


@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_adamw_equals_the_formula(wd):
    got, state = _run(adamw(0.05, b1=0.8, b2=0.95, eps=1e-6, weight_decay=wd), P0, GRADS)
    np.testing.assert_allclose(got, _reference_adamw(P0, GRADS, 0.05, 0.8, 0.95, 1e-6, wd), rtol=1e-12)
    assert isinstance(state, AdamState) and state.step == len(GRADS)


@pytest.mark.parametrize("momentum,nesterov,wd", [(0.0, False, 0.0), (0.9, False, 0.0), (0.9, True, 0.01),
                                                  (0.5, False, 0.1)])
def test_sgd_equals_the_formula(momentum, nesterov, wd):
    got, state = _run(sgd(0.1, momentum=momentum, nesterov=nesterov, weight_decay=wd), P0, GRADS)
    np.testing.assert_allclose(got, _reference_sgd(P0, GRADS, 0.1, momentum, nesterov, wd), rtol=1e-12)
    assert isinstance(state, SgdState) and (state.momentum is None) == (momentum == 0.0)


def test_updates_return_new_leaves_and_leave_inputs_alone():
    p = P0.copy()
    opt = adamw(0.1)
    state = opt.init({"w": p})
    new, new_state = opt.update({"w": GRADS[0]}, state, {"w": p})
    np.testing.assert_array_equal(p, P0)
    assert new["w"] is not p and state.step == 0 and np.all(state.mu["w"] == 0)
    assert tree_map(lambda a, b: a + b, [1, (2, 3)], [10, (20, 30)]) == [11, (22, 33)]


@pytest.mark.parametrize("make", [lambda: adamw(0.05, weight_decay=0.1), lambda: sgd(0.1, momentum=0.9)],
                         ids=["adamw", "sgd-momentum"])
def test_dtensor_updates_are_local_and_equal_single_device(world, make):
    n = world.size
    mesh = dt.DeviceMesh((n,), backend=world.kind)
    rows = 2 * n + 1  # uneven shards (and empty ones when n > rows)
    rng = np.random.default_rng(8)  # this test's own: its data do not depend on which tests ran before
    full = {"w": rng.standard_normal((rows, 3)), "b": rng.standard_normal(3), "v": rng.standard_normal((1, 5))}
    grads_full = [tree_map(lambda a: rng.standard_normal(a.shape), full) for _ in range(3)]
    placements = {"w": [Shard(0)], "b": [Replicate()], "v": [Shard(1)]}
    params = {k: dt.distribute_tensor(v, mesh, placements[k]) for k, v in full.items()}
    grads = [{k: dt.distribute_tensor(g[k], mesh, placements[k]) for k in g} for g in grads_full]
    opt = make()
    state, want_state = opt.init(params), opt.init(full)
    want = full
    with dt.comm_counter() as counter:
        for g, gf in zip(grads, grads_full):
            params, state = opt.update(g, state, params)
            want, want_state = opt.update(gf, want_state, want)
    assert sum(counter.counts.values()) == 0, counter.counts
    for k in full:
        assert params[k].placements == tuple(placements[k])
        for rank, local in params[k].local_shards().items():
            np.testing.assert_allclose(local, want[k][params[k].spec.local_index(rank)], rtol=1e-12, err_msg=k)
    buffers = state.mu if isinstance(state, AdamState) else state.momentum
    assert all(buffers[k].placements == tuple(placements[k]) for k in full)


def test_partial_gradients_are_reduced_once_and_give_the_replicated_update(world):
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    p = dt.distribute_tensor(P0, mesh, [Replicate()])
    share = dt.distribute_tensor(GRADS[0] / world.size, mesh, [Replicate()])
    g = dt.DTensor.from_local(share.to_local(), mesh, [Partial()])  # every rank holds 1/n of the sum
    opt = sgd(0.1)
    new, _ = opt.update(g, opt.init(p), p)
    np.testing.assert_allclose(new.full_tensor(), P0 - 0.1 * GRADS[0], rtol=1e-12)
