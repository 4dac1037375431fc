"""Counting values into bins: ``histogram``, ``histogram_bin_edges``, ``histogramdd``, ``bincount``; ``interp``.

Local counts and one reduction: every rank counts its own values with NumPy
(the same bins on every rank, so every value falls in the bin NumPy gives it),
then one ``all_reduce`` (sum) of the counts; the results are replicated.
What the bins need from the data first:

* ``histogram`` with ``bins`` a number and no ``range``, ``histogramdd`` with
  a number of bins and no range for a dim: the smallest and largest value
  (NumPy's ``min``/``max``: a NaN wins, and NumPy's ValueError follows), one
  ``all_reduce`` (max) of two 64-bit keys per dim.  ``bins`` edges or a
  ``range``: nothing.
* ``bins`` an estimator: ``'sqrt'``, ``'sturges'``, ``'rice'`` need the count
  and the extremes; ``'fd'`` and ``'auto'`` the quartiles, by the distributed
  selection of :mod:`.selection` (exact); ``'scott'`` and ``'doane'`` the mean
  and standard deviation (and the third moment), one ``all_reduce`` each:
  summed in another order than NumPy's, so the number of bins can differ from
  NumPy's where ``(max - min) / width`` lies within rounding of an integer;
  ``'stone'`` the histograms of 1 to ``max(100, sqrt(n))`` bins, all in one
  ``all_reduce``.  With a ``range``, the values outside it are left out first
  (and their count reduced), as NumPy does.  The number of bins depends on the
  values: eager calls only.
* ``bincount``: the length of the result is agreed by one ``all_reduce`` (max)
  of the largest value (and whether one is negative), then the counts.
* ``interp``: ``xp`` and ``fp`` whole on every rank (a DTensor sharded is
  gathered; plain arrays are constants), ``x`` keeps its sharding: local.

Counts are exact; weighted sums are added in another order than NumPy's
(within the dtype's rounding).  A replicated operand issues no collective.
``bincount`` and an estimated number of bins have data-dependent shapes, and
``histogramdd`` returns a list of edges: ``dt.trace`` refuses them (TypeError).

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.array([1.0, 2.0, 2.5, 4.0, 7.0]), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> with dt.comm_counter() as c:
    ...     hist, edges = np.histogram(x, bins=3)
    >>> hist.full_tensor().tolist(), edges.full_tensor().tolist(), c.counts["all_reduce"], c.total
    ([3, 1, 1], [1.0, 3.0, 5.0, 7.0], 2, 2)
"""

from __future__ import annotations

import math
import operator
import warnings
from typing import Any, Callable, Hashable, Optional

import numpy as np

from collectives import Groups

from ..placements import Replicate, Shard
from ..sharded import SpecArg, array_operands, is_sharded
from ..spec import DTensorSpec, TensorMeta
from .common import partial_free, single_sharding
from .registry import Decision, OpRule, register
from .selection import global_extremes, order_keys, quantile_plan, key_values, select_order_statistics
from .signature_bind import named_arguments, no_more_arguments
from .whole_axes import gather_blocks, whole_plan

__all__ = ["histogram_decision", "histogramdd_decision", "bincount_decision", "interp_decision", "ESTIMATORS"]

Shards = dict[int, Any]
ESTIMATORS = ("auto", "fd", "doane", "scott", "stone", "rice", "sturges", "sqrt")
"""The ``bins`` estimators of ``np.histogram`` (all of NumPy's)."""


def _sharded_mesh_dims(spec: DTensorSpec) -> tuple[int, ...]:
    return tuple(m for m, p in enumerate(spec.placements) if isinstance(p, Shard) and spec.mesh.shape[m] > 1)


def _replicated(spec: DTensorSpec, meta: TensorMeta) -> DTensorSpec:
    return DTensorSpec(spec.mesh, (Replicate(),) * spec.mesh.ndim, meta)


def _static(value: Any) -> Any:
    """An argument by value: a DTensor (bins edges) taken whole on every rank, an array as a tuple."""
    if is_sharded(value):
        value = value.full_tensor()
        value = value.get() if hasattr(value, "get") else value
    if isinstance(value, (np.ndarray, list, tuple)) and not isinstance(value, str):
        array = np.asarray(value)
        return ("array", array.dtype.str, array.shape, array.tobytes())
    return value


def _unstatic(value: Any) -> Any:
    if isinstance(value, tuple) and value and value[0] == "array":
        return np.frombuffer(value[3], dtype=value[1]).reshape(value[2]).copy()
    return value


def _eager_only(tensors: Any, message: str) -> None:
    """A graph (spec-only stand-ins: ``dt.trace``, tensor parallelism) cannot take this call: a TypeError saying why
    (the tracer then tries NumPy's call, which says it too)."""
    if any(isinstance(t, SpecArg) for t in tensors):
        raise TypeError(message)


def _one(values: dict[int, Any]) -> Any:
    """A value every held rank has the same of (it comes from a reduction over data every group holds)."""
    return next(iter(values.values()))


def _unsigned_subtract(a: Any, b: Any) -> Any:
    """NumPy's ``_unsigned_subtract`` (``a - b`` of signed integers in their unsigned type)."""
    signed = {np.byte: np.ubyte, np.short: np.ushort, np.intc: np.uintc, np.int_: np.uint, np.longlong: np.ulonglong}
    dtype = np.result_type(a, b)
    unsigned = signed.get(dtype.type)
    if unsigned is None:
        return np.subtract(a, b, dtype=dtype)
    return np.subtract(np.asarray(a, dtype=dtype), np.asarray(b, dtype=dtype), casting="unsafe", dtype=unsigned)


# -- the data's statistics, over the ranks -----------------------------------------------

class _Values:
    """The values every rank holds (1-d), and their statistics over the groups (each a reduction)."""

    def __init__(self, backend: Any, groups: Groups, blocks: Shards) -> None:
        self.backend, self.groups, self.blocks = backend, groups, blocks
        self.dtype = np.asarray(_one(blocks)).dtype

    def _sum(self, parts: Shards) -> Any:
        return _one(self.backend.all_reduce(parts, self.groups, op="sum"))

    def size(self) -> int:
        """One ``all_reduce`` of the counts."""
        return int(self._sum({r: np.array([x.size], np.int64) for r, x in self.blocks.items()})[0])

    def extremes(self) -> tuple[Any, Any]:
        """NumPy's ``x.max()``, ``x.min()`` (one ``all_reduce`` of two keys)."""
        high, low = _one(global_extremes(self.backend, self.groups, {r: x[None] for r, x in self.blocks.items()}))
        return self.dtype.type(high[0]), self.dtype.type(low[0])

    def mean(self, n: int) -> Any:
        """``np.mean(x)`` (the sum reduced in another order)."""
        acc = np.dtype(np.float64) if self.dtype.kind in "biu" else self.dtype
        return acc.type(self._sum({r: np.sum(x, dtype=acc, keepdims=True) for r, x in self.blocks.items()})[0] / n)

    def central(self, mean: Any, power: int, scale: Any = 1) -> Any:
        """The sum of ``((x - mean) / scale) ** power`` (one ``all_reduce``)."""
        parts = {}
        for r, x in self.blocks.items():
            d = np.subtract(x, mean)
            if power == 3:
                d = np.power(np.true_divide(d, scale), 3)
            else:
                d = np.multiply(d, d)
            parts[r] = np.sum(d, keepdims=True)
        return self._sum(parts)[0]

    def std(self, n: int) -> Any:
        """``np.std(x)`` by NumPy's two passes (two ``all_reduce``)."""
        mean = self.mean(n)
        return np.sqrt(type(mean)(self.central(mean, 2) / n))

    def percentiles(self, q: list[float], n: int) -> Any:
        """``np.percentile(x, q)``: exact, by the distributed selection."""
        plan = quantile_plan(n, np.true_divide(q, 100), "linear", False)
        keys = {r: order_keys(x[None]) for r, x in self.blocks.items()}
        found, _ = select_order_statistics(self.backend, self.groups, keys,
                                           lambda counts: plan.positions[:, None].repeat(len(counts), 1),
                                           False, n, n, nan=np.dtype(self.dtype).kind == "f")
        values = key_values(_one(found), self.dtype)
        return plan.finish(values).ravel()


def _estimated_width(name: str, data: _Values, n: int, edges: tuple[Any, Any]) -> Any:
    """NumPy's ``_hist_bin_*`` estimators on the values of every rank."""
    high, low = data.extremes()
    ptp = _unsigned_subtract(high, low)
    if name == "sqrt":
        return ptp / np.sqrt(n)
    if name == "sturges":
        return ptp / (np.log2(n) + 1.0)
    if name == "rice":
        return ptp / (2.0 * n ** (1.0 / 3))
    if name == "scott":
        return (24.0 * np.pi**0.5 / n) ** (1.0 / 3.0) * data.std(n)
    if name in ("fd", "auto"):
        iqr = np.subtract(*data.percentiles([75, 25], n))
        fd = 2.0 * iqr * n ** (-1.0 / 3.0)
        if name == "fd":
            return fd
        return min(max(fd, ptp / np.sqrt(n) / 2), ptp / (np.log2(n) + 1.0))
    if name == "doane":
        if n > 2:
            sg1 = np.sqrt(6.0 * (n - 2) / ((n + 1.0) * (n + 3)))
            mean = data.mean(n)
            sigma = np.sqrt(type(mean)(data.central(mean, 2) / n))
            if sigma > 0.0:
                g1 = data.central(mean, 3, sigma) / n
                return ptp / (1.0 + np.log2(n) + np.log2(1.0 + np.absolute(g1) / sg1))
        return 0.0
    # stone: the histograms of 1 .. upper bins, all in one all_reduce
    if n <= 1 or ptp == 0:
        return 0
    upper = max(100, int(np.sqrt(n)))
    local = {r: np.concatenate([np.histogram(x, bins=b, range=edges)[0] for b in range(1, upper + 1)])
             for r, x in data.blocks.items()}
    counts = data._sum(local)
    start = 0
    best, best_j = None, None
    for nbins in range(1, upper + 1):
        p_k = counts[start:start + nbins] / n
        start += nbins
        j = (2 - (n + 1) * p_k.dot(p_k)) / (ptp / nbins)
        if best_j is None or j < best_j:
            best, best_j = nbins, j
    if best == upper:
        warnings.warn("The number of bins estimated may be suboptimal.", RuntimeWarning, stacklevel=3)
    return ptp / best


# -- histogram / histogram_bin_edges ----------------------------------------------------

def _bind_histogram(func: Callable[..., Any]) -> Callable[[tuple, dict], tuple[tuple[Any, ...], Hashable]]:
    names = ("a", "bins", "range", "density", "weights") if func is np.histogram else ("a", "bins", "range", "weights")
    name = f"numpy.{func.__name__}"

    def bind(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
        given = named_arguments(name, names, args, kwargs)
        a, weights = given.pop("a", None), given.pop("weights", None)
        bins, value_range = given.pop("bins", 10), given.pop("range", None)
        density = given.pop("density", None)
        no_more_arguments(name, given)
        a, weights = array_operands([a, weights])
        if not is_sharded(a):
            raise TypeError(f"{name}: expected an array, got {type(a).__name__}")
        if weights is not None and tuple(weights.shape) != tuple(a.shape):
            raise ValueError("weights should have the same shape as a.")
        value_range = None if value_range is None else tuple(_static(v) for v in value_range)
        tensors = (a,) if weights is None else (a, weights)
        return tensors, (func, _static(bins), value_range, bool(density), weights is not None)

    return bind


def _edges_probe(dtype: np.dtype, bins: Any, value_range: Any, weights: Optional[np.dtype]) -> np.ndarray:
    """NumPy's edges on two values (their dtype; NumPy's errors on bad arguments), with its warnings silenced."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        w = None if weights is None else np.ones(2, weights)
        return np.histogram_bin_edges(np.array([0, 1], dtype), bins=bins, range=value_range, weights=w)


def histogram_decision(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    """``histogram`` (or ``histogram_bin_edges``) of the values of every rank: see the module doc."""
    func, bins, value_range, density, weighted = key
    bins = _unstatic(bins)
    value_range = None if value_range is None else tuple(_unstatic(v) for v in value_range)
    a = partial_free(single_sharding(specs[0]))
    w = None if not weighted else DTensorSpec(a.mesh, a.placements, specs[1].tensor_meta)
    estimated = isinstance(bins, str)
    data_dtype = np.dtype(np.uint8) if a.dtype == np.bool_ else a.dtype
    edges = _edges_probe(data_dtype, bins if not estimated else 1, value_range, None if w is None else w.dtype)
    if estimated and bins not in ESTIMATORS:
        raise ValueError(f"{bins!r} is not a valid estimator for `bins`")
    if estimated and weighted:
        raise TypeError("Automated estimation of the number of bins is not supported for weighted data")
    ntype = np.dtype(np.float64) if density else np.dtype(np.intp) if w is None else w.dtype
    nbins = len(edges) - 1
    metas = [TensorMeta((nbins + 1,), edges.dtype)]
    if func is np.histogram:
        metas.insert(0, TensorMeta((nbins,), ntype))
    outs = tuple(_replicated(a, m) for m in metas)
    mesh_dims = _sharded_mesh_dims(a)
    groups = a.mesh.groups(mesh_dims) if mesh_dims else None
    counting = func is np.histogram
    size = math.prod(a.shape)

    def local_bins(backend: Any, blocks: Shards) -> tuple[Any, Any]:
        """The ``bins`` and ``range`` every rank passes NumPy so that its bins are those of the whole array."""
        if groups is None or not (estimated or np.ndim(bins) == 0):
            return bins, value_range
        data = _Values(backend, groups, blocks)
        if value_range is None:
            if size == 0:
                return (1 if estimated else bins), None
            high, low = data.extremes()
            np.histogram_bin_edges(np.array([low, high]), bins=1)  # NumPy's ValueError for a non-finite range
            outer = (low, high)
        else:
            outer = value_range
        if not estimated:
            return bins, outer
        first, last = _outer_edges(outer)
        n = size
        if value_range is not None:
            data = _Values(backend, groups, {r: x[(x >= first) & (x <= last)] for r, x in blocks.items()})
            n = data.size()
        if n == 0:
            return 1, outer
        width = _estimated_width(bins, data, n, (first, last))
        if width:
            if np.issubdtype(data_dtype, np.integer) and width < 1:
                width = 1
            return int(np.ceil(_unsigned_subtract(last, first) / width)), outer
        return 1, outer

    def program(backend: Any, shards: Shards, weights: Optional[Shards] = None) -> Any:
        """Extremes (one ``all_reduce``), an estimator's statistics, the local counts and one ``all_reduce``."""
        if a.dtype == np.bool_:
            warnings.warn(f"Converting input from {a.dtype} to {np.uint8} for compatibility.", RuntimeWarning,
                          stacklevel=5)
        blocks = {r: np.asarray(x).reshape(-1).astype(data_dtype, copy=False) for r, x in shards.items()}
        flat_weights = None if weights is None else {r: np.asarray(v).reshape(-1) for r, v in weights.items()}
        local_bins_, local_range = local_bins(backend, blocks)
        counts, edges = {}, {}
        for r, x in blocks.items():
            wr = None if flat_weights is None else flat_weights[r]
            if counting:
                counts[r], edges[r] = np.histogram(x, bins=local_bins_, range=local_range, weights=wr)
            else:
                edges[r] = np.histogram_bin_edges(x if groups is None else np.zeros(0, x.dtype), bins=local_bins_,
                                                  range=local_range, weights=wr)
        if not counting:
            return edges
        if groups is not None:
            counts = backend.all_reduce(counts, groups, op="sum")
        if density:
            counts = {r: n / np.array(np.diff(edges[r]), float) / n.sum() for r, n in counts.items()}
        return counts, edges

    inputs = (a,) if w is None else (a, w)
    return Decision(inputs, outs, None, multiple_outputs=counting, program=program, data_dependent=estimated)


def _outer_edges(outer: tuple[Any, Any]) -> tuple[Any, Any]:
    first, last = outer
    if first == last:
        first, last = first - 0.5, last + 0.5
    return first, last


for _func in (np.histogram, np.histogram_bin_edges):
    register(_func)(OpRule(_func.__name__, _bind_histogram(_func), histogram_decision))


# -- histogramdd ----------------------------------------------------------------------

def _bind_histogramdd(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    given = named_arguments("numpy.histogramdd", ("sample", "bins", "range", "density", "weights"), args, kwargs)
    sample, weights = given.pop("sample", None), given.pop("weights", None)
    bins, value_range, density = given.pop("bins", 10), given.pop("range", None), given.pop("density", None)
    no_more_arguments("numpy.histogramdd", given)
    columns = not hasattr(sample, "shape")
    tensors = array_operands(list(sample) if columns else [sample]) + ([] if weights is None else
                                                                      array_operands([sample if not columns
                                                                                      else sample[0], weights])[1:])
    if not all(is_sharded(t) for t in tensors):
        raise TypeError("numpy.histogramdd: expected arrays for the sample and weights")
    _eager_only(tensors, "numpy.histogramdd returns a list of edges, which a graph cannot hold: call it eagerly on "
                         "DTensors, outside dt.trace")
    if not columns and tensors[0].ndim > 2:
        raise ValueError(f"numpy.histogramdd on DTensors: expected a sample of shape (N, D), got {tensors[0].shape}")
    if not columns and tensors[0].ndim < 2:
        columns = True
    if columns and len({tuple(t.shape) for t in tensors[:len(tensors) - (weights is not None)]}) > 1:
        raise ValueError("all the input array dimensions except for the concatenation axis must match exactly")
    ragged = isinstance(bins, (list, tuple)) and any(np.ndim(b) for b in bins)
    static_bins = tuple(_static(b) for b in bins) if ragged else _static(bins)
    static_range = None if value_range is None else tuple(
        None if r is None else tuple(_static(v) for v in r) for r in value_range)
    return tuple(tensors), (columns, static_bins, static_range, bool(density), weights is not None)


def _unstatic_bins(bins: Any) -> Any:
    if isinstance(bins, tuple) and bins and not isinstance(bins[0], str):
        return [_unstatic(b) for b in bins]
    return _unstatic(bins)


def histogramdd_decision(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    """``histogramdd`` of the points of every rank: the extremes of the dims that need them (one ``all_reduce``),
    NumPy's edges from them on every rank, the local counts and one ``all_reduce``."""
    columns, bins, value_range, density, weighted = key
    bins = _unstatic_bins(bins)
    coords = specs[:len(specs) - weighted]
    first = partial_free(single_sharding(coords[0]))
    gathered: tuple[int, ...] = ()
    if columns:
        dims = len(coords)
        inputs = tuple(DTensorSpec(first.mesh, first.placements, c.tensor_meta) for c in coords)
        dtype = np.result_type(*[c.dtype for c in coords])
    else:
        dims = first.shape[1]
        first, gathered = whole_plan(first, (1,))  # whole points: the dim of coordinates moved or gathered
        inputs = (first,)
        dtype = first.dtype
    n_points = first.shape[0]
    if weighted:
        w = specs[-1]
        if w.shape != (n_points,):
            raise ValueError(f"numpy.histogramdd: expected weights of shape ({n_points},), got {w.shape}")
        rows = tuple(p if isinstance(p, Shard) and p.dim == 0 else Replicate() for p in first.placements)
        inputs += (DTensorSpec(first.mesh, rows, w.tensor_meta),)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        hist, edges = np.histogramdd(np.zeros((2, dims), dtype), bins=bins, range=value_range)
    outs = (_replicated(first, TensorMeta(hist.shape, np.dtype(np.float64))),) + tuple(
        _replicated(first, TensorMeta(e.shape, e.dtype)) for e in edges)
    mesh_dims = tuple(m for m in _sharded_mesh_dims(first) if m not in gathered)
    groups = first.mesh.groups(mesh_dims) if mesh_dims and n_points else None
    per_dim = list(bins) if hasattr(bins, "__len__") else [bins] * dims
    need = [i for i in range(dims) if np.ndim(per_dim[i]) == 0 and (value_range is None or value_range[i] is None)]

    def program(backend: Any, *shards: Shards) -> Any:
        """Extremes of the dims without a range (one ``all_reduce``), local counts, one ``all_reduce``."""
        weights = shards[-1] if weighted else None
        points = shards[:len(shards) - weighted]
        if columns:
            blocks = {r: np.stack([np.asarray(p[r]).astype(dtype, copy=False) for p in points], axis=1)
                      for r in points[0]}
        else:
            blocks = {r: np.asarray(x) for r, x in gather_blocks(backend, first, points[0], gathered).items()}
        local_bins, local_range = bins, value_range
        if groups is not None:  # NumPy's edges (and errors) from each dim's extremes alone
            corners = np.zeros((2, dims), dtype)
            if need:
                high, low = _one(global_extremes(backend, groups, {r: x[:, need].T for r, x in blocks.items()}))
                corners[0, need], corners[1, need] = low, high
            local_bins, local_range = np.histogramdd(corners, bins=bins, range=value_range)[1], None
        hists, edges = {}, None
        for r, x in blocks.items():
            hists[r], edges = np.histogramdd(x, bins=local_bins, range=local_range,
                                             weights=None if weights is None else np.asarray(weights[r]))
        if groups is not None:
            hists = backend.all_reduce(hists, groups, op="sum")
        if density:
            hists = {r: _density(h, edges) for r, h in hists.items()}
        return (hists,) + tuple({r: e for r in hists} for e in edges)

    return Decision(inputs, outs, None, multiple_outputs=True, program=program,
                    result_type=lambda hist, *e: (hist, list(e)))


def _density(hist: np.ndarray, edges: list) -> np.ndarray:
    """NumPy's ``histogramdd(density=True)`` from the counts."""
    s = hist.sum()
    for i, e in enumerate(edges):
        shape = np.ones(len(edges), int)
        shape[i] = len(e) - 1
        hist = hist / np.diff(e).reshape(shape)
    hist /= s
    return hist


register(np.histogramdd)(OpRule("histogramdd", _bind_histogramdd, histogramdd_decision))


# -- bincount --------------------------------------------------------------------------

def _bind_bincount(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    given = named_arguments("numpy.bincount", ("x", "weights", "minlength"), args, kwargs)
    x, weights, minlength = given.pop("x", None), given.pop("weights", None), given.pop("minlength", 0)
    no_more_arguments("numpy.bincount", given)
    x, weights = array_operands([x, weights])
    if not is_sharded(x):
        raise TypeError(f"numpy.bincount: expected an array, got {type(x).__name__}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.bincount(np.zeros((1,) * x.ndim, x.dtype), None if weights is None else np.ones((1,) * weights.ndim,
                                                                                             weights.dtype),
                    minlength=minlength)  # NumPy's TypeError/ValueError for a bad dtype, ndim or minlength
    if weights is not None and tuple(weights.shape) != tuple(x.shape):
        raise ValueError("The weights and list don't have the same length.")
    return (x,) if weights is None else (x, weights), operator.index(minlength)


def bincount_decision(specs: tuple[DTensorSpec, ...], minlength: int) -> Decision:
    """``bincount``: the length agreed by one ``all_reduce`` (max) of every rank's largest value and whether one
    is negative, the local counts at that length, one ``all_reduce`` (sum); the result is replicated."""
    x = partial_free(single_sharding(specs[0]))
    inputs = (x,) if len(specs) == 1 else (x, DTensorSpec(x.mesh, x.placements, specs[1].tensor_meta))
    # NumPy counts an empty x as intp even with weights
    dtype = np.dtype(np.intp) if len(specs) == 1 or math.prod(x.shape) == 0 else np.dtype(np.float64)
    out = _replicated(x, TensorMeta((minlength,), dtype))
    mesh_dims = _sharded_mesh_dims(x)
    groups = x.mesh.groups(mesh_dims) if mesh_dims else None

    def program(backend: Any, shards: Shards, weights: Optional[Shards] = None) -> Shards:
        """One ``all_reduce`` (max) of two ints, the local counts, one ``all_reduce`` (sum)."""
        length = minlength
        if groups is not None:
            tops = {}
            for r, v in shards.items():
                v = np.asarray(v).astype(np.intp, casting="safe")
                tops[r] = np.array([v.max(initial=-1), int((v < 0).any())], np.int64)
            top = _one(backend.all_reduce(tops, groups, op="max"))
            if top[1]:
                raise ValueError("'list' argument must have no negative elements")
            length = max(int(top[0]) + 1, minlength)
        counts = {r: np.bincount(np.asarray(v), None if weights is None else np.asarray(weights[r]),
                                 minlength=length).astype(dtype, copy=False) for r, v in shards.items()}
        return counts if groups is None else backend.all_reduce(counts, groups, op="sum")

    return Decision(inputs, (out,), None, program=program, data_dependent=True)


register(np.bincount)(OpRule("bincount", _bind_bincount, bincount_decision))


# -- interp ------------------------------------------------------------------------------

def _bind_interp(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    given = named_arguments("numpy.interp", ("x", "xp", "fp", "left", "right", "period"), args, kwargs)
    x, xp, fp = (given.pop(k, None) for k in ("x", "xp", "fp"))
    options = tuple((k, given.pop(k, None)) for k in ("left", "right", "period"))
    no_more_arguments("numpy.interp", given)
    if any(is_sharded(v) or np.ndim(v) for _, v in options):
        raise TypeError("numpy.interp on DTensors: expected left, right and period as numbers")
    x, xp, fp = array_operands([x, xp, fp])
    return (x, xp, fp), options


def interp_decision(specs: tuple[DTensorSpec, ...], options: Any) -> Decision:
    """``interp``: ``xp`` and ``fp`` whole on every rank (gathered when sharded), ``x`` as it is: local."""
    x, xp, fp = (partial_free(single_sharding(s)) for s in specs)
    xp, fp = (s.with_placements((Replicate(),) * s.mesh.ndim) for s in (xp, fp))
    kwargs = dict(options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        probe = np.interp(np.zeros(1, x.dtype), np.zeros(xp.shape, xp.dtype), np.zeros(fp.shape, fp.dtype),
                          **kwargs)  # NumPy's errors (lengths, dims, dtypes)
    out = DTensorSpec(x.mesh, x.placements, TensorMeta(x.shape, probe.dtype), x.shard_order)

    def local(rank: int, v: Any, table_x: Any, table_f: Any) -> Any:
        return np.asarray(np.interp(v, table_x, table_f, **kwargs))

    return Decision((x, xp, fp), (out,), local)


register(np.interp)(OpRule("interp", _bind_interp, interp_decision))
