"""Array-API consumers nobody here wrote, on DTensors: scikit-learn and SciPy, against plain NumPy.

scikit-learn runs with ``array_api_dispatch=True`` and SciPy with
``SCIPY_ARRAY_API=1`` (set in ``conftest.py`` before anything imports SciPy;
scikit-learn's dispatch needs it too).  Inputs are built by
``dt.array_api.namespace(mesh, default=...)`` with ``"shard_first"`` (rows
split) and ``"shard_last"`` (columns split), 23 x 5 so shards are uneven and,
with columns over 4 ranks (2, 2, 1, 0), one is empty.  Each test runs on 4
simulated ranks and under ``mpiexec -n 2``; every DTensor result is checked
against the same call on NumPy arrays, whole and on every held local shard,
and every Python scalar on every rank.

The collectives each consumer issues are counted (``collectives.comm_counter``)
and the README's table ("Array-API consumers") is what these tests print with
``-s``; they assert what does not depend on the rules still being written:
what runs along an unsharded axis issues no collective, and the transforms,
predictions and metrics never gather the data matrix.

The consumers that go through NumPy's semantics (views, conversions to NumPy:
``GaussianMixture``, ``GaussianNB``, ``LogisticRegression``, SciPy's
``special.expit`` and ``stats.entropy``...) are tested in
``tests/test_numpy_interop.py``.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

import dtensor_np as dt
from collectives import comm_counter
from test_numpy_ops import Checks

sklearn = pytest.importorskip("sklearn")
scipy = pytest.importorskip("scipy")

from scipy import special, stats  # noqa: E402
from sklearn.decomposition import PCA  # noqa: E402
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis  # noqa: E402
from sklearn.linear_model import Ridge  # noqa: E402
from sklearn.metrics import accuracy_score, mean_absolute_error, mean_squared_error, r2_score  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import MaxAbsScaler, MinMaxScaler, Normalizer, StandardScaler  # noqa: E402

POLICIES = ("shard_first", "shard_last")
ROWS, COLS = 23, 5


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(ROWS, COLS)) * np.arange(1.0, COLS + 1) + np.arange(COLS)
    y = X @ rng.normal(size=COLS) + 0.1 * rng.normal(size=ROWS)
    return X, y


def namespaces(world):
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    for policy in POLICIES:
        yield policy, dt.array_api.namespace(mesh, policy)


def counts(counter) -> dict[str, int]:
    return {kind: n for kind, n in counter.counts.items() if n}


def check_scalar(checks: Checks, ctx: str, got, expected) -> None:
    """A Python scalar (the same on every rank, so each rank checks its own)."""
    ok = isinstance(got, float) and np.isclose(got, expected, rtol=1e-10, atol=1e-12)
    checks.expect(bool(ok), f"{ctx}: {got!r} ({type(got).__name__}), NumPy {expected!r}")


# -- scikit-learn -----------------------------------------------------------------------
def fit_transform(est_type):
    def run(X, y):
        est = est_type().fit(X)
        attrs = [getattr(est, a) for a in ("mean_", "var_", "scale_", "data_min_", "data_max_", "max_abs_")
                 if getattr(est, a, None) is not None]
        return (est.transform(X), *attrs)

    return run


def ridge(X, y):
    est = Ridge(alpha=0.5, solver="svd").fit(X, y)
    return est.predict(X), est.coef_


def pca(solver):
    def run(X, y):
        est = PCA(n_components=3, svd_solver=solver).fit(X)
        return est.transform(X), est.components_, est.explained_variance_, est.mean_

    return run


def lda(X, y):
    labels = X[:, 0] + X[:, 1] > 2.0  # the same expression on NumPy and DTensors: classes 0 and 1
    est = LinearDiscriminantAnalysis().fit(X, labels * 1)
    return est.predict_proba(X), est.predict(X), est.coef_, est.means_


def pipeline(X, y):
    est = make_pipeline(StandardScaler(), PCA(n_components=4, svd_solver="covariance_eigh"),
                        Ridge(alpha=1.0, solver="svd")).fit(X, y)
    return (est.predict(X),)


ESTIMATORS = {
    "StandardScaler": fit_transform(StandardScaler),
    "MinMaxScaler": fit_transform(MinMaxScaler),
    "MaxAbsScaler": fit_transform(MaxAbsScaler),
    "Normalizer": fit_transform(Normalizer),
    "PCA(svd_solver='full')": pca("full"),
    "PCA(svd_solver='covariance_eigh')": pca("covariance_eigh"),
    "Ridge(solver='svd')": ridge,
    "LinearDiscriminantAnalysis": lda,
    "Pipeline(StandardScaler, PCA, Ridge)": pipeline,
}
# What gathers the data matrix (the README's table): an SVD of X (PCA "full", Ridge "svd", LDA),
# and with columns sharded X.T @ X too (PCA "covariance_eigh")
SVD_OF_X = ("PCA(svd_solver='full')", "Ridge(solver='svd')", "LinearDiscriminantAnalysis",
            "Pipeline(StandardScaler, PCA, Ridge)")
GATHER_X = {"shard_first": SVD_OF_X, "shard_last": SVD_OF_X + ("PCA(svd_solver='covariance_eigh')",)}
METRICS = {"r2_score": r2_score, "mean_squared_error": mean_squared_error, "mean_absolute_error": mean_absolute_error}


@pytest.mark.worlds(simulated=(4,), mpi=(2,))
def test_sklearn_estimators_match_numpy(world):
    X, y = data()
    checks = Checks(world)
    report = []
    for policy, xp in namespaces(world):
        Xd, yd = xp.asarray(X), xp.asarray(y)
        for name, run in ESTIMATORS.items():
            expected = run(X, y)
            with sklearn.config_context(array_api_dispatch=True), warnings.catch_warnings():
                # scikit-learn's errstate is NumPy-only: 0/0 of its first partial_fit step warns here
                warnings.simplefilter("ignore", RuntimeWarning)
                with comm_counter() as counter:
                    got = run(Xd, yd)
            report.append(f"{policy:12} {name:32} {counts(counter)}")
            # the answers are arrays of this namespace, never NumPy arrays, and match NumPy on every rank
            checks.expect(all(isinstance(g, dt.DTensor) for g in got), f"{policy} {name}: {[type(g) for g in got]}")
            checks.expect(all(g.__array_namespace__() is xp for g in got if isinstance(g, dt.DTensor)),
                          f"{policy} {name}: an answer of another namespace")
            checks.same(f"{policy} {name}", lambda: expected, lambda: got)
            # elsewhere an all_gather moves at most a vector of per-column statistics
            stats_only = counter.bytes["all_gather"] <= counter.counts["all_gather"] * COLS * X.itemsize
            checks.expect(stats_only or name in GATHER_X[policy],
                          f"{policy} {name}: all_gather of {counter.bytes['all_gather']} bytes")
    checks.finish()
    print("\n".join(report))


@pytest.mark.worlds(simulated=(4,), mpi=(2,))
def test_sklearn_metrics_match_numpy(world):
    _, y = data()
    pred = y + np.sin(np.arange(ROWS))
    labels, predicted = (y > 0).astype(np.int64), (pred > 0).astype(np.int64)
    cases = {name: (metric, y, pred) for name, metric in METRICS.items()}
    cases["accuracy_score"] = (accuracy_score, labels, predicted)
    checks = Checks(world)
    report = []
    for policy, xp in namespaces(world):
        for name, (metric, truth, guess) in cases.items():
            truth_d, guess_d = xp.asarray(truth), xp.asarray(guess)
            with sklearn.config_context(array_api_dispatch=True), comm_counter() as counter:
                got = metric(truth_d, guess_d)
            report.append(f"{policy:12} {name:32} {counts(counter)}")
            check_scalar(checks, f"{policy} {name}", got, metric(truth, guess))
            # a regression metric reduces its vectors: all_reduces of scalars, never a gather
            # (accuracy_score first finds the classes: unique_values of both label vectors)
            checks.expect(counter.counts["all_gather"] == 0 or name == "accuracy_score",
                          f"{policy} {name}: {counts(counter)}")
    checks.finish()
    print("\n".join(report))


@pytest.mark.worlds(simulated=(4,), mpi=(2,))
def test_sklearn_transform_of_row_shards_only_checks_finiteness(world):
    """A fitted MinMaxScaler/MaxAbsScaler transforms row-sharded data locally: one all_reduce (check_array's isfinite)."""
    X, _ = data()
    xp = dt.array_api.namespace(dt.DeviceMesh((world.size,), backend=world.kind), "shard_first")
    Xd = xp.asarray(X)
    checks = Checks(world)
    for est_type in (MinMaxScaler, MaxAbsScaler):
        with sklearn.config_context(array_api_dispatch=True):
            est = est_type().fit(Xd)
            with comm_counter() as counter:
                got = est.transform(Xd)
        checks.expect(counts(counter) == {"all_reduce": 1}, f"{est_type.__name__}.transform: {counts(counter)}")
        checks.expect(got.placements == Xd.placements, f"{est_type.__name__}: {got.placements}")
        checks.same(est_type.__name__, lambda: est_type().fit(X).transform(X), lambda: got)
    checks.finish()


# -- SciPy ------------------------------------------------------------------------------
SCIPY = {
    "special.logsumexp(axis=1)": lambda X: special.logsumexp(X, axis=1),
    "special.logsumexp(axis=0)": lambda X: special.logsumexp(X, axis=0),
    "special.logsumexp": lambda X: special.logsumexp(X),
    "special.softmax(axis=1)": lambda X: special.softmax(X, axis=1),
    "special.log_softmax(axis=1)": lambda X: special.log_softmax(X, axis=1),
    "special.log_softmax(axis=0)": lambda X: special.log_softmax(X, axis=0),
    "special.xlogy": lambda X: special.xlogy(X * X, X * X + 1),
    "stats.tmean": lambda X: stats.tmean(X),
    "stats.zscore(axis=0)": lambda X: stats.zscore(X, axis=0),
    "stats.zscore(axis=1)": lambda X: stats.zscore(X, axis=1),
    "stats.moment(order=3)": lambda X: stats.moment(X, order=3, axis=0),
    "stats.skew": lambda X: stats.skew(X, axis=0),
    "stats.kurtosis": lambda X: stats.kurtosis(X, axis=0),
    "stats.sem": lambda X: stats.sem(X, axis=0),
    "stats.gmean": lambda X: stats.gmean(X * X + 1, axis=0),
}
ROW_WISE = ("special.logsumexp(axis=1)", "special.softmax(axis=1)", "special.log_softmax(axis=1)", "special.xlogy")


def test_scipy_array_api_is_on():
    from scipy._lib._array_api import SCIPY_ARRAY_API

    assert os.environ.get("SCIPY_ARRAY_API") == "1" and SCIPY_ARRAY_API, "SciPy was imported before SCIPY_ARRAY_API=1"


@pytest.mark.worlds(simulated=(4,), mpi=(2,))
def test_scipy_functions_match_numpy(world):
    X, _ = data()
    checks = Checks(world)
    report = []
    for policy, xp in namespaces(world):
        Xd = xp.asarray(X)
        for name, call in SCIPY.items():
            with comm_counter() as counter:
                got = call(Xd)
            report.append(f"{policy:12} {name:32} {counts(counter)}")
            checks.same(f"{policy} {name}", lambda: np.asarray(call(X)), lambda: got)
            if policy == "shard_first" and name in ROW_WISE:  # along unsharded columns: local
                checks.expect(counter.total == 0, f"{policy} {name}: {counts(counter)}")
            # scipy.special never gathers; scipy.stats does: its array-API helpers ask
            # array_api_compat.is_lazy_array(x), which reads reshape(x, (-1,))[0], and flattening
            # a 2-D array whose blocks do not follow the 1-D chunk layout gathers it
            checks.expect(counter.counts["all_gather"] == 0 or name.startswith("stats."),
                          f"{policy} {name}: {counts(counter)}")
    checks.finish()
    print("\n".join(report))
