"""Rules for reductions: ``sum``, ``mean``, ``max``/``amax``, ``min``/``amin``, ``prod``, ``any``, ``all``.

Reducing a sharded dim leaves each rank with a partial result, so the output
is ``Partial`` of the matching op on that mesh dim (sum -> sum, max -> max,
min -> min, any -> max, all -> min; ``mean`` divides each rank's local sum
by the *global* count, so uneven shards give the exact mean).  ``prod``
has no Partial op and replicates the reduced dims first.  Pending sums flow
through ``sum`` and ``mean`` (they are linear); pending max/min flow through
``max``/``min``.  A rank whose shard of a reduced dim is empty contributes
the op's identity.

Example:
    >>> import numpy as np
    >>> from dtensor_np import DeviceMesh, DTensorSpec, TensorMeta, Shard
    >>> spec = DTensorSpec(DeviceMesh((2,)), (Shard(0),), TensorMeta((5, 3), "f8"))
    >>> d = rule_for(np.sum).decide((spec,), ("sum", (0,), False, None))
    >>> str(d.outputs[0]), d.outputs[0].shape
    ('P(sum)', (3,))
"""

from __future__ import annotations

import inspect
from typing import Any, Hashable, Optional

import numpy as np

from ..errors import ShardingError
from ..placements import Partial, Placement, Replicate, Shard
from ..spec import DTensorSpec, TensorMeta
from .common import freeze, normalize_axes, single_sharding
from .registry import Decision, OpRule, register, rule_for

__all__ = ["reduction_decision", "REDUCTIONS"]

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
# pending reductions each reduction lets through
_PASSES = {"sum": ("sum", "avg"), "mean": ("sum", "avg"), "max": ("max",), "min": ("min",)}
_FUNCS = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod, "any": np.any, "all": np.all}


def _identity(kind: str, dtype: np.dtype) -> Any:
    if dtype.kind == "b":
        return kind == "min"
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min if kind == "max" else info.max
    return -np.inf if kind == "max" else np.inf


def _mean_dtype(dtype: np.dtype, requested: Any) -> np.dtype:
    """The dtype np.mean returns: float64 for integers and bools, else the input's (or the requested one)."""
    if requested is not None:
        return np.dtype(requested)
    return np.dtype(np.float64) if dtype.kind in "iub" else dtype


def reduction_decision(spec: DTensorSpec, kind: str, axes: Optional[tuple[int, ...]], keepdims: bool, dtype: Any) -> Decision:
    """The decision of reduction ``kind`` over ``axes`` (None: all dims)."""
    spec = single_sharding(spec)
    ndim = spec.ndim
    reduced = tuple(range(ndim)) if axes is None else axes
    mesh = spec.mesh
    partial_op = REDUCTIONS[kind]
    if any(spec.shape[a] == 0 for a in reduced) and kind in ("max", "min"):
        raise ValueError(f"zero-size array to reduction operation {kind}imum which has no identity")

    inputs: list[Placement] = []
    outputs: list[Placement] = []
    sharded_reduced: list[int] = []
    for m, p in enumerate(spec.placements):
        if isinstance(p, Shard) and p.dim in reduced:
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
        elif isinstance(p, Partial) and p.reduce_op in _PASSES.get(kind, ()):
            inputs.append(p)
            outputs.append(p)
        else:
            inputs.append(Replicate())
            outputs.append(Replicate())

    in_spec = DTensorSpec(mesh, tuple(inputs), spec.tensor_meta)
    out_shape = tuple(1 if i in reduced else s for i, s in enumerate(spec.shape) if keepdims or i not in reduced)
    out_spec = DTensorSpec(mesh, tuple(outputs), TensorMeta(out_shape, spec.dtype))
    axis_arg = None if axes is None else axes
    func = _FUNCS[kind]
    extra = {} if dtype is None else {"dtype": dtype}

    if kind == "mean" and sharded_reduced:
        count = 1
        for a in reduced:
            count *= spec.shape[a]

        def local(rank: int, x: Any) -> Any:
            out_dtype = _mean_dtype(x.dtype, dtype)
            acc = np.float32 if out_dtype == np.float16 else out_dtype
            total = np.sum(x, axis=axis_arg, keepdims=keepdims, dtype=acc)
            return np.true_divide(total, count).astype(out_dtype)

        return Decision((in_spec,), (out_spec,), local)

    if kind in ("max", "min") and sharded_reduced:

        def local(rank: int, x: Any) -> Any:
            local_shape = in_spec.local_shape_of_rank(rank)
            if any(local_shape[a] == 0 for a in reduced):
                return func(x, axis=axis_arg, keepdims=keepdims, initial=_identity(kind, x.dtype))
            return func(x, axis=axis_arg, keepdims=keepdims)

        return Decision((in_spec,), (out_spec,), local)

    return Decision((in_spec,), (out_spec,), lambda rank, x: func(x, axis=axis_arg, keepdims=keepdims, **extra))


def _reduction_rule(kind: str) -> OpRule:
    func = _FUNCS[kind]
    signature = inspect.signature(func)

    def bind(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
        bound = signature.bind(*args, **kwargs)
        given = dict(bound.arguments)
        a = given.pop("a")
        axis = given.pop("axis", None)
        keepdims = bool(given.pop("keepdims", False))
        dtype = given.pop("dtype", None)
        for name, value in given.items():
            if value is not None and value is not np._NoValue:  # type: ignore[attr-defined]
                raise ShardingError(f"numpy.{func.__name__} on DTensors does not support {name}=")
        return (a,), (kind, freeze(axis), keepdims, None if dtype is None else np.dtype(dtype))

    def decide(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
        kind_, axis, keepdims, dtype = key
        return reduction_decision(specs[0], kind_, normalize_axes(axis, specs[0].ndim), keepdims, dtype)

    return OpRule(kind, bind, decide)


for _kind in REDUCTIONS:
    register(_FUNCS[_kind], *((np.amax,) if _kind == "max" else (np.amin,) if _kind == "min" else ()))(
        _reduction_rule(_kind)
    )

# ufunc.reduce spellings: np.add.reduce(x, axis) is a sum, and so on.
UFUNC_REDUCE = {np.add: "sum", np.maximum: "max", np.minimum: "min", np.multiply: "prod", np.logical_or: "any", np.logical_and: "all"}


def ufunc_reduce_rule(ufunc: np.ufunc) -> OpRule:
    """The rule for ``ufunc.reduce`` (only the ufuncs in ``UFUNC_REDUCE``)."""
    kind = UFUNC_REDUCE.get(ufunc)
    if kind is None:
        raise ShardingError(f"no sharding rule for numpy.{ufunc.__name__}.reduce")

    def bind(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
        axis = kwargs.pop("axis", args[1] if len(args) > 1 else 0)
        keepdims = bool(kwargs.pop("keepdims", False))
        dtype = kwargs.pop("dtype", None)
        if kwargs:
            raise ShardingError(f"numpy.{ufunc.__name__}.reduce on DTensors does not support {sorted(kwargs)}")
        return (args[0],), (kind, freeze(axis), keepdims, None if dtype is None else np.dtype(dtype))

    return OpRule(f"{ufunc.__name__}.reduce", bind, rule_for(_FUNCS[kind]).decide)
