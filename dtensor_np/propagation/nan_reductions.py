"""Rules for the NaN-skipping reductions that no other rule composes into: ``nanmax``, ``nanmin``, ``nanprod``,
``nancumprod``.

Reduced (scanned) dims not sharded: every rank calls NumPy's function on its
block; nothing moves.  Along a sharded dim (mesh dims ``M``):

* ``nanmax``/``nanmin``: every rank reduces its block (``np.fmax.reduce``),
  turns the results into order-preserving 64-bit keys (a slice with no number
  gets the key no number has) and one ``all_reduce`` (max or min) of the keys
  gives every rank the exact result (8 bytes per result element).  A slice
  with no number anywhere is NaN, with NumPy's ``All-NaN slice encountered``.
* ``nanprod``: there is no product among the reduce ops, so the blocks'
  products (NaN taken as 1) travel in one ``all_gather`` (``k`` values per
  result element) and every rank multiplies them in rank order.
* ``nancumprod`` along a sharded axis: every rank scans its block, the blocks'
  last rows travel in one ``all_gather`` (``k`` rows), and every rank
  multiplies its block by the product of the rows before it.  ``axis=None``
  of an array of more than one dim scans the flattened array: gathered (one
  ``all_gather``) and replicated, as ``np.cumsum``'s rule does.

Products are formed in another order than NumPy's (exact for integers,
within rounding for floats).  ``where=`` is refused (a ``ShardingError``);
``initial=`` is applied after the reduction.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> a = np.array([[1.0, np.nan], [np.nan, np.nan], [5.0, np.nan]])
    >>> x = dt.distribute_tensor(a, dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> with dt.comm_counter() as c, np.errstate(all="ignore"):
    ...     import warnings; warnings.simplefilter("ignore")
    ...     m = np.nanmax(x, axis=0)
    >>> m.full_tensor().tolist(), c.counts["all_reduce"], c.total
    ([5.0, nan], 1, 1)
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Hashable, Optional

import numpy as np

from ..errors import ShardingError
from ..placements import Shard
from ..spec import DTensorSpec, TensorMeta
from .common import axis_index, keepdims_flag, normalize_axes, partial_free, single_sharding
from .registry import Decision, OpRule, register
from .selection import key_values, order_keys
from .signature_bind import named_arguments, no_more_arguments, pop_dtensor
from .statistics import reduced_placements
from .whole_axes import whole_decision

__all__ = ["nan_extreme_decision", "nanprod_decision", "nancumprod_decision"]

Shards = dict[int, Any]
_NO_VALUE = np._NoValue  # type: ignore[attr-defined]
_TOP = np.uint64(2**64 - 1)


def _given(value: Any, default: Any = None) -> Any:
    return default if value is _NO_VALUE else value


def _sharded_dims(spec: DTensorSpec, dims: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(m for m, p in enumerate(spec.placements)
                 if isinstance(p, Shard) and p.dim in dims and spec.mesh.shape[m] > 1)


def _probe(call: Callable[[np.ndarray], Any], spec: DTensorSpec) -> np.ndarray:
    """NumPy's result on a stand-in (the real shape when it has no elements: NumPy's errors for empty slices)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        stand_in = np.empty(spec.shape, spec.dtype) if math.prod(spec.shape) == 0 else np.ones((1,) * spec.ndim,
                                                                                                 spec.dtype)
        return np.asarray(call(stand_in))


def _bind_reduction(func: Callable[..., Any],
                    names: tuple[str, ...]) -> Callable[[tuple, dict], tuple[tuple[Any, ...], Hashable]]:
    name = f"numpy.{func.__name__}"

    def bind(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
        given = named_arguments(name, names, args, kwargs)
        a = pop_dtensor(name, given, "a")
        if given.pop("out", None) is not None:
            raise ShardingError(f"{name} on DTensors: expected out= as a keyword (it rebinds), got it by position")
        where = _given(given.pop("where", _NO_VALUE), True)
        if where is not True:
            raise ShardingError(f"{name} on DTensors: expected no where= (mask the array with np.where instead)")
        axes = normalize_axes(given.pop("axis", None), a.ndim, legacy_0d=True)
        keepdims = keepdims_flag(_given(given.pop("keepdims", _NO_VALUE), False))
        initial = _given(given.pop("initial", _NO_VALUE))
        if initial is not None and np.ndim(initial):
            raise ShardingError(f"{name} on DTensors: expected a number as initial=")
        dtype = given.pop("dtype", None) if "dtype" in names else None
        no_more_arguments(name, given)
        return (a,), (func, axes, keepdims, initial, None if dtype is None else np.dtype(dtype))

    return bind


# -- nanmax / nanmin ----------------------------------------------------------------------

def nan_extreme_decision(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    """``nanmax``/``nanmin``: local, or local reductions and one ``all_reduce`` of order keys."""
    func, axes, keepdims, initial, _ = key
    spec = partial_free(single_sharding(specs[0]))
    options: dict[str, Any] = {"axis": axes, "keepdims": keepdims}
    if initial is not None:
        options["initial"] = initial
    probe = _probe(lambda x: func(x, **options), spec)
    reduced = tuple(range(spec.ndim)) if axes is None else axes
    shape = tuple(1 if d in reduced else n for d, n in enumerate(spec.shape) if keepdims or d not in reduced)
    out = DTensorSpec(spec.mesh, reduced_placements(spec, reduced, keepdims), TensorMeta(shape, probe.dtype))
    mesh_dims = _sharded_dims(spec, reduced)
    if not mesh_dims:
        return Decision((spec,), (out,), lambda rank, x: np.asarray(func(x, **options)))
    groups = spec.mesh.groups(mesh_dims)
    biggest = func is np.nanmax
    ufunc = np.fmax if biggest else np.fmin
    nothing = np.uint64(0) if biggest else _TOP

    def program(backend: Any, shards: Shards) -> Shards:
        """Every rank's ``fmax``/``fmin`` of its block as keys, one ``all_reduce`` (max/min) of them."""
        keys = {}
        for r, x in shards.items():
            x = np.asarray(x)
            kept = tuple(1 if d in reduced else n for d, n in enumerate(x.shape))
            if any(x.shape[d] == 0 for d in reduced):
                keys[r] = np.full(kept, nothing, np.uint64)
                continue
            found = order_keys(ufunc.reduce(x, axis=reduced, keepdims=True))
            keys[r] = np.where(found == _TOP, nothing, found)
        keys = backend.all_reduce(keys, groups, op="max" if biggest else "min")
        results = {}
        for r, k in keys.items():
            k = np.asarray(k)
            value = key_values(np.where(k == nothing, _TOP, k) if spec.dtype.kind in "fc" else k, spec.dtype)
            if initial is not None:
                value = ufunc(value, initial)
            value = np.asarray(value, dtype=probe.dtype).reshape(out.local_shape_of_rank(r))
            if value.dtype.kind in "fc" and np.isnan(value).any():
                warnings.warn("All-NaN slice encountered", RuntimeWarning, stacklevel=5)
            results[r] = value
        return results

    return Decision((spec,), (out,), None, program=program)


for _func in (np.nanmax, np.nanmin):
    register(_func)(OpRule(_func.__name__, _bind_reduction(_func, ("a", "axis", "out", "keepdims", "initial", "where")),
                           nan_extreme_decision))


# -- nanprod -----------------------------------------------------------------------------

def nanprod_decision(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    """``nanprod``: local, or the blocks' products in one ``all_gather`` and multiplied on every rank."""
    func, axes, keepdims, initial, dtype = key
    spec = partial_free(single_sharding(specs[0]))
    options: dict[str, Any] = {"axis": axes, "keepdims": keepdims, "dtype": dtype}
    probe = _probe(lambda x: np.nanprod(x, **options), spec)
    reduced = tuple(range(spec.ndim)) if axes is None else axes
    shape = tuple(1 if d in reduced else n for d, n in enumerate(spec.shape) if keepdims or d not in reduced)
    out = DTensorSpec(spec.mesh, reduced_placements(spec, reduced, keepdims), TensorMeta(shape, probe.dtype))
    extra = {} if initial is None else {"initial": initial}
    mesh_dims = _sharded_dims(spec, reduced)
    if not mesh_dims:
        return Decision((spec,), (out,), lambda rank, x: np.asarray(np.nanprod(x, **options, **extra)))
    groups = spec.mesh.groups(mesh_dims)

    def program(backend: Any, shards: Shards) -> Shards:
        """One ``all_gather`` of the blocks' products; their product in rank order."""
        parts = {r: np.nanprod(np.asarray(x), axis=reduced, keepdims=True, dtype=dtype).astype(probe.dtype)[None]
                 for r, x in shards.items()}
        gathered = backend.all_gather(parts, groups, axis=0)
        results = {}
        for r, g in gathered.items():
            value = np.multiply.reduce(np.asarray(g), axis=0, dtype=probe.dtype)
            if initial is not None:
                value = np.multiply(value, initial, dtype=probe.dtype)
            results[r] = np.asarray(value).reshape(out.local_shape_of_rank(r))
        return results

    return Decision((spec,), (out,), None, program=program)


register(np.nanprod)(OpRule("nanprod", _bind_reduction(np.nanprod, ("a", "axis", "dtype", "out", "keepdims", "initial",
                                                                     "where")), nanprod_decision))


# -- nancumprod --------------------------------------------------------------------------

def _bind_nancumprod(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    given = named_arguments("numpy.nancumprod", ("a", "axis", "dtype", "out"), args, kwargs)
    a = pop_dtensor("numpy.nancumprod", given, "a")
    if given.pop("out", None) is not None:
        raise ShardingError("numpy.nancumprod on DTensors: expected out= as a keyword (it rebinds), got it by position")
    axis = given.pop("axis", None)
    dtype = given.pop("dtype", None)
    no_more_arguments("numpy.nancumprod", given)
    axis = None if axis is None else axis_index(axis, max(a.ndim, 1))
    return (a,), (axis, None if dtype is None else np.dtype(dtype))


def nancumprod_decision(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    """``nancumprod``: local scans, one ``all_gather`` of the blocks' last rows along a sharded axis."""
    axis, dtype = key
    spec = partial_free(single_sharding(specs[0]))
    probe = _probe(lambda x: np.nancumprod(x, axis=axis, dtype=dtype), spec)
    if axis is None and spec.ndim != 1:
        return whole_decision(spec, tuple(range(spec.ndim)), [TensorMeta((math.prod(spec.shape),), probe.dtype)],
                              lambda rank, x: np.nancumprod(x, dtype=dtype))
    axis = 0 if axis is None else axis
    out = DTensorSpec(spec.mesh, spec.placements, TensorMeta(spec.shape, probe.dtype), spec.shard_order)

    def local(rank: int, x: Any) -> Any:
        return np.nancumprod(x, axis=axis, dtype=dtype)

    mesh_dims = _sharded_dims(spec, (axis,))
    if not mesh_dims:
        return Decision((spec,), (out,), local)
    groups = spec.mesh.groups(mesh_dims)

    def program(backend: Any, shards: Shards) -> Shards:
        """One ``all_gather`` of every block's last row; each rank multiplies by the rows of the ranks before it."""
        scanned = {r: np.asarray(local(r, np.asarray(x))).astype(probe.dtype, copy=False) for r, x in shards.items()}
        lasts = {}
        for r, y in scanned.items():
            row_shape = y.shape[:axis] + (1,) + y.shape[axis + 1:]
            last = y.take([-1], axis=axis) if y.shape[axis] else np.ones(row_shape, probe.dtype)
            lasts[r] = last[None]
        gathered = backend.all_gather(lasts, groups, axis=0)
        results = {}
        for r, y in scanned.items():
            group = next(g for g in groups if r in g)
            before: Optional[np.ndarray] = None
            for row in np.asarray(gathered[r])[:group.index(r)]:
                before = row if before is None else np.multiply(before, row, dtype=probe.dtype)
            results[r] = y if before is None else np.multiply(y, before, dtype=probe.dtype)
        return results

    return Decision((spec,), (out,), None, program=program)


register(np.nancumprod)(OpRule("nancumprod", _bind_nancumprod, nancumprod_decision))
