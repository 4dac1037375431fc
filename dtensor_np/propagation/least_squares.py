"""Least squares on row-sharded data: ``numpy.linalg.lstsq`` and ``numpy.polyfit`` by one gather of small blocks.

The rows of ``a`` (``polyfit``: of the Vandermonde matrix of ``x``, made on
every rank from its own ``x``) and of ``b`` (``y``) stay where they are.
Every rank factors its block, ``a_r = q_r r_r`` (QR), and keeps ``r_r`` and
``q_r^H b_r``: at most ``n x (n + k)`` values for ``n`` unknowns and ``k``
right-hand sides, plus one row with its share of the squared residual that
``q_r`` cannot reach (``polyfit``: with the column sums of squares that scale
the columns, and with ``cov=`` the block's ``n x n`` product ``a_r^T a_r``).
One ``all_gather`` over the ranks that split the rows gives every rank the
stacked blocks, a small problem with the same solutions, singular values and
rank as the whole one (``a = diag(q_r) [r_1; ...; r_P]``), which NumPy's own
``lstsq`` solves on every rank (the first level of a TSQR; not the normal
equations, which would square the condition number).  The results are
replicated and equal NumPy's to rounding (the rows are combined in another
order).  Nothing else moves: ``a`` sharded on its columns is moved to its
rows first (``all_to_all``); with no row sharded, NumPy's own call runs on
every rank.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> x = np.linspace(0.0, 1.0, 12)
    >>> y = dt.distribute_tensor(1.0 + 2.0 * x - 3.0 * x ** 2, dt.DeviceMesh((3,)), [dt.Shard(0)])
    >>> with dt.comm_counter() as c:
    ...     p = np.polyfit(x, y, 2)
    >>> np.round(p.full_tensor(), 12).tolist(), str(p.spec), c.counts["all_gather"], c.total
    ([-3.0, 2.0, 1.0], 'R', 1, 1)
"""

from __future__ import annotations

import warnings
from typing import Any, Hashable, Optional

import numpy as np

from collectives import frozen

from ..placements import Replicate, Shard
from ..sharded import array_operands, is_sharded
from ..spec import DTensorSpec, TensorMeta
from .common import partial_free, single_sharding
from .empty_batch import numpy_outputs
from .registry import Decision, OpRule, register
from .signature_bind import named_arguments, no_more_arguments

__all__ = ["row_mesh_dim", "stacked_blocks"]

Shards = dict[int, Any]


def row_mesh_dim(*specs: Optional[DTensorSpec]) -> Optional[int]:
    """The mesh dim that shards the rows (dim 0) of the first spec that has one (of more than one rank), else the
    one that shards the columns of the first (moved to its rows), else None.

    Example:
        >>> from dtensor_np import DeviceMesh
        >>> spec = DTensorSpec(DeviceMesh((1, 2)), (Replicate(), Shard(1)), TensorMeta((6, 3), "f8"))
        >>> row_mesh_dim(spec)
        1
    """
    for dims in ((0,), (1,)):
        for spec in specs[:1] if dims == (1,) else specs:
            if spec is None:
                continue
            for m, p in enumerate(spec.placements):
                if isinstance(p, Shard) and p.dim in dims and spec.ndim > p.dim and spec.mesh.shape[m] > 1:
                    return m
    return None


def _rows_on(spec: DTensorSpec, m: Optional[int]) -> DTensorSpec:
    """``spec`` with its rows sharded on mesh dim ``m`` and every other mesh dim replicated."""
    spec = single_sharding(partial_free(spec))
    placements = tuple(Shard(0) if i == m and spec.ndim else Replicate() for i in range(spec.mesh.ndim))
    return DTensorSpec(spec.mesh, placements, spec.tensor_meta)


def _factor(a: Any, b: Any, extra: list[Any]) -> Any:
    """One rank's block: ``[r | q^H b]``, then ``[extra[0] | squared residuals]``, then the rows of ``extra[1:]``.

    All of it from the triangle of ``[a | b]`` (``qr(mode="r")``, no ``q`` formed): its first ``n`` rows are
    ``[r | q^H b]`` (the first ``n`` Householder steps see only ``a``), the rest ``t`` with ``t^H t = b^H (1 - q q^H) b``,
    whose column sums of squares are the residuals ``q`` cannot reach.
    """
    n = a.shape[1]
    triangle = np.linalg.qr(np.concatenate([a, b], axis=1), mode="r")
    top = min(len(a), n)
    resid = (np.abs(triangle[top:, n:]) ** 2).sum(axis=0)
    rows = [triangle[:top], np.concatenate([extra[0], resid.astype(a.dtype)])[None]]
    rows += [np.concatenate([e, np.zeros((e.shape[0], b.shape[1]), a.dtype)], axis=1) for e in extra[1:]]
    return np.concatenate([x.astype(a.dtype, copy=False) for x in rows], axis=0)


def stacked_blocks(backend: Any, blocks: Shards, groups: Any, sizes: dict[int, int], n: int,
                   extra: int) -> dict[int, tuple[Any, Any, Any, Any, list[Any]]]:
    """One ``all_gather`` of every rank's block (see :func:`_factor`); for every held rank, the stacked
    ``r`` rows, the stacked ``q^H b`` rows, the summed residuals, the summed first extra row and the sums of the
    other extra blocks (``extra`` rows each).

    Example:
        >>> from collectives import SimulatedBackend
        >>> a, b = np.arange(8.0).reshape(4, 2) + np.eye(4, 2), np.ones((4, 1))
        >>> blocks = {r: _factor(a[2 * r:2 * r + 2], b[2 * r:2 * r + 2], [np.zeros(2)]) for r in (0, 1)}
        >>> top, rhs, resid, _, _ = stacked_blocks(SimulatedBackend(2), blocks, ((0, 1),), {0: 2, 1: 2}, 2, 0)[0]
        >>> np.allclose(np.linalg.lstsq(top, rhs)[0], np.linalg.lstsq(a, b)[0]), top.shape
        (True, (4, 2))
    """
    in_sizes = {r: min(s, n) + 1 + extra for r, s in sizes.items()}
    gathered = backend.all_gather(blocks, groups, axis=0, in_sizes=in_sizes)
    group_of = {r: g for g in groups for r in g}
    out = {}
    for r, stack in gathered.items():
        tops, first, others, start = [], 0, 0, 0
        for q in group_of[r]:
            top = min(sizes[q], n)
            tops.append(stack[start:start + top])
            first = first + stack[start + top]
            if extra:
                others = others + stack[start + top + 1:start + top + 1 + extra, :n]
            start += in_sizes[q]
        rows = np.concatenate(tops, axis=0)
        out[r] = (rows[:, :n], rows[:, n:], first[n:].real, first[:n], [others] if extra else [])
    return out


def _row_counts(spec: DTensorSpec) -> dict[int, int]:
    return {r: spec.local_block(r)[0][0] for r in spec.mesh.all_ranks}


# -- lstsq -----------------------------------------------------------------------------------------------
def _bind_lstsq(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    given = named_arguments("numpy.linalg.lstsq", ("a", "b", "rcond"), args, kwargs)
    a, b, rcond = given.pop("a", None), given.pop("b", None), given.pop("rcond", None)
    no_more_arguments("numpy.linalg.lstsq", given)
    a, b = array_operands([a, b])
    if not is_sharded(a) or not is_sharded(b):
        raise TypeError("numpy.linalg.lstsq on DTensors: expected a and b as arrays")
    return (a, b), frozen(rcond)


def _decide_lstsq(specs: tuple[DTensorSpec, ...], rcond: Any) -> Decision:
    """``lstsq``: rows of ``a`` and ``b`` sharded on a mesh dim: one ``all_gather`` of every rank's ``n x (n + k)``
    block (plus a row of residuals); else NumPy's call on every rank (``b``'s columns gathered)."""
    a, b = specs
    rows = a.shape[0] if a.ndim == 2 else 0
    if a.ndim != 2 or b.ndim not in (1, 2):  # NumPy's errors, on stand-ins of these ranks
        stand = [np.zeros((1,) * a.ndim, a.dtype), np.zeros((1,) * b.ndim, b.dtype)]
    elif b.shape[0] != rows:
        stand = [np.zeros((1, a.shape[1]), a.dtype), np.zeros((2,) + b.shape[1:], b.dtype)]
    else:
        stand = [np.zeros((0, a.shape[1]), a.dtype), np.zeros((0,) + b.shape[1:], b.dtype)]
    (x_meta, _, _, s_meta), _ = numpy_outputs(lambda u, v: np.linalg.lstsq(u, v, rcond), stand, batch=False)
    m = row_mesh_dim(a, b)
    a_in, b_in = _rows_on(a, m), _rows_on(b, m)
    n = a.shape[1]
    k = b.shape[1] if b.ndim == 2 else 1
    mesh = a.mesh
    replicated = (Replicate(),) * mesh.ndim
    outs = (DTensorSpec(mesh, replicated, TensorMeta(x_meta.shape, x_meta.dtype)),
            DTensorSpec(mesh, replicated, TensorMeta((0,), s_meta.dtype)),
            DTensorSpec(mesh, replicated, TensorMeta((), np.int32)),
            DTensorSpec(mesh, replicated, TensorMeta((min(rows, n),), s_meta.dtype)))
    if m is None:
        return Decision((a_in, b_in), outs,
                        lambda rank, u, v: tuple(np.linalg.lstsq(u, v, rcond)), multiple_outputs=True,
                        data_dependent=True)
    work = np.result_type(np.zeros(0, a.dtype), np.zeros(0, b.dtype), 1.0)
    work = np.dtype(np.complex128 if work.kind == "c" else np.float64)
    limit = np.finfo(work).eps * max(n, rows) if rcond is None else rcond
    sizes = _row_counts(a_in)
    groups = mesh.groups((m,))

    def program(backend: Any, a_shards: Shards, b_shards: Shards) -> tuple[Shards, ...]:
        blocks = {r: _factor(u.astype(work), b_shards[r].reshape(len(u), k).astype(work), [np.zeros(n, work)])
                  for r, u in a_shards.items()}
        results = []
        for r, (top, rhs, resid, _, _) in stacked_blocks(backend, blocks, groups, sizes, n, 0).items():
            x, _, rank, s = np.linalg.lstsq(top, rhs, limit)
            if rows == 0:
                x[...] = 0
            residuals = np.zeros(0, s_meta.dtype)
            if rank == n and rows > n:
                residuals = ((np.abs(rhs - top @ x) ** 2).sum(axis=0) + resid).astype(s_meta.dtype)
            x = x.astype(x_meta.dtype).reshape(x_meta.shape)
            results.append((r, (x, residuals, np.asarray(rank, np.int32), s.astype(s_meta.dtype))))
        return tuple({r: res[i] for r, res in results} for i in range(4))

    return Decision((a_in, b_in), outs, None, multiple_outputs=True, program=program, data_dependent=True)


register(np.linalg.lstsq)(OpRule("lstsq", _bind_lstsq, _decide_lstsq))


# -- polyfit ---------------------------------------------------------------------------------------------
def _bind_polyfit(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    names = ("x", "y", "deg", "rcond", "full", "w", "cov")
    given = named_arguments("numpy.polyfit", names, args, kwargs)
    x, y, w = given.pop("x", None), given.pop("y", None), given.pop("w", None)
    if "deg" not in given:
        raise TypeError("numpy.polyfit() missing required argument 'deg'")
    deg, rcond = given.pop("deg"), given.pop("rcond", None)
    full, cov = given.pop("full", False), given.pop("cov", False)
    no_more_arguments("numpy.polyfit", given)
    x, y, w = array_operands([x, y, w])
    if not is_sharded(x) or not is_sharded(y):
        raise TypeError("numpy.polyfit on DTensors: expected x and y as arrays")
    tensors = (x, y) + ((w,) if is_sharded(w) else ())
    return tensors, (frozen(deg), frozen(rcond), bool(full), frozen(cov), is_sharded(w))


def _polyfit_checks(x: DTensorSpec, y: DTensorSpec, w: Optional[DTensorSpec], deg: Any, cov: Any, full: bool) -> int:
    order = int(deg) + 1
    if deg < 0:
        raise ValueError("expected deg >= 0")
    if x.ndim != 1:
        raise TypeError("expected 1D vector for x")
    if x.shape[0] == 0:
        raise TypeError("expected non-empty vector for x")
    if y.ndim < 1 or y.ndim > 2:
        raise TypeError("expected 1D or 2D array for y")
    if x.shape[0] != y.shape[0]:
        raise TypeError("expected x and y to have same length")
    if w is not None:
        if w.ndim != 1:
            raise TypeError("expected a 1-d array for weights")
        if w.shape[0] != y.shape[0]:
            raise TypeError("expected w and y to have the same length")
    if cov and not full and cov != "unscaled" and x.shape[0] <= order:
        raise ValueError("the number of data points must exceed order to scale the covariance matrix")
    return order


def _finish_polyfit(top: Any, rhs: Any, resid: Any, colsq: Any, gram: list[Any], *, order: int, length: int,
                    rcond: Any, full: bool, cov: Any, y_1d: bool, dtype: np.dtype) -> Any:
    """NumPy's ``polyfit`` from the stacked blocks: the columns scaled, ``lstsq``, the rank warning, ``cov``."""
    scale = np.sqrt(colsq)
    top = top / scale
    c, _, rank, s = np.linalg.lstsq(top, rhs, rcond)
    resids = np.zeros(0, np.finfo(dtype).dtype)
    if rank == order and length > order:
        resids = ((np.abs(rhs - top @ c) ** 2).sum(axis=0) + resid).astype(resids.dtype)
    if y_1d:
        c = c[:, 0]
    c = (c.T / scale).T.astype(dtype, copy=False)
    if rank != order and not full:
        warnings.warn("Polyfit may be poorly conditioned", np.exceptions.RankWarning, stacklevel=2)
    if full:
        return c, resids, np.asarray(rank, np.int32), s.astype(resids.dtype), np.asarray(rcond)
    if cov:
        vbase = np.linalg.inv(gram[0] / np.outer(scale, scale))
        vbase /= np.outer(scale, scale)
        fac = 1 if cov == "unscaled" else resids / (length - order)
        return c, (vbase * fac if y_1d else vbase[:, :, np.newaxis] * fac)
    return c


def _decide_polyfit(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    """``polyfit``: rows of ``x``, ``y`` (and ``w``) sharded on a mesh dim: one ``all_gather`` of every rank's
    ``(deg + 1) x (deg + 1 + k)`` block (see the module); else NumPy's call on every rank."""
    deg, rcond, full, cov, has_w = key
    x, y = specs[0], specs[1]
    w = specs[2] if has_w else None
    order = _polyfit_checks(x, y, w, deg, cov, full)
    m = row_mesh_dim(y, x, w)
    inputs = tuple(_rows_on(s, m) for s in specs)
    floats = [np.zeros(0, s.dtype) + 0.0 for s in specs]
    work = np.result_type(*floats, 1.0)
    real = np.finfo(work).dtype
    columns = y.shape[1:]
    metas = [TensorMeta((order,) + columns, work)]
    if full:
        metas += [TensorMeta(columns or (1,), real), TensorMeta((), np.int32), TensorMeta((order,), real),
                  TensorMeta((), np.float64)]
    elif cov:
        metas.append(TensorMeta((order, order) + columns, work))
    mesh = x.mesh
    outs = tuple(DTensorSpec(mesh, (Replicate(),) * mesh.ndim, meta) for meta in metas)
    multiple = len(outs) > 1

    if m is None:
        def local(rank: int, *arrays: Any) -> Any:
            out = np.polyfit(arrays[0], arrays[1], deg, rcond, full, arrays[2] if has_w else None, cov)
            return tuple(np.asarray(o) for o in out) if multiple else out

        return Decision(inputs, outs, local, multiple_outputs=multiple, data_dependent=True)
    length = x.shape[0]
    limit = length * np.finfo(floats[0].dtype).eps if rcond is None else rcond
    with_gram = bool(cov) and not full
    lhs_complex = floats[0].dtype.kind == "c" or (has_w and floats[2].dtype.kind == "c")
    sizes = _row_counts(inputs[0])
    groups = mesh.groups((m,))

    def block(xs: Any, ys: Any, ws: Optional[Any]) -> Any:
        lhs = np.vander(xs + 0.0, order)
        rhs = ys + 0.0
        if ws is not None:
            ws = ws + 0.0
            lhs *= ws[:, np.newaxis]
            if rhs.ndim == 2:
                rhs *= ws[:, np.newaxis]
            else:
                rhs *= ws
        extra = [(lhs * lhs).sum(axis=0).astype(work)] + ([(lhs.T @ lhs).astype(work)] if with_gram else [])
        return _factor(lhs.astype(work), rhs.reshape((len(rhs),) + (columns or (1,))).astype(work), extra)

    def program(backend: Any, *shards: Shards) -> Any:
        blocks = {r: block(shards[0][r], shards[1][r], shards[2][r] if has_w else None) for r in shards[0]}
        stacked = stacked_blocks(backend, blocks, groups, sizes, order, order if with_gram else 0)
        out = {r: _finish_polyfit(top, rhs, resid, colsq if lhs_complex else colsq.real, gram, order=order,
                                  length=length, rcond=limit, full=full, cov=cov, y_1d=y.ndim == 1, dtype=work)
               for r, (top, rhs, resid, colsq, gram) in stacked.items()}
        if not multiple:
            return out
        return tuple({r: res[i] for r, res in out.items()} for i in range(len(outs)))

    return Decision(inputs, outs, None, multiple_outputs=multiple, program=program, data_dependent=True)


register(np.polyfit)(OpRule("polyfit", _bind_polyfit, _decide_polyfit))
