"""TSQR: ``qr``, ``svd`` and the functions of singular values on row-sharded tall-skinny matrices.

A matrix whose rows (the second-to-last dim) are sharded on one or more mesh
dims and whose columns are whole is factored without moving it: every rank
factors its block ``a_r = q_r r_r`` (NumPy's QR, ``r_r`` at most ``n x n``),
one ``all_gather`` over the ranks that split the rows gives every rank the
stacked ``r_r`` (the same bytes, in group order), and every rank factors that
small stack, ``[r_1; ...; r_p] = q_s r`` (one level of a TSQR: Demmel et al.
2012).  ``a = (diag(q_r) q_s) r``: ``r`` is replicated and every rank's rows
of ``Q`` are ``q_r @ q_s[its rows]``, sharded like ``a``.  The functions of
singular values use the small ``r`` only (``a`` and ``r`` have the same ones).
A matrix whose columns are sharded and rows whole (a wide one) is factored as
its conjugate transpose (``a^H = q r``, so ``a = r^H q^H``).

=====================================  ===================================================================
function (rows sharded, cols whole)    result
=====================================  ===================================================================
``qr`` mode ``'reduced'``, ``'r'``     ``Q`` sharded like ``a``, ``R`` replicated over the row mesh dims
``svd`` ``full_matrices=False``        ``U = Q @ u`` sharded like ``a``; ``S``, ``Vh`` replicated
(or a square matrix), ``svdvals``      (wide: ``U`` replicated, ``Vh = vh @ Q^H`` sharded like ``a``)
``pinv``                               ``pinv(R) @ Q^H``: the input's sharded dim becomes the last
``matrix_rank cond``                   NumPy's function of ``R`` (``matrix_rank``'s default tolerance from
``matrix_norm`` ord 2, -2, ``'nuc'``   ``a``'s shape): replicated over the row mesh dims
=====================================  ===================================================================

Cost, for ``p`` ranks splitting the rows and ``d = min(m, n)``: one ``all_gather``
of at most ``d x n`` values per rank and matrix (every rank receives the
``(p - 1)`` others' ``r_r``: ``O(p d n)`` bytes, never ``a``), a local QR of
each block (``O(m_r n^2)``), and a QR of the ``p d x n`` stack on every rank
(``O(p d n^2)``).  Empty shards send nothing (``m_r = 0``); blocks with fewer
rows than columns send ``m_r x n``.  The functions that need no ``Q`` (``svdvals``,
``matrix_rank``, ``cond``, the norms, ``qr`` mode ``'r'``) factor with NumPy's
mode ``'r'``: no ``Q`` is formed.

Signs, so that every rank and every mesh gives the same factors: ``R``'s
diagonal is made real and non-negative (``Q``'s columns scaled to match); in
``svd`` the entry of largest magnitude of each right singular vector (each row
of ``Vh``; wide matrices: each column of ``U``) is made real and positive
(scikit-learn's ``svd_flip``).  NumPy leaves these to LAPACK: compare with its
factors up to those signs.  Every rank of a group factors the same stacked
bytes in the same order, so the replicated results are bitwise identical.

A matrix held whole by one rank (a mesh of one rank, or its split on a size-1 mesh dim) gets NumPy's own
function, its values and LAPACK's signs.  Not here (the gathering rules of :mod:`.linalg` run instead): ``qr`` modes
``'complete'`` (an ``m x m`` Q) and ``'raw'`` (LAPACK's Householder vectors of
the whole matrix), ``qr`` of a wide matrix, ``svd`` with
``full_matrices=True`` of a non-square matrix (an ``m x m`` U), ``hermitian=True``,
matrices sharded on both matrix dims, empty matrices, and matrices that are not
tall (``m < p n``) while a batch dim can take the sharding (one ``all_to_all``).

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> a = np.random.default_rng(0).normal(size=(10, 3))
    >>> x = dt.distribute_tensor(a, dt.DeviceMesh((4,)), [dt.Shard(0)])   # rows 3, 3, 3, 1
    >>> with dt.comm_counter() as c:
    ...     q, r = np.linalg.qr(x)
    >>> str(q.spec), str(r.spec), c.counts["all_gather"], c.total, bool(np.all(np.diag(r.full_tensor()) >= 0))
    ('S(0)', 'R', 1, 1, True)
    >>> np.allclose(q.full_tensor() @ r.full_tensor(), a), np.allclose(q.full_tensor().T @ q.full_tensor(), np.eye(3))
    (True, True)
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence

import numpy as np

from collectives import array_module

from ..placements import Partial, Replicate, Shard
from ..spec import DTensorSpec, TensorMeta
from .common import partial_free, single_sharding
from .registry import Decision
from .whole_axes import run_agreeing, split_outputs, whole_plan, without_trivial_shards

__all__ = ["tsqr_plan", "tsqr_decision", "positive_diagonal", "flip_singular_vectors"]

Shards = dict[int, Any]


def tsqr_plan(spec: DTensorSpec) -> Optional[tuple[bool, tuple[int, ...]]]:
    """``(wide, mesh dims)`` when TSQR factors ``spec``'s matrices: the mesh dims (in shard order) that split
    the rows (``wide``: the columns), the other matrix dim whole; else None.

    Example:
        >>> from dtensor_np import DeviceMesh
        >>> mesh = DeviceMesh((2, 2))
        >>> tsqr_plan(DTensorSpec(mesh, (Shard(0), Shard(0)), TensorMeta((40, 3), "f8")))
        (False, (0, 1))
        >>> tsqr_plan(DTensorSpec(mesh, (Shard(1), Replicate()), TensorMeta((3, 40), "f8")))
        (True, (0,))
        >>> tsqr_plan(DTensorSpec(mesh, (Shard(1), Shard(2)), TensorMeta((8, 4, 4), "f8")))   # both dims split
        >>> tsqr_plan(DTensorSpec(DeviceMesh((1,)), (Shard(0),), TensorMeta((8, 4), "f8")))   # one rank: NumPy's
    """
    if spec.ndim < 2 or 0 in spec.shape[-2:] or any(isinstance(p, Partial) for p in spec.placements):
        return None
    order = dict(spec.shard_order)  # type: ignore[arg-type]

    def splits(dim: int) -> tuple[int, ...]:
        return tuple(m for m in order.get(dim, ()) if spec.mesh.shape[m] > 1)

    rows, cols = splits(spec.ndim - 2), splits(spec.ndim - 1)
    if bool(rows) == bool(cols):  # both split, or one rank holds each matrix: NumPy's own function
        return None
    wide = bool(cols)
    split = cols if wide else rows
    m, n = spec.shape[-2:][::-1] if wide else spec.shape[-2:]
    p = math.prod(spec.mesh.shape[d] for d in split)
    _, gathered = whole_plan(single_sharding(spec), (spec.ndim - 2, spec.ndim - 1))
    if not gathered and m < p * n:  # square-ish, and a batch dim takes the sharding: one all_to_all is cheaper
        return None
    return wide, split


def positive_diagonal(q: Optional[Any], r: Any) -> tuple[Optional[Any], Any]:
    """``q, r`` of a QR with ``r``'s diagonal made real and non-negative (``q``'s columns scaled to match; None
    stays None).

    Example:
        >>> q, r = positive_diagonal(-np.eye(2), np.array([[-2.0, 1.0], [0.0, 3.0]]))
        >>> r.tolist(), np.diag(q).tolist()
        ([[2.0, -1.0], [0.0, 3.0]], [1.0, -1.0])
    """
    xp = array_module(r)
    d = xp.diagonal(r, axis1=-2, axis2=-1)
    phase = _phase(xp, d)
    return None if q is None else q * phase[..., None, :], r * xp.conj(phase)[..., :, None]


def _phase(xp: Any, d: Any) -> Any:
    """``d / |d|``, 1 where ``d`` is 0."""
    size = xp.abs(d)
    zero = size == 0
    return xp.where(zero, 1, d / xp.where(zero, 1, size)).astype(d.dtype)


def flip_singular_vectors(u: Any, vh: Any, by_rows_of_vh: bool = True) -> tuple[Any, Any]:
    """``u, vh`` of an SVD with the entry of largest magnitude of each row of ``vh`` (else: each column of ``u``)
    made real and positive (scikit-learn's ``svd_flip``).

    Example:
        >>> u, vh = flip_singular_vectors(np.eye(2), np.array([[0.6, -0.8], [0.8, 0.6]]))
        >>> vh.tolist(), np.diag(u).tolist()
        ([[-0.6, 0.8], [0.8, 0.6]], [-1.0, 1.0])
    """
    xp = array_module(vh)
    pick = vh if by_rows_of_vh else xp.swapaxes(u, -1, -2)
    index = xp.argmax(xp.abs(pick), axis=-1)[..., None]
    phase = _phase(xp, xp.take_along_axis(pick, index, axis=-1)[..., 0])
    if not by_rows_of_vh:
        phase = xp.conj(phase)
    return u * phase[..., None, :], vh * xp.conj(phase)[..., :, None]


# -- specs of the results -------------------------------------------------------------------------------
def _replicated(spec: DTensorSpec, split: Sequence[int], meta: TensorMeta) -> DTensorSpec:
    """``meta`` replicated over ``split``, the batch dims placed as in ``spec`` (matrix dims reduced or whole)."""
    placements = tuple(Replicate() if m in split else p for m, p in enumerate(spec.placements))
    order = tuple((d, ms) for d, ms in spec.shard_order if d < spec.ndim - 2)  # type: ignore[union-attr]
    return DTensorSpec(spec.mesh, placements, meta, order)


def _sharded(spec: DTensorSpec, split: Sequence[int], meta: TensorMeta, at: int) -> DTensorSpec:
    """``meta`` with matrix dim ``at`` (-2 or -1) sharded on ``split``, the batch dims as in ``spec``."""
    dim = spec.ndim + at
    placements = tuple(Shard(dim) if m in split else p for m, p in enumerate(spec.placements))
    order = tuple((d, ms) for d, ms in spec.shard_order if d < spec.ndim - 2)  # type: ignore[union-attr]
    return DTensorSpec(spec.mesh, placements, meta, order + ((dim, tuple(split)),))


# -- the factorisation ------------------------------------------------------------------------------------
def _small_factors(backend: Any, blocks: Shards, groups: Any, counts: dict[int, int], n: int,
                   wide: bool, with_q: bool) -> tuple[Shards, Shards]:
    """Every held rank's ``q_r @ q_s[its rows]`` (None without ``with_q``) and the replicated ``r`` (see the
    module): one ``all_gather``."""
    local_q, local_r, sizes = {}, {}, {r: min(c, n) for r, c in counts.items()}
    for r, a in blocks.items():
        xp = array_module(a)
        if not np.issubdtype(a.dtype, np.inexact):
            a = a.astype(xp.float64)
        if wide:
            a = xp.conj(xp.swapaxes(a, -1, -2))
        local_q[r], local_r[r] = xp.linalg.qr(a) if with_q else (None, xp.linalg.qr(a, mode="r"))
    stacks = backend.all_gather(local_r, groups, axis=-2, in_sizes=sizes)
    group_of = {r: g for g in groups for r in g}
    small: dict[Any, tuple[Any, Any]] = {}
    q_out, r_out = {}, {}
    for r, stack in stacks.items():
        group = group_of[r]
        if group not in small:  # every member factors the same bytes: once per group held here
            xp = array_module(stack)
            small[group] = positive_diagonal(*xp.linalg.qr(stack)) if with_q else positive_diagonal(
                None, xp.linalg.qr(stack, mode="r"))
        q_s, r_out[r] = small[group]
        start = sum(sizes[g] for g in group[:group.index(r)])
        q_out[r] = local_q[r] @ q_s[..., start:start + sizes[r], :] if with_q else None
    return q_out, r_out


def _finisher(name: str, kwargs: dict[str, Any], m: int, n: int, wide: bool) -> Optional[Callable[[Any, Any], tuple]]:
    """``(q, r) -> outputs`` of ``name`` from the factors (of ``a^H`` when ``wide``), or None when TSQR does not
    give that function here."""
    eps_rtol = max(m, n)
    if name == "qr":
        if wide or kwargs["mode"] not in ("reduced", "r"):
            return None
        return (lambda q, r: (q, r)) if kwargs["mode"] == "reduced" else (lambda q, r: (r,))
    if kwargs.get("hermitian"):
        return None
    if name == "svd":
        if not kwargs["compute_uv"]:
            return lambda q, r: (np.linalg.svdvals(r),)
        if kwargs["full_matrices"] and m != n:
            return None

        def svd(q: Any, r: Any) -> tuple:
            if wide:  # a = r^H q^H
                u, s, vh = np.linalg.svd(np.conj(np.swapaxes(r, -1, -2)), full_matrices=False)
                u, vh = flip_singular_vectors(u, vh, by_rows_of_vh=False)
                return u, s, vh @ np.conj(np.swapaxes(q, -1, -2))
            u, s, vh = np.linalg.svd(r, full_matrices=False)
            u, vh = flip_singular_vectors(u, vh)
            return q @ u, s, vh

        return svd
    if name == "svdvals":
        return lambda q, r: (np.linalg.svdvals(r),)
    if name == "matrix_rank":
        tol, rtol = kwargs["tol"], kwargs["rtol"]

        def rank(q: Any, r: Any) -> tuple:
            eps = np.finfo(r.dtype).eps
            return (np.linalg.matrix_rank(r, tol=tol, rtol=eps_rtol * eps if tol is None and rtol is None else rtol),)

        return rank
    if name == "pinv":
        def pinv(q: Any, r: Any) -> tuple:
            given = {k: v for k, v in kwargs.items() if k in ("rcond", "rtol") and v is not np._NoValue}
            if "rtol" in given and given["rtol"] is None:  # NumPy's default from a's shape, not r's
                given["rtol"] = eps_rtol * np.finfo(r.dtype).eps
            small = np.linalg.pinv(r, **given)
            if wide:  # pinv(a) = q pinv(r)^H
                return (q @ np.conj(np.swapaxes(small, -1, -2)),)
            return (small @ np.conj(np.swapaxes(q, -1, -2)),)

        return pinv
    if name == "cond":
        return (lambda q, r: (np.linalg.cond(r, kwargs["p"]),)) if kwargs["p"] in (None, 2, -2) else None
    if name == "matrix_norm":
        return lambda q, r: (np.linalg.matrix_norm(r, ord=kwargs["ord"], keepdims=kwargs["keepdims"]),)
    return None


def _placed(spec: DTensorSpec, split: Sequence[int], wide: bool, name: str, kwargs: dict[str, Any],
            metas: Sequence[TensorMeta]) -> tuple[DTensorSpec, ...]:
    """The result specs: factors of ``a``'s sharded dim sharded on ``split``, the rest replicated over it."""
    if name == "qr" and kwargs["mode"] == "reduced":
        return _sharded(spec, split, metas[0], -2), _replicated(spec, split, metas[1])
    if name == "svd" and len(metas) == 3:
        if wide:
            return _replicated(spec, split, metas[0]), _replicated(spec, split, metas[1]), _sharded(spec, split, metas[2], -1)
        return _sharded(spec, split, metas[0], -2), _replicated(spec, split, metas[1]), _replicated(spec, split, metas[2])
    if name == "pinv":
        return (_sharded(spec, split, metas[0], -2 if wide else -1),)
    return tuple(_replicated(spec, split, meta) for meta in metas)


def tsqr_decision(name: str, spec: DTensorSpec, kwargs: dict[str, Any], metas: Sequence[TensorMeta], *,
                  multiple: bool, result_type: Optional[Callable[..., tuple]],
                  failure: Optional[str]) -> Optional[Decision]:
    """The TSQR decision of ``numpy.linalg.<name>(spec, **kwargs)`` (``metas``: NumPy's result metas), or None
    where TSQR does not apply (see the module).

    Example:
        >>> from dtensor_np import DeviceMesh
        >>> spec = DTensorSpec(DeviceMesh((2,)), (Shard(0),), TensorMeta((8, 2), "f8"))
        >>> d = tsqr_decision("svdvals", spec, {}, [TensorMeta((2,), "f8")], multiple=False, result_type=None,
        ...                   failure=None)
        >>> str(d.inputs[0]), str(d.outputs[0])
        ('S(0)', 'R')
    """
    spec = partial_free(spec)
    plan = tsqr_plan(spec)
    if plan is None:
        return None
    wide, split = plan
    spec = without_trivial_shards(spec)  # one rank holds what a size-1 mesh dim splits: replicated there
    m, n = spec.shape[-2:][::-1] if wide else spec.shape[-2:]
    finish = _finisher(name, kwargs, m, n, wide)
    if finish is None:
        return None
    outs = _placed(spec, split, wide, name, kwargs, metas)
    groups = spec.mesh.groups(tuple(sorted(split)))
    counts = {r: spec.local_block(r)[0][-1 if wide else -2] for r in spec.mesh.all_ranks}
    dtypes = [meta.dtype for meta in metas]
    with_q = name == "pinv" or (name == "qr" and kwargs["mode"] == "reduced") or (name == "svd" and kwargs["compute_uv"])

    def program(backend: Any, shards: Shards) -> Any:
        q, r = _small_factors(backend, shards, groups, counts, n, wide, with_q)

        def local(rank: int, q_r: Any, r_r: Any) -> tuple:
            return tuple(out.astype(dtype, copy=False) for out, dtype in zip(finish(q_r, r_r), dtypes))

        results = run_agreeing(backend, [q, r], local, failure, failure is not None)
        if not multiple:
            return {rank: res[0] for rank, res in results.items()}
        return split_outputs(results, len(outs))

    return Decision((spec,), outs, None, multiple_outputs=multiple, program=program, result_type=result_type)
