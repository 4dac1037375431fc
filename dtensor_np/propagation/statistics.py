"""Rules for ``argmax``/``argmin``: a local pass, then one ``all_gather`` of small per-rank summaries (the moments
``var``/``std`` are :mod:`dtensor_np.propagation.moments`).

Reduced dims that are not sharded are reduced by every rank on its own
block, with no communication; kept dims keep their sharding (shifted past the
dropped dims).  When a reduced dim is sharded on mesh dims ``M``:

* ``argmax``/``argmin``: every rank finds its block's arg and turns it into
  a *global* index; the (value, global index) pairs of the ranks of ``M``
  travel in one ``all_gather`` (the pair packed as bytes, so any dtype is
  exact; bytes per rank: ``k`` pairs per result element), and every rank
  picks the winner: the largest (smallest) value, a NaN before anything else,
  the smallest global index on ties, as NumPy does.  Empty blocks take part
  as "no candidate".

The reduced mesh dims are ``Replicate`` in the result; pending values
(``Partial``) are reduced first.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> a = np.array([[1.0, 9.0], [7.0, 3.0], [9.0, 2.0]])
    >>> x = dt.distribute_tensor(a, dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> with dt.comm_counter() as c:
    ...     i = np.argmax(x, axis=0)
    >>> i.full_tensor().tolist(), str(i.spec), c.total, c.counts["all_gather"]
    ([2, 0], 'R', 1, 1)
"""

from __future__ import annotations

import math
from typing import Any, Hashable, Optional, Sequence

import numpy as np

from collectives import array_module

from ..errors import ShardingError
from ..placements import Placement, Replicate, Shard
from ..spec import DTensorSpec, TensorMeta
from .common import normalize_axes, partial_free, single_sharding
from .registry import Decision, OpRule, register
from .signature_bind import named_arguments, no_more_arguments, pop_dtensor

__all__ = ["reduced_placements", "arg_decision"]

Shards = dict[int, Any]


def reduced_placements(spec: DTensorSpec, reduced: Sequence[int], keepdims: bool) -> tuple[Placement, ...]:
    """The placements of a reduction's result: reduced sharded dims ``Replicate``, kept ``Shard`` dims renumbered."""
    out: list[Placement] = []
    for p in spec.placements:
        if isinstance(p, Shard) and p.dim in reduced:
            out.append(Replicate())
        elif isinstance(p, Shard):
            out.append(Shard(p.dim if keepdims else p.dim - sum(1 for a in reduced if a < p.dim)))
        else:
            out.append(p)
    return tuple(out)


def _sharded_reduced(spec: DTensorSpec, reduced: Sequence[int]) -> tuple[int, ...]:
    return tuple(m for m, p in enumerate(spec.placements)
                 if isinstance(p, Shard) and p.dim in reduced and spec.mesh.shape[m] > 1)


def _out_shape(shape: Sequence[int], reduced: Sequence[int], keepdims: bool) -> tuple[int, ...]:
    return tuple(1 if i in reduced else s for i, s in enumerate(shape) if keepdims or i not in reduced)


# -- argmax / argmin --------------------------------------------------------------

def _beats(kind: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Where value ``a`` wins over ``b`` (a NaN beats any number, as NumPy's arg functions return the first NaN)."""
    with np.errstate(invalid="ignore"):
        better = (a > b) if kind == "max" else (a < b)
    if a.dtype.kind in "fc":
        better = (np.isnan(a) & ~np.isnan(b)) | (better & ~np.isnan(b))
    return better


def _ties(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    same = a == b
    if a.dtype.kind in "fc":
        same = same | (np.isnan(a) & np.isnan(b))
    return same


def arg_decision(spec: DTensorSpec, kind: str, axis: Optional[int], keepdims: bool) -> Decision:
    """The decision of ``argmax`` (``kind="max"``) or ``argmin`` along ``axis`` (None: the flattened array)."""
    spec = partial_free(single_sharding(spec))
    func = np.argmax if kind == "max" else np.argmin
    if axis is None and math.prod(spec.shape) == 0:
        raise ValueError(f"attempt to get arg{kind} of an empty sequence")
    reduced = tuple(range(spec.ndim)) if axis is None else (axis,)
    if axis is not None and spec.shape[axis] == 0:
        raise ValueError(f"attempt to get arg{kind} of an empty sequence")
    shape = _out_shape(spec.shape, reduced, keepdims) if axis is not None else ((1,) * spec.ndim if keepdims else ())
    out = DTensorSpec(spec.mesh, reduced_placements(spec, reduced, keepdims), TensorMeta(shape, np.dtype(np.intp)))

    def local(rank: int, x: Any) -> Any:
        return func(x, axis=axis, keepdims=keepdims)

    mesh_dims = _sharded_reduced(spec, reduced)
    if not mesh_dims:
        return Decision((spec,), (out,), local)
    groups = spec.mesh.groups(tuple(sorted(mesh_dims)))
    itemsize = spec.dtype.itemsize

    def candidate(rank: int, x: Any) -> tuple[Any, Any, Any]:
        """The block's (values, global indices, valid) as flat arrays, one per result element."""
        xp = array_module(x)
        block_shape, origin = spec.local_block(rank)
        if axis is None:
            valid = x.size > 0
            flat = int(func(x)) if valid else 0
            where = np.unravel_index(flat, x.shape) if valid else (0,) * x.ndim
            value = x[where] if valid else xp.zeros((), x.dtype)
            index = int(np.ravel_multi_index(tuple(int(w) + o for w, o in zip(where, origin)), spec.shape)) if valid else 0
            return (xp.reshape(xp.asarray(value, x.dtype), (1,)), xp.full((1,), index, np.int64),
                    xp.full((1,), valid, np.uint8))
        kept = x.shape[:axis] + x.shape[axis + 1:]
        if x.shape[axis] == 0:
            n = math.prod(kept)
            return xp.zeros(n, x.dtype), xp.zeros(n, np.int64), xp.zeros(n, np.uint8)
        arg = func(x, axis=axis, keepdims=True)
        value = xp.take_along_axis(x, arg, axis)
        return value.reshape(-1), (arg.astype(np.int64) + origin[axis]).reshape(-1), xp.ones(arg.size, np.uint8)

    def program(backend: Any, shards: Shards) -> Shards:
        """One ``all_gather`` of the packed (value, global index, valid) candidates over the sharded reduced mesh dims."""
        packed = {}
        for r, x in shards.items():
            value, index, valid = candidate(r, x)
            xp = array_module(x)
            packed[r] = xp.concatenate([xp.ascontiguousarray(value).view(np.uint8).reshape(-1, itemsize),
                                        index.view(np.uint8).reshape(-1, 8), valid.reshape(-1, 1)], axis=1)
        gathered = backend.all_gather(packed, groups, axis=0)
        results = {}
        for r, buffer in gathered.items():
            xp = array_module(buffer)
            k = len(groups[0])
            rows = xp.ascontiguousarray(buffer).reshape(k, -1, itemsize + 9)
            values = xp.ascontiguousarray(rows[..., :itemsize]).view(spec.dtype).reshape(k, -1)
            indices = xp.ascontiguousarray(rows[..., itemsize:itemsize + 8]).view(np.int64).reshape(k, -1)
            valid = rows[..., -1].astype(bool)
            best_v, best_i, best_ok = values[0], indices[0], valid[0]
            for j in range(1, k):
                v, i, ok = values[j], indices[j], valid[j]
                wins = ok & (~best_ok | _beats(kind, v, best_v) | (_ties(v, best_v) & (i < best_i)))
                best_v = xp.where(wins, v, best_v)
                best_i = xp.where(wins, i, best_i)
                best_ok = best_ok | ok
            results[r] = best_i.astype(np.intp).reshape(out.local_shape_of_rank(r))
        return results

    return Decision((spec,), (out,), None, program=program)


def _arg_rule(kind: str) -> OpRule:
    func = np.argmax if kind == "max" else np.argmin

    def bind(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
        name = f"numpy.{func.__name__}"
        given = named_arguments(name, ("a", "axis", "out"), args, kwargs)
        a = pop_dtensor(name, given, "a")
        if given.pop("out", None) is not None:
            raise ShardingError(f"numpy.{func.__name__} on DTensors: expected out= as a keyword (it rebinds), got it by position")
        axis = given.pop("axis", None)
        if isinstance(axis, (tuple, list)):  # NumPy's argmax takes one axis
            raise TypeError(f"'{type(axis).__name__}' object cannot be interpreted as an integer")
        keepdims = bool(given.pop("keepdims", False))
        no_more_arguments(name, given)
        axes = normalize_axes(axis, a.ndim, legacy_0d=True)
        return (a,), (kind, None if axes is None or not axes else axes[0], keepdims)

    return OpRule(func.__name__, bind, lambda specs, key: arg_decision(specs[0], *key))


register(np.argmax)(_arg_rule("max"))
register(np.argmin)(_arg_rule("min"))
