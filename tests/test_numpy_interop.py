"""DTensors among plain NumPy code: plain arrays mixed in, conversions to NumPy, sorted uniques, and the consumers
that rely on them (scikit-learn, SciPy, array-api-extra), against NumPy.

* Mixing: a NumPy array or a list of numbers in a ufunc, an operator, ``matmul``, an ``__array_function__``
  function, as an index or as an assigned value is a replicated constant: NumPy's values, no collective; under
  the SPMD check a rank-dependent array raises ``SpmdError`` on every rank.
* Conversions: ``np.asarray``/``np.array``/``__array__`` gather with an ``ImplicitGatherWarning`` that names the
  bytes and the calling line, ``raise`` mode raises, ``allow`` is silent, each gather is counted;
  ``__dlpack__(dl_device=(1, 0))``, ``np.from_dlpack(x, device="cpu")`` and ``xp.from_dlpack(x, device="cpu")``
  give the whole array; ``xp.asarray`` of a NumPy result is placed by the namespace's policy.
* The consumers of issue 36 on both namespace policies, simulated on 4 ranks and under ``mpiexec -n 2``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import dtensor_np as dt
from collectives import SpmdError, check_spmd, comm_counter
from dtensor_np import Replicate, Shard
from test_numpy_ops import Checks

ROWS, COLS = 23, 3


def _meshes(world):
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    return [(mesh, [Shard(0)]), (mesh, [Shard(1)]), (mesh, [Replicate()])]


# -- plain arrays mixed in -----------------------------------------------------------------------------------
@pytest.mark.worlds(simulated=(1, 2, 3, 4), mpi=(2, 4))
def test_plain_arrays_are_replicated_constants(world):
    checks = Checks(world)
    rng = np.random.default_rng(7)
    a = rng.normal(size=(5, 3))
    c = rng.normal(size=(5, 3))
    onehot = np.zeros((3, 1))
    onehot[1] = 1.0
    for mesh, placements in _meshes(world):
        x = dt.distribute_tensor(a, mesh, placements)
        cases = {
            "x + ndarray": (lambda: a + c, lambda: x + c),
            "ndarray - x": (lambda: c - a, lambda: c - x),
            "x * list": (lambda: a * [1.0, 2.0, 3.0], lambda: x * [1.0, 2.0, 3.0]),
            "np.maximum(x, ndarray)": (lambda: np.maximum(a, c), lambda: np.maximum(x, c)),
            "x @ onehot": (lambda: a @ onehot, lambda: x @ onehot),
            "np.dot(ndarray.T, x)": (lambda: np.dot(c.T, a), lambda: np.dot(c.T, x)),
            "scores + np.tri": (lambda: a + np.tri(5, 3), lambda: x + np.tri(5, 3)),
            "np.where(ndarray mask, x, 0)": (lambda: np.where(c > 0, a, 0.0), lambda: np.where(c > 0, x, 0.0)),
            "np.concatenate([x, ndarray])": (lambda: np.concatenate([a, c]), lambda: np.concatenate([x, c])),
            "np.einsum with an ndarray": (lambda: np.einsum("ij,ij->i", a, c), lambda: np.einsum("ij,ij->i", x, c)),
            "x[ndarray index]": (lambda: a[np.array([4, 0, 2])], lambda: x[np.array([4, 0, 2])]),
        }
        for ctx, (numpy_call, dtensor_call) in cases.items():
            with comm_counter() as counter:
                got = dtensor_call()
            checks.same(f"{ctx} {placements}", numpy_call, lambda: got)
            # elementwise with a constant: local on every placement (the constant is cut like x, no collective)
            elementwise = ctx not in ("x[ndarray index]", "np.dot(ndarray.T, x)", "x @ onehot",
                                      "np.einsum with an ndarray", "np.concatenate([x, ndarray])")
            if elementwise or placements == [Replicate()]:
                checks.expect(counter.total == 0, f"{ctx} {placements}: the constant moved: {counter}")
        # a recurrence that starts from a plain array
        h, hd = np.zeros(3), np.zeros(3)
        w = rng.normal(size=(3, 3)) / 3
        wd = dt.distribute_tensor(w, mesh, [Replicate()])
        for _ in range(3):
            h, hd = np.tanh(w @ h + a[0]), np.tanh(wd @ hd + x[0])
        checks.same(f"recurrence from np.zeros {placements}", lambda: h, lambda: hd, rtol=1e-12, atol=1e-12)
        # an assigned value
        y, b = dt.distribute_tensor(a, mesh, placements), a.copy()
        y[1:3] = c[:2]
        b[1:3] = c[:2]
        checks.same(f"x[1:3] = ndarray {placements}", lambda: b, lambda: y)
    checks.finish()


@pytest.mark.worlds(simulated=(), mpi=(2, 4))
def test_a_rank_dependent_constant_raises_on_every_rank(world):
    mesh = dt.DeviceMesh((world.size,), backend="mpi")
    x = dt.distribute_tensor(np.ones(4), mesh, [Shard(0)])
    mine = np.full(4, float(world.ranks[0]))
    with check_spmd():
        with pytest.raises(SpmdError, match="must be the same on every rank"):
            x + mine
        same = x + np.full(4, 2.0)  # the ranks are in step afterwards
    np.testing.assert_array_equal(same.full_tensor(), np.full(4, 3.0))


# -- conversions ---------------------------------------------------------------------------------------------
@pytest.mark.worlds(simulated=(1, 2, 4), mpi=(2,))
def test_conversions_to_numpy(world):
    a = np.arange(20.0).reshape(5, 4)
    for mesh, placements in _meshes(world):
        x = dt.distribute_tensor(a, mesh, placements)
        gathers = mesh.size() > 1 and placements != [Replicate()]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with comm_counter() as counter:
                got = np.asarray(x)
        assert type(got) is np.ndarray and got.flags.writeable
        np.testing.assert_array_equal(got, a)
        warned = [w for w in caught if issubclass(w.category, dt.ImplicitGatherWarning)]
        if gathers:
            assert len(warned) == 1 and f"{a.nbytes} bytes" in str(warned[0].message)
            assert warned[0].filename == __file__, warned[0].filename  # the calling line, not the library's
            assert counter.implicit_gathers == 1 and counter.implicit_bytes == a.nbytes
        else:
            assert not warned and counter.implicit_gathers == 0
        with dt.implicit_gather("raise"):
            if gathers:
                with pytest.raises(TypeError, match="implicit gathers are refused"):
                    np.array(x)
        with dt.implicit_gather("allow"), warnings.catch_warnings():
            warnings.simplefilter("error", dt.ImplicitGatherWarning)
            np.testing.assert_array_equal(np.array(x), a)
            np.testing.assert_array_equal(x.__array__(), a)
        # explicit: DLPack's cross-device copy, never a warning
        with warnings.catch_warnings():
            warnings.simplefilter("error", dt.ImplicitGatherWarning)
            np.testing.assert_array_equal(np.from_dlpack(x, device="cpu"), a)
            np.testing.assert_array_equal(np.from_dlpack(x, device="cpu", copy=True), a)  # __dlpack__(dl_device=(1, 0))
            np.testing.assert_array_equal(np.from_dlpack(x), a)
            xp = dt.array_api.namespace(mesh)
            back = xp.from_dlpack(x, device="cpu")
            assert type(back) is np.ndarray
            np.testing.assert_array_equal(back, a)
            again = xp.asarray(back * 2)  # a NumPy result comes back placed by the namespace's policy
            assert isinstance(again, dt.DTensor) and again.placements == xp.asarray(a).placements
            np.testing.assert_array_equal(again.full_tensor(), a * 2)


def test_the_mode_comes_from_the_environment(monkeypatch):
    from dtensor_np.conversion import IMPLICIT_GATHER_ENV, implicit_gather_mode

    monkeypatch.setenv(IMPLICIT_GATHER_ENV, "raise")
    assert implicit_gather_mode() == "raise"
    with dt.implicit_gather("allow"):
        assert implicit_gather_mode() == "allow"
    monkeypatch.setenv(IMPLICIT_GATHER_ENV, "sometimes")
    with pytest.raises(ValueError, match="expected one of"):
        implicit_gather_mode()
    with pytest.raises(ValueError, match="expected one of"):
        with dt.implicit_gather("quietly"):
            pass


# -- sorted uniques -------------------------------------------------------------------------------------------
@pytest.mark.worlds(simulated=(1, 2, 4), mpi=(2,))
def test_uniques_come_back_sorted(world):
    a = np.array([3.0, 1.0, 2.0, 3.0, np.nan, 1.0, 7.0, -1.0, np.nan])
    for mesh, placements in _meshes(world)[::2]:
        x = dt.distribute_tensor(a, mesh, placements)
        values = np.unique_values(x).full_tensor()
        np.testing.assert_array_equal(values, [-1.0, 1.0, 2.0, 3.0, 7.0, np.nan, np.nan])
        counts = np.unique_counts(x)
        np.testing.assert_array_equal(counts.counts.full_tensor(), [1, 2, 1, 2, 1, 1, 1])
        inverse = np.unique_inverse(x)
        np.testing.assert_array_equal(inverse.values.full_tensor()[inverse.inverse_indices.full_tensor()], a)
        every = np.unique_all(x)
        np.testing.assert_array_equal(every.values.full_tensor(), a[every.indices.full_tensor()])


# -- consumers ----------------------------------------------------------------------------------------------------
sklearn = pytest.importorskip("sklearn")
scipy = pytest.importorskip("scipy")

from scipy import special, stats  # noqa: E402
from sklearn.linear_model import LogisticRegression, RidgeClassifier  # noqa: E402
from sklearn.metrics import confusion_matrix, f1_score, log_loss  # noqa: E402
from sklearn.mixture import GaussianMixture  # noqa: E402
from sklearn.naive_bayes import GaussianNB  # noqa: E402
from sklearn.preprocessing import LabelBinarizer, LabelEncoder  # noqa: E402


def _data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(size=(12, COLS)), rng.normal(size=(11, COLS)) + 3])
    y = np.array([0] * 12 + [1] * 11)
    labels = np.array([2, 1, 0] * 7 + [2, 1])  # LabelEncoder's classes_ must come back [0, 1, 2]
    return X, y, labels


def _gmm(X, y, labels):
    gm = GaussianMixture(2, random_state=0, init_params="random_from_data").fit(X)  # covariance_type="full"
    return gm.means_, gm.covariances_, gm.predict_proba(X)


CONSUMERS = {
    "GaussianMixture (full, reg_covar through a view)": _gmm,
    "LabelEncoder": lambda X, y, labels: (LabelEncoder().fit(labels).classes_, LabelEncoder().fit_transform(labels)),
    "GaussianNB": lambda X, y, labels: GaussianNB().fit(X, y).predict_proba(X),
    "LogisticRegression": lambda X, y, labels: LogisticRegression().fit(X, y).predict_proba(X),
    "RidgeClassifier": lambda X, y, labels: RidgeClassifier(solver="svd").fit(X, y).decision_function(X),
    "LabelBinarizer": lambda X, y, labels: LabelBinarizer().fit(labels).transform(labels),
    "confusion_matrix": lambda X, y, labels: confusion_matrix(labels, labels[::-1]),
    "f1_score": lambda X, y, labels: f1_score(labels, labels[::-1], average="macro"),
    "log_loss": lambda X, y, labels: log_loss(y, special.expit(X[:, 0] - 1.5)),
    "scipy.special.expit": lambda X, y, labels: special.expit(X),
    "scipy.special.erf": lambda X, y, labels: special.erf(X),
    "scipy.special.gammaln": lambda X, y, labels: special.gammaln(X * X + 1),
    "scipy.stats.entropy": lambda X, y, labels: stats.entropy(X * X + 1),
    "scipy.stats.ttest_ind": lambda X, y, labels: tuple(stats.ttest_ind(X[:, 0], X[:, 1]))[:2],
    "scipy.stats.pearsonr": lambda X, y, labels: tuple(stats.pearsonr(X[:, 0], X[:, 1]))[:2],
}


def _as_numpy(value):
    with dt.implicit_gather("allow"):
        return [np.asarray(v) for v in (value if isinstance(value, tuple) else (value,))]


@pytest.mark.worlds(simulated=(4,), mpi=(2,))
@pytest.mark.parametrize("policy", ["shard_first", "shard_last"])
def test_consumers_give_numpys_numbers(world, policy):
    X, y, labels = _data()
    xp = dt.array_api.namespace(dt.DeviceMesh((world.size,), backend=world.kind), policy)
    errors = []
    for name, run in CONSUMERS.items():
        expected = _as_numpy(run(X, y, labels))
        with sklearn.config_context(array_api_dispatch=True), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # implicit gathers (host-side code) and scikit-learn's own notes
            got = _as_numpy(run(xp.asarray(X), xp.asarray(y), xp.asarray(labels)))
        for i, (g, e) in enumerate(zip(got, expected)):
            if g.shape != e.shape or not np.allclose(g, e, rtol=1e-8, atol=1e-10):
                errors.append(f"{policy} {name}[{i}]: {g!r} != NumPy's {e!r}")
    if world.kind == "mpi":
        every = world.backend.comm.allgather(errors)
        errors = [f"process {i}: {e}" for i, es in enumerate(every) for e in es]
    assert not errors, "\n".join(errors)


@pytest.mark.worlds(simulated=(4,), mpi=(2,))
@pytest.mark.parametrize("policy", ["shard_first", "shard_last"])
def test_array_api_extra_sets_are_sorted(world, policy):
    xpx = pytest.importorskip("array_api_extra")
    xp = dt.array_api.namespace(dt.DeviceMesh((world.size,), backend=world.kind), policy)
    a, b = np.array([5, 3, 1, 3, 7, 11, 0]), np.array([3, 9, 1, 4])
    got = xpx.setdiff1d(xp.asarray(a), xp.asarray(b), xp=xp)
    np.testing.assert_array_equal(got.full_tensor(), np.setdiff1d(a, b))
    got = xpx.union1d(xp.asarray(a), xp.asarray(b), xp=xp)
    np.testing.assert_array_equal(got.full_tensor(), np.union1d(a, b))


@pytest.mark.gpu
@pytest.mark.worlds(simulated=(2,), mpi=(2,))
def test_conversions_and_constants_on_cupy_shards(world, cupy):
    a = np.arange(12.0).reshape(4, 3)
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    x = dt.distribute_tensor(cupy.asarray(a), mesh, [Shard(0)])
    with dt.implicit_gather("allow"):
        got = np.asarray(x)
    assert type(got) is np.ndarray
    np.testing.assert_array_equal(got, a)
    np.testing.assert_array_equal(np.from_dlpack(x, device="cpu"), a)
    y = x + np.arange(3.0)  # a NumPy constant onto a CuPy mesh: copied to the device once
    assert all(type(s).__module__.startswith("cupy") for s in y.shards.values())
    np.testing.assert_array_equal(y.full_tensor().get(), a + np.arange(3.0))
    v = x[1:3]
    v[0, 0] = -1.0
    assert float(x[1, 0]) == -1.0
