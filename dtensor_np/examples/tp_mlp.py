"""The main job: a single-device NumPy model, traced, rewritten for tensor parallelism, run on N ranks.

Two blocks of a transformer, written as plain NumPy functions of
``(params, x)`` with torch.nn.Linear weights (``y = x @ W.T + b``):

* ``mlp``: Linear -> GELU (or ReLU) -> Linear, 256 -> 1024 -> 256 on
  batch*seq rows; fc1 colwise, fc2 rowwise: one all_reduce;
* ``attention``: causal multi-head self-attention; q, k, v colwise (the heads
  split across ranks by the reshape and transposes), out rowwise: one
  all_reduce when the number of heads is a multiple of the ranks (otherwise
  the heads are gathered first, which is correct but communicates more).

For each, it prints the transformed graph, the collectives one forward issues
(counted statically from the graph and at run time with ``dt.comm_counter``),
the largest difference from the single-device output, and forward timings,
and exits with status 1 if the difference exceeds the tolerance.

Run it::

    python -m dtensor_np.examples.tp_mlp                 # 4 simulated ranks in this process
    python -m dtensor_np.examples.tp_mlp --ranks 2 --model mlp --activation relu
    mpiexec -n 4 python -m dtensor_np.examples.tp_mlp    # 4 MPI processes; rank 0 prints

Example:
    >>> import numpy as np
    >>> params, x = init_mlp(np.random.default_rng(0), tokens=4, hidden=8, ffn=16, dtype="f8")
    >>> mlp(params, x).shape
    (4, 8)
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np
from tqdm import tqdm

import collectives
import dtensor_np as dt
from dtensor_np.runtime import backend_for

__all__ = ["mlp", "attention", "init_mlp", "init_attention", "main"]

Params = dict[str, np.ndarray]


# -- the models: plain NumPy, written for one device ---------------------------------
def linear(params: Params, name: str, x: Any) -> Any:
    """``x @ W.T + b`` for the layer ``name`` (torch.nn.Linear weights, W of shape (out, in))."""
    return x @ params[f"{name}.weight"].T + params[f"{name}.bias"]


def gelu(x: Any) -> Any:
    """GELU, tanh approximation."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def relu(x: Any) -> Any:
    return np.maximum(x, 0)


ACTIVATIONS: dict[str, Callable[[Any], Any]] = {"gelu": gelu, "relu": relu}


def mlp(params: Params, x: Any, activation: Callable[[Any], Any] = gelu) -> Any:
    """The transformer MLP block: ``fc2(act(fc1(x)))``."""
    return linear(params, "fc2", activation(linear(params, "fc1", x)))


def attention(params: Params, x: Any, heads: int = 8) -> Any:
    """Causal multi-head self-attention on ``x`` of shape (batch, seq, hidden)."""
    b, s, d = x.shape

    def split_heads(t: Any) -> Any:  # (b, s, d) -> (b, heads, s, d / heads)
        return t.reshape(b, s, heads, d // heads).transpose(0, 2, 1, 3)

    q, k, v = (split_heads(linear(params, name, x)) for name in ("q", "k", "v"))
    mask = np.triu(np.full((s, s), -np.inf, dtype=x.dtype), 1)  # causal: no attending to later positions
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(d // heads) + mask
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = weights / weights.sum(axis=-1, keepdims=True)
    out = (weights @ v).transpose(0, 2, 1, 3).reshape(b, s, d)
    return linear(params, "o", out)


def _layer(rng: np.random.Generator, out_features: int, in_features: int, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    bound = 1.0 / np.sqrt(in_features)
    weight = rng.uniform(-bound, bound, size=(out_features, in_features)).astype(dtype)
    return weight, rng.uniform(-bound, bound, size=out_features).astype(dtype)


def init_mlp(rng: np.random.Generator, tokens: int, hidden: int, ffn: int, dtype: Any) -> tuple[Params, np.ndarray]:
    """Parameters of the MLP block (torch.nn.Linear init) and an input of ``tokens`` rows."""
    params: Params = {}
    for name, (o, i) in {"fc1": (ffn, hidden), "fc2": (hidden, ffn)}.items():
        params[f"{name}.weight"], params[f"{name}.bias"] = _layer(rng, o, i, dtype)
    return params, rng.standard_normal((tokens, hidden)).astype(dtype)


def init_attention(rng: np.random.Generator, batch: int, seq: int, hidden: int, dtype: Any) -> tuple[Params, np.ndarray]:
    """Parameters of the attention block and an input of shape (batch, seq, hidden)."""
    params: Params = {}
    for name in ("q", "k", "v", "o"):
        params[f"{name}.weight"], params[f"{name}.bias"] = _layer(rng, hidden, hidden, dtype)
    return params, rng.standard_normal((batch, seq, hidden)).astype(dtype)


# -- the job ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Job:
    """One model to parallelise: its function, parameters, input and plan."""

    name: str
    fn: Callable[[Params, Any], Any]
    params: Params
    x: np.ndarray
    plan: dict[str, Any]


@dataclass(frozen=True)
class Result:
    """What one job measured."""

    name: str
    graph: str
    static: dict[str, int]
    counted: dict[str, int]
    max_abs_diff: float
    scale: float
    single_ms: float
    tp_ms: float


def _jobs(args: argparse.Namespace) -> list[Job]:
    rng = np.random.default_rng(args.seed)  # the same parameters and inputs on every rank
    activation = ACTIVATIONS[args.activation]
    jobs = []
    if args.model in ("mlp", "all"):
        params, x = init_mlp(rng, args.batch * args.seq, args.hidden, args.ffn, args.dtype)
        plan = {"fc1": dt.ColwiseParallel(), "fc2": dt.RowwiseParallel()}
        jobs.append(Job(f"mlp ({args.activation})", functools.partial(mlp, activation=activation), params, x, plan))
    if args.model in ("attention", "all"):
        params, x = init_attention(rng, args.batch, args.seq, args.hidden, args.dtype)
        plan = {"q": dt.ColwiseParallel(), "k": dt.ColwiseParallel(), "v": dt.ColwiseParallel(), "o": dt.RowwiseParallel()}
        jobs.append(Job(f"attention ({args.heads} heads)", functools.partial(attention, heads=args.heads), params, x, plan))
    return jobs


def _time_ms(fn: Callable[[], Any], iters: int, barrier: Callable[[], None]) -> float:
    barrier()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    barrier()
    return (time.perf_counter() - start) * 1e3 / iters


def run_job(job: Job, mesh: dt.DeviceMesh, iters: int, bar: tqdm) -> Result:
    """Trace, transform, verify, run and time one job; advances ``bar`` once per step."""
    from dtensor_np.graph import graph_collectives, verify

    barrier = backend_for(mesh).barrier

    def step(label: str) -> None:
        bar.set_description(f"{job.name}: {label}")

    step("trace")
    graph = verify(dt.trace(job.fn, job.params, job.x))
    bar.update()
    step("transform")
    tp_graph, local_params = dt.tensor_parallel_transform(graph, job.params, mesh, job.plan)
    verify(tp_graph)
    bar.update()
    step("single-device forward")
    expected = job.fn(job.params, job.x)
    single_ms = _time_ms(lambda: job.fn(job.params, job.x), iters, lambda: None)
    bar.update()
    step("tensor-parallel forward")
    with dt.comm_counter() as counter:
        got = tp_graph(local_params, job.x)
    tp_ms = _time_ms(lambda: tp_graph(local_params, job.x), iters, barrier)
    bar.update()
    return Result(
        job.name,
        str(tp_graph),
        {k: n for k, n in graph_collectives(tp_graph).items() if n},
        {k: n for k, n in counter.counts.items() if n},
        float(np.max(np.abs(got - expected))),
        float(max(1.0, np.max(np.abs(expected)))),
        single_ms,
        tp_ms,
    )


def _parse(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m dtensor_np.examples.tp_mlp",
        description="Trace a single-device NumPy model, make it tensor-parallel, run it on N ranks, compare.",
    )
    parser.add_argument("--ranks", type=int, default=None, help="tensor-parallel ranks (default: the MPI world under mpiexec, else 4)")
    parser.add_argument("--backend", choices=("simulated", "mpi"), default=None, help="default: mpi under mpiexec, else simulated")
    parser.add_argument("--model", choices=("mlp", "attention", "all"), default="all")
    parser.add_argument("--activation", choices=tuple(ACTIVATIONS), default="gelu")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--ffn", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    parser.add_argument("--iters", type=int, default=3, help="timed forwards of each kind")
    parser.add_argument("--tol", type=float, default=None, help="max |TP - single| / max(1, max|single|) (default 1e-9 for float64, 1e-4 for float32)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def _report(r: Result, mesh: dt.DeviceMesh, tol: float) -> str:
    simulated = " (simulated: every rank runs in this process, one after another)" if mesh.backend == "simulated" else ""
    verdict = "OK" if r.max_abs_diff <= tol * r.scale else f"FAILED (tolerance {tol * r.scale:.3g})"
    return "\n".join(
        [
            f"== {r.name} on {mesh.size()} {mesh.backend} ranks ==",
            r.graph,
            f"collectives in the graph:   {r.static or 'none'}",
            f"collectives in one forward: {r.counted or 'none'}",
            f"max |TP - single device|:   {r.max_abs_diff:.3e}  {verdict}",
            f"forward, single device:     {r.single_ms:8.3f} ms",
            f"forward, tensor-parallel:   {r.tp_ms:8.3f} ms{simulated}",
            "",
        ]
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the example; returns the exit status (0 when every output matches the single-device one)."""
    args = _parse(argv)
    under_mpi = collectives.launched_by_mpiexec() and (collectives.mpi_world_size() or 1) > 1
    ranks = args.ranks if args.ranks is not None else (collectives.mpi_world_size() if under_mpi else 4)
    tol = args.tol if args.tol is not None else (1e-9 if args.dtype == "float64" else 1e-4)
    try:
        mesh = dt.init_device_mesh((ranks,), dim_names=("tp",), backend=args.backend)
    except dt.ShardingError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    root = 0 in backend_for(mesh).ranks
    jobs = _jobs(args)
    with tqdm(total=4 * len(jobs), disable=None if root else True, leave=False) as bar:
        results = [run_job(job, mesh, args.iters, bar) for job in jobs]
    if root:
        print("\n".join(_report(r, mesh, tol) for r in results))
    failed = [r.name for r in results if r.max_abs_diff > tol * r.scale]
    if failed and root:
        print(f"the tensor-parallel output differs from the single-device one: {failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
