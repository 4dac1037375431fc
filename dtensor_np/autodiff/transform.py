"""Reverse-mode differentiation of a traced graph: ``grad_graph(graph, argnums)`` -> the joint graph.

The joint graph takes the forward graph's arguments and returns ``(outputs,
cotangents of the arguments in argnums)``.  It is built by tracing a replay:
every forward node runs again on tracers, then the nodes are walked in
reverse and each one's VJP rule (:mod:`dtensor_np.autodiff.rules`), plain
NumPy code, records the backward nodes.  So the result is an ordinary graph:
it prints, verifies, shards (``shard_graph``, ``tensor_parallel_transform``,
the FSDP transform), lowers and buckets like any other, and its backward
collectives come from the same sharding rules as its forward ones.

The outputs' cotangents start as ones (a scalar loss: the gradient); a value
that reaches no output gets a zero cotangent.

Example:
    >>> import numpy as np
    >>> from dtensor_np.graph import trace
    >>> g = trace(lambda w, x: np.sum(np.tanh(x @ w)), np.ones((3, 2)), np.ones((4, 3)))
    >>> joint = grad_graph(g, argnums=(0,))
    >>> loss, (gw,) = joint(np.full((3, 2), 0.1), np.ones((4, 3)))
    >>> round(float(loss), 6), gw.shape, round(float(gw[0, 0]), 6)
    (2.330501, (3, 2), 3.660548)
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from ..graph.evaluate import bind_inputs
from ..graph.graph import Graph
from ..graph.ir import Constant, ShapeDtype
from ..graph.pytree import flatten, unflatten
from ..graph.tracer import trace
from .rules import ZERO_GRADIENT, Call, vjp_rule

__all__ = ["grad_graph", "example_arguments"]


def example_arguments(graph: Graph) -> list[Any]:
    """Abstract arguments a graph can be traced with again: per argument a flat dict of dotted paths, or one leaf."""
    args: list[Any] = [dict() for _ in graph.arg_names]
    for (arg, path), var in zip(graph.input_keys, graph.inputs):
        if path == "":
            args[arg] = var.aval
        else:
            args[arg][path] = var.aval
    return args


def _paths(template: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    """(path, leaf) of every leaf of a call's arguments: ints index sequences, strings name keywords."""
    if isinstance(template, (list, tuple)):
        out = []
        for i, x in enumerate(template):
            out += _paths(x, prefix + (i,))
        return out
    return [(prefix, template)]


def grad_graph(graph: Graph, argnums: Sequence[int] = (0,), *, seeds: bool = False,
               differentiated: Optional[Sequence[int]] = None) -> Graph:
    """The joint forward and backward graph of ``graph`` (see the module doc); ``graph`` must be unsharded.

    With ``seeds`` the joint graph takes one more argument, the outputs'
    cotangents (shaped like the outputs), instead of starting from ones: a VJP.
    ``differentiated`` names the output leaves that start with ones (default:
    all); the others (an auxiliary output) start with no cotangent.

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> g = dt.trace(lambda x: np.sum(x * x), dt.ShapeDtype((2,), "f8"))
        >>> joint = grad_graph(g)
        >>> len(joint.outputs) > len(g.outputs)
        True
    """
    if graph.sharding is not None:
        raise TypeError("grad_graph differentiates an unsharded graph; shard the joint graph afterwards")
    argnums = tuple(argnums)
    for a in argnums:
        if not 0 <= a < len(graph.arg_names):
            raise TypeError(f"argnums {argnums}: the graph takes {len(graph.arg_names)} arguments")
    wrt = [i for i, (arg, _) in enumerate(graph.input_keys) if arg in argnums]
    for i in wrt:
        dtype = graph.inputs[i].aval.dtype
        if dtype.kind not in "fc":
            raise TypeError(
                f"grad needs floating-point inputs to differentiate, got {graph.inputs[i]} of dtype {dtype}"
            )

    def joint(*args: Any) -> Any:
        if seeds:
            args, seed = args[:-1], flatten(args[-1])[0]
        leaves = bind_inputs(graph, args)
        env: dict[int, Any] = {v.id: x for v, x in zip(graph.inputs, leaves)}
        calls = []
        for node in graph.nodes:
            values = [env[v.id] for v in node.inputs]
            if isinstance(node.fn, Constant):
                result = node.fn.value
            else:
                result = node.call(values)
            outs = node.unpack(result)
            env.update((v.id, x) for v, x in zip(node.outputs, outs))
            calls.append((node, values, outs))
        outputs = [env[v.id] for v in graph.outputs]
        cts: dict[int, Any] = {}
        for k, (v, value) in enumerate(zip(graph.outputs, outputs)):
            if seeds:
                _accumulate(cts, v.id, seed[k])
            elif differentiated is None or k in differentiated:
                _accumulate(cts, v.id, np.ones(np.shape(value), value.dtype))
        for node, values, outs in reversed(calls):
            live = [cts.get(v.id) for v in node.outputs]
            if all(ct is None for ct in live) or node.params is None:
                continue
            rule = vjp_rule(node.fn, node.method)
            if rule is None:
                if _passes_gradient(node, outs):
                    raise TypeError(
                        f"cannot differentiate through {node.op}: it has no VJP rule (dtensor_np.autodiff.defvjp "
                        "adds one)"
                    )
                continue  # not differentiable (comparisons, sign, integer outputs): no gradient flows back
            args_, kwargs_ = node.substitute(values)
            if len(outs) != 1:
                raise TypeError(f"{node.op}: differentiating an op with {len(outs)} outputs is not supported")
            ct = live[0]
            grads = rule(Call(node.fn, node.method, tuple(args_), kwargs_), outs[0], ct)
            where = {path: leaf.index for path, leaf in _paths(node.params.args) if hasattr(leaf, "index")}
            where.update({(name,): leaf.index for name, leaf in node.params.kwargs if hasattr(leaf, "index")})
            for path, g in grads.items():
                if path in where and g is not None:
                    _accumulate(cts, node.inputs[where[path]].id, g)
        grads = []
        for i in wrt:
            var = graph.inputs[i]
            g = cts.get(var.id)
            grads.append(np.zeros(var.aval.shape, var.aval.dtype) if g is None else _cast(g, var.aval))
        return unflatten(graph.out_tree, outputs), tuple(grads)

    example = example_arguments(graph)
    if seeds:
        example.append(unflatten(graph.out_tree, [v.aval for v in graph.outputs]))
    return trace(joint, *example)


def _passes_gradient(node: Any, outs: Sequence[Any]) -> bool:
    """True for a node a gradient would flow through: floating-point outputs, not a zero-gradient primitive."""
    if node.fn in ZERO_GRADIENT or node.method != "__call__" and node.fn in ZERO_GRADIENT:
        return False
    return any(getattr(x, "dtype", np.dtype(bool)).kind in "fc" for x in outs)


def _accumulate(cts: dict[int, Any], var_id: int, g: Any) -> None:
    cts[var_id] = g if var_id not in cts else cts[var_id] + g


def _cast(g: Any, aval: ShapeDtype) -> Any:
    if g.dtype != aval.dtype:
        g = g.astype(aval.dtype)
    return g

