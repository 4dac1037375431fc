"""Running a sharded graph: every value is ``{rank: local array}`` for the ranks this process holds.

In simulated mode this process holds every rank of the mesh; under MPI it
holds its own.  A redistribute node calls
:func:`dtensor_np.redistribute.redistribute_shards` (the collectives); any
other node calls its ``NodeSharding.local(rank, *arrays)`` once per rank held.
Arrays may be NumPy or CuPy: the per-rank functions call NumPy functions,
which CuPy arrays dispatch to CuPy.

Arguments: those in ``GraphSharding.local_args`` (the parameters) are this
process's shards, the same call in both modes: under MPI an array per name,
in simulated mode a :class:`~dtensor_np.LocalTensor` per name (what
``DTensor.to_local()`` returns); a replicated parameter may also be passed as
one full array.  Every other argument is the full array, the same on every
rank.  The outputs are replicated, and returned as plain arrays.

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

from typing import Any

from collectives.counting import KINDS

from ..dispatch import as_array
from ..local_tensor import LocalTensor
from ..placements import Replicate
from ..redistribute import redistribute_shards
from ..runtime import backend_for
from ..spec import DTensorSpec
from .evaluate import bind_inputs, check_aval, constant_value, module_of
from .ir import Constant, Graph, Redistribute, Var
from .pytree import unflatten

__all__ = ["run_sharded", "graph_collectives"]

Shards = dict[int, Any]


def graph_collectives(graph: Graph) -> dict[str, int]:
    """How many collectives of each kind the redistribute nodes of ``graph`` issue per run.

    The keys are those of ``dt.comm_counter().counts``.
    """
    counts = dict.fromkeys(KINDS, 0)
    for node in graph.nodes:
        if isinstance(node.fn, Redistribute):
            for kind in node.fn.collectives():
                counts[kind] += 1
    return counts


def _check_shards(var: Var, spec: DTensorSpec, shards: Shards) -> None:
    for rank, x in shards.items():
        expected = spec.local_shape_of_rank(rank)
        if tuple(x.shape) != expected or x.dtype != var.aval.dtype:
            raise TypeError(
                f"input {var} ({spec}): expected rank {rank}'s shard of shape {expected} and dtype "
                f"{var.aval.dtype}, got shape {tuple(x.shape)} and dtype {x.dtype}"
            )


def _local_input(var: Var, spec: DTensorSpec, value: Any, ranks: tuple[int, ...], backend: Any) -> Shards:
    """The shards of a parameter passed as this process's local values."""
    if isinstance(value, LocalTensor):
        if spec.mesh.backend == "mpi" or not set(ranks) <= set(value.ranks):
            raise TypeError(
                f"input {var}: expected the shards of ranks {list(ranks)}, got a LocalTensor of ranks "
                f"{list(value.ranks)} (under MPI pass this rank's array)"
            )
        shards = {r: value.shards[r] for r in ranks}
    elif spec.mesh.backend == "mpi":
        shards = {ranks[0]: value}
    elif spec.is_replicated():
        shards = {r: value for r in ranks}
    else:
        raise TypeError(
            f"input {var} is {spec}: in simulated mode pass its shards as a LocalTensor "
            f"(the local parameters tensor_parallel_transform returned), got a {type(value).__name__}"
        )
    _check_shards(var, spec, shards)
    return shards


def _global_input(var: Var, spec: DTensorSpec, value: Any, ranks: tuple[int, ...], backend: Any) -> Shards:
    """The shards of an argument passed as the full array (the same on every rank)."""
    check_aval(var, value)
    replicated = spec.with_placements((Replicate(),) * spec.mesh.ndim)
    return redistribute_shards({r: value for r in ranks}, replicated, spec, backend)  # R -> S chunks locally


def run_sharded(graph: Graph, *args: Any) -> Any:
    """The outputs of a sharded graph, run on the ranks this process holds (see the module doc)."""
    sharding = graph.sharding
    if sharding is None:
        raise TypeError("run_sharded needs a sharded graph (from tensor_parallel_transform)")
    backend = backend_for(sharding.mesh)
    ranks = tuple(backend.ranks)
    env: dict[Var, Shards] = {}
    for (arg, _), var, spec, value in zip(graph.input_keys, graph.inputs, sharding.inputs, bind_inputs(graph, args)):
        load = _local_input if arg in sharding.local_args else _global_input
        env[var] = load(var, spec, value, ranks, backend)
    xp = module_of(x for shards in env.values() for x in shards.values())
    for node in graph.nodes:
        if isinstance(node.fn, Redistribute):
            env[node.outputs[0]] = redistribute_shards(env[node.inputs[0]], node.fn.src, node.fn.dst, backend)
            continue
        if isinstance(node.fn, Constant):  # replicated, in the inputs' array library
            value = constant_value(node.fn, xp)
            env[node.outputs[0]] = {r: value for r in ranks}
            continue
        local = node.sharding.local  # type: ignore[union-attr]
        results = {r: node.unpack(local(r, *[env[v][r] for v in node.inputs])) for r in ranks}
        for k, out in enumerate(node.outputs):
            env[out] = {r: as_array(res[k]) for r, res in results.items()}
    return unflatten(graph.out_tree, [env[v][ranks[0]] for v in graph.outputs])
