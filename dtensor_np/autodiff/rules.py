"""Vector-Jacobian product rules: for each NumPy primitive, the cotangents of its inputs from its output's.

A rule is written in plain NumPy, so the backward pass is traced like any
program: ``rule(call, out, ct)`` gets the call (its arguments with values),
the forward output and the output's cotangent, and returns a mapping from the
position of each differentiable argument in the call to its cotangent.  A
position is a path into the arguments: ``(0,)`` is the first positional
argument, ``("axis",)`` a keyword, ``(0, 2)`` the third item of the first
argument (``np.concatenate([a, b, c])``).  Non-differentiable primitives
(comparisons, ``sign``, ``floor``...) have no rule and pass no gradient.

Every rule uses only operations with sharding rules (no ``np.ones_like`` of a
sharded array, no gathers), so a backward pass shards like its forward pass.

Example:
    >>> import numpy as np
    >>> call = Call(np.multiply, "__call__", (np.array([2.0, 3.0]), np.array([4.0, 5.0])), {})
    >>> {k: v.tolist() for k, v in vjp_rule(np.multiply)(call, None, np.ones(2)).items()}
    {(0,): [4.0, 5.0], (1,): [2.0, 3.0]}
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from ..arrays import array_function, astype
from ..propagation.contraction import dot_equation, einsum_equation, tensordot_equation

__all__ = ["Call", "VJP_RULES", "ZERO_GRADIENT", "defvjp", "index_add", "vjp_rule", "unbroadcast", "broadcast_like"]

Cotangents = dict[tuple[Any, ...], Any]


@dataclass(frozen=True)
class Call:
    """One forward call: the primitive, its ufunc method, and its arguments with values in place."""

    fn: Any
    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def arg(self, index: int, name: str, default: Any = None) -> Any:
        """Positional argument ``index`` or keyword ``name``."""
        if index < len(self.args):
            return self.args[index]
        return self.kwargs.get(name, default)


Rule = Callable[[Call, Any, Any], Cotangents]
VJP_RULES: dict[tuple[Any, str], Rule] = {}

ZERO_GRADIENT = frozenset(
    getattr(np, name) for name in (
        "sign", "floor", "ceil", "trunc", "rint", "round", "around", "fix", "isnan", "isinf", "isfinite",
        "signbit", "argmax", "argmin", "argsort", "nonzero", "floor_divide", "remainder", "fmod",
        "zeros_like", "ones_like", "empty_like", "full_like", "shape", "size",
    ) if hasattr(np, name)
)
"""Primitives whose derivative is zero wherever it exists (or whose output is an index): no gradient flows."""


def defvjp(*fns: Any, method: str = "__call__") -> Callable[[Rule], Rule]:
    """Register ``rule`` as the VJP of NumPy callables ``fns`` (ufunc ``method``)."""

    def add(rule: Rule) -> Rule:
        for fn in fns:
            VJP_RULES[(fn, method)] = rule
        return rule

    return add


def vjp_rule(fn: Any, method: str = "__call__") -> Optional[Rule]:
    """The VJP rule of a primitive, or None when it passes no gradient."""
    return VJP_RULES.get((fn, method))


def _is_array(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, np.generic)


def broadcast_like(g: Any, x: Any) -> Any:
    """``g`` broadcast to ``x``'s shape (with an elementwise ``where``, which every sharding keeps local)."""
    return np.where(True, g, x) if tuple(np.shape(g)) != tuple(x.shape) else g


def unbroadcast(g: Any, shape: tuple[int, ...]) -> Any:
    """``g`` summed over the dims that broadcasting added or stretched to reach its shape from ``shape``."""
    if tuple(g.shape) == tuple(shape):
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape) if n == 1 and g.shape[lead + i] != 1)
    if axes:
        g = np.sum(g, axis=axes, keepdims=True)
    if lead:
        g = g.reshape(shape)
    return g


def _each(call: Call, grads: dict[int, Any]) -> Cotangents:
    """Cotangents of the positional array arguments, unbroadcast to their shapes."""
    return {(i,): unbroadcast(g, call.args[i].shape) for i, g in grads.items() if _is_array(call.args[i])}


def _binary(grad_a: Callable[..., Any], grad_b: Callable[..., Any]) -> Rule:
    def rule(call: Call, out: Any, ct: Any) -> Cotangents:
        a, b = call.args[:2]
        return _each(call, {0: grad_a(a, b, out, ct), 1: grad_b(a, b, out, ct)})

    return rule


def _unary(grad: Callable[[Any, Any, Any], Any]) -> Rule:
    def rule(call: Call, out: Any, ct: Any) -> Cotangents:
        return {(0,): grad(call.args[0], out, ct)}

    return rule


defvjp(np.add)(_binary(lambda a, b, o, ct: ct, lambda a, b, o, ct: ct))
defvjp(np.subtract)(_binary(lambda a, b, o, ct: ct, lambda a, b, o, ct: -ct))
defvjp(np.multiply)(_binary(lambda a, b, o, ct: ct * b, lambda a, b, o, ct: ct * a))
defvjp(np.true_divide)(_binary(lambda a, b, o, ct: ct / b, lambda a, b, o, ct: -ct * a / (b * b)))
defvjp(np.power)(_binary(lambda a, b, o, ct: ct * b * a ** (b - 1),
                         lambda a, b, o, ct: ct * o * np.log(np.where(a > 0, a, 1))))
defvjp(np.maximum)(_binary(lambda a, b, o, ct: ct * (a >= b), lambda a, b, o, ct: ct * (a < b)))
defvjp(np.minimum)(_binary(lambda a, b, o, ct: ct * (a <= b), lambda a, b, o, ct: ct * (a > b)))
defvjp(np.logaddexp)(_binary(lambda a, b, o, ct: ct * np.exp(a - o), lambda a, b, o, ct: ct * np.exp(b - o)))
defvjp(np.arctan2)(_binary(lambda a, b, o, ct: ct * b / (a * a + b * b), lambda a, b, o, ct: -ct * a / (a * a + b * b)))
defvjp(np.negative)(_unary(lambda a, o, ct: -ct))
defvjp(np.positive)(_unary(lambda a, o, ct: ct))
defvjp(np.exp)(_unary(lambda a, o, ct: ct * o))
defvjp(np.exp2)(_unary(lambda a, o, ct: ct * o * np.log(2.0)))
defvjp(np.expm1)(_unary(lambda a, o, ct: ct * (o + 1)))
defvjp(np.log)(_unary(lambda a, o, ct: ct / a))
defvjp(np.log2)(_unary(lambda a, o, ct: ct / (a * np.log(2.0))))
defvjp(np.log10)(_unary(lambda a, o, ct: ct / (a * np.log(10.0))))
defvjp(np.log1p)(_unary(lambda a, o, ct: ct / (a + 1)))
defvjp(np.sqrt)(_unary(lambda a, o, ct: ct * 0.5 / o))
defvjp(np.cbrt)(_unary(lambda a, o, ct: ct / (3 * o * o)))
defvjp(np.square)(_unary(lambda a, o, ct: ct * 2 * a))
defvjp(np.reciprocal)(_unary(lambda a, o, ct: -ct * o * o))
defvjp(np.absolute)(_unary(lambda a, o, ct: ct * np.sign(a)))
defvjp(np.sin)(_unary(lambda a, o, ct: ct * np.cos(a)))
defvjp(np.cos)(_unary(lambda a, o, ct: -ct * np.sin(a)))
defvjp(np.tan)(_unary(lambda a, o, ct: ct * (1 + o * o)))
defvjp(np.tanh)(_unary(lambda a, o, ct: ct * (1 - o * o)))
defvjp(np.sinh)(_unary(lambda a, o, ct: ct * np.cosh(a)))
defvjp(np.cosh)(_unary(lambda a, o, ct: ct * np.sinh(a)))
defvjp(np.arctan)(_unary(lambda a, o, ct: ct / (1 + a * a)))
defvjp(np.arcsin)(_unary(lambda a, o, ct: ct / np.sqrt(1 - a * a)))
defvjp(np.arccos)(_unary(lambda a, o, ct: -ct / np.sqrt(1 - a * a)))
defvjp(np.arcsinh)(_unary(lambda a, o, ct: ct / np.sqrt(a * a + 1)))
defvjp(np.arctanh)(_unary(lambda a, o, ct: ct / (1 - a * a)))


@defvjp(np.where)
def _where(call: Call, out: Any, ct: Any) -> Cotangents:
    cond, x, y = (call.arg(i, n) for i, n in enumerate(("condition", "x", "y")))
    grads = {}
    if _is_array(x):
        grads[(1,)] = unbroadcast(np.where(cond, ct, 0), x.shape)
    if _is_array(y):
        grads[(2,)] = unbroadcast(np.where(cond, 0, ct), y.shape)
    return grads


@defvjp(np.clip)
def _clip(call: Call, out: Any, ct: Any) -> Cotangents:
    a, lo, hi = call.arg(0, "a"), call.arg(1, "a_min"), call.arg(2, "a_max")
    inside = ct
    if lo is not None:
        inside = np.where(a >= lo, inside, 0)
    if hi is not None:
        inside = np.where(a <= hi, inside, 0)
    return {(0,): inside}


@defvjp(astype, *((np.astype,) if hasattr(np, "astype") else ()))
def _astype(call: Call, out: Any, ct: Any) -> Cotangents:
    return {(0,): ct.astype(call.args[0].dtype)}


# -- contractions ---------------------------------------------------------------------------


def _einsum_grads(equation: str, operands: tuple[Any, ...], ct: Any) -> list[Any]:
    """The cotangent of every operand of ``einsum(equation, *operands)`` (explicit output, no ellipsis)."""
    inputs, output = equation.replace(" ", "").split("->")
    terms = inputs.split(",")
    grads = []
    for i, term in enumerate(terms):
        others = [t for j, t in enumerate(terms) if j != i]
        seen = set(output).union(*others)
        kept = "".join(c for c in term if c in seen)
        g = np.einsum(f"{','.join([output] + others)}->{kept}", ct, *[operands[j] for j in range(len(terms)) if j != i])
        if kept != term:  # a dim only this operand has: summed away, so its cotangent is the same along it
            g = g.reshape([operands[i].shape[term.index(c)] if c in kept else 1 for c in term])
            g = broadcast_like(g, operands[i])
        grads.append(g)
    return grads


@defvjp(np.einsum)
def _einsum(call: Call, out: Any, ct: Any) -> Cotangents:
    subscripts, operands = call.args[0], call.args[1:]
    equation = einsum_equation(subscripts, [x.shape for x in operands])
    if "1" in equation:
        raise TypeError(f"einsum {subscripts!r}: differentiating a broadcast ellipsis is not supported")
    return {(i + 1,): g for i, g in enumerate(_einsum_grads(equation, operands, ct))}


@defvjp(np.dot)
def _dot(call: Call, out: Any, ct: Any) -> Cotangents:
    a, b = call.args
    if a.ndim == 0 or b.ndim == 0:
        return _each(call, {0: ct * b, 1: ct * a})
    grads = _einsum_grads(dot_equation(a.shape, b.shape), (a, b), ct)
    return {(0,): grads[0], (1,): grads[1]}


@defvjp(np.tensordot)
def _tensordot(call: Call, out: Any, ct: Any) -> Cotangents:
    a, b = call.args[:2]
    grads = _einsum_grads(tensordot_equation(a.shape, b.shape, call.arg(2, "axes", 2)), (a, b), ct)
    return {(0,): grads[0], (1,): grads[1]}


@defvjp(np.outer)
def _outer(call: Call, out: Any, ct: Any) -> Cotangents:
    a, b = call.args
    return {(0,): ct @ b, (1,): a @ ct}


@defvjp(np.matmul)
def _matmul(call: Call, out: Any, ct: Any) -> Cotangents:
    a, b = call.args
    a2 = a if a.ndim > 1 else np.expand_dims(a, 0)
    b2 = b if b.ndim > 1 else np.expand_dims(b, -1)
    ct2 = ct
    if b.ndim == 1:
        ct2 = np.expand_dims(ct2, -1)
    if a.ndim == 1:
        ct2 = np.expand_dims(ct2, -2)
    ga = ct2 @ np.swapaxes(b2, -1, -2)
    gb = np.swapaxes(a2, -1, -2) @ ct2
    return {(0,): unbroadcast(ga, a2.shape).reshape(a.shape), (1,): unbroadcast(gb, b2.shape).reshape(b.shape)}


# -- reductions -----------------------------------------------------------------------------


def _axes(call: Call, ndim: int) -> tuple[int, ...]:
    axis = call.arg(1, "axis")
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    return tuple(sorted(int(a) % max(ndim, 1) for a in axes))


def _expand(g: Any, call: Call, ndim: int) -> Any:
    """A reduction's cotangent with the reduced dims put back (size 1), unless keepdims kept them."""
    if call.arg(3 if call.fn in (np.sum, np.mean, np.prod) else 2, "keepdims", False) or not ndim:
        return g
    return np.expand_dims(g, _axes(call, ndim))


@defvjp(np.sum)
def _sum(call: Call, out: Any, ct: Any) -> Cotangents:
    a = call.args[0]
    return {(0,): broadcast_like(_expand(ct, call, a.ndim), a).astype(a.dtype)}


@defvjp(np.mean)
def _mean(call: Call, out: Any, ct: Any) -> Cotangents:
    a = call.args[0]
    count = int(np.prod([a.shape[i] for i in _axes(call, a.ndim)], dtype=np.int64))
    return {(0,): broadcast_like(_expand(ct, call, a.ndim) / count, a).astype(a.dtype)}


def _extremum(call: Call, out: Any, ct: Any) -> Cotangents:
    """max/min: the cotangent goes to the elements equal to the result, shared among ties (as JAX)."""
    a = call.args[0]
    hit = (a == _expand(out, call, a.ndim)).astype(a.dtype)
    share = hit / np.sum(hit, axis=_axes(call, a.ndim), keepdims=True)
    return {(0,): share * _expand(ct, call, a.ndim)}


defvjp(np.max, np.amax)(_extremum)
defvjp(np.min, np.amin)(_extremum)


@defvjp(np.prod)
def _prod(call: Call, out: Any, ct: Any) -> Cotangents:
    a = call.args[0]
    return {(0,): _expand(ct * out, call, a.ndim) / a}


# -- indexing -------------------------------------------------------------------------------


@array_function
def index_add(base: Any, index: Any, values: Any) -> Any:
    """A copy of ``base`` with ``values`` added at ``index`` (``np.add.at``: repeated indices add up).

    The cotangent of ``x[index]`` is ``index_add(zeros like x, index, ct)``.

    Example:
        >>> index_add(np.zeros(3), [0, 0, 2], np.ones(3)).tolist()
        [2.0, 0.0, 1.0]
    """
    out = np.array(base, copy=True)
    np.add.at(out, index, values)
    return out


@defvjp(operator.getitem)
def _getitem(call: Call, out: Any, ct: Any) -> Cotangents:
    a, index = call.args
    return {(0,): index_add(np.zeros(a.shape, a.dtype), index, ct)}


# -- shape ops ------------------------------------------------------------------------------


@defvjp(np.reshape, np.ravel)
def _reshape(call: Call, out: Any, ct: Any) -> Cotangents:
    return {(0,): ct.reshape(call.args[0].shape)}


@defvjp(np.squeeze, np.expand_dims)
def _squeeze(call: Call, out: Any, ct: Any) -> Cotangents:
    return {(0,): ct.reshape(call.args[0].shape)}


@defvjp(np.transpose)
def _transpose(call: Call, out: Any, ct: Any) -> Cotangents:
    a = call.args[0]
    axes = call.arg(1, "axes")
    perm = tuple(reversed(range(a.ndim))) if axes is None else tuple(int(x) % a.ndim for x in axes)
    return {(0,): np.transpose(ct, tuple(np.argsort(perm)))}


@defvjp(np.swapaxes)
def _swapaxes(call: Call, out: Any, ct: Any) -> Cotangents:
    return {(0,): np.swapaxes(ct, call.arg(1, "axis1"), call.arg(2, "axis2"))}


@defvjp(np.moveaxis)
def _moveaxis(call: Call, out: Any, ct: Any) -> Cotangents:
    return {(0,): np.moveaxis(ct, call.arg(2, "destination"), call.arg(1, "source"))}


def _slices(ct: Any, axis: int, sizes: list[int]) -> list[Any]:
    lead = (slice(None),) * axis
    pieces, start = [], 0
    for n in sizes:
        pieces.append(ct[lead + (slice(start, start + n),)])
        start += n
    return pieces


@defvjp(np.concatenate)
def _concatenate(call: Call, out: Any, ct: Any) -> Cotangents:
    arrays = call.arg(0, "arrays")
    axis = int(call.arg(1, "axis", 0)) % ct.ndim
    return {(0, i): g for i, g in enumerate(_slices(ct, axis, [x.shape[axis] for x in arrays]))}


@defvjp(np.stack)
def _stack(call: Call, out: Any, ct: Any) -> Cotangents:
    arrays = call.arg(0, "arrays")
    axis = int(call.arg(1, "axis", 0)) % ct.ndim
    return {(0, i): np.squeeze(g, axis) for i, g in enumerate(_slices(ct, axis, [1] * len(arrays)))}



# -- issue 20 item 3: scans, moments, sorting and layout ops (one section, appended) ----------
# Each cotangent is built from ops that have sharding rules (flip, cumsum, argsort,
# take_along_axis, tril/triu, reshape, sum), so it shards like the forward pass.


def _one_axis(call: Call, position: int, name: str, ndim: int, default: Any = None) -> Any:
    axis = call.arg(position, name, default)
    return None if axis is None else int(axis) % max(ndim, 1)


@defvjp(np.cumsum, *((np.cumulative_sum,) if hasattr(np, "cumulative_sum") else ()))
def _cumsum(call: Call, out: Any, ct: Any) -> Cotangents:
    """The cotangent summed from the end: ``flip(cumsum(flip(ct)))`` along the scanned axis."""
    a = call.args[0]
    axis = _one_axis(call, 1, "axis", a.ndim)
    if axis is None:  # the flattened array was scanned: ct is 1-d
        return {(0,): np.flip(np.cumsum(np.flip(ct, 0), 0), 0).reshape(a.shape).astype(a.dtype)}
    return {(0,): np.flip(np.cumsum(np.flip(ct, axis), axis=axis), axis).astype(a.dtype)}


def _moments_parts(call: Call) -> tuple[Any, Any, int, float]:
    """(the deviations from the mean, the cotangent's dims restored, the count, ``ddof``) of a var/std call."""
    a = call.args[0]
    axes = _axes(call, a.ndim)
    ddof = call.kwargs.get("ddof", call.args[4] if len(call.args) > 4 else 0)
    ddof = call.kwargs.get("correction", ddof) or ddof
    count = int(np.prod([a.shape[i] for i in axes], dtype=np.int64))
    return a - np.mean(a, axis=axes, keepdims=True), axes, count, ddof


def _keep(g: Any, call: Call, axes: tuple[int, ...]) -> Any:
    keepdims = call.kwargs.get("keepdims", call.args[5] if len(call.args) > 5 else False)
    return g if keepdims or not call.args[0].ndim else np.expand_dims(g, axes)


@defvjp(np.var)
def _var(call: Call, out: Any, ct: Any) -> Cotangents:
    """``2 (a - mean) ct / (n - ddof)``."""
    centred, axes, count, ddof = _moments_parts(call)
    return {(0,): centred * (_keep(ct, call, axes) * (2.0 / (count - ddof)))}


@defvjp(np.std)
def _std(call: Call, out: Any, ct: Any) -> Cotangents:
    """``(a - mean) ct / ((n - ddof) std)``."""
    centred, axes, count, ddof = _moments_parts(call)
    return {(0,): centred * (_keep(ct / out, call, axes) * (1.0 / (count - ddof)))}


def _nan_parts(call: Call, keepdims_at: int) -> tuple[Any, Any, Any, Any]:
    """(where ``a`` is NaN, the cotangent's dims restored, the numbers' count per slice, their mean) of a
    ``nanmean``/``nanvar``/``nanstd`` call (``keepdims`` positional at ``keepdims_at``)."""
    a = call.args[0]
    axes = _axes(call, a.ndim)
    nan = np.isnan(a)
    count = np.sum(~nan, axis=axes, keepdims=True)
    mean = np.nanmean(a, axis=axes, keepdims=True)
    keep = call.arg(keepdims_at, "keepdims", False) or not a.ndim
    return nan, (lambda g: g if keep else np.expand_dims(g, axes)), count, mean


@defvjp(np.nanmean)
def _nanmean(call: Call, out: Any, ct: Any) -> Cotangents:
    """``ct / count`` where ``a`` is a number, 0 at its NaNs."""
    nan, keep, count, _ = _nan_parts(call, 4)
    return {(0,): np.where(nan, 0.0, keep(ct) / count).astype(call.args[0].dtype)}


@defvjp(np.nanvar)
def _nanvar(call: Call, out: Any, ct: Any) -> Cotangents:
    """``2 (a - nanmean) ct / (count - ddof)`` where ``a`` is a number, 0 at its NaNs."""
    nan, keep, count, mean = _nan_parts(call, 5)
    ddof = call.kwargs.get("correction", call.arg(4, "ddof", 0)) or call.arg(4, "ddof", 0)
    return {(0,): np.where(nan, 0.0, (call.args[0] - mean) * (keep(ct) * 2.0 / (count - ddof)))}


@defvjp(np.nanstd)
def _nanstd(call: Call, out: Any, ct: Any) -> Cotangents:
    """``(a - nanmean) ct / ((count - ddof) std)`` where ``a`` is a number, 0 at its NaNs."""
    nan, keep, count, mean = _nan_parts(call, 5)
    ddof = call.kwargs.get("correction", call.arg(4, "ddof", 0)) or call.arg(4, "ddof", 0)
    return {(0,): np.where(nan, 0.0, (call.args[0] - mean) * (keep(ct / out) / (count - ddof)))}


@defvjp(np.flip)
def _flip(call: Call, out: Any, ct: Any) -> Cotangents:
    return {(0,): np.flip(ct, call.arg(1, "axis"))}


@defvjp(np.broadcast_to)
def _broadcast_to(call: Call, out: Any, ct: Any) -> Cotangents:
    return {(0,): unbroadcast(ct, call.args[0].shape)}


@defvjp(np.tile)
def _tile(call: Call, out: Any, ct: Any) -> Cotangents:
    """The copies summed: ``ct`` seen as ``(r0, s0, r1, s1, ...)``, summed over the ``r`` dims."""
    a = call.args[0]
    reps = call.arg(1, "reps")
    reps = tuple(int(r) for r in (reps if isinstance(reps, (tuple, list, np.ndarray)) else (reps,)))
    ndim = max(a.ndim, len(reps))
    reps = (1,) * (ndim - len(reps)) + reps
    shape = (1,) * (ndim - a.ndim) + tuple(a.shape)
    split = tuple(n for pair in zip(reps, shape) for n in pair)
    summed = np.sum(ct.reshape(split), axis=tuple(range(0, 2 * ndim, 2)))
    return {(0,): summed.reshape(a.shape)}


@defvjp(np.take)
def _take(call: Call, out: Any, ct: Any) -> Cotangents:
    a = call.args[0]
    axis = _one_axis(call, 2, "axis", a.ndim)
    index = (slice(None),) * (axis or 0) + (call.arg(1, "indices"),)
    return {(0,): index_add(np.zeros(a.shape, a.dtype), index, ct)}


@defvjp(np.tril)
def _tril(call: Call, out: Any, ct: Any) -> Cotangents:
    return {(0,): np.tril(ct, call.arg(1, "k", 0))}


@defvjp(np.triu)
def _triu(call: Call, out: Any, ct: Any) -> Cotangents:
    return {(0,): np.triu(ct, call.arg(1, "k", 0))}


@defvjp(np.sort)
def _sort(call: Call, out: Any, ct: Any) -> Cotangents:
    """Each element takes the cotangent of the place it was sorted to: ``ct`` gathered by the inverse of ``argsort``."""
    a = call.args[0]
    axis = _one_axis(call, 1, "axis", a.ndim, -1)
    if axis is None:
        order = np.argsort(np.reshape(a, (-1,)), stable=True)
        return {(0,): np.take_along_axis(ct, np.argsort(order, stable=True), 0).reshape(a.shape)}
    order = np.argsort(a, axis=axis, stable=True)
    return {(0,): np.take_along_axis(ct, np.argsort(order, axis=axis, stable=True), axis)}


@defvjp(np.take_along_axis)
def _take_along_axis(call: Call, out: Any, ct: Any) -> Cotangents:
    """Each picked element's cotangent added back where it came from (``index_add`` with the full index)."""
    a, indices = call.args[0], call.arg(1, "indices")
    axis = int(call.arg(2, "axis", -1)) % a.ndim
    grids = list(np.ogrid[tuple(slice(n) for n in indices.shape)])
    grids[axis] = indices
    return {(0,): index_add(np.zeros(a.shape, a.dtype), tuple(grids), ct)}


# -- more elementwise, the linalg aliases, roll, repeat, trace, det and inv (appended) --------

defvjp(np.arccosh)(_unary(lambda a, o, ct: ct / np.sqrt(a * a - 1)))
defvjp(np.deg2rad, np.radians)(_unary(lambda a, o, ct: ct * (np.pi / 180.0)))
defvjp(np.rad2deg, np.degrees)(_unary(lambda a, o, ct: ct * (180.0 / np.pi)))
defvjp(np.fabs)(_unary(lambda a, o, ct: ct * np.sign(a)))
defvjp(np.hypot)(_binary(lambda a, b, o, ct: ct * a / o, lambda a, b, o, ct: ct * b / o))
defvjp(np.logaddexp2)(_binary(lambda a, b, o, ct: ct * np.exp2(a - o), lambda a, b, o, ct: ct * np.exp2(b - o)))
defvjp(np.fmax)(_binary(lambda a, b, o, ct: ct * (a >= b), lambda a, b, o, ct: ct * (a < b)))
defvjp(np.fmin)(_binary(lambda a, b, o, ct: ct * (a <= b), lambda a, b, o, ct: ct * (a > b)))
defvjp(np.float_power)(_binary(lambda a, b, o, ct: ct * b * np.float_power(a, b - 1),
                               lambda a, b, o, ct: ct * o * np.log(np.where(a > 0, a, 1))))
defvjp(np.linalg.matmul)(_matmul)
defvjp(np.linalg.tensordot)(_tensordot)
defvjp(np.linalg.outer)(_outer)


@defvjp(np.copysign)
def _copysign(call: Call, out: Any, ct: Any) -> Cotangents:
    """``|a| sign(b)``: the sign flips the cotangent of ``a``; ``b`` gets none (a step function)."""
    a, b = call.args[:2]
    return _each(call, {0: ct * np.sign(a) * np.copysign(1.0, b)})


@defvjp(np.matrix_transpose, np.linalg.matrix_transpose)
def _matrix_transpose(call: Call, out: Any, ct: Any) -> Cotangents:
    return {(0,): np.swapaxes(ct, -1, -2)}


@defvjp(np.vecdot, np.linalg.vecdot)
def _vecdot(call: Call, out: Any, ct: Any) -> Cotangents:
    """``sum(conj(a) * b, axis)``: the cotangent put back along ``axis`` times the other operand."""
    a, b = call.args[:2]
    axis = int(call.kwargs.get("axis", -1))
    g = np.expand_dims(ct, axis)
    return _each(call, {0: np.conjugate(g * np.conjugate(b)), 1: g * np.conjugate(a)})


@defvjp(np.roll)
def _roll(call: Call, out: Any, ct: Any) -> Cotangents:
    """Rolling back by the same shift."""
    a = call.args[0]
    shift, axis = call.arg(1, "shift"), call.arg(2, "axis")
    back = tuple(-int(k) for k in np.atleast_1d(shift))
    if axis is None:
        return {(0,): np.roll(ct, back[0]).reshape(a.shape)}
    return {(0,): np.roll(ct, back if len(back) > 1 else back[0], axis)}


@defvjp(np.repeat)
def _repeat(call: Call, out: Any, ct: Any) -> Cotangents:
    """With one repeat count ``r``: the ``r`` copies of each element summed (``reshape`` then ``sum``)."""
    a = call.args[0]
    repeats, axis = call.arg(1, "repeats"), call.arg(2, "axis")
    if np.ndim(repeats) != 0:
        raise TypeError("differentiating numpy.repeat needs one repeat count, got an array of counts")
    r = int(repeats)
    if axis is None:
        return {(0,): np.sum(ct.reshape(a.size, r), axis=1).reshape(a.shape)}
    axis = int(axis) % a.ndim
    shape = a.shape[:axis] + (a.shape[axis], r) + a.shape[axis + 1:]
    return {(0,): np.sum(ct.reshape(shape), axis=axis + 1)}


@defvjp(np.linalg.trace)
def _linalg_trace(call: Call, out: Any, ct: Any) -> Cotangents:
    """The cotangent on the diagonal (``offset=0``): ``ct[..., None, None] * eye``."""
    a = call.args[0]
    if int(call.kwargs.get("offset", 0)) != 0:
        raise TypeError("differentiating numpy.linalg.trace supports offset=0 only")
    eye = np.eye(a.shape[-2], a.shape[-1], dtype=a.dtype)
    return {(0,): np.expand_dims(np.expand_dims(ct, -1), -1) * eye}


@defvjp(np.linalg.inv)
def _inv(call: Call, out: Any, ct: Any) -> Cotangents:
    """``-inv(a)^T ct inv(a)^T``."""
    t = np.swapaxes(out, -1, -2)
    return {(0,): -(t @ ct @ t)}


@defvjp(np.linalg.det)
def _det(call: Call, out: Any, ct: Any) -> Cotangents:
    """``ct det(a) inv(a)^T`` (invertible matrices)."""
    a = call.args[0]
    scale = np.expand_dims(np.expand_dims(ct * out, -1), -1)
    return {(0,): scale * np.swapaxes(np.linalg.inv(a), -1, -2)}
