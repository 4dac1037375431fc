"""The sharding rule of updates at an index: ``x[index] = v``, ``x.at[index].set(v)``, ``.add``, ``.multiply``...

The rule (:data:`UPDATE`, registered for ``operator.setitem``) takes
``(x, index, value, op)``: ``op`` one of :data:`UPDATES`, ``value`` a scalar
(a static argument, part of the key) or a DTensor, ``index`` as ``x[index]``
takes it, or one DTensor boolean mask lined up with ``x``'s dims
(:class:`MaskRef`).  The result has ``x``'s placements with pending sums
reduced (the rule asks its input so) and ``x``'s dtype; no shard is written
in place: a rank whose block holds none of the elements keeps its block, the
others copy theirs and update the copy.  Where the value must go:

* a scalar, or a replicated value: where the elements are already;
* a DTensor of exactly ``x[index]``'s shape under a basic index: laid out as
  ``x[index]`` would be (the rule asks its input so), then its rows move back
  to the ranks that own the elements (at most one ``Alltoallv`` per sliced
  sharded dim);
* any other DTensor value: replicated first (the rule asks it so: its
  redistribute, the value's bytes only, never ``x``'s);
* at a lined-up mask, a value with no dim along the mask's count: every rank
  updates its block at its part of the mask, no communication.

Duplicate indices follow NumPy: ``set`` keeps the last value in C order of
the index, the others accumulate every value (``np.add.at``...).

Example:
    >>> import operator, numpy as np
    >>> from dtensor_np import DeviceMesh, DTensorSpec, TensorMeta, Shard
    >>> from dtensor_np.propagation import decide
    >>> spec = DTensorSpec(DeviceMesh((2,)), (Shard(0),), TensorMeta((4,), "f8"))
    >>> d = decide(UPDATE, (spec,), ((2,), ScalarValue(7.0), "set"))
    >>> d.local(1, np.zeros(2)).tolist(), d.local(0, np.zeros(2)).tolist()   # index 2 is rank 1's first element
    ([7.0, 0.0], [0.0, 0.0])
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Hashable, Mapping, Optional, Sequence

import numpy as np

from collectives import array_module, frozen, on_device_of, ufunc_at

from ..placements import Placement, Replicate, Shard
from ..sharded import is_sharded
from ..spec import DTensorSpec
from .common import partial_free
from .index_plan import IndexPlan, basic_spec, block_part, plan_index
from .indexing import TensorRef, index_arrays, index_key, thaw_index
from .registry import Decision, OpRule, register
from .row_moves import move_ranges

__all__ = ["UPDATE", "UPDATES", "MaskRef", "ScalarValue", "lined_mask_spec", "fit_value_shape"]

UPDATES = {"set": None, "add": np.add, "multiply": np.multiply, "min": np.minimum, "max": np.maximum}
"""The updates and the ufunc whose ``.at`` each one is (``set`` assigns)."""

Shards = dict[int, Any]


@dataclass(frozen=True, slots=True)
class MaskRef:
    """A DTensor boolean mask in the index, the rule's ``position``-th distributed argument, lined up with ``x``'s
    dims from ``start`` on (every other item of the index is ``:`` or ``...``)."""

    position: int
    start: int


@dataclass(frozen=True, slots=True)
class ScalarValue:
    """A scalar value of an update, inside the key (typed by the decision cache: ``1`` is not ``1.0``)."""

    value: Any


def _value_shape_error(value_shape: tuple[int, ...], target: tuple[int, ...], advanced: bool) -> ValueError:
    if advanced:
        return ValueError(f"shape mismatch: value array of shape {value_shape} could not be broadcast to indexing "
                          f"result of shape {target}")
    return ValueError(f"could not broadcast input array from shape {value_shape} into shape {target}")


def fit_value_shape(value_shape: Sequence[int], target: tuple[int, ...], advanced: bool) -> tuple[int, ...]:
    """``value_shape`` without the leading 1s NumPy drops in an assignment; NumPy's ValueError unless it broadcasts
    to ``target``.

    Example:
        >>> fit_value_shape((1, 1, 3), (2, 3), False)
        (1, 3)
    """
    shape = tuple(value_shape)
    while len(shape) > len(target) and shape[0] == 1:
        shape = shape[1:]
    if len(shape) > len(target) or any(v not in (1, t) for v, t in zip(shape[::-1], target[::-1])):
        raise _value_shape_error(tuple(value_shape), target, advanced)
    return shape


def lined_mask_spec(x_spec: DTensorSpec, mask_spec: DTensorSpec, start: int) -> DTensorSpec:
    """The spec a mask needs to line up with ``x``'s blocks: ``x``'s mesh dims of dims ``start..`` shard its dims.

    Example:
        >>> from dtensor_np import DeviceMesh, TensorMeta
        >>> mesh = DeviceMesh((2,))
        >>> x = DTensorSpec(mesh, (Shard(1),), TensorMeta((3, 4), "f8"))
        >>> str(lined_mask_spec(x, DTensorSpec(mesh, (Replicate(),), TensorMeta((4,), "?")), 1))
        'S(0)'
    """
    k = mask_spec.ndim
    placements: list[Placement] = [Shard(p.dim - start) if isinstance(p, Shard) and start <= p.dim < start + k
                                   else Replicate() for p in x_spec.placements]
    order = tuple((d - start, ms) for d, ms in x_spec.shard_order if start <= d < start + k)  # type: ignore[union-attr]
    return DTensorSpec(x_spec.mesh, tuple(placements), mask_spec.tensor_meta, order)


def _apply(target: Any, index: tuple[Any, ...], value: Any, op: str) -> None:
    if op == "set":
        target[index] = on_device_of(target, value)  # a NumPy value into a CuPy shard: copied to the device
    else:
        ufunc_at(UPDATES[op], target, index, value)  # type: ignore[arg-type]


def _ndim(value: Any) -> int:
    return len(getattr(value, "shape", ()))


# -- binding --------------------------------------------------------------------------------------------
def _bind(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    if kwargs or len(args) != 4:
        raise TypeError(f"an update takes (x, index, value, op), got {len(args)} arguments and {sorted(kwargs)}")
    x, index, value, op = args
    if not is_sharded(x):
        raise TypeError(f"an update: expected a DTensor to update, got {type(x).__name__}")
    if op not in UPDATES:
        raise ValueError(f"expected an update among {sorted(UPDATES)}, got {op!r}")
    tensors = [x]
    key = index_key(index, tensors, masks=True)
    masks = [i for i, item in enumerate(key) if isinstance(item, TensorRef) and tensors[item.position].dtype.kind == "b"]
    if masks:
        (m,) = masks
        ref = key[m]
        key = key[:m] + (MaskRef(ref.position, _mask_start(x.ndim, key, m, tensors[ref.position].ndim)),) + key[m + 1:]
    if is_sharded(value):
        tensors.append(value)
        value_key: Hashable = TensorRef(len(tensors) - 1)
    else:
        value_key = ScalarValue(frozen(value))
    return tuple(tensors), (key, value_key, op)


def _mask_start(ndim: int, key: tuple[Any, ...], m: int, k: int) -> int:
    """Where the mask at item ``m`` starts among ``x``'s dims (the caller checked the other items)."""
    return ndim - k - (len(key) - m - 1) if any(item is Ellipsis for item in key[:m]) else m


# -- deciding -------------------------------------------------------------------------------------------
def _decide(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    index, value_key, op = key
    x_spec = specs[0]
    spec = partial_free(x_spec)
    value_spec = specs[value_key.position] if isinstance(value_key, TensorRef) else None
    scalar = value_key.value if isinstance(value_key, ScalarValue) else None
    mask = next((item for item in index if isinstance(item, MaskRef)), None)
    if mask is not None:
        return _mask_decision(spec, specs[mask.position], mask.start, value_spec, scalar, op)
    plan = plan_index(x_spec.shape, thaw_index(index, specs))
    ranks = spec.mesh.all_ranks
    parts = {r: block_part(plan, spec, r) for r in ranks}
    array_specs = tuple(specs[item.position] for item in index if isinstance(item, TensorRef))
    replicated = (Replicate(),) * spec.mesh.ndim
    array_inputs = tuple(DTensorSpec(s.mesh, replicated, s.tensor_meta) for s in array_specs)
    if value_spec is None and not plan.advanced:  # the commonest update: a scalar at ints and slices
        owned = {r: parts[r].index for r in ranks if not parts[r].empty}
        ufunc = UPDATES[op]

        def scalar_at_basic(rank: int, block: Any) -> Any:
            index = owned.get(rank)
            if index is None:
                return block  # none of the elements is here: the block is kept
            out = block.copy()
            if ufunc is None:
                out[index] = scalar
            else:
                ufunc_at(ufunc, out, index, scalar)
            return out

        return Decision((spec,), (spec,), scalar_at_basic)
    if value_spec is None:
        def update_by_scalar(rank: int, block: Any, *values: Any) -> Any:
            return _update_block(block, spec, rank, plan, parts[rank], values, scalar, op)

        return Decision((spec,) + array_inputs, (spec,), update_by_scalar)
    if not array_specs and not plan.advanced and value_spec.shape == plan.out_shape and not value_spec.is_replicated():
        return _by_parts_decision(spec, plan, parts, value_spec, op)
    value_shape = fit_value_shape(value_spec.shape, plan.out_shape, plan.advanced)
    value_in = DTensorSpec(value_spec.mesh, replicated, value_spec.tensor_meta)

    def update_by_value(rank: int, block: Any, *rest: Any) -> Any:  # rest: the index arrays, then the value
        value = rest[-1]
        full = array_module(value).broadcast_to(value.reshape(value_shape), plan.out_shape)
        return _update_block(block, spec, rank, plan, parts[rank], rest[:-1], full, op)

    return Decision((spec,) + array_inputs + (value_in,), (spec,), update_by_value)


def _update_block(block: Any, spec: DTensorSpec, rank: int, plan: IndexPlan, part: Any, values: Sequence[Any],
                  full: Any, op: str) -> Any:
    """This rank's block with its elements of ``x[index]`` updated by ``full`` (broadcast to the index's result)."""
    if plan.advanced:
        return _advanced_update(block, spec, rank, plan, index_arrays(plan, values), full, op)
    if part.empty:
        return block
    out = block.copy()
    piece = full if _ndim(full) == 0 else full[tuple(slice(lo, hi) for lo, hi in part.ranges)]
    _apply(out, part.index, piece, op)
    return out


def _advanced_update(block: Any, spec: DTensorSpec, rank: int, plan: IndexPlan, arrays: list[np.ndarray],
                     full: Any, op: str) -> Any:
    shape, offset = spec.local_block(rank)
    adv = [e for e in plan.entries if e.kind == "adv"]
    owned = np.ones(plan.b_shape, bool)
    for e, c in zip(adv, arrays):
        if e.dim is not None and shape[e.dim] != plan.shape[e.dim]:
            owned &= (c >= offset[e.dim]) & (c < offset[e.dim] + shape[e.dim])
    part = block_part(plan, spec, rank)
    if not owned.any() or any(lo >= hi for (lo, hi), d in zip(part.ranges, range(len(plan.y_shape)))
                              if d not in plan.adv_dims):
        return block
    sel = np.nonzero(owned.reshape(-1))[0]
    where = np.unravel_index(sel, plan.b_shape)
    x_dims = [e.dim for e in adv if e.dim is not None]
    coords = tuple(c[where] - offset[e.dim] for e, c in zip(adv, arrays) if e.dim is not None)
    rest_index = tuple(part.index[i] for i, e in enumerate(plan.entries) if e.kind == "slice")
    out = block.copy()
    view = np.moveaxis(out, x_dims, tuple(range(len(x_dims)))) if x_dims else out
    if _ndim(full) == 0:
        piece = full
    else:
        nb = len(plan.b_shape)
        moved = np.moveaxis(full, tuple(range(plan.b_pos, plan.b_pos + nb)), tuple(range(nb)))[where]
        y_entries = [e for e in plan.entries if e.kind != "int"]
        keep = tuple(0 if y_entries[d].kind == "new" else slice(*part.ranges[d]) for d in plan.rest_dims)
        piece = moved[(slice(None),) + keep]
        if not x_dims:  # only boolean scalars: their one selected position, nothing of x indexed by arrays
            piece = piece[0]
    _apply(view, coords + rest_index, piece, op)
    return out


def _by_parts_decision(spec: DTensorSpec, plan: IndexPlan, parts: Mapping[int, Any], value_spec: DTensorSpec,
                       op: str) -> Decision:
    """A basic update by a DTensor of ``x[index]``'s shape: laid out as ``x[index]``, its rows moved back to the
    owners."""
    y_spec = basic_spec(spec, plan)
    value_in = DTensorSpec(value_spec.mesh, y_spec.placements, value_spec.tensor_meta, y_spec.shard_order)
    mesh = spec.mesh
    ranks = mesh.all_ranks
    moves = []
    for d, mesh_dims in spec.shard_order:  # type: ignore[union-attr]
        y = plan.y_dim_of(d)
        if y is None:
            continue  # an int: y is replicated there, its owner has the value
        want = {r: parts[r].ranges[y] for r in ranks}
        have = {}
        for r in ranks:
            size, offset = (v[y] for v in y_spec.local_block(r))
            have[r] = (offset, offset + size)
        moves.append((mesh.groups(mesh_dims), y, have, want))

    def program(backend: Any, x_shards: Mapping[int, Any], value_shards: Mapping[int, Any]) -> Shards:
        pieces = dict(value_shards)
        for groups, y, have, want in moves:
            pieces = move_ranges(backend, pieces, groups, y, have, want)
        new = {}
        for r, block in x_shards.items():
            part = parts[r]
            if part.empty:
                new[r] = block
                continue
            new[r] = block.copy()
            _apply(new[r], part.index, pieces[r], op)
        return new

    return Decision((spec, value_in), (spec,), None, program=program)


def _mask_decision(spec: DTensorSpec, mask_spec: DTensorSpec, start: int, value_spec: Optional[DTensorSpec],
                   scalar: Any, op: str) -> Decision:
    """An update at a mask lined up with ``x``'s blocks, by a value with no count dim: local on every rank."""
    k = mask_spec.ndim
    shape = spec.shape
    target = shape[:start] + (1,) + shape[start + k:]
    lined = lined_mask_spec(spec, mask_spec, start)
    lead = (slice(None),) * start
    value_shape = None if value_spec is None else fit_value_shape(value_spec.shape, target, True)

    def piece_of(rank: int, value: Any) -> Any:
        full = array_module(value).broadcast_to(value.reshape(value_shape), target)
        block_shape, offset = spec.local_block(rank)
        return full[tuple(slice(o, o + n) for o, n in zip(offset[:start], block_shape[:start])) + (slice(None),)
                    + tuple(slice(o, o + n) for o, n in zip(offset[start + k:], block_shape[start + k:]))]

    def masked(rank: int, block: Any, here: Any, *value: Any) -> Any:
        if block.size == 0 or not here.any():
            return block
        out = block.copy()
        _apply(out, lead + (here,), piece_of(rank, value[0]) if value else scalar, op)
        return out

    inputs: tuple[DTensorSpec, ...] = (spec, lined)
    if value_spec is not None:
        inputs += (DTensorSpec(value_spec.mesh, (Replicate(),) * spec.mesh.ndim, value_spec.tensor_meta),)
    return Decision(inputs, (spec,), masked)


UPDATE = register(operator.setitem)(OpRule("setitem", _bind, _decide))
"""The rule of ``x[index] = value`` and of ``x.at[index].set/add/multiply/min/max(value)``."""
