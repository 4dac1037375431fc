"""Functions that need their operands whole: polynomial coefficients, and ``eig``/``eigvals``/``cond`` of matrices.

* ``polyadd polysub polymul polydiv polyder polyint roots poly``: coefficient
  arrays are short.  Every operand is replicated (one ``all_gather`` of a
  sharded one) and NumPy's own function runs on every rank; the results are
  replicated, their shapes (``roots`` drops the leading zeros, ``polydiv``
  the remainder's) and dtypes (``poly`` of conjugate pairs is real) those of
  NumPy's results.
* ``numpy.linalg.eig``, ``eigvals``, ``cond``: whole matrices (the last two
  dims): a sharded matrix dim moves to a free batch dim with one
  ``all_to_all``, or is gathered with one ``all_gather`` where there is none
  (:func:`~.whole_axes.whole_decision`), and NumPy runs on every rank's
  matrices; batch dims stay sharded.  ``cond`` (``p`` None, 2, -2) of a
  tall matrix with its rows sharded (or a wide one with its columns): from
  TSQR's small ``R`` (:mod:`.tsqr`, one ``all_gather`` of ``n x n`` blocks).  NumPy returns real eigenvalues when
  every eigenvalue of the batch is real, so ranks that hold different
  matrices agree on it (``backend.all_true``: one 4-byte ``Allreduce``, not
  counted, as for ``LinAlgError``), and all return complex ones otherwise.

NumPy's dispatchers of ``roots`` and ``poly`` return the array itself, so
NumPy iterates over a sharded one to look for ``__array_function__`` (a 1-d
DTensor's iteration reads it a block at a time: one more ``all_gather``).

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> p = dt.distribute_tensor(np.array([1.0, -3.0, 2.0]), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> with dt.comm_counter() as c:
    ...     r = np.roots(p)
    >>> sorted(r.full_tensor().tolist()), str(r.spec), c.counts["all_gather"]   # NumPy's iteration, then the rule's
    ([1.0, 2.0], 'R', 2)
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Hashable, Optional

import numpy as np

from collectives import frozen

from ..placements import Replicate, Shard
from ..sharded import array_operands, is_sharded
from ..spec import DTensorSpec
from .common import partial_free
from .empty_batch import empty_batch, numpy_outputs
from .registry import Decision, OpRule, register
from .signature_bind import bound_arguments, signature_binder
from .tsqr import tsqr_decision
from .whole_axes import whole_decision

__all__ = ["POLYNOMIAL_FUNCTIONS", "agreeing_dtypes"]

POLYNOMIAL_FUNCTIONS: tuple[Callable[..., Any], ...] = (
    np.polyadd, np.polysub, np.polymul, np.polydiv, np.polyder, np.polyint, np.roots, np.poly)

Shards = dict[int, Any]


def _replicated(spec: DTensorSpec) -> DTensorSpec:
    return DTensorSpec(spec.mesh, (Replicate(),) * spec.mesh.ndim, partial_free(spec).tensor_meta)


def _bind_whole(func: Callable[..., Any]) -> Callable[[tuple, dict], tuple[tuple[Any, ...], Hashable]]:
    signature = inspect.signature(func)
    name = f"numpy.{func.__name__}"

    def bind(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
        given = bound_arguments(signature, name, args, kwargs)
        names = list(given)
        values = array_operands(list(given.values()))
        key = tuple((n, "array" if is_sharded(v) else frozen(v)) for n, v in zip(names, values))
        return tuple(v for v in values if is_sharded(v)), key

    return bind


def _whole_rule(func: Callable[..., Any]) -> OpRule:
    def call(key: Any, arrays: tuple) -> Any:
        it = iter(arrays)
        return func(**{n: next(it) if v == "array" else v for n, v in key})

    def decide(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
        inputs = tuple(_replicated(s) for s in specs)
        metas, kind = numpy_outputs(lambda *a: call(key, a), [np.ones(s.shape, s.dtype) for s in specs], batch=False)
        mesh = specs[0].mesh
        outs = tuple(DTensorSpec(mesh, (Replicate(),) * mesh.ndim, m) for m in metas)

        def local(rank: int, *arrays: Any) -> Any:
            result = call(key, arrays)
            return tuple(np.asarray(r) for r in result) if kind is not None else np.asarray(result)

        return Decision(inputs, outs, local, multiple_outputs=kind is not None, data_dependent=True)

    return OpRule(func.__name__, _bind_whole(func), decide)


for _func in POLYNOMIAL_FUNCTIONS:
    register(_func)(_whole_rule(_func))


def agreeing_dtypes(backend: Any, results: Shards) -> Shards:
    """Every rank's eigen-results, complex on every rank unless every rank's are real (NumPy decides on the whole
    batch): one ``backend.all_true``.

    Example:
        >>> from collectives import SimulatedBackend
        >>> out = agreeing_dtypes(SimulatedBackend(2), {0: (np.ones(1),), 1: (np.ones(1) * 1j,)})
        >>> out[0][0].dtype, out[1][0].dtype
        (dtype('complex128'), dtype('complex128'))
    """
    real = backend.all_true({r: not any(np.iscomplexobj(x) for x in res) for r, res in results.items()})
    if real:
        return results
    return {r: tuple(x.astype(np.result_type(x.dtype, np.complex64)) for x in res) for r, res in results.items()}


def _matrix_rule(func: Callable[..., Any], failure: Optional[str], eigen: bool) -> OpRule:
    bind = signature_binder(func, "numpy.linalg")

    def decide(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
        (spec,) = specs
        kwargs = dict(key)
        if func is np.linalg.cond and kwargs["p"] not in (None, 2, -2):
            failure_here = None  # NumPy's cond inverts without raising
        else:
            failure_here = failure
        batch = spec.ndim >= 2
        metas, kind = numpy_outputs(lambda x: func(x, **kwargs), [empty_batch(spec, batch)], batch)
        if func is np.linalg.cond and batch:
            tsqr = tsqr_decision("cond", spec, kwargs, metas, multiple=False, result_type=None, failure=failure_here)
            if tsqr is not None:
                return tsqr
        core = range(spec.ndim - 2, spec.ndim) if batch else range(spec.ndim)
        decision = whole_decision(spec, core, metas, lambda rank, x: func(x, **kwargs), multiple=kind is not None,
                                  result_type=None if kind in (None, tuple) else kind, failure=failure_here)
        spread = any(isinstance(p, Shard) for p in decision.inputs[0].placements)
        if not eigen or not spread:
            return decision

        def program(backend: Any, shards: Shards) -> Any:
            if decision.program is not None:
                produced = decision.program(backend, shards)
                per_rank = {r: tuple(p[r] for p in produced) if kind else (produced[r],) for r in shards}
            else:
                per_rank = {r: tuple(decision.local(r, x)) if kind else (decision.local(r, x),)
                            for r, x in shards.items()}
            fixed = agreeing_dtypes(backend, per_rank)
            if kind is None:  # eigvals: one array per rank
                return {r: res[0] for r, res in fixed.items()}
            return tuple({r: res[i] for r, res in fixed.items()} for i in range(len(metas)))

        return Decision(decision.inputs, decision.outputs, None, multiple_outputs=decision.multiple_outputs,
                        program=program, result_type=decision.result_type)

    return OpRule(func.__name__, bind, decide)


register(np.linalg.eig)(_matrix_rule(np.linalg.eig, "Eigenvalues did not converge", eigen=True))
register(np.linalg.eigvals)(_matrix_rule(np.linalg.eigvals, "Eigenvalues did not converge", eigen=True))
register(np.linalg.cond)(_matrix_rule(np.linalg.cond, "SVD did not converge", eigen=False))
