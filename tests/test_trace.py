"""The tracer, the graph IR, its printing, its interpreter and its verifier (no mesh needed)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import dtensor_np as dt
from dtensor_np.graph import Constant, GraphError, Node, ShapeDtype, Var, trace, verify
from dtensor_np.graph.pytree import flatten, unflatten


def mlp(params, x):
    h = np.maximum(x @ params["fc1.weight"].T + params["fc1.bias"], 0)
    return h @ params["fc2.weight"].T + params["fc2.bias"]


def make_params(rng, d=4, f=6):
    return {
        "fc1.weight": rng.normal(size=(f, d)),
        "fc1.bias": rng.normal(size=f),
        "fc2.weight": rng.normal(size=(d, f)),
        "fc2.bias": rng.normal(size=d),
    }


@pytest.fixture
def rng():
    return np.random.default_rng(0)


# -- tracing and evaluation ----------------------------------------------------------------
def test_trace_mlp_prints_one_line_per_node_and_evaluates_like_numpy(rng):
    params, x = make_params(rng), rng.normal(size=(3, 4))
    g = verify(trace(mlp, params, x))
    assert str(g) == "\n".join(
        [
            "graph(params.fc1.bias: f64[6], params.fc1.weight: f64[6,4], params.fc2.bias: f64[4], "
            "params.fc2.weight: f64[4,6], x: f64[3,4]):",
            "  %0: f64[4,6] = transpose(params.fc1.weight)",
            "  %1: f64[3,6] = matmul(x, %0)",
            "  %2: f64[3,6] = add(%1, params.fc1.bias)",
            "  %3: f64[3,6] = maximum(%2, 0)",
            "  %4: f64[6,4] = transpose(params.fc2.weight)",
            "  %5: f64[3,4] = matmul(%3, %4)",
            "  %6: f64[3,4] = add(%5, params.fc2.bias)",
            "  return %6",
        ]
    )
    assert len(g.nodes) == 7 and g.sharding is None and g.mesh is None
    np.testing.assert_array_equal(g(params, x), mlp(params, x))
    # other values, same shapes: the graph is a program, not a recording of one result
    params2, x2 = make_params(np.random.default_rng(1)), np.random.default_rng(2).normal(size=(3, 4))
    np.testing.assert_array_equal(g(params2, x2), mlp(params2, x2))


def test_shape_dtype_example_args_give_the_same_graph(rng):
    params, x = make_params(rng), rng.normal(size=(3, 4))
    abstract = {k: ShapeDtype(v.shape, v.dtype) for k, v in params.items()}
    g1, g2 = trace(mlp, params, x), trace(mlp, abstract, ShapeDtype((3, 4), np.float64))
    assert str(g1) == str(g2)
    np.testing.assert_array_equal(g2(params, x), mlp(params, x))


def test_shape_dtype_value():
    s = dt.ShapeDtype([2, 3], "float32")
    assert s.shape == (2, 3) and s.dtype == np.float32 and s.ndim == 2 and s.size == 6
    assert str(s) == "f32[2,3]" and str(ShapeDtype((), bool)) == "bool[]" and str(ShapeDtype((1,), "i8")) == "i64[1]"
    assert s == ShapeDtype((2, 3), np.dtype("f4")) and hash(s) == hash(ShapeDtype((2, 3), "f4"))
    with pytest.raises(dt.ShardingError, match="non-negative"):
        ShapeDtype((-1,), "f4")
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.shape = (1,)  # type: ignore[misc]
    with pytest.raises(TypeError, match="expected an array, a ShapeDtype or a number"):
        trace(lambda x: x, "not an array")


def test_pytrees_in_and_out(rng):
    def fn(inputs, scale):
        a, b = inputs["pair"]
        return {"sum": a + b, "stats": (a.mean(), [b.max(axis=0), scale * 2.0]), "none": None}

    inputs = {"pair": [rng.normal(size=(2, 3)), rng.normal(size=(2, 3))]}
    scale = rng.normal(size=(3,))
    g = verify(trace(fn, inputs, scale))
    assert [v.name for v in g.inputs] == ["inputs.pair.0", "inputs.pair.1", "scale"]
    got, expected = g(inputs, scale), fn(inputs, scale)
    assert flatten(got)[1] == flatten(expected)[1]
    for a, b in zip(flatten(got)[0], flatten(expected)[0]):
        np.testing.assert_allclose(a, b)
    # tuples stay tuples, lists stay lists, dict keys are sorted
    assert isinstance(got["stats"], tuple) and isinstance(got["stats"][1], list) and got["none"] is None


def test_pytree_roundtrip_and_order():
    tree = {"b": [1, (2, None)], "a": {"y": 3, "x": 4}}
    leaves, treedef = flatten(tree)
    assert leaves == [4, 3, 1, 2] and treedef.num_leaves == 4
    assert unflatten(treedef, leaves) == tree
    with pytest.raises(TypeError, match="too many leaves"):
        unflatten(treedef, [0] * 5)


def test_nested_and_flat_params_are_interchangeable(rng):
    params, x = make_params(rng), rng.normal(size=(3, 4))
    nested = {"fc1": {"weight": params["fc1.weight"], "bias": params["fc1.bias"]},
              "fc2": {"weight": params["fc2.weight"], "bias": params["fc2.bias"]}}
    g_flat = trace(mlp, params, x)

    def nested_mlp(params, x):
        return mlp({f"{k}.{n}": v for k, d in params.items() for n, v in d.items()}, x)

    g_nested = trace(nested_mlp, nested, x)
    assert [v.name for v in g_flat.inputs] == [v.name for v in g_nested.inputs]
    np.testing.assert_array_equal(g_flat(nested, x), mlp(params, x))
    np.testing.assert_array_equal(g_nested(params, x), mlp(params, x))


def test_calling_with_wrong_arguments_says_what_was_expected(rng):
    params, x = make_params(rng), rng.normal(size=(3, 4))
    g = trace(mlp, params, x)
    with pytest.raises(TypeError, match="takes 2 arguments"):
        g(params)
    with pytest.raises(TypeError, match=r"missing \['params.fc2.bias'\]"):
        g({k: v for k, v in params.items() if k != "fc2.bias"}, x)
    with pytest.raises(TypeError, match=r"unexpected \['params.fc3.weight'\]"):
        g({**params, "fc3.weight": np.ones(2)}, x)
    with pytest.raises(TypeError, match=r"input x: expected an array f64\[3,4\], got f32\[3,4\]"):
        g(params, x.astype(np.float32))


def test_many_numpy_protocols_trace_and_match_numpy(rng):
    table = rng.normal(size=(3,))  # closed over: becomes a constant node

    def fn(a, b):
        c = np.einsum("ij,jk->ik", a, b.T) + table
        d = np.concatenate([c, -c], axis=1).reshape(2, 3, 2).swapaxes(0, 1)
        q, r = np.divmod(np.abs(d) * 3.0, 2.0)
        parts = np.split(q, 2, axis=2)
        e = np.add.reduce(parts[0], axis=0) + np.where(r.sum(axis=2) > 1, r.max(axis=2), 0.0).mean(axis=0)[:, None]
        return {
            "e": e.astype(np.float32),
            "f": d[1:, ..., ::2].transpose(2, 0, 1),
            "g": np.clip(np.tanh(a), -0.5, 0.5) ** 2,
            "n": np.float64(a.shape[0]) * np.ones_like(a),
            "s": np.exp(a).sum(),
            "sorted": np.sort(b, axis=-1),
        }

    a, b = rng.normal(size=(2, 5)), rng.normal(size=(3, 5))
    g = verify(trace(fn, a, b))
    ops = [n.op for n in g.nodes]
    for op in ("einsum", "constant", "concatenate", "divmod", "split", "add.reduce", "where", "astype", "getitem",
               "clip", "power", "ones_like", "sort"):
        assert op in ops, op
    got, expected = g(a, b), fn(a, b)
    for key in expected:
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-12, err_msg=key)
        assert got[key].dtype == expected[key].dtype and np.shape(got[key]) == np.shape(expected[key])
    divmod_node = g.nodes[ops.index("divmod")]
    assert divmod_node.out_kind == "tuple" and len(divmod_node.outputs) == 2
    assert g.nodes[ops.index("split")].out_kind == "list"


def test_static_values_and_constants(rng):
    w = rng.normal(size=(4,))

    def fn(x):
        n = np.shape(x)[0] + x.ndim + len(x)  # static: no node
        return x * w + n, w  # returning a closed-over array: a constant output

    g = trace(fn, np.ones((2, 4)))
    assert [n.op for n in g.nodes] == ["constant", "multiply", "add"]
    assert sum(isinstance(n.fn, Constant) for n in g.nodes) == 1  # one node per array object
    y, w_out = g(np.full((2, 4), 2.0))
    np.testing.assert_allclose(y, np.broadcast_to(2.0 * w + 6, (2, 4)))
    np.testing.assert_array_equal(w_out, w)


def test_values_cannot_be_read_while_tracing():
    with pytest.raises(TypeError, match="needs the value of a traced array"):
        trace(lambda x: x if x.sum() > 0 else -x, np.ones(3))
    with pytest.raises(TypeError, match="converting to a NumPy array"):
        trace(lambda x: np.asarray(x), np.ones(3))
    with pytest.raises(TypeError, match="float"):
        trace(lambda x: float(x[0]), np.ones(3))
    with pytest.raises(TypeError, match="immutable"):
        trace(lambda x: np.add(x, 1, out=x), np.ones(3))
    with pytest.raises(ValueError, match="matmul"):  # NumPy's own shape error, at trace time
        trace(lambda x: x @ x, np.ones((2, 3)))


def test_graph_is_immutable(rng):
    g = trace(mlp, make_params(rng), rng.normal(size=(3, 4)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.nodes = ()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.nodes[0].inputs = ()  # type: ignore[misc]
    assert isinstance(g.nodes, tuple) and isinstance(g.nodes[0], Node)


@given(
    m=st.integers(1, 4), k=st.integers(1, 4), n=st.integers(1, 4),
    axis=st.sampled_from([None, 0, 1, -1]), keepdims=st.booleans(), dtype=st.sampled_from(["f4", "f8", "i8"]),
)
def test_traced_contractions_and_reductions_match_numpy(m, k, n, axis, keepdims, dtype):
    def fn(a, b):
        return (a @ b - 1).sum(axis=axis, keepdims=keepdims)

    rng = np.random.default_rng(m * 100 + k * 10 + n)
    a, b = (rng.integers(-3, 4, size=s).astype(dtype) for s in ((m, k), (k, n)))
    g = verify(trace(fn, ShapeDtype((m, k), dtype), ShapeDtype((k, n), dtype)))
    got, expected = g(a, b), fn(a, b)
    assert np.shape(got) == np.shape(expected) and got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)  # small integers: every sum is exact, in f4 too


# -- the verifier ----------------------------------------------------------------------------
@pytest.fixture
def small_graph(rng):
    return trace(mlp, make_params(rng), rng.normal(size=(3, 4)))


def test_verifier_catches_a_wrong_shape(small_graph):
    g = small_graph
    bad = dataclasses.replace(g.nodes[1], outputs=(Var(g.nodes[1].outputs[0].id, ShapeDtype((3, 5), "f8")),))
    broken = dataclasses.replace(g, nodes=(g.nodes[0], bad) + g.nodes[2:])
    with pytest.raises(GraphError, match=r"node 1 \(matmul\) declares outputs \(f64\[3,5\]\), but its inputs give \(f64\[3,6\]\)"):
        verify(broken)
    with pytest.raises(GraphError, match=r"node 2 \(add\) reads %v\d+ as f64\[3,6\], but it is defined as f64\[3,5\]"):
        verify(broken, check_shapes=False)  # the consumer disagrees with the new definition


def test_verifier_catches_a_dangling_input(small_graph):
    g = small_graph
    stray = Var(999, ShapeDtype((3, 6), "f8"))
    node = g.nodes[2].with_inputs([stray, g.nodes[2].inputs[1]])
    broken = dataclasses.replace(g, nodes=g.nodes[:2] + (node,) + g.nodes[3:])
    with pytest.raises(GraphError, match=r"node 2 \(add\) reads %v999, which no input or node defines: a dangling input"):
        verify(broken)


def test_verifier_catches_nodes_out_of_order_and_cycles(small_graph):
    g = small_graph
    swapped = dataclasses.replace(g, nodes=(g.nodes[1], g.nodes[0]) + g.nodes[2:])
    with pytest.raises(GraphError, match=r"node 0 \(matmul\) reads %v\d+, which is defined only after it"):
        verify(swapped)
    node = g.nodes[3]  # maximum(%2, 0) made to read its own output: a cycle
    cyclic = dataclasses.replace(g, nodes=g.nodes[:3] + (node.with_inputs([node.outputs[0]]),) + g.nodes[4:])
    with pytest.raises(GraphError, match="defined only after it"):
        verify(cyclic)


def test_verifier_catches_double_definitions_and_undefined_outputs(small_graph):
    g = small_graph
    twice = dataclasses.replace(g.nodes[4], outputs=g.nodes[0].outputs)
    with pytest.raises(GraphError, match="again"):
        verify(dataclasses.replace(g, nodes=g.nodes[:4] + (twice,) + g.nodes[5:]), check_shapes=False)
    with pytest.raises(GraphError, match="the graph output reads"):
        verify(dataclasses.replace(g, outputs=(Var(77, ShapeDtype((3, 4), "f8")),)))
    with pytest.raises(TypeError, match="needs a Graph"):
        verify("graph")  # type: ignore[arg-type]
