"""The statistics family (dtensor_np.functions.statistics and its rules) beyond the catalogue's cases.

* Against NumPy on uneven and empty shards (5, 1 and 0 rows over up to 4
  ranks), NaNs and all-NaN slices, every axis, ``keepdims``, several dtypes:
  values, dtypes, every held rank's shard (:class:`test_numpy_ops.Checks`),
  errors; simulated 1-4 ranks and one ``mpiexec -n 2`` job.
* On 2-D meshes, where other mesh dims split the slices into several groups.
* The collectives and bytes of every function that communicates
  (``comm_counter``): a median along a sharded axis never gathers the array,
  a histogram is one ``all_reduce`` of its counts, a row-sharded covariance
  one of ``d * d`` numbers.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np
import pytest

import dtensor_np as dt
from dtensor_np import Replicate, Shard
from test_numpy_ops import Checks

R = Replicate()


def _data(shape: tuple[int, ...], kind: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "i8":
        return rng.integers(-4, 5, size=shape)
    a = (rng.standard_normal(shape) * 10).astype(kind)
    if a.size and a.ndim == 2:
        a[rng.random(shape) < 0.25] = np.nan
        a[:, -1] = np.nan  # an all-NaN column
    return a


def _zeroed(x: Any) -> Any:
    """``x`` with its NaNs as 0 (``np.nan_to_num`` of another family)."""
    return np.where(np.isnan(x), 0, x) if x.dtype.kind == "f" else x


ORDER: dict[str, Callable[[Any, Any], Any]] = {
    "median": lambda x, ax: np.median(x, axis=ax),
    "median keepdims": lambda x, ax: np.median(x, axis=ax, keepdims=True),
    "quantile linear": lambda x, ax: np.quantile(x, [0.0, 0.3, 1.0], axis=ax),
    "quantile lower": lambda x, ax: np.quantile(x, 0.3, axis=ax, method="lower"),
    "percentile nearest": lambda x, ax: np.percentile(x, [12.5, 80], axis=ax, method="nearest"),
    "percentile midpoint": lambda x, ax: np.percentile(x, 50.0, axis=ax, method="midpoint"),
    "quantile hazen": lambda x, ax: np.quantile(x, [0.2, 0.9], axis=ax, method="hazen"),
    "nanmedian": lambda x, ax: np.nanmedian(x, axis=ax),
    "nanquantile higher": lambda x, ax: np.nanquantile(x, 0.7, axis=ax, method="higher"),
    "nanpercentile": lambda x, ax: np.nanpercentile(x, 40, axis=ax, keepdims=True),
}
NAN: dict[str, tuple[Callable[[Any, Any], Any], bool]] = {  # name: (call, exact)
    "nanmax": (lambda x, ax: np.nanmax(x, axis=ax), True),
    "nanmin keepdims": (lambda x, ax: np.nanmin(x, axis=ax, keepdims=True), True),
    "nanargmax": (lambda x, ax: np.nanargmax(x, axis=ax), True),
    "nanargmin": (lambda x, ax: np.nanargmin(x, axis=ax), True),
    "nansum": (lambda x, ax: np.nansum(x, axis=ax), False),
    "nanprod": (lambda x, ax: np.nanprod(x / 8 if x.dtype.kind == "f" else x, axis=ax), False),
    "nanmean": (lambda x, ax: np.nanmean(x, axis=ax), False),
    "nanvar": (lambda x, ax: np.nanvar(x, axis=ax, ddof=1), False),
    "nanstd": (lambda x, ax: np.nanstd(x, axis=ax), False),
    "nancumsum": (lambda x, ax: np.nancumsum(x, axis=ax), False),
    "nancumprod": (lambda x, ax: np.nancumprod(x / 8 if x.dtype.kind == "f" else x, axis=ax), False),
    "average": (lambda x, ax: np.average(_zeroed(x), axis=ax, returned=ax is not None and x.ndim > 1), False),
    "ptp": (lambda x, ax: np.ptp(x, axis=ax), True),
    "count_nonzero": (lambda x, ax: np.count_nonzero(x, axis=ax), True),
}


def _check_family(report: Checks, mesh: dt.DeviceMesh, shapes: tuple, kinds: tuple, placements: list,
                  order_only: bool = False) -> None:
    for shape in shapes:
        for kind in kinds:
            a = _data(shape, kind)
            for placement in placements:
                x = dt.distribute_tensor(a, mesh, placement)
                for ax in (None, 0, -1):
                    where = f"{kind}{shape} {placement} axis={ax}"
                    for name, f in ORDER.items():
                        report.same(f"{name} {where}", lambda: f(a, ax), lambda: f(x, ax), exact=True)
                    for name, (f, exact) in ({} if order_only else NAN).items():
                        if ax is None and name in ("nanargmax", "nanargmin", "nancumsum", "nancumprod") and a.ndim > 1:
                            continue  # an all-NaN column is fine for a whole-array reduction; scans of all: below
                        single = a.dtype == np.float32  # cumulative sums near 0: absolute error
                        report.same(f"{name} {where}", lambda: f(a, ax), lambda: f(x, ax), exact=exact,
                                    rtol=1e-4 if single else None, atol=1e-3 if single else None)


@pytest.mark.worlds(simulated=(1, 2, 3, 4), mpi=(2,))
def test_statistics_match_numpy_on_uneven_and_empty_shards(world):
    """Every function of the family on 1-D meshes: 300 rows (the selection), 5, 1 and 0 rows (uneven, empty)."""
    report = Checks(world)
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    placements = [[Shard(0)], [Shard(1)], [R]]
    _check_family(report, mesh, ((300, 3),), ("f8", "i8"), [[Shard(0)]], order_only=True)  # the selection
    _check_family(report, mesh, ((5, 3), (1, 2), (0, 3)), ("f8",), placements)
    _check_family(report, mesh, ((6, 2),), ("i8",), placements[:2])
    _check_family(report, mesh, ((260,), (7,)), ("f4",), [[Shard(0)]])
    a = _data((9, 4), "f8", seed=1)
    w = np.arange(1.0, 10.0)
    for placement in placements:
        x = dt.distribute_tensor(a, mesh, placement)
        clean = dt.distribute_tensor(_zeroed(a), mesh, placement)
        b = _zeroed(a)
        for name, f in {
            "histogram": lambda v: np.histogram(v, bins=4),
            "histogram range density": lambda v: np.histogram(v, bins=3, range=(-5, 5), density=True),
            "histogram edges": lambda v: np.histogram(v, bins=[-20, -1, 0, 3, 20]),
            "histogram_bin_edges fd": lambda v: np.histogram_bin_edges(v, bins="fd"),
            "histogram_bin_edges auto": lambda v: np.histogram_bin_edges(v, bins="auto", range=(-8, 8)),
            "histogram_bin_edges stone": lambda v: np.histogram_bin_edges(v, bins="stone"),
            "histogramdd": lambda v: (lambda h, e: (h, *e))(*np.histogramdd(v, bins=(2, 3, 1, 2))),
            "histogram2d": lambda v: np.histogram2d(v[:, 0], v[:, 1], bins=3),
            "cov": lambda v: np.cov(v, rowvar=False),
            "cov aweights": lambda v: np.cov(v, rowvar=False, aweights=w),
            "corrcoef": lambda v: np.corrcoef(v.T),
            "digitize": lambda v: np.digitize(v, [-3.0, 0.0, 3.0]),
            "interp": lambda v: np.interp(v, [-10.0, 0.0, 10.0], [0.0, 1.0, 4.0]),
        }.items():
            exact = name.startswith(("histogram_bin_edges", "digitize", "interp", "histogram2d", "histogramdd"))
            report.same(f"{name} {placement}", lambda: f(b), lambda: f(clean), exact=exact or name == "histogram")
        labels = dt.distribute_tensor(np.arange(9) % 4, mesh, [R] if placement == [Shard(1)] else placement)
        report.same(f"bincount {placement}", lambda: np.bincount(np.arange(9) % 4, weights=w, minlength=6),
                    lambda: np.bincount(labels, weights=w, minlength=6))
        report.raises(f"nanargmax all-NaN {placement}", lambda: np.nanargmax(x, axis=0), ValueError, "All-NaN slice")
        report.raises(f"histogram NaN range {placement}", lambda: np.histogram(x), ValueError, "not finite")
        report.raises(f"average zero weights {placement}",
                      lambda: np.average(x, axis=0, weights=np.zeros(9)), ZeroDivisionError, "Weights sum to zero")
    negative = dt.distribute_tensor(np.array([3, 0, -1, 2, 5]), mesh, [Shard(0)])
    report.raises("bincount negative", lambda: np.bincount(negative), ValueError, "negative")
    # the collectives of a median along a sharded axis: never the array
    big = np.random.default_rng(5).permutation(4000) / 8.0
    x = dt.distribute_tensor(big, mesh, [Shard(0)])
    with dt.comm_counter() as c:
        m = np.median(x)
    report.expect(float(m.full_tensor()) == np.median(big), f"median of 4000: {m.full_tensor()}")
    if world.size > 1:
        report.expect(c.counts["all_gather"] <= 1 and c.bytes["all_gather"] <= 256 * 8, f"median gathers: {c}")
        report.expect(sum(c.bytes.values()) < big.nbytes // 2 and c.total <= 10, f"median moves {c.bytes}")
    # the largest integers have the top order key, as NaN has among floats: they are numbers, not NaN
    for dtype in (np.int64, np.uint64):
        top = np.array([0, 1, 2, np.iinfo(dtype).max, 5, 6, 7, 8, 9] * 300, dtype=dtype)
        x = dt.distribute_tensor(top, mesh, [Shard(0)])
        for q in (10, 50, 95):
            report.same(f"percentile {q} of {dtype.__name__} with its largest value", lambda q=q: np.percentile(top, q),
                        lambda q=q: np.percentile(x, q), exact=True)
        report.same(f"partition of {dtype.__name__} with its largest value",
                    lambda: np.partition(top, (5, 2600))[[5, 2600]], lambda: np.partition(x, (5, 2600))[[5, 2600]],
                    exact=True)
    report.finish()


@pytest.mark.worlds(simulated=(4,), mpi=())
def test_statistics_on_a_2d_mesh(world):
    """Several groups (the slices split by the other mesh dim) agree on the rounds of the selection."""
    report = Checks(world)
    mesh = dt.DeviceMesh((2, 2), backend=world.kind)
    a = _data((300, 5), "f8", seed=3)
    a[:150, 1] = 7.25  # groups of other lengths of search
    for placements in ([Shard(0), Shard(1)], [Shard(1), Shard(0)], [Shard(0), R], [Shard(0), Shard(0)]):
        x = dt.distribute_tensor(a, mesh, placements)
        for ax in (None, 0, 1):
            for name, f in ORDER.items():
                report.same(f"{name} {placements} axis={ax}", lambda: f(a, ax), lambda: f(x, ax), exact=True)
            for name in ("nanmax", "nanprod", "nancumprod", "nanmean"):
                f, exact = NAN[name]
                report.same(f"{name} {placements} axis={ax}", lambda: f(a, ax), lambda: f(x, ax), exact=exact)
        report.same(f"histogram {placements}", lambda: np.histogram(a, bins=5, range=(-9, 9)),
                    lambda: np.histogram(x, bins=5, range=(-9, 9)), exact=True)
        report.same(f"histogram_bin_edges {placements}", lambda: np.histogram_bin_edges(_zeroed(a), bins="fd"),
                    lambda: np.histogram_bin_edges(_zeroed(x), bins="fd"), exact=True)
    report.finish()


def _counted(call: Callable[[], Any]) -> tuple[Any, Any]:
    with dt.comm_counter() as c, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = call()
        out = [o.full_tensor() if isinstance(o, dt.DTensor) else o for o in (out if isinstance(out, tuple) else (out,))]
    return out, c


@pytest.mark.worlds(simulated=(4,), mpi=())
def test_collectives_and_bytes(world):
    """What each function that communicates sends, on 4 ranks (the result read once: ``full_tensor``)."""
    mesh = dt.DeviceMesh((4,), backend=world.kind)
    rng = np.random.default_rng(7)
    rows = rng.standard_normal((4000, 3))
    x = dt.distribute_tensor(rows, mesh, [Shard(0)])
    flat = dt.distribute_tensor(rows[:, 0].copy(), mesh, [Shard(0)])

    # order statistics: one all_reduce (max) of 2 keys per column, rounds of 256 counts, one small all_gather
    (q,), c = _counted(lambda: np.quantile(x, [0.25, 0.5], axis=0))
    assert np.array_equal(q, np.quantile(rows, [0.25, 0.5], axis=0))
    assert c.counts["all_to_all"] == 0 and c.counts["all_gather"] <= 1
    assert c.bytes["all_gather"] <= 256 * 8 * 3 * 2 and 2 <= c.counts["all_reduce"] <= 9, c
    assert max(c.bytes.values()) <= 3 * 4 * 256 * 8  # one round: 3 columns x 2 quantiles x 2 neighbours
    # a slice of at most 2 KiB: made whole by one all_to_all (its sharding moves to the other dim)
    short = rng.standard_normal((200, 4))
    (m,), c = _counted(lambda: np.median(dt.distribute_tensor(short, mesh, [Shard(0)]), axis=0))
    assert np.array_equal(m, np.median(short, axis=0)) and c.counts["all_to_all"] == 1 and c.total <= 2, c

    # where NumPy's algorithm needs whole slices: weights (summed in sorted order), complex (lexicographic) medians
    line = rows[:, 0].copy()
    weights = np.abs(rows[:, 1])
    (wq,), c = _counted(lambda: np.quantile(flat, 0.4, method="inverted_cdf",
                                            weights=dt.distribute_tensor(weights, mesh, [Shard(0)])))
    assert wq == np.quantile(line, 0.4, method="inverted_cdf", weights=weights), wq
    assert c.counts["all_gather"] == 2 and c.total == 2 and c.bytes["all_gather"] == 2 * 1000 * 8, c  # a, weights
    (cm,), c = _counted(lambda: np.median(x * (1 + 1j), axis=0))
    assert np.array_equal(cm, np.median(rows * (1 + 1j), axis=0)) and c.counts["all_gather"] == 1 and c.total == 1, c

    # nanmax: one all_reduce of one 8-byte key per result element
    (v,), c = _counted(lambda: np.nanmax(x, axis=0))
    assert c.counts["all_reduce"] == 1 and c.total == 1 and c.bytes["all_reduce"] == 3 * 8, c
    # nanprod: one all_gather of the blocks' products; nancumprod: one all_gather of one row per block
    _, c = _counted(lambda: np.nanprod(x, axis=0))
    assert c.counts["all_gather"] == 1 and c.total == 1 and c.bytes["all_gather"] == 3 * 8, c
    with dt.comm_counter() as c:
        y = np.nancumprod(x, axis=0)  # keeps the sharding
    assert str(y.spec) == "S(0)" and c.counts["all_gather"] == 1 and c.total == 1 and c.bytes["all_gather"] == 3 * 8, c

    # histogram: one all_reduce of the extremes (2 keys), one of the counts; with a range only the counts
    _, c = _counted(lambda: np.histogram(flat, bins=16))
    assert c.counts["all_reduce"] == 2 and c.total == 2 and c.bytes["all_reduce"] == 2 * 8 + 16 * 8, c
    _, c = _counted(lambda: np.histogram(flat, bins=16, range=(-1, 1)))
    assert c.counts["all_reduce"] == 1 and c.total == 1 and c.bytes["all_reduce"] == 16 * 8, c
    _, c = _counted(lambda: np.histogramdd(x, bins=(4, 5, 6)))
    assert c.counts["all_reduce"] == 2 and c.total == 2 and c.bytes["all_reduce"] == 2 * 3 * 8 + 4 * 5 * 6 * 8, c
    (h, _, _), c = _counted(lambda: np.histogram2d(flat, flat, bins=4, range=[(-1, 1), (-1, 1)]))
    assert c.counts["all_reduce"] == 1 and c.total == 1, c
    # bincount: one all_reduce of (largest value, any negative), one of the counts
    labels = dt.distribute_tensor(rng.integers(0, 10, 4000), mesh, [Shard(0)])
    (n,), c = _counted(lambda: np.bincount(labels))
    assert n.shape == (10,) and c.counts["all_reduce"] == 2 and c.total == 2, c
    assert c.bytes["all_reduce"] == 2 * 8 + 10 * 8, c

    # cov / corrcoef of row-sharded data: the means (d) and the d x d product, never X
    (s,), c = _counted(lambda: np.cov(x, rowvar=False))
    assert np.allclose(s, np.cov(rows, rowvar=False)) and c.counts["all_reduce"] == 2 and c.total == 2, c
    assert c.bytes["all_reduce"] == 3 * 8 + 3 * 3 * 8, c
    (r,), c = _counted(lambda: np.corrcoef(x, rowvar=False))
    assert np.allclose(r, np.corrcoef(rows, rowvar=False)) and c.total == 3, c
    assert c.bytes["all_reduce"] == 2 * 3 * 8 + 9 * 8, c  # the means, the diagonal, the d x d product

    # local: interp, digitize, and everything along an unsharded axis
    for call in (lambda: np.interp(x, [-1.0, 1.0], [0.0, 2.0]), lambda: np.digitize(x, [-1.0, 0.0, 1.0]),
                 lambda: np.median(x, axis=1), lambda: np.nanpercentile(x, 10, axis=1),
                 lambda: np.nanmax(x, axis=1), lambda: np.nanmean(x, axis=1), lambda: np.nanargmin(x, axis=1)):
        with dt.comm_counter() as c:
            call()
        assert c.total == 0, c


@pytest.mark.worlds(simulated=(2,), mpi=())
def test_warnings_as_numpy(world):
    """NumPy's warnings: an all-NaN slice, a mean of nothing, degrees of freedom <= 0."""
    mesh = dt.DeviceMesh((2,), backend=world.kind)
    a = np.full((600, 2), np.nan)
    a[:, 1] = np.arange(600.0)
    x = dt.distribute_tensor(a, mesh, [Shard(0)])
    for call, message in ((lambda v: np.nanmedian(v, axis=0), "All-NaN slice"),
                          (lambda v: np.nanquantile(v, 0.5, axis=0), "All-NaN slice"),
                          (lambda v: np.nanmax(v, axis=0), "All-NaN slice"),
                          (lambda v: np.nanmean(v, axis=0), "Mean of empty slice"),
                          (lambda v: np.nanvar(v, axis=0), "Degrees of freedom")):
        with pytest.warns(RuntimeWarning, match=message):
            got = call(x).full_tensor()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert np.array_equal(got, call(a), equal_nan=True)
