"""The tensor-parallel transform: plans, shardings, redistributes, local parameters, and running on N ranks."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import dtensor_np as dt
from dtensor_np import LocalTensor, Replicate, Shard
from dtensor_np.graph import GraphError, Redistribute, graph_collectives, verify
from dtensor_np.local_tensor import local_map


def window(v):
    """An op with no sharding rule (it runs replicated): ``sliding_window_view`` of width 1 along dim 0."""
    return np.lib.stride_tricks.sliding_window_view(v, 1, axis=0)


# -- models (plain NumPy, single device) and their parameters ---------------------------------
def linear(params, name, x, layout="out_in"):
    w = params[f"{name}.weight"]
    y = x @ (w.T if layout == "out_in" else w)
    return y + params[f"{name}.bias"] if f"{name}.bias" in params else y


def mlp(params, x):
    return linear(params, "fc2", np.maximum(linear(params, "fc1", x), 0))


def two_mlps(params, x):
    h = linear(params, "fc2", np.maximum(linear(params, "fc1", x), 0))
    return linear(params, "fc4", np.maximum(linear(params, "fc3", h), 0))


def mlp_in_out(params, x):
    return linear(params, "fc2", np.maximum(linear(params, "fc1", x, "in_out"), 0), "in_out")


def colwise_only(params, x):
    return np.maximum(linear(params, "fc1", x), 0)


def make_params(layers, *, bias=True, layout="out_in", seed=0):
    """``layers``: name -> (in, out)."""
    rng = np.random.default_rng(seed)
    params = {}
    for name, (i, o) in layers.items():
        params[f"{name}.weight"] = rng.normal(size=(o, i) if layout == "out_in" else (i, o))
        if bias:
            params[f"{name}.bias"] = rng.normal(size=o)
    return params


def mlp_params(d=8, f=12, **kw):
    return make_params({"fc1": (d, f), "fc2": (f, d)}, **kw)


MLP_PLAN = {"fc1": dt.ColwiseParallel(), "fc2": dt.RowwiseParallel()}


def static_collectives(graph):
    """Collectives per kind in the graph, each redistribute node expanded with dt.plan_redistribute."""
    counts: dict[str, int] = {}
    for node in graph.nodes:
        if isinstance(node.fn, Redistribute):
            for step in dt.plan_redistribute(node.fn.src, node.fn.dst):
                if step.is_collective:
                    counts[step.kind] = counts.get(step.kind, 0) + 1
    return counts


def run(graph, params, mesh, plan, x):
    """Transform, verify, run once while counting collectives: (output, tp graph, local params, runtime counts)."""
    tp, local = dt.tensor_parallel_transform(graph, params, mesh, plan)
    verify(tp)
    with dt.comm_counter() as counter:
        y = tp(local, x)
    return y, tp, local, {k: n for k, n in counter.counts.items() if n}


# -- the main job, simulated and under MPI -------------------------------------------------------
CASES = {
    # name: (model, params, plan, collectives expected with more than one rank)
    "mlp": (mlp, mlp_params(), MLP_PLAN, {"all_reduce": 1}),
    "mlp no bias": (mlp, mlp_params(bias=False), MLP_PLAN, {"all_reduce": 1}),
    "mlp uneven hidden 30": (mlp, mlp_params(f=30), MLP_PLAN, {"all_reduce": 1}),
    "two mlps": (
        two_mlps,
        make_params({"fc1": (8, 12), "fc2": (12, 8), "fc3": (8, 20), "fc4": (20, 8)}),
        {"fc1": dt.ColwiseParallel(), "fc2": dt.RowwiseParallel(), "fc3": dt.ColwiseParallel(), "fc4": dt.RowwiseParallel()},
        {"all_reduce": 2},
    ),
    "colwise only": (colwise_only, make_params({"fc1": (8, 12)}), {"fc1": dt.ColwiseParallel()}, {"all_gather": 1}),
    "in_out layout": (
        mlp_in_out,
        mlp_params(layout="in_out"),
        {"fc1": dt.ColwiseParallel(weight_layout="in_out"), "fc2": dt.RowwiseParallel(weight_layout="in_out")},
        {"all_reduce": 1},
    ),
}


@pytest.mark.worlds(simulated=(1, 2, 4), mpi=(2, 4))
def test_tensor_parallel_mlps_equal_the_single_device_output(world):
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    x = np.random.default_rng(1).normal(size=(5, 8))
    for name, (model, params, plan, expected) in CASES.items():
        graph = verify(dt.trace(model, params, x))
        y, tp, local, counted = run(graph, params, mesh, plan, x)
        np.testing.assert_allclose(y, model(params, x), rtol=1e-6, atol=1e-12, err_msg=name)
        want = expected if world.size > 1 else {}
        assert static_collectives(tp) == want, name
        assert {k: n for k, n in graph_collectives(tp).items() if n} == want, name
        assert counted == want, name
        # local params: this rank's array under MPI, a LocalTensor of every rank's shard when simulated
        weight = local["fc1.weight"]
        shards = {world.ranks[0]: weight} if world.kind == "mpi" else weight.shards
        assert isinstance(weight, np.ndarray if world.kind == "mpi" else LocalTensor)
        full = params["fc1.weight"]
        for rank, shard in shards.items():
            shape, offset = dt.compute_local_shape_and_global_offset(
                full.shape, mesh, [plan["fc1"].placements()["weight"]], mesh.coordinate_of(rank)
            )
            np.testing.assert_array_equal(shard, full[tuple(slice(o, o + n) for o, n in zip(offset, shape))])


def test_uneven_hidden_follows_torch_chunk():
    params, x = mlp_params(f=30), np.random.default_rng(1).normal(size=(5, 8))
    graph = dt.trace(mlp, params, x)
    y, tp, local, counted = run(graph, params, dt.DeviceMesh((4,)), MLP_PLAN, x)
    assert isinstance(local["fc1.weight"], LocalTensor)
    assert [s[0] for s in local["fc1.weight"].shapes.values()] == [8, 8, 8, 6]
    assert [s[1] for s in local["fc2.weight"].shapes.values()] == [8, 8, 8, 6]
    assert list(local["fc1.bias"].shapes.values()) == [(8,), (8,), (8,), (6,)]
    assert list(local["fc2.bias"].shapes.values()) == [(8,)] * 4  # Rowwise bias: replicated
    np.testing.assert_allclose(y, mlp(params, x), rtol=1e-6)
    assert counted == {"all_reduce": 1}


def test_transformed_graph_prints_shardings_and_the_input_graph_is_unchanged():
    params, x = mlp_params(), np.ones((5, 8))
    graph = dt.trace(mlp, params, x)
    before, nodes = str(graph), graph.nodes
    tp, _ = dt.tensor_parallel_transform(graph, params, dt.DeviceMesh((2,)), MLP_PLAN)
    assert str(graph) == before and graph.nodes is nodes and graph.sharding is None
    assert all(n.sharding is None for n in graph.nodes)
    np.testing.assert_allclose(graph(params, x), mlp(params, x))
    assert str(tp) == "\n".join(
        [
            "graph(params.fc1.bias: f64[12] S(0), params.fc1.weight: f64[12,8] S(0), params.fc2.bias: f64[8] R, "
            "params.fc2.weight: f64[8,12] S(1), x: f64[5,8] R) on DeviceMesh((2,)):",
            "  %0: f64[8,12] S(1) = transpose(params.fc1.weight)",
            "  %1: f64[5,12] S(1) = matmul(x, %0)",
            "  %2: f64[5,12] S(1) = add(%1, params.fc1.bias)",
            "  %3: f64[5,12] S(1) = maximum(%2, 0)",
            "  %4: f64[12,8] S(0) = transpose(params.fc2.weight)",
            "  %5: f64[5,8] P(sum) = matmul(%3, %4)",
            "  %6: f64[5,8] R = redistribute(%5)  # P(sum)->R [all_reduce]",
            "  %7: f64[5,8] R = add(%6, params.fc2.bias)",
            "  return %7",
        ]
    )
    assert tp.mesh == dt.DeviceMesh((2,)) and [str(s) for s in tp.sharding.inputs] == ["S(0)", "S(0)", "R", "S(1)", "R"]


def test_an_op_without_a_rule_runs_replicated_and_says_so():
    def model(params, x):
        h = window(np.maximum(linear(params, "fc1", x), 0))[..., 0]  # no sharding rule for sliding_window_view
        return linear(params, "fc2", h)

    params, x = mlp_params(), np.random.default_rng(1).normal(size=(5, 8))
    y, tp, _, counted = run(dt.trace(model, params, x), params, dt.DeviceMesh((4,)), MLP_PLAN, x)
    np.testing.assert_allclose(y, model(params, x), rtol=1e-6)
    sort = next(n for n in tp.nodes if n.op == "sliding_window_view")
    assert sort.sharding.replicated
    assert sort.sharding.note == "replicated: no sharding rule for numpy.lib.stride_tricks.sliding_window_view"
    assert [str(s) for s in sort.sharding.inputs + sort.sharding.outputs] == ["R", "R"]
    line = next(line for line in str(tp).splitlines() if "= sliding_window_view(" in line)
    assert line.endswith("R = sliding_window_view(%4, 1, axis=0)  # replicated: no sharding rule for "
                         "numpy.lib.stride_tricks.sliding_window_view"), line
    # the sharded activations are gathered for it; fc2 chunks the replicated result locally and all_reduces
    assert counted == static_collectives(tp) == {"all_gather": 1, "all_reduce": 1}


def test_attention_heads_split_with_one_all_reduce():
    from dtensor_np.examples.tp_mlp import attention, init_attention

    params, x = init_attention(np.random.default_rng(0), batch=2, seq=5, hidden=16, dtype="f8")
    plan = {"q": dt.ColwiseParallel(), "k": dt.ColwiseParallel(), "v": dt.ColwiseParallel(), "o": dt.RowwiseParallel()}

    def model(params, x):
        return attention(params, x, heads=4)

    graph = verify(dt.trace(model, params, x))
    for n, expected in ((2, {"all_reduce": 1}), (4, {"all_reduce": 1}), (3, None)):
        y, tp, _, counted = run(graph, params, dt.DeviceMesh((n,)), plan, x)
        np.testing.assert_allclose(y, model(params, x), rtol=1e-6, atol=1e-12)
        if expected is not None:  # 4 heads on 3 ranks: correct, but the heads are gathered first
            assert counted == static_collectives(tp) == expected


def test_nested_params_and_a_named_tp_dim_of_a_2d_mesh():
    params, x = mlp_params(), np.random.default_rng(1).normal(size=(5, 8))
    nested = {layer: {k.split(".")[1]: v for k, v in params.items() if k.startswith(layer)} for layer in ("fc1", "fc2")}
    graph = dt.trace(mlp, params, x)
    mesh = dt.DeviceMesh((2, 2), dim_names=("dp", "tp"))
    tp, local = dt.tensor_parallel_transform(graph, nested, mesh, MLP_PLAN)
    verify(tp)
    assert sorted(local) == sorted(params)
    assert tp.sharding.inputs[1].placements == (Replicate(), Shard(0))  # fc1.weight on tp only
    np.testing.assert_allclose(tp(local, x), mlp(params, x), rtol=1e-6)
    # mesh_dim picks the dim explicitly
    tp0, local0 = dt.tensor_parallel_transform(graph, params, mesh, MLP_PLAN, mesh_dim="dp")
    assert tp0.sharding.inputs[1].placements == (Shard(0), Replicate())
    np.testing.assert_allclose(tp0(local0, x), mlp(params, x), rtol=1e-6)


def test_local_params_call_checks_what_it_is_given():
    params, x = mlp_params(), np.ones((5, 8))
    tp, local = dt.tensor_parallel_transform(dt.trace(mlp, params, x), params, dt.DeviceMesh((2,)), MLP_PLAN)
    # a replicated parameter may be one full array; a sharded one must be its shards
    np.testing.assert_allclose(tp({**local, "fc2.bias": params["fc2.bias"]}, x), mlp(params, x))
    with pytest.raises(TypeError, match=r"params.fc1.weight is S\(0\): in simulated mode pass its shards as a LocalTensor"):
        tp({**local, "fc1.weight": params["fc1.weight"]}, x)
    wrong = local_map(lambda a: a[:, :-1], local["fc1.weight"])
    with pytest.raises(TypeError, match=r"expected rank 0's shard of shape \(6, 8\) and dtype float64, got shape \(6, 7\)"):
        tp({**local, "fc1.weight": wrong}, x)
    with pytest.raises(TypeError, match=r"input x: expected an array f64\[5,8\]"):
        tp(local, np.ones((5, 9)))


def test_plan_and_mesh_errors_say_what_was_expected():
    params, x = mlp_params(), np.ones((5, 8))
    graph = dt.trace(mlp, params, x)
    mesh = dt.DeviceMesh((2,))

    def transform(plan, mesh=mesh, params=params, **kw):
        return dt.tensor_parallel_transform(graph, params, mesh, plan, **kw)

    with pytest.raises(dt.ShardingError, match=r"unknown parameter prefix 'fc3' in the plan: expected a parameter 'fc3.weight'; the layers with a weight are \['fc1', 'fc2'\]"):
        transform({"fc3": dt.ColwiseParallel()})
    with pytest.raises(dt.ShardingError, match=r"unknown parameter prefix 'fc1.weight'"):
        transform({"fc1.weight": dt.ColwiseParallel()})
    with pytest.raises(TypeError, match=r"plan\['fc1'\]: expected ColwiseParallel\(\) or RowwiseParallel\(\), got .*\(call the class\)"):
        transform({"fc1": dt.ColwiseParallel})
    with pytest.raises(dt.ShardingError, match="weight_layout must be one of"):
        dt.ColwiseParallel(weight_layout="io")
    with pytest.raises(dt.ShardingError, match=r"fc1.bias: expected shape \(8,\), the output features of fc1.weight \(12, 8\) in the 'in_out' layout, got \(12,\)"):
        transform({"fc1": dt.ColwiseParallel(weight_layout="in_out")})
    with pytest.raises(dt.ShardingError, match="needs a 1-D mesh, or a mesh dim named 'tp'"):
        transform(MLP_PLAN, mesh=dt.DeviceMesh((2, 2)))
    with pytest.raises(dt.ShardingError, match=r"missing from params"):
        transform(MLP_PLAN, params={k: v for k, v in params.items() if k != "fc2.bias"})
    with pytest.raises(dt.ShardingError, match=r"traced with f64\[12,8\], got f32\[12,8\]"):
        transform(MLP_PLAN, params={**params, "fc1.weight": params["fc1.weight"].astype("f4")})
    with pytest.raises(TypeError, match="expected a DeviceMesh"):
        transform(MLP_PLAN, mesh=(2,))
    tp, _ = transform(MLP_PLAN)
    with pytest.raises(dt.ShardingError, match="already sharded"):
        dt.tensor_parallel_transform(tp, params, mesh, MLP_PLAN)


def test_verifier_checks_the_shardings():
    params, x = mlp_params(), np.ones((5, 8))
    tp, _ = dt.tensor_parallel_transform(dt.trace(mlp, params, x), params, dt.DeviceMesh((2,)), MLP_PLAN)
    k = next(i for i, n in enumerate(tp.nodes) if n.op == "redistribute")
    moved, consumer = tp.nodes[k], tp.nodes[k + 1]
    # drop the all_reduce: the bias add would read a pending sum
    rewired = consumer.with_inputs([moved.inputs[0], consumer.inputs[1]])
    broken = dataclasses.replace(tp, nodes=tp.nodes[:k] + (rewired,) + tp.nodes[k + 2:])
    with pytest.raises(GraphError, match=r"node 6 \(add\) needs %v\d+ as R but it is P\(sum\): a redistribute is missing"):
        verify(broken)
    # an output that is not replicated
    partial = dataclasses.replace(tp, nodes=tp.nodes[:k], outputs=moved.inputs)
    with pytest.raises(GraphError, match=r"the graph output %v\d+ is P\(sum\); expected it replicated"):
        verify(partial)


def test_the_example_runs(capsys):
    from dtensor_np.examples.tp_mlp import main

    argv = ["--ranks", "2", "--batch", "2", "--seq", "4", "--hidden", "16", "--ffn", "32", "--heads", "4", "--iters", "1"]
    assert main(argv + ["--backend", "simulated"]) == 0
    out = capsys.readouterr().out
    assert "== mlp (gelu) on 2 simulated ranks ==" in out and "== attention (4 heads) on 2 simulated ranks ==" in out
    assert out.count("collectives in one forward: {'all_reduce': 1}") == 2 and out.count(" OK\n") == 2
    assert main(argv + ["--model", "mlp", "--activation", "relu", "--tol", "-1"]) == 1  # a tolerance nothing meets


@pytest.mark.worlds(simulated=(), mpi=(2,))
def test_the_example_runs_under_mpi(world, capsys):
    from dtensor_np.examples.tp_mlp import main

    argv = ["--batch", "2", "--seq", "4", "--hidden", "16", "--ffn", "32", "--heads", "4", "--iters", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    if 0 in world.ranks:
        assert "on 2 mpi ranks" in out and out.count(" OK\n") == 2
    else:
        assert out == ""


@pytest.mark.gpu
def test_cupy_arrays_run_on_the_device(cupy):
    from dtensor_np.examples.tp_mlp import attention, init_attention

    params, x = init_attention(np.random.default_rng(0), batch=2, seq=5, hidden=16, dtype="f8")
    plan = {"q": dt.ColwiseParallel(), "k": dt.ColwiseParallel(), "v": dt.ColwiseParallel(), "o": dt.RowwiseParallel()}
    d_params, d_x = {k: cupy.asarray(v) for k, v in params.items()}, cupy.asarray(x)
    graph = dt.trace(lambda p, x: attention(p, x, 4), params, x)
    tp, local = dt.tensor_parallel_transform(graph, d_params, dt.DeviceMesh((2,)), plan)
    y = tp(local, d_x)
    assert isinstance(y, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(y), attention(params, x, 4), rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(cupy.asnumpy(graph(d_params, d_x)), attention(params, x, 4), rtol=1e-9)
