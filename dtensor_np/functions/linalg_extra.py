"""Linear algebra beyond the Array API's: ``linalg.norm``, ``lstsq``, ``slogdet``, ``cond``, ``multi_dot``,
``tensorinv``, ``tensorsolve``, ``eig``, ``eigvals``, ``matrix_power``, and ``kron``, ``inner``, ``vdot``,
``trace``, ``diag``, ``diagflat``.

=====================================  ===========================================================================
``linalg.norm``                        composite: NumPy's choice of norm, then ``vector_norm`` (a sharded reduced dim:
                                       ``Partial`` for ord 1, 0, inf, -inf, one ``all_reduce`` of the partial sums
                                       for the others) or ``matrix_norm`` of the two axes moved last ('fro': one
                                       ``all_reduce``; 1, inf: one ``all_reduce`` of a row of sums; 2, -2, 'nuc':
                                       the singular values, see ``svdvals``)
``linalg.lstsq``                       rule (:mod:`dtensor_np.propagation.least_squares`): rows sharded: QR of every
                                       rank's block, one ``all_gather`` of the ``n x (n + k)`` blocks (TSQR's first
                                       level; not the normal equations); columns sharded: moved to rows first
                                       (``all_to_all``)
``linalg.slogdet`` ``matrix_power``    rules of :mod:`dtensor_np.propagation.linalg` (a sharded matrix dim moves to a
                                       batch dim, ``all_to_all``, or is gathered, ``all_gather``)
``linalg.eig`` ``eigvals`` ``cond``    rules (:mod:`dtensor_np.propagation.gathered_operands`): whole matrices, as
                                       above (gathers=True where there is no batch dim); ``cond`` (p None, 2, -2)
                                       of a row-sharded tall matrix: TSQR's small R (:mod:`~dtensor_np.propagation.tsqr`)
``linalg.multi_dot``                   composite: NumPy's cheapest order of ``dot`` s (each a contraction: a sharded
                                       contracted dim leaves ``Partial(sum)``)
``linalg.tensorinv`` ``tensorsolve``   composites: reshapes, then ``inv``/``solve`` (whole matrices)
``kron``                               rule (:mod:`dtensor_np.propagation.halo`): the result sharded where ``a`` is;
                                       one ``Alltoallv`` of the rows of ``a`` that change owner per sharded dim
                                       (never the result's rows); ``b`` replicated (``all_gather`` if sharded)
``inner`` ``vdot``                     composites: ``tensordot`` (a sharded contracted dim leaves ``Partial(sum)``)
``trace``                              composite: ``linalg.trace`` of the two axes moved last (``Partial(sum)``)
``diag`` ``diagflat``                  ``diag`` of a matrix is ``diagonal`` (a read-only view, one ``rechunk`` of the
                                       diagonal's entries); of a vector, ``diagflat``'s rule
                                       (:mod:`dtensor_np.propagation.halo`): the result's rows sharded like the
                                       vector, one ``Alltoallv`` of the entries that change owner
=====================================  ===========================================================================

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.arange(12.0).reshape(4, 3), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> with dt.comm_counter() as c:
    ...     n = np.linalg.norm(x, axis=0)
    >>> np.allclose(n.full_tensor(), np.linalg.norm(np.arange(12.0).reshape(4, 3), axis=0)), c.counts["all_reduce"]
    (True, 1)
"""

from __future__ import annotations

import operator
from typing import Any, Sequence

import numpy as np

from ..numpy_catalogue import Case, Refused
from ..propagation.common import axis_index
from ..propagation.registry import register_composite
from .differences import as_operand

__all__ = ["CASES", "REFUSED", "norm", "multi_dot", "tensorinv", "tensorsolve", "inner", "vdot", "trace",
           "diag"]


def _norm_axes(axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, tuple):
        return axis
    try:
        return (int(axis),)
    except Exception as e:
        raise TypeError("'axis' must be None, an integer or a tuple of integers") from e


@register_composite(np.linalg.norm)
def norm(x: Any, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Any:
    """``np.linalg.norm``: NumPy's choice of norm, computed by ``vector_norm`` or ``matrix_norm`` (their
    collectives: a sharded reduced dim gives ``Partial`` or one ``all_reduce``; 2, -2 and 'nuc' need whole
    matrices).

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([[3.0, 0.0], [0.0, -4.0]]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> float(np.linalg.norm(x)), float(np.linalg.norm(x, 1)), float(np.linalg.norm(x, np.inf, axis=1)[1])
        (5.0, 4.0, 4.0)
    """
    x = as_operand(x)
    if not np.issubdtype(x.dtype, np.inexact):
        x = x.astype(float)
    nd = x.ndim
    if axis is None and (ord is None or (ord in ("f", "fro") and nd == 2) or (ord == 2 and nd == 1)):
        ret = np.linalg.vector_norm(x)
        return ret.reshape(nd * [1]) if keepdims else ret
    axes = _norm_axes(axis, nd)
    if len(axes) == 1:
        if isinstance(ord, str):
            raise ValueError(f"Invalid norm order '{ord}' for vectors")
        return np.linalg.vector_norm(x, ord=2 if ord is None else ord, axis=axes[0], keepdims=keepdims)
    if len(axes) != 2:
        raise ValueError("Improper number of dimensions to norm.")
    row, col = (axis_index(a, nd) for a in axes)
    if row == col:
        raise ValueError("Duplicate axes given.")
    if ord not in (2, -2, 1, -1, np.inf, -np.inf, None, "fro", "f", "nuc"):
        raise ValueError("Invalid norm order for matrices.")
    ret = np.linalg.matrix_norm(np.moveaxis(x, (row, col), (-2, -1)), ord="fro" if ord in (None, "f") else ord,
                                keepdims=keepdims)
    return np.moveaxis(ret, (-2, -1), (row, col)) if keepdims else ret


def _assert_2d(*arrays: Any) -> None:
    for a in arrays:
        if a.ndim != 2:
            raise np.linalg.LinAlgError(f"{a.ndim}-dimensional array given. Array must be two-dimensional")


def _chain(arrays: Sequence[Any], order: Any, i: int, j: int) -> Any:
    if i == j:
        return arrays[i]
    return np.dot(_chain(arrays, order, i, order[i][j]), _chain(arrays, order, order[i][j] + 1, j))


def _chain_order(arrays: Sequence[Any]) -> list[list[int]]:
    """NumPy's cheapest parenthesisation (``_multi_dot_matrix_chain_order``), from the shapes."""
    n = len(arrays)
    p = [a.shape[0] for a in arrays] + [arrays[-1].shape[1]]
    cost = [[0.0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j] = np.inf
            for k in range(i, j):
                q = cost[i][k] + cost[k + 1][j] + p[i] * p[k + 1] * p[j + 1]
                if q < cost[i][j]:
                    cost[i][j] = q
                    split[i][j] = k
    return split


@register_composite(np.linalg.multi_dot)
def multi_dot(arrays: Sequence[Any], *, out: Any = None) -> Any:
    """``np.linalg.multi_dot``: NumPy's cheapest order of ``dot`` s (from the shapes), each through its rule.

    Example:
        >>> import dtensor_np as dt
        >>> a = dt.distribute_tensor(np.ones((4, 2)), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.linalg.multi_dot([a, np.ones((2, 3)), np.ones(3)]).full_tensor().tolist()
        [6.0, 6.0, 6.0, 6.0]
    """
    n = len(arrays)
    if n < 2:
        raise ValueError("Expecting at least two arrays.")
    if n == 2:
        result = np.dot(arrays[0], arrays[1])
    else:
        arrays = [as_operand(a) for a in arrays]
        first, last = arrays[0].ndim, arrays[-1].ndim
        if first == 1:
            arrays[0] = np.atleast_2d(arrays[0])
        if last == 1:
            arrays[-1] = np.atleast_2d(arrays[-1]).T
        _assert_2d(*arrays)
        if n == 3:
            a, b, c = arrays
            cost1 = a.shape[0] * c.shape[0] * (a.shape[1] + c.shape[1])
            cost2 = a.shape[1] * c.shape[1] * (a.shape[0] + c.shape[0])
            result = np.dot(np.dot(a, b), c) if cost1 < cost2 else np.dot(a, np.dot(b, c))
        else:
            result = _chain(arrays, _chain_order(arrays), 0, n - 1)
        if first == 1 and last == 1:
            result = result[0, 0]
        elif first == 1 or last == 1:
            result = np.ravel(result)
    if out is None:
        return result
    out[...] = result
    return out


@register_composite(np.linalg.tensorinv)
def tensorinv(a: Any, ind: int = 2) -> Any:
    """``np.linalg.tensorinv``: ``inv`` of ``a`` reshaped to a square matrix (its rule: whole matrices), reshaped
    back.

    Example:
        >>> import dtensor_np as dt
        >>> a = dt.distribute_tensor(np.eye(4).reshape(4, 2, 2) * 2.0, dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.linalg.tensorinv(a, ind=1).shape
        (2, 2, 4)
    """
    a = as_operand(a)
    old = a.shape
    if ind <= 0:
        raise ValueError("Invalid ind argument.")
    inverse_shape = old[ind:] + old[:ind]
    prod = int(np.prod(old[ind:]))
    return np.linalg.inv(a.reshape(prod, -1)).reshape(*inverse_shape)


@register_composite(np.linalg.tensorsolve)
def tensorsolve(a: Any, b: Any, axes: Any = None) -> Any:
    """``np.linalg.tensorsolve``: ``solve`` of ``a`` reshaped to a square matrix and ``b`` flattened (``solve``'s
    rule gathers ``a``'s matrix dims), reshaped to the unknowns' shape.

    Example:
        >>> import dtensor_np as dt
        >>> a = dt.distribute_tensor(np.eye(6).reshape(6, 2, 3), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.linalg.tensorsolve(a, np.arange(6.0)).full_tensor().tolist()
        [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    """
    a, b = as_operand(a), as_operand(b)
    an = a.ndim
    if axes is not None:
        every = list(range(an))
        for k in axes:
            every.remove(k)
            every.insert(an, k)
        a = np.transpose(a, every)
    old = a.shape[-(an - b.ndim):]
    prod = int(np.prod(old))
    if a.size != prod ** 2:
        raise np.linalg.LinAlgError("Input arrays must satisfy the requirement prod(a.shape[b.ndim:]) == "
                                    "prod(a.shape[:b.ndim])")
    return np.linalg.solve(a.reshape(prod, prod), np.ravel(b)).reshape(old)


@register_composite(np.inner)
def inner(a: Any, b: Any) -> Any:
    """``np.inner``: ``tensordot`` over the last axes (a sharded contracted dim leaves ``Partial(sum)``, reduced when
    read).

    Example:
        >>> import dtensor_np as dt
        >>> a = dt.distribute_tensor(np.arange(6.0).reshape(2, 3), dt.DeviceMesh((2,)), [dt.Shard(1)])
        >>> np.inner(a, np.ones(3)).full_tensor().tolist()
        [3.0, 12.0]
    """
    a, b = as_operand(a), as_operand(b)
    if a.ndim == 0 or b.ndim == 0:
        return np.multiply(a, b)
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"shapes {tuple(a.shape)} and {tuple(b.shape)} not aligned: {a.shape[-1]} (dim {a.ndim - 1}) "
                         f"!= {b.shape[-1]} (dim {b.ndim - 1})")
    return np.tensordot(a, b, axes=([-1], [-1]))


@register_composite(np.vdot)
def vdot(a: Any, b: Any) -> Any:
    """``np.vdot``: the dot product of the flattened arrays, ``a`` conjugated: ``tensordot`` over every dim when the
    shapes agree (no reshape; sharded dims leave ``Partial(sum)``), else of the raveled arrays.

    Example:
        >>> import dtensor_np as dt
        >>> a = dt.distribute_tensor(np.array([1j, 2.0]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> complex(np.vdot(a, np.array([1j, 1.0])))
        (3+0j)
    """
    a, b = as_operand(a), as_operand(b)
    if a.size != b.size:
        raise ValueError("vectors have different lengths")
    if a.dtype.kind == "c":
        a = np.conjugate(a)
    if a.shape == b.shape:
        return np.tensordot(a, b, axes=a.ndim)
    return np.tensordot(np.ravel(a), np.ravel(b), axes=1)


@register_composite(np.trace)
def trace(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: Any = None, out: Any = None) -> Any:
    """``np.trace``: ``linalg.trace`` of ``axis1`` and ``axis2`` moved last (views); sharded, each rank sums the
    diagonal entries it holds (``Partial(sum)``, reduced when read).

    Example:
        >>> import dtensor_np as dt
        >>> a = dt.distribute_tensor(np.arange(9).reshape(3, 3), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> int(np.trace(a)), int(np.trace(a, 1))
        (12, 6)
    """
    a = as_operand(a)
    if a.ndim < 2:
        raise ValueError("diag requires an array of at least two dimensions")
    if operator.index(axis1) % a.ndim == operator.index(axis2) % a.ndim:
        raise ValueError("axis1 and axis2 cannot be the same")
    result = np.linalg.trace(np.moveaxis(a, (axis1, axis2), (-2, -1)), offset=offset, dtype=dtype)
    if out is None:
        return result
    out[...] = result
    return out


@register_composite(np.diag)
def diag(v: Any, k: int = 0) -> Any:
    """``np.diag``: of a matrix, ``diagonal`` (NumPy's read-only view; one ``rechunk`` of the diagonal's entries
    where the matrix is sharded); of a vector, ``diagflat`` (the rows sharded like the vector).

    Example:
        >>> import dtensor_np as dt
        >>> v = dt.distribute_tensor(np.array([1.0, 2.0, 3.0]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.diag(v, 1).full_tensor()[:, 1:].tolist(), np.diag(np.diag(v)).full_tensor().tolist()
        ([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 3.0], [0.0, 0.0, 0.0]], [1.0, 2.0, 3.0])
    """
    v = as_operand(v)
    if v.ndim == 1:
        return np.diagflat(v, k)
    if v.ndim == 2:
        return np.diagonal(v, k)
    raise ValueError("Input must be 1- or 2-d.")


def _square(shape: tuple[int, ...]) -> np.ndarray:
    """Well-conditioned square matrices (the last two dims)."""
    n = shape[-1]
    values = np.sin(np.arange(int(np.prod(shape))) * 1.3).reshape(shape)
    return values + n * np.eye(n)


def _tall(shape: tuple[int, ...]) -> np.ndarray:
    return np.sin(np.arange(int(np.prod(shape))) * 0.7).reshape(shape) + np.eye(*shape)


_MATRIX = dict(shape=(4, 4), data=_square, untouched=None, axis=0, gathers=True)
_BATCH = dict(shape=(4, 3, 3), data=_square, untouched=0, axis=1)

CASES = {
    "numpy.linalg.norm": Case(lambda x: np.linalg.norm(x, axis=0), untouched=1, axis=0, tolerance=16),
    "numpy.linalg.lstsq": Case(lambda x: np.linalg.lstsq(x, np.arange(8.0) - 3.0), shape=(8, 3), untouched=None,
                               axis=0, data=_tall, tolerance=1e4),
    "numpy.linalg.slogdet": Case(lambda x: tuple(np.linalg.slogdet(x)), tolerance=64, **_BATCH),
    "numpy.linalg.cond": Case(lambda x: np.linalg.cond(x), tolerance=64, **_BATCH),
    "numpy.linalg.eig": Case(lambda x: tuple(np.linalg.eig(x)), **_MATRIX),
    "numpy.linalg.eigvals": Case(lambda x: np.linalg.eigvals(x), **_BATCH),
    "numpy.linalg.matrix_power": Case(lambda x: np.linalg.matrix_power(x, -2), tolerance=1e3, **_BATCH),
    "numpy.linalg.multi_dot": Case(lambda x: np.linalg.multi_dot([np.ones(5), x, np.ones((4, 2)), np.ones(2)]),
                                   untouched=None, axis=0, tolerance=16),
    "numpy.linalg.tensorinv": Case(lambda x: np.linalg.tensorinv(x, ind=1), shape=(4, 2, 2),
                                   data=lambda s: _square((4, 4)).reshape(s), untouched=None, axis=0, gathers=True,
                                   tolerance=1e3),
    "numpy.linalg.tensorsolve": Case(lambda x: np.linalg.tensorsolve(x, np.arange(4.0)), shape=(4, 2, 2),
                                     data=lambda s: _square((4, 4)).reshape(s), untouched=None, axis=0, gathers=True,
                                     tolerance=1e3),
    "numpy.kron": Case(lambda x: np.kron(x, np.array([[1.0, -1.0], [2.0, 0.5]])), untouched=None, axis=0),
    "numpy.inner": Case(lambda x: np.inner(x, np.arange(4.0)), untouched=0, axis=1, tolerance=16),
    "numpy.vdot": Case(lambda x: np.vdot(x, x), untouched=None, axis=0, tolerance=16),
    "numpy.trace": Case(lambda x: np.trace(x, 1), shape=(4, 4, 3), untouched=2, axis=0),
    "numpy.diag": Case(lambda x: np.diag(x, -1), shape=(6,), untouched=None, axis=0),
    "numpy.diagflat": Case(lambda x: np.diagflat(x, 2), shape=(3, 2), untouched=None, axis=0),
}

def _spd(shape: tuple[int, ...]) -> np.ndarray:
    """Symmetric positive definite matrices (the last two dims)."""
    m = _square(shape)
    return m @ np.swapaxes(m, -1, -2)


_SPD = dict(_BATCH, data=_spd)

# every other numpy.linalg name has a rule of dtensor_np.propagation.linalg: checked here too, so that each name of
# numpy.linalg has a case (whole matrices move to a batch dim with one all_to_all; contractions leave Partial(sum))
CASES.update({
    "numpy.linalg.cholesky": Case(lambda x: np.linalg.cholesky(x), **_SPD),
    "numpy.linalg.cross": Case(lambda x: np.linalg.cross(x, np.array([1.0, -2.0, 0.5])), shape=(5, 3), untouched=0,
                               axis=1),
    "numpy.linalg.det": Case(lambda x: np.linalg.det(x), **_BATCH),
    "numpy.linalg.diagonal": Case(lambda x: np.linalg.diagonal(x, offset=1), **_BATCH),
    "numpy.linalg.eigh": Case(lambda x: tuple(np.linalg.eigh(x)), **_SPD),
    "numpy.linalg.eigvalsh": Case(lambda x: np.linalg.eigvalsh(x), **_SPD),
    "numpy.linalg.inv": Case(lambda x: np.linalg.inv(x), **_BATCH),
    "numpy.linalg.matmul": Case(lambda x: np.linalg.matmul(x, np.ones((4, 2))), untouched=0, axis=1, tolerance=16),
    "numpy.linalg.matrix_norm": Case(lambda x: np.linalg.matrix_norm(x, ord=1), tolerance=16, **_BATCH),
    "numpy.linalg.matrix_rank": Case(lambda x: np.linalg.matrix_rank(x), **_BATCH),
    "numpy.linalg.matrix_transpose": Case(lambda x: np.linalg.matrix_transpose(x), **_BATCH),
    "numpy.linalg.outer": Case(lambda x: np.linalg.outer(x, np.arange(3.0)), shape=(5,), untouched=0),
    "numpy.linalg.pinv": Case(lambda x: np.linalg.pinv(x), **_BATCH),
    "numpy.linalg.qr": Case(lambda x: tuple(np.linalg.qr(x)), **_BATCH),
    "numpy.linalg.solve": Case(lambda x: np.linalg.solve(x, np.ones((4, 3, 1))), **_BATCH),
    "numpy.linalg.svd": Case(lambda x: tuple(np.linalg.svd(x)), **_BATCH),
    "numpy.linalg.svdvals": Case(lambda x: np.linalg.svdvals(x), **_BATCH),
    "numpy.linalg.tensordot": Case(lambda x: np.linalg.tensordot(x, np.ones((4, 2)), axes=1), untouched=0, axis=1,
                                   tolerance=16),
    "numpy.linalg.trace": Case(lambda x: np.linalg.trace(x), tolerance=16, **_BATCH),
    "numpy.linalg.vecdot": Case(lambda x: np.linalg.vecdot(x, np.arange(4.0)), untouched=0, axis=1, tolerance=16),
    "numpy.linalg.vector_norm": Case(lambda x: np.linalg.vector_norm(x, ord=3, axis=0), untouched=1, axis=0,
                                     tolerance=16),
})

REFUSED = {
    "numpy.linalg.test": Refused("NumPy's test runner for numpy.linalg: it takes no array (run NumPy's own tests)",
                                 applicable=False),
}
