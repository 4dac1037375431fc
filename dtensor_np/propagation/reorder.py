"""Rules that reorder elements: ``sort``, ``argsort``, ``flip``, and the data-dependent ``unique`` family.

* ``sort``/``argsort`` along an unsharded axis: every rank sorts its block;
  nothing moves.  Along a sharded axis the axis is made whole
  (:func:`~.whole_axes.whole_decision`): its sharding moves to another dim
  with one ``all_to_all`` (each rank sends ``(k-1)/k`` of its block once), or,
  when no other dim can take it (a 1-d array), the axis is gathered with one
  ``all_gather`` and the result is replicated on that mesh dim.  A
  distributed sample sort would move the same bytes for 2-d arrays and more
  rounds for 1-d ones; this choice keeps NumPy's exact order (``stable=``
  included) and ``argsort``'s global indices for free.  ``axis=None`` sorts
  the flattened array: gathered, replicated.
* ``flip`` of an unsharded axis: local.  Of a sharded axis: every rank flips
  its block, then the rows that change owner move in one ``exchange``
  (counted as ``all_to_all``; :func:`~.row_moves.move_ranges`); the result
  keeps the sharding.  Every placement, ``Partial`` included, is kept.
* ``unique``, ``unique_values``, ``unique_counts``, ``unique_inverse``,
  ``unique_all``: the number of distinct values depends on the data, so these
  run eagerly only: the array is gathered (one ``all_gather``) and every rank
  computes the same replicated result, whose shape comes from the values.
  Under ``dt.trace`` they raise a ``TypeError`` (:data:`DATA_DEPENDENT_OPS`).

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.arange(5), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> with dt.comm_counter() as c:
    ...     y = np.flip(x)
    >>> y.full_tensor().tolist(), str(y.spec), c.total, c.counts["all_to_all"]
    ([4, 3, 2, 1, 0], 'S(0)', 1, 1)
"""

from __future__ import annotations

import math
from typing import Any, Callable, Hashable

import numpy as np

from collectives import array_module, frozen

from ..errors import ShardingError
from ..placements import Replicate, Shard
from ..sharded import is_sharded
from ..spec import DTensorSpec, TensorMeta
from .common import axis_tuple, partial_free, single_sharding
from .registry import Decision, OpRule, register
from .row_moves import move_ranges
from .signature_bind import named_arguments, no_more_arguments, pop_dtensor, signature_binder
from .whole_axes import whole_decision

__all__ = ["sort_decision", "flip_decision", "unique_decision", "DATA_DEPENDENT_OPS", "DATA_DEPENDENT_SHAPE",
           "data_dependent_call"]

DATA_DEPENDENT_SHAPE = ("numpy.{name} has a data-dependent output shape, which a graph cannot have (as in jax.jit): "
                        "call it eagerly on DTensors, outside dt.trace")


# -- sort / argsort ---------------------------------------------------------------

def sort_decision(spec: DTensorSpec, func: Callable[..., Any], kwargs: dict[str, Any]) -> Decision:
    """``np.sort`` or ``np.argsort`` along ``kwargs["axis"]`` (None: the flattened array) on whole axes."""
    if kwargs.get("order") is not None:
        raise ShardingError(f"numpy.{func.__name__} on DTensors: expected order=None (structured dtypes are not held), "
                            f"got {kwargs['order']!r}")
    axis = kwargs["axis"]
    dtype = np.dtype(np.intp) if func is np.argsort else spec.dtype

    def sort_block(options: dict[str, Any]) -> Callable[[int, Any], Any]:
        def local(rank: int, x: Any) -> Any:
            if x.__class__ is np.ndarray:
                return func(x, **options)
            return func(x, axis=options["axis"])  # CuPy sorts stably, and takes no kind, order or stable

        return local

    if axis is None:
        meta = TensorMeta((math.prod(spec.shape),), dtype)
        return whole_decision(spec, tuple(range(spec.ndim)), [meta], sort_block(kwargs))
    if spec.ndim == 0:
        raise ShardingError(f"numpy.{func.__name__}: expected an array of at least 1 dim for axis={axis}, got a 0-d array")
    (axis,) = axis_tuple(axis, spec.ndim)
    return whole_decision(spec, (axis,), [TensorMeta(spec.shape, dtype)], sort_block(dict(kwargs, axis=axis)))


for _func in (np.sort, np.argsort):
    register(_func)(OpRule(_func.__name__, signature_binder(_func, "numpy"),
                           lambda specs, key, _f=_func: sort_decision(specs[0], _f, dict(key))))


# -- flip -------------------------------------------------------------------------

def flip_decision(spec: DTensorSpec, axes: tuple[int, ...]) -> Decision:
    """``np.flip`` over ``axes``: local flips, one ``exchange`` per sharded flipped dim."""
    spec = single_sharding(spec)
    mesh = spec.mesh

    def local(rank: int, x: Any) -> Any:
        return np.flip(x, axes).copy()

    moves = []
    for m, p in enumerate(spec.placements):
        if isinstance(p, Shard) and p.dim in axes and mesh.shape[m] > 1:
            d, n = p.dim, spec.shape[p.dim]
            have, want = {}, {}
            for r in mesh.all_ranks:
                size, start = spec.local_block(r)[0][d], spec.local_block(r)[1][d]
                have[r] = (n - start - size, n - start)
                want[r] = (start, start + size)
            moves.append((mesh.groups((m,)), d, have, want))
    if not moves:
        return Decision((spec,), (spec,), local)

    def program(backend: Any, shards: dict[int, Any]) -> dict[int, Any]:
        """One ``exchange`` (``Alltoallv`` of the rows that change owner) per sharded flipped dim."""
        out = {r: local(r, x) for r, x in shards.items()}
        for groups, d, have, want in moves:
            out = move_ranges(backend, out, groups, d, have, want)
        return out

    return Decision((spec,), (spec,), None, program=program)


def _bind_flip(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    given = named_arguments("numpy.flip", ("m", "axis"), args, kwargs)
    m = pop_dtensor("numpy.flip", given, "m")
    axis = given.pop("axis", None)
    no_more_arguments("numpy.flip", given)
    axes = tuple(range(m.ndim)) if axis is None else axis_tuple(axis, m.ndim, lists=True)
    return (m,), tuple(sorted(axes))


register(np.flip)(OpRule("flip", _bind_flip, lambda specs, axes: flip_decision(specs[0], axes)))


# -- unique -----------------------------------------------------------------------

UNIQUE_FUNCS: tuple[Callable[..., Any], ...] = (np.unique,) + tuple(
    getattr(np, name) for name in ("unique_values", "unique_counts", "unique_inverse", "unique_all") if hasattr(np, name))
DATA_DEPENDENT_OPS: frozenset = frozenset(UNIQUE_FUNCS + (
    np.nonzero, np.flatnonzero, np.argwhere, np.extract, np.compress, np.trim_zeros, np.intersect1d, np.setdiff1d,
    np.union1d, np.setxor1d, np.roots, np.polydiv, np.linalg.lstsq, np.bincount))
"""NumPy functions whose output shapes depend on the values: eager only (``dt.trace`` refuses them)."""


def data_dependent_call(fn: Any, args: tuple, kwargs: dict, is_traced: Callable[[Any], bool]) -> bool:
    """Whether a call's output shape depends on traced values: a ``unique_*`` call, or ``repeat`` with traced repeats."""
    if fn in DATA_DEPENDENT_OPS:
        return True
    if fn is np.where:  # where(condition) alone is nonzero(condition)
        return len(args) + len(kwargs) == 1
    if fn is np.polyfit:  # full=True gives lstsq's residuals, which are there only at full rank
        return bool(args[4] if len(args) > 4 else kwargs.get("full", False))
    if fn is np.histogram or fn is np.histogram_bin_edges:  # an estimator's number of bins depends on the values
        return isinstance(args[1] if len(args) > 1 else kwargs.get("bins"), str)
    if fn is np.repeat:
        repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
        return is_traced(repeats)
    return False


def unique_decision(spec: DTensorSpec, func: Callable[..., Any], kwargs: tuple) -> Decision:
    """The input gathered (one ``all_gather``), ``func`` on the whole array on every rank, replicated results.

    The output metas' shapes are placeholders: ``data_dependent`` tells the
    dispatcher to take each result's shape from its (replicated) values.
    """
    options = dict(kwargs)
    whole = partial_free(spec).with_placements((Replicate(),) * spec.mesh.ndim)
    probe = func(np.zeros(1, spec.dtype) if spec.ndim else np.zeros((), spec.dtype), **options)
    results = probe if isinstance(probe, tuple) else (probe,)
    outs = tuple(DTensorSpec(spec.mesh, whole.placements, TensorMeta(np.shape(v), np.asarray(v).dtype)) for v in results)
    multiple = isinstance(probe, tuple)

    sorted_func = _SORTED_UNIQUE.get(func, func)

    def local(rank: int, x: Any) -> Any:
        result = sorted_func(x, **options)
        return tuple(result) if multiple else result

    return Decision((whole,), outs, local, multiple_outputs=multiple, result_type=type(probe) if multiple and type(probe) is not tuple else None,
                    data_dependent=True)


def _sorted_unique(x: Any, index: bool, inverse: bool, counts: bool) -> Any:
    """The Array API's ``unique_*`` with sorted values (NumPy 2.4 gives hash order; array-api-compat and
    array-api-strict sort, and consumers rely on it): ``np.unique`` with NaNs distinct, the inverse in ``x``'s shape."""
    found = array_module(x).unique(x, return_index=index, return_inverse=inverse, return_counts=counts,
                                   equal_nan=False)
    if not (index or inverse or counts):
        return found
    found = list(found)
    if inverse:
        where = 1 + index
        found[where] = found[where].reshape(x.shape)
    return tuple(found)


_SORTED_UNIQUE: dict[Callable[..., Any], Callable[..., Any]] = {
    getattr(np, name): (lambda x, i=i, v=v, c=c: _sorted_unique(x, i, v, c))
    for name, (i, v, c) in (("unique_values", (False, False, False)), ("unique_counts", (False, False, True)),
                            ("unique_inverse", (False, True, False)), ("unique_all", (True, True, True)))
    if hasattr(np, name)
}
"""The Array API's ``unique_*`` functions as their sorted equivalents."""


def _unique_rule(func: Callable[..., Any]) -> OpRule:
    def bind(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
        if not args or not is_sharded(args[0]):
            raise TypeError(f"numpy.{func.__name__}: expected a DTensor first, got {type(args[0]).__name__ if args else None}")
        names = ("return_index", "return_inverse", "return_counts", "axis") if func is np.unique else ()
        given = dict(zip(names, args[1:]))
        if len(args) - 1 > len(names):
            raise TypeError(f"numpy.{func.__name__}() takes {len(names) + 1} positional arguments, got {len(args)}")
        given.update(kwargs)
        if given.get("axis") is not None:
            raise ShardingError(f"numpy.unique on DTensors: expected axis=None, got {given['axis']!r}")
        return (args[0],), frozen(given)

    return OpRule(func.__name__, bind, lambda specs, key: unique_decision(specs[0], func, key))


for _func in UNIQUE_FUNCS:
    register(_func)(_unique_rule(_func))


# -- nonzero ----------------------------------------------------------------------

def nonzero_decision(spec: DTensorSpec, func: Callable[..., Any]) -> Decision:
    """``nonzero`` / ``flatnonzero`` / ``argwhere``: the input gathered (one ``all_gather``), replicated indices.

    The count of nonzeros is known only from the values, so every rank takes
    it from the whole array (eager only, like ``unique``).
    """
    whole = partial_free(spec).with_placements((Replicate(),) * spec.mesh.ndim)
    probe = func(np.zeros((1,) * max(spec.ndim, 1), spec.dtype))
    results = probe if isinstance(probe, tuple) else (probe,)
    outs = tuple(DTensorSpec(spec.mesh, whole.placements, TensorMeta(np.shape(v), np.asarray(v).dtype)) for v in results)
    multiple = isinstance(probe, tuple)
    if spec.ndim == 0:
        raise ShardingError(f"numpy.{func.__name__} on DTensors: expected an array of at least 1 dim, got a 0-d array "
                            "(NumPy deprecates it too)")

    def local(rank: int, x: Any) -> Any:
        return tuple(func(x)) if multiple else func(x)

    return Decision((whole,), outs, local, multiple_outputs=multiple, data_dependent=True)


def _nonzero_rule(func: Callable[..., Any]) -> OpRule:
    def bind(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
        if len(args) != 1 or kwargs or not is_sharded(args[0]):
            raise TypeError(f"numpy.{func.__name__}: expected one DTensor, got {len(args)} arguments and {sorted(kwargs)}")
        return (args[0],), None

    return OpRule(func.__name__, bind, lambda specs, key: nonzero_decision(specs[0], func))


for _func in (np.nonzero, np.flatnonzero, np.argwhere):
    register(_func)(_nonzero_rule(_func))


# -- searchsorted -----------------------------------------------------------------

def _bind_searchsorted(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    given = named_arguments("numpy.searchsorted", ("a", "v", "side", "sorter"), args, kwargs)
    extra = set(given) - {"a", "v", "side", "sorter"}
    if extra or "a" not in given or "v" not in given:
        raise TypeError(f"numpy.searchsorted(a, v, side='left', sorter=None): got arguments {sorted(given)}")
    side = given.get("side", "left")
    if side not in ("left", "right"):
        raise ValueError(f"numpy.searchsorted: expected side 'left' or 'right', got {side!r}")
    operands = {k: given[k] for k in ("a", "v", "sorter") if given.get(k) is not None}
    tensors = tuple(x for x in operands.values() if is_sharded(x))
    fixed = tuple((k, x) for k, x in operands.items() if not is_sharded(x))
    names = tuple(k for k, x in operands.items() if is_sharded(x))
    shapes = {k: tuple(x.shape) if hasattr(x, "shape") else np.shape(x) for k, x in operands.items()}
    if any(len(shapes[k]) != 1 for k in operands if k in ("a", "sorter")):
        raise ValueError(f"numpy.searchsorted: expected a 1-D sorted array (and sorter), got shape {shapes['a']}")
    # a constant (NumPy or CuPy) joins the key by value: the rule's local call rebuilds it on the shards' module
    constants = tuple((k, (x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype).str,
                       x.tolist() if hasattr(x, "tolist") else x) for k, x in fixed)
    return tensors, (names, frozen(constants), side)


def _decide_searchsorted(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    """``np.searchsorted(a, v)``: ``a`` (and ``sorter``) whole on every rank, ``v`` as it is: local, output like ``v``.

    A sharded ``a`` is gathered first (one ``all_gather``: the search needs the
    whole sorted array); ``v`` keeps its sharding, so a replicated ``a`` (bins,
    class priors) costs nothing.
    """
    names, fixed, side = key
    constants = {k: np.asarray(v, dtype=dtype) for k, dtype, v in fixed}
    by_name = dict(zip(names, specs))
    inputs = []
    for k, spec in by_name.items():
        spec = partial_free(spec)
        inputs.append(spec if k == "v" else spec.with_placements((Replicate(),) * spec.mesh.ndim))
    mesh = specs[0].mesh
    v_spec = dict(zip(names, inputs)).get("v")
    v_shape = v_spec.shape if v_spec is not None else np.shape(constants["v"])
    meta = TensorMeta(tuple(v_shape), np.dtype(np.intp))
    out = (DTensorSpec(mesh, v_spec.placements, meta, v_spec.shard_order) if v_spec is not None
           else DTensorSpec(mesh, (Replicate(),) * mesh.ndim, meta))

    def local(rank: int, *arrays: Any) -> Any:
        xp = array_module(arrays[0]) if arrays else np
        values = {k: xp.asarray(c) for k, c in constants.items()}
        values.update(zip(names, arrays))
        return xp.searchsorted(values["a"], values["v"], side=side, sorter=values.get("sorter"))

    return Decision(tuple(inputs), (out,), local)


register(np.searchsorted)(OpRule("searchsorted", _bind_searchsorted, _decide_searchsorted))
