"""Running a sharded graph: every value is ``{rank: local array}`` for the ranks this process holds.

In simulated mode this process holds every rank of the mesh; under MPI it
holds its own.  A redistribute node calls
:func:`dtensor_np.redistribute.redistributor` (the collectives); a
lowered collective (see :mod:`dtensor_np.passes`) starts asynchronously
(``iall_gather``, ``ireduce_scatter``... : MPI ``Iallgatherv``,
``Ireduce_scatter``...), its value is the in-flight handle, and its wait node
completes it, so the nodes between the two run while it is in flight; any
other node calls its ``NodeSharding.local(rank, *arrays)`` once per rank held.
Arrays may be NumPy or CuPy: the per-rank functions call NumPy functions,
which CuPy arrays dispatch to CuPy.

Arguments: those in ``GraphSharding.local_args`` (the parameters) are this
process's shards, the same call in both modes: under MPI an array per name,
in simulated mode a :class:`~dtensor_np.LocalTensor` per name (what
``DTensor.to_local()`` returns); a replicated parameter may also be passed as
one full array.  Every other argument is the full array, the same on every
rank, or a DTensor with exactly the input's spec (its shards are used).  Replicated outputs are returned as plain arrays; an output the graph
keeps sharded (``GraphSharding.outputs``) as this process's shards, in the
same form as a parameter.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> from dtensor_np.graph import trace
    >>> from dtensor_np.tensor_parallel import tensor_parallel_transform, ColwiseParallel
    >>> params = {"fc.weight": np.arange(12.0).reshape(4, 3)}
    >>> g = trace(lambda p, x: x @ p["fc.weight"].T, params, np.ones((2, 3)))
    >>> tp, local = tensor_parallel_transform(g, params, dt.DeviceMesh((2,)), {"fc": ColwiseParallel()})
    >>> graph_collectives(tp)["all_gather"], tp(local, np.ones((2, 3))).tolist()
    (1, [[3.0, 12.0, 21.0, 30.0], [3.0, 12.0, 21.0, 30.0]])
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from collectives import KINDS, memo

from ..arrays import as_array
from ..dtensor import DTensor
from ..errors import ShardingError
from ..local_tensor import LocalTensor
from ..placements import Replicate
from ..redistribute import redistribute_shards
from ..runtime import backend_for
from ..spec import DTensorSpec
from .evaluate import bind_inputs, check_aval, constant_value, last_uses, module_of
from .ir import Constant, MeshOp, Node, Redistribute, Var
from .pytree import unflatten

if TYPE_CHECKING:
    from .graph import Graph

__all__ = ["run_sharded", "run_sharded_shards", "graph_collectives"]

Shards = dict[int, Any]


def graph_collectives(graph: Graph) -> dict[str, int]:
    """How many collectives of each kind the redistribute nodes and lowered collectives of ``graph`` issue per run.

    The keys are those of ``dt.comm_counter().counts``.
    """
    counts = dict.fromkeys(KINDS, 0)
    for node in graph.nodes:
        if isinstance(node.fn, Redistribute):
            for kind in node.fn.collectives():
                counts[kind] += 1
        elif isinstance(node.fn, MeshOp) and node.fn.pending:  # a lowered collective's start
            counts[node.fn.kind] += 1  # type: ignore[attr-defined]
    return counts


def _check_shards(var: Var, spec: DTensorSpec, shards: Shards, expected: dict[int, tuple[int, ...]]) -> None:
    dtype = var.aval.dtype
    for rank, x in shards.items():
        if x.shape != expected[rank] or x.dtype != dtype:
            raise TypeError(
                f"input {var} ({spec}): expected rank {rank}'s shard of shape {expected[rank]} and dtype "
                f"{dtype}, got shape {tuple(x.shape)} and dtype {x.dtype}"
            )


def _local_input(
    var: Var, spec: DTensorSpec, value: Any, ranks: tuple[int, ...], expected: dict[int, tuple[int, ...]]
) -> Shards:
    """The shards of a parameter passed as this process's local values."""
    if isinstance(value, LocalTensor):
        if spec.mesh.backend == "mpi" or not set(ranks) <= set(value.ranks):
            raise TypeError(
                f"input {var}: expected the shards of ranks {list(ranks)}, got a LocalTensor of ranks "
                f"{list(value.ranks)} (under MPI pass this rank's array)"
            )
        held = value.shards
        shards = {r: held[r] for r in ranks}
    elif spec.mesh.backend == "mpi":
        shards = {ranks[0]: value}
    elif spec.is_replicated():
        shards = {r: value for r in ranks}
    else:
        raise TypeError(
            f"input {var} is {spec}: in simulated mode pass its shards as a LocalTensor "
            f"(the local parameters tensor_parallel_transform returned), got a {type(value).__name__}"
        )
    _check_shards(var, spec, shards, expected)
    return shards


def _global_input(var: Var, spec: DTensorSpec, value: Any, ranks: tuple[int, ...], backend: Any) -> Shards:
    """The shards of an argument passed as the full array (the same on every rank), or as a DTensor placed as
    the graph takes it (its shards as they are: a batch drawn by ``dt.random`` on the mesh, never whole)."""
    if isinstance(value, DTensor):
        if value.spec != spec:
            raise ShardingError(f"input {var}: expected an array or a DTensor placed as {spec}, got {value.spec}")
        return {r: value.shards[r] for r in ranks}
    check_aval(var, value)
    replicated = spec.with_placements((Replicate(),) * spec.mesh.ndim)
    return redistribute_shards({r: value for r in ranks}, replicated, spec)  # R -> S chunks locally


# How each node runs (see _program): a redistribute, a start or wait, a constant, a per-rank function.
_REDISTRIBUTE, _EXECUTE, _CONSTANT, _LOCAL, _BLOCKING, _PROGRAM = range(6)
_Step = tuple[int, Node, tuple[int, ...], tuple[int, ...], bool]


class _Program:
    """A sharded graph prepared for running on some ranks: every node's inputs and outputs as variable ids.

    Built once per (graph, ranks) and cached (:func:`_program`): variables
    hash slowly, so a call never looks one up.
    """

    __slots__ = ("steps", "expected", "release")

    def __init__(self, graph: Graph, ranks: tuple[int, ...]) -> None:
        steps: list[_Step] = []
        nodes = graph.nodes
        skip = -1
        for index, node in enumerate(nodes):
            if index == skip:
                continue
            after = nodes[index + 1] if index + 1 < len(nodes) else None
            if (
                hasattr(node.fn, "execute_blocking")
                and after is not None
                and getattr(after.fn, "waits", False)
                and after.inputs == node.outputs
            ):
                # Nothing runs between the start and its wait: one blocking call instead.
                steps.append((_BLOCKING, node, tuple(v.id for v in node.inputs), tuple(v.id for v in after.outputs), True))
                skip = index + 1
                continue
            if isinstance(node.fn, Redistribute):
                kind = _REDISTRIBUTE
            elif isinstance(node.fn, MeshOp) and node.fn.communicates:
                kind = _EXECUTE
            elif isinstance(node.fn, Constant):
                kind = _CONSTANT
            elif node.sharding is not None and node.sharding.program is not None:
                kind = _PROGRAM
            else:
                kind = _LOCAL
            ins = tuple(v.id for v in node.inputs)
            outs = tuple(v.id for v in node.outputs)
            steps.append((kind, node, ins, outs, node.out_kind == "array"))
        self.steps = tuple(steps)
        self.release = last_uses([(ins, outs) for _, _, ins, outs, _ in steps], (v.id for v in graph.outputs))
        sharding = graph.sharding
        assert sharding is not None
        self.expected = tuple({r: spec.local_shape_of_rank(r) for r in ranks} for spec in sharding.inputs)


@memo(maxsize=256, name="dtensor_np.graph_programs")
def _program(graph: Graph, ranks: tuple[int, ...]) -> _Program:
    """The program of ``graph`` for ``ranks`` (graphs hash by identity: they are immutable)."""
    return _Program(graph, ranks)


def run_sharded_shards(graph: Graph, *args: Any) -> list[Shards]:
    """Every output of a sharded graph as ``{rank: local array}`` for the ranks this process holds.

    What :func:`run_sharded` returns in the user's form; callers that wrap the
    outputs into DTensors (the autodiff transformations) take these.
    """
    sharding = graph.sharding
    if sharding is None:
        raise TypeError("run_sharded needs a sharded graph (from tensor_parallel_transform)")
    backend = backend_for(sharding.mesh)
    ranks = tuple(backend.ranks)
    program = _program(graph, ranks)
    env: dict[int, Any] = {}
    local_args = sharding.local_args
    for (arg, _), var, spec, value, expected in zip(
        graph.input_keys, graph.inputs, sharding.inputs, bind_inputs(graph, args), program.expected
    ):
        if arg in local_args:
            env[var.id] = _local_input(var, spec, value, ranks, expected)
        else:
            env[var.id] = _global_input(var, spec, value, ranks, backend)
    xp = module_of(x for shards in env.values() for x in shards.values())
    for step, dead in zip(program.steps, program.release):
        _run_step(step, env, ranks, backend, xp)  # a function: no local variable outlives the step
        for i in dead:
            del env[i]
    return [env[v.id] for v in graph.outputs]


def _run_step(step: _Step, env: dict[int, Any], ranks: tuple[int, ...], backend: Any, xp: Any) -> None:
    """Run one step of a program: read its inputs from ``env``, write its outputs there."""
    kind, node, ins, outs, single = step
    if kind == _PROGRAM:  # an op that communicates in the middle
        produced = node.sharding.program(backend, *[env[i] for i in ins])  # type: ignore[union-attr]
        for out, shards in zip(outs, produced if len(outs) > 1 else (produced,)):
            env[out] = {r: as_array(x) for r, x in shards.items()}
    elif kind == _LOCAL:
        local = node.sharding.local  # type: ignore[union-attr]
        if single:
            env[outs[0]] = {r: as_array(local(r, *[env[i][r] for i in ins])) for r in ranks}
        elif len(ranks) == 1:  # under MPI: one rank, no per-rank dicts to zip
            (r,) = ranks
            for out, x in zip(outs, node.unpack(local(r, *[env[i][r] for i in ins]))):
                env[out] = {r: as_array(x)}
        else:
            results = {r: node.unpack(local(r, *[env[i][r] for i in ins])) for r in ranks}
            for k, out in enumerate(outs):
                env[out] = {r: as_array(res[k]) for r, res in results.items()}
    elif kind == _BLOCKING:  # a lowered collective whose wait follows its start at once
        env[outs[0]] = node.fn.execute_blocking(backend, env[ins[0]])
    elif kind == _EXECUTE:  # start or wait of a lowered collective
        env.update(zip(outs, node.fn.execute(backend, *[env[i] for i in ins])))
    elif kind == _REDISTRIBUTE:
        env[outs[0]] = redistribute_shards(env[ins[0]], node.fn.src, node.fn.dst)
    else:  # a constant: replicated, in the inputs' array library
        value = constant_value(node.fn, xp)
        env[outs[0]] = {r: value for r in ranks}


def run_sharded(graph: Graph, *args: Any) -> Any:
    """The outputs of a sharded graph, run on the ranks this process holds (see the module doc)."""
    sharding = graph.sharding
    outputs = run_sharded_shards(graph, *args)
    ranks = tuple(backend_for(sharding.mesh).ranks)  # type: ignore[union-attr]
    if sharding.outputs is None:  # type: ignore[union-attr]
        return unflatten(graph.out_tree, [shards[ranks[0]] for shards in outputs])
    return unflatten(graph.out_tree, [_output(shards, spec, ranks)
                                      for shards, spec in zip(outputs, sharding.outputs)])  # type: ignore[union-attr]


def _output(shards: Shards, spec: DTensorSpec, ranks: tuple[int, ...]) -> Any:
    """A graph output: the array when replicated, else this process's shards (an array under MPI)."""
    if spec.is_replicated():
        return shards[ranks[0]]
    if spec.mesh.backend == "mpi":
        return shards[ranks[0]]
    return LocalTensor({r: shards[r] for r in ranks})
