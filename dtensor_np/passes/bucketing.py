"""Bucketing: many small independent all_gathers (reduce_scatters, all_reduces) become a few large ones.

:func:`bucket_all_gather`, :func:`bucket_reduce_scatter` and
:func:`bucket_all_reduce` take a sharded graph (lowering it first when it still has redistribute nodes), group the
lowered collectives of one kind into buckets, and run each bucket of two or
more as one collective on a flat buffer, with a copy-in before it and a
split-out after it (see :mod:`dtensor_np.passes.bucket_layout` for the layout,
the padding of uneven shards, and the byte view for mixed dtypes).  So MPI's
per-call latency is paid once per bucket instead of once per tensor.

Which collectives share a bucket (:func:`plan_buckets`), in graph order:

* only collectives on the same rank groups and dtype (and, for
  reduce_scatter and all_reduce, the same reduce op) share a bucket; with
  ``byte_view=True`` all_gathers of any dtypes do;
* a bucket closes when the next collective depends on one of its members
  (transitively, through any nodes), so no collective shares a bucket with
  one it depends on.  Buckets of other kinds or groups close the same way
  when a later collective depends on them, which keeps the merged graph
  acyclic: a bucket only ever depends on buckets that closed before it;
* a bucket closes when the next member would take it over the cap,
  ``cap_mb`` MiB (a number, or a callable from the bucket's index among its
  kind's buckets to MiB), counted like PyTorch: the gathered output of an
  all_gather, the input of a reduce_scatter or all_reduce, per rank
  (padding included).  A
  collective larger than the cap on its own stays alone.

The merged graph is rescheduled (copy-in and start as early as every
member's input exists, wait and split-out just before the first use) and
verified.  Outputs are bit for bit those of the unbucketed graph: gathers
move the same bytes, and a bucketed reduce_scatter reduces every element
with the same values in the same rank order.  Under MPI that holds as long
as MPI reduces in an order independent of the message size: MPICH picks its
``Ireduce_scatter_block`` algorithm by size, so on more than two ranks pin
it (``MPIR_CVAR_IREDUCE_SCATTER_BLOCK_INTRA_ALGORITHM`` and
``MPIR_CVAR_IREDUCE_SCATTER_INTRA_ALGORITHM``, e.g. ``sched_pairwise``) for
bitwise-reproducible sums; two ranks always agree.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> from dtensor_np.graph import trace, graph_collectives
    >>> from dtensor_np.tensor_parallel import shard_graph
    >>> mesh = dt.DeviceMesh((2,))
    >>> grads = {"a": np.ones((384, 512), "f4"), "b": np.ones((384, 256), "f4")}
    >>> g = trace(lambda grads: grads, grads)
    >>> partial = tuple(dt.DTensorSpec(mesh, (dt.Partial(),), v.aval.meta) for v in g.inputs)
    >>> fsdp = shard_graph(g, partial, output_specs=[(dt.Shard(0),)] * 2)
    >>> print(bucket_reduce_scatter(fsdp, cap_mb=25))
    graph(grads.a: f32[384,512] P(sum), grads.b: f32[384,256] P(sum)) on DeviceMesh((2,)):
      %0: f32[2,147456] P(sum) = copy_in(grads.a, grads.b)  # reduce_scatter bucket of 2 (float32), 1152.0 KiB per rank
      %1: f32[2,147456] S(0) = reduce_scatter.start(%0)  # P(sum)->S(0) reduce_scatter on mesh dim 0, bucket of 2
      %2: f32[2,147456] S(0) = wait(%1)
      %3: f32[384,512] S(0), %4: f32[384,256] S(0) = split_out(%2)  # 2 members
      return %3 S(0), %4 S(0)
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field, replace
from typing import Callable, Union

from ..errors import ShardingError
from ..graph.graph import Graph
from ..graph.ir import MeshOp, Node, NodeSharding, Var
from ..graph.verify import verify
from ..spec import DTensorSpec
from .bucket_layout import BucketLayout, BucketPack, BucketUnpack
from .lowering import fresh_ids, is_lowered, lower, require_sharded
from .ops import WAIT, Collective
from .scheduling import schedule

__all__ = [
    "bucket_all_gather",
    "bucket_reduce_scatter",
    "bucket_all_reduce",
    "plan_buckets",
    "collective_dependencies",
    "Cap",
    "BUCKETED_KINDS",
]

BUCKETED_KINDS = ("all_gather", "reduce_scatter", "all_reduce")

Cap = Union[float, int, Callable[[int], float]]
MIB = 1024 * 1024


def _cap_bytes(cap_mb: Cap, index: int) -> float:
    value = cap_mb(index) if callable(cap_mb) else cap_mb
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        source = f"cap_mb({index})" if callable(cap_mb) else "cap_mb"
        raise ShardingError(f"{source} must be a positive number of MiB, got {value!r}")
    return float(value) * MIB


def _check_cap(cap_mb: Cap) -> None:
    if callable(cap_mb):
        return
    if isinstance(cap_mb, bool) or not isinstance(cap_mb, numbers.Real):
        raise TypeError(f"cap_mb must be a number of MiB or a callable from bucket index to MiB, got {cap_mb!r}")
    _cap_bytes(cap_mb, 0)


@dataclass
class _Bucket:
    key: tuple
    index: int
    members: list[int] = field(default_factory=list)  # node indices of the starts
    mask: int = 0  # bits of the members' collectives
    nbytes: int = 0


def collective_dependencies(graph: Graph) -> tuple[list[int], list[int]]:
    """The start nodes of a lowered graph's collectives, and which collectives each one needs finished.

    Returns ``(starts, needs)``: ``starts[c]`` is the node index of collective
    ``c`` (in graph order) and bit ``d`` of ``needs[c]`` is set when its input
    depends, through any nodes, on the result of collective ``d``.

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> from dtensor_np.graph import trace
        >>> from dtensor_np.tensor_parallel import shard_graph
        >>> from dtensor_np.passes import lower
        >>> window = lambda v: np.lib.stride_tricks.sliding_window_view(v, 1, axis=0)  # no sharding rule: runs replicated
        >>> g = trace(lambda p: window(p[1] + window(p[0])[0]), [np.ones((2, 2)), np.ones((2, 2))])
        >>> mesh = dt.DeviceMesh((2,))
        >>> low = lower(shard_graph(g, tuple(dt.DTensorSpec(mesh, (dt.Shard(0),), v.aval.meta) for v in g.inputs)))
        >>> collective_dependencies(low)[1]  # the second gather needs the first
        [0, 1]
    """
    deps: dict[int, int] = {}  # variable id -> bits of the collectives its value needs
    pending_bit: dict[int, int] = {}  # in-flight variable id -> the bit of its collective
    starts: list[int] = []
    needs: list[int] = []
    for i, node in enumerate(graph.nodes):
        need = 0
        for v in node.inputs:
            need |= deps.get(v.id, 0)
        if isinstance(node.fn, MeshOp) and node.fn.pending:
            for v in node.outputs:
                pending_bit[v.id] = 1 << len(starts)
                deps[v.id] = need
            starts.append(i)
            needs.append(need)
            continue
        if isinstance(node.fn, MeshOp) and node.fn.waits:
            for v in node.inputs:
                need |= pending_bit.get(v.id, 0)
        for v in node.outputs:
            deps[v.id] = need
    return starts, needs


def _member(graph: Graph, i: int) -> tuple[Collective, DTensorSpec, DTensorSpec]:
    node = graph.nodes[i]
    assert node.sharding is not None
    return node.fn, node.sharding.inputs[0], node.sharding.outputs[0]  # type: ignore[return-value]


def _key(collective: Collective, dtype: object, byte_view: bool) -> tuple:
    if collective.kind != "all_gather":
        return (collective.call.groups, str(dtype), collective.call.op)
    return (collective.call.groups, "bytes" if byte_view else str(dtype))


def plan_buckets(graph: Graph, kind: str, cap_mb: Cap, *, byte_view: bool = False) -> list[list[int]]:
    """The buckets ``bucket_<kind>`` would merge (kind in :data:`BUCKETED_KINDS`), as start-node indices.

    ``graph`` must be lowered (see :func:`~dtensor_np.passes.lower`); only
    buckets of two or more collectives are listed, each in graph order.

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> from dtensor_np.graph import trace
        >>> from dtensor_np.tensor_parallel import shard_graph
        >>> from dtensor_np.passes import lower
        >>> mesh = dt.DeviceMesh((2,))
        >>> window = lambda v: np.lib.stride_tricks.sliding_window_view(v, 1, axis=0)  # no sharding rule: runs replicated
        >>> g = trace(lambda p: [window(p[0]), window(p[1] + window(p[0]).sum())], [np.ones(4), np.ones(4)])
        >>> low = lower(shard_graph(g, tuple(dt.DTensorSpec(mesh, (dt.Shard(0),), v.aval.meta) for v in g.inputs)))
        >>> [[low.nodes[i].op for i in b] for b in plan_buckets(low, "all_gather", 1)]  # the 2nd gather needs the 1st
        []
    """
    if kind not in BUCKETED_KINDS:
        raise ValueError(f"only all_gather, reduce_scatter and all_reduce are bucketed, got {kind!r}")
    if byte_view and kind != "all_gather":
        raise ValueError("byte_view only applies to all_gather: a reduction needs the element dtype")
    _check_cap(cap_mb)
    if not is_lowered(graph):
        raise ShardingError("plan_buckets needs a lowered graph: call dtensor_np.passes.lower first")
    starts, start_deps = collective_dependencies(graph)
    open_buckets: dict[tuple, _Bucket] = {}
    count: dict[tuple, int] = {}
    done: list[_Bucket] = []
    for c, i in enumerate(starts):
        need = start_deps[c]
        for key, bucket in list(open_buckets.items()):
            if need & bucket.mask:  # i depends on a member: the bucket must finish first
                done.append(open_buckets.pop(key))
        collective, before, after = _member(graph, i)
        if collective.kind != kind:
            continue
        layout = BucketLayout.build(kind, [(collective, before, after)], byte_view=byte_view)
        key = _key(collective, before.dtype, byte_view)
        bucket = open_buckets.get(key)
        if bucket is not None and bucket.nbytes + layout.nbytes_per_rank > _cap_bytes(cap_mb, bucket.index):
            done.append(open_buckets.pop(key))
            bucket = None
        if bucket is None:
            bucket = open_buckets[key] = _Bucket(key, count.get(key, 0))
            count[key] = bucket.index + 1
        bucket.members.append(i)
        bucket.mask |= 1 << c
        bucket.nbytes += layout.nbytes_per_rank
    done.extend(open_buckets.values())
    return sorted((b.members for b in done if len(b.members) > 1), key=lambda m: m[0])


def _merge(graph: Graph, buckets: list[list[int]], kind: str, byte_view: bool) -> Graph:
    """``graph`` with every bucket's starts and waits replaced by copy-in, one collective, wait, split-out."""
    ids = fresh_ids(graph)
    wait_of: dict[int, int] = {}
    reader = {v.id: j for j, n in enumerate(graph.nodes) if isinstance(n.fn, MeshOp) and n.fn.waits for v in n.inputs}
    for bucket in buckets:
        for i in bucket:
            wait_of[i] = reader[graph.nodes[i].outputs[0].id]
    removed = {i for b in buckets for i in b} | {wait_of[i] for b in buckets for i in b}
    nodes: list[Node] = [n for j, n in enumerate(graph.nodes) if j not in removed]
    for bucket in buckets:
        members = [_member(graph, i) for i in bucket]
        layout = BucketLayout.build(kind, members, byte_view=byte_view)
        buf_before, buf_after = layout.specs()
        ins = tuple(graph.nodes[i].inputs[0] for i in bucket)
        outs = tuple(graph.nodes[wait_of[i]].outputs[0] for i in bucket)
        in_specs = tuple(before for _, before, _ in members)
        out_specs = tuple(after for _, _, after in members)
        aval = BucketPack(layout).abstract_eval(())[0]
        packed, pending, received = (Var(next(ids), aval) for _ in range(3))
        pack, unpack = BucketPack(layout), BucketUnpack(layout)
        copy_in = NodeSharding(in_specs, (buf_before,), pack.local)  # type: ignore[arg-type]
        split_out = NodeSharding((buf_after,), out_specs, unpack.local)  # type: ignore[arg-type]
        nodes += [
            Node(pack, ins, (packed,), sharding=copy_in),
            Node(layout.collective(), (packed,), (pending,), sharding=NodeSharding((buf_before,), (buf_after,))),
            Node(WAIT, (pending,), (received,), sharding=NodeSharding((buf_after,), (buf_after,))),
            Node(unpack, (received,), outs, out_kind="tuple", sharding=split_out),
        ]
    return replace(graph, nodes=tuple(nodes))


def _bucket(graph: Graph, kind: str, cap_mb: Cap, byte_view: bool) -> Graph:
    require_sharded(graph, f"bucket_{kind}")
    _check_cap(cap_mb)
    lowered = graph if is_lowered(graph) else lower(graph)
    buckets = plan_buckets(lowered, kind, cap_mb, byte_view=byte_view)
    if not buckets:
        return lowered
    return verify(schedule(_merge(lowered, buckets, kind, byte_view)))


def bucket_all_gather(graph: Graph, cap_mb: Cap, *, byte_view: bool = False) -> Graph:
    """A new graph in which independent all_gathers run in buckets of at most ``cap_mb`` MiB each.

    Args:
        graph: a sharded graph, lowered or not (it is lowered first); not modified.
        cap_mb: MiB per bucket (gathered bytes per rank), or a callable from
            the bucket's index to MiB (e.g. a smaller first bucket).
        byte_view: let members of different dtypes share a bucket, moved as bytes.

    Returns:
        The lowered, bucketed, scheduled and verified graph.

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> from dtensor_np.graph import trace, graph_collectives
        >>> from dtensor_np.tensor_parallel import shard_graph
        >>> mesh = dt.DeviceMesh((2,))
        >>> params = {"w": np.ones((4, 3), "f4"), "steps": np.arange(6).reshape(2, 3)}
        >>> g = trace(lambda p: p, params)
        >>> fsdp = shard_graph(g, tuple(dt.DTensorSpec(mesh, (dt.Shard(1),), v.aval.meta) for v in g.inputs))
        >>> [graph_collectives(b)["all_gather"] for b in (fsdp, bucket_all_gather(fsdp, 1),
        ...                                               bucket_all_gather(fsdp, 1, byte_view=True))]
        [2, 2, 1]
    """
    return _bucket(graph, "all_gather", cap_mb, byte_view)


def bucket_reduce_scatter(graph: Graph, cap_mb: Cap) -> Graph:
    """A new graph in which independent reduce_scatters run in buckets of at most ``cap_mb`` MiB.

    Members of a bucket share their rank groups, dtype and reduce op.
    ``cap_mb`` counts each member's input bytes per rank; a number or a
    callable from bucket index to MiB.  ``graph`` is lowered first when it
    has redistribute nodes; it is not modified.  See the module doc for the
    rules and the bit-for-bit guarantee.

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> from dtensor_np.graph import trace, graph_collectives
        >>> from dtensor_np.tensor_parallel import shard_graph
        >>> mesh = dt.DeviceMesh((2,))
        >>> grads = {"w": np.ones((4, 3)), "b": np.ones(3)}
        >>> g = trace(lambda grads: grads, grads)
        >>> specs = tuple(dt.DTensorSpec(mesh, (dt.Partial(),), v.aval.meta) for v in g.inputs)
        >>> fsdp = shard_graph(g, specs, output_specs=[(dt.Shard(0),)] * 2)
        >>> bucketed = bucket_reduce_scatter(fsdp, cap_mb=25)
        >>> graph_collectives(fsdp)["reduce_scatter"], graph_collectives(bucketed)["reduce_scatter"]
        (2, 1)
        >>> local = {k: dt.LocalTensor({0: v, 1: 2 * v}) for k, v in grads.items()}  # partial sums
        >>> bucketed(local)["w"].shards[1].tolist()  # rank 1's half of the summed gradient
        [[3.0, 3.0, 3.0], [3.0, 3.0, 3.0]]
    """
    return _bucket(graph, "reduce_scatter", cap_mb, False)


def bucket_all_reduce(graph: Graph, cap_mb: Cap) -> Graph:
    """A new graph in which independent all_reduces run in buckets of at most ``cap_mb`` MiB (DDP's gradient buckets).

    Members of a bucket share their rank groups, dtype and reduce op;
    ``cap_mb`` counts each member's bytes per rank (a number, or a callable
    from bucket index to MiB).  ``graph`` is lowered first when it has
    redistribute nodes; it is not modified.  A bucketed sum adds the same
    values in the same rank order as each member's own all_reduce where MPI
    picks its algorithm independently of the message size (always on two
    ranks); see the module doc.

    Example (three gradients, every rank holding a partial sum of each)::

        >>> import numpy as np, dtensor_np as dt
        >>> from dtensor_np.graph import trace, graph_collectives
        >>> from dtensor_np.tensor_parallel import shard_graph
        >>> grads = {name: np.full(shape, 1.0) for name, shape in [("w1", (4, 3)), ("w2", (3, 2)), ("b", (2,))]}
        >>> g = trace(lambda grads: grads, grads)
        >>> summed = [dt.DTensorSpec(dt.DeviceMesh((2,)), [dt.Partial()], v.aval.meta) for v in g.inputs]
        >>> ddp = shard_graph(g, tuple(summed), output_specs=[[dt.Replicate()]] * 3)
        >>> bucketed = bucket_all_reduce(ddp, cap_mb=25)
        >>> graph_collectives(ddp)["all_reduce"], graph_collectives(bucketed)["all_reduce"]
        (3, 1)
        >>> per_rank = {k: dt.LocalTensor({0: v, 1: 2 * v}) for k, v in grads.items()}
        >>> bucketed(per_rank)["b"].tolist()  # the summed gradient: replicated, so one plain array
        [3.0, 3.0]
    """
    return _bucket(graph, "all_reduce", cap_mb, False)
