"""Order statistics: ``median``, ``percentile``, ``quantile`` and ``nanmedian``, ``nanpercentile``, ``nanquantile``.

* Reduced axes not sharded: every rank calls NumPy's function on its block;
  nothing moves.  Kept dims keep their sharding (after ``q``'s dims).
* A sharded reduced axis: a **distributed radix selection**
  (:func:`select_order_statistics`), never the array.  Every value becomes an
  order-preserving 64-bit key (NaN last, as NumPy sorts); one ``all_reduce``
  (max) of each slice's smallest and largest key; then rounds of one
  ``all_reduce`` (sum) of the counts of 256 equal buckets of the key range
  that holds each wanted order statistic (the ``nan*`` functions add each
  slice's count of numbers to the first round).  Every round narrows the
  range 256 times, so 64-bit keys take at most 8 rounds; once the keys left
  in every range are so few that sending them costs no more than a round of
  counts (``k`` ranks x at most ``256 / k`` keys), one ``all_gather`` of them
  ends the search.  Bytes per rank: 16 per slice, then per round 2 KiB per
  distinct range (one or two per wanted quantile: the neighbours of NumPy's
  virtual index share a range until the last rounds).  Every rank then does
  NumPy's own arithmetic (``_lerp``, the mean of the middle values) on the
  selected values, so the results are NumPy's bit for bit.  A mesh whose
  other dims split the slices into several groups agrees on when to stop
  with ``backend.all_true`` (one 4-byte ``Allreduce``, not counted).
* Slices of at most 2 KiB (``n * itemsize <= 256 * 8``: fewer bytes than one
  round of counts), ``weights=`` (NumPy sums them in sorted order) and complex
  ``median`` (ordered lexicographically): the reduced axes are made whole
  (:func:`~.whole_axes.whole_plan`: the sharding moves to a kept dim with one
  ``all_to_all``, or the reduced dims are gathered with one ``all_gather``
  where no kept dim can take it) and NumPy runs on whole slices.

One difference from NumPy: ``nanquantile``/``nanpercentile`` along an axis of
float16/float32 data with an array ``q`` give float64, as NumPy does, except
that NumPy gives the data's dtype when the first slice is all NaN (its
``apply_along_axis`` takes the dtype of the first slice's result).

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> a = np.arange(4000.0)[::-1]
    >>> x = dt.distribute_tensor(a, dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> with dt.comm_counter() as c:
    ...     m = np.median(x)
    >>> float(m.full_tensor()), c.counts["all_gather"], c.counts["all_reduce"] <= 4
    (1999.5, 1, True)
"""

from __future__ import annotations

import inspect
import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Optional, Sequence

import numpy as np

from collectives import Groups

from ..errors import ShardingError
from ..placements import Placement, Replicate, Shard
from ..sharded import array_operands, is_sharded
from ..spec import DTensorSpec, TensorMeta
from .common import axis_tuple, partial_free, replicate_mesh_dims, single_sharding
from .registry import Decision, OpRule, register
from .whole_axes import gather_blocks, whole_plan

__all__ = ["BUCKETS", "order_keys", "key_values", "select_order_statistics", "quantile_decision",
           "global_extremes", "quantile_plan"]

BUCKETS = 256
"""Buckets per round of the radix selection (a round's counts: 2 KiB per range)."""

_TOP = np.uint64(2**64 - 1)  # the key of NaN (after every number)
_SIGN = np.uint64(1 << 63)
Shards = dict[int, Any]


# -- keys ---------------------------------------------------------------------------

def order_keys(x: np.ndarray) -> np.ndarray:
    """Unsigned 64-bit keys in the order NumPy sorts the values (every NaN last, as one key).

    Example:
        >>> k = order_keys(np.array([2.0, -1.0, np.nan, -0.5, np.inf]))
        >>> np.argsort(k).tolist(), key_values(k, np.dtype("f8")).tolist()[:2]
        ([1, 3, 0, 4, 2], [2.0, -1.0])
    """
    kind = x.dtype.kind
    if kind == "f":
        f = np.asarray(x, dtype=np.float64)
        bits = f.view(np.uint64)
        keys = np.where(bits >> np.uint64(63) != 0, ~bits, bits | _SIGN)
        keys[np.isnan(f)] = _TOP
        return keys
    if kind in "ub":
        return np.asarray(x).astype(np.uint64)
    return np.asarray(x).astype(np.int64).view(np.uint64) ^ _SIGN


def key_values(keys: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The values of ``keys`` (:func:`order_keys`) in ``dtype``.

    Example:
        >>> key_values(order_keys(np.array([-3, 7], np.int8)), np.int8).tolist()
        [-3, 7]
    """
    dtype = np.dtype(dtype)
    keys = np.asarray(keys, dtype=np.uint64)
    if dtype.kind == "f":
        bits = np.where(keys >> np.uint64(63) != 0, keys ^ _SIGN, ~keys)
        return bits.view(np.float64).astype(dtype)
    if dtype.kind in "ub":
        return keys.astype(dtype)
    return (keys ^ _SIGN).view(np.int64).astype(dtype)


# -- the distributed selection ---------------------------------------------------------

def _agree(backend: Any, groups: Groups, flags: dict[int, bool]) -> bool:
    """Whether every flag is True on every rank: the flags themselves when one group holds the world (its members
    hold the same), else ``backend.all_true`` (one 4-byte ``Allreduce`` under MPI)."""
    if len(groups) == 1:
        return all(flags.values())
    return backend.all_true(flags)


@dataclass
class _States:
    """One rank's search: for every wanted order statistic ``(t, j)`` (``t``-th of column ``j``) the key range
    ``[lo, hi]`` that holds it, the count of the column's keys below ``lo`` and in the range, and the result."""

    lo: np.ndarray
    hi: np.ndarray
    below: np.ndarray
    count: np.ndarray
    done: np.ndarray
    value: np.ndarray

    def leaders(self) -> np.ndarray:
        """The distinct ranges still searched: a target whose range is its predecessor's shares its counts."""
        active = ~self.done
        lead = active.copy()
        lead[1:] &= ~(active[:-1] & (self.lo[1:] == self.lo[:-1]) & (self.hi[1:] == self.hi[:-1]))
        return lead

    def leader_of(self, lead: np.ndarray) -> np.ndarray:
        """For every target, the index (in ``np.nonzero(lead)`` order) of the leader whose range it shares."""
        index = np.full(lead.shape, -1, np.int64)
        index[lead] = np.arange(int(lead.sum()))
        for t in range(1, lead.shape[0]):
            follow = ~lead[t] & ~self.done[t]
            index[t, follow] = index[t - 1, follow]
        return index


def _local_counts(keys: np.ndarray, js: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Counts of the keys of columns ``js`` in the ``BUCKETS`` equal buckets of ``[lo, hi]`` (one row per range)."""
    if len(js) == 0 or keys.shape[1] == 0:
        return np.zeros((len(js), BUCKETS), np.int64)
    rows = keys[js]
    inside = (rows >= lo[:, None]) & (rows <= hi[:, None])
    width = (hi - lo) // np.uint64(BUCKETS) + np.uint64(1)
    with np.errstate(over="ignore"):
        bucket = ((rows - lo[:, None]) // width[:, None]).astype(np.int64)
    flat = (np.arange(len(js), dtype=np.int64)[:, None] * BUCKETS + np.where(inside, bucket, 0))[inside]
    return np.bincount(flat, minlength=len(js) * BUCKETS).reshape(len(js), BUCKETS)


def _narrow(st: _States, lead: np.ndarray, counts: np.ndarray, positions: np.ndarray) -> None:
    """Move every searched target into the bucket (of its leader's counts) that holds its position."""
    ts, js = np.nonzero(lead)
    width = (st.hi[ts, js] - st.lo[ts, js]) // np.uint64(BUCKETS) + np.uint64(1)
    cumulative = np.cumsum(counts, axis=1)
    owner = st.leader_of(lead)
    ti, ji = np.nonzero(~st.done)
    s = owner[ti, ji]
    rel = positions[ti, ji] - st.below[ti, ji]
    b = np.minimum((cumulative[s] <= rel[:, None]).sum(axis=1), BUCKETS - 1)
    before = np.where(b > 0, cumulative[s, np.maximum(b - 1, 0)], 0)
    lo, hi, w = st.lo[ti, ji], st.hi[ti, ji], width[s]
    ub = b.astype(np.uint64)
    new_lo = lo + ub * w
    new_hi = lo + np.minimum((ub + np.uint64(1)) * w - np.uint64(1), hi - lo)
    st.below[ti, ji] += before
    st.count[ti, ji] = counts[s, b]
    st.lo[ti, ji], st.hi[ti, ji] = new_lo, new_hi
    settled = new_lo == new_hi
    st.value[ti[settled], ji[settled]] = new_lo[settled]
    st.done[ti[settled], ji[settled]] = True


def _gather_candidates(backend: Any, groups: Groups, keys: Shards, states: dict[int, _States],
                       positions: Shards, longest: int) -> None:
    """One ``all_gather`` of the keys left in every searched range (each rank pads its share to
    ``min(count, longest)``), then every rank sorts them and reads its targets."""
    k = len(groups[0])
    slots, layout = {}, {}
    for r, st in states.items():
        lead = st.leaders()
        ts, js = np.nonzero(lead)
        lo, hi = st.lo[ts, js], st.hi[ts, js]
        size = np.minimum(st.count[ts, js], longest).astype(np.int64)
        offsets = np.concatenate([[0], np.cumsum(size)])
        flat = np.full(int(offsets[-1]), _TOP, np.uint64)
        if len(js) and keys[r].shape[1]:
            rows = keys[r][js]
            inside = (rows >= lo[:, None]) & (rows <= hi[:, None])
            place = offsets[:-1, None] + np.cumsum(inside, axis=1) - 1
            flat[place[inside]] = rows[inside]
        slots[r] = flat
        layout[r] = (lead, offsets)
    gathered = backend.all_gather(slots, groups, axis=0)
    for r, st in states.items():
        lead, offsets = layout[r]
        table = np.asarray(gathered[r]).reshape(k, -1).T.reshape(-1)  # slot by slot: each range's keys together
        segment = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets) * k)
        ordered = table[np.lexsort((table, segment))]
        owner = st.leader_of(lead)
        ti, ji = np.nonzero(~st.done)
        s = owner[ti, ji]
        st.value[ti, ji] = ordered[offsets[s] * k + positions[r][ti, ji] - st.below[ti, ji]]
        st.done[ti, ji] = True


def select_order_statistics(backend: Any, groups: Groups, keys: Shards, wanted: Callable[[np.ndarray], np.ndarray],
                            skip_nan: bool, longest: int, length: int, *, nan: bool = True) -> tuple[Shards, Shards]:
    """The keys at given sorted positions of every column, over the ranks of each group.

    ``keys[r]`` is rank ``r``'s ``(m, n_r)`` array of :func:`order_keys` (column ``j``: its part of slice ``j``;
    the members of a group hold the same columns).  ``wanted(counts)`` gives, from every column's count of keys
    (its numbers only with ``skip_nan``), the ``(T, m)`` positions to find, ascending in each column.  Returns
    ``({rank: (T, m) keys}, {rank: counts})``; a column with a NaN (without ``skip_nan``) gets the NaN key
    everywhere, an empty one zeros.  ``longest``: the most keys one rank holds of a column; ``length``: a
    column's keys over the group.  ``nan``: whether the top key is NaN's (float data); integer data pass False,
    their largest value's key being the top key too.

    Collectives: one ``all_reduce`` (max) of 2 keys per column; ``all_reduce`` (sum) rounds of 256 counts per
    distinct range (with ``skip_nan`` the first also carries the counts); one final ``all_gather`` of the few keys
    left.

    Example:
        >>> from collectives import SimulatedBackend, comm_counter
        >>> keys = {0: order_keys(np.array([[5.0, 1.0, 9.0]])), 1: order_keys(np.array([[3.0, 7.0]]))}
        >>> with comm_counter() as c:
        ...     found, counts = select_order_statistics(SimulatedBackend(2), ((0, 1),), keys,
        ...                                             lambda n: np.array([[0], [2]]), False, 3, 5)
        >>> key_values(found[1], np.float64).ravel().tolist(), counts[0].tolist(), c  # few keys: gathered at once
        ([1.0, 5.0], [5], CommCounter({'all_gather': 1, 'all_reduce': 1}))
    """
    k = len(groups[0])
    extremes = {}
    for r, x in keys.items():
        finite = np.where(x == _TOP, np.uint64(0), x) if skip_nan else x
        extremes[r] = np.stack([np.max(finite, axis=1, initial=0), ~np.min(x, axis=1, initial=_TOP)])
    extremes = backend.all_reduce(extremes, groups, op="max")
    states: dict[int, _States] = {}
    positions: Shards = {}
    counts: Shards = {}
    for r, x in keys.items():
        high, low = np.asarray(extremes[r][0]), ~np.asarray(extremes[r][1])
        m = x.shape[0]
        n = np.full(m, -1 if skip_nan else length, np.int64)
        counts[r] = n
        nan_column = (high == _TOP) if nan and not skip_nan else np.zeros(m, bool)
        done = nan_column | (low >= high)
        value = np.where(nan_column, _TOP, low) if not skip_nan else np.where(low > high, np.uint64(0), low)
        states[r] = _States(low[None].copy(), high[None].copy(), np.zeros((1, m), np.int64), n[None].copy(),
                            done[None].copy(), value[None].copy())
        if not skip_nan:
            positions[r] = wanted(n)
            states[r] = _expand(states[r], positions[r].shape[0])
    first = skip_nan
    while True:
        leads = {r: st.leaders() for r, st in states.items()}
        if not first:
            if _agree(backend, groups, {r: not lead.any() for r, lead in leads.items()}):
                break
            cheap = {r: bool(np.all(k * np.minimum(st.count[leads[r]], longest) <= BUCKETS))
                     for r, st in states.items()}
            if _agree(backend, groups, cheap):
                _gather_candidates(backend, groups, keys, states, positions, longest)
                break
        payload = {}
        for r, st in states.items():
            ts, js = np.nonzero(leads[r])
            local = _local_counts(keys[r], js, st.lo[ts, js], st.hi[ts, js]).reshape(-1)
            if first:
                numbers = (keys[r] != _TOP).sum(axis=1, dtype=np.int64)
                local = np.concatenate([local, numbers])
            payload[r] = local
        summed = backend.all_reduce(payload, groups, op="sum")
        for r, st in states.items():
            total = np.asarray(summed[r])
            lead = leads[r]
            if first:
                m = keys[r].shape[0]
                counts[r] = total[-m:].astype(np.int64)
                total = total[:-m]
                st.count[0] = counts[r]
                empty = counts[r] == 0
                st.done[0, empty] = True
                st.value[0, empty] = 0
                positions[r] = wanted(counts[r])
                lead = np.broadcast_to(lead, (positions[r].shape[0],) + lead.shape[1:]).copy()
                lead[1:] = False
                st = states[r] = _expand(st, positions[r].shape[0])
            _narrow(st, lead, total.reshape(-1, BUCKETS), positions[r])
        first = False
    return {r: st.value for r, st in states.items()}, counts


def _expand(st: _States, rows: int) -> _States:
    """The one-row initial states repeated for ``rows`` targets per column."""
    return _States(*(np.repeat(getattr(st, f), rows, axis=0) for f in ("lo", "hi", "below", "count", "done", "value")))


# -- NumPy's arithmetic on the selected values -------------------------------------------
# The functions below are NumPy 2's (numpy/lib/_function_base_impl.py), on the values at the wanted positions of a
# slice of n numbers instead of on the partitioned slice: the same operations in the same dtypes, so the same bits.

def _discrete_to_boundaries(index: np.ndarray, condition: Callable[[Any, Any], Any]) -> np.ndarray:
    previous = np.floor(index)
    gamma = index - previous
    out = np.full(index.shape, previous + 1)
    np.copyto(out, previous, where=condition(gamma, index), casting="unsafe")
    out = out.astype(np.intp)
    out[out < 0] = 0
    return out


def _virtual_index(alpha: float, beta: float) -> Callable[[int, np.ndarray], Any]:
    return lambda n, q: n * q + (alpha + q * (1 - alpha - beta)) - 1


def _gamma_mask(default: float, conditioned: float, where: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def fix(gamma: Any, index: Any) -> Any:
        out = np.full(gamma.shape, default)
        np.copyto(out, conditioned, where=where(gamma, index), casting="unsafe")
        return out

    return fix


_KEEP = lambda gamma, index: gamma  # noqa: E731
_METHODS: dict[str, tuple[Callable[[int, np.ndarray], Any], Optional[Callable[[Any, Any], Any]]]] = {
    "inverted_cdf": (lambda n, q: _discrete_to_boundaries(n * q - 1, lambda g, _: g == 0), None),
    "averaged_inverted_cdf": (lambda n, q: n * q - 1, _gamma_mask(1.0, 0.5, lambda g, _: g == 0)),
    "closest_observation": (lambda n, q: _discrete_to_boundaries(
        n * q - 1 - 0.5, lambda g, i: (g == 0) & (np.floor(i) % 2 == 1)), None),
    "interpolated_inverted_cdf": (_virtual_index(0, 1), _KEEP),
    "hazen": (_virtual_index(0.5, 0.5), _KEEP),
    "weibull": (_virtual_index(0, 0), _KEEP),
    "linear": (lambda n, q: (n - 1) * q, _KEEP),
    "median_unbiased": (_virtual_index(1 / 3.0, 1 / 3.0), _KEEP),
    "normal_unbiased": (_virtual_index(3 / 8.0, 3 / 8.0), _KEEP),
    "lower": (lambda n, q: np.floor((n - 1) * q).astype(np.intp), None),
    "higher": (lambda n, q: np.ceil((n - 1) * q).astype(np.intp), None),
    "midpoint": (lambda n, q: 0.5 * (np.floor((n - 1) * q) + np.ceil((n - 1) * q)),
                 _gamma_mask(0.5, 0.0, lambda g, i: i % 1 == 0)),
    "nearest": (lambda n, q: np.around((n - 1) * q).astype(np.intp), None),
}


def _lerp(a: np.ndarray, b: np.ndarray, t: Any) -> np.ndarray:
    diff_b_a = b - a
    lerp = np.add(a, diff_b_a * t, out=...)
    np.subtract(b, diff_b_a * (1 - t), out=lerp, where=t >= 0.5, casting="unsafe", dtype=type(lerp.dtype))
    return lerp


@dataclass(frozen=True)
class _Plan:
    """What a slice of ``n`` numbers needs: the sorted ``positions`` to select, and ``finish(values)`` that turns
    their values ``(len(positions), m)`` into the results ``q.shape + (m,)``."""

    positions: np.ndarray
    finish: Callable[[np.ndarray], np.ndarray]


def _rows(positions: np.ndarray, index: np.ndarray) -> np.ndarray:
    return np.searchsorted(positions, index)


def quantile_plan(n: int, q: np.ndarray, method: str, weak_q: bool) -> _Plan:
    """NumPy's ``_quantile`` (unweighted) for a slice of ``n`` numbers: the positions to select and the arithmetic.

    Example:
        >>> plan = quantile_plan(5, np.array([0.5, 0.9]), "linear", False)
        >>> plan.positions.tolist(), plan.finish(np.array([[2.0], [4.0], [5.0]])).ravel().tolist()
        ([2, 3, 4], [2.0, 4.6])
    """
    virtual, fix_gamma = _METHODS[method]
    index = np.asanyarray(virtual(n, q))
    whole = fix_gamma is None or (method == "linear" and np.issubdtype(index.dtype, np.integer))
    if whole:
        taken = np.asarray(index, dtype=np.intp) % n
        positions = np.unique(taken)
        return _Plan(positions, lambda v: v[_rows(positions, taken)])
    previous = np.floor(index)
    following = previous + 1
    above = index >= n - 1
    previous = np.where(above, -1, np.where(index < 0, 0, previous)).astype(np.intp)
    following = np.where(above, -1, np.where(index < 0, 0, following)).astype(np.intp)
    gamma = np.asanyarray(fix_gamma(np.asanyarray(index - previous), index), dtype=index.dtype)
    gamma = float(gamma) if weak_q else gamma.reshape(index.shape + (1,))
    lower, upper = previous % n, following % n
    positions = np.unique(np.concatenate([lower.ravel(), upper.ravel()]))
    return _Plan(positions, lambda v: _lerp(v[_rows(positions, lower)], v[_rows(positions, upper)], gamma))


def _middle(n: int) -> np.ndarray:
    return np.array([n // 2 - 1, n // 2] if n % 2 == 0 else [(n - 1) // 2], np.int64)


def _median_plan(n: int, masked: bool) -> _Plan:
    """NumPy's ``_median`` (the mean of the middle values), or ``np.ma.median``'s ``(low + high) / 2`` in the
    dtype (``masked``: ``nanmedian`` of short slices along one axis of an array of 2 dims or more)."""
    positions = _middle(n)
    if not masked:
        return _Plan(positions, lambda v: np.mean(v, axis=0))

    def finish(v: np.ndarray) -> np.ndarray:
        if v.dtype.kind not in "fc":
            return np.mean(v[[0, -1]], axis=0)
        return np.true_divide(np.add(v[0], v[-1]), 2.0, casting="unsafe", dtype=v.dtype)

    return _Plan(positions, finish)


def _nan_plan(shape: tuple[int, ...]) -> _Plan:
    """An all-NaN slice of a ``nan*`` function: NaN, with NumPy's warning."""
    def finish(v: np.ndarray) -> np.ndarray:
        warnings.warn("All-NaN slice encountered", RuntimeWarning, stacklevel=6)
        return np.full(shape + v.shape[1:], np.nan, dtype=v.dtype)

    return _Plan(np.zeros(1, np.int64), finish)


# -- the rule ------------------------------------------------------------------------------

_FUNCS: dict[Callable[..., Any], tuple[str, bool]] = {
    np.median: ("median", False), np.nanmedian: ("median", True),
    np.quantile: ("quantile", False), np.nanquantile: ("quantile", True),
    np.percentile: ("percentile", False), np.nanpercentile: ("percentile", True),
}


@dataclass(frozen=True)
class _Call:
    """A call, normalised: the function, ``q`` (as NumPy takes it, by value), the reduced axes, the options."""

    func: Callable[..., Any]
    q: Any
    axes: Optional[tuple[int, ...]]
    method: str
    keepdims: bool
    weighted: bool

    def numpy(self, a: Any, weights: Any = None) -> Any:
        """NumPy's call on one block (or a probe)."""
        options: dict[str, Any] = {"axis": self.axes, "keepdims": self.keepdims}
        kind = _FUNCS[self.func][0]
        if kind == "median":
            return self.func(a, **options)
        if self.weighted:
            options["weights"] = weights
        return self.func(a, self.q, method=self.method, **options)

    @property
    def quantiles(self) -> np.ndarray:
        """``q`` as NumPy's ``_quantile`` sees it (a percentile divided by 100)."""
        kind = _FUNCS[self.func][0]
        return np.true_divide(self.q, 100, out=...) if kind == "percentile" else np.asanyarray(self.q)

    @property
    def weak_q(self) -> bool:
        return type(self.q) in (int, float)


def _static_q(q: Any) -> Any:
    """``q`` by value: a number stays one (NumPy's weak promotion); an array or DTensor becomes an ndarray."""
    if is_sharded(q):
        q = q.full_tensor()
        q = q.get() if hasattr(q, "get") else q
    if type(q) in (int, float):
        return q
    return np.array(q)


def _bind(func: Callable[..., Any]) -> Callable[[tuple, dict], tuple[tuple[Any, ...], Hashable]]:
    signature = inspect.signature(func)
    name = f"numpy.{func.__name__}"
    kind = _FUNCS[func][0]

    def bind(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
        try:
            given = dict(signature.bind(*args, **kwargs).arguments)
        except TypeError as e:
            raise TypeError(f"{name}: {e}") from None
        if given.get("out") is not None:
            raise ShardingError(f"{name} on DTensors: expected out= as a keyword (it rebinds), got it by position")
        weights = given.get("weights")
        a, weights, _ = array_operands([given["a"], weights, given.get("q")])  # a plain a with a DTensor q
        if not is_sharded(a):
            raise TypeError(f"{name}: expected a DTensor, got {type(a).__name__}")
        if weights is not None and not is_sharded(weights):
            raise TypeError(f"{name}: expected weights as an array, got {type(weights).__name__}")
        q = _static_q(given["q"]) if kind != "median" else None
        keepdims = given.get("keepdims", False)
        keepdims = False if keepdims is np._NoValue else bool(keepdims)  # type: ignore[attr-defined]
        axis = given.get("axis")
        axes = None if axis is None else tuple(sorted(axis_tuple(axis, a.ndim, lists=True)))
        call = _Call(func, q, axes, given.get("method", "linear"), keepdims, weights is not None)
        probe_weights = None if weights is None else np.ones((1,) * weights.ndim, weights.dtype)
        if a.size:  # NumPy's own checks of q, method, weights and dtype (an empty array: see quantile_decision)
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                call.numpy(np.ones((1,) * a.ndim, a.dtype), probe_weights)
        key = (func, _hashable(q), axes, call.method, keepdims, call.weighted)
        return ((a,) if weights is None else (a, weights)), key

    return bind


def _hashable(q: Any) -> Hashable:
    if q is None or type(q) in (int, float):
        return (type(q).__name__, q)
    return (q.dtype.str, q.shape, q.tobytes())


def _from_hashable(q: Hashable) -> Any:
    if q[0] in ("NoneType", "int", "float"):  # type: ignore[index]
        return q[1]  # type: ignore[index]
    dtype, shape, data = q  # type: ignore[misc]
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


def _result_placements(spec: DTensorSpec, reduced: Sequence[int], keepdims: bool, lead: int) -> tuple[Placement, ...]:
    """Reduced dims replicated; kept dims keep their sharding, after the ``lead`` dims of ``q``."""
    out: list[Placement] = []
    for p in spec.placements:
        if isinstance(p, Shard) and p.dim in reduced:
            out.append(Replicate())
        elif isinstance(p, Shard):
            out.append(Shard(lead + (p.dim if keepdims else p.dim - sum(1 for d in reduced if d < p.dim))))
        else:
            out.append(p)
    return tuple(out)


def _weights_spec(weights: Optional[DTensorSpec], like: DTensorSpec) -> Optional[DTensorSpec]:
    """Weights of ``a``'s shape placed like ``a``; 1-d weights (along the one reduced axis) replicated."""
    if weights is None:
        return None
    if weights.shape == like.shape:
        return DTensorSpec(like.mesh, like.placements, weights.tensor_meta)
    return weights.with_placements((Replicate(),) * weights.mesh.ndim)


def quantile_decision(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    """The decision of an order statistic (see the module doc): local, on whole axes, or by selection."""
    func, q_key, axes, method, keepdims, weighted = key
    kind, nan_function = _FUNCS[func]
    call = _Call(func, _from_hashable(q_key), axes, method, keepdims, weighted)
    a = partial_free(single_sharding(specs[0]))
    w = partial_free(single_sharding(specs[1])) if weighted else None
    reduced = tuple(range(a.ndim)) if axes is None else axes
    lead = 0 if kind == "median" else np.ndim(call.quantiles)
    kept = tuple(d for d in range(a.ndim) if d not in reduced)
    shape = np.shape(call.quantiles) if lead else ()
    shape += tuple(1 if d in reduced else a.shape[d] for d in range(a.ndim) if keepdims or d not in reduced)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        if math.prod(a.shape) == 0:  # NumPy's result on no data (its shape is not always the rule's: nanquantile)
            probe = np.asarray(call.numpy(np.empty(a.shape, a.dtype),
                                          None if w is None else np.empty(w.shape, w.dtype)))
        else:
            probe = np.asarray(call.numpy(np.ones((1,) * a.ndim, a.dtype),
                                          None if w is None else np.ones((1,) * w.ndim, w.dtype)))
    meta = TensorMeta(probe.shape if math.prod(a.shape) == 0 else shape, probe.dtype)
    mesh = a.mesh
    sharded = sorted(m for m, p in enumerate(a.placements)
                     if isinstance(p, Shard) and p.dim in reduced and mesh.shape[m] > 1)

    def local(out: DTensorSpec) -> Callable[..., Any]:
        """NumPy's call on a rank's block; an empty block whose part of the result is empty gives it."""
        def numpy_call(rank: int, x: Any, weights: Any = None) -> Any:
            if x.size == 0 and math.prod(out.local_shape_of_rank(rank)) == 0:
                return np.empty(out.local_shape_of_rank(rank), meta.dtype)
            return np.asarray(call.numpy(x, weights), dtype=meta.dtype)

        return numpy_call

    if math.prod(a.shape) == 0 or not sharded:
        if meta.shape != shape:
            a = a.with_placements((Replicate(),) * mesh.ndim)
        out = DTensorSpec(mesh, _result_placements(a, reduced, keepdims, lead), meta)
        return Decision((a,) if w is None else (a, _weights_spec(w, a)), (out,), local(out))
    length = math.prod(a.shape[d] for d in reduced)
    if weighted or a.dtype.kind == "c" or length * a.dtype.itemsize <= BUCKETS * 8:
        return _whole_decision(a, w, reduced, keepdims, lead, meta, local)
    return _selection_decision(a, call, reduced, kept, keepdims, lead, meta, sharded, nan_function)


def _whole_decision(a: DTensorSpec, w: Optional[DTensorSpec], reduced: tuple[int, ...], keepdims: bool, lead: int,
                    meta: TensorMeta, local: Callable[[DTensorSpec], Callable[..., Any]]) -> Decision:
    """The reduced dims made whole (moved to a kept dim with one ``all_to_all``, else gathered with one
    ``all_gather``), then NumPy's function on every block."""
    moved, gathered = whole_plan(a, reduced)
    whole = replicate_mesh_dims(moved, gathered)
    out = DTensorSpec(a.mesh, _result_placements(whole, reduced, keepdims, lead), meta)
    numpy_call = local(out)
    w_spec = _weights_spec(w, moved)
    inputs = (moved,) if w_spec is None else (moved, w_spec)
    if not gathered:
        return Decision(inputs, (out,), numpy_call)
    full_weights = w_spec is not None and w_spec.shape == moved.shape

    def program(backend: Any, shards: Shards, weights: Optional[Shards] = None) -> Shards:
        """One ``all_gather`` of the reduced dims (the weights' too, when they have ``a``'s shape)."""
        shards = gather_blocks(backend, moved, shards, gathered)
        if full_weights:
            weights = gather_blocks(backend, w_spec, weights, gathered)  # type: ignore[arg-type]
        return {r: numpy_call(r, x, None if weights is None else weights[r]) for r, x in shards.items()}

    return Decision(inputs, (out,), None, program=program)


def _selection_decision(a: DTensorSpec, call: _Call, reduced: tuple[int, ...], kept: tuple[int, ...],
                        keepdims: bool, lead: int, meta: TensorMeta, sharded: Sequence[int],
                        nan_function: bool) -> Decision:
    """The radix selection over the mesh dims ``sharded`` (see :func:`select_order_statistics`)."""
    mesh = a.mesh
    out = DTensorSpec(mesh, _result_placements(a, reduced, keepdims, lead), meta)
    groups = mesh.groups(tuple(sharded))
    length = math.prod(a.shape[d] for d in reduced)
    longest = max(math.prod(a.local_shape_of_rank(r)[d] for d in reduced) for r in mesh.all_ranks)
    skip_nan = nan_function and a.dtype.kind == "f"
    kind = _FUNCS[call.func][0]
    q_shape = np.shape(call.quantiles) if kind != "median" else ()
    masked = call.axes is not None and len(call.axes) < a.ndim and length < 600  # nanmedian's np.ma path
    plans: dict[int, _Plan] = {}

    def plan(n: int) -> _Plan:
        found = plans.get(n)
        if found is None:
            if n == 0:
                found = _nan_plan(q_shape)
            elif kind == "median":
                found = _median_plan(n, masked and skip_nan)
            else:
                found = quantile_plan(n, call.quantiles, call.method, call.weak_q)
            plans[n] = found
        return found

    def wanted(counts: np.ndarray) -> np.ndarray:
        distinct = [int(n) for n in np.unique(counts)]
        rows = max(len(plan(n).positions) for n in distinct) if distinct else 1
        table = np.zeros((rows, len(counts)), np.int64)
        for n in distinct:
            positions = plan(n).positions
            padded = np.concatenate([positions, np.repeat(positions[-1:], rows - len(positions))])
            table[:, counts == n] = padded[:, None]
        return table

    def program(backend: Any, shards: Shards) -> Shards:
        """The radix selection (``all_reduce`` rounds, one final ``all_gather`` of a few keys), then NumPy's
        arithmetic on the selected values."""
        keys = {}
        for r, x in shards.items():
            x = np.asarray(x)
            columns = math.prod(x.shape[d] for d in kept)
            length_r = math.prod(x.shape[d] for d in reduced)
            keys[r] = order_keys(np.transpose(x, kept + reduced).reshape(columns, length_r))
        found, counts = select_order_statistics(backend, groups, keys, wanted, skip_nan, longest, length,
                                                nan=a.dtype.kind == "f")
        results = {}
        for r in shards:
            values = key_values(found[r], a.dtype)
            columns = values.shape[1]
            if not skip_nan:
                p = plan(length)
                result = np.asarray(p.finish(values[:len(p.positions)]))
                if a.dtype.kind == "f":
                    nan = found[r][0] == _TOP
                    if nan.any():
                        result = np.array(result, copy=True)
                        result[..., nan] = values[0, nan]
            else:
                result = np.empty(q_shape + (columns,), meta.dtype)
                for n in np.unique(counts[r]):
                    p = plan(int(n))
                    where = counts[r] == n
                    result[..., where] = p.finish(values[:len(p.positions)][:, where])
            results[r] = np.asarray(result, dtype=meta.dtype).reshape(out.local_shape_of_rank(r))
        return results

    return Decision((a,), (out,), None, program=program)


for _func in _FUNCS:
    register(_func)(OpRule(_func.__name__, _bind(_func), quantile_decision))


def global_extremes(backend: Any, groups: Groups, blocks: Shards) -> Shards:
    """Every column's largest and smallest value over each group, as NumPy's ``max``/``min`` give them (a NaN
    wins): one ``all_reduce`` (max) of two keys per column.  ``blocks[r]``: rank ``r``'s ``(m, n_r)`` values;
    returns ``{rank: (largest, smallest)}`` (NaN for a column with no values anywhere).

    Example:
        >>> from collectives import SimulatedBackend
        >>> out = global_extremes(SimulatedBackend(2), ((0, 1),), {0: np.array([[3, 1]]), 1: np.array([[7, 2]])})
        >>> [v.tolist() for v in out[1]]
        [[7], [1]]
    """
    sent = {}
    for r, x in blocks.items():
        keys = order_keys(np.asarray(x))
        lowest = np.where(keys == _TOP, np.uint64(0), keys)  # a NaN is the smallest too
        sent[r] = np.stack([np.max(keys, axis=1, initial=0), ~np.min(lowest, axis=1, initial=_TOP)])
    got = backend.all_reduce(sent, groups, op="max")
    out = {}
    for r, x in blocks.items():
        high, low = np.asarray(got[r][0]), ~np.asarray(got[r][1])
        nothing = high == 0
        dtype = np.asarray(x).dtype
        largest = key_values(np.where(nothing, _TOP, high), np.float64 if nothing.any() else dtype)
        smallest = key_values(np.where(nothing, _TOP, low), np.float64 if nothing.any() else dtype)
        out[r] = (largest, smallest)
    return out
