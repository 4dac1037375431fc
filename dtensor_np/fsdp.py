"""FSDP as a graph transformation: flat sharded parameters, gathered before use, gradients reduce-scattered.

``dt.fsdp(loss_fn, params, *batch, mesh=mesh)`` traces ``loss_fn(params,
*batch)``, differentiates it (:func:`~dtensor_np.autodiff.grad_graph`) and
rewrites the joint graph for fully sharded data parallelism, composed with
tensor parallelism when a plan is given on a 2-D ``("dp", "tp")`` mesh:

1. the batch is split along its first axis over the ``dp`` mesh dim;
   parameters are computed with their *compute spec*: replicated on ``dp``,
   and ``ColwiseParallel``/``RowwiseParallel`` placements on ``tp``;
2. ``shard_graph`` marks every node from its sharding rule, as for tensor
   parallelism; the gradients are left as pending sums on ``dp``;
3. the parameters are grouped, in the order the forward pass first uses
   them, into buckets of at most ``bucket_mb`` MiB, and each bucket becomes
   one flat buffer (:mod:`dtensor_np.passes.flat_params`) of which every rank
   stores ``1/dp``: the graph's inputs are these flat shards.  Each bucket is
   one ``all_gather`` on ``dp`` followed by ``unflatten`` (views: no copy in
   or out), and its gradients one ``flatten`` (each gradient written once)
   followed by one ``reduce_scatter`` on ``dp``;
4. the graph is lowered and scheduled: every bucket's all_gather starts at
   once and is waited for just before its first use, and every
   reduce_scatter starts as soon as its bucket's gradients exist, so
   communication overlaps the forward and backward computation.

So a training step issues ``buckets`` all_gathers, ``buckets``
reduce_scatters, what tensor parallelism needs on ``tp`` (per Megatron
block: one all_reduce forward and one backward), and one all_reduce of the
loss.  By default parameters stay gathered from the forward to the backward
pass (no second all_gather).  With ``reshard_after_forward=True`` (as FSDP2)
the forward's gathered buffer of a bucket dies after its last forward use and
the backward reads a second gather of each bucket it needs (one more
all_gather each): the nodes that are not ancestors of the loss are the
backward, and their reads of a gathered member, or of a view the forward made
of members alone, are rewritten to the second gather; every gather then
starts one bucket ahead of its use (an ``after`` node:
:class:`~dtensor_np.passes.ops.After`) instead of all at once.  The graph
runner frees every value after its last use, so the freed buffers really go.

``step.value_and_grad(flat, *batch, micro_batches=k)`` accumulates gradients
over ``k`` micro-batches (the traced batch shape each) with a second graph
(``micro_graph``) that adds each bucket's local gradients in place into a
running flat sum instead of reduce-scattering them; one reduce_scatter per
bucket ends the step.  An optimiser (:mod:`dtensor_np.optim`) updates the
flat shards with no communication.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> rng = np.random.default_rng(0)
    >>> params = {"w1": rng.normal(size=(3, 4)), "w2": rng.normal(size=(4, 1))}
    >>> x, y = rng.normal(size=(6, 3)), rng.normal(size=(6, 1))
    >>> loss_fn = lambda p, x, y: np.mean((np.tanh(x @ p["w1"]) @ p["w2"] - y) ** 2)
    >>> step = dt.fsdp(loss_fn, params, x, y, mesh=dt.DeviceMesh((2,), ("dp",)))
    >>> flat = step.shard(params)
    >>> loss, grads = step.value_and_grad(flat, x, y)
    >>> want_loss, want = dt.value_and_grad(loss_fn)(params, x, y)
    >>> bool(np.isclose(float(loss), want_loss)), step.buckets, step.collectives()
    (True, 1, {'all_gather': 1, 'all_reduce': 1, 'reduce_scatter': 1})
    >>> full = step.unshard(grads)
    >>> all(np.allclose(full[k], want[k]) for k in params)
    True
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, Union

import numpy as np

from collectives import array_module

from .autodiff.transform import grad_graph
from .dtensor import DTensor
from .errors import ShardingError
from .graph.distributed import backend_for, graph_collectives, run_sharded_shards
from .redistribute import redistribute_shards
from .graph.graph import Graph
from .graph.ir import GraphSharding, MeshOp, Node, NodeSharding, Redistribute, Var
from .graph.pytree import flatten, unflatten
from .graph.tracer import trace
from .graph.verify import verify
from .local_tensor import LocalTensor
from .mesh import DeviceMesh
from .passes.flat_params import FlatLayout, FlatPack, FlatUnpack
from .passes.lowering import fresh_ids, lower
from .passes.ops import after_node
from .passes.pruning import prune
from .placements import Partial, Placement, Replicate, Shard
from .spec import DTensorSpec
from .tensor_parallel.params import flatten_params, plan_placements
from .tensor_parallel.sharding import replicated
from .tensor_parallel.styles import ParallelStyle
from .tensor_parallel.transform import shard_graph, tp_mesh_dim

__all__ = ["fsdp", "FSDPStep"]

PARAMS = 0  # the loss function is loss_fn(params, *batch)
MIB = 1024 * 1024


@dataclass(frozen=True, eq=False, slots=True)
class FSDPStep:
    """A loss function rewritten for FSDP (x TP): its graph, and the flat buckets of its parameters.

    ``graph(flat_shards, *batch)`` returns ``(loss, gradient shards)``;
    :meth:`value_and_grad` wraps it for DTensors.  ``names[b]`` are the
    parameters of bucket ``b``, laid out by ``layouts[b]``.  ``micro_graph``
    runs one micro-batch: it also takes ``sum{b}``, each bucket's running sum
    of local gradients (a pending sum on dp), adds into it in place and
    returns it instead of reduce-scattering.

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> params = {"a": np.ones((2, 2)), "b": np.ones(2)}
        >>> step = dt.fsdp(lambda p, x: np.sum(x @ p["a"] + p["b"]), params, np.ones((2, 2)), mesh=dt.DeviceMesh((2,), ("dp",)))
        >>> step.buckets, sorted(step.unshard(step.shard(params)))
        (1, ['a', 'b'])
    """

    graph: Graph
    names: tuple[tuple[str, ...], ...]
    layouts: tuple[FlatLayout, ...]
    micro_graph: Optional[Graph] = None  # graph without the reduce_scatters: pending flat gradients
    reshard_after_forward: bool = False

    @property
    def mesh(self) -> DeviceMesh:
        return self.layouts[0].mesh

    @property
    def buckets(self) -> int:
        return len(self.layouts)

    def keys(self) -> tuple[str, ...]:
        """The flat buffers' names: ``bucket0``, ``bucket1``, ..."""
        return tuple(f"bucket{b}" for b in range(self.buckets))

    def shard(self, params: Mapping[str, Any]) -> dict[str, DTensor]:
        """The flat shards of full parameters (every rank passes the same values; no communication).

        Returns one DTensor per bucket (a ``(mesh size, row)`` buffer, each rank its row).
        """
        flat = flatten_params(params)
        missing = sorted({n for names in self.names for n in names} - set(flat))
        if missing:
            raise ShardingError(f"expected every parameter of the traced model, missing {missing}")
        ranks = backend_for(self.mesh).ranks
        out = {}
        for key, names, layout in zip(self.keys(), self.names, self.layouts):
            full = [flat[n] for n in names]
            for n, x, s in zip(names, full, layout.specs):
                if np.shape(x) != s.shape:
                    raise ShardingError(f"parameter {n!r}: expected shape {s.shape}, got {np.shape(x)}")
            rows = {r: layout.shard_rows(r, full) for r in ranks}
            out[key] = DTensor(rows, layout.storage_spec())
        return out

    def value_and_grad(self, flat: Mapping[str, DTensor], *batch: Any,
                       micro_batches: int = 1) -> tuple[DTensor, dict[str, DTensor]]:
        """``(loss, gradients)`` for the flat shards and a batch; the gradients are flat shards like ``flat``.

        The batch is passed whole on every rank; each rank uses its part along the first axis.

        With ``micro_batches=k`` the batch holds ``k`` batches of the traced shape along its first axis:
        each runs forward and backward in turn, their local (pending) flat gradients are summed, and
        one reduce_scatter per bucket ends the step.  The loss and gradients are the mean of the
        micro-batches' (the full batch's when ``loss_fn`` is a mean over the batch).

        Example:
            >>> import numpy as np, dtensor_np as dt
            >>> params, x = {"w": np.arange(3.0)}, np.arange(12.0).reshape(4, 3)
            >>> loss_fn = lambda p, x: np.mean((x @ p["w"]) ** 2)
            >>> step = dt.fsdp(loss_fn, params, x[:2], mesh=dt.DeviceMesh((2,), ("dp",)))
            >>> with dt.comm_counter() as c:
            ...     loss, grads = step.value_and_grad(step.shard(params), x, micro_batches=2)
            >>> float(loss) == float(loss_fn(params, x)), c.counts["reduce_scatter"]
            (True, 1)
        """
        local = {key: x.to_local() for key, x in self._checked(flat).items()}
        parts = self._micro_batches(batch, micro_batches)
        specs = self.graph.sharding.outputs  # type: ignore[union-attr]
        if micro_batches == 1:
            shards = run_sharded_shards(self.graph, local, *batch)
            loss, grads = unflatten(self.graph.out_tree, [DTensor(s, spec) for s, spec in zip(shards, specs)])
            return loss, grads
        micro = self.micro_graph
        assert micro is not None
        sums = {f"sum{b}": self._zeros(layout, local[key]) for b, (key, layout) in enumerate(zip(self.keys(),
                                                                                                  self.layouts))}
        loss_sum: dict[int, Any] = {}
        for part in parts:  # each micro-batch adds its gradients into sums in place
            loss_shards, _ = unflatten(micro.out_tree, run_sharded_shards(micro, {**local, **sums}, *part))
            loss_sum = {r: loss_sum.get(r, 0) + x for r, x in loss_shards.items()}
        grads = {}
        for b, (key, layout) in enumerate(zip(self.keys(), self.layouts)):
            total = sums.pop(f"sum{b}")
            mean = dict(total.shards) if isinstance(total, LocalTensor) else {self._ranks()[0]: total}
            for g in mean.values():
                g /= micro_batches  # in place: the sum is ours
            stored = layout.storage_spec()  # one reduce_scatter per bucket per step
            grads[key] = DTensor(redistribute_shards(mean, layout.partial_spec(), stored), stored)
        loss = DTensor({r: x / micro_batches for r, x in loss_sum.items()}, specs[0])
        return loss, grads

    def _ranks(self) -> tuple[int, ...]:
        return tuple(backend_for(self.mesh).ranks)

    def _zeros(self, layout: FlatLayout, like: Any) -> Any:
        """A zero running sum of a bucket's gradients, in the form of a local argument (like ``like``)."""
        shape = layout.partial_spec().local_shape_of_rank
        if isinstance(like, LocalTensor):
            return LocalTensor({r: array_module(x).zeros(shape(r), layout.dtype) for r, x in like.shards.items()})
        return array_module(like).zeros(shape(self._ranks()[0]), layout.dtype)

    def _micro_batches(self, batch: Sequence[Any], k: Any) -> list[tuple[Any, ...]]:
        """``batch`` cut into ``k`` equal parts along the first axis (checked before any collective)."""
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ShardingError(f"expected micro_batches a positive int, got {k!r}")
        if k == 1 or not batch:
            return [tuple(batch)]
        rows = {int(np.shape(b)[0]) if np.ndim(b) else 0 for b in batch}
        if len(rows) != 1 or min(rows) % k:
            raise ShardingError(f"expected batch arrays whose first axis splits into {k} equal micro-batches, "
                                f"got first axes {[np.shape(b)[:1] for b in batch]}")
        n = min(rows) // k
        return [tuple(b[i * n:(i + 1) * n] for b in batch) for i in range(k)]

    def _checked(self, flat: Mapping[str, DTensor]) -> Mapping[str, DTensor]:
        """``flat`` after checking it holds every bucket's flat shard with its spec (before any collective)."""
        if not isinstance(flat, Mapping) or set(flat) != set(self.keys()):
            got = sorted(flat) if isinstance(flat, Mapping) else type(flat).__name__
            raise ShardingError(f"expected the flat buffers {sorted(self.keys())}, got {got}")
        for key, layout in zip(self.keys(), self.layouts):
            x = flat[key]
            if not isinstance(x, DTensor) or x.spec != layout.storage_spec():
                got = x.spec if isinstance(x, DTensor) else type(x).__name__
                raise ShardingError(f"{key}: expected a flat shard with spec {layout.storage_spec()}, got {got}")
        return flat

    def unshard(self, flat: Mapping[str, DTensor]) -> dict[str, Any]:
        """The full parameters (or gradients) held in flat shards, as plain arrays on every rank (gathers)."""
        flat = self._checked(flat)
        out: dict[str, Any] = {}
        for key, names, layout in zip(self.keys(), self.names, self.layouts):
            gathered = flat[key].redistribute(layout.gathered_spec().placements)
            local = gathered.to_local()
            per_rank = local.shards if isinstance(local, LocalTensor) else {backend_for(self.mesh).ranks[0]: local}
            views = {r: layout.unflatten(r, buf) for r, buf in per_rank.items()}
            for m, (name, spec) in enumerate(zip(names, layout.specs)):
                member = DTensor({r: v[m] for r, v in views.items()}, spec)
                out[name] = member.full_tensor()
        return out

    def collectives(self, micro_batches: int = 1) -> dict[str, int]:
        """The collectives one step issues, by kind (kinds with none left out).

        With ``micro_batches=k``: each micro-batch's gathers and loss all_reduce, and one
        reduce_scatter per bucket.
        """
        self._micro_batches((), micro_batches) if micro_batches != 1 else None  # checks k only
        if micro_batches == 1:
            return {k: n for k, n in graph_collectives(self.graph).items() if n}
        counts = {k: n * micro_batches for k, n in graph_collectives(self.micro_graph).items()}  # type: ignore[arg-type]
        for layout in self.layouts:
            for kind in Redistribute(layout.partial_spec(), layout.storage_spec()).collectives():
                counts[kind] += 1
        return {k: n for k, n in counts.items() if n}


def _first_use(graph: Graph, names: Sequence[str]) -> list[str]:
    """``names`` (parameter paths) in the order the graph's nodes first read them."""
    var_of = {path: v for (arg, path), v in zip(graph.input_keys, graph.inputs) if arg == PARAMS}
    order: dict[str, int] = {}
    by_id = {var_of[n].id: n for n in names}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            if v.id in by_id:
                order.setdefault(by_id[v.id], i)
    return sorted(names, key=lambda n: order.get(n, len(graph.nodes)))


def _buckets(names: Sequence[str], specs: Mapping[str, DTensorSpec], cap_bytes: float) -> list[list[str]]:
    """Consecutive parameters of one dtype, each bucket at most ``cap_bytes`` (a larger one alone)."""
    out: list[list[str]] = []
    size = 0.0
    for n in names:
        nbytes = specs[n].dtype.itemsize * int(np.prod(specs[n].shape))
        if out and specs[out[-1][0]].dtype == specs[n].dtype and size + nbytes <= cap_bytes:
            out[-1].append(n)
            size += nbytes
        else:
            out.append([n])
            size = nbytes
    return out


def fsdp(
    loss_fn: Callable[..., Any],
    params: Mapping[str, Any],
    *batch: Any,
    mesh: DeviceMesh,
    dp_dim: Union[int, str] = "dp",
    tp_plan: Optional[Mapping[str, ParallelStyle]] = None,
    tp_dim: Union[int, str, None] = None,
    bucket_mb: float = 25.0,
    reshard_after_forward: bool = False,
) -> FSDPStep:
    """``loss_fn(params, *batch)`` (a scalar) rewritten for FSDP on ``mesh``, x TP with ``tp_plan``.

    Args:
        loss_fn: the single-device loss; ``params`` a flat or nested dict of arrays.
        params, batch: example values (traced for their shapes and dtypes only).
        mesh: the mesh; ``dp_dim`` (a name or index; on a 1-D mesh without dim names, its dim) splits the
            batch and stores the parameters.
        tp_plan: layer prefix -> ``ColwiseParallel()``/``RowwiseParallel()`` on mesh dim ``tp_dim``
            (default: the dim named ``"tp"``).
        bucket_mb: the most MiB of parameters (global) in one flat bucket.
        reshard_after_forward: free each bucket's gathered parameters after their last forward use and
            gather them again (one more all_gather per bucket) for the backward, as FSDP2 does; the
            gathers then run one bucket ahead of their use instead of all at once.

    Returns:
        An :class:`FSDPStep`: ``step.shard(params)`` gives the flat shards,
        ``step.value_and_grad(flat, *batch)`` the loss and the flat gradient shards.

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> params = {"w": np.ones((3, 1))}
        >>> step = fsdp(lambda p, x: np.mean(x @ p["w"]), params, np.ones((4, 3)), mesh=dt.DeviceMesh((2,), ("dp",)))
        >>> float(step.value_and_grad(step.shard(params), np.ones((4, 3)))[0])
        3.0
    """
    if not isinstance(mesh, DeviceMesh):
        raise TypeError(f"expected a DeviceMesh, got {type(mesh).__name__}")
    if not isinstance(params, Mapping):
        raise TypeError(f"expected the parameters as a dict of arrays, got {type(params).__name__}")
    if not batch:
        raise ShardingError("fsdp splits a batch over the dp mesh dim: pass at least one batch array")
    if isinstance(bucket_mb, bool) or not isinstance(bucket_mb, (int, float)) or not bucket_mb > 0:
        raise ShardingError(f"bucket_mb must be a positive number of MiB, got {bucket_mb!r}")
    if not isinstance(reshard_after_forward, bool):
        raise TypeError(f"expected reshard_after_forward a bool, got {type(reshard_after_forward).__name__}")
    dp = 0 if mesh.ndim == 1 and dp_dim == "dp" and mesh.dim_names is None else mesh.dim_index(dp_dim)
    flat = flatten_params(params)
    if not flat:
        raise ShardingError("fsdp shards parameters: expected at least one parameter, got an empty dict")
    for name, value in flat.items():
        dtype = np.result_type(value)  # an array's own dtype (NumPy or CuPy), a Python scalar's default one
        if dtype.kind not in "fc":
            raise TypeError(f"fsdp trains floating-point parameters: expected a float array for {name!r}, "
                            f"got dtype {dtype}")
    placed: dict[str, Placement] = {}
    tp = None
    if tp_plan:
        tp = tp_mesh_dim(mesh, tp_dim)
        if tp == dp:
            raise ShardingError(f"the tp and dp mesh dims must differ, got both {dp}")
        placed = plan_placements(flat, tp_plan)
    for b in batch:
        if np.ndim(b) == 0:
            raise ShardingError("expected batch arrays with a first axis to split over dp, got a scalar")

    joint = grad_graph(trace(loss_fn, params, *batch), (PARAMS,))
    if joint.outputs[0].aval.shape != ():
        raise TypeError(f"fsdp needs a loss function returning a scalar, got shape {joint.outputs[0].aval.shape}")

    def spec_of(arg: int, path: str, var: Var) -> DTensorSpec:
        placements: list[Placement] = [Replicate()] * mesh.ndim
        if arg == PARAMS:
            if tp is not None and path in placed:
                placements[tp] = placed[path]
        elif var.aval.ndim:
            placements[dp] = Shard(0)
        return DTensorSpec(mesh, tuple(placements), var.aval.meta)

    input_specs = tuple(spec_of(arg, path, v) for (arg, path), v in zip(joint.input_keys, joint.inputs))
    param_idx = [i for i, (arg, _) in enumerate(joint.input_keys) if arg == PARAMS]

    def grad_spec(spec: DTensorSpec) -> DTensorSpec:
        return spec.with_placements(tuple(Partial("sum") if m == dp else p for m, p in enumerate(spec.placements)))

    out_specs = [replicated(mesh, joint.outputs[0].aval.meta)] + [grad_spec(input_specs[i]) for i in param_idx]
    shared = tuple(m for m in range(mesh.ndim) if m != dp)  # reduce tp's shared pending sums once (Megatron's f)
    sharded = shard_graph(joint, input_specs, local_args=(PARAMS,), output_specs=out_specs, reduce_shared=shared)
    return _flat_graph(sharded, param_idx, dp, bucket_mb * MIB, reshard_after_forward)


def _flat_graph(sharded: Graph, param_idx: Sequence[int], dp: int, cap_bytes: float,
                reshard_after_forward: bool = False) -> FSDPStep:
    """The sharded joint graph with its parameters and gradients in flat buckets, lowered and scheduled."""
    sharding = sharded.sharding
    assert sharding is not None
    mesh = sharding.mesh
    path_of = {i: sharded.input_keys[i][1] for i in param_idx}
    var_of = {path_of[i]: sharded.inputs[i] for i in param_idx}
    spec_of = {path_of[i]: sharding.inputs[i] for i in param_idx}
    grad_of = {path_of[i]: sharded.outputs[1 + k] for k, i in enumerate(param_idx)}
    grad_spec = {path_of[i]: sharding.outputs[1 + k] for k, i in enumerate(param_idx)}  # type: ignore[index]
    names = _buckets(_first_use(sharded, list(var_of)), spec_of, cap_bytes)

    ids = fresh_ids(sharded)
    inputs, keys, in_specs, front, back, outputs, out_specs, layouts = [], [], [], [], [], [], [], []
    pending_grads, gathers = [], []
    token: Optional[tuple[Var, DTensorSpec]] = None  # reshard_after_forward: gather b once b - 1 is unpacked
    for b, members in enumerate(names):
        layout = FlatLayout.of([spec_of[n] for n in members], dp)
        layouts.append(layout)
        stored, pending = layout.storage_spec(), layout.partial_spec()
        flat_in = Var(next(ids), layout.aval, f"{sharded.arg_names[PARAMS]}.bucket{b}")
        inputs.append(flat_in)
        keys.append((PARAMS, f"bucket{b}"))
        in_specs.append(stored)
        gather = _Gather(layout, flat_in)
        gathers.append(gather)
        front += gather.nodes(ids, tuple(var_of[n] for n in members), token if reshard_after_forward else None)
        token = (var_of[members[0]], spec_of[members[0]])
        pack = FlatPack(layout)
        grads_in = tuple(grad_of[n] for n in members)
        if tuple(grad_spec[n] for n in members) != pack.member_specs():
            raise ShardingError(f"bucket {b}: gradients end in {[str(grad_spec[n]) for n in members]}")
        flat_grad, reduced = Var(next(ids), layout.aval), Var(next(ids), layout.aval)
        back += [
            Node(pack, grads_in, (flat_grad,), sharding=NodeSharding(pack.member_specs(), (pending,), pack.local)),
            Node(Redistribute(pending, stored), (flat_grad,), (reduced,), sharding=NodeSharding((pending,), (stored,))),
        ]
        outputs.append(reduced)
        out_specs.append(stored)
        pending_grads.append(flat_grad)
    body = sharded.nodes
    if reshard_after_forward:
        members_of = [tuple(var_of[n] for n in members) for members in names]
        body = _regather_for_backward(prune(sharded), gathers, members_of, ids)
    params_at = set(param_idx)
    others = [i for i in range(len(sharded.inputs)) if i not in params_at]
    loss_spec = sharding.outputs[0]  # type: ignore[index]
    order, out_tree = flatten((-1, {f"bucket{b}": b for b in range(len(names))}))  # the pytree's leaf order

    def build(nodes: Sequence[Node], grads: Sequence[Var], specs: Sequence[DTensorSpec],
              sums: Sequence[Var] = ()) -> Graph:
        sum_specs = tuple(layout.partial_spec() for layout in layouts[:len(sums)])
        graph = Graph(
            inputs=tuple(inputs) + tuple(sums) + tuple(sharded.inputs[i] for i in others),
            nodes=tuple(front) + tuple(body) + tuple(nodes),
            outputs=(sharded.outputs[0], *[grads[b] for b in order[1:]]),
            input_keys=tuple(keys) + tuple((PARAMS, f"sum{b}") for b in range(len(sums)))
            + tuple(sharded.input_keys[i] for i in others),
            arg_names=sharded.arg_names,
            out_tree=out_tree,
            sharding=GraphSharding(mesh, tuple(in_specs) + sum_specs + tuple(sharding.inputs[i] for i in others),
                                   (PARAMS,), (loss_spec, *[specs[b] for b in order[1:]])),
        )
        return lower(verify(prune(graph), check_shapes=False))

    step_graph = build(back, outputs, out_specs)
    # micro-batches: each bucket's gradients added in place to a running sum (an input), no reduce_scatter
    sums = [Var(next(ids), layout.aval, f"{sharded.arg_names[PARAMS]}.sum{b}") for b, layout in enumerate(layouts)]
    adds = []
    for total, pack_node, flat_grad in zip(sums, back[0::2], pending_grads):
        add = FlatPack(pack_node.fn.layout, accumulate=True)
        pending = add.layout.partial_spec()
        adds.append(Node(add, (total, *pack_node.inputs), (flat_grad,),
                         sharding=NodeSharding((pending, *add.member_specs()), (pending,), add.local)))
    micro = build(adds, pending_grads, [layout.partial_spec() for layout in layouts], sums)
    return FSDPStep(step_graph, tuple(tuple(m) for m in names), tuple(layouts), micro, reshard_after_forward)


@dataclass(frozen=True, eq=False, slots=True)
class _Gather:
    """How one bucket is gathered: all_gather of its flat shard on dp, then its members as views."""

    layout: FlatLayout
    flat_in: Var

    def nodes(self, ids: Iterator[int], members: Sequence[Var],
              token: Optional[tuple[Var, DTensorSpec]] = None) -> list[Node]:
        """``members = unflatten(all_gather(flat_in))``, the gather started once ``token`` exists (if given)."""
        stored, gathered = self.layout.storage_spec(), self.layout.gathered_spec()
        source, out = self.flat_in, []
        if token is not None:
            source = Var(next(ids), self.layout.aval)
            out.append(after_node(self.flat_in, stored, token[0], token[1], source))
        flat_all = Var(next(ids), self.layout.aval)
        unpack = FlatUnpack(self.layout)
        return out + [
            Node(Redistribute(stored, gathered), (source,), (flat_all,), sharding=NodeSharding((stored,), (gathered,))),
            Node(unpack, (flat_all,), tuple(members), out_kind="tuple",
                 sharding=NodeSharding((gathered,), self.layout.specs, unpack.local)),
        ]


def _ancestors(nodes: Sequence[Node], root: Var) -> set[int]:
    """Indices of the nodes ``root`` depends on."""
    needed, out = {root.id}, set()
    for i in range(len(nodes) - 1, -1, -1):
        if any(v.id in needed for v in nodes[i].outputs):
            out.add(i)
            needed.update(v.id for v in nodes[i].inputs)
    return out


def _regather_for_backward(sharded: Graph, gathers: Sequence[_Gather], members: Sequence[tuple[Var, ...]],
                           ids: Iterator[int]) -> list[Node]:
    """The sharded nodes with the backward's uses of gathered parameters moved to a second gather per bucket.

    The forward is what the loss depends on; every other node is the
    backward.  A backward node that reads a member, or a value the forward
    computed from members alone (a view: a transpose, a reshape), reads it
    from the bucket's second gather instead (views recomputed from it), so
    the first gather's buffer dies after its last forward use.  The second
    gathers start one bucket ahead of the backward's needs (``after``): the
    first one needed once its forward's last use has run, each next one once
    the one before it is unpacked.
    """
    nodes = sharded.nodes
    forward = _ancestors(nodes, sharded.outputs[0])
    bucket_of = {v.id: b for b, vs in enumerate(members) for v in vs}
    derived: dict[int, Node] = {}  # forward values computed from members alone -> their node
    for i in sorted(forward):
        node = nodes[i]
        if (node.inputs and not isinstance(node.fn, (Redistribute, MeshOp)) and node.sharding is not None
                and node.sharding.program is None
                and all(v.id in bucket_of or v.id in derived for v in node.inputs)):
            derived.update((v.id, node) for v in node.outputs)
            first = next(v.id for v in node.inputs)
            bucket_of.update((v.id, bucket_of[first]) for v in node.outputs)  # for ordering only
    remap: dict[int, Var] = {}
    out: list[Node] = []
    last_forward_use: dict[int, tuple[Var, DTensorSpec]] = {}
    token: Optional[tuple[Var, DTensorSpec]] = None

    def second(v: Var) -> Var:
        nonlocal token
        if v.id in remap:
            return remap[v.id]
        if v.id not in derived:  # a member: the whole bucket's second gather
            b = bucket_of[v.id]
            fresh = [Var(next(ids), m.aval) for m in members[b]]
            start_after = token if token is not None else last_forward_use.get(b)
            out.extend(gathers[b].nodes(ids, fresh, start_after))
            remap.update((m.id, f) for m, f in zip(members[b], fresh))
            token = (fresh[0], gathers[b].layout.specs[0])
            return remap[v.id]
        node = derived[v.id]
        ins = tuple(second(x) for x in node.inputs)
        outs = tuple(Var(next(ids), x.aval) for x in node.outputs)
        out.append(replace(node, inputs=ins, outputs=outs))
        remap.update((x.id, y) for x, y in zip(node.outputs, outs))
        return remap[v.id]

    for i, node in enumerate(nodes):
        if i in forward:
            for v in node.inputs:
                if v.id in bucket_of and node.outputs and node.sharding is not None:
                    last_forward_use[bucket_of[v.id]] = (node.outputs[0], node.sharding.outputs[0])
            out.append(node)
        elif any(v.id in bucket_of for v in node.inputs):
            out.append(replace(node, inputs=tuple(second(v) if v.id in bucket_of else v for v in node.inputs)))
        else:
            out.append(node)
    return out
