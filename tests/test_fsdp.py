"""FSDP (x TP) as a graph transformation: values equal one device, the collectives counted, flat buffers.

Every case compares against the single-device loss and gradients of the same
program (``dt.value_and_grad`` on plain arrays), on uneven batches and
parameters whose flat buckets need padding, simulated and under mpiexec.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import dtensor_np as dt
from dtensor_np.examples import train as example
from dtensor_np.passes.flat_params import FlatLayout



def _model_and_batch(rng):
    """The parameters and a batch, drawn once at import from a generator no test draws from (order-free data)."""
    params = {
        "fc1.weight": rng.normal(size=(6, 3)),   # 18 elements
        "fc1.bias": rng.normal(size=6),
        "fc2.weight": rng.normal(size=(2, 6)),
        "fc2.bias": rng.normal(size=2),
        "scale": rng.normal(size=()),            # a 0-d parameter
    }
    return params, rng.normal(size=(7, 3)), rng.normal(size=(7, 2))  # 7 rows: uneven over 2 and 4 dp ranks


PARAMS, X, Y = _model_and_batch(np.random.default_rng(7))
PLAN = {"fc1": dt.ColwiseParallel(), "fc2": dt.RowwiseParallel()}


def mlp_loss(p, x, y):
    h = np.tanh(x @ p["fc1.weight"].T + p["fc1.bias"])
    out = (h @ p["fc2.weight"].T + p["fc2.bias"]) * p["scale"]
    return np.mean((out - y) ** 2)


def _check(step, flat, grads, loss):
    want_loss, want = dt.value_and_grad(mlp_loss)(PARAMS, X, Y)
    assert abs(float(loss) - want_loss) <= 1e-12 * abs(want_loss)
    full = step.unshard(grads)
    assert set(full) == set(PARAMS)
    for name in PARAMS:
        np.testing.assert_allclose(full[name], want[name], rtol=1e-12, atol=1e-14, err_msg=name)
    for name, value in step.unshard(flat).items():
        np.testing.assert_array_equal(value, PARAMS[name])


@pytest.mark.worlds(simulated=(1, 2, 4), mpi=(2, 4))
@pytest.mark.parametrize("bucket_mb", [100.0, 1e-6])
def test_fsdp_matches_one_device(world, bucket_mb):
    mesh = dt.DeviceMesh((world.size,), ("dp",), backend=world.kind)
    step = dt.fsdp(mlp_loss, PARAMS, X, Y, mesh=mesh, bucket_mb=bucket_mb)
    flat = step.shard(PARAMS)
    with dt.comm_counter() as counter:
        loss, grads = step.value_and_grad(flat, X, Y)
    _check(step, flat, grads, loss)
    buckets = 1 if bucket_mb > 1 else len(PARAMS)
    assert step.buckets == buckets
    expected = {"all_gather": buckets, "reduce_scatter": buckets, "all_reduce": 1}  # the loss
    if world.size == 1:
        expected = {}
    assert step.collectives() == expected or world.size == 1
    assert {k: n for k, n in counter.counts.items() if n} == expected
    for key, g in grads.items():  # gradients come back flat and sharded like the parameters
        assert g.spec == flat[key].spec


@pytest.mark.worlds(simulated=(4,), mpi=(4,))
def test_fsdp_x_tp_on_a_2x2_mesh_matches_one_device(world):
    mesh = dt.DeviceMesh((2, 2), ("dp", "tp"), backend=world.kind)
    step = dt.fsdp(mlp_loss, PARAMS, X, Y, mesh=mesh, tp_plan=PLAN, bucket_mb=100.0)
    flat = step.shard(PARAMS)
    with dt.comm_counter() as counter:
        loss, grads = step.value_and_grad(flat, X, Y)
    _check(step, flat, grads, loss)
    # one bucket each way on dp; Megatron's one all_reduce on tp in the forward (fc2); the loss's on dp
    assert step.collectives() == {"all_gather": 1, "reduce_scatter": 1, "all_reduce": 2}
    assert {k: n for k, n in counter.counts.items() if n} == step.collectives()


@pytest.mark.worlds(simulated=(2, 4), mpi=(2,))
def test_optimizer_on_flat_shards_is_local(world):
    mesh = dt.DeviceMesh((world.size,), ("dp",), backend=world.kind)
    step = dt.fsdp(mlp_loss, PARAMS, X, Y, mesh=mesh, bucket_mb=1e-4)
    flat = step.shard(PARAMS)
    _, grads = step.value_and_grad(flat, X, Y)
    opt = dt.optim.adamw(0.1)
    with dt.comm_counter() as counter:
        new, _ = opt.update(grads, opt.init(flat), flat)
    assert not any(counter.counts.values())
    # the same update on the full parameters
    _, full_grads = dt.value_and_grad(mlp_loss)(PARAMS, X, Y)
    want, _ = opt.update(full_grads, opt.init(PARAMS), PARAMS)
    got = step.unshard(new)
    for name in PARAMS:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-14)


@pytest.mark.worlds(simulated=(2,), mpi=(2,))
def test_more_than_ten_buckets_keep_their_names(world):
    """Bucket names sort as text (bucket10 before bucket2): the graph's outputs follow the same order."""
    params = {f"p{i:02d}": np.full(2, float(i + 1)) for i in range(12)}
    x = np.arange(8.0).reshape(4, 2)

    def loss(p, x):
        return sum(np.sum(x @ p[k]) * (i + 1) for i, k in enumerate(sorted(p)))

    mesh = dt.DeviceMesh((world.size,), ("dp",), backend=world.kind)
    step = dt.fsdp(loss, params, x, mesh=mesh, bucket_mb=1e-9)
    assert step.buckets == 12
    flat = step.shard(params)
    _, grads = step.value_and_grad(flat, x)
    _, want = dt.value_and_grad(loss)(params, x)
    full = step.unshard(grads)
    for k in params:
        np.testing.assert_allclose(full[k], want[k])
    called = step.graph({k: v.to_local() for k, v in flat.items()}, x)[1]  # the graph's own output pytree
    for key in step.keys():
        got, expected = called[key], grads[key].to_local()
        if isinstance(got, dt.LocalTensor):
            assert all(np.array_equal(got.shards[r], expected.shards[r]) for r in got.shards), key
        else:
            np.testing.assert_array_equal(got, expected)


def test_flat_layout_pads_and_views():
    mesh = dt.DeviceMesh((4,), ("dp",))
    specs = tuple(dt.DTensorSpec(mesh, (dt.Replicate(),), dt.TensorMeta(s, "f8")) for s in [(3,), (2, 2), ()])
    layout = FlatLayout.of(specs, 0)
    assert layout.row == 2 and layout.offsets[0] == (0, 3, 7)  # 8 elements in 4 rows of 2
    full = [np.arange(3.0), np.arange(4.0).reshape(2, 2) + 10, np.array(99.0)]
    rows = np.concatenate([layout.shard_rows(r, full) for r in range(4)])
    views = layout.unflatten(0, rows)
    for v, x in zip(views, full):
        np.testing.assert_array_equal(v, x)
        assert np.shares_memory(v, rows)  # unflatten copies nothing
    back = layout.flatten(0, *full)
    np.testing.assert_array_equal(back, rows)


def test_bad_input_is_refused_before_any_collective():
    mesh = dt.DeviceMesh((2, 2), ("dp", "tp"))
    with pytest.raises(dt.ShardingError, match="tp and dp mesh dims must differ"):
        dt.fsdp(mlp_loss, PARAMS, X, Y, mesh=mesh, tp_plan=PLAN, tp_dim="dp")
    with pytest.raises(dt.ShardingError, match="bucket_mb must be a positive number"):
        dt.fsdp(mlp_loss, PARAMS, X, Y, mesh=mesh, bucket_mb=0)
    with pytest.raises(TypeError, match="returning a scalar"):
        dt.fsdp(lambda p, x, y: x @ p["fc1.weight"].T, PARAMS, X, Y, mesh=mesh)
    with pytest.raises(TypeError, match="expected a DeviceMesh"):
        dt.fsdp(mlp_loss, PARAMS, X, Y, mesh="dp")
    with pytest.raises(dt.ShardingError, match="expected at least one parameter"):
        dt.fsdp(lambda p, x, y: np.sum(x), {}, X, Y, mesh=mesh)
    with pytest.raises(TypeError, match="expected a float array for 'steps'"):
        dt.fsdp(mlp_loss, dict(PARAMS, steps=np.arange(3)), X, Y, mesh=mesh)
    step = dt.fsdp(mlp_loss, PARAMS, X, Y, mesh=mesh)
    flat = step.shard(PARAMS)
    with dt.comm_counter() as counter:
        with pytest.raises(dt.ShardingError, match="expected the flat buffers"):
            step.value_and_grad({}, X, Y)
        with pytest.raises(dt.ShardingError, match="expected a flat shard with spec"):
            step.value_and_grad({"bucket0": flat["bucket0"].redistribute([dt.Replicate()] * 2)}, X, Y)
        with pytest.raises(dt.ShardingError, match="missing"):
            step.shard({"fc1.weight": PARAMS["fc1.weight"]})
        with pytest.raises(dt.ShardingError, match="expected the flat buffers"):
            step.unshard({})
    assert counter.counts["all_gather"] == 1  # only the test's own redistribute


TINY = example.Config(layers=2, d_model=16, heads=4, d_ff=32, seq=8)


@pytest.mark.worlds(simulated=(4,), mpi=(4,))
def test_training_example_matches_one_device_for_50_steps(world):
    """The training example's float64 loss over 50 steps equals the single-device run to 1e-9 relative."""
    mesh = dt.DeviceMesh((2, 2), ("dp", "tp"), backend=world.kind)
    run = example.train(mesh, TINY, steps=50, batch_size=6, lr=3e-3, bucket_mb=0.01)
    single = example.train(None, TINY, steps=50, batch_size=6, lr=3e-3)
    assert len(run.losses) == 50
    assert run.losses[-1] < run.losses[0]  # it learns
    np.testing.assert_allclose(run.losses, single.losses, rtol=1e-9)
    per_layer_tp = 4  # Megatron: attention and MLP, one all_reduce each forward and backward
    assert run.collectives["all_reduce"] == per_layer_tp * TINY.layers + 1  # + the loss
    assert run.collectives["all_gather"] == run.collectives["reduce_scatter"] == run.buckets > 1


def test_training_example_main_writes_a_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "loss.png"
    status = example.main(["--steps", "4", "--layers", "1", "--d-model", "8", "--heads", "2", "--d-ff", "16",
                           "--seq", "4", "--plot", str(png)])
    out = capsys.readouterr().out
    assert status == 0, out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "collectives per step" in out and "OK" in out


def test_loss_fn_is_plain_numpy():
    text = example.corpus(500, seed=1)
    vocab = sorted(set(text))
    params = example.init_params(np.random.default_rng(1), TINY, len(vocab))
    x, y = example.batch(text, vocab, TINY, 3, step=0, seed=1)
    fn = functools.partial(example.loss_fn, cfg=TINY)
    value = fn(params, x, y)
    assert np.isfinite(value) and value > 0
    assert np.allclose(x.sum(axis=-1), 1) and np.allclose(y.sum(axis=-1), 1)
