"""Marking a node's sharding with the same op rules DTensor dispatch uses.

For a node whose inputs have known specs, :func:`node_sharding` binds the
node's argument template with spec-only stand-ins (:class:`SpecArg`, a
registered sharded type, so the rules' binders treat it like a DTensor), asks
the op's rule (``decide``, cached) for the input specs it needs and the output
specs, and keeps the rule's per-rank function.  A node with no rule, or whose
rule does not apply to these arguments, runs replicated: it needs every input
replicated, calls the NumPy function on full arrays, and says so in its note.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> from dtensor_np.graph import trace, ShapeDtype
    >>> window = lambda v: np.lib.stride_tricks.sliding_window_view(v, 1, axis=0)  # no sharding rule: runs replicated
    >>> node = trace(lambda a: window(a), ShapeDtype((4,), "f8")).nodes[0]
    >>> spec = dt.DTensorSpec(dt.DeviceMesh((2,)), (dt.Shard(0),), dt.TensorMeta((4,), "f8"))
    >>> s = node_sharding(node, (spec,))
    >>> str(s.inputs[0]), s.note
    ('R', 'replicated: no sharding rule for numpy.lib.stride_tricks.sliding_window_view')
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..errors import ShardingError
from ..mesh import DeviceMesh
from ..placements import Replicate
from ..propagation import decide, rule_of
from ..propagation.common import with_meta
from ..propagation.registry import OpRule, qualified_name
from ..sharded import SpecArg
from ..spec import DTensorSpec, TensorMeta
from ..graph.ir import Constant, Node, NodeSharding

__all__ = ["SpecArg", "rule_of", "node_sharding", "replicated"]


def replicated(mesh: DeviceMesh, meta: Optional[TensorMeta]) -> DTensorSpec:
    """The spec of an array with ``meta`` replicated on every dim of ``mesh``."""
    return DTensorSpec(mesh, (Replicate(),) * mesh.ndim, meta)


def _op_name(node: Node) -> str:
    """``numpy.sort``, ``numpy.lib.stride_tricks.sliding_window_view`` for NumPy's callables (the name a user
    writes: :func:`~dtensor_np.propagation.registry.qualified_name`), the bare op name for others (``getitem``)."""
    if isinstance(node.fn, np.ufunc):
        return f"numpy.{node.op}"
    return qualified_name(node.fn) if getattr(node.fn, "__module__", "").startswith("numpy") else node.op


def node_sharding(node: Node, specs: tuple[DTensorSpec, ...], mesh: Any = None) -> NodeSharding:
    """The sharding of ``node`` given the specs of its inputs (in ``node.inputs`` order).

    ``mesh`` is needed only for a node without inputs (a constant).
    """
    if isinstance(node.fn, Constant):
        if mesh is None:
            raise TypeError("node_sharding of a constant needs the mesh")
        value = node.fn.value
        return NodeSharding((), (replicated(mesh, node.outputs[0].aval.meta),), lambda rank: value)
    rule = rule_of(node.fn, node.method)
    if rule is None:
        return _replicated(node, specs, f"replicated: no sharding rule for {_op_name(node)}")
    try:
        return _by_rule(node, rule, specs)
    except (ShardingError, TypeError) as e:  # arguments the rule does not support
        return _replicated(node, specs, f"replicated: the {_op_name(node)} rule does not apply ({e})")


def _by_rule(node: Node, rule: OpRule, specs: tuple[DTensorSpec, ...]) -> NodeSharding:
    stand_ins = [SpecArg(s) for s in specs]
    args, kwargs = node.substitute(stand_ins)
    tensors, key = rule.bind(tuple(args), dict(kwargs))
    where = {id(a): i for i, a in enumerate(stand_ins)}
    order = [where.get(id(t), -1) for t in tensors]
    if sorted(order) != list(range(len(specs))):
        raise ShardingError("its binder does not take every array argument once")
    decision = decide(rule, tuple(t.spec for t in tensors), key)
    if len(decision.outputs) != len(node.outputs):
        raise ShardingError(f"it gives {len(decision.outputs)} outputs, the node has {len(node.outputs)}")
    needs: list[DTensorSpec] = list(specs)
    for k, i in enumerate(order):
        needs[i] = DTensorSpec(specs[i].mesh, decision.inputs[k].placements, specs[i].tensor_meta, decision.inputs[k].shard_order)
    outputs = []
    for spec, var in zip(decision.outputs, node.outputs):
        if spec.tensor_meta is not None and spec.shape != var.aval.shape:
            raise ShardingError(f"it gives an output of shape {spec.shape}, the node's is {var.aval.shape}")
        outputs.append(with_meta(spec, var.aval.shape, var.aval.dtype))
    inner = decision.local
    program = decision.program
    if order == list(range(len(specs))):
        return NodeSharding(tuple(needs), tuple(outputs), inner, program=program)
    if program is not None:
        def reordered_program(backend: Any, *shards: Any) -> Any:
            return program(backend, *[shards[i] for i in order])

        return NodeSharding(tuple(needs), tuple(outputs), None, program=reordered_program)

    def reordered(rank: int, *arrays: Any) -> Any:
        return inner(rank, *[arrays[i] for i in order])  # type: ignore[misc]

    return NodeSharding(tuple(needs), tuple(outputs), reordered)


def _replicated(node: Node, specs: tuple[DTensorSpec, ...], note: str) -> NodeSharding:
    if not specs:
        raise ShardingError(f"{node.op} has no array inputs and no rule: cannot place it on a mesh")
    mesh = specs[0].mesh
    outputs = tuple(replicated(mesh, v.aval.meta) for v in node.outputs)

    def local(rank: int, *arrays: Any) -> Any:
        return node.call(arrays)

    return NodeSharding(tuple(replicated(mesh, s.tensor_meta) for s in specs), outputs, local, note)
