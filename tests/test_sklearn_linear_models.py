"""scikit-learn's SVD-based linear models on row-sharded X (``array_api_dispatch=True``): their SVDs and QRs run
by TSQR (dtensor_np.propagation.tsqr), so no collective grows with the number of rows: the same fit at two row
counts moves the same bytes, and the results match scikit-learn's on NumPy arrays.  ``TruncatedSVD``'s default
``algorithm="randomized"`` supports the namespace (``"arpack"`` calls SciPy's ``svds``, which does not: TypeError)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import dtensor_np as dt
from test_numpy_ops import Checks

sklearn = pytest.importorskip("sklearn")
pytest.importorskip("scipy")

from sklearn.decomposition import PCA, TruncatedSVD  # noqa: E402
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis  # noqa: E402
from sklearn.linear_model import Ridge  # noqa: E402

COLS = 16


def labels(X):
    return (X[:, 0] + X[:, 1] > 20.0) * 1  # the same expression on NumPy and DTensors


ESTIMATORS = {
    # name: (fit(X, y), fitted attributes compared with NumPy's)
    "PCA(svd_solver='full')": (lambda X, y: PCA(3, svd_solver="full").fit(X),
                               ("components_", "explained_variance_", "mean_")),
    "PCA(svd_solver='covariance_eigh')": (lambda X, y: PCA(3, svd_solver="covariance_eigh").fit(X),
                                          ("components_", "explained_variance_")),
    "PCA(svd_solver='randomized')": (lambda X, y: PCA(3, svd_solver="randomized", random_state=0,
                                                      power_iteration_normalizer="QR").fit(X),
                                     ("components_", "explained_variance_")),
    "TruncatedSVD": (lambda X, y: TruncatedSVD(3, random_state=0, power_iteration_normalizer="QR").fit(X),
                     ("components_", "singular_values_")),
    "Ridge(solver='svd')": (lambda X, y: Ridge(alpha=0.5, solver="svd").fit(X, y), ("coef_", "intercept_")),
    "LinearDiscriminantAnalysis": (lambda X, y: LinearDiscriminantAnalysis().fit(X, labels(X)),
                                   ("coef_", "intercept_", "scalings_")),
}


def data(rows: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(rows)
    X = rng.normal(size=(rows, COLS)) * np.linspace(1.0, 4.0, COLS) + 10.0
    return X, X @ rng.normal(size=COLS) + 0.1 * rng.normal(size=rows)


@pytest.mark.worlds(simulated=(4,), mpi=(2,))
def test_sklearn_linear_models_move_no_more_bytes_for_more_rows(world):
    checks = Checks(world)
    xp = dt.array_api.namespace(dt.DeviceMesh((world.size,), backend=world.kind), "shard_first")
    for name, (fit, attributes) in ESTIMATORS.items():
        moved = []
        for rows in (32 * world.size, 96 * world.size):  # at least 13 rows a rank: randomized's range of 3 + 10
            X, y = data(rows)
            expected = fit(X, y)
            with sklearn.config_context(array_api_dispatch=True), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                with dt.comm_counter() as counter:
                    got = fit(xp.asarray(X), xp.asarray(y))
            moved.append({kind: (counter.counts[kind], counter.bytes[kind]) for kind in counter.counts
                          if counter.counts[kind]})
            for attribute in attributes:
                mine, theirs = getattr(got, attribute), np.asarray(getattr(expected, attribute))
                mine = mine.full_tensor() if isinstance(mine, dt.DTensor) else np.asarray(mine)
                checks.expect(np.allclose(mine, theirs, rtol=1e-8, atol=1e-8 * np.abs(theirs).max(initial=1)),
                              f"{name} {attribute} at {rows} rows: {np.ravel(mine)[:3]} against {np.ravel(theirs)[:3]}")
        print(f"{name:36} {moved[0]}")
        if name == "LinearDiscriminantAnalysis":
            # its SVDs move O(d^2); what grows is xp.unique_values/unique_counts/unique_inverse gathering the
            # labels (4 calls, 8 bytes a row, 64 more rows a rank) and the all_to_all that X[y == k] and concat
            # use to put the selected rows back in torch.chunk order (a share of X's rows: not fixed here)
            grown = moved[1]["all_gather"][1] - moved[0]["all_gather"][1]
            checks.expect(grown <= 4 * 8 * 64, f"{name}: all_gather grew by {grown} bytes: more than the labels")
            continue
        checks.expect(moved[0] == moved[1], f"{name}: (count, bytes) per collective {moved[0]} then {moved[1]}")
    checks.finish()
