"""A scikit-learn Pipeline fitted on row-sharded data: StandardScaler -> PCA -> Ridge, with array-API dispatch.

scikit-learn's own code, unchanged, runs on DTensors: ``array_api_dispatch=True``
makes it call ``X.__array_namespace__()``, the namespace of
``dt.array_api.namespace``, so every mean, variance, SVD and product runs on
the shards, and the fitted ``mean_``, ``coef_``... are DTensors on the same mesh.
Every rank prints the R^2 score, which must equal the same pipeline's on NumPy.

Where it communicates: the scaler's column statistics are all_reduces of one
row each (a few reduce_scatters and all_gathers of per-column vectors);
``PCA(svd_solver="covariance_eigh")`` reduces ``X.T @ X`` (features x features)
and solves the small eigenproblem on every rank; the finiteness checks of each
step are one all_reduce of a bool, the score a few all_reduces of scalars;
``Ridge(solver="svd")`` gathers its (samples x components) input for the SVD
(the SVD rule gathers a row-sharded matrix).

    python examples/sklearn_pipeline.py                 # 4 simulated ranks in this process
    mpiexec -n 2 python examples/sklearn_pipeline.py    # two MPI processes, each prints its score
"""

from __future__ import annotations

import os
from typing import Optional, Sequence

os.environ.setdefault("SCIPY_ARRAY_API", "1")  # before SciPy is imported: scikit-learn's dispatch needs it

import numpy as np  # noqa: E402
import sklearn  # noqa: E402
from sklearn.decomposition import PCA  # noqa: E402
from sklearn.linear_model import Ridge  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

import dtensor_np as dt  # noqa: E402
from examples_common import compare, mesh_from_args  # noqa: E402


def make_model():
    return make_pipeline(StandardScaler(), PCA(n_components=6, svd_solver="covariance_eigh"),
                         Ridge(alpha=1.0, solver="svd"))


def fit_and_score(X, y) -> tuple[object, float]:
    """The fitted pipeline and its R^2 on (X, y); the same code for NumPy arrays and DTensors."""
    with sklearn.config_context(array_api_dispatch=True):
        model = make_model().fit(X, y)
        return model, float(model.score(X, y))


def main(argv: Optional[Sequence[str]] = None) -> None:
    mesh, default = mesh_from_args(__doc__.splitlines()[0], argv)
    xp = dt.array_api.namespace(mesh, default=default)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(203, 8)) * np.linspace(1.0, 50.0, 8) + 3.0
    y = X @ rng.normal(size=8) + rng.normal(size=203)
    Xd, yd = xp.asarray(X), xp.asarray(y)
    model, score = fit_and_score(Xd, yd)
    model_np, score_np = fit_and_score(X, y)
    ranks = sorted(Xd.local_shards())
    print(dt.visualize_sharding(Xd), flush=True)
    print(f"ranks {ranks}: R^2 = {score!r} (NumPy: {score_np!r})", flush=True)
    print(compare("R^2", score, score_np), flush=True)
    print(compare("Ridge coef_", model[-1].coef_, model_np[-1].coef_), flush=True)
    print(compare("StandardScaler mean_", model[0].mean_, model_np[0].mean_), flush=True)
    print(compare("PCA components_", model[1].components_, model_np[1].components_), flush=True)


if __name__ == "__main__":
    main()
