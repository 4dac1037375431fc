"""Graph passes on sharded graphs: lowering, scheduling, and bucketing collectives.

* :func:`lower`: every ``redistribute`` node becomes explicit async
  collectives (a start node and its wait) and local steps, each marked with
  the sharding after it;
* :func:`prune`: nodes whose results nothing uses are dropped (collectives kept);
* :func:`schedule`: starts as early as their inputs allow, waits just before
  the first use, so independent compute overlaps communication;
* :func:`bucket_all_gather` / :func:`bucket_reduce_scatter` /
  :func:`bucket_all_reduce`: many small
  independent collectives become a few large ones (one flat buffer per
  bucket, copied in and split out), so MPI's latency is paid once per bucket.

Every pass is pure (returns a new graph, the input unchanged) and returns a
verified graph.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> from dtensor_np.graph import trace, graph_collectives
    >>> from dtensor_np.tensor_parallel import shard_graph
    >>> mesh = dt.DeviceMesh((2,))
    >>> params = {f"w{i}": np.full((4, 3), float(i)) for i in range(3)}
    >>> window = lambda v: np.lib.stride_tricks.sliding_window_view(v, 1, axis=0)  # no sharding rule: runs replicated
    >>> g = trace(lambda p: {k: window(v) for k, v in p.items()}, params)
    >>> fsdp = shard_graph(g, tuple(dt.DTensorSpec(mesh, (dt.Shard(0),), v.aval.meta) for v in g.inputs))
    >>> bucketed = bucket_all_gather(fsdp, cap_mb=25)
    >>> graph_collectives(fsdp)["all_gather"], graph_collectives(bucketed)["all_gather"]
    (3, 1)
    >>> local = {k: dt.distribute_tensor(v, mesh, [dt.Shard(0)]).to_local() for k, v in params.items()}
    >>> all(np.array_equal(bucketed(local)[k], fsdp(local)[k]) for k in params)
    True

``BUCKETED_KINDS`` are the collectives the bucketing passes merge; ``WAIT``
is the op of the node that waits for an asynchronous collective:

    >>> BUCKETED_KINDS, WAIT.name
    (('all_gather', 'reduce_scatter', 'all_reduce'), 'wait')
"""

from .bucketing import BUCKETED_KINDS, bucket_all_gather, bucket_all_reduce, bucket_reduce_scatter, plan_buckets
from .bucket_layout import BucketLayout, BucketPack, BucketUnpack
from .lowering import is_lowered, lower
from .ops import WAIT, Collective, LocalStep, Wait
from .pruning import prune
from .scheduling import schedule

__all__ = [
    "lower",
    "is_lowered",
    "schedule",
    "prune",
    "bucket_all_gather",
    "bucket_reduce_scatter",
    "bucket_all_reduce",
    "plan_buckets",
    "BUCKETED_KINDS",
    "Collective",
    "Wait",
    "WAIT",
    "LocalStep",
    "BucketLayout",
    "BucketPack",
    "BucketUnpack",
]
