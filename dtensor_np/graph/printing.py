"""Printing a graph: one line per node, with each value's sharding once it is known.

Inputs keep their names (``params.fc1.weight``, ``x``); every other value is
numbered ``%0``, ``%1``... in the order it is defined.  On a sharded graph
each value shows its placements after its abstract value, a redistribute node
shows its plan and collectives, a lowered collective or local step (see
:mod:`dtensor_np.passes`) what it does, and a node that runs replicated for
want of a sharding rule says so.

Example:
    >>> import numpy as np
    >>> from dtensor_np.graph import trace, ShapeDtype
    >>> print(trace(lambda x: np.sum(x[:, 1:] * 2.0, axis=-1), ShapeDtype((4, 3), "f8")))
    graph(x: f64[4,3]):
      %0: f64[4,2] = getitem(x, (:, 1:))
      %1: f64[4,2] = multiply(%0, 2.0)
      %2: f64[4] = sum(%1, axis=-1)
      return %2
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..spec import DTensorSpec
from .ir import MeshOp, Node, Redistribute, Var

if TYPE_CHECKING:
    from .graph import Graph

__all__ = ["format_graph", "format_value"]


def format_value(x: Any, names: dict[Var, str]) -> str:
    """A static argument or a variable as it prints in a node's argument list."""
    if isinstance(x, Var):
        return names.get(x, str(x))
    if isinstance(x, tuple):
        body = ", ".join(format_value(v, names) for v in x)
        return f"({body},)" if len(x) == 1 else f"({body})"
    if isinstance(x, list):
        return "[" + ", ".join(format_value(v, names) for v in x) + "]"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k!r}: {format_value(v, names)}" for k, v in x.items()) + "}"
    if isinstance(x, slice):
        parts = ["" if p is None else format_value(p, names) for p in (x.start, x.stop, x.step)]
        return ":".join(parts[:2]) + (f":{parts[2]}" if x.step is not None else "")
    if x is Ellipsis:
        return "..."
    if isinstance(x, np.generic):
        return repr(x.item())
    if isinstance(x, np.dtype) or (isinstance(x, type) and issubclass(x, np.generic)):
        return np.dtype(x).name
    if callable(x) and hasattr(x, "__name__"):
        return x.__name__
    return repr(x)


def _value(v: Var, names: dict[Var, str], spec: DTensorSpec | None) -> str:
    text = f"{names[v]}: {v.aval}"
    return text if spec is None else f"{text} {spec}"


def _node_line(node: Node, names: dict[Var, str], specs: dict[Var, DTensorSpec]) -> str:
    outs = ", ".join(_value(v, names, specs.get(v)) for v in node.outputs)
    args = [format_value(a, names) for a in node.args]
    args += [f"{k}={format_value(v, names)}" for k, v in node.kwargs]
    line = f"{outs} = {node.op}({', '.join(args)})"
    if isinstance(node.fn, Redistribute):
        line += f"  # {node.fn.describe()}"
    elif isinstance(node.fn, MeshOp):
        text = node.fn.describe(node.sharding)
        if text:
            line += f"  # {text}"
    elif node.sharding is not None and node.sharding.note:
        line += f"  # {node.sharding.note}"
    return line


def format_graph(graph: Graph) -> str:
    """The text of ``str(graph)``."""
    specs = graph.specs()
    names: dict[Var, str] = {v: str(v) for v in graph.inputs}
    counter = 0
    for node in graph.nodes:
        for v in node.outputs:
            if v not in names:
                names[v] = f"%{counter}"
                counter += 1
    params = ", ".join(_value(v, names, specs.get(v)) for v in graph.inputs)
    where = "" if graph.mesh is None else f" on {graph.mesh!r}"
    lines = [f"graph({params}){where}:"]
    lines += [f"  {_node_line(node, names, specs)}" for node in graph.nodes]
    outs = ", ".join(names.get(v, str(v)) for v in graph.outputs)
    if graph.sharding is not None and graph.sharding.outputs is not None:
        outs = ", ".join(f"{names.get(v, str(v))} {spec}" for v, spec in zip(graph.outputs, graph.sharding.outputs))
    lines.append(f"  return {outs}")
    return "\n".join(lines)
