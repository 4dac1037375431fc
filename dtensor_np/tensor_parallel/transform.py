"""``tensor_parallel_transform``: a traced single-device graph rewritten to run tensor-parallel on a mesh.

The pass (pure: the input graph is unchanged, no rank is assumed):

1. places the parameters the plan names (``ColwiseParallel`` /
   ``RowwiseParallel`` per layer prefix) on the tensor-parallel mesh dim, and
   every other input (other parameters, activations) ``Replicate``;
2. marks every node, in order, with the sharding its op rule gives for its
   inputs' specs (ops without a rule run replicated, and say so);
3. inserts a ``redistribute`` node wherever a value's spec differs from the
   spec its consumer needs, and before every graph output (outputs are
   replicated); one redistribute per (value, target spec) is shared;
4. shards the parameters: the returned local parameters map each dotted name
   to this process's shards (an array under MPI, a ``LocalTensor`` of every
   rank's shard in simulated mode), ready for ``tp_graph(local_params, *inputs)``.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> from dtensor_np.graph import trace, graph_collectives
    >>> from dtensor_np.tensor_parallel import ColwiseParallel, RowwiseParallel
    >>> rng = np.random.default_rng(0)
    >>> params = {"fc1.weight": rng.normal(size=(8, 4)), "fc1.bias": rng.normal(size=8),
    ...           "fc2.weight": rng.normal(size=(4, 8)), "fc2.bias": rng.normal(size=4)}
    >>> def mlp(params, x):
    ...     h = np.maximum(x @ params["fc1.weight"].T + params["fc1.bias"], 0)
    ...     return h @ params["fc2.weight"].T + params["fc2.bias"]
    >>> x = rng.normal(size=(3, 4))
    >>> g = trace(mlp, params, x)
    >>> tp, local = tensor_parallel_transform(g, params, dt.DeviceMesh((2,)),
    ...                                       {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    >>> graph_collectives(tp)["all_reduce"], np.allclose(tp(local, x), mlp(params, x))
    (1, True)
    >>> local["fc1.weight"].shapes
    {0: (4, 4), 1: (4, 4)}
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, Optional, Sequence, Union

from ..dtensor import distribute_tensor
from ..errors import ShardingError
from ..graph.graph import Graph
from ..graph.ir import GraphSharding, Node, NodeSharding, Redistribute, ShapeDtype, Var
from ..graph.verify import verify
from ..mesh import DeviceMesh
from ..placements import Partial, Placement, Replicate
from ..spec import DTensorSpec
from .params import flatten_params, plan_placements
from .sharding import node_sharding, replicated
from .styles import ParallelStyle

__all__ = ["tensor_parallel_transform", "shard_graph", "tp_mesh_dim", "local_parameters"]

PARAMS_ARG = 0  # a model is fn(params, *inputs)


def tp_mesh_dim(mesh: DeviceMesh, mesh_dim: Union[int, str, None] = None) -> int:
    """The tensor-parallel mesh dim: ``mesh_dim`` if given, else the only dim, else the dim named ``"tp"``.

    Example:
        >>> tp_mesh_dim(DeviceMesh((2, 2), ("dp", "tp")))
        1
    """
    if mesh_dim is not None:
        return mesh.dim_index(mesh_dim)
    if mesh.ndim == 1:
        return 0
    if mesh.dim_names is not None and "tp" in mesh.dim_names:
        return mesh.dim_names.index("tp")
    raise ShardingError(
        f"tensor parallelism needs a 1-D mesh, or a mesh dim named 'tp', or mesh_dim=...; "
        f"got a {mesh.ndim}-D mesh {mesh!r}"
    )


def shard_graph(
    graph: Graph,
    input_specs: tuple[DTensorSpec, ...],
    local_args: tuple[int, ...] = (PARAMS_ARG,),
    output_specs: Optional[Sequence[Union[DTensorSpec, Sequence[Placement]]]] = None,
    reduce_shared: tuple[int, ...] = (),
) -> Graph:
    """``graph`` with every node marked and redistributes inserted, given its inputs' specs.

    The general pass under ``tensor_parallel_transform``: any input specs on
    one mesh work.  Graph outputs are made replicated, unless
    ``output_specs`` gives one spec (or placements) per output, e.g.
    ``Shard(0)`` for FSDP gradients that end reduce-scattered; such outputs
    come back as this process's shards.  A pending sum on a mesh dim in
    ``reduce_shared`` that more than one node reads is reduced once, where it
    is made, instead of on each reader's path (the gradient of a value that
    several tensor-parallel layers read, as Megatron's ``f`` operator does).
    The positional arguments in
    ``local_args`` are passed as local shards when the new graph is called
    (see :class:`~dtensor_np.graph.GraphSharding`).

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> from dtensor_np.graph import trace
        >>> mesh = dt.DeviceMesh((2,))
        >>> g = trace(lambda p, x: x.T @ p["dy"], {"dy": np.ones((4, 3))}, np.ones((4, 2)))
        >>> batch_sharded = [dt.DTensorSpec(mesh, (dt.Shard(0),), v.aval.meta) for v in g.inputs]
        >>> sharded = shard_graph(g, batch_sharded, output_specs=[(dt.Shard(0),)])
        >>> [n.op for n in sharded.nodes], sharded.nodes[-1].fn.describe()
        (['transpose', 'matmul', 'redistribute'], 'P(sum)->S(0) [reduce_scatter]')
    """
    if len(input_specs) != len(graph.inputs):
        raise ShardingError(f"expected one spec per graph input ({len(graph.inputs)}), got {len(input_specs)}")
    if not input_specs:
        raise ShardingError("a graph without inputs has nothing to shard")
    mesh = input_specs[0].mesh
    if any(s.mesh != mesh for s in input_specs):
        raise ShardingError(f"every input spec must be on one mesh, got {sorted({repr(s.mesh) for s in input_specs})}")
    specs: dict[Var, DTensorSpec] = dict(zip(graph.inputs, input_specs))
    next_id = 1 + max([v.id for v in graph.inputs] + [v.id for n in graph.nodes for v in n.outputs])
    moved: dict[tuple[Var, DTensorSpec], Var] = {}
    nodes: list[Node] = []

    def as_spec(var: Var, need: DTensorSpec) -> Var:
        """``var`` in spec ``need`` (same global meta): itself, or the output of a (shared) redistribute."""
        nonlocal next_id
        have = specs[var]
        if have == need:
            return var
        key = (var, need)
        if key not in moved:
            out = Var(next_id, var.aval)
            next_id += 1
            nodes.append(Node(Redistribute(have, need), (var,), (out,), sharding=NodeSharding((have,), (need,))))
            specs[out] = need
            moved[key] = out
        return moved[key]

    readers: dict[Var, int] = {}
    for v in [v for n in graph.nodes for v in n.inputs] + list(graph.outputs):
        readers[v] = readers.get(v, 0) + 1
    current: dict[Var, Var] = {}  # a shared pending sum -> its reduced value
    for node in graph.nodes:
        ins = [current.get(v, v) for v in node.inputs]
        sharding = node_sharding(node, tuple(specs[v] for v in ins), mesh)
        inputs = [as_spec(v, need) for v, need in zip(ins, sharding.inputs)]
        nodes.append(replace(node.with_inputs(inputs), sharding=sharding))
        specs.update(zip(node.outputs, sharding.outputs))
        for v, spec in zip(node.outputs, sharding.outputs):
            pending = [m for m in reduce_shared if isinstance(spec.placements[m], Partial)]
            if pending and readers.get(v, 0) > 1:
                reduced = spec.with_placements(
                    tuple(Replicate() if m in pending else p for m, p in enumerate(spec.placements)), spec.shard_order)
                current[v] = as_spec(v, reduced)
    if output_specs is None:
        outputs = tuple(as_spec(current.get(v, v), replicated(mesh, specs[v].tensor_meta)) for v in graph.outputs)
        promised = None
    else:
        promised = _output_specs(graph, mesh, output_specs)
        outputs = tuple(as_spec(current.get(v, v), spec) for v, spec in zip(graph.outputs, promised))
    sharded = replace(
        graph,
        nodes=tuple(nodes),
        outputs=outputs,
        sharding=GraphSharding(mesh, tuple(input_specs), tuple(local_args), promised),
    )
    return verify(sharded, check_shapes=False)


def _output_specs(
    graph: Graph, mesh: DeviceMesh, output_specs: Sequence[Union[DTensorSpec, Sequence[Placement]]]
) -> tuple[DTensorSpec, ...]:
    """One spec per graph output, on ``mesh`` with the output's global shape and dtype."""
    if len(output_specs) != len(graph.outputs):
        raise ShardingError(f"expected one output spec per graph output ({len(graph.outputs)}), got {len(output_specs)}")
    out = []
    for v, given in zip(graph.outputs, output_specs):
        if isinstance(given, DTensorSpec):
            if given.mesh != mesh:
                raise ShardingError(f"output spec {given} is on {given.mesh!r}, expected the inputs' mesh {mesh!r}")
            if given.tensor_meta is not None and given.tensor_meta != v.aval.meta:
                raise ShardingError(f"output {v}: the spec has meta {given.tensor_meta!r}, the graph gives {v.aval}")
            out.append(DTensorSpec(mesh, given.placements, v.aval.meta, given.shard_order))
        elif isinstance(given, (list, tuple)):
            out.append(DTensorSpec(mesh, tuple(given), v.aval.meta))
        else:
            raise TypeError(f"an output spec must be a DTensorSpec or a sequence of placements, got {given!r}")
    return tuple(out)


def local_parameters(flat: Mapping[str, Any], specs: Mapping[str, DTensorSpec]) -> dict[str, Any]:
    """This process's shards of every parameter: name -> array (MPI) or ``LocalTensor`` (simulated).

    Every rank slices its own copy of the full parameter (no communication),
    so under MPI every rank must pass the same values (e.g. from one seed).
    """
    return {
        name: distribute_tensor(flat[name], spec.mesh, spec.placements, src_data_rank=None).to_local()
        for name, spec in specs.items()
    }


def tensor_parallel_transform(
    graph: Graph,
    params: Mapping[str, Any],
    mesh: DeviceMesh,
    plan: Mapping[str, ParallelStyle],
    *,
    mesh_dim: Union[int, str, None] = None,
) -> tuple[Graph, dict[str, Any]]:
    """Rewrite a traced ``fn(params, *inputs)`` for tensor parallelism; returns (new graph, local params).

    Args:
        graph: from ``trace(fn, params, *inputs)``; it is not modified.
        params: the full parameters, flat with dotted names or nested dicts.
        mesh: the mesh to run on (simulated or MPI).
        plan: layer prefix -> ``ColwiseParallel()`` / ``RowwiseParallel()``.
        mesh_dim: the tensor-parallel mesh dim of a mesh with several dims
            (default: the only dim, or the one named ``"tp"``); parameters are
            replicated on the others.

    Returns:
        The sharded graph (call it as ``tp_graph(local_params, *inputs)``, which
        returns plain replicated arrays), and the local parameters (see
        :func:`local_parameters`), keyed by dotted name.

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> from dtensor_np.graph import trace
        >>> from dtensor_np.tensor_parallel import ColwiseParallel
        >>> p = {"fc": {"weight": np.ones((4, 2))}}
        >>> g = trace(lambda p, x: x @ p["fc"]["weight"].T, p, np.ones((1, 2)))
        >>> tp, local = tensor_parallel_transform(g, p, dt.DeviceMesh((2,)), {"fc": ColwiseParallel()})
        >>> print(tp)
        graph(p.fc.weight: f64[4,2] S(0), x: f64[1,2] R) on DeviceMesh((2,)):
          %0: f64[2,4] S(1) = transpose(p.fc.weight)
          %1: f64[1,4] S(1) = matmul(x, %0)
          %2: f64[1,4] R = redistribute(%1)  # S(1)->R [all_gather]
          return %2
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"expected a Graph from dt.trace, got {type(graph).__name__}")
    if graph.sharding is not None:
        raise ShardingError("the graph is already sharded; transform the single-device graph from dt.trace")
    if not isinstance(mesh, DeviceMesh):
        raise TypeError(f"expected a DeviceMesh, got {type(mesh).__name__}")
    tp_dim = tp_mesh_dim(mesh, mesh_dim)
    flat = flatten_params(params)
    placed = plan_placements(flat, plan)
    graph_params = {path: var for (arg, path), var in zip(graph.input_keys, graph.inputs) if arg == PARAMS_ARG}
    missing = sorted(set(graph_params) - set(flat))
    if missing:
        raise ShardingError(f"the graph's parameters {missing} are missing from params")
    unused = sorted(set(flat) - set(graph_params))
    if unused:
        raise ShardingError(f"params {unused} are not inputs of the graph (trace it with the same params)")
    for name, var in graph_params.items():
        got = ShapeDtype.of(flat[name])
        if got != var.aval:
            raise ShardingError(f"parameter {name!r}: the graph was traced with {var.aval}, got {got}")

    def spec_of(arg: int, path: str, var: Var) -> DTensorSpec:
        placements: list[Placement] = [Replicate()] * mesh.ndim
        if arg == PARAMS_ARG and path in placed:
            placements[tp_dim] = placed[path]
        return DTensorSpec(mesh, tuple(placements), var.aval.meta)

    input_specs = tuple(spec_of(arg, path, var) for (arg, path), var in zip(graph.input_keys, graph.inputs))
    sharded = shard_graph(graph, input_specs)
    param_specs = {path: spec for (arg, path), spec in zip(graph.input_keys, input_specs) if arg == PARAMS_ARG}
    return sharded, local_parameters(flat, param_specs)
