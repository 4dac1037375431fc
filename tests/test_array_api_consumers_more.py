"""More Array-API consumers run unchanged on DTensors (issue 37, item 6), against the same calls on NumPy.

The consumers run on ``dt.array_api.namespace(mesh, policy)`` arrays for
``"shard_first"`` (rows split) and ``"shard_last"`` (columns split), 23 x 5
data so shards are uneven and, with columns over 4 ranks (2, 2, 1, 0), one is
empty:

* ``einops.array_api``: ``rearrange`` (transpose, merging and splitting axes,
  sharded ones too), ``reduce`` (sum, mean, max, min, prod, any over sharded
  and unsharded axes, pooling), ``repeat``, ``pack``/``unpack``;
* array-api-extra: every public function of the installed version
  (:data:`XPX_FUNCTIONS`, checked against ``dir(array_api_extra)``; all run on
  DTensors, none is left out; ``testing`` is its test helpers' module);
* scikit-learn: every estimator, meta-estimator, metric and tool that the
  installed version's documentation lists as supporting the Array API
  (``doc/modules/array_api.rst`` of 1.9, "Support for Array API-compatible
  inputs": :data:`SKLEARN_DOCUMENTED`), in the configuration it names
  (``solver="svd"``, ``method="temperature"``...), except what
  ``tests/test_array_api_consumers.py`` and ``tests/test_numpy_interop.py``
  run already (:data:`SKLEARN_TESTED_ELSEWHERE`; their estimators run here
  too, multiclass and with float labels);
* SciPy: every function that SciPy marks as supported on every backend and
  device (its capabilities table, ``scipy._lib._array_api.xp_capabilities_table``,
  from which its documentation's Array API notes and coverage tables are made:
  :data:`SCIPY_CASES`, checked against the table), but for two private
  helpers of ``scipy.spatial.transform`` (:data:`SCIPY_PRIVATE`).

Each result is compared with NumPy's: DTensors whole and on every held local
shard, with NumPy's shape and dtype; scalars as the same type.  Integers and
booleans exactly; floats to ``rtol=1e-10`` (float64's epsilon scaled: the
sums' order differs), and the results of iterative solvers (L-BFGS, EM,
randomized SVD, temperature scaling, resampling) to ``1e-8`` of their largest
magnitude in the NumPy run.

No consumer gathers a DTensor for NumPy (``np.asarray``: an implicit gather,
counted by ``comm_counter``) but those of :data:`SCIPY_GATHERS`, where SciPy's
own code converts to NumPy; :data:`SCIPY_FAILS` lists the three SciPy
functions that do not run yet, with the clear error each raises and the
missing piece (strict: one that starts to run fails the test).  The
collectives each consumer issues are printed with ``-s``; those that work
elementwise or along unsharded axes only are asserted to issue none.

What these consumers needed of the library (``test_what_the_consumers_needed_of_the_library``):
``xp.diff(x, 2)`` (NumPy's positional ``n``: scikit-learn's ``roc_curve``),
``xp.where(mask)`` (NumPy's one-argument form: ``roc_curve`` again),
``np.broadcast_to`` of a 0-d array to ``()`` (its blocks came back 1-d, so
``scipy.stats.bartlett`` answered a wrong shape), and SciPy's special
functions on the local blocks instead of gathered (``xp.special``, and the
ufunc rule for another library's elementwise ufuncs).

The families run one test each on 4 simulated ranks; one test runs them all
under ``mpiexec -n 2`` (one MPI job for the module).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import warnings
from typing import Any, Callable

import numpy as np
import pytest

import dtensor_np as dt
from collectives import comm_counter
from test_numpy_ops import Checks

einops_array_api = pytest.importorskip("einops.array_api")
xpx = pytest.importorskip("array_api_extra")
sklearn = pytest.importorskip("sklearn")
scipy = pytest.importorskip("scipy")

POLICIES = ("shard_first", "shard_last")
ROWS, COLS = 23, 5
EXACT_KINDS = "biu"


def namespaces(world):
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    for policy in POLICIES:
        yield policy, dt.array_api.namespace(mesh, policy)


def counts(counter) -> dict[str, int]:
    issued = {kind: n for kind, n in counter.counts.items() if n}
    if counter.implicit_gathers:
        issued["implicit_gathers"] = counter.implicit_gathers
    return issued


# -- comparing a consumer's answer with NumPy's ------------------------------------------
def leaves(value: Any) -> list[Any]:
    """The arrays and scalars of a result: tuples, lists, dataclasses and result bunches flattened."""
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in leaves(item)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [leaf for f in dataclasses.fields(value) for leaf in leaves(getattr(value, f.name))]
    return [value]


def compare(checks: Checks, ctx: str, got: Any, expected: Any, rtol: float | None) -> None:
    """``got`` (from DTensors) against ``expected`` (from NumPy), leaf by leaf.

    A NumPy array must come back a DTensor; a NumPy scalar a DTensor or, where the consumer computes it on the
    host from Python numbers (scikit-learn's ``best_score_``), the same NumPy scalar.  With ``rtol`` (an iterative
    solver) each leaf agrees to ``rtol`` of its largest magnitude.
    """
    got_leaves, expected_leaves = leaves(got), leaves(expected)
    if len(got_leaves) != len(expected_leaves):
        checks.expect(False, f"{ctx}: {len(got_leaves)} results, NumPy {len(expected_leaves)}")
        return
    for i, (g, e) in enumerate(zip(got_leaves, expected_leaves)):
        where = ctx if len(expected_leaves) == 1 else f"{ctx}[{i}]"
        if isinstance(e, (np.ndarray, np.generic)) or isinstance(g, dt.DTensor):
            e = np.asarray(e)
            exact = e.dtype.kind in EXACT_KINDS
            scale = float(np.max(np.abs(e), initial=0.0)) if rtol is not None and not exact else 0.0
            atol = None if rtol is None else max(rtol * scale, 1e-12)
            if isinstance(g, dt.DTensor):
                checks.result(where, g, e, exact=exact, rtol=rtol, atol=atol)
            elif isinstance(g, np.generic) and e.ndim == 0:
                close = g == e if exact else np.isclose(g, e, rtol=rtol or 1e-10, atol=atol or 1e-12, equal_nan=True)
                checks.expect(g.dtype == e.dtype and bool(close), f"{where}: {g!r}, NumPy {e!r}")
            else:
                checks.expect(False, f"{where}: {type(g).__name__} {g!r}, NumPy {type(e).__name__} {e!r}")
        elif isinstance(e, float):
            tol = rtol or 1e-10
            ok = type(g) is float and bool(np.isclose(g, e, rtol=tol, atol=tol * 1e-2, equal_nan=True))
            checks.expect(ok, f"{where}: {g!r} ({type(g).__name__}), NumPy {e!r}")
        else:  # ints, bools, strings, None: exactly
            checks.expect(type(g) is type(e) and g == e, f"{where}: {g!r} ({type(g).__name__}), NumPy {e!r}")


class Runner:
    """Runs the cases of a family on both policies, with the checks and the report."""

    def __init__(self, world, family: str) -> None:
        self.world, self.family = world, family
        self.checks = Checks(world)
        self.report: list[str] = []

    def run(self, policy: str, name: str, numpy_call: Callable[[], Any], dtensor_call: Callable[[], Any],
            *, rtol: float | None = None, local: bool = False, gathers: bool = False, context=None,
            fails: type | None = None) -> None:
        """``dtensor_call()`` matches ``numpy_call()``; ``local``: with no collective; ``gathers``: the consumer may
        convert DTensors to NumPy (an implicit gather, counted), else it must not; ``fails``: a known failure, which
        must raise that clear error (and is reported when it stops failing)."""
        ctx = f"{self.family} {policy} {name}"
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")  # the consumers' own notes (the same on NumPy), implicit gathers' warnings
            expected = numpy_call()
            try:
                with (context() if context else contextlib.nullcontext()), comm_counter() as counter:
                    got = dtensor_call()
            except Exception as exc:  # noqa: BLE001 - reported on every rank
                if fails is not None and isinstance(exc, fails):
                    self.report.append(f"{self.family:8} {policy:12} {name:44} fails: {type(exc).__name__}")
                    return
                self.checks.expect(False, f"{ctx}: raised {type(exc).__name__}: {str(exc)[:300]}")
                return
        if fails is not None:
            self.checks.expect(False, f"{ctx}: a known failure ({fails.__name__}) that now runs: take it off the list")
            return
        self.report.append(f"{self.family:8} {policy:12} {name:44} {counts(counter)}")
        compare(self.checks, ctx, got, expected, rtol)
        self.checks.expect(gathers or counter.implicit_gathers == 0, f"{ctx}: gathered for NumPy: {counts(counter)}")
        if local:
            self.checks.expect(counter.total == 0, f"{ctx}: expected no collective, {counts(counter)}")

    def finish(self) -> None:
        print("\n".join(self.report))
        self.checks.finish()


def data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(ROWS, COLS)) * np.arange(1.0, COLS + 1) + np.arange(COLS)
    return {"X": X, "v": X[:, 0].copy(), "pos": X * X + 1.0}


# -- einops.array_api -----------------------------------------------------------------
EINOPS: dict[str, tuple[Callable[[Any], Any], tuple[str, ...]]] = {
    # name: (call on a 6 x 5 x 3 array, the policies under which it works along unsharded axes only)
    "rearrange transpose": (lambda t: einops_array_api.rearrange(t, "a b c -> c a b"), POLICIES),
    "rearrange merge (a b)": (lambda t: einops_array_api.rearrange(t, "a b c -> (a b) c"), ("shard_last",)),
    "rearrange merge (b c)": (lambda t: einops_array_api.rearrange(t, "a b c -> a (b c)"), ("shard_first",)),
    "rearrange split a": (lambda t: einops_array_api.rearrange(t, "(a2 a) b c -> a2 a b c", a2=2), ("shard_last",)),
    "rearrange split c, merge": (lambda t: einops_array_api.rearrange(t, "a b (c c2) -> (a c2) b c", c2=1), ()),
    "reduce sum a": (lambda t: einops_array_api.reduce(t, "a b c -> b c", "sum"), ("shard_last",)),
    "reduce mean c": (lambda t: einops_array_api.reduce(t, "a b c -> a b", "mean"), ("shard_first",)),
    "reduce max a b": (lambda t: einops_array_api.reduce(t, "a b c -> c", "max"), ()),
    "reduce min keep": (lambda t: einops_array_api.reduce(t, "a b c -> a () c", "min"), POLICIES),
    "reduce prod c": (lambda t: einops_array_api.reduce(t, "a b c -> a b", "prod"), ("shard_first",)),
    "reduce any": (lambda t: einops_array_api.reduce(t > 1.0, "a b c -> a c", "any"), POLICIES),
    "reduce pool a": (lambda t: einops_array_api.reduce(t, "(a a2) b c -> a b c", "mean", a2=2), ("shard_last",)),
    "repeat new axis": (lambda t: einops_array_api.repeat(t, "a b c -> a b c r", r=2), POLICIES),
    "repeat into a": (lambda t: einops_array_api.repeat(t, "a b c -> (r a) b c", r=2), ("shard_last",)),
    "repeat into c": (lambda t: einops_array_api.repeat(t, "a b c -> a b (c r)", r=3), ("shard_first",)),
}


def einops_family(world) -> None:
    runner = Runner(world, "einops")
    t = np.random.default_rng(1).normal(size=(6, 5, 3))
    for policy, xp in namespaces(world):
        x = xp.asarray(t)
        for name, (call, local) in EINOPS.items():
            runner.run(policy, name, lambda call=call: call(t), lambda call=call: call(x), local=policy in local)
        # pack a 3-d and a 2-d array along their trailing axes, and unpack them again
        packed = lambda a, b: einops_array_api.pack([a, b], "a b *")  # noqa: E731
        runner.run(policy, "pack", lambda: packed(t, t[:, :, 0]), lambda: packed(x, x[:, :, 0]))
        np_packed, np_shapes = packed(t, t[:, :, 0])
        runner.run(policy, "unpack", lambda: einops_array_api.unpack(np_packed, np_shapes, "a b *"),
                   lambda: einops_array_api.unpack(xp.asarray(np_packed), np_shapes, "a b *"))
        packed_rows = lambda a, b: einops_array_api.pack([a, b], "* c")  # noqa: E731
        runner.run(policy, "pack rows", lambda: packed_rows(t[0], t[1, :2]), lambda: packed_rows(x[0], x[1, :2]))
    runner.finish()


# -- array-api-extra ----------------------------------------------------------------------
def _xpx_cases() -> dict[str, Callable[[Any, dict[str, Any]], Any]]:
    """Each public function of array-api-extra: a call on the arrays of ``d`` with namespace ``xp``."""
    at = xpx.at
    return {
        "angle": lambda xp, d: xpx.angle(xp.astype(d["X"], xp.complex128) * (1 + 2j), xp=xp),
        "apply_where": lambda xp, d: xpx.apply_where(d["v"] > 2.0, (d["v"],), xp.sqrt, fill_value=-1.0, xp=xp),
        "argpartition": lambda xp, d: xp.sort(xpx.argpartition(d["v"], 5, xp=xp)[:5]),
        "at (set, copy)": lambda xp, d: at(d["v"])[2:7].set(0.5, copy=True, xp=xp),
        "at (add, mask)": lambda xp, d: at(d["v"], d["v"] > 0).add(1.0, copy=True, xp=xp),
        "at (multiply, in place)": lambda xp, d: (at(d["X"])[:, 1].multiply(2.0, xp=xp), d["X"]),
        "at (min, max, power, divide, subtract)": lambda xp, d: (
            at(d["v"])[::3].min(0.0, copy=True, xp=xp), at(d["v"])[1::2].max(1.0, copy=True, xp=xp),
            at(d["pos"])[4:].power(2.0, copy=True, xp=xp), at(d["pos"])[:, 2].divide(4.0, copy=True, xp=xp),
            at(d["X"])[-3:].subtract(1.0, copy=True, xp=xp)),
        "atleast_nd": lambda xp, d: (xpx.atleast_nd(d["v"], ndim=3, xp=xp), xpx.atleast_nd(d["X"], ndim=1, xp=xp)),
        "broadcast_shapes": lambda xp, d: xpx.broadcast_shapes(d["X"].shape, (1, COLS), (ROWS, 1)),
        "cov": lambda xp, d: xpx.cov(d["X"].T, xp=xp),
        "create_diagonal": lambda xp, d: xpx.create_diagonal(d["v"], offset=1, xp=xp),
        "default_dtype": lambda xp, d: tuple(str(xpx.default_dtype(xp, kind)) for kind in
                                             ("real floating", "complex floating", "integral", "indexing")),
        "deg2rad": lambda xp, d: xpx.deg2rad(d["X"], xp=xp),
        "diag_indices": lambda xp, d: xpx.diag_indices(4, ndim=3, xp=xp),
        "expand_dims": lambda xp, d: xpx.expand_dims(d["X"], axis=(0, 2), xp=xp),
        "isclose": lambda xp, d: xpx.isclose(d["X"], d["X"] * (1 + 1e-9) + (d["X"] > 3.0), xp=xp),
        "isin": lambda xp, d: (xpx.isin(d["i"], d["i"][:3], xp=xp), xpx.isin(d["i"], d["i"][:3], invert=True, xp=xp)),
        "kron": lambda xp, d: xpx.kron(d["X"][:4], d["X"][:3, :2], xp=xp),
        "lazy_apply": lambda xp, d: xpx.lazy_apply(lambda a: a * 2.0, d["v"], xp=xp),
        "nan_to_num": lambda xp, d: xpx.nan_to_num(d["Xnan"], fill_value=-7.0, xp=xp),
        "nanmax": lambda xp, d: (xpx.nanmax(d["Xnan"], axis=0, xp=xp), xpx.nanmax(d["Xnan"], axis=1, xp=xp)),
        "nanmean": lambda xp, d: (xpx.nanmean(d["Xnan"], axis=0, xp=xp), xpx.nanmean(d["Xnan"], axis=1, xp=xp)),
        "nanmin": lambda xp, d: (xpx.nanmin(d["Xnan"], axis=0, xp=xp), xpx.nanmin(d["Xnan"], xp=xp)),
        "nansum": lambda xp, d: (xpx.nansum(d["Xnan"], axis=0, xp=xp), xpx.nansum(d["Xnan"], axis=1, xp=xp)),
        "nunique": lambda xp, d: xpx.nunique(d["i"], xp=xp),
        "one_hot": lambda xp, d: xpx.one_hot(d["i"], 12, xp=xp),
        "pad": lambda xp, d: (xpx.pad(d["X"], 2, xp=xp), xpx.pad(d["X"], ((1, 0), (0, 2)), constant_values=3.0, xp=xp)),
        "partition": lambda xp, d: xp.sort(xpx.partition(d["v"], 5, xp=xp)[:5]),
        "rad2deg": lambda xp, d: xpx.rad2deg(d["X"], xp=xp),
        "searchsorted": lambda xp, d: (xpx.searchsorted(xp.sort(d["v"]), d["v"][:4], xp=xp),
                                       xpx.searchsorted(xp.sort(d["v"]), d["X"], side="right", xp=xp)),
        "setdiff1d": lambda xp, d: xpx.setdiff1d(d["i"], d["i"][:3], xp=xp),
        "sinc": lambda xp, d: xpx.sinc(d["X"], xp=xp),
        "tril_indices": lambda xp, d: xpx.tril_indices(4, xp=xp),
        "triu_indices": lambda xp, d: xpx.triu_indices(4, offset=1, m=5, xp=xp),
        "union1d": lambda xp, d: xpx.union1d(d["i"], d["i"][:3] + 20, xp=xp),
        "unravel_index": lambda xp, d: xpx.unravel_index(d["i"], (3, 4), xp=xp),
    }


XPX_CASES = _xpx_cases()
XPX_FUNCTIONS = sorted({name.split(" ")[0] for name in XPX_CASES})
XPX_NOT_FUNCTIONS = {"testing": "the library's test helpers (a module), not a function on arrays"}
XPX_LOCAL = {  # elementwise, views, metadata: no collective (a column of column shards is broadcast from its owner)
    **dict.fromkeys(("angle", "at (set, copy)", "atleast_nd", "broadcast_shapes", "create_diagonal", "default_dtype",
                     "deg2rad", "expand_dims", "lazy_apply", "nan_to_num", "rad2deg", "sinc"), POLICIES),
    "at (multiply, in place)": ("shard_first",),
}
XPX_INTS = np.array([5, 3, 1, 3, 7, 11, 0, 2, 2, 9, 4])


def test_every_array_api_extra_function_is_tested():
    public = {name for name in dir(xpx) if not name.startswith("_")}
    listed = set(XPX_FUNCTIONS) | set(XPX_NOT_FUNCTIONS)
    assert public == listed, sorted(public ^ listed)


def xpx_family(world) -> None:
    import array_api_compat.numpy as compat_numpy

    runner = Runner(world, "xpx")
    arrays = data()
    arrays["Xnan"] = np.where(np.abs(arrays["X"] - 2.0) < 0.6, np.nan, arrays["X"])
    arrays["i"] = XPX_INTS
    for policy, xp in namespaces(world):
        for name, call in XPX_CASES.items():
            d_np = {k: v.copy() for k, v in arrays.items()}  # the in-place cases write into their input
            d_dt = {k: xp.asarray(v) for k, v in arrays.items()}
            runner.run(policy, name, lambda call=call, d=d_np: call(compat_numpy, d),
                       lambda call=call, d=d_dt: call(xp, d), local=policy in XPX_LOCAL.get(name, ()))
    runner.finish()


# -- scikit-learn ---------------------------------------------------------------------------
# The installed version's documentation, "Array API support": doc/modules/array_api.rst of scikit-learn 1.9
SKLEARN_DOCUMENTED = {
    "estimators": (
        "decomposition.PCA", "kernel_approximation.Nystroem", "linear_model.LogisticRegression",
        "linear_model.PoissonRegressor", "linear_model.Ridge", "linear_model.RidgeCV", "linear_model.RidgeClassifier",
        "linear_model.RidgeClassifierCV", "discriminant_analysis.LinearDiscriminantAnalysis", "naive_bayes.GaussianNB",
        "preprocessing.Binarizer", "preprocessing.KernelCenterer", "preprocessing.LabelBinarizer",
        "preprocessing.LabelEncoder", "preprocessing.MaxAbsScaler", "preprocessing.MinMaxScaler",
        "preprocessing.Normalizer", "preprocessing.PolynomialFeatures", "preprocessing.StandardScaler",
        "mixture.GaussianMixture"),
    "meta-estimators": (
        "calibration.CalibratedClassifierCV", "pipeline.FeatureUnion", "model_selection.GridSearchCV",
        "model_selection.RandomizedSearchCV", "model_selection.HalvingGridSearchCV",
        "model_selection.HalvingRandomSearchCV"),
    "metrics": (
        "accuracy_score", "average_precision_score", "balanced_accuracy_score", "brier_score_loss",
        "calinski_harabasz_score", "cohen_kappa_score", "confusion_matrix", "d2_absolute_error_score",
        "d2_brier_score", "d2_log_loss_score", "d2_pinball_score", "d2_tweedie_score", "det_curve",
        "explained_variance_score", "f1_score", "fbeta_score", "hamming_loss", "jaccard_score", "log_loss",
        "max_error", "mean_absolute_error", "mean_absolute_percentage_error", "mean_gamma_deviance",
        "mean_pinball_loss", "mean_poisson_deviance", "mean_squared_error", "mean_squared_log_error",
        "mean_tweedie_deviance", "median_absolute_error", "multilabel_confusion_matrix",
        "pairwise.additive_chi2_kernel", "pairwise.chi2_kernel", "pairwise.cosine_similarity",
        "pairwise.cosine_distances", "pairwise_distances", "pairwise_distances_argmin",
        "pairwise.euclidean_distances", "pairwise.laplacian_kernel", "pairwise.linear_kernel",
        "pairwise.manhattan_distances", "pairwise.paired_cosine_distances", "pairwise.paired_euclidean_distances",
        "pairwise.paired_manhattan_distances", "pairwise.pairwise_kernels", "pairwise.polynomial_kernel",
        "pairwise.rbf_kernel", "pairwise.sigmoid_kernel", "precision_score", "precision_recall_curve",
        "precision_recall_fscore_support", "r2_score", "recall_score", "roc_curve", "root_mean_squared_error",
        "root_mean_squared_log_error", "zero_one_loss"),
    "tools": ("preprocessing.label_binarize", "model_selection.cross_val_predict", "model_selection.train_test_split",
              "utils.check_consistent_length"),
}
# Run by tests/test_array_api_consumers.py (scalers, PCA "full" and "covariance_eigh", Ridge, binary LDA, four
# metrics) and tests/test_numpy_interop.py (binary GaussianNB, LogisticRegression and RidgeClassifier, LabelEncoder,
# LabelBinarizer, GaussianMixture "random_from_data", three metrics); the estimators among them run here too in the
# configurations those do not (multiclass, float labels, other solvers and initialisations)
SKLEARN_TESTED_ELSEWHERE = ("accuracy_score", "confusion_matrix", "f1_score", "log_loss", "mean_absolute_error",
                            "mean_squared_error", "r2_score", "preprocessing.LabelEncoder",
                            "preprocessing.MaxAbsScaler", "preprocessing.MinMaxScaler", "preprocessing.Normalizer",
                            "preprocessing.StandardScaler", "linear_model.Ridge")
ITERATIVE = 1e-8  # the relative agreement asked of iterative solvers (the NumPy run's own path, other sums' order)


def _sklearn_data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(size=(12, COLS)), rng.normal(size=(11, COLS)) + 1.5])
    yr = X @ rng.normal(size=COLS) + 0.1 * rng.normal(size=ROWS)
    y3 = np.array([2, 1, 0] * 7 + [2, 1])
    mid = np.median(yr)
    score = 1.0 / (1.0 + np.exp(mid - yr - np.sin(np.arange(ROWS))))
    return {
        "X": X, "Y": rng.normal(size=(7, COLS)), "Xp": np.abs(X) + 0.1, "Yp": np.abs(rng.normal(size=(7, COLS))) + 0.1,
        "yr": yr, "yp": yr + np.sin(np.arange(ROWS)), "ytp": np.abs(yr) + 0.5, "ypp": np.abs(yr + np.cos(yr)) + 0.5,
        "y3": y3, "y3f": y3 * 2.0 + 1.0, "pred3": np.array([2, 0, 0, 1, 1, 0] * 3 + [2, 1, 0, 2, 2]),
        "count": np.floor(np.exp(0.3 * X[:, 0]) * 3), "b": (yr > mid).astype(np.int64), "score": score,
        "proba3": np.exp(X[:, :3]) / np.exp(X[:, :3]).sum(axis=1, keepdims=True),
        "K": X @ X.T, "Xrev": X[::-1].copy(),
    }


def _sklearn_estimators() -> dict[str, tuple[Callable[[dict[str, Any]], Any], float | None]]:
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.decomposition import PCA
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.experimental import enable_halving_search_cv  # noqa: F401
    from sklearn.kernel_approximation import Nystroem
    from sklearn.linear_model import (LogisticRegression, PoissonRegressor, Ridge, RidgeClassifier,
                                      RidgeClassifierCV, RidgeCV)
    from sklearn.mixture import GaussianMixture
    from sklearn.model_selection import (GridSearchCV, HalvingGridSearchCV, HalvingRandomSearchCV,
                                         RandomizedSearchCV, cross_val_predict, train_test_split)
    from sklearn.naive_bayes import GaussianNB
    from sklearn.pipeline import FeatureUnion
    from sklearn.preprocessing import (Binarizer, KernelCenterer, LabelBinarizer, PolynomialFeatures,
                                       StandardScaler, label_binarize)
    from sklearn.utils import check_consistent_length

    def signed(t):
        """Each column with the sign of its first row: LDA's ``transform`` takes its discriminants' signs from
        the SVDs (LAPACK's on NumPy, TSQR's fixed signs on row-sharded DTensors); scikit-learn leaves them open."""
        xp = t.__array_namespace__()
        return t * xp.sign(t[:1, :])

    def classifier(est, labels):
        def run(d):
            fitted = est().fit(d["X"], d[labels])
            outs = [fitted.predict(d["X"])]
            for method in ("predict_proba", "decision_function", "transform"):
                if hasattr(fitted, method):
                    out = getattr(fitted, method)(d["X"])
                    outs.append(signed(out) if method == "transform" else out)
            return (*outs, fitted.score(d["X"], d[labels]), fitted.classes_)
        return run

    ridge = lambda: Ridge(solver="svd")  # noqa: E731
    grid = {"alpha": [0.1, 1.0, 3.0]}
    return {
        "PCA(svd_solver='randomized', power_iteration_normalizer='QR')": (lambda d: (lambda e: (
            e.transform(d["X"]), e.components_, e.explained_variance_, e.singular_values_))(
            PCA(3, svd_solver="randomized", power_iteration_normalizer="QR", random_state=0).fit(d["X"])), ITERATIVE),
        "Nystroem": (lambda d: Nystroem(n_components=10, random_state=0).fit(d["X"]).transform(d["X"]), None),
        "LogisticRegression (3 int classes)": (classifier(LogisticRegression, "y3"), ITERATIVE),
        "LogisticRegression (3 float classes)": (classifier(LogisticRegression, "y3f"), ITERATIVE),
        "PoissonRegressor": (lambda d: (lambda e: (e.predict(d["X"]), e.coef_, e.intercept_,
                                                   e.score(d["X"], d["count"])))(
            PoissonRegressor().fit(d["X"], d["count"])), ITERATIVE),
        "Ridge(solver='svd') multi-target": (lambda d: ridge().fit(d["X"], d["proba3"]).predict(d["X"]), None),
        "RidgeCV": (lambda d: (lambda e: (e.predict(d["X"]), e.coef_, e.alpha_, e.best_score_))(
            RidgeCV(alphas=(0.1, 1.0, 10.0)).fit(d["X"], d["yr"])), None),
        "RidgeClassifier(solver='svd') (3 int classes)": (classifier(lambda: RidgeClassifier(solver="svd"), "y3"),
                                                          None),
        "RidgeClassifier(solver='svd') (3 float classes)": (classifier(lambda: RidgeClassifier(solver="svd"), "y3f"),
                                                            None),
        "RidgeClassifierCV": (classifier(lambda: RidgeClassifierCV(alphas=(0.1, 1.0, 10.0)), "y3"), None),
        "LinearDiscriminantAnalysis (3 int classes)": (classifier(LinearDiscriminantAnalysis, "y3"), None),
        "LinearDiscriminantAnalysis (3 float classes)": (classifier(LinearDiscriminantAnalysis, "y3f"), None),
        "GaussianNB (3 int classes)": (classifier(GaussianNB, "y3"), None),
        "GaussianNB (3 float classes)": (classifier(GaussianNB, "y3f"), None),
        "Binarizer": (lambda d: Binarizer(threshold=0.5).fit(d["X"]).transform(d["X"]), None),
        "KernelCenterer": (lambda d: (lambda e: (e.transform(d["K"]), e.K_fit_rows_))(KernelCenterer().fit(d["K"])),
                           None),
        "LabelBinarizer (float labels)": (lambda d: (lambda e: (e.transform(d["y3f"]), e.classes_,
                                                                e.inverse_transform(e.transform(d["y3f"]))))(
            LabelBinarizer().fit(d["y3f"])), None),
        "PolynomialFeatures": (lambda d: PolynomialFeatures(2).fit(d["X"]).transform(d["X"]), None),
        "GaussianMixture(init_params='random')": (lambda d: (lambda e: (e.means_, e.covariances_, e.weights_,
                                                                        e.predict_proba(d["X"]), e.score(d["X"])))(
            GaussianMixture(2, init_params="random", random_state=0).fit(d["X"])), ITERATIVE),
        "CalibratedClassifierCV(method='temperature')": (lambda d: CalibratedClassifierCV(
            LogisticRegression(), method="temperature", cv=3).fit(d["X"], d["y3"]).predict_proba(d["X"]), ITERATIVE),
        "FeatureUnion(StandardScaler, PCA)": (lambda d: FeatureUnion(
            [("scaled", StandardScaler()), ("pca", PCA(2))]).fit(d["X"]).transform(d["X"]), None),
        "GridSearchCV(Ridge)": (lambda d: (lambda e: (e.predict(d["X"]), e.best_params_["alpha"], e.best_score_))(
            GridSearchCV(ridge(), grid, cv=3).fit(d["X"], d["yr"])), None),
        "RandomizedSearchCV(Ridge)": (lambda d: (lambda e: (e.predict(d["X"]), e.best_params_["alpha"]))(
            RandomizedSearchCV(ridge(), grid, n_iter=2, cv=3, random_state=0).fit(d["X"], d["yr"])), None),
        "HalvingGridSearchCV(Ridge)": (lambda d: (lambda e: (e.predict(d["X"]), e.best_params_["alpha"]))(
            HalvingGridSearchCV(ridge(), grid, cv=3, min_resources=12, random_state=0).fit(d["X"], d["yr"])), None),
        "HalvingRandomSearchCV(Ridge)": (lambda d: (lambda e: (e.predict(d["X"]), e.best_params_["alpha"]))(
            HalvingRandomSearchCV(ridge(), grid, cv=3, min_resources=12, random_state=0).fit(d["X"], d["yr"])), None),
        "label_binarize": (lambda d: label_binarize(d["y3"], classes=[0, 1, 2]), None),
        "cross_val_predict(Ridge)": (lambda d: cross_val_predict(ridge(), d["X"], d["yr"], cv=3), None),
        "train_test_split": (lambda d: tuple(train_test_split(d["X"], d["yr"], test_size=0.25, random_state=0)), None),
        "check_consistent_length": (lambda d: check_consistent_length(d["X"], d["yr"], d["y3"]), None),
    }


# Each metric by the arrays it takes (of _sklearn_data) and its keywords
_METRICS_ON: dict[str, dict[str, dict[str, Any]]] = {
    "b score": {"average_precision_score": {}, "brier_score_loss": {}, "d2_brier_score": {}, "det_curve": {},
                "precision_recall_curve": {}},
    "y3 pred3": {"balanced_accuracy_score": {}, "cohen_kappa_score": {},
                 "fbeta_score": dict(beta=0.5, average="weighted"),
                 "hamming_loss": {}, "jaccard_score": dict(average="macro"), "multilabel_confusion_matrix": {},
                 "precision_score": dict(average="micro"), "precision_recall_fscore_support": {},
                 "recall_score": dict(average=None), "zero_one_loss": {}},
    "yr yp": {"d2_absolute_error_score": {}, "d2_pinball_score": dict(alpha=0.3), "explained_variance_score": {},
              "max_error": {}, "mean_absolute_percentage_error": {}, "mean_pinball_loss": dict(alpha=0.3),
              "median_absolute_error": {}, "root_mean_squared_error": {}},
    "ytp ypp": {"d2_tweedie_score": dict(power=1.5), "mean_gamma_deviance": {}, "mean_poisson_deviance": {},
                "mean_squared_log_error": {}, "mean_tweedie_deviance": dict(power=1.5),
                "root_mean_squared_log_error": {}},
    "X y3": {"calinski_harabasz_score": {}},
    "y3 proba3": {"d2_log_loss_score": {}},
    "Xp Yp": {"pairwise.additive_chi2_kernel": {}, "pairwise.chi2_kernel": dict(gamma=0.5)},
    "X Y": {"pairwise.cosine_similarity": {}, "pairwise.cosine_distances": {}, "pairwise_distances_argmin": {},
            "pairwise.laplacian_kernel": {}, "pairwise.linear_kernel": {}, "pairwise.manhattan_distances": {},
            "pairwise.polynomial_kernel": dict(degree=2), "pairwise.rbf_kernel": {}, "pairwise.sigmoid_kernel": {}},
    "X Xrev": {"pairwise.paired_cosine_distances": {}, "pairwise.paired_euclidean_distances": {},
               "pairwise.paired_manhattan_distances": {}},
}


def _sklearn_metrics() -> dict[str, Callable[[dict[str, Any]], Any]]:
    """Each metric: a call on the arrays of ``d``."""
    from sklearn import metrics

    def call(name, keys, kwargs):
        module, _, attr = ("metrics." + name).rpartition(".")
        function = getattr(metrics.pairwise if module.endswith("pairwise") else metrics, attr)
        return lambda d: function(*(d[k] for k in keys.split()), **kwargs)

    cases = {name: call(name, keys, kwargs) for keys, named in _METRICS_ON.items() for name, kwargs in named.items()}
    pairwise = metrics.pairwise
    cases.update({
        "pairwise_distances": lambda d: tuple(metrics.pairwise_distances(d["X"], d["Y"], metric=m)
                                              for m in ("cosine", "euclidean", "manhattan", "l2")),
        "pairwise.euclidean_distances": lambda d: (pairwise.euclidean_distances(d["X"], d["Y"]),
                                                   pairwise.euclidean_distances(d["X"], squared=True)),
        "pairwise.pairwise_kernels": lambda d: tuple(pairwise.pairwise_kernels(d["Xp"], d["Yp"], metric=m) for m in (
            "additive_chi2", "chi2", "linear", "polynomial", "poly", "rbf", "laplacian", "sigmoid", "cosine")),
        "roc_curve": lambda d: (metrics.roc_curve(d["b"], d["score"]),
                                metrics.roc_curve(d["b"], d["score"], drop_intermediate=False)),
    })
    return dict(sorted(cases.items()))


SKLEARN_ESTIMATOR_NAMES = {  # each documented estimator, meta-estimator and tool: the cases that run it
    "decomposition.PCA": ("PCA(", "FeatureUnion"), "kernel_approximation.Nystroem": ("Nystroem",),
    "linear_model.LogisticRegression": ("LogisticRegression", "Calibrated"),
    "linear_model.PoissonRegressor": ("PoissonRegressor",), "linear_model.Ridge": ("Ridge(",),
    "linear_model.RidgeCV": ("RidgeCV",), "linear_model.RidgeClassifier": ("RidgeClassifier(",),
    "linear_model.RidgeClassifierCV": ("RidgeClassifierCV",),
    "discriminant_analysis.LinearDiscriminantAnalysis": ("LinearDiscriminantAnalysis",),
    "naive_bayes.GaussianNB": ("GaussianNB",), "preprocessing.Binarizer": ("Binarizer",),
    "preprocessing.KernelCenterer": ("KernelCenterer",), "preprocessing.LabelBinarizer": ("LabelBinarizer",),
    "preprocessing.PolynomialFeatures": ("PolynomialFeatures",), "preprocessing.StandardScaler": ("FeatureUnion",),
    "mixture.GaussianMixture": ("GaussianMixture",), "calibration.CalibratedClassifierCV": ("Calibrated",),
    "pipeline.FeatureUnion": ("FeatureUnion",), "model_selection.GridSearchCV": ("GridSearchCV",),
    "model_selection.RandomizedSearchCV": ("RandomizedSearchCV",),
    "model_selection.HalvingGridSearchCV": ("HalvingGridSearchCV",),
    "model_selection.HalvingRandomSearchCV": ("HalvingRandomSearchCV",),
    "preprocessing.label_binarize": ("label_binarize",), "model_selection.cross_val_predict": ("cross_val_predict",),
    "model_selection.train_test_split": ("train_test_split",), "utils.check_consistent_length": ("check_consistent",),
}


def test_every_documented_sklearn_consumer_is_tested():
    estimators, metrics = _sklearn_estimators(), _sklearn_metrics()
    untested = []
    for kind, names in SKLEARN_DOCUMENTED.items():
        for name in names:
            if name in SKLEARN_TESTED_ELSEWHERE:
                continue
            if kind == "metrics":
                untested += [] if name in metrics else [name]
            else:
                cases = SKLEARN_ESTIMATOR_NAMES.get(name, ())
                untested += [] if any(c in case for c in cases for case in estimators) else [name]
    assert not untested
    # every documented name exists in the installed scikit-learn
    for kind, names in SKLEARN_DOCUMENTED.items():
        for name in names:
            module, _, attr = ("metrics." + name if kind == "metrics" else name).rpartition(".")
            obj = getattr(__import__(f"sklearn.{module}", fromlist=[attr]), attr)
            assert callable(obj), name


def sklearn_family(world, which: str) -> None:
    runner = Runner(world, f"sklearn {which}")
    arrays = _sklearn_data()
    cases = _sklearn_estimators() if which == "estimators" else {n: (c, None) for n, c in _sklearn_metrics().items()}
    dispatch = lambda: sklearn.config_context(array_api_dispatch=True)  # noqa: E731
    for policy, xp in namespaces(world):
        d_dt = {k: xp.asarray(v) for k, v in arrays.items()}
        for name, (call, rtol) in cases.items():
            runner.run(policy, name, lambda call=call: call(arrays), lambda call=call: call(d_dt), rtol=rtol,
                       context=dispatch)
    runner.finish()


# -- SciPy ------------------------------------------------------------------------------------
def _scipy_data() -> dict[str, np.ndarray]:
    from scipy.cluster.hierarchy import fcluster, inconsistent, linkage
    from scipy.signal import butter
    from scipy.spatial.distance import pdist

    d = data()
    rng = np.random.default_rng(2)
    Z = linkage(d["X"][:9])  # compiled code (cpu-only in SciPy's table): made on NumPy, passed in as an array
    labels = fcluster(Z, 3, criterion="maxclust")
    b, a = butter(3, 0.3)
    quats = rng.normal(size=(4, 4))
    return {
        **d, "Z": Z, "Y": pdist(d["X"][:9]), "R": inconsistent(Z), "T1": labels, "T2": (labels % 3) + 7,
        "w": np.abs(d["v"]) % 1.0 + 0.05, "p": d["pos"] / d["pos"].sum(axis=0), "b": b, "a": a,
        "sos": np.array([[1.0, 2.0, 1.0, 1.0, -0.3, 0.1], [1.0, -1.0, 0.0, 1.0, 0.2, 0.0]]),
        "z": np.array([-1.0, -1.0]), "poles": np.array([-0.5 + 0.5j, -0.5 - 0.5j]), "k": np.asarray(0.5),
        "A": np.array([[0.0, 1.0], [-2.0, -3.0]]), "B": np.array([[0.0], [1.0]]), "C": np.array([[1.0, 0.0]]),
        "D": np.array([[0.0]]), "num": np.array([1.0, 3.0]), "den": np.array([1.0, 3.0, 2.0]),
        "wp": np.array([0.2, 0.5]), "ws": np.array([0.1, 0.6]), "cos": np.array([0.5, 0.3, 0.2]),
        "wind": np.array([0.1, 0.5, 1.0, 2.0]), "times": np.array([0.0, 1.0, 2.0, 3.0]),
        "quats": quats / np.linalg.norm(quats, axis=1, keepdims=True), "t": np.array([0.5, 1.25, 2.75]),
        "lo": np.array([0.0, 0.0]), "hi": np.array([1.0, 2.0]), "i": np.arange(ROWS) % 4,
        "S": d["X"][:17] / np.linalg.norm(d["X"][:17], axis=1, keepdims=True),
    }


def _scipy_cases() -> dict[str, tuple[Callable[[Any, dict[str, Any]], Any], float | None]]:
    """Each function SciPy documents as supporting every backend: a call on the arrays of ``d`` (of namespace
    ``xp``)."""
    from scipy import constants, fft, integrate, linalg, optimize, signal, special, stats
    from scipy.cluster import hierarchy, vq
    from scipy.signal import windows
    from scipy.spatial.transform import RigidTransform, Rotation, Slerp

    M = 9
    win = lambda f, *args, **kw: lambda xp, d: f(M, *args, xp=xp, **kw)  # noqa: E731 - made from sizes only
    x1 = lambda f, key="X", **kw: lambda xp, d: f(d[key], **kw)  # noqa: E731 - one array argument
    cases: dict[str, Any] = {
        # scipy.cluster
        "cluster.hierarchy.correspond": lambda xp, d: hierarchy.correspond(d["Z"], d["Y"]),
        "cluster.hierarchy.is_isomorphic": lambda xp, d: (hierarchy.is_isomorphic(d["T1"], d["T2"]),
                                                          hierarchy.is_isomorphic(d["T1"], d["T2"] % 2)),
        "cluster.hierarchy.is_monotonic": x1(hierarchy.is_monotonic, "Z"),
        "cluster.hierarchy.is_valid_im": x1(hierarchy.is_valid_im, "R"),
        "cluster.hierarchy.is_valid_linkage": x1(hierarchy.is_valid_linkage, "Z"),
        "cluster.hierarchy.num_obs_linkage": x1(hierarchy.num_obs_linkage, "Z"),
        "cluster.hierarchy.to_mlab_linkage": x1(hierarchy.to_mlab_linkage, "Z"),
        "cluster.hierarchy.to_tree": lambda xp, d: hierarchy.to_tree(d["Z"]).pre_order(),
        "cluster.vq.whiten": x1(vq.whiten),
        # scipy.constants
        "constants.convert_temperature": lambda xp, d: constants.convert_temperature(d["X"], "Celsius", "Kelvin"),
        "constants.lambda2nu": x1(constants.lambda2nu, "pos"),
        "constants.nu2lambda": x1(constants.nu2lambda, "pos"),
        # scipy.fft
        "fft.fftfreq": lambda xp, d: (fft.fftfreq(M, 0.5, xp=xp), fft.fftfreq(8, xp=xp)),
        "fft.rfftfreq": lambda xp, d: fft.rfftfreq(M, 0.5, xp=xp),
        "fft.fftshift": lambda xp, d: (fft.fftshift(d["X"]), fft.fftshift(d["X"], axes=0)),
        "fft.ifftshift": lambda xp, d: (fft.ifftshift(d["X"]), fft.ifftshift(d["X"], axes=1)),
        "fft.fht": lambda xp, d: fft.fht(d["v"], 0.1, 0.5),
        "fft.ifht": lambda xp, d: fft.ifht(d["v"], 0.1, 0.5, offset=0.2, bias=0.1),
        # scipy.integrate
        "integrate.cubature": lambda xp, d: (lambda r: (r.estimate, r.error, r.status))(integrate.cubature(
            lambda x: xp.sum(x * x, axis=-1), d["lo"], d["hi"])),
        "integrate.cumulative_trapezoid": lambda xp, d: (integrate.cumulative_trapezoid(d["X"], axis=0),
                                                         integrate.cumulative_trapezoid(d["X"], dx=0.5, initial=0)),
        "integrate.romb": lambda xp, d: integrate.romb(d["X"][:17], dx=0.5, axis=0),
        # scipy.linalg
        "linalg.block_diag": lambda xp, d: linalg.block_diag(d["X"][:2, :2], d["X"][2:5, :3], d["A"]),
        "linalg.fiedler": lambda xp, d: linalg.fiedler(d["v"][:6]),
        # scipy.optimize
        "optimize.rosen": lambda xp, d: (optimize.rosen(d["v"]), optimize.rosen(d["X"].T)),
        "optimize.rosen_hess": lambda xp, d: optimize.rosen_hess(d["v"][:6]),
        # scipy.signal (filter design from sizes only: made in xp)
        "signal.besselap": lambda xp, d: signal.besselap(4, xp=xp),
        "signal.buttap": lambda xp, d: signal.buttap(4, xp=xp),
        "signal.cheb1ap": lambda xp, d: signal.cheb1ap(4, 1.0, xp=xp),
        "signal.cheb2ap": lambda xp, d: signal.cheb2ap(4, 20.0, xp=xp),
        "signal.ellipap": lambda xp, d: signal.ellipap(4, 1.0, 20.0, xp=xp),
        "signal.gammatone": lambda xp, d: (signal.gammatone(440.0, "fir", fs=16000.0, numtaps=32, xp=xp),
                                           signal.gammatone(440.0, "iir", fs=16000.0, xp=xp)),
        "signal.iirnotch": lambda xp, d: signal.iirnotch(0.3, 30.0, xp=xp),
        "signal.iirpeak": lambda xp, d: signal.iirpeak(0.3, 30.0, xp=xp),
        "signal.savgol_coeffs": lambda xp, d: (signal.savgol_coeffs(7, 2, xp=xp),
                                               signal.savgol_coeffs(7, 3, deriv=1, use="dot", xp=xp)),
        "signal.iirdesign": lambda xp, d: signal.iirdesign(d["wp"], d["ws"], 1.0, 40.0),
        "signal.freqz_zpk": lambda xp, d: signal.freqz_zpk(d["z"], d["poles"], d["k"], worN=16),
        "signal.abcd_normalize": lambda xp, d: signal.abcd_normalize(d["A"], d["B"], d["C"], d["D"]),
        "signal.bode": lambda xp, d: signal.bode((d["num"], d["den"]), w=d["wind"]),
        "signal.impulse": lambda xp, d: signal.impulse((d["num"], d["den"]), T=d["times"]),
        "signal.place_poles": lambda xp, d: (lambda r: (r.gain_matrix, r.computed_poles))(
            signal.place_poles(d["A"], d["B"], d["poles"].real - d["poles"].imag * 2.0)),
        "signal.choose_conv_method": lambda xp, d: signal.choose_conv_method(d["v"], d["v"][:5]),
        "signal.envelope": lambda xp, d: signal.envelope(d["X"], axis=0),
        "signal.filtfilt": lambda xp, d: (signal.filtfilt(d["b"], d["a"], d["v"]),
                                          signal.filtfilt(d["b"], d["a"], d["X"], axis=0)),
        "signal.sosfilt_zi": x1(signal.sosfilt_zi, "sos"),
        "signal.gauss_spline": lambda xp, d: signal.gauss_spline(d["X"], 3),
        # scipy.signal.windows
        "signal.windows.general_cosine": lambda xp, d: windows.general_cosine(M, d["cos"]),
        "signal.windows.get_window": lambda xp, d: (windows.get_window("hann", M, xp=xp),
                                                    windows.get_window(("kaiser", 4.0), M, xp=xp)),
        **{f"signal.windows.{name}": win(getattr(windows, name)) for name in (
            "barthann", "bartlett", "blackman", "blackmanharris", "bohman", "boxcar", "cosine", "flattop",
            "hamming", "hann", "lanczos", "nuttall", "parzen", "triang", "tukey", "exponential")},
        "signal.windows.gaussian": win(windows.gaussian, 2.0),
        "signal.windows.general_gaussian": win(windows.general_gaussian, 1.5, 2.0),
        "signal.windows.general_hamming": win(windows.general_hamming, 0.6),
        "signal.windows.kaiser": win(windows.kaiser, 4.0),
        "signal.windows.kaiser_bessel_derived": lambda xp, d: windows.kaiser_bessel_derived(10, 4.0, xp=xp),
        # scipy.spatial.transform (the methods SciPy lists)
        "spatial.transform.Rotation.__iter__": lambda xp, d: [r.as_quat() for r in Rotation.from_quat(d["quats"])],
        "spatial.transform.Slerp.__call__": lambda xp, d: Slerp(d["times"], Rotation.from_quat(d["quats"]))(
            d["t"]).as_quat(),
        "spatial.transform.RigidTransform.__iter__": lambda xp, d: [t.as_matrix() for t in (
            RigidTransform.from_components(d["X"][:4, :3], Rotation.from_quat(d["quats"])))],
        # scipy.special
        **{f"special.{name}": x1(getattr(special, name)) for name in (
            "entr", "erf", "erfc", "expit", "gammaln", "i0", "i0e", "i1", "i1e", "log_ndtr", "ndtr", "psi")},
        "special.erfinv": lambda xp, d: special.erfinv(d["w"] * 2.0 - 1.0),
        "special.logit": x1(special.logit, "w"),
        "special.ndtri": x1(special.ndtri, "w"),
        "special.chdtr": lambda xp, d: special.chdtr(3.0, d["pos"]),
        "special.chdtrc": lambda xp, d: special.chdtrc(d["pos"], d["pos"]),
        "special.gammainc": lambda xp, d: special.gammainc(d["pos"], d["pos"] * 0.5),
        "special.gammaincc": lambda xp, d: special.gammaincc(d["pos"], d["pos"] * 0.5),
        "special.multigammaln": lambda xp, d: special.multigammaln(d["pos"], 2),
        "special.polygamma": lambda xp, d: special.polygamma(2, d["pos"]),
        "special.rel_entr": lambda xp, d: special.rel_entr(d["p"], d["p"][::-1]),
        "special.xlog1py": lambda xp, d: special.xlog1py(d["X"], d["pos"]),
        "special.xlogy": lambda xp, d: special.xlogy(d["X"], d["pos"]),
        "special.zeta": lambda xp, d: (special.zeta(d["pos"] + 1.0, d["pos"]), special.zeta(d["pos"] + 1.0)),
        "special.logsumexp": lambda xp, d: (special.logsumexp(d["X"], axis=0), special.logsumexp(d["X"], axis=1),
                                            special.logsumexp(d["X"], b=d["pos"], return_sign=True)),
        "special.softmax": lambda xp, d: (special.softmax(d["X"], axis=0), special.softmax(d["X"])),
        "special.log_softmax": lambda xp, d: special.log_softmax(d["X"], axis=1),
        # scipy.stats
        "stats.differential_entropy": lambda xp, d: stats.differential_entropy(d["X"], axis=0),
        "stats.entropy": lambda xp, d: (stats.entropy(d["pos"]), stats.entropy(d["pos"], d["pos"][::-1], axis=1)),
        "stats.bartlett": lambda xp, d: stats.bartlett(d["X"][:, 0], d["X"][:, 1], d["X"][:, 2]),
        "stats.boxcox_llf": lambda xp, d: stats.boxcox_llf(0.5, d["pos"]),
        "stats.circmean": lambda xp, d: stats.circmean(d["X"], axis=0),
        "stats.circstd": lambda xp, d: stats.circstd(d["X"], axis=1),
        "stats.circvar": lambda xp, d: stats.circvar(d["X"], axis=0),
        "stats.directional_stats": lambda xp, d: (lambda r: (r.mean_direction, r.mean_resultant_length))(
            stats.directional_stats(d["S"])),
        "stats.kstat": lambda xp, d: (stats.kstat(d["X"], 2, axis=0), stats.kstat(d["X"], 4, axis=1)),
        "stats.kstatvar": lambda xp, d: stats.kstatvar(d["X"], 2, axis=0),
        "stats.monte_carlo_test": lambda xp, d: (lambda r: (r.statistic, r.pvalue))(stats.monte_carlo_test(
            d["v"], _normal_draws(xp), lambda x, axis: xp.mean(x, axis=axis), n_resamples=99, vectorized=True)),
        "stats.power": lambda xp, d: stats.power(lambda x, axis=-1: stats.skewtest(x, axis=axis).pvalue,
                                                 _normal_draws(xp), d["i"][:2] + 8, n_resamples=50,
                                                 vectorized=True).power,
        "stats.alexandergovern": lambda xp, d: stats.alexandergovern(d["X"][:, 0], d["X"][:, 1], d["X"][:, 3]),
        "stats.chisquare": lambda xp, d: tuple(stats.chisquare(d["pos"], axis=0)),
        "stats.describe": lambda xp, d: tuple(stats.describe(d["X"], axis=0)),
        "stats.gmean": lambda xp, d: stats.gmean(d["pos"], axis=1),
        "stats.gstd": lambda xp, d: stats.gstd(d["pos"], axis=0),
        "stats.gzscore": lambda xp, d: stats.gzscore(d["pos"], axis=0),
        "stats.hmean": lambda xp, d: stats.hmean(d["pos"], axis=0),
        "stats.jarque_bera": lambda xp, d: tuple(stats.jarque_bera(d["X"], axis=0)),
        "stats.kurtosis": lambda xp, d: stats.kurtosis(d["X"], axis=1, fisher=False, bias=False),
        "stats.kurtosistest": lambda xp, d: tuple(stats.kurtosistest(d["X"], axis=0)),
        "stats.moment": lambda xp, d: stats.moment(d["X"], order=[1, 2, 4], axis=0),
        "stats.normaltest": lambda xp, d: tuple(stats.normaltest(d["X"], axis=0)),
        "stats.pmean": lambda xp, d: stats.pmean(d["pos"], 2.5, axis=0),
        "stats.power_divergence": lambda xp, d: tuple(stats.power_divergence(d["pos"], lambda_="cressie-read")),
        "stats.sem": lambda xp, d: stats.sem(d["X"], axis=1),
        "stats.skew": lambda xp, d: stats.skew(d["X"], axis=1, bias=False),
        "stats.skewtest": lambda xp, d: tuple(stats.skewtest(d["X"], axis=0)),
        "stats.tmax": lambda xp, d: stats.tmax(d["X"], 3.0, axis=0),
        "stats.tmean": lambda xp, d: stats.tmean(d["X"], (0.0, 4.0), axis=0),
        "stats.tmin": lambda xp, d: stats.tmin(d["X"], 0.5, axis=1),
        "stats.trim_mean": lambda xp, d: stats.trim_mean(d["X"], 0.1, axis=0),
        "stats.tsem": lambda xp, d: stats.tsem(d["X"], (-1.0, 6.0), axis=0),
        "stats.tstd": lambda xp, d: stats.tstd(d["X"], (-1.0, 6.0), axis=0),
        "stats.tvar": lambda xp, d: stats.tvar(d["X"], (-1.0, 6.0), axis=0),
        "stats.zmap": lambda xp, d: stats.zmap(d["X"], d["X"][:7], axis=0),
        "stats.zscore": lambda xp, d: stats.zscore(d["X"], axis=1, ddof=1),
        "stats.variation": lambda xp, d: stats.variation(d["pos"], axis=0),
    }
    for name in ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft"):
        cases[f"fft.{name}"] = lambda xp, d, f=getattr(fft, name): (f(d["X"]), f(d["X"], axis=0))
    for name in ("fft2", "ifft2", "rfft2", "irfft2", "hfft2", "ihfft2", "fftn", "ifftn", "rfftn", "irfftn", "hfftn",
                 "ihfftn"):
        cases[f"fft.{name}"] = x1(getattr(fft, name))
    iterative = ("stats.monte_carlo_test", "stats.power", "integrate.cubature", "signal.place_poles")
    return {name: (call, ITERATIVE if name in iterative else None) for name, call in sorted(cases.items())}


def _normal_draws(xp):
    """``rvs`` for the resampling tests: the same draws on every rank and in both runs, as arrays of ``xp``."""
    rng = np.random.default_rng(5)

    def rvs(size):
        return xp.asarray(rng.normal(size=size))

    return rvs


SCIPY_CASES = _scipy_cases()
SCIPY_PRIVATE = {
    "spatial.transform._rotation._promote": "a private helper of scipy.spatial.transform (not public API)",
    "spatial.transform._rigid_transform.normalize_dual_quaternion": "a private helper (not public API)",
}


def _scipy_any_backend() -> set[str]:
    """The functions of SciPy's capabilities table supported on every backend and device, as public names."""
    import importlib

    for module in ("cluster.vq", "cluster.hierarchy", "constants", "fft", "integrate", "linalg", "optimize",
                   "signal", "signal.windows", "spatial.transform", "special", "stats"):
        importlib.import_module(f"scipy.{module}")
    from scipy._lib._array_api import xp_capabilities_table

    names = set()
    for func, caps in xp_capabilities_table.items():
        if (caps["out_of_scope"] or caps["np_only"] or caps["cpu_only"] or caps["skip_backends"]
                or caps["xfail_backends"]):
            continue
        module = func.__module__.removeprefix("scipy.")
        public = ".".join(part for part in module.split(".") if not part.startswith("_"))
        name = func.__qualname__
        full = f"{module}.{name}" if name.startswith("_") or "normalize_dual" in name else f"{public}.{name}"
        names.add(full)
    return names


def test_scipy_list_is_scipys():
    """The SciPy functions tested here are exactly those SciPy documents as supporting every backend."""
    assert _scipy_any_backend() == set(SCIPY_CASES) | set(SCIPY_PRIVATE), sorted(
        _scipy_any_backend() ^ (set(SCIPY_CASES) | set(SCIPY_PRIVATE)))


# SciPy's own code converts these to NumPy (np.asarray of a DTensor: an implicit gather, counted and allowed here):
SCIPY_GATHERS = {
    "signal.filtfilt": "filtfilt converts its arguments with np.asarray for its compiled lfilter",
    "signal.iirdesign": "the filter design runs on NumPy (iirfilter, buttord... are cpu-only in SciPy's table)",
    "signal.sosfilt_zi": "linalg.companion writes a row of the coefficients into a NumPy array",
    "signal.place_poles": "its QR is scipy.linalg.qr, which converts with np.asarray_chkfinite",
    "special.multigammaln": "not a ufunc: SciPy's last resort for a namespace without it is np.asarray",
    "special.polygamma": "not a ufunc: SciPy's last resort for a namespace without it is np.asarray",
    "special.zeta": "not a ufunc: SciPy's last resort for a namespace without it is np.asarray",
}
# What does not run on DTensors yet, with the clear error it raises and the missing piece
SCIPY_FAILS = {
    "signal.impulse": (TypeError, "SciPy's tf2ss makes its matrices with NumPy functions, which dispatch on DTensors "
                                  "(__array_function__) and so return DTensors, and joins them with NumPy-made ones; "
                                  "array_namespace refuses the mix"),
}
SCIPY_ELEMENTWISE = (  # scipy.special's ufuncs run through xp.special, on the local blocks
    *(f"special.{name}" for name in ("chdtr", "chdtrc", "entr", "erf", "erfc", "erfinv", "expit", "gammainc",
                                     "gammaincc", "gammaln", "i0", "i0e", "i1", "i1e", "log_ndtr", "logit", "ndtr",
                                     "ndtri", "psi", "xlog1py", "xlogy")),
    "constants.convert_temperature", "constants.lambda2nu", "constants.nu2lambda", "signal.gauss_spline")
SCIPY_LOCAL = {  # elementwise, or along an unsharded axis: no collective
    "shard_first": (*SCIPY_ELEMENTWISE, "special.log_softmax"),  # along rows
    "shard_last": (*SCIPY_ELEMENTWISE, "special.rel_entr"),  # with rows reversed
}


def scipy_family(world) -> None:
    runner = Runner(world, "scipy")
    arrays = _scipy_data()
    for policy, xp in namespaces(world):
        d_dt = {k: xp.asarray(v) for k, v in arrays.items()}
        for name, (call, rtol) in SCIPY_CASES.items():
            runner.run(policy, name, lambda call=call: call(np, arrays), lambda call=call: call(xp, d_dt), rtol=rtol,
                       local=name in SCIPY_LOCAL[policy], gathers=name in SCIPY_GATHERS,
                       fails=SCIPY_FAILS.get(name, (None,))[0])
    runner.finish()


# -- the tests ------------------------------------------------------------------------------------
FAMILIES: dict[str, Callable[[Any], None]] = {
    "einops": einops_family,
    "array_api_extra": xpx_family,
    "sklearn estimators": lambda world: sklearn_family(world, "estimators"),
    "sklearn metrics": lambda world: sklearn_family(world, "metrics"),
    "scipy": scipy_family,
}


def test_scipy_array_api_is_on():
    from scipy._lib._array_api import SCIPY_ARRAY_API

    assert os.environ.get("SCIPY_ARRAY_API") == "1" and SCIPY_ARRAY_API, "SciPy was imported before SCIPY_ARRAY_API=1"


@pytest.mark.worlds(simulated=(1, 2, 3, 4), mpi=())
def test_what_the_consumers_needed_of_the_library(world):
    """The library's pieces these consumers found missing or wrong, each against NumPy (see the module's docstring)."""
    from scipy.special import _ufuncs

    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    checks = Checks(world)
    rng = np.random.default_rng(3)
    a, flags = rng.normal(size=(7, 5)), rng.normal(size=11) > 0
    for policy in POLICIES:
        xp = dt.array_api.namespace(mesh, policy)
        x, f = xp.asarray(a), xp.asarray(flags)
        # xp.diff with NumPy's positional n (scikit-learn's roc_curve: xp.diff(fps, 2)), the standard's keywords too
        checks.same(f"{policy} diff(x, 2)", lambda: np.diff(a, 2), lambda: xp.diff(x, 2))
        checks.same(f"{policy} diff(x, 1, 0)", lambda: np.diff(a, 1, 0), lambda: xp.diff(x, 1, 0))
        checks.same(f"{policy} diff(x, axis=0, n=3)", lambda: np.diff(a, axis=0, n=3), lambda: xp.diff(x, axis=0, n=3))
        # xp.where(condition): NumPy's one-argument form, nonzero (roc_curve's xp.where(mask)[0])
        checks.same(f"{policy} where(mask)", lambda: np.where(flags), lambda: xp.where(f))
        checks.same(f"{policy} where(x > 0, x, 0)", lambda: np.where(a > 0, a, 0.0), lambda: xp.where(x > 0, x, 0.0))
        checks.raises(f"{policy} where(mask, x)", lambda: xp.where(f, f), ValueError, "either both or neither")
        # broadcast_to of a 0-d array is 0-d on every rank (scipy.stats.bartlett: broadcast_to(n, ())[newaxis, ...])
        n = xp.asarray(23.0)
        checks.same(f"{policy} broadcast_to(0-d, ())[None, ...]",
                    lambda: np.broadcast_to(np.float64(23.0), ())[None, ...], lambda: xp.broadcast_to(n, ())[None, ...])
        checks.same(f"{policy} broadcast_to(0-d, (3, 2))", lambda: np.broadcast_to(np.float64(23.0), (3, 2)),
                    lambda: xp.broadcast_to(n, (3, 2)))
        # another library's ufunc runs on the local blocks, broadcasting like NumPy's; xp.special has SciPy's
        with comm_counter() as counter:
            got = xp.special.gammainc(xp.abs(x) + 1.0, np.abs(a[:1]))  # a plain array: a replicated constant
        checks.expect(counter.total == 0, f"{policy} xp.special.gammainc: {counts(counter)}")
        checks.same(f"{policy} xp.special.gammainc", lambda: _ufuncs.gammainc(np.abs(a) + 1.0, np.abs(a[:1])),
                    lambda: got)
        checks.same(f"{policy} scipy ufunc with a scalar", lambda: _ufuncs.xlogy(2.0, np.abs(a)),
                    lambda: _ufuncs.xlogy(2.0, xp.abs(x)))
        checks.expect(not hasattr(xp.special, "logsumexp") and not hasattr(xp.special, "_private"),
                      f"{policy} xp.special has only SciPy's elementwise functions")
    checks.finish()


@pytest.mark.gpu
@pytest.mark.worlds(simulated=(2,), mpi=())
def test_special_functions_of_cupy_blocks_go_through_numpy(world, cupy):
    """SciPy's ufuncs take NumPy arrays only: xp.special on CuPy blocks does what SciPy does without it (a gather)."""
    from scipy.special import _ufuncs

    a = np.linspace(0.1, 2.0, 7)
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    xp = dt.array_api.namespace(mesh)
    x = xp.adopt(dt.distribute_tensor(cupy.asarray(a), mesh, [dt.Shard(0)]))
    with dt.implicit_gather("allow"), comm_counter() as counter:
        got = xp.special.erf(x).full_tensor()
    assert counter.implicit_gathers >= 1
    np.testing.assert_allclose(got.get() if hasattr(got, "get") else got, _ufuncs.erf(a), rtol=1e-12)


@pytest.mark.worlds(simulated=(4,), mpi=())
@pytest.mark.parametrize("family", FAMILIES)
def test_consumer_family_matches_numpy(world, family):
    FAMILIES[family](world)


@pytest.mark.worlds(simulated=(), mpi=(2,))
def test_every_family_matches_numpy_under_mpi(world):
    """All the families in one ``mpiexec -n 2`` job (one job per module: starting one costs seconds)."""
    errors = []
    for family, run in FAMILIES.items():
        try:
            run(world)
        except AssertionError as exc:  # every rank agreed on it (Checks.finish): go on to the next family
            errors.append(f"{family}: {exc}")
    assert not errors, "\n".join(errors)
