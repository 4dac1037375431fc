"""The ops a redistribute is lowered to: an async collective's start, its wait, and local steps.

A redistribute node moves a value between two specs in one opaque step.
:func:`~dtensor_np.passes.lower` replaces it by one node per planned step:

* a collective step becomes a :class:`Collective` start node, whose value is
  the in-flight collective (a ``collectives.Handle``), and a :data:`WAIT`
  node that completes it; the interpreter issues the start with the
  backend's ``iall_gather`` / ``ireduce_scatter`` / ``iall_reduce`` /
  ``iall_to_all`` (MPI ``Iallgather(v)``, ``Ireduce_scatter(_block)``,
  ``Iallreduce``, ``Ialltoall(v)``), so whatever runs between the two nodes
  overlaps the communication;
* a local step (``chunk``, ``partition``) becomes a :class:`LocalStep` node
  that runs once per rank, like any other node.

Every node is marked with the specs before and after its step, so the
verifier checks each one and ``print(graph)`` shows the sharding after every
step.  The ops are frozen values; the per-rank functions of local steps live
in the nodes' ``NodeSharding.local``.

Example:
    >>> import dtensor_np as dt
    >>> src = dt.DTensorSpec(dt.DeviceMesh((2,)), (dt.Shard(0),), dt.TensorMeta((5, 3), "f4"))
    >>> (step,) = dt.plan_redistribute(src, src.with_placements((dt.Replicate(),)))
    >>> start = Collective.from_step(step)
    >>> start.name, start.call.axis, start.call.in_sizes, start.describe(None)
    ('all_gather.start', 0, (3, 2), 'all_gather on mesh dim 0')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Optional


from collectives import Prepared

from ..graph.ir import MeshOp, Node, NodeSharding, ShapeDtype, Var
from ..planner import CollectiveCall, Step, collective_call
from ..redistribute import local_step
from ..spec import DTensorSpec

__all__ = ["Collective", "Wait", "WAIT", "LocalStep", "After", "after_node", "local_step_function", "rank_shapes"]


def rank_shapes(spec: DTensorSpec) -> tuple[tuple[int, ...], ...]:
    """The local shape of every world rank of the spec's mesh, indexed by rank."""
    return tuple(spec.local_shape_of_rank(r) for r in spec.mesh.all_ranks)


def _where(mesh_dims: tuple[int, ...]) -> str:
    return f"mesh dim {mesh_dims[0]}" if len(mesh_dims) == 1 else f"mesh dims {mesh_dims}"


def _transition(sharding: Optional[NodeSharding]) -> str:
    if sharding is None or not sharding.inputs or not sharding.outputs:
        return ""
    return f"{sharding.inputs[0]}->{sharding.outputs[0]} "


@dataclass(frozen=True, slots=True)
class Collective(MeshOp):
    """Start one collective (``call``, a :class:`~dtensor_np.planner.CollectiveCall`); its output is the in-flight collective.

    The interpreter starts it with the backend's prepared call (``start``: MPI
    ``Iallgather(v)``, ``Ireduce_scatter(_block)``, ``Iallreduce``,
    ``Ialltoall(v)``), or runs it to completion at once when its wait follows
    directly.  ``label`` is extra text for printing (e.g. the members of a bucket).

    Example:
        >>> from dtensor_np.planner import CollectiveCall
        >>> c = Collective(CollectiveCall("reduce_scatter", ((0, 1),), (0,), op="sum", axis=1, out_sizes=(2, 2)))
        >>> c.name, c.kind, c.communicates, c.pending
        ('reduce_scatter.start', 'reduce_scatter', True, True)
    """

    call: CollectiveCall
    label: str = ""
    communicates: ClassVar[bool] = True
    pending: ClassVar[bool] = True

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"{self.call.kind}.start"

    @property
    def kind(self) -> str:
        """The collective: ``all_gather``, ``all_reduce``, ``reduce_scatter`` or ``all_to_all``."""
        return self.call.kind

    @classmethod
    def from_step(cls, step: Step) -> Collective:
        """The start of a planned collective step (its call from :func:`~dtensor_np.planner.collective_call`)."""
        return cls(collective_call(step))

    def abstract_eval(self, avals: tuple[ShapeDtype, ...]) -> tuple[ShapeDtype, ...]:
        return tuple(avals)  # a collective is the identity on the global array

    def prepared(self, backend: Any, shards: dict[int, Any]) -> Prepared:
        """The backend's prepared call for these shards' shapes and dtype."""
        call = self.call
        first = next(iter(shards.values()))
        return backend.prepare(call.kind, call.groups, {r: x.shape for r, x in shards.items()}, first.dtype,
                               **call.arguments())

    def execute(self, backend: Any, shards: dict[int, Any]) -> tuple[Any, ...]:
        """Start the collective on ``backend``; the one output is its ``Handle``."""
        return (self.prepared(backend, shards).start(shards),)

    def execute_blocking(self, backend: Any, shards: dict[int, Any]) -> dict[int, Any]:
        """The collective run to completion at once: what ``execute`` then its wait give.

        The interpreter uses it when nothing runs between the start and its
        wait, so there is nothing to overlap and the blocking call (often a
        faster algorithm in MPI) serves better.
        """
        return self.prepared(backend, shards).run(shards)

    def check_sharding(self, inputs: tuple[DTensorSpec, ...], outputs: tuple[DTensorSpec, ...]) -> Optional[str]:
        (before,), (after,) = inputs, outputs
        call = self.call
        if before.dtype != after.dtype:
            return f"a collective keeps the dtype, but it goes from {before.dtype} to {after.dtype}"
        in_shapes, out_shapes = rank_shapes(before), rank_shapes(after)
        kind = call.kind
        for sizes, axis, name, shapes in (
            (call.in_sizes, call.axis if kind == "all_gather" else call.concat_axis, "in_sizes", in_shapes),
            (call.out_sizes, call.axis if kind == "reduce_scatter" else call.split_axis, "out_sizes", out_shapes),
        ):
            if sizes is not None and axis is not None:
                held = tuple(s[axis] for s in shapes)
                if held != sizes:
                    return f"{name} {sizes} do not match the ranks' lengths {held} along axis {axis}"
        world = before.mesh.world_size
        for rank in before.mesh.all_ranks:
            got = call.out_shape(rank, in_shapes[rank], world)
            if got != out_shapes[rank]:
                return (
                    f"{kind} {before}->{after}: rank {rank} ends with a block of shape {got}, "
                    f"but the spec after the step gives {out_shapes[rank]}"
                )
        return None

    def describe(self, sharding: Optional[NodeSharding]) -> str:
        call = self.call
        text = f"{_transition(sharding)}{call.kind} on {_where(call.mesh_dims)}"
        if call.op is not None and call.op != "sum":
            text += f", op {call.op}"
        return f"{text}, {self.label}" if self.label else text


@dataclass(frozen=True, slots=True)
class Wait(MeshOp):
    """Complete an in-flight collective: its output is the collective's result on every rank held.

    Example:
        >>> WAIT.name, WAIT.waits
        ('wait', True)
    """

    name: ClassVar[str] = "wait"
    communicates: ClassVar[bool] = True
    waits: ClassVar[bool] = True

    def abstract_eval(self, avals: tuple[ShapeDtype, ...]) -> tuple[ShapeDtype, ...]:
        return tuple(avals)

    def execute(self, backend: Any, handle: Any) -> tuple[Any, ...]:
        return (handle.wait(),)

    def check_sharding(self, inputs: tuple[DTensorSpec, ...], outputs: tuple[DTensorSpec, ...]) -> Optional[str]:
        if inputs != outputs:
            return f"a wait keeps the spec of its collective, but goes from {inputs[0]} to {outputs[0]}"
        return None


WAIT = Wait()
"""The one wait op (it has no attributes)."""


@dataclass(frozen=True, slots=True)
class LocalStep(MeshOp):
    """A step of a redistribute that needs no communication, run once per rank.

    ``kind``: ``chunk`` (R -> S: keep this rank's piece), ``partition``
    (R -> P: sum divides by the group size, or the first rank keeps integers),
    or ``relabel`` (only size-1 mesh dims change: no data moves).

    Example:
        >>> LocalStep("chunk", (0,)).describe(None)
        'chunk on mesh dim 0'
    """

    kind: str
    mesh_dims: tuple[int, ...] = ()

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.kind

    def abstract_eval(self, avals: tuple[ShapeDtype, ...]) -> tuple[ShapeDtype, ...]:
        return tuple(avals)  # the identity on the global array

    def describe(self, sharding: Optional[NodeSharding]) -> str:
        where = f" on {_where(self.mesh_dims)}" if self.mesh_dims else ""
        return f"{_transition(sharding)}{self.kind}{where}".strip()


@dataclass(frozen=True, eq=False, slots=True)
class After(MeshOp):
    """``after``: its first input, unchanged (no copy), once the others exist: an ordering edge as data.

    :func:`~dtensor_np.passes.schedule` runs an eager node (a collective's
    start) as soon as its inputs exist; a start that reads ``after(x,
    token)`` instead of ``x`` is issued only once ``token`` is computed.  FSDP
    uses it to prefetch one bucket ahead instead of gathering every bucket at
    once.

    Example:
        >>> After.name, After().abstract_eval(("a", "b"))
        ('after', ('a',))
    """

    name: ClassVar[str] = "after"

    def abstract_eval(self, avals: tuple[ShapeDtype, ...]) -> tuple[ShapeDtype, ...]:
        return (avals[0],)

    def check_sharding(self, inputs: tuple[DTensorSpec, ...], outputs: tuple[DTensorSpec, ...]) -> Optional[str]:
        return None if inputs[:1] == outputs else f"expected the output spec {inputs[0]}, got {outputs[0]}"

    def describe(self, sharding: Optional[NodeSharding]) -> str:
        return "ordering only: the first input, after the others"

    @staticmethod
    def local(rank: int, x: Any, *tokens: Any) -> Any:
        return x


def after_node(x: Var, x_spec: DTensorSpec, token: Var, token_spec: DTensorSpec, out: Var) -> Node:
    """The :class:`~dtensor_np.graph.ir.Node` ``out = after(x, token)`` (``x``, ``token``, ``out``: variables).

    Example:
        >>> import dtensor_np as dt
        >>> from dtensor_np.graph.ir import ShapeDtype, Var
        >>> spec = dt.DTensorSpec(dt.DeviceMesh((2,)), (dt.Replicate(),), dt.TensorMeta((2,), "f8"))
        >>> v = [Var(i, ShapeDtype((2,), "f8")) for i in range(3)]
        >>> after_node(v[0], spec, v[1], spec, v[2]).op
        'after'
    """
    return Node(After(), (x, token), (out,), sharding=NodeSharding((x_spec, token_spec), (x_spec,), After.local))


def local_step_function(step: Optional[Step]) -> Callable[..., Any]:
    """``local(rank, x)`` of a lowered local step: the redistribute executor's own (:func:`~dtensor_np.redistribute.local_step`).

    ``step`` is None for a relabel (only size-1 mesh dims differ: the array is kept).
    """
    if step is None:
        return lambda rank, x: x
    return local_step(step)
