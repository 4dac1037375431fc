"""Rules for ``numpy.linalg`` on DTensors: every function of the Array API ``linalg`` extension (2024.12).

Leading (batch) dims are independent problems: however they are sharded,
every rank solves its own batch entries and nothing moves (a function that
may fail on some values adds one flag agreement so that every rank raises
NumPy's ``LinAlgError``, see :mod:`.whole_axes`).  What happens when the
matrix dims (the last two) are sharded depends on the function:

=====================================  =====================================================================
function                               matrix dims sharded on mesh dims ``m``
=====================================  =====================================================================
``cholesky det eigh eigvalsh inv``     each ``m`` moves to a free batch dim (unsharded, at least as long as
``matrix_power matrix_rank pinv qr``   the mesh dim; the longest) with one ``all_to_all`` (every rank sends
``slogdet svd svdvals``                ``(k-1)/k`` of its shard once); the ``m`` left are gathered together
``matrix_norm`` ord ``'nuc'``, 2, -2   with one ``all_gather`` (every rank receives the ``k-1`` other blocks
                                       of its matrices).  Outputs keep the batch sharding, matrix dims whole.
                                       Except: rows sharded and columns whole (or the reverse), tall
                                       (``m >= p n``) or with no batch dim to move to: ``qr`` (reduced,
                                       ``'r'``), ``svd`` (reduced or square), ``svdvals``, ``pinv``,
                                       ``matrix_rank``, ``matrix_norm`` (2, -2, ``'nuc'``) and ``cond`` by TSQR
                                       (:mod:`.tsqr`): one ``all_gather`` of every rank's ``n x n`` R factor
                                       (``O(p n^2)`` bytes), ``Q``/``U`` sharded like the input, never gathered.
``matrix_norm`` ord ``'fro'``,         local sums of ``|x|**p`` over the shard, one ``all_reduce`` (the
``vector_norm`` ord 2 and other p      partial sums: one value per kept element), then the root.
``vector_norm`` ord 1, 0, inf, -inf    no communication: ``Partial(sum)`` (1, 0), ``Partial(max)`` (inf),
                                       ``Partial(min)`` (-inf) on the mesh dims of the reduced dims.
``matrix_norm`` ord 1, -1, inf, -inf   column (row) sums: one ``all_reduce`` of the summed dim's partial
                                       sums (one row of sums per rank); the max (min) over the other dim
                                       is ``Partial(max)`` (``Partial(min)``) where that dim is sharded.
``diagonal``                           every rank cuts the diagonal entries of its block; one ``rechunk``
                                       (one ``Alltoallv`` of those entries, counted as ``all_to_all``) over
                                       the row and column mesh dims together gives the diagonal the
                                       ``torch.chunk`` sharding on them (none when the pieces fit already).
``trace``                              each rank's diagonal entries summed: ``Partial(sum)``, no communication.
``matrix_transpose``                   shards follow their dims; no communication.
``matmul tensordot outer vecdot``      contractions (:mod:`.contraction`): a sharded contracted dim gives
                                       ``Partial(sum)``; no communication unless operands disagree.
``cross``                              elementwise over the other dims; the length-3 dim is gathered
                                       (redistribute) when sharded.
``solve``                              ``a``'s matrix dims and ``b``'s rows are gathered (redistribute: one
                                       ``all_gather`` per mesh dim); ``b``'s columns and the batch dims stay
                                       sharded.
=====================================  =====================================================================

Pending sums (``Partial``) flow through the linear functions (``matrix_transpose``,
``diagonal``, ``trace``, the contractions in one operand, ``solve`` in ``b``) and are
reduced first for the others.  Multiple outputs come back as NumPy's namedtuples
(``EighResult``, ``QRResult``, ``SlogdetResult``, ``SVDResult``).

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> mesh = dt.DeviceMesh((2,))
    >>> a = np.random.default_rng(0).normal(size=(4, 3, 3))
    >>> x = dt.distribute_tensor(a, mesh, [dt.Shard(0)])
    >>> with dt.comm_counter() as c:
    ...     inv = np.linalg.inv(x)
    >>> str(inv.spec), c.total, np.allclose(inv.full_tensor(), np.linalg.inv(a))
    ('S(0)', 0, True)
    >>> w, v = np.linalg.eigh(x + x.mT)
    >>> type(np.linalg.eigh(x + x.mT)).__name__, w.shape
    ('EighResult', (4, 3))
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, Optional, Sequence

import numpy as np

from collectives import array_module

from ..errors import ShardingError
from ..placements import Partial, Placement, Replicate, Shard
from ..spec import DTensorSpec, TensorMeta
from .common import (axis_index, harmonize, keepdims_flag, normalize_axes, partial_free, replicate_mesh_dims,
                     settle_keeping, single_partials, single_sharding)
from .contraction import contraction_decision, matmul_equation, tensordot_equation
from .einop import einop_rule, pointwise_equation
from .empty_batch import empty_batch, numpy_outputs
from .registry import Decision, OpRule, register
from .shape_ops import permute_decision
from .signature_bind import signature_binder
from .tsqr import tsqr_decision
from .whole_axes import LINEAR_REDUCE_OPS, run_agreeing, whole_decision, without_trivial_shards

__all__ = ["vector_equation", "diagonal_pieces", "MATRIX_FUNCTIONS"]

_SINGULAR = "Singular matrix"
_SVD = "SVD did not converge"
_EIG = "Eigenvalues did not converge"

# function -> NumPy's LinAlgError message when some values make it fail (None: it never fails on values)
MATRIX_FUNCTIONS: dict[Callable[..., Any], Optional[str]] = {
    np.linalg.cholesky: "Matrix is not positive definite",
    np.linalg.det: None,
    np.linalg.eigh: _EIG,
    np.linalg.eigvalsh: _EIG,
    np.linalg.inv: _SINGULAR,
    np.linalg.matrix_power: _SINGULAR,
    np.linalg.matrix_rank: _SVD,
    np.linalg.pinv: _SVD,
    np.linalg.qr: None,
    np.linalg.slogdet: None,
    np.linalg.svd: _SVD,
    np.linalg.svdvals: _SVD,
}
# arguments that NumPy broadcasts against the batch but these rules take as scalars only
_SCALAR_ARGUMENTS = ("tol", "rtol", "rcond")


def _bind(func: Callable[..., Any], arrays: int = 1) -> Callable[[tuple, dict], tuple[tuple[Any, ...], Hashable]]:
    return signature_binder(func, "numpy.linalg", arrays, _SCALAR_ARGUMENTS)


def _caller(func: Callable[..., Any], key: Any) -> Callable[..., Any]:
    kwargs = dict(key)
    return lambda *arrays: func(*arrays, **kwargs)


# -- whole matrices ------------------------------------------------------------------------
def _matrix_rule(func: Callable[..., Any], failure: Optional[str]) -> OpRule:
    def decide(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
        (spec,) = specs
        call = _caller(func, key)
        batch = spec.ndim >= 2  # below 2-d NumPy raises (matrix_rank answers for the whole array)
        metas, kind = numpy_outputs(call, [empty_batch(spec, batch)], batch)
        result_type = None if kind in (None, tuple) else kind
        tsqr = tsqr_decision(func.__name__, spec, dict(key), metas, multiple=kind is not None,
                             result_type=result_type, failure=failure) if batch else None
        if tsqr is not None:
            return tsqr
        core = range(spec.ndim - 2, spec.ndim) if batch else range(spec.ndim)
        return whole_decision(
            spec, core, metas, lambda rank, x: call(x),
            multiple=kind is not None, result_type=result_type, failure=failure,
        )

    return OpRule(func.__name__, _bind(func), decide)


for _func, _failure in MATRIX_FUNCTIONS.items():
    register(_func)(_matrix_rule(_func, _failure))


# -- norms -----------------------------------------------------------------------------------
def _inexact(x: Any) -> Any:
    """``x`` as NumPy's norms take it (integers and bools as float64)."""
    return x if np.issubdtype(x.dtype, np.inexact) else x.astype(float)


def _reduced_placements(spec: DTensorSpec, axes: Sequence[int], keepdims: bool, reduced: Placement) -> tuple[Placement, ...]:
    """Placements after reducing ``axes``: their mesh dims become ``reduced``, other shards renumbered."""
    out: list[Placement] = []
    for p in spec.placements:
        if isinstance(p, Shard) and p.dim in axes:
            out.append(reduced)
        elif isinstance(p, Shard):
            out.append(Shard(p.dim if keepdims else p.dim - sum(1 for a in axes if a < p.dim)))
        else:
            out.append(p)
    return tuple(out)


def _power_sum(ord: Any, axes: tuple[int, ...], keepdims: bool) -> Callable[[Any], Any]:
    """One shard's share of a vector norm, as NumPy computes the whole (``sum |x|**ord``, max or min)."""

    def share(x: Any) -> Any:
        x = _inexact(x)
        if ord == np.inf:
            return np.max(np.abs(x), axis=axes, keepdims=keepdims, initial=0)
        if ord == -np.inf:
            return np.min(np.abs(x), axis=axes, keepdims=keepdims, initial=np.inf)
        if ord == 0:
            return np.add.reduce((x != 0).astype(x.real.dtype), axis=axes, keepdims=keepdims)
        if ord == 1:
            return np.add.reduce(np.abs(x), axis=axes, keepdims=keepdims)
        if ord is None or ord == 2:
            return np.add.reduce((x.conj() * x).real, axis=axes, keepdims=keepdims)
        powers = np.abs(x)
        powers **= ord
        return np.add.reduce(powers, axis=axes, keepdims=keepdims)

    return share


def _root(ord: Any) -> Callable[[Any], Any]:
    if ord is None or ord == 2:
        return np.sqrt
    return lambda s: s ** np.reciprocal(ord, dtype=s.dtype)


def _norm_in_library(x: Any, axes: tuple[int, ...], keepdims: bool, ord: Any) -> Any:
    """The vector norm of order ``ord`` over ``axes`` from its definition, in ``x``'s own array library."""
    xp = array_module(x)
    x = _inexact(x)
    size = xp.abs(x)
    if ord == np.inf:
        return xp.max(size, axis=axes, keepdims=keepdims)
    if ord == -np.inf:
        return xp.min(size, axis=axes, keepdims=keepdims)
    if ord == 0:
        return xp.sum(x != 0, axis=axes, keepdims=keepdims).astype(size.dtype)
    if ord == 1:
        return xp.sum(size, axis=axes, keepdims=keepdims)
    if ord is None or ord == 2:
        return xp.sqrt(xp.sum(size * size, axis=axes, keepdims=keepdims))
    return xp.sum(size ** ord, axis=axes, keepdims=keepdims) ** (1 / ord)


def norm_decision(spec: DTensorSpec, axes: tuple[int, ...], keepdims: bool, ord: Any, meta: TensorMeta, call: Callable[[Any], Any]) -> Decision:
    """A vector norm of order ``ord`` over ``axes`` (``matrix_norm`` 'fro' is the 2-norm over the last two).

    Unsharded ``axes``: NumPy's call on every shard.  Sharded: ord 1 and 0
    leave ``Partial(sum)``, inf ``Partial(max)``, -inf ``Partial(min)`` (no
    communication); other orders sum ``|x|**ord`` per shard, ``all_reduce``
    the sums once over every mesh dim of ``axes`` together, and take the root.
    """
    spec = without_trivial_shards(partial_free(single_sharding(spec)))
    mesh = spec.mesh
    reduced = tuple(m for m, p in enumerate(spec.placements) if isinstance(p, Shard) and p.dim in axes)
    if not reduced:
        out = DTensorSpec(mesh, _reduced_placements(spec, axes, keepdims, Replicate()), meta)

        def local(rank: int, x: Any) -> Any:
            if x.__class__ is np.ndarray:
                return call(x)
            return _norm_in_library(x, axes, keepdims, ord)  # CuPy has no linalg.vector_norm

        return Decision((spec,), (out,), local)
    share = _power_sum(ord, axes, keepdims)
    pending = {np.inf: "max", -np.inf: "min", 0: "sum", 1: "sum"}.get(ord) if ord is not None else None
    if pending is not None:
        out = DTensorSpec(mesh, _reduced_placements(spec, axes, keepdims, Partial(pending)), meta)
        return Decision((spec,), (out,), lambda rank, x: share(x))
    out = DTensorSpec(mesh, _reduced_placements(spec, axes, keepdims, Replicate()), meta)
    return Decision((spec,), (out,), None, program=_sum_then(mesh.groups(reduced), share, _root(ord)))


def _sum_then(groups: Any, share: Callable[[Any], Any], finish: Callable[[Any], Any]) -> Callable[..., dict[int, Any]]:
    """A program: every rank's ``share`` of its shard, one ``all_reduce`` (sum) over ``groups``, then ``finish``."""

    def program(backend: Any, shards: dict[int, Any]) -> dict[int, Any]:
        sums = backend.all_reduce({r: share(x) for r, x in shards.items()}, groups)
        return {r: finish(s) for r, s in sums.items()}

    return program


def _decide_vector_norm(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    (spec,) = specs
    kwargs = dict(key)
    axes = normalize_axes(kwargs["axis"], spec.ndim)
    axes = tuple(range(spec.ndim)) if axes is None else axes
    keepdims = keepdims_flag(kwargs["keepdims"])
    call = _caller(np.linalg.vector_norm, key)
    # NumPy checks ord and empty max/min on an array of the same emptiness; its dtype is the result's
    small = np.zeros(tuple(min(n, 1) for n in spec.shape), spec.dtype)
    (probe,), _ = numpy_outputs(call, [small], batch=False)
    shape = tuple(1 if d in axes else n for d, n in enumerate(spec.shape) if keepdims or d not in axes)
    return norm_decision(spec, axes, keepdims, kwargs["ord"], TensorMeta(shape, probe.dtype), call)


register(np.linalg.vector_norm)(OpRule("vector_norm", _bind(np.linalg.vector_norm), _decide_vector_norm))


def _induced_norm_decision(spec: DTensorSpec, ord: Any, keepdims: bool, meta: TensorMeta, call: Callable[[Any], Any]) -> Decision:
    """``matrix_norm`` ord 1, -1 (max/min column sum) and inf, -inf (max/min row sum)."""
    spec = without_trivial_shards(partial_free(single_sharding(spec)))
    mesh = spec.mesh
    rows, cols = spec.ndim - 2, spec.ndim - 1
    summed, extreme = (rows, cols) if ord in (1, -1) else (cols, rows)
    largest = ord in (1, np.inf)
    dim_map = spec.dim_map
    m_sum, m_ext = dim_map[summed], dim_map[extreme]
    placements = list(_reduced_placements(spec, (rows, cols), keepdims, Replicate()))
    if m_ext != -1:
        placements[m_ext] = Partial("max" if largest else "min")
    out = DTensorSpec(mesh, tuple(placements), meta)
    if m_sum == -1 and m_ext == -1:
        return Decision((spec,), (out,), lambda rank, x: call(x))

    def sums(x: Any) -> Any:
        return np.add.reduce(np.abs(_inexact(x)), axis=summed, keepdims=True)

    def finish(s: Any) -> Any:
        pick = np.max(s, axis=extreme, keepdims=True, initial=0) if largest else np.min(s, axis=extreme, keepdims=True, initial=np.inf)
        return pick if keepdims else pick.reshape(pick.shape[:-2])

    if m_sum == -1:
        return Decision((spec,), (out,), lambda rank, x: finish(sums(x)))
    return Decision((spec,), (out,), None, program=_sum_then(mesh.groups((m_sum,)), sums, finish))


def _decide_matrix_norm(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    (spec,) = specs
    kwargs = dict(key)
    ord, keepdims = kwargs["ord"], keepdims_flag(kwargs["keepdims"])
    call = _caller(np.linalg.matrix_norm, key)
    batch = spec.ndim >= 2
    (meta,), _ = numpy_outputs(call, [empty_batch(spec, batch)], batch)
    rows, cols = spec.ndim - 2, spec.ndim - 1
    if ord is None or (isinstance(ord, str) and ord in ("fro", "f")):
        return norm_decision(spec, (rows, cols), keepdims, 2, meta, call)
    if isinstance(ord, str) or ord in (2, -2):  # 'nuc', 2, -2: singular values of whole matrices
        tsqr = tsqr_decision("matrix_norm", spec, kwargs, (meta,), multiple=False, result_type=None, failure=_SVD)
        if tsqr is not None:
            return tsqr
        return whole_decision(spec, (rows, cols), (meta,), lambda rank, x: call(x), failure=_SVD)
    return _induced_norm_decision(spec, ord, keepdims, meta, call)


register(np.linalg.matrix_norm)(OpRule("matrix_norm", _bind(np.linalg.matrix_norm), _decide_matrix_norm))


# -- diagonals -----------------------------------------------------------------------------------
def diagonal_pieces(spec: DTensorSpec, offset: int, length: int) -> dict[int, tuple[int, int, int]]:
    """For every rank: (first local row, first local column, count) of the diagonal entries in its block.

    In the order of the ranks along the row then the column mesh dims, the
    pieces are consecutive runs of the diagonal (each entry in one block).

    Example:
        >>> from dtensor_np import DeviceMesh, DTensorSpec, TensorMeta, Shard
        >>> spec = DTensorSpec(DeviceMesh((2, 2)), (Shard(0), Shard(1)), TensorMeta((4, 4), "f8"))
        >>> diagonal_pieces(spec, 1, 3)
        {0: (0, 1, 1), 1: (1, 0, 1), 2: (0, 0, 0), 3: (0, 1, 1)}
    """
    skip_rows, skip_cols = max(0, -offset), max(0, offset)
    pieces = {}
    for r in spec.mesh.all_ranks:
        shape, origin = spec.local_block(r)
        row, col, rows, cols = origin[-2], origin[-1], shape[-2], shape[-1]
        lo = max(0, row - skip_rows, col - skip_cols)
        hi = min(length, row + rows - skip_rows, col + cols - skip_cols)
        pieces[r] = (lo + skip_rows - row, lo + skip_cols - col, hi - lo) if hi > lo else (0, 0, 0)
    return pieces


def _diagonal_setup(spec: DTensorSpec, key: Any, func: Callable[..., Any]) -> tuple[Callable[..., Any], TensorMeta, tuple[int, ...], dict[int, tuple[int, int, int]]]:
    """NumPy's call and result meta, the mesh dims of the matrix dims (rows first, each in shard order), and every rank's piece."""
    call = _caller(func, key)
    batch = spec.ndim >= 2
    (meta,), _ = numpy_outputs(call, [empty_batch(spec, batch)], batch)
    order = dict(spec.shard_order)  # type: ignore[arg-type]
    core_mesh = tuple(order.get(spec.ndim - 2, ())) + tuple(order.get(spec.ndim - 1, ()))
    if not core_mesh:
        return call, meta, core_mesh, {}
    offset = int(dict(key)["offset"])
    length = max(0, min(spec.shape[-2] + min(offset, 0), spec.shape[-1] - max(offset, 0)))
    return call, meta, core_mesh, diagonal_pieces(spec, offset, length)


def _decide_diagonal(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    spec = specs[0]  # a selection: every pending reduction flows through, nested splits stay
    call, meta, core_mesh, pieces = _diagonal_setup(spec, key, np.linalg.diagonal)
    mesh = spec.mesh
    if not core_mesh:
        return Decision((spec,), (DTensorSpec(mesh, spec.placements, meta, spec.shard_order),), lambda rank, x: call(x))
    last = spec.ndim - 2
    placements = tuple(Shard(last) if m in core_mesh else p for m, p in enumerate(spec.placements))
    order = tuple((d, ms) for d, ms in spec.shard_order if d < last) + ((last, core_mesh),)  # type: ignore[union-attr]
    out = DTensorSpec(mesh, placements, meta, order)

    def cut(rank: int, x: Any) -> Any:
        row, col, n = pieces[rank]
        return np.diagonal(x[..., row : row + n, col : col + n], axis1=-2, axis2=-1).copy()

    in_sizes = {r: n for r, (_, _, n) in pieces.items()}
    out_sizes = {r: out.local_shape_of_rank(r)[-1] for r in mesh.all_ranks}
    if in_sizes == out_sizes:
        return Decision((spec,), (out,), cut)
    groups = mesh.groups(core_mesh)

    def program(backend: Any, shards: dict[int, Any]) -> dict[int, Any]:
        cuts = {r: cut(r, x) for r, x in shards.items()}
        return backend.rechunk(cuts, groups, axis=last, in_sizes=in_sizes, out_sizes=out_sizes)

    return Decision((spec,), (out,), None, program=program)


def _decide_trace(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    spec = specs[0]
    call, meta, core_mesh, pieces = _diagonal_setup(spec, key, np.linalg.trace)
    # a sum: pending sums flow through unless the result's dtype differs (a cast is not linear)
    spec = partial_free(spec, lambda m, p: p.reduce_op in LINEAR_REDUCE_OPS and meta.dtype == spec.dtype)
    mesh = spec.mesh
    if not core_mesh:
        return Decision((spec,), (DTensorSpec(mesh, spec.placements, meta, spec.shard_order),), lambda rank, x: call(x))
    pending = Partial("max" if meta.dtype == np.bool_ else "sum")
    placements = tuple(pending if m in core_mesh else p for m, p in enumerate(spec.placements))
    out = DTensorSpec(mesh, placements, meta, tuple((d, ms) for d, ms in spec.shard_order if d < spec.ndim - 2))  # type: ignore[union-attr]
    dtype = dict(key)["dtype"]

    def local(rank: int, x: Any) -> Any:
        row, col, n = pieces[rank]
        return np.trace(x[..., row : row + n, col : col + n], axis1=-2, axis2=-1, dtype=dtype)

    return Decision((spec,), (out,), local)


register(np.linalg.diagonal)(OpRule("diagonal", _bind(np.linalg.diagonal), _decide_diagonal))
register(np.linalg.trace)(OpRule("trace", _bind(np.linalg.trace), _decide_trace))


def _decide_matrix_transpose(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    (spec,) = specs
    numpy_outputs(np.linalg.matrix_transpose, [empty_batch(spec, batch=False)], batch=False)  # NumPy's error below 2-d
    perm = list(range(spec.ndim))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return permute_decision(spec, perm)


register(np.linalg.matrix_transpose, np.matrix_transpose)(
    OpRule("matrix_transpose", _bind(np.linalg.matrix_transpose), _decide_matrix_transpose)
)


# -- contractions --------------------------------------------------------------------------------
def _numpy_checks(func: Callable[..., Any], specs: Sequence[DTensorSpec], key: Any) -> None:
    """NumPy's own errors for these operand ranks (on zero-size stand-ins)."""
    numpy_outputs(_caller(func, key), [empty_batch(s, batch=False) for s in specs], batch=False)


def _decide_matmul(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    _numpy_checks(np.linalg.matmul, specs, key)
    equation = matmul_equation(specs[0].shape, specs[1].shape)
    return contraction_decision(equation, specs, lambda rank, a, b: np.linalg.matmul(a, b))


def _decide_tensordot(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    _numpy_checks(np.linalg.tensordot, specs, key)
    axes = dict(key)["axes"]
    equation = tensordot_equation(specs[0].shape, specs[1].shape, axes)
    return contraction_decision(equation, specs, lambda rank, a, b: np.linalg.tensordot(a, b, axes=axes))


def _decide_outer(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    _numpy_checks(np.linalg.outer, specs, key)
    return contraction_decision("i,j->ij", specs, lambda rank, a, b: np.linalg.outer(a, b))


register(np.linalg.matmul)(OpRule("matmul", _bind(np.linalg.matmul, 2), _decide_matmul))
register(np.linalg.tensordot)(OpRule("tensordot", _bind(np.linalg.tensordot, 2), _decide_tensordot))
register(np.linalg.outer)(OpRule("outer", _bind(np.linalg.outer, 2), _decide_outer))


def vector_equation(a: Sequence[int], b: Sequence[int], axis: int, keep: bool) -> str:
    """The einop equation of a function of vectors along ``axis`` of each operand, broadcasting the other dims.

    ``keep``: the vector dim is in the output (``cross``, at ``axis`` of the
    output); otherwise it is contracted (``vecdot``).

    Example:
        >>> vector_equation((4, 3), (3,), -1, keep=False), vector_equation((2, 3, 5), (3, 5), -2, keep=True)
        ('aK,K->a', 'aKb,Kb->aKb')
    """
    ax_a, ax_b = axis_index(axis, len(a)), axis_index(axis, len(b))
    loop_a, loop_b = tuple(a[:ax_a]) + tuple(a[ax_a + 1 :]), tuple(b[:ax_b]) + tuple(b[ax_b + 1 :])
    lhs, out = pointwise_equation([loop_a, loop_b]).split("->")
    pa, pb = lhs.split(",")
    if keep:
        at = axis_index(axis, len(out) + 1)
        out = out[:at] + "K" + out[at:]
    return f"{pa[:ax_a]}K{pa[ax_a:]},{pb[:ax_b]}K{pb[ax_b:]}->{out}"


def _vector_checks(func: Callable[..., Any], specs: Sequence[DTensorSpec], key: Any) -> int:
    """NumPy's errors for the vector dims and dtypes (other dims as 0 or 1); the axis as given."""
    axis = dict(key)["axis"]
    stand_ins = []
    for s in specs:
        ax = axis_index(axis, s.ndim, "axis")
        stand_ins.append(np.zeros(tuple(n if d == ax else min(n, 1) for d, n in enumerate(s.shape)), s.dtype))
    numpy_outputs(_caller(func, key), stand_ins, batch=False)
    return axis


def _decide_vecdot(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    axis = _vector_checks(np.linalg.vecdot, specs, key)
    equation = vector_equation(specs[0].shape, specs[1].shape, axis, keep=False)
    return contraction_decision(equation, specs, lambda rank, a, b: np.linalg.vecdot(a, b, axis=axis))


def _decide_cross(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    axis = _vector_checks(np.linalg.cross, specs, key)
    equation = vector_equation(specs[0].shape, specs[1].shape, axis, keep=True)
    whole = []
    for s in specs:  # the 3-vectors are whole on every rank
        s = single_sharding(s)
        ax = axis_index(axis, s.ndim)
        whole.append(replicate_mesh_dims(s, [m for m, p in enumerate(s.placements) if isinstance(p, Shard) and p.dim == ax]))
    return contraction_decision(equation, tuple(whole), lambda rank, a, b: np.linalg.cross(a, b, axis=axis))


def _bind_vecdot_ufunc(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    """``np.vecdot`` (the gufunc of NumPy's main namespace) with its ``axis=`` keyword only."""
    extra = sorted(set(kwargs) - {"axis"})
    if extra:
        raise ShardingError(f"numpy.vecdot on DTensors takes axis= only, got {extra}")
    return _bind(np.linalg.vecdot, 2)(args, kwargs)


register(np.linalg.vecdot)(OpRule("vecdot", _bind(np.linalg.vecdot, 2), _decide_vecdot))
register(np.vecdot)(OpRule("vecdot", _bind_vecdot_ufunc, _decide_vecdot))
register(np.linalg.cross)(OpRule("cross", _bind(np.linalg.cross, 2), _decide_cross))


# -- solve ---------------------------------------------------------------------------------------
def _decide_solve(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    a, b = specs
    vector = b.ndim == 1  # NumPy 2: b is a vector only when it is 1-d
    batch_a = a.shape[:-2]
    batch_b = () if vector else b.shape[:-2]
    width = max(len(batch_a), len(batch_b))
    stand_a = np.zeros((0,) + (1,) * (width - len(batch_a)) + a.shape, a.dtype) if a.ndim >= 2 else empty_batch(a, False)
    stand_b = np.zeros(b.shape if vector else (0,) + (1,) * (width - len(batch_b)) + b.shape, b.dtype)
    (meta,), _ = numpy_outputs(np.linalg.solve, [stand_a, stand_b])
    lhs, out = pointwise_equation([batch_a, batch_b]).split("->") if width else (",", "")
    pa, pb = lhs.split(",")
    equation = f"{pa}MN,{pb}N->{out}M" if vector else f"{pa}MN,{pb}NK->{out}MK"
    a = single_sharding(partial_free(a))
    a = replicate_mesh_dims(a, [m for m, p in enumerate(a.placements) if isinstance(p, Shard) and p.dim >= a.ndim - 2])
    b = single_sharding(b)
    rows = b.ndim - (1 if vector else 2)
    b = replicate_mesh_dims(b, [m for m, p in enumerate(b.placements) if isinstance(p, Shard) and p.dim == rows])
    specs = harmonize(equation, [a, b])
    inputs, out_spec = settle_keeping(lambda ss: einop_rule(equation, ss), specs, single_partials(specs, allowed=[1]))
    out_spec = DTensorSpec(out_spec.mesh, out_spec.placements, meta, out_spec.shard_order)
    local = lambda rank, x, y: np.linalg.solve(x, y)  # noqa: E731
    if not any(isinstance(p, Shard) for s in inputs for p in s.placements):
        return Decision(inputs, (out_spec,), local)

    def program(backend: Any, a_shards: dict[int, Any], b_shards: dict[int, Any]) -> dict[int, Any]:
        return run_agreeing(backend, [a_shards, b_shards], local, _SINGULAR, True)

    return Decision(inputs, (out_spec,), None, program=program)


register(np.linalg.solve)(OpRule("solve", _bind(np.linalg.solve, 2), _decide_solve))
