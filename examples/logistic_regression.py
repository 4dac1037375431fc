"""Logistic regression by gradient descent, written for one machine, run unchanged on row-sharded data.

``fit_logistic(X, y)`` is plain Array API code.  With the samples sharded
(``default="shard_first"``), each step computes its rows' predictions locally;
the gradient ``X.T @ g`` is a sum over samples, settled by one collective
(a reduce_scatter or all_reduce), and the weights ``w`` need one all_gather.

    python examples/logistic_regression.py              # 4 simulated ranks in this process
    python examples/logistic_regression.py --ranks 3 --default shard_last
    mpiexec -n 2 python examples/logistic_regression.py
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

import dtensor_np as dt
from examples_common import compare, mesh_from_args


def fit_logistic(X: Any, y: Any, lr: float = 0.5, iters: int = 200) -> tuple[Any, float]:
    """Weights and intercept minimising the mean log-loss of labels ``y`` in {0, 1}."""
    xp = X.__array_namespace__()
    n = X.shape[0]
    w = xp.zeros(X.shape[1], dtype=X.dtype, device=X.device)
    b = 0.0
    for _ in range(iters):
        p = 1.0 / (1.0 + xp.exp(-(X @ w + b)))
        g = p - y
        w = w - lr * (X.T @ g) / n
        b = b - lr * float(xp.mean(g))
    return w, b


def accuracy(X: Any, y: Any, w: Any, b: float) -> float:
    xp = X.__array_namespace__()
    return float(xp.mean(xp.astype((X @ w + b > 0) == (y > 0.5), X.dtype)))


def main(argv: Optional[Sequence[str]] = None) -> None:
    mesh, default = mesh_from_args(__doc__.splitlines()[0], argv)
    xp = dt.array_api.namespace(mesh, default=default)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(101, 6))
    y = (X @ rng.normal(size=6) + 0.3 * rng.normal(size=101) > 0).astype(np.float64)
    Xd, yd = xp.asarray(X), xp.asarray(y)
    w, b = fit_logistic(Xd, yd)
    w_np, b_np = fit_logistic(X, y)
    print(dt.visualize_sharding(Xd), flush=True)
    print(compare("weights", w, w_np), flush=True)
    print(compare("intercept", b, b_np), flush=True)
    print(compare("training accuracy", accuracy(Xd, yd, w, b), accuracy(X, y, w_np, b_np)), flush=True)


if __name__ == "__main__":
    main()
