"""k-means (Lloyd's algorithm), written for one machine, run unchanged on sharded points.

``kmeans(X, centers)`` is plain Array API code: distances by broadcasting,
labels by ``argmin``, new centers by a one-hot matrix product.  With the points
sharded by rows (``default="shard_first"``), each step gathers the k centers
(an all_gather of a k x d matrix) and settles the per-cluster sums ``onehot.T @ X``
and counts with all_reduces; the labels stay sharded with the points.

    python examples/kmeans.py                           # 4 simulated ranks in this process
    python examples/kmeans.py --ranks 3 --default shard_last
    mpiexec -n 2 python examples/kmeans.py
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

import dtensor_np as dt
from examples_common import compare, mesh_from_args


def kmeans(X: Any, centers: Any, iters: int = 10) -> tuple[Any, Any]:
    """``iters`` Lloyd steps from ``centers`` (k x d): the final centers and each point's cluster."""
    xp = X.__array_namespace__()
    k = centers.shape[0]
    for _ in range(iters):
        distances = xp.sum((X[:, None, :] - centers[None, :, :]) ** 2, axis=2)
        labels = xp.argmin(distances, axis=1)
        onehot = xp.astype(labels[:, None] == xp.arange(k, device=X.device)[None, :], X.dtype)
        centers = (onehot.T @ X) / xp.sum(onehot, axis=0)[:, None]
    return centers, labels


def blobs(rng: np.random.Generator, per_cluster: int = 23) -> np.ndarray:
    return np.concatenate([rng.normal(size=(per_cluster, 2)) + c for c in ([0, 0], [6, 0], [0, 6])])


def main(argv: Optional[Sequence[str]] = None) -> None:
    mesh, default = mesh_from_args(__doc__.splitlines()[0], argv)
    xp = dt.array_api.namespace(mesh, default=default)
    X = blobs(np.random.default_rng(0))
    start = [0, 30, 50]  # one point of each blob
    Xd = xp.asarray(X)
    centers, labels = kmeans(Xd, Xd[start])
    centers_np, labels_np = kmeans(X, X[start])
    print(dt.visualize_sharding(Xd), flush=True)
    print(compare("centers", centers, centers_np), flush=True)
    print(compare("labels", labels, labels_np), flush=True)


if __name__ == "__main__":
    main()
