"""Rules for reductions: ``sum``, ``mean``, ``max``/``amax``, ``min``/``amin``, ``prod``, ``any``, ``all``,
and their ``ufunc.reduce`` spellings (``np.add.reduce`` is a sum, and so on).

Reducing a sharded dim leaves each rank with a partial result, so the output
is ``Partial`` of the matching op on that mesh dim (sum -> sum, max -> max,
min -> min, any -> max, all -> min; ``mean`` divides each rank's local sum
by the *global* count, so uneven shards give the exact mean).  ``prod``
has no Partial op: each rank multiplies its block, one ``all_gather`` of
those products (the size of the result on each rank) and their product
give the replicated result.  A rank whose shard
of a reduced dim is empty contributes the op's identity.

``dtype=`` is NumPy's: every element is cast to it before it is reduced.
That is what each rank does to its shard, so sharded dims stay exact for
every dtype pair; but a cast of a *pending* value is not linear
(``np.sum(x, dtype=np.int8)`` of a float ``Partial(sum)`` truncates the sum,
not the partial values), so a pending reduction flows through only when the
result keeps the input's dtype: pending sums through ``sum`` and ``mean``,
pending max/min through ``max``/``min``.  Otherwise it is reduced first.  An
integer or bool ``mean`` truncates its quotient, which per-shard sums cannot
do, so its reduced dims are gathered first and NumPy computes it whole.

The output dtype is NumPy's own, found on a one-element array before
anything moves, so a dtype NumPy refuses raises its error on every rank.

Example:
    >>> import numpy as np
    >>> from dtensor_np import DeviceMesh, DTensorSpec, TensorMeta, Shard
    >>> from dtensor_np.propagation import rule_for
    >>> spec = DTensorSpec(DeviceMesh((2,)), (Shard(0),), TensorMeta((5, 3), "f8"))
    >>> d = rule_for(np.sum).decide((spec,), ("sum", (0,), False, None, None))
    >>> str(d.outputs[0]), d.outputs[0].shape
    ('P(sum)', (3,))
    >>> d = rule_for(np.mean).decide((spec,), ("mean", (0,), False, np.dtype("int64"), None))
    >>> str(d.inputs[0]), str(d.outputs[0]), d.outputs[0].dtype
    ('R', 'R', dtype('int64'))
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any, Callable, Hashable, Optional

import numpy as np

from collectives import array_module

from ..errors import ShardingError
from ..placements import Partial, Placement, Replicate, Shard
from ..sharded import is_sharded
from ..spec import DTensorSpec, TensorMeta
from .common import keepdims_flag, normalize_axes, single_sharding
from .registry import Decision, OpRule, register

__all__ = ["reduction_decision", "REDUCTIONS", "UFUNC_REDUCE", "ufunc_reduce_rule"]

# reduction -> the Partial op of a reduced sharded dim (None: must replicate first)
REDUCTIONS: dict[str, Optional[str]] = {
    "sum": "sum",
    "mean": "sum",
    "max": "max",
    "min": "min",
    "prod": None,
    "any": "max",
    "all": "min",
}
# pending reductions each reduction lets through (when it keeps the input's dtype)
_PASSES = {"sum": ("sum", "avg"), "mean": ("sum", "avg"), "max": ("max",), "min": ("min",)}
_FUNCS = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod, "any": np.any, "all": np.all}
_DIRECT = {"sum": np.add.reduce, "prod": np.multiply.reduce, "max": np.maximum.reduce, "min": np.minimum.reduce}
# ufunc.reduce spellings: np.add.reduce(x, axis) is a sum, and so on.
UFUNC_REDUCE = {np.add: "sum", np.maximum: "max", np.minimum: "min", np.multiply: "prod", np.logical_or: "any", np.logical_and: "all"}
# dtype kinds a DTensor cannot hold (object, strings, void, datetimes)
_UNMOVABLE_KINDS = "OSUVMm"

Reduce = Callable[..., Any]


def _identity(kind: str, dtype: np.dtype) -> Any:
    if dtype.kind == "b":
        return kind == "min"
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min if kind == "max" else info.max
    return -np.inf if kind == "max" else np.inf


def _numpy_reduce(kind: str, axes: Optional[tuple[int, ...]], keepdims: bool, dtype: Optional[np.dtype], ufunc: Optional[np.ufunc]) -> Reduce:
    """``f(x, initial=None)``: the reduction as the caller spelled it (``np.sum`` or ``np.add.reduce``), on one array."""
    options: dict[str, Any] = {"axis": axes, "keepdims": keepdims}
    if dtype is not None:
        options["dtype"] = dtype
    run = _FUNCS[kind] if ufunc is None else ufunc.reduce
    # np.sum/prod/max/min of an ndarray is exactly this ufunc's reduce, without fromnumeric's Python wrapper
    direct = _DIRECT.get(kind, run) if ufunc is None else run
    ndarray = np.ndarray

    def reduce(x: Any, initial: Any = None) -> Any:
        f = direct if x.__class__ is ndarray else run
        return f(x, **options) if initial is None else f(x, initial=initial, **options)

    return reduce


def _result_dtype(reduce: Reduce, spec: DTensorSpec, name: str) -> np.dtype:
    """NumPy's output dtype for ``spec``'s dtype, from a one-element array (NumPy's TypeError if it refuses)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # e.g. ComplexWarning: the real call warns as NumPy does
        dtype = np.asarray(reduce(np.zeros((1,) * spec.ndim, spec.dtype))).dtype
    if dtype.kind in _UNMOVABLE_KINDS:
        raise TypeError(
            f"numpy.{name} on DTensors: the result would have dtype {dtype}; "
            f"expected a numeric or bool dtype= that a DTensor can hold"
        )
    return dtype


def reduction_decision(
    spec: DTensorSpec,
    kind: str,
    axes: Optional[tuple[int, ...]],
    keepdims: bool,
    dtype: Optional[np.dtype] = None,
    ufunc: Optional[np.ufunc] = None,
) -> Decision:
    """The decision of reduction ``kind`` over ``axes`` (None: all dims), with NumPy's ``dtype=``.

    ``ufunc`` is set for the ``ufunc.reduce`` spelling, which each rank then calls.
    """
    spec = single_sharding(spec)
    ndim = spec.ndim
    reduced = tuple(range(ndim)) if axes is None else axes
    mesh = spec.mesh
    reduce = _numpy_reduce(kind, axes, keepdims, dtype, ufunc)
    out_dtype = _result_dtype(reduce, spec, kind if ufunc is None else f"{ufunc.__name__}.reduce")
    if any(spec.shape[a] == 0 for a in reduced) and kind in ("max", "min"):
        raise ValueError(f"zero-size array to reduction operation {kind}imum which has no identity")
    partial_op = REDUCTIONS[kind]
    if kind == "mean" and out_dtype.kind not in "fc":
        partial_op = None  # an integer or bool mean truncates: per-shard quotients do not add up to it
    passes = _PASSES.get(kind, ()) if partial_op is not None and out_dtype == spec.dtype else ()

    inputs: list[Placement] = []
    outputs: list[Placement] = []
    sharded_reduced: list[int] = []
    gathered_products: list[int] = []  # prod: mesh dims whose ranks' partial products are gathered
    for m, p in enumerate(spec.placements):
        if isinstance(p, Shard) and p.dim in reduced and kind == "prod" and mesh.shape[m] > 1:
            inputs.append(p)
            outputs.append(Replicate())
            gathered_products.append(m)
        elif isinstance(p, Shard) and p.dim in reduced:
            if partial_op is None:
                inputs.append(Replicate())
                outputs.append(Replicate())
            else:
                inputs.append(p)
                outputs.append(Partial(partial_op))
                sharded_reduced.append(m)
        elif isinstance(p, Shard):
            new_dim = p.dim if keepdims else p.dim - sum(1 for a in reduced if a < p.dim)
            inputs.append(p)
            outputs.append(Shard(new_dim))
        elif isinstance(p, Partial) and p.reduce_op in passes:
            inputs.append(p)
            outputs.append(p)
        else:
            inputs.append(Replicate())
            outputs.append(Replicate())

    in_spec = DTensorSpec(mesh, tuple(inputs), spec.tensor_meta)
    out_shape = _reduced_shape(spec.shape, reduced, keepdims)
    out_spec = DTensorSpec(mesh, tuple(outputs), TensorMeta(out_shape, out_dtype))

    if gathered_products:
        groups = mesh.groups(tuple(gathered_products))

        def program(backend: Any, shards: dict[int, Any]) -> dict[int, Any]:
            """One ``all_gather`` of every rank's product of its block (the size of the result a rank), then
            their product: never the input."""
            parts = {r: reduce(x)[None] for r, x in shards.items()}
            gathered = backend.all_gather(parts, groups, axis=0)
            return {r: array_module(g).multiply.reduce(g, axis=0, dtype=out_dtype) for r, g in gathered.items()}

        return Decision((in_spec,), (out_spec,), None, program=program)

    if kind == "mean" and sharded_reduced:
        count = 1
        for a in reduced:
            count *= spec.shape[a]
        acc = np.dtype(np.float32) if out_dtype == np.float16 else out_dtype  # as np.mean sums float16

        def local(rank: int, x: Any) -> Any:
            total = np.sum(x, axis=axes, keepdims=keepdims, dtype=acc)
            return np.true_divide(total, count).astype(out_dtype)

        return Decision((in_spec,), (out_spec,), local)

    if kind in ("max", "min") and sharded_reduced:
        identity = _identity(kind, out_dtype)

        empty: dict[int, bool] = {}  # rank -> its block has nothing to reduce (worked out once)

        def local(rank: int, x: Any) -> Any:
            nothing = empty.get(rank)
            if nothing is None:
                local_shape = in_spec.local_shape_of_rank(rank)
                nothing = empty[rank] = any(local_shape[a] == 0 for a in reduced)
            if not nothing:
                return reduce(x)
            if x.__class__ is np.ndarray:
                return reduce(x, initial=identity)
            # CuPy's max and min take no initial: the identity itself, in the block's library
            return array_module(x).full(_reduced_shape(x.shape, reduced, keepdims), identity, dtype=out_dtype)

        return Decision((in_spec,), (out_spec,), local)

    return Decision((in_spec,), (out_spec,), lambda rank, x: reduce(x))


def _reduced_shape(shape: tuple[int, ...], reduced: Any, keepdims: bool) -> tuple[int, ...]:
    """``shape`` after reducing the axes ``reduced`` (kept as 1 with ``keepdims``)."""
    return tuple(1 if i in reduced else s for i, s in enumerate(shape) if keepdims or i not in reduced)


def _reduction_key(kind: str, name: str, a: Any, axis: Any, keepdims: Any, dtype: Any, ufunc: Optional[np.ufunc]) -> Hashable:
    """The cache key of a reduction call, its arguments checked as NumPy checks them (before anything moves)."""
    if not is_sharded(a):
        raise TypeError(f"numpy.{name}: expected a DTensor to reduce, got {type(a).__name__}")
    # np.mean counts the items of every axis, so it refuses axis=0 of a 0-d array; the others take it.
    # NumPy's ufunc reductions parse dtype= and keepdims= before they look at the axes; np.mean counts the axes' items
    # first (an axis out of range raises there), then reduces (dtype=, keepdims=, then a repeated axis raise there)
    if kind != "mean":
        wanted, flag = None if dtype is None else np.dtype(dtype), keepdims_flag(keepdims)
        return (kind, normalize_axes(axis, a.spec.ndim, legacy_0d=True), flag, wanted, ufunc)
    try:
        axes = normalize_axes(axis, a.spec.ndim, legacy_0d=False)
    except np.exceptions.AxisError:
        raise
    except (TypeError, ValueError):
        if dtype is not None:
            np.dtype(dtype)  # dtype='foo' and keepdims='yes' raise NumPy's errors first
        keepdims_flag(keepdims)
        raise
    return (kind, axes, keepdims_flag(keepdims), None if dtype is None else np.dtype(dtype), ufunc)


def _decide(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    return reduction_decision(specs[0], *key)


def _reduction_rule(kind: str) -> OpRule:
    func = _FUNCS[kind]
    signature = inspect.signature(func)

    def bind(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
        given = dict(signature.bind(*args, **kwargs).arguments)
        a = given.pop("a")
        axis = given.pop("axis", None)
        keepdims = given.pop("keepdims", False)
        dtype = given.pop("dtype", None)
        for name, value in given.items():
            if value is not None and value is not np._NoValue:  # type: ignore[attr-defined]
                raise ShardingError(f"numpy.{func.__name__} on DTensors does not support {name}=")
        return (a,), _reduction_key(kind, func.__name__, a, axis, keepdims, dtype, None)

    return OpRule(kind, bind, _decide)


for _kind in REDUCTIONS:
    register(_FUNCS[_kind], *((np.amax,) if _kind == "max" else (np.amin,) if _kind == "min" else ()))(
        _reduction_rule(_kind)
    )

_REDUCE_PARAMETERS = ("array", "axis", "dtype", "out", "keepdims", "initial", "where")


def ufunc_reduce_rule(ufunc: np.ufunc) -> OpRule:
    """The rule for ``ufunc.reduce`` (only the ufuncs in ``UFUNC_REDUCE``)."""
    kind = UFUNC_REDUCE.get(ufunc)
    if kind is None:
        raise ShardingError(f"no sharding rule for numpy.{ufunc.__name__}.reduce")
    name = f"{ufunc.__name__}.reduce"

    def bind(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
        given = dict(zip(_REDUCE_PARAMETERS, args))
        for key, value in kwargs.items():
            if key in given:
                raise TypeError(f"numpy.{name}: argument {key!r} given by position and by keyword")
            given[key] = value
        a = given.pop("array", None)
        axis = given.pop("axis", 0)
        keepdims = given.pop("keepdims", False)
        dtype = given.pop("dtype", None)
        if any(v is not None and v is not np._NoValue for v in given.values()):  # type: ignore[attr-defined]
            raise ShardingError(f"numpy.{name} on DTensors does not support {sorted(given)}")
        return (a,), _reduction_key(kind, name, a, axis, keepdims, dtype, ufunc)

    return OpRule(name, bind, _decide)
