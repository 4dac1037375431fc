"""A training step's floor: its NumPy kernels recorded with their arguments, then run alone.

:func:`record_step` runs one step (``value_and_grad`` and the AdamW update)
with the interpreters watched and returns every kernel call it made as a
:class:`Recording`: each call's function and real arguments, and where each
argument came from.  :func:`replay` runs the kernels as a dataflow in a bare
loop: each call reads the arrays the calls before it produced in this replay
(just written, in cache, as in the step), and every array is dropped after
its last read (as the step's runner frees it).  Its time is the step's floor:
what remains of the step's time is the Python around the kernels (pytree
flattening, the optimiser's bookkeeping, the graph interpreter, the per-node
wrappers), the page faults of memory the allocator gave back to the OS and,
on a simulated mesh, the collectives (timed apart: ``comm``).

What is a kernel:

* one device (``dt.value_and_grad`` on plain arrays): every node of the
  joint graph, the NumPy call itself (``np.matmul(a, b)``, ``np.sum(x, axis=-1)``);
* a sharded step (``dt.fsdp``): every node's per-rank local function with that
  rank's arrays (the NumPy call behind a sharding rule's thin wrapper); the
  collectives are not kernels (their results are taken as recorded);
* the optimiser: the update of each parameter (or flat shard) traced
  (:func:`dtensor_np.graph.trace`) and each of its NumPy calls recorded on
  the real arrays.

Nothing here imports mpi4py.  Internal interpreter names are used (``_run_step``):
this file measures the interpreter.
"""
from __future__ import annotations

import importlib
import resource
import time
from typing import Any, Callable, Optional

import numpy as np

import dtensor_np as dt
from dtensor_np.arrays import as_array
from dtensor_np.graph import trace
from dtensor_np.graph.ir import Constant, bound_method

Call = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]

_evaluate = importlib.import_module("dtensor_np.graph.evaluate")
_distributed = importlib.import_module("dtensor_np.graph.distributed")


class Recording:
    """Kernel calls in the order a step made them, with where each array argument came from.

    An array is known by its ``id`` while recorded (every recorded array is kept alive, so no id is
    reused); an argument no recorded call produced (a parameter, a batch, a constant, a collective's
    result) is an input of the replay, taken as recorded.
    """

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.reads: list[tuple[tuple[Any, int], ...]] = []  # (position or keyword, id) of each array argument
        self.writes: list[tuple[int, ...]] = []  # the ids of each call's results
        self.several: list[bool] = []  # whether each call returns a tuple or list of results
        self.inputs: dict[int, Any] = {}
        self._produced: set[int] = set()
        self._kept: list[Any] = []

    def add(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], results: tuple[Any, ...],
            several: bool) -> None:
        """Record ``fn(*args, **kwargs)``, which gave ``results`` (one per output; a tuple or list when ``several``)."""
        reads = tuple((where, id(a)) for where, a in (*enumerate(args), *kwargs.items()) if hasattr(a, "__array__"))
        for (where, key), a in zip(reads, (args[w] if isinstance(w, int) else kwargs[w] for w, _ in reads)):
            if key not in self._produced:
                self.inputs.setdefault(key, a)
        self.calls.append((fn, args, kwargs))
        self.reads.append(reads)
        self.writes.append(tuple(id(r) for r in results))
        self.several.append(several)
        self._produced.update(id(r) for r in results)
        self._kept.extend(results)

    def program(self) -> list[tuple[Any, ...]]:
        """The calls as ``(fn, args, kwargs, positional reads, keyword reads, writes, several, drops)`` for :func:`replay`."""
        dead = _evaluate.last_uses([(tuple(k for _, k in r), w) for r, w in zip(self.reads, self.writes)], ())
        out = []
        for (fn, args, kwargs), reads, writes, several, drop in zip(self.calls, self.reads, self.writes, self.several,
                                                                    dead):
            positional = tuple((w, k) for w, k in reads if isinstance(w, int))
            keywords = tuple((w, k) for w, k in reads if not isinstance(w, int))
            out.append((fn, list(args), kwargs, positional, keywords, writes, several, drop))
        return out

    def __len__(self) -> int:
        return len(self.calls)


def graph_calls(graph: Any, *args: Any, into: Optional[Recording] = None) -> Recording:
    """The NumPy call of every node of an unsharded graph run on ``args``, with its real arguments."""
    rec = Recording() if into is None else into
    env = {v.id: x for v, x in zip(graph.inputs, _evaluate.bind_inputs(graph, args))}
    for node in graph.nodes:
        if isinstance(node.fn, Constant):
            env[node.outputs[0].id] = node.fn.value
            continue
        a, k = node.substitute([env[v.id] for v in node.inputs])
        fn = bound_method(node.fn, node.method)
        results = node.unpack(fn(*a, **k))
        rec.add(fn, a, k, results, node.out_kind != "array")
        env.update((v.id, out) for v, out in zip(node.outputs, results))
    return rec


class ShardedRecorder:
    """Watch ``run_sharded_shards``: record each local step's per-rank calls, time the other steps (``comm``)."""

    def __init__(self, into: Recording) -> None:
        self.recording_into = into
        self.comm_s = 0.0
        self.recording = False
        self._original = _distributed._run_step

    def __enter__(self) -> "ShardedRecorder":
        original, local_kind = self._original, _distributed._LOCAL

        def watched(step: Any, env: Any, ranks: Any, backend: Any, xp: Any) -> None:
            kind, node, ins = step[0], step[1], step[2]
            if kind == local_kind:
                if not self.recording:
                    original(step, env, ranks, backend, xp)
                    return
                local, outs, per_rank = node.sharding.local, step[3], {}
                for r in ranks:  # what _run_step does, each call recorded
                    args = (r, *[env[i][r] for i in ins])
                    per_rank[r] = tuple(as_array(x) for x in node.unpack(local(*args)))
                    self.recording_into.add(local, args, {}, per_rank[r], node.out_kind != "array")
                for k, out in enumerate(outs):
                    env[out] = {r: per_rank[r][k] for r in ranks}
                return
            t0 = time.process_time()
            original(step, env, ranks, backend, xp)
            self.comm_s += time.process_time() - t0

        _distributed._run_step = watched
        return self

    def __exit__(self, *exc: Any) -> None:
        _distributed._run_step = self._original


def optimizer_calls(opt: dt.optim.Optimizer, grads: Any, state: Any, params: Any, into: Recording) -> Recording:
    """The NumPy calls of one ``opt.update`` (AdamW) on plain arrays, traced and bound to the real arrays."""

    def update(g: Any, mu: Any, nu: Any, p: Any) -> Any:
        new_p, new_state = opt.update(g, dt.optim.AdamState(state.step, mu, nu), p)
        return new_p, new_state.mu, new_state.nu

    graph = trace(update, grads, state.mu, state.nu, params)
    return graph_calls(graph, grads, state.mu, state.nu, params, into=into)


def local_arrays(tree: dict[str, Any]) -> list[dict[str, Any]]:
    """One ``{name: array}`` per rank held, from a dict of DTensors (a simulated mesh holds every rank)."""
    per_rank: dict[int, dict[str, Any]] = {}
    for name, x in tree.items():
        for r, a in x.shards.items():
            per_rank.setdefault(r, {})[name] = a
    return [per_rank[r] for r in sorted(per_rank)]


def replay(rec: Recording, program: Optional[list[tuple[Any, ...]]] = None) -> None:
    """Run the recorded kernels once as a dataflow, in a bare loop (``program``: ``rec.program()``, made once)."""
    env = dict(rec.inputs)
    for fn, args, kwargs, positional, keywords, writes, several, drop in (program or rec.program()):
        a = args.copy()
        for i, k in positional:
            a[i] = env[k]
        if keywords:
            kwargs = {**kwargs, **{w: env[k] for w, k in keywords}}
        result = fn(*a, **kwargs)
        if several:
            env.update(zip(writes, result))
        else:
            env[writes[0]] = result
        for k in drop:
            del env[k]


def record_step(value_and_grad: Callable[..., Any], opt: dt.optim.Optimizer, params: Any, state: Any,
                batch: tuple[Any, ...], graph: Any = None) -> tuple[Recording, float]:
    """The kernels of one step (``value_and_grad(params, *batch)``, then ``opt.update``) and its ``comm`` seconds.

    ``graph``: the joint graph for a one-device step (plain arrays); None for a sharded step (DTensors).
    """
    rec = Recording()
    if graph is not None:
        graph_calls(graph, params, *batch, into=rec)
        _, grads = value_and_grad(params, *batch)
        return optimizer_calls(opt, grads, state, params, rec), 0.0
    with ShardedRecorder(rec) as watch:
        watch.recording = True
        _, grads = value_and_grad(params, *batch)
        watch.recording = False
        comm = []
        for _ in range(3):  # more runs for the collectives' time alone (the median)
            watch.comm_s = 0.0
            value_and_grad(params, *batch)
            comm.append(watch.comm_s)
    for g, m, v, p in zip(local_arrays(grads), local_arrays(state.mu), local_arrays(state.nu), local_arrays(params)):
        optimizer_calls(opt, g, dt.optim.AdamState(state.step, m, v), p, rec)
    return rec, float(np.median(comm))


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
