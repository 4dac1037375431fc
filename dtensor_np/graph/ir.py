"""The graph IR: abstract values, variables and nodes, all frozen (the graph itself is in :mod:`.graph`).

A :class:`~dtensor_np.graph.Graph` is a straight-line program in the spirit
of a jaxpr: input variables, a tuple of :class:`Node` in execution order, and
output variables.  Every variable is defined once (by an input or by one node)
and carries an abstract value, :class:`ShapeDtype`.  A node applies a
primitive (a NumPy function or ufunc method, a :class:`Constant`, or a
:class:`Redistribute`) to its input variables; its static parameters (axes,
shapes, Python scalars, and where each input goes in the call) are a
:class:`CallParams`.

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
from ..planner import explain, plan_redistribute
from ..spec import DTensorSpec, TensorMeta, array_shape
from .pytree import flatten, unflatten

__all__ = [
    "ShapeDtype",
    "Var",
    "Constant",
    "Redistribute",
    "MeshOp",
    "NodeSharding",
    "Node",
    "GraphSharding",
    "Input",
    "CallParams",
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
        object.__setattr__(self, "shape", array_shape(self.shape))  # any dtype: a host value (str(x.dtype)) too
        object.__setattr__(self, "dtype", np.dtype(self.dtype))

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
        return tuple(s.kind for s in plan_redistribute(self.src, self.dst) if s.is_collective)

    def describe(self) -> str:
        """The plan's chain of placements and its collectives, e.g. ``S(0)->R [all_gather]``."""
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
    communicates instead); ``program(backend, *shards)``: instead of ``local``,
    for an op that communicates in the middle (see
    :class:`~dtensor_np.propagation.Decision`); ``note``: why the node runs the
    way it does, e.g. that it has no sharding rule and runs replicated.
    """

    inputs: tuple[DTensorSpec, ...]
    outputs: tuple[DTensorSpec, ...]
    local: Optional[Callable[..., Any]] = field(default=None, compare=False)
    note: str = ""
    program: Optional[Callable[..., Any]] = field(default=None, compare=False)

    @property
    def replicated(self) -> bool:
        """True when the node was forced to run on replicated inputs (no usable sharding rule)."""
        return self.note.startswith("replicated")


@dataclass(frozen=True, slots=True)
class Input:
    """Where a node's input goes in its call: ``Input(i)`` stands for ``node.inputs[i]``.

    Example:
        >>> Input(0)
        Input(index=0)
    """

    index: int


@dataclass(frozen=True, slots=True)
class CallParams:
    """The static parameters of a NumPy call: its arguments with :class:`Input` where arrays go, its method, its result.

    ``args`` and ``kwargs`` are the call's positional and keyword arguments
    (keywords sorted by name), with ``Input(i)`` in place of the node's
    ``i``-th input (at any depth: ``np.concatenate([a, b])`` has ``args ==
    ([Input(0), Input(1)],)``); ``method`` is ``"__call__"`` or a ufunc
    method (``"reduce"``).

    Example:
        >>> p = CallParams((Input(0),), (("axis", 0),))
        >>> p.bind(["x"])
        (('x',), {'axis': 0})
    """

    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...] = ()
    method: str = "__call__"

    def bind(self, values: Sequence[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The call's arguments with ``values[i]`` in place of ``Input(i)``."""
        leaves, tree = flatten((self.args, dict(self.kwargs)))
        args, kwargs = unflatten(tree, [values[x.index] if isinstance(x, Input) else x for x in leaves])
        return args, kwargs

    @classmethod
    def of_call(cls, args: tuple[Any, ...], kwargs: dict[str, Any],
                method: str = "__call__") -> tuple[CallParams, tuple[Var, ...]]:
        """A call written with :class:`Var` where arrays go, as its parameters and its inputs (every Var, in order)."""
        leaves, tree = flatten((tuple(args), dict(sorted(kwargs.items()))))
        inputs: list[Var] = []
        template = []
        for x in leaves:
            if isinstance(x, Var):
                template.append(Input(len(inputs)))
                inputs.append(x)
            else:
                template.append(x)
        t_args, t_kwargs = unflatten(tree, template)
        return cls(t_args, tuple(sorted(t_kwargs.items())), method), tuple(inputs)


@dataclass(frozen=True, eq=False, slots=True)
class Node:
    """One operation, like a jaxpr equation: a primitive, its input and output variables, its static parameters.

    ``fn`` is a NumPy callable or ufunc (with ``params`` saying how it is
    called) or an IR primitive (a :class:`Constant`, :class:`Redistribute` or
    :class:`MeshOp`, whose fields are its parameters; ``params`` None: it is
    called as ``fn(*inputs)``).  ``inputs`` lists every value the node reads,
    in order (a value read twice appears twice), so passes and interpreters
    read them directly; ``out_kind`` is ``"array"`` for one output, else
    ``"tuple"`` or ``"list"``.

    Example:
        >>> from dtensor_np.graph import trace
        >>> n = trace(lambda x: x.sum(axis=0), ShapeDtype((3, 2), "f8")).nodes[0]
        >>> n.op, n.params.kwargs, [str(v) for v in n.inputs], str(n.outputs[0].aval)
        ('sum', (('axis', 0),), ['x'], 'f64[2]')
    """

    fn: Any
    inputs: tuple[Var, ...]
    outputs: tuple[Var, ...]
    params: Optional[CallParams] = None
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
    def method(self) -> str:
        """``"__call__"``, or the ufunc method the node calls."""
        return "__call__" if self.params is None else self.params.method

    @property
    def args(self) -> tuple[Any, ...]:
        """The positional arguments, with the input variables where arrays go (for printing and checks)."""
        return self.substitute(self.inputs)[0]

    @property
    def kwargs(self) -> tuple[tuple[str, Any], ...]:
        """The keyword arguments, sorted by name, with the input variables where arrays go."""
        return tuple(sorted(self.substitute(self.inputs)[1].items()))

    def substitute(self, values: Sequence[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The call's arguments with ``values`` (one per input) in place of the inputs."""
        if len(values) != len(self.inputs):
            raise TypeError(f"{self.op}: expected {len(self.inputs)} values, got {len(values)}")
        if self.params is None:
            return tuple(values), {}
        return self.params.bind(values)

    def call(self, values: Sequence[Any]) -> Any:
        """Run the primitive with ``values`` in place of the inputs (in ``inputs`` order)."""
        args, kwargs = self.substitute(values)
        return bound_method(self.fn, self.method)(*args, **kwargs)

    def unpack(self, result: Any) -> tuple[Any, ...]:
        """A call's result as one value per output variable."""
        return (result,) if self.out_kind == "array" else tuple(result)

    def with_inputs(self, new_inputs: Sequence[Var]) -> Node:
        """The same node reading ``new_inputs`` (one per entry of ``inputs``)."""
        if len(new_inputs) != len(self.inputs):
            raise TypeError(f"{self.op}: expected {len(self.inputs)} inputs, got {len(new_inputs)}")
        return replace(self, inputs=tuple(new_inputs))


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
