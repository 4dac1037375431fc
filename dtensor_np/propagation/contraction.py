"""Rules for contractions: ``matmul`` (and ``@``), ``dot``, ``tensordot``, ``einsum``, ``outer``.

Each call becomes an einop equation (``"...mk,...kn->...mn"`` for matmul) and
goes through :func:`einop_rule`: a contracted dim that is sharded makes the
output ``Partial(sum)``.  Contractions are linear in every operand, so a
pending sum on one operand stays pending when the other operands are
replicated on that mesh dim.

Example:
    >>> matmul_equation((4, 8, 3), (3, 5))
    'aMK,KN->aMN'
    >>> einsum_equation("ij,jk", [(2, 3), (3, 4)])
    'ij,jk->ik'
"""

from __future__ import annotations

import string
from typing import Any, Hashable, Sequence

import numpy as np

from collectives import frozen

from ..errors import ShardingError
from ..spec import DTensorSpec
from .common import harmonize, settle_keeping, single_partials, single_sharding
from .einop import einop_rule, pointwise_equation
from .elementwise import bind_operands, elementwise_decision
from .registry import Decision, OpRule, register

__all__ = ["matmul_equation", "dot_equation", "tensordot_equation", "einsum_equation", "contraction_decision"]

_LOWER = string.ascii_lowercase


def _letters(n: int, skip: str = "") -> str:
    pool = [c for c in _LOWER if c not in skip]
    if n > len(pool):
        raise ShardingError(f"contraction with {n} dims needs more letters than einsum notation has")
    return "".join(pool[:n])


def matmul_equation(a: Sequence[int], b: Sequence[int]) -> str:
    """The einop equation of ``a @ b`` for operands of shapes ``a`` and ``b``."""
    if len(a) == 0 or len(b) == 0:
        raise ValueError("matmul: Input operand does not have enough dimensions (a 0-d operand)")
    batch_a, batch_b = tuple(a[:-2]), tuple(b[:-2])
    if batch_a and batch_b:
        lhs, out = pointwise_equation([batch_a, batch_b]).split("->")
        pa, pb = lhs.split(",")
    else:
        pa = _letters(len(batch_a))
        pb = _letters(len(batch_b))
        out = pa or pb
    left = pa + ("K" if len(a) == 1 else "MK")
    right = pb + ("K" if len(b) == 1 else "KN")
    result = out + ("" if len(a) == 1 else "M") + ("" if len(b) == 1 else "N")
    return f"{left},{right}->{result}"


def dot_equation(a: Sequence[int], b: Sequence[int]) -> str:
    """The einop equation of ``np.dot(a, b)`` (neither operand 0-d)."""
    la = _letters(len(a) - 1)
    if len(b) == 1:
        return f"{la}K,K->{la}"
    lb = _letters(len(b) - 2, skip=la)
    return f"{la}K,{lb}KN->{la}{lb}N"


def tensordot_equation(a: Sequence[int], b: Sequence[int], axes: Any) -> str:
    """The einop equation of ``np.tensordot(a, b, axes)``."""
    if isinstance(axes, (int, np.integer)):
        n = int(axes)
        axes_a, axes_b = list(range(len(a) - n, len(a))), list(range(n))
    else:
        axes_a, axes_b = ([x] if isinstance(x, (int, np.integer)) else list(x) for x in axes)
    axes_a = [int(x) % max(1, len(a)) for x in axes_a]
    axes_b = [int(x) % max(1, len(b)) for x in axes_b]
    if len(axes_a) != len(axes_b):
        raise ShardingError(f"tensordot: axes {axes} pair {len(axes_a)} dims with {len(axes_b)}")
    letters = iter(_LOWER)
    ca = [""] * len(a)
    cb = [""] * len(b)
    for i, j in zip(axes_a, axes_b):
        ca[i] = cb[j] = next(letters)
    for i in range(len(a)):
        ca[i] = ca[i] or next(letters)
    for j in range(len(b)):
        cb[j] = cb[j] or next(letters)
    out = [ca[i] for i in range(len(a)) if i not in axes_a] + [cb[j] for j in range(len(b)) if j not in axes_b]
    return f"{''.join(ca)},{''.join(cb)}->{''.join(out)}"


def einsum_equation(subscripts: str, shapes: Sequence[Sequence[int]]) -> str:
    """An einop equation from einsum subscripts (ellipses expanded, implicit output made explicit)."""
    # NumPy's own checks of the subscripts and their operands (its ValueErrors), on stand-ins holding no memory
    np.einsum_path(subscripts, *(np.broadcast_to(np.zeros(()), tuple(shape)) for shape in shapes), optimize=False)
    subscripts = subscripts.replace(" ", "")
    if "->" in subscripts:
        lhs, out = subscripts.split("->")
    else:
        lhs, out = subscripts, None
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ShardingError(f"einsum: {len(terms)} subscripts for {len(shapes)} operands")
    used = set(c for c in subscripts if c.isalpha())
    free = [c for c in string.ascii_uppercase + _LOWER if c not in used]
    ell_dims = [len(s) - len(t.replace("...", "")) if "..." in t else 0 for t, s in zip(terms, shapes)]
    n_ell = max(ell_dims, default=0)
    ell_letters = free[:n_ell]
    expanded = []
    for t, s, k in zip(terms, shapes, ell_dims):
        if "..." in t:
            chars = list(ell_letters[n_ell - k :])
            offset = t.index("...")
            for j, c in enumerate(chars):
                if s[offset + j] == 1 and n_ell:  # a broadcast singleton
                    chars[j] = "1"
            t = t.replace("...", "".join(chars))
        if len(t) != len(s):
            raise ShardingError(f"einsum: subscripts {t!r} for an operand with {len(s)} dims")
        if len(set(c for c in t if c != "1")) != len([c for c in t if c != "1"]):
            raise ShardingError(f"einsum: repeated subscripts in one operand ({t!r}, a diagonal) have no sharding rule")
        expanded.append(t)
    if out is None:
        counts: dict[str, int] = {}
        for t in terms:
            for c in t.replace("...", ""):
                counts[c] = counts.get(c, 0) + 1
        out = "".join(ell_letters) + "".join(sorted(c for c, n in counts.items() if n == 1))
    else:
        out = out.replace("...", "".join(ell_letters))
    # An ellipsis dim that is a singleton in every operand stays a singleton.
    for c in ell_letters:
        if not any(c in t for t in expanded):
            out = out.replace(c, "1")
    return f"{','.join(expanded)}->{out}"


def contraction_decision(equation: str, specs: tuple[DTensorSpec, ...], local: Any) -> Decision:
    """The decision of a contraction: einop propagation, keeping one operand's pending sum."""
    specs = harmonize(equation, [single_sharding(s) for s in specs])
    inputs, out = settle_keeping(lambda ss: einop_rule(equation, ss), specs, single_partials(specs))
    return Decision(inputs, (out,), local)


def _two_operands(name: str):
    def bind(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
        if len(args) != 2:
            raise ShardingError(f"numpy.{name} on DTensors takes two operands, got {len(args)}")
        rest = {k: v for k, v in kwargs.items()}
        tensors, scalars = bind_operands(args)
        if scalars:
            raise TypeError(
                f"numpy.{name}: both operands must be DTensors (got a {type(args[scalars[0][0]]).__name__}); "
                f"distribute the other operand first"
            )
        return tensors, frozen(rest)

    return bind


def _decide_matmul(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    if key:
        raise ShardingError(f"numpy.matmul on DTensors takes no keywords, got {[k for k, _ in key]}")
    equation = matmul_equation(specs[0].shape, specs[1].shape)
    return contraction_decision(equation, specs, lambda rank, a, b: np.matmul(a, b))


register(np.matmul)(OpRule("matmul", _two_operands("matmul"), _decide_matmul))


def _bind_dot(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    if kwargs or len(args) != 2:
        raise ShardingError("numpy.dot on DTensors takes exactly two operands and no out=")
    tensors, scalars = bind_operands(args)
    return tensors, scalars


def _decide_dot(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    scalars = key
    if scalars or any(s.ndim == 0 for s in specs):  # a scalar operand: dot is multiply
        positions = [i for i in range(2) if all(i != j for j, _ in scalars)]

        def local(rank: int, *arrays: Any) -> Any:
            fixed = dict(scalars)
            it = iter(arrays)
            return np.dot(*[fixed[i] if i in fixed else next(it) for i in range(2)])

        return elementwise_decision(specs, local, multiplicative_positions=(0, 1), tensor_positions=positions)
    equation = dot_equation(specs[0].shape, specs[1].shape)
    return contraction_decision(equation, specs, lambda rank, a, b: np.dot(a, b))


register(np.dot)(OpRule("dot", _bind_dot, _decide_dot))


def _bind_tensordot(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    axes = kwargs.pop("axes", args[2] if len(args) > 2 else 2)
    tensors, scalars = bind_operands(args[:2])
    if scalars or kwargs:
        raise ShardingError("numpy.tensordot on DTensors takes two DTensors and axes")
    return tensors, frozen(axes)


def _decide_tensordot(specs: tuple[DTensorSpec, ...], axes: Any) -> Decision:
    equation = tensordot_equation(specs[0].shape, specs[1].shape, axes)
    return contraction_decision(equation, specs, lambda rank, a, b: np.tensordot(a, b, axes))


register(np.tensordot)(OpRule("tensordot", _bind_tensordot, _decide_tensordot))


def _bind_einsum(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    if not args or not isinstance(args[0], str):
        raise ShardingError("numpy.einsum on DTensors needs the subscripts string first")
    extra = set(kwargs) - {"optimize"}
    if extra:
        raise ShardingError(f"numpy.einsum on DTensors supports optimize=, got {sorted(extra)}")
    tensors, scalars = bind_operands(args[1:])
    if scalars:
        raise TypeError("numpy.einsum: every operand must be a DTensor; distribute plain arrays first")
    return tensors, (args[0], frozen(kwargs.get("optimize", False)))


def _decide_einsum(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    subscripts, optimize = key
    equation = einsum_equation(subscripts, [s.shape for s in specs])
    return contraction_decision(equation, specs, lambda rank, *a: np.einsum(subscripts, *a, optimize=optimize))


register(np.einsum)(OpRule("einsum", _bind_einsum, _decide_einsum))


def _decide_outer(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    if any(s.ndim != 1 for s in specs):
        raise ShardingError("numpy.outer on DTensors supports 1-d operands (it would flatten others)")
    return contraction_decision("i,j->ij", specs, lambda rank, a, b: np.outer(a, b))


register(np.outer)(OpRule("outer", _two_operands("outer"), _decide_outer))
