"""The training step near its kernels: memory kept between steps (same values, no page faults), nodes
with static shapes and axes called directly (same values), and the floor benchmark (``benchmarks/train_step.py --floor``: a step's NumPy kernels recorded and replayed).

No timing is asserted: the benchmark prints the times; these tests check that keeping freed memory
changes no value a step computes and stops the page faults of each step, and that the recorded kernels
are the step's (replayed, they give its values).
"""
from __future__ import annotations

import functools
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dtensor_np as dt
from dtensor_np.autodiff import grad_graph
from dtensor_np.examples import train as example
from dtensor_np.graph.evaluate import bind_inputs
from dtensor_np.graph.ir import Constant
from dtensor_np.graph.pytree import unflatten
from dtensor_np.passes.pruning import prune

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("step_floor", ROOT / "benchmarks" / "step_floor.py")
step_floor = importlib.util.module_from_spec(_spec)  # loaded by path: benchmarks/ stays off sys.path
_spec.loader.exec_module(step_floor)

# In a fresh process (keep_freed_memory changes the process's allocator for good): a few steps of the
# training job on one device and on a 2x2 simulated mesh with glibc's defaults, then with freed memory
# kept; the losses and final parameters of each, and the page faults of the steady steps.
_SCRIPT = r"""
import functools, json, sys
import numpy as np
import dtensor_np as dt
from dtensor_np.autodiff import grad_graph
from dtensor_np.examples import train as example
from dtensor_np.graph.evaluate import bind_inputs
from dtensor_np.graph.ir import Constant
from dtensor_np.graph.pytree import unflatten
from dtensor_np.passes.pruning import prune
sys.path.insert(0, sys.argv[1])
import step_floor

cfg = example.Config(layers=1, d_model=64, heads=4, d_ff=256, seq=32)
text = example.corpus(3000, 0)
vocab = sorted(set(text))

def run(mesh):
    params = example.init_params(np.random.default_rng(0), cfg, len(vocab))
    x, y = example.batch(text, vocab, cfg, 8, 0, 0)
    fn = functools.partial(example.loss_fn, cfg=cfg)
    opt = dt.optim.adamw(3e-3)
    if mesh is None:
        value_and_grad, held = dt.value_and_grad(fn), params
    else:
        step = dt.fsdp(fn, params, x, y, mesh=mesh, tp_plan=example.plan(cfg), bucket_mb=0.1)
        value_and_grad, held = step.value_and_grad, step.shard(params)
    state, losses = opt.init(held), []

    def one():
        nonlocal held, state
        loss, grads = value_and_grad(held, *example.batch(text, vocab, cfg, 8, len(losses), 0))
        held, state = opt.update(grads, state, held)
        losses.append(float(loss))

    for _ in range(6):  # the heap grows to the step's peak over the first few
        one()
    faults = step_floor.page_faults(one, 6)
    final = held if mesh is None else step.unshard(held)
    return {"losses": [repr(v) for v in losses], "faults": faults,
            "params": {k: np.asarray(v).tobytes().hex() for k, v in sorted(final.items())}}

meshes = [None, dt.DeviceMesh((2, 2), ("dp", "tp"))]
before = [run(m) for m in meshes]
kept = example.keep_freed_memory()
after = [run(m) for m in meshes]
print(json.dumps({"kept": kept, "before": before, "after": after}))
"""


def test_keeping_freed_memory_changes_no_value_and_stops_the_page_faults_of_each_step():
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(ROOT / "benchmarks")], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["kept"] is True  # glibc (the CI's C library): the parameters were accepted
    for before, after in zip(out["before"], out["after"]):
        assert after["losses"] == before["losses"]  # bitwise: repr of every loss
        assert after["params"] == before["params"]  # bitwise: every byte of every parameter
        assert before["faults"] > 200, before["faults"]  # glibc's default gives memory back every step
        assert after["faults"] < before["faults"] / 5, (before["faults"], after["faults"])  # measured: 1/10-1/100


def test_keep_freed_memory_refuses_a_bad_limit():
    with pytest.raises(ValueError, match="expected limit_mib from 1 to 2047, got 0"):
        example.keep_freed_memory(0)
    with pytest.raises(TypeError, match="expected limit_mib as an int, got float"):
        example.keep_freed_memory(1.5)


CFG = example.Config(layers=1, d_model=16, heads=2, d_ff=32, seq=8)


def _model(batch: int = 4):
    text = example.corpus(500, 0)
    vocab = sorted(set(text))
    params = example.init_params(np.random.default_rng(0), CFG, len(vocab))
    x, y = example.batch(text, vocab, CFG, batch, 0, 0)
    return params, x, y, functools.partial(example.loss_fn, cfg=CFG)


def _bound_call_by_call(graph, *args):
    """The graph run with every node bound by ``Node.call`` (what ``evaluate`` did before its direct calls)."""
    env = {v.id: x for v, x in zip(graph.inputs, bind_inputs(graph, args))}
    for node in graph.nodes:
        values = [env[v.id] for v in node.inputs]
        results = (node.fn.value,) if isinstance(node.fn, Constant) else node.unpack(node.call(values))
        env.update((v.id, r) for v, r in zip(node.outputs, results))
    return unflatten(graph.out_tree, [env[v.id] for v in graph.outputs])


def test_training_steps_are_bitwise_those_of_the_graph_bound_call_by_call():
    params, x, y, fn = _model()
    joint = prune(grad_graph(dt.graph.trace(fn, params, x, y), (0,)))
    static = sum(1 for n in joint.nodes if n.params and any(type(a) in (tuple, list) for a in n.params.args))
    assert static > 10  # reshapes, transposes, sums over axes: the nodes now called directly
    opt = dt.optim.adamw(3e-3)
    runs = []
    for run in (dt.value_and_grad(fn), lambda p, x, y: _bound_call_by_call(joint, p, x, y)):
        held, state, losses = params, opt.init(params), []
        for _ in range(4):
            loss, grads = run(held, x, y)
            held, state = opt.update(grads, state, held)
            losses.append(float(loss))
        runs.append((losses, held))
    (fast, fast_params), (slow, slow_params) = runs
    assert fast == slow
    assert all(fast_params[k].tobytes() == slow_params[k].tobytes() for k in params)


def test_recorded_kernels_are_the_steps_own_calls_on_one_device():
    params, x, y, fn = _model()
    opt = dt.optim.adamw(1e-3)
    state = opt.init(params)
    joint = prune(grad_graph(dt.graph.trace(fn, params, x, y), (0,)))
    rec, comm = step_floor.record_step(dt.value_and_grad(fn), opt, params, state, (x, y), joint)
    n_graph = sum(1 for node in joint.nodes if not isinstance(node.fn, dt.graph.Constant))
    assert comm == 0.0 and len(rec) > n_graph  # every node of the joint graph, then AdamW's calls
    # the replay's inputs are the parameters and the batch (and the graph's constants), nothing computed
    assert {id(a) for a in (*params.values(), x, y)} <= set(rec.inputs)
    assert all(key not in rec.inputs for writes in rec.writes for key in writes)
    # replayed as a dataflow, the calls give the step's values: the loss, and AdamW's new parameters
    seen = []
    traced = [(lambda f: (lambda *a, **k: seen.append(f(*a, **k)) or seen[-1]))(f) for f, _, _ in rec.calls]
    program = [(t, *rest) for t, (_, *rest) in zip(traced, rec.program())]
    step_floor.replay(rec, program)
    loss, grads = dt.value_and_grad(fn)(params, x, y)
    new_params, _ = opt.update(grads, state, params)
    assert any(np.ndim(r) == 0 and float(r) == float(loss) for r in seen[:n_graph])
    for name, want in new_params.items():
        assert any(np.shape(r) == want.shape and np.array_equal(r, want) for r in seen[n_graph:]), name


def test_recorded_kernels_of_a_sharded_step_are_per_rank_and_leave_the_collectives_out():
    params, x, y, fn = _model()
    mesh = dt.DeviceMesh((2, 2), ("dp", "tp"))
    step = dt.fsdp(fn, params, x, y, mesh=mesh, tp_plan=example.plan(CFG), bucket_mb=0.01)
    flat = step.shard(params)
    opt = dt.optim.adamw(1e-3)
    state = opt.init(flat)
    with dt.comm_counter() as counter:
        rec, comm = step_floor.record_step(step.value_and_grad, opt, flat, state, (x, y))
    assert comm > 0.0  # the collectives ran (timed apart), none of them is a recorded call
    with dt.comm_counter() as replayed:
        step_floor.replay(rec)
    assert sum(replayed.counts.values()) == 0 and sum(counter.counts.values()) > 0
    ranks = {a[0] for f, a, k in rec.calls if a and type(a[0]) is int}
    assert ranks == {0, 1, 2, 3}  # each local step once per rank of the simulated mesh


def test_floor_benchmark_writes_a_row_per_layout(tmp_path: Path):
    out = tmp_path / "rows.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "train_step.py"), "--floor", "--quick", "--json", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())
    assert [r["layout"] for r in rows] == ["one device", "2x1 simulated", "1x2 simulated", "2x2 simulated"]
    for r in rows:
        assert r["step_ms"] > 0 and r["kernels_ms"] > 0 and r["kernel_calls"] > 0
        assert r["python_ms"] == pytest.approx(r["step_ms"] - r["kernels_ms"] - r["comm_ms"])
        assert r["freed_memory"] == "kept: True"
    try:
        import torch  # noqa: F401
    except ImportError:
        assert all(r["torch_ms"] is None for r in rows) and "torch is not installed" in done.stdout
    else:
        assert all(r["torch_ms"] > 0 for r in rows)
