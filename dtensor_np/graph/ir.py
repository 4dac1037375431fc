"""The graph IR: abstract values, variables, nodes and graphs, all frozen.

A :class:`Graph` is a straight-line program in the spirit of a jaxpr: input
variables, a tuple of :class:`Node` in execution order, and output
variables.  Every variable is defined once (by an input or by one node) and
carries an abstract value, :class:`ShapeDtype`.  A node applies a primitive
(a NumPy function or ufunc method, a :class:`Constant`, or a
:class:`Redistribute`) to a template of arguments in which variables stand
where arrays go; everything else in the template (axes, shapes, Python
scalars) is a static attribute.

Once a graph is sharded (see ``dtensor_np.tensor_parallel``), every node also
has a :class:`NodeSharding` (the specs its inputs need, the specs of its
outputs, and what each rank runs) and the graph a :class:`GraphSharding`.

Example:
    >>> import numpy as np
    >>> from dtensor_np.graph import trace
    >>> g = trace(lambda x: np.exp(x) + 1, ShapeDtype((3,), "f4"))
    >>> print(g)
    graph(x: f32[3]):
      %0: f32[3] = exp(x)
      %1: f32[3] = add(%0, 1)
      return %1
    >>> [n.op for n in g.nodes], g.nodes[0].inputs == g.inputs
    (['exp', 'add'], True)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, ClassVar, Optional, Sequence

import numpy as np

from ..mesh import DeviceMesh
from ..spec import DTensorSpec, TensorMeta
from .pytree import TreeDef, flatten, unflatten

__all__ = [
    "ShapeDtype",
    "Var",
    "Constant",
    "Redistribute",
    "MeshOp",
    "NodeSharding",
    "Node",
    "GraphSharding",
    "Graph",
    "InputKey",
    "bound_method",
]

_KIND_PREFIX = {"f": "f", "i": "i", "u": "u", "c": "c"}


@dataclass(frozen=True, slots=True)
class ShapeDtype:
    """An abstract array: shape and dtype, no data.  Use it as an example argument of ``trace``.

    Example:
        >>> str(ShapeDtype((32, 256), "float64")), ShapeDtype((2,), np.int32).ndim
        ('f64[32,256]', 1)
    """

    shape: tuple[int, ...]
    dtype: Any

    def __post_init__(self) -> None:
        meta = TensorMeta(self.shape, self.dtype)  # validates and normalises both
        object.__setattr__(self, "shape", meta.shape)
        object.__setattr__(self, "dtype", meta.dtype)

    @classmethod
    def of(cls, x: Any) -> ShapeDtype:
        """The abstract value of an array (anything with ``shape`` and ``dtype``) or a Python scalar."""
        if isinstance(x, ShapeDtype):
            return x
        if not (hasattr(x, "shape") and hasattr(x, "dtype")):
            if not isinstance(x, (bool, int, float, complex)):
                raise TypeError(
                    f"expected an array, a ShapeDtype or a number as an example argument, got {type(x).__name__}"
                )
            x = np.asarray(x)
        return cls(tuple(x.shape), x.dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def meta(self) -> TensorMeta:
        """The same shape and dtype as the ``TensorMeta`` of a spec."""
        return TensorMeta(self.shape, self.dtype)

    def __str__(self) -> str:
        dt = self.dtype
        prefix = _KIND_PREFIX.get(dt.kind)
        name = f"{prefix}{dt.itemsize * 8}" if prefix else ("bool" if dt.kind == "b" else dt.str)
        return f"{name}[{','.join(str(s) for s in self.shape)}]"


@dataclass(frozen=True, slots=True)
class Var:
    """A value of the graph: a unique id, its abstract value, and (for graph inputs) a name.

    Example:
        >>> str(Var(3, ShapeDtype((2,), "f8"), "x")), Var(3, ShapeDtype((2,), "f8")).name
        ('x', None)
    """

    id: int
    aval: ShapeDtype
    name: Optional[str] = None

    def __str__(self) -> str:
        return self.name if self.name is not None else f"%v{self.id}"


class Primitive:
    """Base of the IR's own primitives (not NumPy callables); ``name`` is the printed op name."""

    name: ClassVar[str]


@dataclass(frozen=True, eq=False, slots=True)
class Constant(Primitive):
    """A constant array baked into the graph (an ndarray the traced function closed over).

    Example:
        >>> Constant(np.ones(2))().tolist()
        [1.0, 1.0]
    """

    value: Any
    name: ClassVar[str] = "constant"

    def __call__(self) -> Any:
        return self.value


@dataclass(frozen=True, slots=True)
class Redistribute(Primitive):
    """Move a value from spec ``src`` to spec ``dst``: the identity on the global array.

    Example:
        >>> from dtensor_np import DeviceMesh, Shard, Replicate
        >>> meta = TensorMeta((4,), "f8")
        >>> r = Redistribute(DTensorSpec(DeviceMesh((2,)), (Shard(0),), meta),
        ...                  DTensorSpec(DeviceMesh((2,)), (Replicate(),), meta))
        >>> r.describe()
        'S(0)->R [all_gather]'
    """

    src: DTensorSpec
    dst: DTensorSpec
    name: ClassVar[str] = "redistribute"

    def __call__(self, x: Any) -> Any:
        return x

    def collectives(self) -> tuple[str, ...]:
        """The collectives the planned redistribute issues, in order."""
        from ..planner import plan_redistribute

        return tuple(s.kind for s in plan_redistribute(self.src, self.dst) if s.is_collective)

    def describe(self) -> str:
        from ..planner import explain, plan_redistribute

        kinds = self.collectives()
        return f"{explain(plan_redistribute(self.src, self.dst), self.src)} [{', '.join(kinds) or 'local'}]"


class MeshOp(Primitive):
    """A primitive that exists only in sharded graphs: the pieces a redistribute is lowered to.

    Subclasses (in :mod:`dtensor_np.passes`) are frozen dataclasses.  The
    verifier, printer and interpreter use only this interface:

    * ``abstract_eval(avals)``: the abstract values of the outputs;
    * ``check_sharding(inputs, outputs)``: None, or what is wrong with the
      specs a node of this op is marked with (per-rank shapes that do not add up);
    * ``describe(sharding)``: the comment printed after the node;
    * ``communicates``: True for ops the interpreter runs with
      ``execute(backend, *values)`` (values are ``{rank: array}``, or an
      in-flight handle) instead of ``NodeSharding.local`` once per rank;
    * ``pending``: True when the outputs are in-flight collectives, which only
      a ``wait`` node may read (exactly once).

    Calling one on full arrays is an error: it only runs on a mesh.
    """

    communicates: ClassVar[bool] = False
    pending: ClassVar[bool] = False
    waits: ClassVar[bool] = False

    def abstract_eval(self, avals: tuple[ShapeDtype, ...]) -> tuple[ShapeDtype, ...]:
        raise NotImplementedError

    def check_sharding(self, inputs: tuple[DTensorSpec, ...], outputs: tuple[DTensorSpec, ...]) -> Optional[str]:
        return None

    def describe(self, sharding: Optional["NodeSharding"]) -> str:
        return ""

    def execute(self, backend: Any, *values: Any) -> tuple[Any, ...]:
        raise TypeError(f"{self.name} runs once per rank through its NodeSharding.local, not execute()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"{self.name} only runs on a mesh: call the sharded graph, which holds it, rather than the op itself"
        )


@dataclass(frozen=True, slots=True)
class NodeSharding:
    """How a node runs on a mesh.

    ``inputs``: the spec every input (in ``Node.inputs`` order) must have;
    ``outputs``: the spec of every output; ``local(rank, *arrays)``: the
    rank's result from its local input arrays (None for a redistribute, which
    communicates instead); ``note``: why the node runs the way it does, e.g.
    that it has no sharding rule and runs replicated.
    """

    inputs: tuple[DTensorSpec, ...]
    outputs: tuple[DTensorSpec, ...]
    local: Optional[Callable[..., Any]] = field(default=None, compare=False)
    note: str = ""

    @property
    def replicated(self) -> bool:
        """True when the node was forced to run on replicated inputs (no usable sharding rule)."""
        return self.note.startswith("replicated")


@dataclass(frozen=True, eq=False, slots=True)
class Node:
    """One operation: ``outputs = fn.method(*args, **kwargs)``, with :class:`Var` where arrays go.

    ``out_kind`` says whether the call returns one array, or a tuple or list
    of them (one output variable each).

    Example:
        >>> from dtensor_np.graph import trace
        >>> n = trace(lambda x: x.sum(axis=0), ShapeDtype((3, 2), "f8")).nodes[0]
        >>> n.op, dict(n.kwargs), str(n.outputs[0].aval)
        ('sum', {'axis': 0}, 'f64[2]')
    """

    fn: Any
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]
    outputs: tuple[Var, ...]
    method: str = "__call__"
    out_kind: str = "array"
    sharding: Optional[NodeSharding] = None

    @property
    def op(self) -> str:
        """The printed op name: ``matmul``, ``add.reduce``, ``redistribute``..."""
        if isinstance(self.fn, Primitive):
            return self.fn.name
        name = getattr(self.fn, "__name__", type(self.fn).__name__)
        return name if self.method == "__call__" else f"{name}.{self.method}"

    @property
    def inputs(self) -> tuple[Var, ...]:
        """Every variable in the argument template, in order (a variable used twice appears twice)."""
        leaves, _ = flatten((self.args, dict(self.kwargs)))
        return tuple(x for x in leaves if isinstance(x, Var))

    def call(self, values: Sequence[Any]) -> Any:
        """Run the primitive with ``values`` in place of the input variables (in ``inputs`` order)."""
        args, kwargs = self.substitute(values)
        return bound_method(self.fn, self.method)(*args, **kwargs)

    def unpack(self, result: Any) -> tuple[Any, ...]:
        """A call's result as one value per output variable."""
        return (result,) if self.out_kind == "array" else tuple(result)

    def substitute(self, values: Sequence[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The argument template with ``values`` in place of the input variables."""
        leaves, tree = flatten((self.args, dict(self.kwargs)))
        it = iter(values)
        args, kwargs = unflatten(tree, [next(it) if isinstance(x, Var) else x for x in leaves])
        return args, kwargs

    def with_inputs(self, new_inputs: Sequence[Var]) -> Node:
        """The same node reading ``new_inputs`` (one per entry of ``inputs``)."""
        if len(new_inputs) != len(self.inputs):
            raise TypeError(f"{self.op}: expected {len(self.inputs)} inputs, got {len(new_inputs)}")
        args, kwargs = self.substitute(new_inputs)
        return replace(self, args=args, kwargs=tuple(sorted(kwargs.items())))


def bound_method(fn: Any, method: str) -> Callable[..., Any]:
    """``fn`` itself for ``"__call__"``, else its ufunc method (``np.add.reduce``)."""
    return fn if method == "__call__" else getattr(fn, method)


InputKey = tuple[int, str]
"""Where a graph input comes from: (positional argument, dotted path inside it)."""


@dataclass(frozen=True, slots=True)
class GraphSharding:
    """The mesh of a sharded graph, the spec of every input, and which arguments arrive as local shards.

    The positional arguments in ``local_args`` (the parameters) are passed as
    this process's shards: an array per name under MPI, a ``LocalTensor`` per
    name in simulated mode.  The others are full arrays, replicated.
    ``outputs`` gives the spec of every graph output (None: all replicated);
    an output that is not replicated is returned as this process's shards.
    """

    mesh: DeviceMesh
    inputs: tuple[DTensorSpec, ...]
    local_args: tuple[int, ...] = (0,)
    outputs: Optional[tuple[DTensorSpec, ...]] = None



@dataclass(frozen=True, eq=False, slots=True)
class Graph:
    """A traced program.  ``graph(*args)`` runs it; ``str(graph)`` prints one line per node.

    ``input_keys[i]`` says which argument (and which leaf inside it) feeds
    ``inputs[i]``; ``arg_names`` are the traced function's parameter names;
    ``out_tree`` rebuilds the returned pytree.  ``sharding`` is None until a
    pass places the graph on a mesh.
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
            from .evaluate import evaluate

            return evaluate(self, *args)
        from .distributed import run_sharded

        return run_sharded(self, *args)

    def __str__(self) -> str:
        from .printing import format_graph

        return format_graph(self)

    def __repr__(self) -> str:
        return f"<Graph: {len(self.inputs)} inputs, {len(self.nodes)} nodes, {len(self.outputs)} outputs>"
