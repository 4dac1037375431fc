"""``Graph``: a traced program, runnable and printable.

The IR it is made of (variables, nodes, shardings) is in :mod:`.ir`; running
it is :func:`.evaluate.evaluate` (full arrays) or
:func:`.distributed.run_sharded` (local shards across a mesh), and printing it
:func:`.printing.format_graph`: free functions over the IR, which ``Graph``
calls for ``graph(*args)`` and ``str(graph)``.

Example:
    >>> import numpy as np
    >>> from dtensor_np.graph import trace
    >>> g = trace(lambda x: x * 2, np.ones(2))
    >>> g(np.arange(2.0)).tolist(), repr(g)
    ([0.0, 2.0], '<Graph: 1 inputs, 1 nodes, 1 outputs>')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ..mesh import DeviceMesh
from ..spec import DTensorSpec
from .distributed import run_sharded
from .evaluate import evaluate
from .ir import GraphSharding, InputKey, Node, Var
from .printing import format_graph
from .pytree import TreeDef

__all__ = ["Graph"]


@dataclass(frozen=True, eq=False, slots=True)
class Graph:
    """A traced program.  ``graph(*args)`` runs it; ``str(graph)`` prints one line per node.

    ``input_keys[i]`` says which argument (and which leaf inside it) feeds
    ``inputs[i]``; ``arg_names`` are the traced function's parameter names;
    ``out_tree`` rebuilds the returned pytree.  ``sharding`` is None until a
    pass places the graph on a mesh.

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> g = dt.trace(lambda x: np.exp(x) + 1, dt.ShapeDtype((2,), "f8"))
        >>> [n.op for n in g.nodes], g(np.zeros(2)).tolist()
        (['exp', 'add'], [2.0, 2.0])
    """

    inputs: tuple[Var, ...]
    nodes: tuple[Node, ...]
    outputs: tuple[Var, ...]
    input_keys: tuple[InputKey, ...]
    arg_names: tuple[str, ...]
    out_tree: TreeDef
    sharding: Optional[GraphSharding] = None

    @property
    def mesh(self) -> Optional[DeviceMesh]:
        """The mesh of a sharded graph, else None."""
        return None if self.sharding is None else self.sharding.mesh

    def specs(self) -> dict[Var, DTensorSpec]:
        """The spec of every variable of a sharded graph (empty for an unsharded one)."""
        if self.sharding is None:
            return {}
        out = dict(zip(self.inputs, self.sharding.inputs))
        for node in self.nodes:
            if node.sharding is not None:
                out.update(zip(node.outputs, node.sharding.outputs))
        return out

    def __call__(self, *args: Any) -> Any:
        """Run the graph: on full arrays when unsharded; on local shards across the mesh when sharded."""
        if self.sharding is None:
            return evaluate(self, *args)
        return run_sharded(self, *args)

    def __str__(self) -> str:
        return format_graph(self)

    def __repr__(self) -> str:
        return f"<Graph: {len(self.inputs)} inputs, {len(self.nodes)} nodes, {len(self.outputs)} outputs>"
