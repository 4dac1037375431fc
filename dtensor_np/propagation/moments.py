"""Rules for the moments ``var``, ``std``, ``nanvar``, ``nanstd`` and ``nanmean``: one local pass per rank, then
one small collective.

Reduced dims that are not sharded are reduced by NumPy's own function on
every rank's block, with no communication; kept dims keep their sharding.
When a reduced dim is sharded on mesh dims ``M`` (``k`` ranks in a group):

* every rank summarises its block, slice by slice, by NumPy's kernels: the
  count ``n_r`` (the numbers that are not NaN for ``nan*``), the mean
  ``m_r`` (in the computation dtype NumPy would use) and the sums of the
  deviations ``d = x - m_r`` and of ``|d|^2`` (``S1_r``, ``S2_r``).  One
  temporary, ``d`` (NaNs zeroed in it for ``nan*``); on a NumPy float64
  block whose reduced dims lead or trail, each sum is one read of ``d``
  (``einsum``'s fused sum of products), else ``d`` is squared in place as
  ``np.var`` does: no more memory traffic than ``np.var``.
  ``S1_r`` is ``n_r`` times the rounding error of ``m_r``: without it, a
  mean far from 0 rounded to its float would put a first-order error in the
  merge.  A rank with an empty block (or an all-NaN slice) sends zeros,
  which add nothing.
* one ``all_gather`` over ``M`` of the stacked ``(n_r, m_r, S1_r, S2_r)``
  (``4k`` numbers per result element, float64 or complex128: never the
  data), and every rank merges them in rank order (Chan et al.'s parallel
  formula, shifted to one centre ``c = sum n_r m_r / n``): with
  ``o_r = m_r - c``, ``T1 = sum S1_r + n_r o_r`` and
  ``T2 = sum S2_r + 2 o_r S1_r + n_r o_r^2``, ``M2 = T2 - T1^2 / n``, then
  ``M2 / (n - ddof)`` (its square root for ``std``).  Every rank of a group
  merges the same gathered bytes in the same order, so the results are
  bitwise identical.
  Raw power sums (``n, sum x, sum x^2``) would cancel catastrophically for
  data far from 0; the block moments are as stable as NumPy's two passes.
* ``nanmean`` needs no ``M2``: one ``all_reduce`` (sum) of ``(n_r, sum_r)``.

NumPy's warnings come out on every rank when any slice has them ("Degrees
of freedom <= 0 for slice" (``nanvar`` NaN there), "Mean of empty slice"):
the counts are known after the gather; when a kept dim is sharded too the
ranks agree on the flag with ``backend.all_true`` (a 4-byte ``Allreduce``
under MPI, not counted, as for a ``LinAlgError``).  Pending values
(``Partial``) are reduced first (their own ``all_reduce``).  Integer input
of ``nan*`` is NumPy's ``var``/``std``/``mean``.  The code calls the block's
own array module (``collectives.array_module``), so CuPy shards stay on the
device.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> a = 1e9 + np.array([[1.0, 2.0], [3.0, np.nan], [5.0, 6.0]])
    >>> x = dt.distribute_tensor(a, dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> with dt.comm_counter() as c:
    ...     v = np.var(x, axis=0).full_tensor(), np.nanstd(x, axis=0).full_tensor()
    >>> v[0].tolist(), v[1].tolist(), c.counts["all_gather"], c.total
    ([2.6666666666666665, nan], [1.632993161855452, 2.0], 2, 2)
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Hashable, Optional

import numpy as np

from collectives import array_module

from ..errors import ShardingError
from ..placements import Replicate, Shard
from ..sharded import array_operands, is_sharded
from ..spec import DTensorSpec, TensorMeta
from .common import keepdims_flag, normalize_axes, partial_free, single_sharding
from .reduction import reduction_decision
from .registry import Decision, OpRule, register
from .signature_bind import named_arguments, no_more_arguments, pop_dtensor
from .statistics import reduced_placements

__all__ = ["MOMENTS", "about_mean_decision", "moments_decision", "block_moments", "merge_moments"]

Shards = dict[int, Any]
_NO_VALUE = np._NoValue  # type: ignore[attr-defined]

MOMENTS = {"var": np.var, "std": np.std, "nanvar": np.nanvar, "nanstd": np.nanstd, "nanmean": np.nanmean}
"""The functions these rules serve, by name."""

_NUMPY_ONLY = {"nanvar": "var", "nanstd": "std", "nanmean": "mean"}  # nan* of an integer array is NumPy's plain one
_WARNINGS = {"var": "Degrees of freedom <= 0 for slice", "std": "Degrees of freedom <= 0 for slice",
             "nanvar": "Degrees of freedom <= 0 for slice.", "nanstd": "Degrees of freedom <= 0 for slice.",
             "nanmean": "Mean of empty slice"}


def _work_dtype(dtype: np.dtype, wanted: Optional[np.dtype]) -> np.dtype:
    """The dtype NumPy computes a block's moments in: ``dtype=``, float64 for integers, float32 for float16."""
    if wanted is not None and wanted.kind in "fc":
        return wanted
    if dtype.kind in "fc":
        return np.dtype(np.float32) if dtype == np.float16 else dtype
    return np.dtype(np.float64)


def block_moments(x: Any, reduced: tuple[int, ...], work: np.dtype, merge: np.dtype, nan: bool,
                  second: bool = True) -> Any:
    """One block's ``(n, m, S1, S2)`` per slice, stacked on a new first axis (kept dims as 1), in ``merge``: the
    count, the mean ``m`` as computed (in ``work``), and the sums of the deviations ``d = x - m`` and of
    ``|d|^2`` (``S1`` is the rounding error of ``m`` times ``n``: the merge needs it to stay exact far from 0).

    ``nan``: NaNs are left out of all four; ``second=False``: ``(count, sum)``
    only.  One temporary the block's size (two with ``nan``: the mask too).

    Example:
        >>> block_moments(np.array([[1.0, 3.0], [2.0, np.nan]]), (0,), np.dtype("f8"), np.dtype("f8"), True).tolist()
        [[[2.0, 1.0]], [[1.5, 3.0]], [[0.0, 0.0]], [[0.5, 0.0]]]
    """
    xp = array_module(x)
    kept = tuple(1 if i in reduced else s for i, s in enumerate(x.shape))
    n = math.prod(x.shape[a] for a in reduced)
    if n == 0:
        return xp.zeros((4 if second else 2,) + kept, merge)
    if not nan:
        count = xp.full(kept, n, merge)
        mean = xp.mean(x, axis=reduced, dtype=work, keepdims=True)
        d = xp.subtract(x, mean)  # NumPy's promotion: float64 deviations of float64 data whatever dtype= says
    else:
        mask = xp.isnan(x)
        count = (n - xp.sum(mask, axis=reduced, keepdims=True, dtype=np.int64)).astype(merge)
        if second and xp is np:
            # the numbers' sum read in place (a masked, not pairwise, sum: S1 corrects the mean it gives)
            total = np.add.reduce(x, axis=reduced, keepdims=True, dtype=work, where=~mask)
            d = None
        else:
            d = xp.where(mask, xp.zeros((), x.dtype), x)
            total = xp.sum(d, axis=reduced, keepdims=True, dtype=work)
        if not second:
            return xp.stack([count, total.astype(merge)])
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = total / xp.maximum(count, 1).astype(work)
        if d is None:
            d = xp.subtract(x, mean)
        else:
            d = xp.subtract(d, mean, out=d if d.dtype == np.result_type(d.dtype, mean.dtype) else None)
        xp.copyto(d, xp.zeros((), d.dtype), where=mask)
    s1, s2 = _deviation_sums(xp, d, reduced, work, kept)
    return xp.stack([count, mean.astype(merge), s1.astype(merge), s2.astype(merge)])


def _deviation_sums(xp: Any, d: Any, reduced: tuple[int, ...], work: np.dtype, kept: tuple[int, ...]) -> tuple[Any, Any]:
    """``sum d`` and ``sum |d|^2`` over ``reduced`` (kept dims as 1).  A NumPy float64 block whose reduced dims lead
    or trail: one read of ``d`` for each sum (``einsum``'s fused sum of products), where squaring in place then
    summing reads ``d`` twice and writes it once; else NumPy's ``np.var`` way."""
    ndim, r = d.ndim, len(reduced)
    order = tuple(sorted(reduced))
    # float64 only: einsum and BLAS accumulate along the reduced dim in order (NumPy's own sum does that along a
    # leading dim), which for float32 over millions of items is far less exact than NumPy's pairwise sum
    if xp is np and d.dtype == work == np.float64 and d.flags.c_contiguous and d.size and d.ndim > 1:
        if order == tuple(range(r)) or order == tuple(range(ndim - r, ndim)):
            leading = order == tuple(range(r))
            if math.prod(kept) == 1:  # everything: per column in order, then the columns' sums pairwise
                m = d.reshape((-1, d.shape[-1]))
                s1, s2 = np.add.reduce(m.reshape(-1)), np.add.reduce(np.einsum("ij,ij->j", m, m))
            elif leading:
                m = d.reshape((-1, math.prod(kept)))
                s1, s2 = np.add.reduce(m, axis=0, dtype=work), np.einsum("ij,ij->j", m, m)
            else:
                m = d.reshape((math.prod(kept), -1))
                s1, s2 = m @ np.ones(m.shape[1], work), np.einsum("ij,ij->i", m, m)
            return s1.reshape(kept), s2.reshape(kept)
    s1 = xp.sum(d, axis=reduced, keepdims=True, dtype=work)
    if d.dtype.kind == "c":
        return s1, xp.sum(d.real * d.real + d.imag * d.imag, axis=reduced, keepdims=True, dtype=work)
    return s1, xp.sum(xp.multiply(d, d, out=d), axis=reduced, keepdims=True, dtype=work)


def merge_moments(stacked: Any, k: int) -> tuple[Any, Any, Any]:
    """``(n, mean, M2)`` of the ``k`` blocks whose :func:`block_moments` are concatenated in ``stacked``, merged
    in block order (a block of count 0 adds nothing).

    The blocks' sums are shifted to one centre ``c = sum n_r m_r / n`` (``o_r = m_r - c`` is exact where the
    means are close): ``T1 = sum S1_r + n_r o_r``, ``T2 = sum S2_r + 2 Re(conj(o_r) S1_r) + n_r |o_r|^2``,
    ``M2 = T2 - |T1|^2 / n``; ``T1`` is a few roundings of ``c``, so nothing cancels (Chan et al.'s parallel
    formula, with the rounding of each block's mean carried in ``S1``).

    Example:
        >>> x = np.array([1.0, 2.0, 4.0, 9.0])
        >>> f = lambda b: block_moments(b, (0,), np.dtype("f8"), np.dtype("f8"), False)
        >>> n, mean, m2 = merge_moments(np.concatenate([f(x[:3]), f(x[3:])]), 2)
        >>> float(n[0]), float(mean[0]), float(m2[0]), float(((x - x.mean()) ** 2).sum())
        (4.0, 4.0, 38.0, 38.0)
    """
    xp = array_module(stacked)
    g = stacked.reshape((k, 4) + stacked.shape[1:])
    counts, means, s1, s2 = g[:, 0].real, g[:, 1], g[:, 2], g[:, 3].real
    n = xp.sum(counts, axis=0)
    safe = xp.maximum(n, 1)
    centre = xp.sum(counts * means, axis=0) / safe
    o = means - centre
    t1 = xp.sum(s1 + counts * o, axis=0)
    if g.dtype.kind == "c":
        cross = 2 * (o.real * s1.real + o.imag * s1.imag) + counts * (o.real * o.real + o.imag * o.imag)
        square = t1.real * t1.real + t1.imag * t1.imag
    else:
        cross, square = 2 * o * s1 + counts * o * o, t1 * t1
    t2 = xp.sum(s2 + cross, axis=0)
    return n, centre + t1 / safe, xp.maximum(t2 - square / safe, 0)


def _probe(kind: str, dtype: np.dtype, wanted: Optional[np.dtype]) -> np.dtype:
    """NumPy's result dtype (its TypeError for a ``dtype=`` it refuses, on every rank before anything moves)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return np.asarray(MOMENTS[kind](np.zeros(2, dtype), dtype=wanted)).dtype


def _warn_everywhere(backend: Any, kind: str, flags: dict[int, bool], agree: bool) -> None:
    """NumPy's warning on every rank when a slice on any rank has it."""
    if (not backend.all_true({r: not f for r, f in flags.items()})) if agree else any(flags.values()):
        warnings.warn(_WARNINGS[kind], RuntimeWarning, stacklevel=4)


def _layout(spec: DTensorSpec, kind: str, axes: Optional[tuple[int, ...]], keepdims: bool, dtype: Optional[np.dtype]
            ) -> tuple[DTensorSpec, tuple[int, ...], DTensorSpec, tuple[int, ...], bool]:
    """What every moment decision starts from: ``spec`` with one mesh dim per sharded dim and no pending sum, the
    reduced dims, the output's spec, the mesh dims that split the reduced dims, and whether the ranks must agree
    on NumPy's warning (``nan*`` with a kept dim sharded: the ranks hold slices of other counts)."""
    spec = partial_free(single_sharding(spec))
    reduced = tuple(range(spec.ndim)) if axes is None else axes
    out_shape = tuple(1 if i in reduced else s for i, s in enumerate(spec.shape) if keepdims or i not in reduced)
    out = DTensorSpec(spec.mesh, reduced_placements(spec, reduced, keepdims),
                      TensorMeta(out_shape, _probe(kind, spec.dtype, dtype)))
    mesh_dims = tuple(m for m, p in enumerate(spec.placements)
                      if isinstance(p, Shard) and p.dim in reduced and spec.mesh.shape[m] > 1)
    agree = kind.startswith("nan") and any(isinstance(p, Shard) and p.dim not in reduced and spec.mesh.shape[m] > 1
                                           for m, p in enumerate(spec.placements))
    return spec, reduced, out, mesh_dims, agree


def moments_decision(spec: DTensorSpec, kind: str, axes: Optional[tuple[int, ...]], ddof: float, keepdims: bool,
                     dtype: Optional[np.dtype]) -> Decision:
    """The decision of ``kind`` (a key of :data:`MOMENTS`) over ``axes`` (None: all), with NumPy's ``ddof``."""
    if kind in _NUMPY_ONLY and spec.dtype.kind not in "fc":
        if kind == "nanmean":
            return reduction_decision(spec, "mean", axes, keepdims, dtype)
        kind = _NUMPY_ONLY[kind]
    spec, reduced, out, mesh_dims, agree = _layout(spec, kind, axes, keepdims, dtype)
    func = MOMENTS[kind]
    nan, root, second = kind.startswith("nan"), kind.endswith("std"), kind != "nanmean"
    out_dtype = out.dtype
    options: dict[str, Any] = {"axis": axes, "keepdims": keepdims, "dtype": dtype}
    if second:
        options["ddof"] = ddof
    if not mesh_dims and not agree:
        return Decision((spec,), (out,), lambda rank, x: func(x, **options))
    if not mesh_dims:
        def local_program(backend: Any, shards: Shards) -> Shards:
            """NumPy's function on every block; the ranks agree on its warning (no counted collective)."""
            results, flags = {}, {}
            for r, x in shards.items():
                with warnings.catch_warnings(record=True) as caught, np.errstate(all="ignore"):
                    warnings.simplefilter("always")
                    results[r] = func(x, **options)
                flags[r] = any(str(w.message).startswith(_WARNINGS[kind][:20]) for w in caught)
            _warn_everywhere(backend, kind, flags, agree)
            return results

        return Decision((spec,), (out,), None, program=local_program)

    groups = spec.mesh.groups(tuple(sorted(mesh_dims)))
    k = len(groups[0])
    work = _work_dtype(spec.dtype, dtype)
    merge = np.promote_types(work, np.float64)
    total = math.prod(spec.shape[a] for a in reduced)

    def finish(r: int, n: Any, mean: Any, m2: Any) -> tuple[Any, bool]:
        """The rank's result from the merged moments, and whether NumPy warns for one of its slices."""
        xp = array_module(n)
        with np.errstate(divide="ignore", invalid="ignore"):
            if not second:
                value, bad = mean, n == 0
                value = xp.where(bad, xp.asarray(np.nan, value.dtype), value)
            elif not nan:
                bad = xp.asarray(total - ddof <= 0)
                value = m2 / max(total - ddof, 0)
            else:
                dof = n - ddof
                bad = dof <= 0
                value = xp.where(bad, xp.asarray(np.nan, m2.dtype), m2 / dof)
            if root:
                value = xp.sqrt(value)
        return value.astype(out_dtype).reshape(out.local_shape_of_rank(r)), bool(xp.any(bad))

    def program(backend: Any, shards: Shards) -> Shards:
        """One ``all_gather`` of the blocks' stacked ``(n, m, S1, S2)`` over the sharded reduced mesh dims
        (``nanmean``: one ``all_reduce`` of ``(count, sum)``), merged in rank order."""
        stacked = {r: block_moments(x, reduced, work, merge, nan, second) for r, x in shards.items()}
        results, flags = {}, {}
        if second:
            for r, g in backend.all_gather(stacked, groups, axis=0).items():  # (4k, *kept)
                results[r], flags[r] = finish(r, *merge_moments(g, k))
        else:
            for r, g in backend.all_reduce(stacked, groups, op="sum").items():
                with np.errstate(divide="ignore", invalid="ignore"):
                    results[r], flags[r] = finish(r, g[0].real, g[1] / g[0].real, None)
        _warn_everywhere(backend, kind, flags, agree)
        return results

    return Decision((spec,), (out,), None, program=program)


def about_mean_decision(spec: DTensorSpec, mean: DTensorSpec, kind: str, axes: Optional[tuple[int, ...]],
                        ddof: float, keepdims: bool, dtype: Optional[np.dtype]) -> Decision:
    """``var``/``std``/``nanvar``/``nanstd`` with NumPy 2's ``mean=`` (a mean that broadcasts against ``a``): each
    rank sums the squared deviations of its block from its block of ``mean`` (placed like ``a`` on the dims they
    share), then one ``all_reduce`` of ``(count, sum)`` over the sharded reduced mesh dims; no collective when no
    reduced dim is sharded.

    Example:
        >>> import dtensor_np as dt
        >>> a = np.arange(12.0).reshape(4, 3)
        >>> x = dt.distribute_tensor(a, dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> with dt.comm_counter() as c:
        ...     v = np.var(x, axis=0, mean=np.zeros((1, 3))).full_tensor()
        >>> v.tolist() == np.var(a, axis=0, mean=np.zeros((1, 3))).tolist(), c.counts["all_reduce"], c.total
        (True, 1, 1)
    """
    if kind in _NUMPY_ONLY and spec.dtype.kind not in "fc":
        kind = _NUMPY_ONLY[kind]
    spec, reduced, out, mesh_dims, agree = _layout(spec, kind, axes, keepdims, dtype)
    nan, root = kind.startswith("nan"), kind.endswith("std")
    out_dtype = out.dtype
    lead = spec.ndim - mean.ndim  # the mean's dims are a's last ones (NumPy's broadcasting)
    aligned = tuple(Shard(p.dim - lead) if isinstance(p, Shard) and p.dim >= lead and mean.shape[p.dim - lead] != 1
                    else Replicate() for p in spec.placements)
    mean_in = DTensorSpec(mean.mesh, aligned, mean.tensor_meta)
    groups = spec.mesh.groups(tuple(sorted(mesh_dims))) if mesh_dims else None

    def program(backend: Any, shards: Shards, means: Shards) -> Shards:
        """Each block's ``(count, sum of squared deviations)``; one ``all_reduce`` where the reduced dims are sharded."""
        stacked = {}
        for r, x in shards.items():
            xp = array_module(x)
            with np.errstate(all="ignore"):
                d = xp.subtract(x, means[r])  # NumPy's promotion, as its var does with mean=
                square = (d * d.conj()).real if d.dtype.kind == "c" else d * d
                work = square.dtype if dtype is None or dtype.kind not in "fc" else dtype
                if nan:
                    keep = xp.broadcast_to(~xp.isnan(x), square.shape)
                    total = xp.sum(xp.where(keep, square, xp.zeros((), square.dtype)), axis=reduced, keepdims=True,
                                   dtype=work)
                    count = xp.sum(keep, axis=reduced, keepdims=True)
                else:
                    total = xp.sum(square, axis=reduced, keepdims=True, dtype=work)
                    count = xp.full(total.shape, math.prod(square.shape[a] for a in reduced))
            merge = np.promote_types(total.dtype, np.float64)
            stacked[r] = xp.stack([count.astype(merge), total.astype(merge)])
        if groups is not None:
            stacked = backend.all_reduce(stacked, groups, op="sum")
        results, flags = {}, {}
        for r, g in stacked.items():
            xp = array_module(g)
            with np.errstate(divide="ignore", invalid="ignore"):
                dof = g[0] - ddof
                bad = dof <= 0
                value = xp.where(bad, xp.asarray(np.nan, g.dtype), g[1] / dof) if nan else g[1] / xp.maximum(dof, 0)
                if root:
                    value = xp.sqrt(value)
            results[r] = value.astype(out_dtype).reshape(out.local_shape_of_rank(r))
            flags[r] = bool(xp.any(bad))
        _warn_everywhere(backend, kind, flags, agree)
        return results

    return Decision((spec, mean_in), (out,), None, program=program)


def _moments_rule(kind: str) -> OpRule:
    func = MOMENTS[kind]
    name = f"numpy.{func.__name__}"
    second = kind != "nanmean"
    names = ("a", "axis", "dtype", "out", "ddof", "keepdims") if second else ("a", "axis", "dtype", "out", "keepdims")

    def bind(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
        given = named_arguments(name, names, args, kwargs)
        a = pop_dtensor(name, given, "a")
        if given.pop("out", None) is not None:
            raise ShardingError(f"{name} on DTensors: expected out= as a keyword (it rebinds), got it by position")
        ddof = given.pop("ddof", 0) if second else 0  # nanmean takes no ddof, correction or mean: NumPy's TypeError
        correction = given.pop("correction", _NO_VALUE) if second else _NO_VALUE
        if correction is not _NO_VALUE and correction is not None:
            if ddof != 0:
                raise ValueError("ddof and correction can't be provided simultaneously.")
            ddof = correction
        where = given.pop("where", _NO_VALUE)
        if where is not _NO_VALUE and where is not None and where is not True:
            raise ShardingError(f"{name} on DTensors: expected no where=, got {type(where).__name__}")
        mean = given.pop("mean", _NO_VALUE) if second else _NO_VALUE
        axis = given.pop("axis", None)
        keepdims = given.pop("keepdims", False)
        dtype = given.pop("dtype", None)
        no_more_arguments(name, given)
        # NumPy's var/std count the axes' items (an axis out of range raises), compare ddof, then reduce (a
        # repeated axis and keepdims= raise there)
        ddof_ok = isinstance(ddof, (int, float, np.integer, np.floating))  # NumPy's TypeError family ('a', None)
        ddof_error = f"{name}: expected ddof as a number, got {type(ddof).__name__} {ddof!r}"
        try:
            axes = normalize_axes(axis, a.ndim)
        except np.exceptions.AxisError:
            raise
        except (TypeError, ValueError):
            if not ddof_ok:
                raise TypeError(ddof_error) from None
            raise
        if not ddof_ok:
            raise TypeError(ddof_error)
        keepdims = False if keepdims is _NO_VALUE else keepdims_flag(keepdims)
        key = (kind, axes, float(ddof) if isinstance(ddof, float) else int(ddof), keepdims,
               None if dtype is None else np.dtype(dtype))
        if mean is _NO_VALUE or mean is None:
            return (a,), key
        a, mean = array_operands([a, mean])  # a plain array: a replicated constant
        if not is_sharded(mean):
            raise TypeError(f"{name}: expected mean= as an array, got {type(mean).__name__}")
        try:
            fits = np.broadcast_shapes(tuple(mean.shape), tuple(a.shape)) == tuple(a.shape)
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(f"{name}: expected mean= of a shape that broadcasts to the array's {tuple(a.shape)}, "
                             f"got {tuple(mean.shape)}")
        return (a, mean), key

    def decide(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
        return moments_decision(specs[0], *key) if len(specs) == 1 else about_mean_decision(*specs, *key)

    return OpRule(func.__name__, bind, decide)


for _kind, _func in MOMENTS.items():
    register(_func)(_moments_rule(_kind))
