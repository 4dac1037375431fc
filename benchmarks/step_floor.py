"""A training step's floor: its NumPy kernels recorded with their arguments, then timed alone.

:func:`record_step` runs one step (``value_and_grad`` and the AdamW update)
with the interpreters watched and returns every kernel call it made as
``(fn, args, kwargs)`` with its real arguments; :func:`replay` calls them in
a bare loop.  The replay's time is the step's floor: what remains of the
step's time is the Python around the kernels (pytree flattening, the
optimiser's bookkeeping, the graph interpreter, the per-node wrappers) and,
on a simulated mesh, the collectives (timed apart: ``comm``).

What is a kernel:

* one device (``dt.value_and_grad`` on plain arrays): every node of the
  joint graph, the NumPy call itself (``np.matmul(a, b)``, ``np.sum(x, axis=-1)``);
* a sharded step (``dt.fsdp``): every node's per-rank local function with that
  rank's arrays (the NumPy call behind a sharding rule's thin wrapper); the
  collectives are not kernels: their time is ``comm``;
* the optimiser: the update of each parameter (or flat shard) traced
  (:func:`dtensor_np.graph.trace`) and each of its NumPy calls recorded on
  the real arrays.

Nothing here imports mpi4py.  Internal interpreter names are used (``_steps``,
``_run_step``): this file measures them.
"""
from __future__ import annotations

import importlib
import resource
import time
from typing import Any, Callable

import numpy as np

import dtensor_np as dt
from dtensor_np.graph import trace
from dtensor_np.graph.ir import Constant, bound_method

Call = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]

_evaluate = importlib.import_module("dtensor_np.graph.evaluate")
_distributed = importlib.import_module("dtensor_np.graph.distributed")


def graph_calls(graph: Any, *args: Any) -> list[Call]:
    """The NumPy call of every node of an unsharded graph run on ``args``, with its real arguments."""
    env = {v.id: x for v, x in zip(graph.inputs, _evaluate.bind_inputs(graph, args))}
    calls: list[Call] = []
    for node in graph.nodes:
        if isinstance(node.fn, Constant):
            env[node.outputs[0].id] = node.fn.value
            continue
        a, k = node.substitute([env[v.id] for v in node.inputs])
        fn = bound_method(node.fn, node.method)
        calls.append((fn, a, k))
        for v, out in zip(node.outputs, node.unpack(fn(*a, **k))):
            env[v.id] = out
    return calls


class ShardedRecorder:
    """Watch ``run_sharded_shards``: record each local step's per-rank calls, time the other steps (``comm``)."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.comm_s = 0.0
        self.recording = False
        self._original = _distributed._run_step

    def __enter__(self) -> "ShardedRecorder":
        original, local_kind = self._original, _distributed._LOCAL

        def watched(step: Any, env: Any, ranks: Any, backend: Any, xp: Any) -> None:
            kind, node, ins = step[0], step[1], step[2]
            if kind == local_kind:
                if self.recording:
                    local = node.sharding.local
                    self.calls.extend((local, (r, *[env[i][r] for i in ins]), {}) for r in ranks)
                original(step, env, ranks, backend, xp)
                return
            t0 = time.process_time()
            original(step, env, ranks, backend, xp)
            self.comm_s += time.process_time() - t0

        _distributed._run_step = watched
        return self

    def __exit__(self, *exc: Any) -> None:
        _distributed._run_step = self._original


def optimizer_calls(opt: dt.optim.Optimizer, grads: Any, state: Any, params: Any) -> list[Call]:
    """The NumPy calls of one ``opt.update`` (AdamW) on plain arrays, traced and bound to the real arrays."""

    def update(g: Any, mu: Any, nu: Any, p: Any) -> Any:
        new_p, new_state = opt.update(g, dt.optim.AdamState(state.step, mu, nu), p)
        return new_p, new_state.mu, new_state.nu

    graph = trace(update, grads, state.mu, state.nu, params)
    return graph_calls(graph, grads, state.mu, state.nu, params)


def local_arrays(tree: dict[str, Any]) -> list[dict[str, Any]]:
    """One ``{name: array}`` per rank held, from a dict of DTensors (a simulated mesh holds every rank)."""
    per_rank: dict[int, dict[str, Any]] = {}
    for name, x in tree.items():
        for r, a in x.shards.items():
            per_rank.setdefault(r, {})[name] = a
    return [per_rank[r] for r in sorted(per_rank)]


def replay(calls: list[Call]) -> None:
    """Call every recorded kernel once, in order, in a bare loop."""
    for fn, a, k in calls:
        fn(*a, **k)


def record_step(value_and_grad: Callable[..., Any], opt: dt.optim.Optimizer, params: Any, state: Any,
                batch: tuple[Any, ...], graph: Any = None) -> tuple[list[Call], float]:
    """The kernels of one step (``value_and_grad(params, *batch)``, then ``opt.update``) and its ``comm`` seconds.

    ``graph``: the joint graph for a one-device step (plain arrays); None for a sharded step (DTensors).
    """
    if graph is not None:
        calls = graph_calls(graph, params, *batch)
        _, grads = value_and_grad(params, *batch)
        return calls + optimizer_calls(opt, grads, state, params), 0.0
    with ShardedRecorder() as rec:
        rec.recording = True
        _, grads = value_and_grad(params, *batch)
        rec.recording = False
        comm = []
        for _ in range(3):  # more runs for the collectives' time alone (the median)
            rec.comm_s = 0.0
            value_and_grad(params, *batch)
            comm.append(rec.comm_s)
    calls = rec.calls
    for g, m, v, p in zip(local_arrays(grads), local_arrays(state.mu), local_arrays(state.nu), local_arrays(params)):
        calls += optimizer_calls(opt, g, dt.optim.AdamState(state.step, m, v), p)
    return calls, float(np.median(comm))


def kernel_seconds(calls: list[Call], iters: int) -> np.ndarray:
    """``iters`` timings of :func:`replay` (seconds)."""
    out = np.empty(iters)
    for i in range(iters):
        t0 = time.process_time()
        replay(calls)
        out[i] = time.process_time() - t0
    return out


def page_faults(fn: Callable[[], Any], iters: int) -> float:
    """Minor page faults per call of ``fn`` (memory the allocator took back from the OS, touched again)."""
    return usage(fn, iters)[0]


def usage(fn: Callable[[], Any], iters: int) -> tuple[float, float, float]:
    """``(minor page faults, user CPU ms, system CPU ms)`` per call of ``fn`` (the system time: mostly the faults)."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(iters):
        fn()
    after = resource.getrusage(resource.RUSAGE_SELF)
    return ((after.ru_minflt - before.ru_minflt) / iters, (after.ru_utime - before.ru_utime) / iters * 1e3,
            (after.ru_stime - before.ru_stime) / iters * 1e3)
