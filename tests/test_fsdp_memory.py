"""Memory-lean FSDP: reshard_after_forward and micro-batches equal one device; gathered buckets really freed.

Every case compares the loss and the gradients with ``dt.value_and_grad`` on
the full arrays (one device), on 1-D dp and 2-D dp x tp meshes, with batches
that leave some ranks an empty shard; the collectives one step issues are
counted exactly.  Under MPI one job (``mpiexec -n 4``) runs every case of
``test_every_case_under_mpi``.
"""

from __future__ import annotations

import weakref

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
import pytest

import dtensor_np as dt
from dtensor_np.examples import train as example
from dtensor_np.graph.evaluate import last_uses
from dtensor_np.graph.ir import MeshOp
from dtensor_np.passes.flat_params import FlatLayout

from test_fsdp import PARAMS, PLAN, TINY, mlp_loss

X, Y = (lambda rng: (rng.normal(size=(12, 3)), rng.normal(size=(12, 2))))(np.random.default_rng(11))  # 12 rows: micro-batches of 6 or 4, uneven over 4 dp
BACKWARD_READS = 2  # the backward reads fc2.weight (for d h) and scale; fc1.weight and the biases it does not


def _mesh(world, tp):
    if tp:
        return dt.DeviceMesh((world.size // 2, 2), ("dp", "tp"), backend=world.kind)
    return dt.DeviceMesh((world.size,), ("dp",), backend=world.kind)


def _expected(dp, tp, buckets, reshard, k):
    """The collectives of one step, counted by hand."""
    if dp == 1 and not tp:
        return {}
    gathers = buckets + (BACKWARD_READS if reshard and buckets > 1 else int(reshard))
    counts = {"all_gather": gathers * k, "all_reduce": (1 + int(tp)) * k, "reduce_scatter": buckets}
    if dp == 1:  # a 1 x 2 mesh: only tp's all_reduce
        counts = {"all_reduce": k}
    return counts


def _run_case(world, tp, bucket_mb, reshard, k):
    mesh = _mesh(world, tp)
    rows = len(X) // k
    step = dt.fsdp(mlp_loss, PARAMS, X[:rows], Y[:rows], mesh=mesh, tp_plan=PLAN if tp else None,
                   bucket_mb=bucket_mb, reshard_after_forward=reshard)
    flat = step.shard(PARAMS)
    with dt.comm_counter() as counter:
        loss, grads = step.value_and_grad(flat, X, Y, micro_batches=k)
    want_loss, want = dt.value_and_grad(mlp_loss)(PARAMS, X, Y)
    assert abs(float(loss) - want_loss) <= 1e-12 * abs(want_loss)
    full = step.unshard(grads)
    for name in PARAMS:
        np.testing.assert_allclose(full[name], want[name], rtol=1e-9, atol=1e-12, err_msg=name)
    for key, g in grads.items():
        assert g.spec == flat[key].spec
    expected = _expected(mesh.shape[0], tp, step.buckets, reshard, k)
    assert step.collectives(k) == expected
    assert {kind: n for kind, n in counter.counts.items() if n} == expected
    assert step.buckets == (1 if bucket_mb > 1 else len(PARAMS))


@pytest.mark.worlds(simulated=(1, 2, 3, 4), mpi=())
@pytest.mark.parametrize("bucket_mb", [100.0, 1e-6])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_reshard_after_forward_and_micro_batches_match_one_device(world, bucket_mb, k):
    for reshard in (False, True):
        _run_case(world, False, bucket_mb, reshard, k)


@pytest.mark.worlds(simulated=(2, 4), mpi=())
@pytest.mark.parametrize("k", [1, 2])
def test_dp_x_tp_with_reshard_and_micro_batches_matches_one_device(world, k):
    for reshard in (False, True):
        for bucket_mb in (100.0, 1e-6):
            _run_case(world, True, bucket_mb, reshard, k)


@pytest.mark.worlds(simulated=(), mpi=(4,))
def test_every_case_under_mpi(world, monkeypatch):
    _check_freed(world, monkeypatch)
    for tp in (False, True):
        for k in (1, 3):
            for reshard in (False, True):
                _run_case(world, tp, 1e-6, reshard, k)
    mesh = _mesh(world, True)
    run = example.train(mesh, TINY, steps=20, batch_size=6, lr=3e-3, bucket_mb=0.01, micro_batches=2,
                        reshard_after_forward=True)
    single = example.train(None, TINY, steps=20, batch_size=6, lr=3e-3)
    np.testing.assert_allclose(run.losses, single.losses, rtol=1e-9)


def _gathered_buffers(monkeypatch):
    """Record every gathered bucket buffer FlatLayout.unflatten sees, with weakrefs, and which were alive then."""
    calls = []
    unflatten = FlatLayout.unflatten

    def spy(self, rank, buf):
        owner = buf if buf.base is None else buf.base
        alive = [(c["layout"], c["rank"]) for c in calls if c["ref"]() is not None]
        calls.append({"layout": self, "rank": rank, "ref": weakref.ref(owner), "alive": alive})
        return unflatten(self, rank, buf)

    monkeypatch.setattr(FlatLayout, "unflatten", spy)
    return calls


@pytest.mark.worlds(simulated=(2, 3), mpi=())
def test_reshard_after_forward_frees_the_gathered_buckets(world, monkeypatch):
    """The forward's gathered buffer of a bucket is dead when the backward gathers it again."""
    _check_freed(world, monkeypatch)


def _check_freed(world, monkeypatch):
    mesh = _mesh(world, False)
    step = dt.fsdp(mlp_loss, PARAMS, X, Y, mesh=mesh, bucket_mb=1e-6, reshard_after_forward=True)
    flat = step.shard(PARAMS)
    calls = _gathered_buffers(monkeypatch)
    step.value_and_grad(flat, X, Y)
    seen, regathered = set(), 0
    for c in calls:
        key = (c["layout"], c["rank"])
        if key in seen:  # the backward's gather: the forward's buffer of this bucket is gone
            assert key not in c["alive"]
            regathered += 1
        seen.add(key)
    assert regathered == BACKWARD_READS * len(world.ranks)
    assert all(c["ref"]() is None for c in calls)  # nothing outlives the step


@pytest.mark.worlds(simulated=(2,), mpi=())
def test_without_reshard_the_buckets_stay_gathered_until_the_backward(world, monkeypatch):
    """The control: without resharding, a bucket's forward buffer is still alive when the last one is gathered."""
    mesh = _mesh(world, False)
    step = dt.fsdp(mlp_loss, PARAMS, X, Y, mesh=mesh, bucket_mb=1e-6)
    flat = step.shard(PARAMS)
    calls = _gathered_buffers(monkeypatch)
    step.value_and_grad(flat, X, Y)
    assert len(calls) == step.buckets * world.size  # one gather per bucket
    fc2_weight = step.layouts[[n for (n,) in step.names].index("fc2.weight")]
    assert (fc2_weight, 0) in calls[-1]["alive"]  # read by the backward: kept gathered


@pytest.mark.worlds(simulated=(2,), mpi=())
def test_second_gathers_start_one_bucket_ahead_and_overlap_compute(world):
    mesh = _mesh(world, False)
    step = dt.fsdp(mlp_loss, PARAMS, X, Y, mesh=mesh, bucket_mb=1e-6, reshard_after_forward=True)
    nodes = step.graph.nodes
    starts = [i for i, n in enumerate(nodes) if n.op == "all_gather.start"]
    assert len(starts) == step.buckets + BACKWARD_READS
    assert starts[0] == 0 and all(nodes[i - 1].op == "after" for i in starts[1:])  # not all at once
    for i in starts:
        wait = next(j for j in range(i + 1, len(nodes)) if nodes[j].inputs == nodes[i].outputs)
        between = [n for n in nodes[i + 1:wait] if not isinstance(n.fn, MeshOp)]
        assert between or i == starts[0], f"nothing overlaps the gather at node {i}"


@pytest.mark.worlds(simulated=(2,), mpi=())
def test_bad_micro_batches_are_refused_before_any_collective(world):
    mesh = _mesh(world, False)
    step = dt.fsdp(mlp_loss, PARAMS, X[:6], Y[:6], mesh=mesh)
    flat = step.shard(PARAMS)
    with dt.comm_counter() as counter:
        for k in (0, -1, True, 2.0, "2"):
            with pytest.raises(dt.ShardingError, match="expected micro_batches a positive int"):
                step.value_and_grad(flat, X, Y, micro_batches=k)
        with pytest.raises(dt.ShardingError, match="splits into 5 equal micro-batches"):
            step.value_and_grad(flat, X, Y, micro_batches=5)
        with pytest.raises(TypeError, match="expected an array"):  # 3 parts of 4 rows: not the traced 6
            step.value_and_grad(flat, X, Y, micro_batches=3)
        with pytest.raises(dt.ShardingError, match="expected micro_batches a positive int"):
            step.collectives(0)
    assert not any(counter.counts.values())
    with pytest.raises(TypeError, match="expected reshard_after_forward a bool"):
        dt.fsdp(mlp_loss, PARAMS, X, Y, mesh=mesh, reshard_after_forward="yes")


@pytest.mark.worlds(simulated=(4,), mpi=())
def test_training_example_with_reshard_and_micro_batches_matches_one_device(world):
    mesh = _mesh(world, True)
    run = example.train(mesh, TINY, steps=50, batch_size=6, lr=3e-3, bucket_mb=0.01, micro_batches=3,
                        reshard_after_forward=True)
    single = example.train(None, TINY, steps=50, batch_size=6, lr=3e-3)
    assert run.losses[-1] < run.losses[0]
    np.testing.assert_allclose(run.losses, single.losses, rtol=1e-9)
    per_layer_tp = 4
    assert run.collectives["all_reduce"] == 3 * (per_layer_tp * TINY.layers + 1)
    assert run.collectives["reduce_scatter"] == run.buckets
    assert run.buckets < run.collectives["all_gather"] / 3 <= 2 * run.buckets


def test_runners_drop_each_value_after_its_last_use():
    """last_uses: what the graph runners (evaluate, run_sharded) delete after each node."""
    g = dt.trace(lambda x: np.sum(np.exp(x)) + np.sum(np.sin(x)), dt.ShapeDtype((3,), "f8"))
    steps = [(tuple(v.id for v in n.inputs), tuple(v.id for v in n.outputs)) for n in g.nodes]
    dead = last_uses(steps, [v.id for v in g.outputs])
    assert [n.op for n in g.nodes] == ["exp", "sum", "sin", "sum", "add"]
    x, e, se, s, ss, out = [g.inputs[0].id] + [n.outputs[0].id for n in g.nodes]
    assert dead == ((), (e,), (x,), (s,), (se, ss))
    assert all(out not in d for d in dead)  # an output is never dropped
    np.testing.assert_allclose(g(np.arange(3.0)), np.sum(np.exp(np.arange(3.0))) + np.sum(np.sin(np.arange(3.0))))


def test_training_example_flags(capsys):
    tiny = ["--steps", "3", "--layers", "1", "--d-model", "8", "--heads", "2", "--d-ff", "16", "--seq", "4",
            "--plot", ""]
    assert example.main(tiny + ["--micro-batches", "2", "--reshard-after-forward"]) == 0
    out = capsys.readouterr().out
    assert "OK" in out and "'reduce_scatter': 1" in out
    assert example.main(tiny + ["--micro-batches", "3"]) == 2  # 3 does not divide the batch of 8
    assert "expected --micro-batches dividing --batch 8, got 3" in capsys.readouterr().err


@given(st.lists(st.tuples(st.lists(st.integers(0, 10**6), max_size=3), st.integers(0, 2)), max_size=12),
       st.integers(0, 3))
def test_last_uses_drops_every_value_once_after_its_last_read(program, inputs):
    """Property: a value is dropped exactly once, at its last read (or where it is made, if never read)."""
    steps, defined = [], list(range(inputs))
    for reads, n_out in program:
        ins = tuple(defined[r % len(defined)] for r in reads) if defined else ()
        outs = tuple(range(len(defined) + 100, len(defined) + 100 + n_out))
        steps.append((ins, outs))
        defined += outs
    keep = set(defined[-1:])
    dead = last_uses(steps, keep)
    dropped = [v for d in dead for v in d]
    assert len(dropped) == len(set(dropped))
    for v in set(defined) - keep:
        reads = [i for i, (ins, _) in enumerate(steps) if v in ins]
        made = [i for i, (_, outs) in enumerate(steps) if v in outs]
        where = max(reads) if reads else (made[0] if made else None)
        assert (where is None and v not in dropped) or v in dead[where]
    assert not keep & set(dropped)
