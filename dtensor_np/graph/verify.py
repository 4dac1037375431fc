"""The verifier: a graph is well formed, its shapes add up, and (once sharded) its shardings agree.

Checks, each failing with a :class:`GraphError` that names the node and what
was expected:

* every variable is defined once, by a graph input or one node, and is read
  only after its definition (so a dangling input, nodes out of order and a
  cycle are all caught);
* every node's outputs have the abstract values its inputs give (found by
  running the NumPy function on placeholder arrays, as the tracer does);
* on a sharded graph: every value lives on the graph's mesh with its global
  shape, every node reads its inputs in the specs it needs (a redistribute
  sits wherever they differ), redistribute nodes go from their input's spec
  to theirs, and the graph outputs have the specs the graph promises
  (replicated unless ``GraphSharding.outputs`` says otherwise);
* lowered graphs (see :mod:`dtensor_np.passes`): every in-flight collective
  is waited for exactly once and read by nothing else, and every lowered op's
  specs agree with what it does to each rank's shape.

Example:
    >>> import dataclasses, numpy as np
    >>> from dtensor_np.graph import trace, ShapeDtype, Var
    >>> g = trace(lambda x: np.exp(x), ShapeDtype((3,), "f8"))
    >>> verify(g) is g
    True
    >>> bad = dataclasses.replace(g.nodes[0], outputs=(Var(9, ShapeDtype((4,), "f8")),))
    >>> verify(dataclasses.replace(g, nodes=(bad,), outputs=bad.outputs))
    Traceback (most recent call last):
    dtensor_np.graph.verify.GraphError: node 0 (exp) declares outputs (f64[4]), but its inputs give (f64[3])
"""

from __future__ import annotations

from ..errors import ShardingError
from ..spec import DTensorSpec
from .graph import Graph
from .ir import Constant, MeshOp, Node, Redistribute, ShapeDtype, Var
from .tracer import output_avals

__all__ = ["GraphError", "verify"]


class GraphError(ShardingError):
    """A malformed graph: which node, what was expected and what was found."""


def _avals(avals: tuple[ShapeDtype, ...]) -> str:
    return "(" + ", ".join(str(a) for a in avals) + ")"


def expected_avals(node: Node) -> tuple[ShapeDtype, ...]:
    """The abstract values a node's outputs must have, given its inputs."""
    if isinstance(node.fn, Constant):
        return (ShapeDtype.of(node.fn.value),)
    if isinstance(node.fn, Redistribute):
        return tuple(v.aval for v in node.inputs)
    if isinstance(node.fn, MeshOp):
        return tuple(node.fn.abstract_eval(tuple(v.aval for v in node.inputs)))
    avals, _ = output_avals(node.fn, node.method, node.args, dict(node.kwargs))
    return avals


def verify(graph: Graph, *, check_shapes: bool = True) -> Graph:
    """``graph`` itself when it is well formed; a :class:`GraphError` saying what is wrong otherwise.

    ``check_shapes=False`` skips re-deriving every node's output shapes.
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"verify needs a Graph, got {type(graph).__name__}")
    if len(graph.input_keys) != len(graph.inputs) or len(set(graph.input_keys)) != len(graph.inputs):
        raise GraphError(f"expected one distinct input key per input ({len(graph.inputs)}), got {graph.input_keys}")
    later = {v.id for n in graph.nodes for v in n.outputs}
    defined: dict[int, Var] = {}

    def define(v: Var, where: str) -> None:
        if not isinstance(v, Var):
            raise GraphError(f"{where} defines {v!r}, which is not a Var")
        if v.id in defined:
            raise GraphError(f"{where} defines {v} again: every value must be defined once")
        defined[v.id] = v

    def check_read(v: Var, where: str) -> None:
        found = defined.get(v.id)
        if found == v:
            return
        if found is not None:
            raise GraphError(f"{where} reads {v} as {v.aval}, but it is defined as {found.aval}")
        if v.id in later:
            raise GraphError(f"{where} reads {v}, which is defined only after it: nodes out of order, or a cycle")
        raise GraphError(f"{where} reads {v}, which no input or node defines: a dangling input")

    for v in graph.inputs:
        define(v, "a graph input")
    for i, node in enumerate(graph.nodes):
        where = f"node {i} ({node.op})"
        for v in node.inputs:
            check_read(v, where)
        if node.out_kind == "array" and len(node.outputs) != 1:
            raise GraphError(f"{where} returns one array but declares {len(node.outputs)} outputs")
        for v in node.outputs:
            define(v, where)
        if check_shapes:
            declared = tuple(v.aval for v in node.outputs)
            expected = expected_avals(node)
            if declared != expected:
                raise GraphError(f"{where} declares outputs {_avals(declared)}, but its inputs give {_avals(expected)}")
    for v in graph.outputs:
        check_read(v, "the graph output")
    _verify_pending(graph)
    if graph.out_tree.num_leaves != len(graph.outputs):
        raise GraphError(f"the output tree {graph.out_tree} holds {graph.out_tree.num_leaves} values, not {len(graph.outputs)}")
    if graph.sharding is not None:
        _verify_sharding(graph)
    return graph


def _verify_pending(graph: Graph) -> None:
    """An in-flight collective (the output of a start node) is read once, by a wait node, and never returned."""
    pending: dict[int, str] = {}
    for i, node in enumerate(graph.nodes):
        if isinstance(node.fn, MeshOp) and node.fn.pending:
            for v in node.outputs:
                pending[v.id] = f"node {i} ({node.op})"
    if not pending:
        return
    readers: dict[int, int] = {}
    for i, node in enumerate(graph.nodes):
        waits = isinstance(node.fn, MeshOp) and node.fn.waits
        for v in node.inputs:
            if v.id in pending:
                if not waits:
                    raise GraphError(
                        f"node {i} ({node.op}) reads {v}, the in-flight result of {pending[v.id]}: "
                        f"only a wait node may read it"
                    )
                readers[v.id] = readers.get(v.id, 0) + 1
        if waits and any(v.id not in pending for v in node.inputs):
            raise GraphError(f"node {i} ({node.op}) waits for a value that is not an in-flight collective")
    for v in graph.outputs:
        if v.id in pending:
            raise GraphError(f"the graph returns {v}, the in-flight result of {pending[v.id]}: wait for it first")
    for vid, where in pending.items():
        if readers.get(vid, 0) != 1:
            raise GraphError(f"the in-flight result of {where} is waited for {readers.get(vid, 0)} times, expected once")


def _check_spec(spec: DTensorSpec, var: Var, graph: Graph, where: str) -> None:
    if spec.mesh != graph.mesh:
        raise GraphError(f"{where}: {var} lives on {spec.mesh!r}, expected the graph's mesh {graph.mesh!r}")
    if spec.tensor_meta is None or spec.shape != var.aval.shape:
        shape = None if spec.tensor_meta is None else spec.shape
        raise GraphError(f"{where}: the spec of {var} has global shape {shape}, expected {var.aval.shape}")


def _verify_sharding(graph: Graph) -> None:
    sharding = graph.sharding
    assert sharding is not None
    if len(sharding.inputs) != len(graph.inputs):
        raise GraphError(f"expected one input spec per graph input ({len(graph.inputs)}), got {len(sharding.inputs)}")
    specs: dict[Var, DTensorSpec] = {}
    for v, spec in zip(graph.inputs, sharding.inputs):
        _check_spec(spec, v, graph, "a graph input")
        specs[v] = spec
    for i, node in enumerate(graph.nodes):
        where = f"node {i} ({node.op})"
        s = node.sharding
        if s is None:
            raise GraphError(f"{where} has no sharding, but the graph is sharded")
        if len(s.inputs) != len(node.inputs) or len(s.outputs) != len(node.outputs):
            raise GraphError(
                f"{where} has specs for {len(s.inputs)} inputs and {len(s.outputs)} outputs, "
                f"expected {len(node.inputs)} and {len(node.outputs)}"
            )
        for v, need in zip(node.inputs, s.inputs):
            _check_spec(need, v, graph, where)
            if specs[v] != need:
                have_text, need_text = str(specs[v]), str(need)
                if have_text == need_text:  # same placements, other meta
                    have_text, need_text = repr(specs[v].tensor_meta), repr(need.tensor_meta)
                raise GraphError(f"{where} needs {v} as {need_text} but it is {have_text}: a redistribute is missing")
        if isinstance(node.fn, Redistribute):
            if (node.fn.src, node.fn.dst) != (s.inputs[0], s.outputs[0]):
                raise GraphError(f"{where} moves {node.fn.src} -> {node.fn.dst} but is marked {s.inputs[0]} -> {s.outputs[0]}")
        elif s.local is None and s.program is None and not (isinstance(node.fn, MeshOp) and node.fn.communicates):
            raise GraphError(f"{where} has no per-rank function")
        if isinstance(node.fn, MeshOp):
            problem = node.fn.check_sharding(s.inputs, s.outputs)
            if problem:
                raise GraphError(f"{where}: {problem}")
        for v, spec in zip(node.outputs, s.outputs):
            _check_spec(spec, v, graph, where)
            specs[v] = spec
    if sharding.outputs is None:
        for v in graph.outputs:
            if not specs[v].is_replicated():
                raise GraphError(f"the graph output {v} is {specs[v]}; expected it replicated")
        return
    if len(sharding.outputs) != len(graph.outputs):
        raise GraphError(f"expected one output spec per graph output ({len(graph.outputs)}), got {len(sharding.outputs)}")
    for v, want in zip(graph.outputs, sharding.outputs):
        _check_spec(want, v, graph, "a graph output")
        if specs[v] != want:
            raise GraphError(f"the graph output {v} is {specs[v]}; the graph promises {want}")
