"""Statistics: the ``nan*`` family, ``average``, ``ptp``, ``cov``, ``corrcoef``, ``histogram2d``, ``digitize``,
``count_nonzero`` as compositions, and the cases of the order statistics and counting rules.

The composites are NumPy's own algorithms written with NumPy calls, so each
call runs through its rule: NaNs replaced by ``np.where`` (local), then
``sum``/``max``/``argmax``/``cumsum``/``dot`` along the axis (a pending sum,
reduced by one ``all_reduce`` when it is read; ``argmax`` one ``all_gather``
of (value, index) pairs; ``cumsum`` one ``exscan``).  NumPy's checks that read
values (an all-NaN slice for ``nanargmax``, weights that sum to zero, an
empty slice's warning) read a flag of the reduced slices, on which the ranks
agree as they agree on a ``LinAlgError`` (``backend.all_true``: a 4-byte
``Allreduce`` under MPI, not counted): a check along a dim that is not
reduced moves nothing.  An error check needs values (eager calls only); a
traced call leaves a warning out.  The rest of the family has rules of its own:
``median``/``percentile``/``quantile`` and their ``nan*`` twins
(:mod:`dtensor_np.propagation.selection`: a distributed selection),
``nanmax``/``nanmin``/``nanprod``/``nancumprod``
(:mod:`dtensor_np.propagation.nan_reductions`), ``nanmean``/``nanvar``/``nanstd``
(:mod:`dtensor_np.propagation.moments`: one pass, one collective), ``histogram``,
``histogram_bin_edges``, ``histogramdd``, ``bincount``, ``interp``
(:mod:`dtensor_np.propagation.binning`: local counts and one reduction).

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> a = np.array([[1.0, np.nan], [3.0, 4.0], [np.nan, 6.0]])
    >>> x = dt.distribute_tensor(a, dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> with dt.comm_counter() as c:
    ...     s = np.nansum(x, axis=0).full_tensor()
    >>> s.tolist(), c.counts["all_reduce"]
    ([4.0, 10.0], 1)
"""

from __future__ import annotations

import operator
import warnings
from typing import Any, Optional

import numpy as np

from ..graph.tracer import Tracer
from ..numpy_catalogue import Case, Refused
from ..placements import Partial, Replicate
from ..propagation.registry import register_composite
from ..runtime import backend_for

__all__ = ["CASES", "REFUSED", "nansum", "nancumsum", "nanargmax", "nanargmin",
           "average", "ptp", "cov", "corrcoef", "histogram2d", "digitize", "count_nonzero"]

_NO_VALUE = np._NoValue  # type: ignore[attr-defined]


def _inexact(a: Any) -> bool:
    return np.issubdtype(np.asarray(a).dtype if not hasattr(a, "dtype") else a.dtype, np.inexact)


def _options(**given: Any) -> dict[str, Any]:
    """The keyword arguments the caller gave (NumPy's ``_NoValue`` and ``out=None`` left out)."""
    return {k: v for k, v in given.items() if v is not _NO_VALUE and not (k == "out" and v is None)}


def _anywhere(flags: Any) -> bool:
    """Whether any of ``flags`` is True, the same answer on every rank, for NumPy's checks (an all-NaN slice, a
    count of 0): every rank reads its own block and the ranks agree with ``backend.all_true`` (one 4-byte
    ``Allreduce`` under MPI, not counted, as ranks agree on a ``LinAlgError``); a pending value is reduced first.
    So a check on a dim that is not reduced moves nothing.  A traced array has no values: the tracer's TypeError."""
    if isinstance(flags, Tracer):
        return bool(flags)
    if not hasattr(flags, "spec"):
        return bool(np.any(flags))
    if any(isinstance(p, Partial) for p in flags.placements):
        flags = flags.redistribute([Replicate() if isinstance(p, Partial) else p for p in flags.placements])
    backend = backend_for(flags.mesh)
    return not backend.all_true({r: not bool(np.any(block)) for r, block in flags.shards.items()})


def _pending(x: Any) -> bool:
    """Whether ``x`` is a DTensor with a pending reduction (a ``Partial`` placement)."""
    return hasattr(x, "spec") and not isinstance(x, Tracer) and any(isinstance(p, Partial) for p in x.placements)


def _settled(x: Any) -> Any:
    """``x`` with a pending reduction done now (one ``all_reduce``), for a value read more than once: each read of
    a pending value would reduce it again.  The values and dtype are ``x``'s."""
    return x.astype(x.dtype) if hasattr(x, "spec") else x


def _without_nan(a: Any, value: float) -> Any:
    """``a`` with its NaNs replaced (NumPy's ``_replace_nan``), and the mask of the NaNs (None: none can be)."""
    if not _inexact(a):
        return a, None
    mask = np.isnan(a)
    return np.where(mask, value, a), mask


@register_composite(np.nansum)
def nansum(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: Any = _NO_VALUE,
           initial: Any = _NO_VALUE, where: Any = _NO_VALUE) -> Any:
    """``np.nansum``: ``np.sum`` of ``a`` with NaNs as 0 (a pending sum along a sharded axis: one ``all_reduce``).

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([1.0, np.nan, 2.0]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> float(np.nansum(x))
        3.0
    """
    a, _ = _without_nan(a, 0)
    return np.sum(a, axis=axis, dtype=dtype, **_options(out=out, keepdims=keepdims, initial=initial, where=where))


@register_composite(np.nancumsum)
def nancumsum(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
    """``np.nancumsum``: ``np.cumsum`` with NaNs as 0 (along a sharded axis one ``exscan`` of the blocks' totals;
    ``axis=None`` of more than one dim flattens first: ``np.ravel`` re-cuts a row-sharded array with one
    ``rechunk``, gathers a column-sharded one).

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([1.0, np.nan, 2.0]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.nancumsum(x).full_tensor().tolist()
        [1.0, 1.0, 3.0]
    """
    a, _ = _without_nan(a, 0)
    if axis is None:
        a, axis = np.ravel(a), 0
    return np.cumsum(a, axis=axis, dtype=dtype, **_options(out=out))


def _mean(a: Any, axis: Any = None, **options: Any) -> Any:
    """``np.mean``, with NumPy's "Mean of empty slice" warning when the slices have no values (known from the
    shape: nothing is read)."""
    axes = range(a.ndim) if axis is None else (axis,) if isinstance(axis, int) else axis
    if a.size == 0 and int(np.prod([a.shape[d] for d in axes])) == 0:
        warnings.warn("Mean of empty slice", RuntimeWarning, stacklevel=3)
    return np.mean(a, axis=axis, **options)


def _nan_arg(a: Any, axis: Any, out: Any, keepdims: Any, biggest: bool) -> Any:
    """NumPy's ``nanargmax``/``nanargmin``: an all-NaN slice raises; NaNs become -inf (+inf) for ``argmax``."""
    arr, mask = _without_nan(a, -np.inf if biggest else np.inf)
    if mask is not None and mask.size and _anywhere(np.all(mask, axis=axis)):
        raise ValueError("All-NaN slice encountered")
    func = np.argmax if biggest else np.argmin
    return func(arr, axis=axis, **_options(out=out, keepdims=keepdims))


@register_composite(np.nanargmax)
def nanargmax(a: Any, axis: Any = None, out: Any = None, *, keepdims: Any = _NO_VALUE) -> Any:
    """``np.nanargmax``: ``argmax`` with NaNs as -inf (along a sharded axis one ``all_gather`` of (value, index)
    pairs) after one ``all_reduce`` of whether a slice is all NaN (NumPy's ValueError).

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([1.0, np.nan, 2.0]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> int(np.nanargmax(x))
        2
    """
    return _nan_arg(a, axis, out, keepdims, True)


@register_composite(np.nanargmin)
def nanargmin(a: Any, axis: Any = None, out: Any = None, *, keepdims: Any = _NO_VALUE) -> Any:
    """``np.nanargmin``: ``argmin`` with NaNs as +inf (see :func:`nanargmax`).

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([3.0, np.nan, 2.0]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> int(np.nanargmin(x))
        2
    """
    return _nan_arg(a, axis, out, keepdims, False)


def _axis_tuple(axis: Any, ndim: int) -> Optional[tuple[int, ...]]:
    if axis is None:
        return None
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    return tuple(np.lib.array_utils.normalize_axis_index(operator.index(ax), ndim, "axis") for ax in axes)


def _weights_like(a: Any, weights: Any, axis: Optional[tuple[int, ...]]) -> Any:
    """NumPy's ``_weights_are_valid``: weights of ``a``'s shape, or of its shape along ``axis`` made to broadcast."""
    wgt = weights if hasattr(weights, "shape") else np.asanyarray(weights)
    if tuple(a.shape) != tuple(wgt.shape):
        if axis is None:
            raise TypeError("Axis must be specified when shapes of a and weights differ.")
        if tuple(wgt.shape) != tuple(a.shape[ax] for ax in axis):
            raise ValueError("Shape of weights must be consistent with shape of a along specified axis.")
        wgt = np.transpose(wgt, tuple(np.argsort(axis)))
        wgt = np.reshape(wgt, tuple(s if ax in axis else 1 for ax, s in enumerate(a.shape)))
    return wgt


@register_composite(np.average)
def average(a: Any, axis: Any = None, weights: Any = None, returned: bool = False, *,
            keepdims: Any = _NO_VALUE) -> Any:
    """``np.average``: ``mean``, or the weighted sum over the sum of the weights (along a sharded axis one
    ``all_reduce``: of the weighted sum, both sums stacked when the weights are a DTensor sharded there too; and
    one of a flag for NumPy's ZeroDivisionError).

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([1.0, 2.0, 4.0]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> float(np.average(x, weights=[1.0, 1.0, 2.0]))
        2.75
    """
    a = a if hasattr(a, "shape") else np.asanyarray(a)
    axes = _axis_tuple(axis, a.ndim)
    options = _options(keepdims=keepdims)
    if weights is None:
        avg = _mean(a, axis=axes, **options)
        scale = avg.dtype.type(a.size / avg.size)
    else:
        wgt = _weights_like(a, weights, axes)
        dtypes = (a.dtype, wgt.dtype) + (("f8",) if issubclass(a.dtype.type, (np.integer, np.bool_)) else ())
        result_dtype = np.result_type(*dtypes)
        total = np.sum(np.multiply(a, wgt, dtype=result_dtype), axis=axes, **options)
        scale = np.sum(wgt, axis=axes, dtype=result_dtype, **options)
        if _pending(total) and _pending(scale):  # both pending sums: reduced together, by one all_reduce
            both = _settled(np.stack([total, np.broadcast_to(scale, total.shape)]))
            total, scale = both[0], both[1]
        else:
            scale = _settled(scale)
        if _anywhere(scale == 0.0):
            raise ZeroDivisionError("Weights sum to zero, can't be normalized")
        avg = total / scale
    if not returned:
        return avg
    if tuple(getattr(scale, "shape", ())) != tuple(avg.shape):
        if hasattr(scale, "spec"):
            scale = np.copy(np.broadcast_to(scale, avg.shape))
        elif hasattr(avg, "spec"):  # placed like avg without reducing a pending avg
            scale = np.full_like(avg, 0) + scale
        else:
            scale = np.broadcast_to(scale, avg.shape).copy()
    return avg, scale


@register_composite(np.ptp)
def ptp(a: Any, axis: Any = None, out: Any = None, keepdims: Any = _NO_VALUE) -> Any:
    """``np.ptp``: ``max - min`` (along a sharded axis an ``all_reduce`` of each).

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([3.0, 1.0, 7.0]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> float(np.ptp(x))
        6.0
    """
    options = _options(keepdims=keepdims)
    return np.subtract(np.max(a, axis=axis, **options), np.min(a, axis=axis, **options), **_options(out=out))


def _as_2d(m: Any, dtype: Any) -> Any:
    """``np.array(m, ndmin=2, dtype=dtype)`` without a gather: a 1-d DTensor as one row."""
    x = m.astype(dtype) if m.dtype != dtype else m
    return np.reshape(x, (1,) * (2 - x.ndim) + tuple(x.shape)) if x.ndim < 2 else x


def _observation_weights(w: Any, name: str, samples: int) -> Any:
    """``cov``'s ``fweights``/``aweights`` as floats, with NumPy's checks (each value check one agreed flag)."""
    w = w.astype(float) if hasattr(w, "spec") else np.asarray(w, dtype=float)
    if name == "fweights" and _anywhere(w != np.around(w)):
        raise TypeError("fweights must be integer")
    if w.ndim > 1:
        raise RuntimeError(f"cannot handle multidimensional {name}")
    if w.shape[0] != samples:
        raise RuntimeError(f"incompatible numbers of samples and {name}")
    if _anywhere(w < 0):
        raise ValueError(f"{name} cannot be negative")
    return w


def _weighted_dof(w_sum: Any, w: Any, aweights: Any, ddof: int) -> Any:
    """NumPy's normalisation of a weighted covariance."""
    if ddof == 0:
        return w_sum
    if aweights is None:
        return w_sum - ddof
    return w_sum - ddof * np.sum(w * aweights) / w_sum


@register_composite(np.cov)
def cov(m: Any, y: Any = None, rowvar: bool = True, bias: bool = False, ddof: Any = None, fweights: Any = None,
        aweights: Any = None, *, dtype: Any = None) -> Any:
    """``np.cov``: NumPy's two passes.  Observations sharded (rows of ``rowvar=False`` data): one ``all_reduce``
    of the means (``d`` numbers), the features x features product ``X @ X.T`` a pending sum reduced by one
    ``all_reduce`` of ``d * d`` numbers: ``X`` never moves.  Weights read one flag each for NumPy's checks.

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> a = np.array([[1.0, 2.0], [2.0, 1.0], [4.0, 5.0], [3.0, 0.0]])
        >>> x = dt.distribute_tensor(a, dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> with dt.comm_counter() as c:
        ...     s = np.cov(x, rowvar=False).full_tensor()
        >>> np.allclose(s, np.cov(a, rowvar=False)), c.counts["all_reduce"], c.total
        (True, 2, 2)
    """
    if ddof is not None and ddof != int(ddof):
        raise ValueError("ddof must be integer")
    m = m if hasattr(m, "shape") else np.asarray(m)
    if m.ndim > 2:
        raise ValueError("m has more than 2 dimensions")
    if y is not None:
        y = y if hasattr(y, "shape") else np.asarray(y)
        if y.ndim > 2:
            raise ValueError("y has more than 2 dimensions")
    if dtype is None:
        dtype = np.result_type(m.dtype, np.float64) if y is None else np.result_type(m.dtype, y.dtype, np.float64)
    dtype = np.dtype(dtype)
    X = _as_2d(m, dtype)
    if not rowvar and m.ndim != 1:
        X = X.T
    if X.shape[0] == 0:
        return np.asarray(X[:, :0], dtype=np.float64) if not hasattr(X, "spec") else X[:, :0].astype(np.float64)
    if y is not None:
        y = _as_2d(y, dtype)
        if not rowvar and y.shape[0] != 1:
            y = y.T
        X = np.concatenate((X, y), axis=0)
    if ddof is None:
        ddof = 1 if bias == 0 else 0
    w = None
    if fweights is not None:
        w = fweights = _observation_weights(fweights, "fweights", X.shape[1])
    if aweights is not None:
        aweights = _observation_weights(aweights, "aweights", X.shape[1])
        w = aweights if w is None else w * aweights
    if w is None:  # NumPy's w_sum is not used then: not asked for
        avg = np.average(X, axis=1)
        fact = X.shape[1] - ddof
    else:
        avg, w_sum = np.average(X, axis=1, weights=w, returned=True)
        fact = _weighted_dof(w_sum[0], w, aweights, ddof)
    if bool(fact <= 0):
        warnings.warn("Degrees of freedom <= 0 for slice", RuntimeWarning, stacklevel=3)
        fact = 0.0
    X = X - avg[:, None]
    X_T = X.T if w is None else (X * w).T
    c = np.dot(X, np.conj(X_T))
    c = c * np.true_divide(1, fact)
    return np.squeeze(c)


@register_composite(np.corrcoef)
def corrcoef(x: Any, y: Any = None, rowvar: bool = True, *, dtype: Any = None) -> Any:
    """``np.corrcoef``: :func:`cov`, then the diagonal's square roots (one ``all_reduce`` of ``d`` numbers more
    for row-sharded data; ``X`` never moves).

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> m = dt.DeviceMesh((2,))
        >>> u, v = (dt.distribute_tensor(np.array(s), m, [dt.Shard(0)]) for s in ([1.0, 2, 4], [2.0, 1, 5]))
        >>> with dt.comm_counter() as c:
        ...     r = np.corrcoef(u, v).full_tensor()
        >>> np.round(r, 3).tolist(), c.counts["all_reduce"]
        ([[1.0, 0.839], [0.839, 1.0]], 3)
    """
    c = np.cov(x, y, rowvar, dtype=dtype)
    if c.ndim != 2:
        return c / c
    stddev = np.sqrt(np.real(np.diagonal(c)))
    c = c / stddev[:, None]
    c = c / stddev[None, :]
    if c.dtype.kind == "c":
        real, imag = np.clip(c.real, -1, 1), np.clip(c.imag, -1, 1)
        c = np.copy(c)
        c.real[...] = real
        c.imag[...] = imag
        return c
    return np.clip(c, -1, 1)


@register_composite(np.histogram2d)
def histogram2d(x: Any, y: Any, bins: Any = 10, range: Any = None, density: Any = None, weights: Any = None) -> Any:
    """``np.histogram2d``: ``np.histogramdd`` of ``[x, y]`` (local counts and one ``all_reduce``, after one
    ``all_reduce`` of the extremes when a dim's range is not given).

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> m = dt.DeviceMesh((2,))
        >>> x = dt.distribute_tensor(np.array([0.0, 1.0, 2.0]), m, [dt.Shard(0)])
        >>> np.histogram2d(x, x, bins=2)[0].full_tensor().tolist()
        [[1.0, 0.0], [0.0, 2.0]]
    """
    if len(x) != len(y):
        raise ValueError("x and y must have the same length.")
    try:
        n = len(bins)
    except TypeError:
        n = 1
    if n not in {1, 2}:
        edges = bins if hasattr(bins, "spec") else np.asarray(bins)
        bins = [edges, edges]
    hist, edges = np.histogramdd([x, y], bins, range, density, weights)
    return hist, edges[0], edges[1]


def _host(value: Any) -> np.ndarray:
    """A small operand's values on every rank (a DTensor gathered, said by its name)."""
    if hasattr(value, "spec"):
        value = value.full_tensor()
        value = value.get() if hasattr(value, "get") else value
    return np.asarray(value)


@register_composite(np.digitize)
def digitize(x: Any, bins: Any, right: bool = False) -> Any:
    """``np.digitize``: ``np.searchsorted`` of ``x`` in ``bins`` (local: the bins are a constant; bins given as a
    sharded DTensor are gathered whole, as NumPy needs them).

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([0.5, 1.5, 3.0]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> with dt.comm_counter() as c:
        ...     i = np.digitize(x, [0.0, 1.0, 2.0])
        >>> i.full_tensor().tolist(), c.total
        ([1, 2, 3], 0)
    """
    edges = _host(bins)
    np.digitize(np.zeros(0, x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype), edges, right)  # NumPy's checks
    side = "left" if right else "right"
    if edges.size > 1 and edges[0] > edges[-1]:
        return len(edges) - np.searchsorted(edges[::-1].copy(), x, side=side)
    return np.searchsorted(edges, x, side=side)


@register_composite(np.count_nonzero)
def count_nonzero(a: Any, axis: Any = None, *, keepdims: bool = False) -> Any:
    """``np.count_nonzero``: the sum of ``a != 0`` as ``intp`` (a pending sum along a sharded axis: one
    ``all_reduce``).  With ``axis=None`` NumPy gives an ``int``; here a 0-d array.

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([[0, 1], [2, 0], [3, 4]]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.count_nonzero(x, axis=0).full_tensor().tolist()
        [2, 2]
    """
    flags = a if a.dtype == np.bool_ else a.astype(np.bool_)
    return np.sum(flags, axis=axis, dtype=np.intp, keepdims=keepdims)


# -- the catalogue's cases --------------------------------------------------------------------

def _shuffled(shape: tuple[int, ...]) -> np.ndarray:
    """Distinct exact values in no order (a selection has work to do)."""
    n = int(np.prod(shape))
    return (np.random.default_rng(0).permutation(n) / 4).reshape(shape)


def _with_nans(shape: tuple[int, ...]) -> np.ndarray:
    """Distinct exact values with a NaN in every fifth place (no slice of the cases all NaN)."""
    a = _shuffled(shape)
    a.reshape(-1)[::5] = np.nan
    return a


def _near_one(shape: tuple[int, ...]) -> np.ndarray:
    """Values near 1 with NaNs (products stay finite)."""
    a = 1 + (np.arange(int(np.prod(shape))).reshape(shape) % 7) / 64
    a.reshape(-1)[::4] = np.nan
    return a


_ORDER = dict(shape=(520, 3), untouched=1, axis=0, data=_shuffled)  # 520 rows: the selection, not a small gather
_NAN_ORDER = dict(_ORDER, data=_with_nans)
_NAN = dict(untouched=1, axis=0, data=_with_nans)
_SUMS = dict(untouched=1, axis=0, tolerance=64)

CASES = {
    "numpy.median": Case(lambda x: np.median(x, axis=0), **_ORDER),
    "numpy.percentile": Case(lambda x: np.percentile(x, [10, 50, 95], axis=0, method="nearest"), **_ORDER),
    "numpy.quantile": Case(lambda x: np.quantile(x, 0.3, axis=0, keepdims=True), **_ORDER),
    "numpy.nanmedian": Case(lambda x: np.nanmedian(x, axis=0), **_NAN_ORDER),
    "numpy.nanpercentile": Case(lambda x: np.nanpercentile(x, [25, 75], axis=0, method="midpoint"), **_NAN_ORDER),
    "numpy.nanquantile": Case(lambda x: np.nanquantile(x, 0.6, axis=0), **_NAN_ORDER),
    "numpy.nanmax": Case(lambda x: np.nanmax(x, axis=0), **_NAN),
    "numpy.nanmin": Case(lambda x: np.nanmin(x, axis=0), **_NAN),
    "numpy.nanargmax": Case(lambda x: np.nanargmax(x, axis=0), **_NAN),
    "numpy.nanargmin": Case(lambda x: np.nanargmin(x, axis=0), **_NAN),
    "numpy.nansum": Case(lambda x: np.nansum(x, axis=0), **dict(_NAN, tolerance=64)),
    "numpy.nanprod": Case(lambda x: np.nanprod(x, axis=0), untouched=1, axis=0, data=_near_one, tolerance=64),
    "numpy.nanmean": Case(lambda x: np.nanmean(x, axis=0), **dict(_NAN, tolerance=64)),
    "numpy.nanvar": Case(lambda x: np.nanvar(x, axis=0, ddof=1), **dict(_NAN, tolerance=64)),
    "numpy.nanstd": Case(lambda x: np.nanstd(x, axis=0), **dict(_NAN, tolerance=64)),
    "numpy.nancumsum": Case(lambda x: np.nancumsum(x, axis=0), **dict(_NAN, tolerance=64)),
    "numpy.nancumprod": Case(lambda x: np.nancumprod(x, axis=0), untouched=1, axis=0, data=_near_one, tolerance=64),
    "numpy.average": Case(lambda x: np.average(x, axis=0, weights=np.arange(1.0, 6.0)), **_SUMS),
    "numpy.ptp": Case(lambda x: np.ptp(x, axis=0), untouched=1, axis=0, data=_shuffled),
    "numpy.cov": Case(lambda x: np.cov(x, rowvar=False), untouched=None, axis=0, data=_shuffled, tolerance=64),
    "numpy.corrcoef": Case(lambda x: np.corrcoef(x, rowvar=False), untouched=None, axis=0, data=_shuffled,
                           tolerance=64),
    "numpy.histogram": Case(lambda x: np.histogram(x, bins=4), untouched=None, axis=0, data=_shuffled),
    "numpy.histogram_bin_edges": Case(lambda x: np.histogram_bin_edges(x, bins="fd"), untouched=None, axis=0,
                                      data=_shuffled),
    "numpy.histogram2d": Case(lambda x: np.histogram2d(x[:, 0], x[:, 1], bins=3), untouched=None, axis=0,
                              data=_shuffled),
    "numpy.histogramdd": Case(lambda x: np.histogramdd(x, bins=2, range=[(0, 5)] * 4), untouched=None, axis=0,
                              data=_shuffled),
    "numpy.bincount": Case(lambda x: np.bincount(x, minlength=3), shape=(20,), dtype="int64", untouched=None, axis=0,
                           data=lambda s: np.arange(20) * 7 % 11),
    "numpy.digitize": Case(lambda x: np.digitize(x, [0.0, 1.5, 3.0, 4.5])),
    "numpy.interp": Case(lambda x: np.interp(x, [0.0, 2.0, 6.0], [1.0, 3.0, 2.0])),
    "numpy.count_nonzero": Case(lambda x: np.count_nonzero(x > 2, axis=0), untouched=1, axis=0),
}
"""How each name of the family is called in the catalogue's tests (see :mod:`dtensor_np.numpy_catalogue`)."""

REFUSED: dict[str, Refused] = {}
"""Names of the family that take no DTensor: none."""
