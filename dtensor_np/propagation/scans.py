"""Rules for scans: ``cumsum``, ``cumprod`` (and NumPy 2's ``cumulative_sum``/``cumulative_prod``).

* ``axis`` not sharded: every rank scans its block; nothing moves, every
  placement but ``Partial`` is kept (pending values are reduced first).
* ``cumsum`` along a sharded axis (mesh dim ``m``): every rank scans its
  block, then one ``exscan`` (``MPI_Exscan``, counted as ``scan``) of the
  blocks' totals over the ranks of mesh dim ``m`` gives each rank the sum of
  the rows before its block, which it adds.  The result keeps the sharding.
  Bytes per rank: one row (the block's last) of the other dims.
* ``cumprod`` along a sharded axis: there is no product ``exscan``, so the
  axis is made whole (:func:`~.whole_axes.whole_decision`: the sharding moves
  to another dim with one ``all_to_all``, or the axis is gathered with one
  ``all_gather`` when no dim can take it).
* ``axis=None`` on more than one dim scans the flattened array: the array is
  gathered (one ``all_gather``) and the 1-d result is replicated.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.arange(5.0), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> with dt.comm_counter() as c:
    ...     y = np.cumsum(x)
    >>> y.full_tensor().tolist(), str(y.spec), c.total, c.counts["scan"]
    ([0.0, 1.0, 3.0, 6.0, 10.0], 'S(0)', 1, 1)
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Hashable, Optional

import numpy as np

from collectives import array_module

from ..errors import ShardingError
from ..placements import Shard
from ..spec import DTensorSpec, TensorMeta
from .common import axis_index, partial_free, single_sharding
from .registry import Decision, OpRule, register
from .whole_axes import whole_decision
from .signature_bind import named_arguments, no_more_arguments, pop_dtensor

__all__ = ["scan_decision", "SCANS"]

SCANS: dict[Callable[..., Any], str] = {np.cumsum: "sum", np.cumprod: "prod"}
if hasattr(np, "cumulative_sum"):
    SCANS[np.cumulative_sum] = "sum"
    SCANS[np.cumulative_prod] = "prod"
_NUMPY = {"sum": np.cumsum, "prod": np.cumprod}


def _out_dtype(kind: str, dtype: np.dtype, requested: Optional[np.dtype]) -> np.dtype:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _NUMPY[kind](np.zeros(1, dtype), dtype=requested).dtype


def _last_row(x: Any, axis: int, out_dtype: np.dtype) -> Any:
    """The block's last row along ``axis`` (kept as a dim of 1), or zeros for an empty block."""
    xp = array_module(x)
    if x.shape[axis] == 0:
        return xp.zeros(x.shape[:axis] + (1,) + x.shape[axis + 1:], out_dtype)
    return xp.ascontiguousarray(x[(slice(None),) * axis + (slice(-1, None),)])


def scan_decision(spec: DTensorSpec, kind: str, axis: Optional[int], dtype: Optional[np.dtype]) -> Decision:
    """The decision of ``cumsum`` (``kind="sum"``) or ``cumprod`` (``"prod"``) along ``axis`` (None: flattened)."""
    spec = partial_free(single_sharding(spec))
    out_dtype = _out_dtype(kind, spec.dtype, dtype)
    scan = _NUMPY[kind]
    if axis is None and spec.ndim != 1:
        size = int(np.prod(spec.shape))
        return whole_decision(spec, tuple(range(spec.ndim)), [TensorMeta((size,), out_dtype)],
                              lambda rank, x: scan(x, dtype=dtype))
    axis = 0 if axis is None else axis
    out = DTensorSpec(spec.mesh, spec.placements, TensorMeta(spec.shape, out_dtype), spec.shard_order)

    def local(rank: int, x: Any) -> Any:
        return scan(x, axis=axis, dtype=dtype)

    sharded = [m for m, p in enumerate(spec.placements) if isinstance(p, Shard) and p.dim == axis and spec.mesh.shape[m] > 1]
    if not sharded:
        return Decision((spec,), (out,), local)
    if kind == "prod":
        return whole_decision(spec, (axis,), [out.tensor_meta], local)
    (m,) = sharded
    groups = spec.mesh.groups((m,))

    def program(backend: Any, shards: dict[int, Any]) -> dict[int, Any]:
        """One ``exscan`` (sum) of the blocks' totals over mesh dim ``m``."""
        scanned = {r: local(r, x) for r, x in shards.items()}
        totals = {r: _last_row(y, axis, out_dtype) for r, y in scanned.items()}
        before = backend.exscan(totals, groups, op="sum")
        return {r: y + before[r] for r, y in scanned.items()}

    return Decision((spec,), (out,), None, program=program)


def _scan_rule(func: Callable[..., Any], kind: str) -> OpRule:
    cumulative = func.__name__.startswith("cumulative")
    names = ("x", "axis", "dtype", "out", "include_initial") if cumulative else ("a", "axis", "dtype", "out")

    def bind(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
        name = f"numpy.{func.__name__}"
        given = named_arguments(name, names, args, kwargs)
        no_more_arguments(name, {k: v for k, v in given.items() if k not in names})
        x = pop_dtensor(name, given, names[0])
        if given.get("out") is not None:
            raise ShardingError(f"{name} on DTensors: expected out= as a keyword (it rebinds), got it by position")
        if given.get("include_initial"):
            raise ShardingError(f"{name} on DTensors: expected include_initial=False, got True "
                                f"(the Array API namespace's cumulative_sum/cumulative_prod take it)")
        axis = given.get("axis")
        if axis is None and cumulative and x.ndim != 1:
            raise ValueError(f"{func.__name__}: axis must be given for an array of {x.ndim} dims")
        axis = None if axis is None else axis_index(axis, max(x.ndim, 1))
        dtype = given.get("dtype")
        return (x,), (kind, axis, None if dtype is None else np.dtype(dtype))

    return OpRule(func.__name__, bind, lambda specs, key: scan_decision(specs[0], *key))


for _func, _kind in SCANS.items():
    register(_func)(_scan_rule(_func, _kind))
