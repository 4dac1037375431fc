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
    >>> from dtensor_np.planner import plan_specs
    >>> src = dt.DTensorSpec(dt.DeviceMesh((2,)), (dt.Shard(0),), dt.TensorMeta((5, 3), "f4"))
    >>> (planned,) = plan_specs(src, src.with_placements((dt.Replicate(),)))
    >>> start = Collective.from_step(planned)
    >>> start.name, start.axis, start.in_sizes, start.describe(None)
    ('all_gather.start', 0, (3, 2), 'all_gather on mesh dim 0')
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, ClassVar, Optional

import numpy as np

from ..graph.ir import MeshOp, NodeSharding, ShapeDtype
from ..planner import COLLECTIVE_KINDS, PlannedStep, collective_arguments
from ..spec import DTensorSpec

__all__ = ["Collective", "Wait", "WAIT", "LocalStep", "local_step_function", "rank_shapes"]

Groups = tuple[tuple[int, ...], ...]


def rank_shapes(spec: DTensorSpec) -> tuple[tuple[int, ...], ...]:
    """The local shape of every world rank of the spec's mesh, indexed by rank."""
    return tuple(spec.local_shape_of_rank(r) for r in spec.mesh.all_ranks)


def _where(mesh_dims: tuple[int, ...]) -> str:
    return f"mesh dim {mesh_dims[0]}" if len(mesh_dims) == 1 else f"mesh dims {mesh_dims}"


def _transition(sharding: Optional[NodeSharding]) -> str:
    if sharding is None or not sharding.inputs or not sharding.outputs:
        return ""
    return f"{sharding.inputs[0]}->{sharding.outputs[0]} "


def _sizes(values: Optional[tuple[int, ...]]) -> Optional[dict[int, int]]:
    return None if values is None else dict(enumerate(values))


@lru_cache(maxsize=1024)
def _prepared(collective: "Collective", backend: Any, shape: tuple[int, ...], dtype: np.dtype) -> Callable[[Any], Any]:
    """The backend's prepared call of ``collective`` for one local shape and dtype (worked out once).

    It makes the same MPI call as the general method, into a recycled output
    buffer, with none of the per-call argument handling.
    """
    prepare = getattr(backend, f"prepare_{collective.kind}")
    return prepare(collective.groups, shape, dtype, **collective._arguments()).run


@dataclass(frozen=True, slots=True)
class Collective(MeshOp):
    """Start one collective on every group of ``groups``; its output is the in-flight collective.

    ``kind`` is ``all_gather``, ``all_reduce``, ``reduce_scatter`` or
    ``all_to_all``; the other fields are the backend call's arguments
    (``axis`` for all_gather and reduce_scatter, ``split_axis`` and
    ``concat_axis`` for all_to_all, ``op`` for reductions, and per-world-rank
    ``in_sizes`` / ``out_sizes`` along those axes, None when the backend may
    split evenly).  ``mesh_dims`` are the mesh dims the groups run along;
    ``label`` is extra text for printing (e.g. the members of a bucket).

    Example:
        >>> c = Collective("reduce_scatter", ((0, 1),), (0,), op="sum", axis=1, out_sizes=(2, 2))
        >>> c.name, c.communicates, c.pending
        ('reduce_scatter.start', True, True)
    """

    kind: str
    groups: Groups
    mesh_dims: tuple[int, ...]
    op: Optional[str] = None
    axis: Optional[int] = None
    split_axis: Optional[int] = None
    concat_axis: Optional[int] = None
    in_sizes: Optional[tuple[int, ...]] = None
    out_sizes: Optional[tuple[int, ...]] = None
    label: str = ""
    communicates: ClassVar[bool] = True
    pending: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.kind not in COLLECTIVE_KINDS:
            raise ValueError(f"a collective's kind must be one of {COLLECTIVE_KINDS}, got {self.kind!r}")

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"{self.kind}.start"

    @classmethod
    def from_step(cls, planned: PlannedStep) -> Collective:
        """The start of a planned collective step (arguments from :func:`~dtensor_np.planner.collective_arguments`)."""
        args = collective_arguments(planned)
        ranks = planned.before.mesh.all_ranks

        def per_rank(name: str) -> Optional[tuple[int, ...]]:
            sizes = args.get(name)
            return None if sizes is None else tuple(sizes[r] for r in ranks)

        return cls(
            planned.step.kind,
            args["groups"],
            planned.step.mesh_dims,
            op=args.get("op"),
            axis=args.get("axis"),
            split_axis=args.get("split_axis"),
            concat_axis=args.get("concat_axis"),
            in_sizes=per_rank("in_sizes"),
            out_sizes=per_rank("out_sizes"),
        )

    def abstract_eval(self, avals: tuple[ShapeDtype, ...]) -> tuple[ShapeDtype, ...]:
        return tuple(avals)  # a collective is the identity on the global array

    def _arguments(self) -> dict[str, Any]:
        """The keyword arguments of this collective's backend call, blocking or not."""
        if self.kind == "all_gather":
            return {"axis": self.axis, "in_sizes": _sizes(self.in_sizes)}
        if self.kind == "reduce_scatter":
            return {"op": self.op, "axis": self.axis, "out_sizes": _sizes(self.out_sizes)}
        if self.kind == "all_reduce":
            return {"op": self.op}
        return {
            "split_axis": self.split_axis,
            "concat_axis": self.concat_axis,
            "in_sizes": _sizes(self.in_sizes),
            "out_sizes": _sizes(self.out_sizes),
        }

    def execute(self, backend: Any, shards: dict[int, Any]) -> tuple[Any, ...]:
        """Issue the collective on ``backend``; the one output is its ``Handle``."""
        return (getattr(backend, f"i{self.kind}")(shards, self.groups, check=False, **self._arguments()),)

    def execute_blocking(self, backend: Any, shards: dict[int, Any]) -> dict[int, Any]:
        """The collective run to completion at once: what ``execute`` then its wait give.

        The interpreter uses it when nothing runs between the start and its
        wait, so there is nothing to overlap and the blocking call (often a
        faster algorithm in MPI) serves better.
        """
        prepare = getattr(backend, f"prepare_{self.kind}", None)
        if prepare is not None and len(shards) == 1:  # MPI: this rank's array through a prepared call
            ((rank, x),) = shards.items()
            return {rank: _prepared(self, backend, tuple(x.shape), x.dtype)(x)}
        return getattr(backend, self.kind)(shards, self.groups, check=False, **self._arguments())

    def group_of(self, rank: int) -> tuple[int, ...]:
        """The group that holds ``rank``."""
        for group in self.groups:
            if rank in group:
                return group
        raise ValueError(f"rank {rank} is in none of the groups {self.groups}")

    def local_output_shape(self, rank: int, in_shapes: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
        """The shape ``rank`` gets, given every world rank's input shape."""
        group = self.group_of(rank)
        shape = list(in_shapes[rank])
        if self.kind == "all_gather":
            assert self.axis is not None
            shape[self.axis] = sum(in_shapes[q][self.axis] for q in group)
        elif self.kind == "reduce_scatter":
            assert self.axis is not None
            if self.out_sizes is not None:
                shape[self.axis] = self.out_sizes[rank]
            else:
                n, k = shape[self.axis], len(group)
                size = -(-n // k)
                shape[self.axis] = max(0, min(size, n - size * group.index(rank)))
        elif self.kind == "all_to_all":
            assert self.split_axis is not None and self.concat_axis is not None
            shape[self.concat_axis] = sum(in_shapes[q][self.concat_axis] for q in group)
            if self.out_sizes is not None:
                shape[self.split_axis] = self.out_sizes[rank]
        return tuple(shape)

    def check_sharding(self, inputs: tuple[DTensorSpec, ...], outputs: tuple[DTensorSpec, ...]) -> Optional[str]:
        (before,), (after,) = inputs, outputs
        if before.dtype != after.dtype:
            return f"a collective keeps the dtype, but it goes from {before.dtype} to {after.dtype}"
        in_shapes, out_shapes = rank_shapes(before), rank_shapes(after)
        for sizes, axis, name, shapes in (
            (self.in_sizes, self.axis if self.kind == "all_gather" else self.concat_axis, "in_sizes", in_shapes),
            (self.out_sizes, self.axis if self.kind == "reduce_scatter" else self.split_axis, "out_sizes", out_shapes),
        ):
            if sizes is not None and axis is not None:
                held = tuple(s[axis] for s in shapes)
                if held != sizes:
                    return f"{name} {sizes} do not match the ranks' lengths {held} along axis {axis}"
        for rank in before.mesh.all_ranks:
            got = self.local_output_shape(rank, in_shapes)
            if got != out_shapes[rank]:
                return (
                    f"{self.kind} {before}->{after}: rank {rank} ends with a block of shape {got}, "
                    f"but the spec after the step gives {out_shapes[rank]}"
                )
        return None

    def describe(self, sharding: Optional[NodeSharding]) -> str:
        text = f"{_transition(sharding)}{self.kind} on {_where(self.mesh_dims)}"
        if self.op is not None and self.op != "sum":
            text += f", op {self.op}"
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


def local_step_function(planned: Optional[PlannedStep], before: DTensorSpec, after: DTensorSpec) -> Callable[..., Any]:
    """``local(rank, x)`` of a local step: the same arithmetic as the redistribute executor.

    ``planned`` is None for a relabel (no step: only size-1 mesh dims differ).
    """
    if planned is None:
        return lambda rank, x: x
    step = planned.step
    mesh = before.mesh
    if step.kind == "chunk":
        slices = {}
        for r in mesh.all_ranks:
            coord = mesh.coordinate_of(r)
            _, start_before = before.local_shape_and_offset(coord)
            shape_after, start_after = after.local_shape_and_offset(coord)
            slices[r] = tuple(slice(a - b, a - b + n) for a, b, n in zip(start_after, start_before, shape_after))
        return lambda rank, x: x[slices[rank]].copy(order="C")
    if step.kind == "partition":
        op = step.dst.reduce_op  # type: ignore[union-attr]
        group = 1
        for m in step.mesh_dims:
            group *= mesh.shape[m]
        first = {r: all(mesh.coordinate_of(r)[m] == 0 for m in step.mesh_dims) for r in mesh.all_ranks}

        def partition(rank: int, x: Any) -> Any:
            if op != "sum":
                return x
            if x.dtype.kind in "fc":
                return x / x.dtype.type(group)
            return x.copy() if first[rank] else np.zeros_like(x)

        return partition
    raise ValueError(f"{step} is not a local step")
