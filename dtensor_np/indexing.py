"""``x[index]``, ``x.at[index].set(v)`` and ``x[index] = v`` on DTensors: NumPy's indexing, sharded dims included.

Reading (``x[index]``) goes through the ``operator.getitem`` rule (see
:mod:`dtensor_np.propagation.indexing` for the collectives each kind of index
issues).  Results are new arrays on every rank, never views of ``x``'s
shards.  Before the rule this module handles what only exists eagerly:

* NumPy index arrays and lists join the call as replicated arguments (no
  communication); a NumPy boolean mask is its ``nonzero()`` arrays.
* A 0-d DTensor in the index is its value (one small collective when it is
  not replicated).
* A DTensor boolean mask: the result's shape depends on its values.  When the
  mask is the only item besides ``:``/``...``, has the shape of the dims it
  indexes, and ``x`` shards at most the first of them, the mask is placed like
  ``x`` (its redistribute; nothing when it already is, as for ``x[x > 0]``),
  every rank selects from its own block, the ranks learn each other's counts
  with one small ``Allgather`` (``gather_descriptors``: 17 int64 per rank, not
  counted by ``comm_counter``), and the rows that change owner move in one
  ``rechunk`` to the ``torch.chunk`` layout of the result, sharded like that
  dim (each rank passes MPI the rows it sends away).  Any other mask is
  gathered first (``full_tensor``, the mask's bytes only, never ``x``'s) and
  indexes as its ``nonzero()``.

Updates return a new DTensor with ``x``'s placements (a pending ``Partial``
is reduced first) and never write a shard in place: ``x.at[i].set(v)``,
``.add``, ``.multiply``, ``.min``, ``.max`` equal ``r = x.copy(); r[i] = v``
and ``np.add.at(r, i, v)`` / ``np.multiply.at`` / ``np.minimum.at`` /
``np.maximum.at`` on the full array, NumPy's casting included.  Duplicate
indices follow NumPy (and ``jax.numpy``'s ``.at``): ``set`` keeps the last
value in C order of the index, the others accumulate every value.  Each rank
updates only the elements of its own block; a rank whose block holds none
keeps its shard object.  The value is needed where the elements are: a
scalar, a NumPy array or a replicated DTensor is there already (no
communication); a DTensor of exactly ``x[index]``'s shape under a basic
index is first laid out as ``x[index]`` would be (its redistribute) and then
its rows move back to the ranks owning the elements (the inverse of the
read's moves: at most one ``Alltoallv`` per sliced sharded dim); any other
DTensor value is gathered (``full_tensor``, the value's bytes only, never
``x``'s).  Index arrays given as DTensors are gathered for updates.  A DTensor
mask placed like ``x`` (as ``x[x < 0] = 0``) with a value that has no dim
along the mask's count updates every block locally: no communication.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.arange(10.0), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> x[::-3].full_tensor().tolist(), str(x[::-3].spec)
    ([9.0, 6.0, 3.0, 0.0], 'S(0)')
    >>> x.at[[1, 1, 8]].add(1.0).full_tensor().tolist()
    [0.0, 3.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 9.0, 9.0]
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

import numpy as np

from collectives import array_module, on_device_of, ufunc_at

from .arrays import check_array
from .dispatch import fast_builder, hit_counter, remember, run_rule
from .errors import ShardingError
from .placements import Placement, Replicate, Shard
from .propagation.common import partial_free
from .propagation.index_plan import (
    ArrayArg,
    IndexPlan,
    MaskArg,
    basic_spec,
    block_part,
    index_items,
    list_index,
    plan_index,
    read_index,
)
from .propagation.indexing import GETITEM, index_arrays
from .propagation.row_moves import move_ranges
from .redistribute import redistribute_shards
from .runtime import backend_for
from .sharded import is_sharded
from .spec import DTensorSpec, TensorMeta

__all__ = ["getitem", "iterate", "IndexUpdater", "IndexUpdate", "update", "UPDATES", "GETITEM"]

UPDATES = {"set": None, "add": np.add, "multiply": np.multiply, "min": np.minimum, "max": np.maximum}
"""The functional updates and the ufunc whose ``.at`` each one is (``set`` assigns)."""


# -- the index as this process sees it ----------------------------------------------------------------
def _own_items(x: Any, index: Any) -> list[Any]:
    """The index items, every DTensor checked to live on ``x``'s mesh and 0-d ones replaced by their values."""
    items = list(index_items(index))
    for i, item in enumerate(items):
        if is_sharded(item):
            if item.mesh is not x.mesh:
                raise ShardingError(f"an index array must live on the indexed array's mesh {x.mesh!r}, "
                                    f"got one on {item.mesh!r}")
            if item.ndim == 0:
                items[i] = item.full_tensor()
    return items


def _stand_ins(items: list[Any]) -> tuple[Any, ...]:
    """The items with DTensors replaced by what validation needs of them (shape and dtype)."""
    return tuple((MaskArg(item.shape) if item.dtype.kind == "b" else ArrayArg(i, item.shape, item.dtype))
                 if is_sharded(item) else item for i, item in enumerate(items))


def _masks(items: list[Any]) -> list[int]:
    return [i for i, item in enumerate(items) if is_sharded(item) and item.dtype.kind == "b"]


def _replicated(x: Any, value: np.ndarray) -> Any:
    """``value`` (the same on every rank) as a replicated DTensor on ``x``'s mesh, without communication."""
    mesh = x.mesh
    spec = DTensorSpec(mesh, (Replicate(),) * mesh.ndim, TensorMeta(value.shape, value.dtype))
    return type(x)({r: value for r in backend_for(mesh).ranks}, spec)


def _mask_dim(x: Any, items: list[Any], masks: list[int]) -> Optional[int]:
    """Where the one DTensor mask's dims start in ``x``, when every other item is ``:`` or ``...`` and the mask's
    shape is that of the dims it indexes; else None."""
    if len(masks) != 1:
        return None
    m = masks[0]
    full = slice(None)
    if not all(i == m or item is Ellipsis or (isinstance(item, slice) and item == full) for i, item in enumerate(items)):
        return None
    a = x.ndim - items[m].ndim - (len(items) - m - 1) if any(item is Ellipsis for item in items[:m]) else m
    return a if tuple(items[m].shape) == x.shape[a:a + items[m].ndim] else None


def _gather_masks(x: Any, items: list[Any]) -> list[Any]:
    """Every DTensor mask gathered to a NumPy mask (its bytes only)."""
    return [item.full_tensor() if is_sharded(item) and item.dtype.kind == "b" else item for item in items]


def _mask_spec(x_spec: DTensorSpec, mask: Any, a: int) -> DTensorSpec:
    """The spec the mask needs to line up with ``x``'s blocks: ``x``'s mesh dims of dims ``a..`` shard its dims."""
    k = mask.ndim
    placements: list[Placement] = [Shard(p.dim - a) if isinstance(p, Shard) and a <= p.dim < a + k else Replicate()
                                   for p in x_spec.placements]
    order = tuple((d - a, ms) for d, ms in x_spec.shard_order if a <= d < a + k)  # type: ignore[union-attr]
    return DTensorSpec(x_spec.mesh, tuple(placements), mask.spec.tensor_meta, order)


# -- reading ----------------------------------------------------------------------------------------
def getitem(x: Any, index: Any, fast_key: Optional[tuple] = None) -> Any:
    """``x[index]`` (see the module docstring); ``fast_key``: keep the call on the dispatch fast path under it."""
    items = _own_items(x, index)
    read_index(x.shape, _stand_ins(items))  # NumPy's errors, before anything moves
    masks = _masks(items)
    a = _mask_dim(x, items, masks)
    if a is not None and not any(isinstance(p, Shard) and a < p.dim < a + items[masks[0]].ndim
                                 for p in x.placements):
        return _mask_getitem(x, items[masks[0]], a)
    items = _gather_masks(x, items)
    plan_index(x.shape, _stand_ins(items))  # the rest of NumPy's errors (index values included)
    ready: list[Any] = []
    for item in items:
        if isinstance(item, (list, tuple)):
            item = list_index(item)
        if isinstance(item, np.ndarray) and item.ndim > 0:
            arrays = np.nonzero(item) if item.dtype.kind == "b" else (item,)
            ready += [_replicated(x, a) for a in arrays]
        else:
            ready.append(item)
    return run_rule(GETITEM, (x, tuple(ready)), {}, fast_key)


def _mask_getitem(x: Any, mask: Any, a: int) -> Any:
    """``x[..., mask, ...]`` with the mask lined up with ``x``'s blocks (see the module docstring)."""
    k = mask.ndim
    spec = x.spec  # a Partial passes through: selection is linear
    lined = _mask_spec(spec, mask, a)
    mask = mask.redistribute(lined.placements, shard_order=lined.shard_order)
    lead = (slice(None),) * a
    picked = {r: array_module(s).ascontiguousarray(s[lead + (mask.shards[r],)]) for r, s in x.shards.items()}
    mesh = x.mesh
    backend = backend_for(mesh)
    order = dict(spec.shard_order)  # type: ignore[arg-type]
    mesh_dims = order.get(a, ())
    if mesh_dims:
        counts = backend.gather_descriptors({r: (p.shape[a],) for r, p in picked.items()})
    else:
        counts = {r: (next(iter(picked.values())).shape[a],) for r in mesh.all_ranks}
    groups = mesh.groups(mesh_dims) if mesh_dims else tuple((r,) for r in mesh.all_ranks)
    have = {}
    total = 0
    for g in groups:
        start = 0
        for r in g:
            have[r] = (start, start + counts[r][0])
            start += counts[r][0]
        total = start
    placements = tuple(Shard(p.dim if p.dim <= a else p.dim - k + 1) if isinstance(p, Shard) else p
                       for p in spec.placements)
    out_order = tuple((d if d <= a else d - k + 1, ms) for d, ms in spec.shard_order)  # type: ignore[union-attr]
    shape = x.shape[:a] + (total,) + x.shape[a + k:]
    out_spec = DTensorSpec(mesh, placements, TensorMeta(shape, x.dtype), out_order)
    if mesh_dims:
        want = {}
        for r in mesh.all_ranks:
            size, offset = (v[a] for v in out_spec.local_block(r))
            want[r] = (offset, offset + size)
        picked = move_ranges(backend, picked, groups, a, have, want)
    return type(x)(picked, out_spec, namespace=x.namespace)


def iterate(x: Any) -> Iterator[Any]:
    """``for row in x``: ``x[0]``, ``x[1]``, ... (each one getitem); a TypeError for a 0-d array, as NumPy."""
    if not x.shape:
        raise TypeError("iteration over a 0-d array")
    return (getitem(x, i) for i in range(x.shape[0]))


# -- updates --------------------------------------------------------------------------------------------
class IndexUpdater:
    """``x.at``: ``x.at[index]`` is an :class:`IndexUpdate` (JAX's ``.at`` for DTensors).

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> x = dt.distribute_tensor(np.zeros(4), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> x.at[1:3].set(7.0).full_tensor().tolist(), x.full_tensor().tolist()   # x is unchanged
        ([0.0, 7.0, 7.0, 0.0], [0.0, 0.0, 0.0, 0.0])
    """

    __slots__ = ("_x",)

    def __init__(self, x: Any) -> None:
        self._x = x

    def __getitem__(self, index: Any) -> "IndexUpdate":
        return IndexUpdate(self._x, index)

    def __setitem__(self, index: Any, value: Any) -> None:
        raise TypeError("x.at[index] does not take assignment (DTensors are immutable): write "
                        "x = x.at[index].set(value), or x[index] = value to rebind x")

    def __repr__(self) -> str:
        return f"IndexUpdater({self._x!r})"


class IndexUpdate:
    """``x.at[index]``: ``get()`` and the functional updates, each returning a new DTensor."""

    __slots__ = ("_x", "_index")

    def __init__(self, x: Any, index: Any) -> None:
        self._x = x
        self._index = index

    def get(self) -> Any:
        """``x[index]``."""
        return getitem(self._x, self._index)

    def set(self, value: Any) -> Any:
        """``x`` with ``x[index] = value`` (the last of duplicate indices wins)."""
        return update(self._x, self._index, value, "set")

    def add(self, value: Any) -> Any:
        """``x`` with ``value`` added at ``index`` (``np.add.at``: duplicates accumulate)."""
        return update(self._x, self._index, value, "add")

    def multiply(self, value: Any) -> Any:
        """``x`` with ``index`` multiplied by ``value`` (``np.multiply.at``)."""
        return update(self._x, self._index, value, "multiply")

    def min(self, value: Any) -> Any:
        """``x`` with ``index`` replaced by its minimum with ``value`` (``np.minimum.at``)."""
        return update(self._x, self._index, value, "min")

    def max(self, value: Any) -> Any:
        """``x`` with ``index`` replaced by its maximum with ``value`` (``np.maximum.at``)."""
        return update(self._x, self._index, value, "max")


def _value_shape_error(value_shape: tuple[int, ...], target: tuple[int, ...], advanced: bool) -> ValueError:
    if advanced:
        return ValueError(f"shape mismatch: value array of shape {value_shape} could not be broadcast to indexing "
                          f"result of shape {target}")
    return ValueError(f"could not broadcast input array from shape {value_shape} into shape {target}")


def _fit_value_shape(value_shape: tuple[int, ...], target: tuple[int, ...], advanced: bool) -> tuple[int, ...]:
    """``value_shape`` without the leading 1s NumPy drops in an assignment; ValueError unless it broadcasts to ``target``."""
    shape = tuple(value_shape)
    while len(shape) > len(target) and shape[0] == 1:
        shape = shape[1:]
    if len(shape) > len(target) or any(v not in (1, t) for v, t in zip(shape[::-1], target[::-1])):
        raise _value_shape_error(tuple(value_shape), target, advanced)
    return shape


def _check_value(x: Any, value: Any, op: str) -> Any:
    """The value as this module uses it (a Python scalar, or an array), after NumPy's own casting checks on every rank."""
    scalar = isinstance(value, (bool, int, float, complex, np.generic))
    if not scalar and not is_sharded(value):
        value = check_array(value, "value")
        if value.ndim == 0:
            value, scalar = value[()], True
    if is_sharded(value):
        if value.mesh is not x.mesh:
            raise ShardingError(f"the value must live on the updated array's mesh {x.mesh!r}, got one on "
                                f"{value.mesh!r}")
        if value.ndim == 0:
            value, scalar = value.full_tensor()[()], True
    if is_sharded(value):
        probe = np.zeros(1, value.dtype)
    else:
        probe = value if scalar else np.zeros(1, value.dtype)
    target = np.zeros(1, x.dtype)
    if op == "set":
        target[0:1] = probe
    else:
        UPDATES[op].at(target, 0, probe if scalar else probe[0])  # type: ignore[union-attr]
    return value


def update(x: Any, index: Any, value: Any, op: str, fast_key: Optional[tuple] = None) -> Any:
    """``x`` updated at ``index`` with ``value`` by ``op`` (see the module docstring); a new DTensor.

    With ``fast_key`` (the caller's key of ``(op, x.spec, index, value)``, a
    static index and a scalar value), a basic update keeps its entry
    ``entry(x, value)`` on the dispatch fast path: the spec, the move of a
    pending sum and every rank's block part precomputed.
    """
    if op not in UPDATES:
        raise ValueError(f"expected an update among {sorted(UPDATES)}, got {op!r}")
    items = _own_items(x, index)
    read_index(x.shape, _stand_ins(items))  # index errors first, as NumPy's assignment
    value = _check_value(x, value, op)
    masks = _masks(items)
    spec = partial_free(x.spec)
    a = _mask_dim(x, items, masks)
    if a is not None and _count_free(value, x.shape, a, items[masks[0]].ndim):
        return _mask_update(x, spec, items[masks[0]], a, value, op)
    items = _gather_masks(x, items)
    items = [item.full_tensor() if is_sharded(item) else item for item in items]
    plan = plan_index(x.shape, tuple(items))
    value_shape = () if _ndim(value) == 0 else _fit_value_shape(value.shape, plan.out_shape, plan.advanced)
    shards = x.shards if spec is x.spec else redistribute_shards(x.shards, x.spec, spec)
    if is_sharded(value) and value.spec.is_replicated():  # every rank holds the whole value already
        value = next(iter(value.shards.values()))
    if is_sharded(value):
        if not plan.advanced and value.shape == plan.out_shape:
            return type(x)(_basic_update_by_parts(x, spec, shards, plan, value, op), spec, namespace=x.namespace)
        value = value.full_tensor()
        value_shape = value.shape
    if _ndim(value) and value_shape != value.shape:
        value = value.reshape(value_shape)
    full = value if _ndim(value) == 0 else np.broadcast_to(value, plan.out_shape)
    if plan.advanced:
        arrays = index_arrays(plan, ())
        new = {r: _advanced_update(s, spec, r, plan, arrays, full, op) for r, s in shards.items()}
    else:
        new = {r: _basic_update(s, spec, r, plan, full, op) for r, s in shards.items()}
        if fast_key is not None and _ndim(value) == 0 and not is_sharded(value):
            _remember_update(fast_key, x, spec, plan, op)
    return type(x)(new, spec, namespace=x.namespace)


def _remember_update(key: tuple, x: Any, spec: DTensorSpec, plan: IndexPlan, op: str) -> None:
    """The fast-path entry ``entry(x, value)`` of a basic update by a scalar (see :func:`update`)."""
    build = fast_builder(x.__class__)
    if build is None:
        return
    src = x.spec
    parts = {r: block_part(plan, spec, r) for r in x.shards}
    owned = tuple((r, parts[r].index) for r in x.shards if not parts[r].empty)
    hits = hit_counter()
    ufunc = UPDATES[op]

    def entry(x: Any, value: Any) -> Any:
        hits[0] += 1
        shards = x._shards if spec is src else redistribute_shards(x._shards, src, spec)
        new = dict(shards)
        for r, index in owned:
            out = new[r].copy()
            if ufunc is None:
                out[index] = on_device_of(out, value)
            else:
                ufunc_at(ufunc, out, index, value)
            new[r] = out
        return build(new, spec, x._namespace)

    remember(key, entry)


def _ndim(value: Any) -> int:
    """The ndim of a value as :func:`_check_value` leaves it (a scalar, an array or a DTensor)."""
    return len(getattr(value, "shape", ()))


def _apply(target: Any, index: tuple[Any, ...], value: Any, op: str) -> None:
    if op == "set":
        target[index] = on_device_of(target, value)  # a NumPy value into a CuPy shard: copied to the device
    else:
        ufunc_at(UPDATES[op], target, index, value)  # type: ignore[arg-type]


def _basic_update(block: Any, spec: DTensorSpec, rank: int, plan: IndexPlan, full: Any, op: str) -> Any:
    part = block_part(plan, spec, rank)
    if part.empty:
        return block
    out = block.copy()
    piece = full if _ndim(full) == 0 else full[tuple(slice(lo, hi) for lo, hi in part.ranges)]
    _apply(out, part.index, piece, op)
    return out


def _basic_update_by_parts(x: Any, spec: DTensorSpec, shards: Any, plan: IndexPlan, value: Any, op: str) -> Any:
    """A basic update by a DTensor of ``x[index]``'s shape: laid out as ``x[index]``, moved back to the owners."""
    y_spec = basic_spec(spec, plan)
    parts = value.redistribute(y_spec.placements, shard_order=y_spec.shard_order).shards
    mesh = spec.mesh
    ranks = mesh.all_ranks
    backend = backend_for(mesh)
    blocks = {r: block_part(plan, spec, r) for r in ranks}
    for d, mesh_dims in spec.shard_order:  # type: ignore[union-attr]
        y = plan.y_dim_of(d)
        if y is None:
            continue  # an int: y is replicated there, its owner has the value
        want = {r: blocks[r].ranges[y] for r in ranks}
        have = {}
        for r in ranks:
            size, offset = (v[y] for v in y_spec.local_block(r))
            have[r] = (offset, offset + size)
        parts = move_ranges(backend, parts, mesh.groups(mesh_dims), y, have, want)
    new = {}
    for r, block in shards.items():
        part = blocks[r]
        if part.empty:
            new[r] = block
            continue
        new[r] = block.copy()
        _apply(new[r], part.index, parts[r], op)
    return new


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


def _count_free(value: Any, shape: tuple[int, ...], a: int, k: int) -> bool:
    """True when ``value`` broadcasts into ``x[mask]`` whatever the mask's count (it has no count dim of size > 1)."""
    if _ndim(value) == 0:
        return True
    try:
        _fit_value_shape(tuple(value.shape), shape[:a] + (1,) + shape[a + k:], True)
    except ValueError:
        return False
    return True


def _mask_update(x: Any, spec: DTensorSpec, mask: Any, a: int, value: Any, op: str) -> Any:
    """An update at a DTensor mask lined up with ``x``'s blocks, by a value with no count dim: local on every rank."""
    k = mask.ndim
    target = x.shape[:a] + (1,) + x.shape[a + k:]
    if _ndim(value):
        if is_sharded(value):
            value = value.full_tensor()
        value = np.broadcast_to(value.reshape(_fit_value_shape(value.shape, target, True)), target)
    lined = _mask_spec(spec, mask, a)
    mask = mask.redistribute(lined.placements, shard_order=lined.shard_order)
    shards = x.shards if spec is x.spec else redistribute_shards(x.shards, x.spec, spec)
    lead = (slice(None),) * a
    new = {}
    for r, block in shards.items():
        here = mask.shards[r]
        if block.size == 0 or not here.any():
            new[r] = block
            continue
        piece = value
        if _ndim(value):
            shape, offset = spec.local_block(r)
            piece = value[tuple(slice(o, o + n) for o, n in zip(offset[:a], shape[:a])) + (slice(None),)
                          + tuple(slice(o, o + n) for o, n in zip(offset[a + k:], shape[a + k:]))]
        new[r] = block.copy()
        _apply(new[r], lead + (here,), piece, op)
    return type(x)(new, spec, namespace=x.namespace)
