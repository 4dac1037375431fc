"""Rules for elementwise ops: every NumPy ufunc, ``where``, ``clip``, ``real``/``imag``/``round`` and the other
functions of :data:`ONE_ARRAY_ELEMENTWISE` (``fix``, ``angle``, ``i0``, ``sinc``, ``isneginf``...), ``astype`` and
``zeros_like`` & co.

Broadcasting follows :func:`pointwise_rule`.  Pending sums (``Partial``) flow
through linear ops: ``add``, ``subtract``, ``negative`` and ``positive`` when
every operand is partial, and ``multiply`` / ``divide`` when exactly one
operand (the numerator, for division) is partial and the others are
replicated on that mesh dim.  Every other op reduces pending sums first.

Example:
    >>> import numpy as np
    >>> from dtensor_np import DeviceMesh, DTensorSpec, TensorMeta, Partial, Replicate
    >>> mesh = DeviceMesh((2,))
    >>> p = DTensorSpec(mesh, (Partial(),), TensorMeta((3,), "f8"))
    >>> r = DTensorSpec(mesh, (Replicate(),), TensorMeta((3,), "f8"))
    >>> from dtensor_np.propagation import rule_for
    >>> d = rule_for(np.multiply).decide((p, r), (2, (), ()))
    >>> str(d.inputs[0]), str(d.outputs[0])
    ('P(sum)', 'P(sum)')
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, Sequence

import numpy as np

from collectives import array_module, frozen

from ..arrays import astype
from ..errors import ShardingError
from ..placements import Partial
from ..spec import DTensorSpec, TensorMeta
from .common import harmonize, partial_free, settle, settle_keeping, single_partials, single_sharding
from .einop import pointwise_equation, pointwise_rule
from ..sharded import array_operands, is_sharded
from .registry import Decision, OpRule, register

__all__ = ["elementwise_decision", "bind_operands", "foreign_ufunc_rule", "ONE_ARRAY_ELEMENTWISE"]

_ADDITIVE = {np.add, np.subtract, np.negative, np.positive}
_MULTIPLICATIVE = {np.multiply: (0, 1), np.divide: (0,), np.true_divide: (0,)}
_UFUNC_KWARGS = ("dtype", "casting")
_NUMBERS = (int, float, complex, np.number, np.bool_)


def bind_operands(operands: Sequence[Any]) -> tuple[tuple[Any, ...], tuple]:
    """Split operands into the DTensors and ``(position, scalar)`` pairs for the rest; plain arrays (ndarrays,
    lists of numbers) join as replicated constants (:func:`dtensor_np.sharded.array_operands`)."""
    tensors = []
    scalars = []
    for i, x in enumerate(array_operands(operands)):
        if is_sharded(x):
            tensors.append(x)
        elif x is None or isinstance(x, _NUMBERS) or (isinstance(x, np.ndarray) and x.dtype.kind in "biufc"):
            scalars.append((i, frozen(x)))  # None: np.clip's open bound (NumPy's ufuncs refuse it themselves)
        else:  # NumPy's TypeError family (a dict, a string, an object): never a value taken apart as a key
            raise TypeError(f"unsupported operand: expected a number, an array or a list of numbers, "
                            f"got {type(x).__name__}")
    return tuple(tensors), tuple(scalars)


def _merge(arrays: Sequence[Any], scalars: tuple, n: int) -> list[Any]:
    """The full operand list: local arrays back in the positions the DTensors had."""
    fixed = dict(scalars)
    it = iter(arrays)
    return [fixed[i] if i in fixed else next(it) for i in range(n)]


def elementwise_decision(
    specs: tuple[DTensorSpec, ...],
    local: Any,
    *,
    linear: bool = False,
    multiplicative_positions: Sequence[int] = (),
    tensor_positions: Sequence[int] = (),
    n_outputs: int = 1,
) -> Decision:
    """The decision of a broadcasting elementwise op over ``specs``."""
    first = specs[0]
    if single_sharding(first) is not first and all(
        s.placements == first.placements and s.shard_order == first.shard_order and s.shape == first.shape
        for s in specs
    ) and not any(isinstance(p, Partial) for p in first.placements):
        # Operands split the same way, a dim split over several mesh dims (a flat FSDP buffer):
        # every rank holds the same elements of each, so the op is local and keeps the split.
        return Decision(specs, (first,) * n_outputs, local, multiple_outputs=n_outputs > 1)
    specs = harmonize(pointwise_equation([s.shape for s in specs]), [single_sharding(s) for s in specs])
    allowed = [i for i, position in enumerate(tensor_positions) if position in multiplicative_positions]
    keep = single_partials(specs, allowed) if multiplicative_positions else {}
    if keep:
        inputs, out = settle_keeping(pointwise_rule, specs, keep)
    else:
        # Pending sums flow through a linear op only when every input carries them.  pointwise_rule
        # would also let a replicated input join (dividing it by the group size, as PyTorch does);
        # reducing first costs the same one collective and keeps the result exact.
        linear = linear and len({tuple(p for p in s.placements if isinstance(p, Partial)) for s in specs}) == 1
        linear = linear and len({tuple(s.sums) for s in specs}) == 1
        inputs, out = settle(lambda ss: pointwise_rule(ss, linearity=linear), specs)
    return Decision(inputs, (out,) * n_outputs, local, multiple_outputs=n_outputs > 1)


def _ufunc_rule(ufunc: np.ufunc) -> OpRule:
    def bind(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
        extra = set(kwargs) - set(_UFUNC_KWARGS)
        if extra:
            raise ShardingError(
                f"numpy.{ufunc.__name__} on DTensors supports the keywords {_UFUNC_KWARGS}, got {sorted(extra)} "
                f"(DTensors are immutable: out= is not supported)"
            )
        tensors, scalars = bind_operands(args)
        return tensors, (len(args), scalars, frozen(kwargs))

    def decide(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
        n, scalars, kw = key
        kwargs = dict(kw)
        tensor_positions = [i for i in range(n) if all(i != j for j, _ in scalars)]

        local = _ufunc_local(ufunc, scalars, n, kwargs)

        return elementwise_decision(
            specs,
            local,
            linear=ufunc in _ADDITIVE and not scalars,
            multiplicative_positions=_MULTIPLICATIVE.get(ufunc, ()),
            tensor_positions=tensor_positions,
            n_outputs=ufunc.nout,
        )

    return OpRule(ufunc.__name__, bind, decide)


def _ufunc_local(ufunc: np.ufunc, scalars: tuple, n: int, kwargs: dict) -> Any:
    """``local(rank, *arrays)``: the ufunc on the arrays with the scalars in their places (no per-call merging
    for the common forms: arrays only, or two operands of which one is a scalar)."""
    if not kwargs:
        if not scalars:
            return lambda rank, *arrays: ufunc(*arrays)
        if n == 2 and len(scalars) == 1:
            (position, value), = scalars
            if position == 1:
                return lambda rank, a: ufunc(a, value)
            return lambda rank, a: ufunc(value, a)

    def local(rank: int, *arrays: Any) -> Any:
        return ufunc(*_merge(arrays, scalars, n), **kwargs)

    return local


def _register_ufuncs() -> None:
    for f in list(vars(np).values()):  # not dir()/getattr: that imports NumPy's lazy submodules (f2py, testing: 40 ms)
        if isinstance(f, np.ufunc) and f.signature is None:
            register(f)(_ufunc_rule(f))


_register_ufuncs()

_FOREIGN: dict[np.ufunc, OpRule] = {}


def foreign_ufunc_rule(ufunc: np.ufunc) -> "OpRule | None":
    """The rule of another library's elementwise ufunc (SciPy's special functions, ``np.frompyfunc``'s, Numba's
    ``@vectorize``): NumPy's ufunc rule, on the local blocks (a ufunc without a core signature is elementwise by
    definition).  None for a generalized ufunc.  Kept apart from the registry of NumPy's own callables.

    Example:
        >>> import numpy as np
        >>> half = np.frompyfunc(lambda v: v / 2, 1, 1)
        >>> foreign_ufunc_rule(half).name, foreign_ufunc_rule(np.matmul)
        ('<lambda> (vectorized)', None)
    """
    if ufunc.signature is not None:
        return None
    rule = _FOREIGN.get(ufunc)
    if rule is None:
        rule = _FOREIGN[ufunc] = _ufunc_rule(ufunc)
    return rule


def _three_operand_rule(fn: Callable[..., Any], operands: Callable[[tuple, dict], list[Any]]) -> OpRule:
    """The rule of ``where`` or ``clip``: ``operands(args, kwargs)`` lists a call's three operands."""

    def bind(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
        tensors, scalars = bind_operands(operands(args, kwargs))
        return tensors, (3, scalars)

    def decide(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
        n, scalars = key
        static_condition = fn is np.where and any(i == 0 for i, _ in scalars)

        def local(rank: int, *a: Any) -> Any:
            operands = _merge(a, scalars, n)
            if static_condition and a[0].__class__ is not np.ndarray:  # CuPy's where takes an array condition only
                operands[0] = array_module(a[0]).asarray(operands[0])
            return fn(*operands)

        return elementwise_decision(specs, local)

    return OpRule(fn.__name__, bind, decide)


def _where_operands(args: tuple, kwargs: dict) -> list[Any]:
    operands = list(args) + [kwargs.pop(k) for k in ("x", "y") if k in kwargs]
    if len(operands) != 3 or kwargs:
        raise ShardingError("numpy.where on DTensors needs all three arguments: where(condition, x, y)")
    return operands


def _clip_operands(args: tuple, kwargs: dict) -> list[Any]:
    names = ("a", "a_min", "a_max")
    operands = list(args) + [kwargs.pop(k, None) for k in names[len(args):]]
    for alias, canonical in (("min", 1), ("max", 2)):
        if alias in kwargs:
            operands[canonical] = kwargs.pop(alias)
    if kwargs:
        raise ShardingError(f"numpy.clip on DTensors takes a, a_min, a_max; got extra {sorted(kwargs)}")
    return operands


register(np.where)(_three_operand_rule(np.where, _where_operands))
register(np.clip)(_three_operand_rule(np.clip, _clip_operands))


def _one_array_rule(fn: Callable[..., Any]) -> OpRule:
    """The rule of a NumPy function elementwise in its one array argument, the others static (``real``, ``round``)."""

    def bind(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
        if not args or not is_sharded(args[0]) or any(is_sharded(a) for a in (*args[1:], *kwargs.values())):
            raise ShardingError(f"numpy.{fn.__name__} on DTensors takes the DTensor first and static arguments after it")
        return (args[0],), (frozen(args[1:]), frozen(kwargs))

    def decide(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
        rest, kw = key
        return elementwise_decision(specs, lambda rank, a: fn(a, *rest, **dict(kw)))

    return OpRule(fn.__name__, bind, decide)


ONE_ARRAY_ELEMENTWISE = (np.real, np.imag, np.round, np.around, np.fix, np.angle, np.i0, np.sinc, np.isneginf,
                         np.isposinf, np.iscomplex, np.isreal)
"""NumPy functions (not ufuncs) elementwise in their one array argument: each runs on the local blocks, as is."""

for _fn in ONE_ARRAY_ELEMENTWISE:
    register(_fn)(_one_array_rule(_fn))


def _bind_astype(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    if kwargs or len(args) != 2:
        raise ShardingError("astype on DTensors takes a dtype only")
    return (args[0],), np.dtype(args[1])


def _decide_astype(specs: tuple[DTensorSpec, ...], dtype: Any) -> Decision:
    """Keeps shards and replicas; pending sums are reduced first (a cast is not linear)."""
    return elementwise_decision(specs, lambda rank, a: a.astype(dtype))


ASTYPE = OpRule("astype", _bind_astype, _decide_astype)
register(astype, *((np.astype,) if hasattr(np, "astype") else ()))(ASTYPE)


def _bind_like(fn: Any) -> Any:
    def bind(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
        names = ("fill_value", "dtype") if fn is np.full_like else ("dtype",)
        values = dict(zip(names, args[1:]))
        values.update(kwargs)
        if values.pop("shape", None) is not None or values.pop("order", "K") not in ("K", "C"):
            raise ShardingError(f"numpy.{fn.__name__} on DTensors keeps the array's shape (no shape=, order=)")
        values.pop("subok", None)
        value = values.pop("fill_value", None)
        dtype = values.pop("dtype", None)
        device = values.pop("device", None)
        if values:
            raise ShardingError(f"numpy.{fn.__name__} on DTensors does not support {sorted(values)}")
        return (args[0],), ((frozen(value),) if fn is np.full_like else (), None if dtype is None else np.dtype(dtype),
                            device)

    return bind


def _decide_like(fn: Any) -> Any:
    def decide(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
        extra, dtype, _ = key
        spec = specs[0]
        if fn is not np.zeros_like:  # a constant other than 0 is not the sum of its copies: reduce pending sums
            spec = partial_free(spec)
        out_dtype = spec.dtype if dtype is None else dtype
        out = DTensorSpec(spec.mesh, spec.placements, TensorMeta(spec.shape, out_dtype), spec.shard_order)
        return Decision((spec,), (out,), lambda rank, a: fn(a, *extra, dtype=dtype))

    return decide


for _fn in (np.zeros_like, np.ones_like, np.empty_like, np.full_like):
    register(_fn)(OpRule(_fn.__name__, _bind_like(_fn), _decide_like(_fn)))
