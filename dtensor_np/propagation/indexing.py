"""The sharding rule of ``operator.getitem``: ``x[index]`` for every NumPy index, sharded dims included.

The index runs in two phases (see :mod:`.index_plan`), each moving only what changes owner:

* **basic** (ints, slices with any step, ``...``, ``None``): every rank cuts
  its part out of its own block (a copy, never a view).  A sliced sharded dim
  stays sharded on its mesh dims; when the parts no longer follow the
  ``torch.chunk`` layout of the result, the rows that change owner move in one
  ``Alltoallv`` per such dim (``rechunk`` for a positive step, ``exchange`` for
  a negative one, which reverses the order; both counted as ``all_to_all``):
  each rank passes MPI exactly the rows it sends away, never a gather.  An
  int on a sharded dim: the one rank whose block holds it broadcasts its part
  over the mesh dims of that dim (one ``broadcast`` of the result's block),
  which are ``Replicate`` in the result.  Unsharded dims, and slices whose
  parts already are the result's chunks: no communication.
* **advanced** (integer arrays; a boolean mask is its ``nonzero()``): the
  index arrays are replicated first (a sharded index array's redistribute,
  e.g. an ``all_gather`` of the index's bytes; nothing for NumPy arrays).
  When no advanced dim is sharded every rank picks its rows locally (no
  communication).  Otherwise the mesh dims of the advanced dims shard the
  first dim of the index arrays' broadcast shape in the result (torch.chunk),
  and each selected row goes from the rank that owns it to the rank that holds
  its place in the result in one ``exchange``: a rank passes MPI the rows it
  sends away (a row selected twice travels twice; a row already in place does
  not move); none when no row changes owner.  Index values are checked
  (NumPy's ``IndexError``) on every rank before anything moves.

``Partial`` placements pass through both phases (selection is linear).
A boolean mask that is a distributed argument of a graph has a
data-dependent shape and is refused with a ``TypeError``; eager DTensor masks
are handled by :mod:`dtensor_np.indexing` before they reach this rule.

Example:
    >>> import operator
    >>> from dtensor_np import DeviceMesh, DTensorSpec, TensorMeta, Shard
    >>> from dtensor_np.propagation import decide, rule_for
    >>> spec = DTensorSpec(DeviceMesh((2,)), (Shard(0),), TensorMeta((6, 3), "f8"))
    >>> d = decide(rule_for(operator.getitem), (spec,), (SliceKey(1, None, None), 2))
    >>> str(d.outputs[0]), d.outputs[0].shape, d.program is not None   # 5 rows over 2 ranks: 3 + 2, one moves
    ('S(0)', (5,), True)
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Hashable, Mapping, Optional, Sequence

import numpy as np

from collectives import array_module, is_device_array

from ..placements import Replicate, Shard
from ..sharded import is_sharded
from ..spec import DTensorSpec
from .index_plan import (
    DATA_DEPENDENT,
    INVALID_INDEX,
    ArrayArg,
    IndexPlan,
    advanced_spec,
    basic_spec,
    block_part,
    check_bounds,
    index_items,
    list_index,
    plan_index,
)
from .registry import Decision, OpRule, register
from .row_moves import gather_rows, member_of, move_ranges, width

__all__ = ["GETITEM", "BoolKey", "SliceKey", "StaticArray", "TensorRef", "BasicPhase", "AdvancedPhase", "index_arrays",
           "getitem_decision", "index_key", "thaw_index"]

Shards = dict[int, Any]


# -- the rule's key: a hashable index ------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StaticArray:
    """A NumPy index array (or list) inside a cache key: its dtype, shape and bytes.

    Example:
        >>> StaticArray.of(np.array([[1, 2]])).value().tolist()
        [[1, 2]]
    """

    dtype: str
    shape: tuple[int, ...]
    data: bytes

    @classmethod
    def of(cls, a: np.ndarray) -> StaticArray:
        return cls(a.dtype.str, tuple(a.shape), np.ascontiguousarray(a).tobytes())

    def value(self) -> np.ndarray:
        return np.frombuffer(self.data, np.dtype(self.dtype)).reshape(self.shape)


@dataclass(frozen=True, slots=True)
class SliceKey:
    """A slice of ints (or None) inside a cache key (slices are not hashable before Python 3.12)."""

    start: Optional[int]
    stop: Optional[int]
    step: Optional[int]

    def value(self) -> slice:
        return slice(self.start, self.stop, self.step)


@dataclass(frozen=True, slots=True)
class BoolKey:
    """A boolean scalar inside a cache key (``True == 1`` would make ``x[True]`` hit ``x[1]``'s entry)."""

    value: bool


@dataclass(frozen=True, slots=True)
class TensorRef:
    """An index array that is a distributed argument: the rule's ``position``-th array (``x`` is 0)."""

    position: int


def _slice_part(part: Any) -> Optional[int]:
    if part is None:
        return None
    try:
        return operator.index(part)
    except TypeError:
        raise TypeError("slice indices must be integers or None or have an __index__ method") from None


def index_key(index: Any, tensors: list[Any], masks: bool = False) -> tuple[Any, ...]:
    """The hashable key of an index for a rule (its DTensor arrays appended to ``tensors``, as :class:`TensorRef`).

    A DTensor boolean mask is refused (its result's shape depends on its
    values), unless ``masks``: then it is a distributed argument too.

    Example:
        >>> index_key((1, slice(None, 2), None, [0, 1]), [])[:3]
        (1, SliceKey(start=None, stop=2, step=None), None)
    """
    key: list[Any] = []
    for item in index_items(index):
        if is_sharded(item):
            if item.dtype.kind == "b" and not masks:
                raise TypeError(DATA_DEPENDENT)
            tensors.append(item)
            key.append(TensorRef(len(tensors) - 1))
        elif isinstance(item, slice):
            key.append(SliceKey(_slice_part(item.start), _slice_part(item.stop), _slice_part(item.step)))
        elif isinstance(item, (list, tuple)):
            key.append(StaticArray.of(list_index(item)))
        elif isinstance(item, np.ndarray):
            key.append(StaticArray.of(item))
        elif item is None or item is Ellipsis:
            key.append(item)
        elif isinstance(item, (bool, np.bool_)):
            key.append(BoolKey(bool(item)))
        elif hasattr(item, "__index__"):
            try:
                key.append(operator.index(item))
            except TypeError:
                raise IndexError(INVALID_INDEX) from None
        else:
            raise IndexError(INVALID_INDEX)
    return tuple(key)


def _bind(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    if kwargs or len(args) != 2:
        raise TypeError(f"getitem takes an array and an index, got {len(args)} arguments and {sorted(kwargs)}")
    x, index = args
    if not is_sharded(x):
        raise TypeError(f"getitem: expected a DTensor to index, got {type(x).__name__}")
    tensors = [x]
    key = index_key(index, tensors)
    return tuple(tensors), key


def thaw_index(key: Sequence[Any], specs: Sequence[DTensorSpec]) -> tuple[Any, ...]:
    """The index a key of :func:`index_key` stands for (distributed arrays as :class:`ArrayArg` of their specs)."""
    items = []
    for item in key:
        if isinstance(item, TensorRef):
            spec = specs[item.position]
            items.append(ArrayArg(item.position, spec.shape, spec.dtype))
        elif isinstance(item, (StaticArray, SliceKey, BoolKey)):
            items.append(item.value() if not isinstance(item, BoolKey) else item.value)
        else:
            items.append(item)
    return tuple(items)


# -- index arrays at run time ------------------------------------------------------------------
def index_arrays(plan: IndexPlan, values: Sequence[Any]) -> list[np.ndarray]:
    """The advanced entries' arrays broadcast to ``b_shape``, made non-negative, checked (NumPy's IndexError).

    ``values[i]`` is the value of the op's array argument ``i + 1`` (an
    :class:`ArrayArg` source); other sources are the plan's own arrays.
    """
    size = int(np.prod(plan.b_shape))
    arrays = []
    for e in plan.entries:
        if e.kind != "adv":
            continue
        n = 1 if e.dim is None else plan.shape[e.dim]
        source = e.source
        if isinstance(source, ArrayArg):
            source = values[source.position - 1]
            source = source.get() if is_device_array(source) else np.asarray(source)  # owners are worked out on the host
            if size and e.dim is not None:
                check_bounds(source, e.dim, n)
        if source.dtype.kind == "i" and n:
            source = np.where(source < 0, source + n, source)
        arrays.append(source)
    return list(np.broadcast_arrays(*arrays)) if arrays else []


def _place_b(plan: IndexPlan, picked: Any) -> Any:
    """An array laid out ``(*b_shape, *rest)`` in the result's dim order, as a new C-contiguous array."""
    nb = len(plan.b_shape)
    if plan.b_pos and nb:
        picked = array_module(picked).moveaxis(picked, tuple(range(nb)), tuple(range(plan.b_pos, plan.b_pos + nb)))
    return array_module(picked).ascontiguousarray(picked)


def _front(plan: IndexPlan, y: Any) -> Any:
    """``y`` with its advanced dims first (a view)."""
    m = len(plan.adv_dims)
    return array_module(y).moveaxis(y, plan.adv_dims, tuple(range(m))) if m else y


# -- phase 1: basic ----------------------------------------------------------------------------------
class BasicPhase:
    """Ints, slices and new axes, on every rank's block, then the moves that restore the result's layout.

    ``communicates`` is False when every rank's part already is its block of
    ``y``; then :meth:`local` is all there is.
    """

    def __init__(self, plan: IndexPlan, x_spec: DTensorSpec, y_spec: DTensorSpec) -> None:
        mesh = x_spec.mesh
        ranks = mesh.all_ranks
        self.plan, self.y_spec = plan, y_spec
        self.parts = {r: block_part(plan, x_spec, r) for r in ranks}
        int_dims = {e.dim for e in plan.entries if e.kind == "int"}
        int_mesh = tuple(m for m, p in enumerate(x_spec.placements) if isinstance(p, Shard) and p.dim in int_dims)
        self.broadcast: Optional[tuple[Any, int]] = None
        if int_mesh:
            groups = mesh.groups(int_mesh)
            root = next(i for i, r in enumerate(groups[0]) if self.parts[r].owns)
            self.broadcast = (groups, root)
        self.moves = []
        for d, mesh_dims in x_spec.shard_order:  # type: ignore[union-attr]
            e = plan.entry_of(d)
            if e.kind != "slice":
                continue
            y = plan.y_dim_of(d)
            have = {r: self.parts[r].ranges[y] for r in ranks}
            want = {}
            for r in ranks:
                size, offset = (v[y] for v in y_spec.local_block(r))
                want[r] = (offset, offset + size)
            if any(width(have[r]) != width(want[r]) or (width(want[r]) and have[r] != want[r]) for r in ranks):
                self.moves.append((mesh.groups(mesh_dims), y, have, want))
        self.communicates = self.broadcast is not None or bool(self.moves)

    def local(self, rank: int, x: Any) -> Any:
        """This rank's part of ``y`` cut from its block (a new array; a stand-in of the right shape when it owns none)."""
        part = self.parts[rank]
        if not part.owns:
            return array_module(x).empty(tuple(hi - lo for lo, hi in part.ranges), x.dtype)
        return x[part.index + (Ellipsis,)].copy()

    def run(self, backend: Any, shards: Mapping[int, Any]) -> Shards:
        """Every held rank's block of ``y``: the local cut, the broadcast of the ints' owner, then the moves."""
        ys = {r: self.local(r, x) for r, x in shards.items()}
        if self.broadcast is not None:
            groups, root = self.broadcast
            some = next(iter(ys.values()))
            ys = backend.prepare("broadcast", groups, {r: y.shape for r, y in ys.items()}, some.dtype,
                                 root=root).run(ys)
        for groups, axis, have, want in self.moves:
            ys = move_ranges(backend, ys, groups, axis, have, want)
        return ys


# -- phase 2: advanced ----------------------------------------------------------------------------------
class AdvancedPhase:
    """The rows of ``y`` the index arrays name: locally, or from their owners in one ``exchange``."""

    def __init__(self, plan: IndexPlan, y_spec: DTensorSpec, out_spec: DTensorSpec) -> None:
        self.plan, self.y_spec, self.out_spec = plan, y_spec, out_spec
        mesh = y_spec.mesh
        moved = tuple(m for m, p in enumerate(y_spec.placements) if isinstance(p, Shard) and p.dim in plan.adv_dims)
        self.communicates = bool(moved)
        if not moved:
            return
        self.groups = mesh.groups(moved)
        members = self.groups[0]
        sharded = sorted({y_spec.placements[m].dim for m in moved})  # type: ignore[union-attr]
        self.sharded = [plan.adv_dims.index(d) for d in sharded]  # positions among the advanced dims
        self.owner_blocks = []
        for r in members:
            shape, offset = y_spec.local_block(r)
            self.owner_blocks.append([(offset[d], shape[d]) for d in sharded])
        self.target_blocks = []
        if plan.b_shape:
            for r in members:
                shape, offset = out_spec.local_block(r)
                self.target_blocks.append([(offset[plan.b_pos], shape[plan.b_pos])])

    def local(self, y: Any, arrays: Sequence[np.ndarray]) -> Any:
        """The result from a ``y`` block whose advanced dims are whole."""
        return _place_b(self.plan, _front(self.plan, y)[tuple(arrays)])

    def run(self, backend: Any, ys: Mapping[int, Any], arrays: Sequence[np.ndarray]) -> Shards:
        """Every held rank's block of the result: each row from its owner, in one ``exchange``."""
        plan = self.plan
        k = len(self.groups[0])
        coords = [a.reshape(-1) for a in arrays]
        count = coords[0].size if coords else 1
        owner = member_of([coords[i] for i in self.sharded], self.owner_blocks)
        if plan.b_shape:
            inner = int(np.prod(plan.b_shape[1:]))
            target = member_of([np.arange(count) // max(inner, 1)], self.target_blocks)
            rows = np.arange(count)
        else:  # 0-d index arrays: every member gets the one row
            rows = np.zeros(k, np.intp)
            owner, target = np.repeat(owner, k), np.arange(k)
        offsets = {r: self.y_spec.local_block(r)[1] for r in ys}

        def take(rank: int, picked: np.ndarray) -> Any:
            js = rows[picked]
            local = tuple(c[js] - (offsets[rank][d] if i in self.sharded else 0)
                          for i, (c, d) in enumerate(zip(coords, plan.adv_dims)))
            return _front(plan, ys[rank])[local]

        flat = gather_rows(backend, ys, self.groups, owner, target, take)
        out = {}
        for r, f in flat.items():
            shape = self.out_spec.local_block(r)[0]
            nb = len(plan.b_shape)
            b = shape[plan.b_pos:plan.b_pos + nb]
            rest = shape[:plan.b_pos] + shape[plan.b_pos + nb:]
            out[r] = _place_b(plan, f.reshape(tuple(b) + tuple(rest)))
        return out


# -- the decision -----------------------------------------------------------------------------------------
def getitem_decision(x_spec: DTensorSpec, index: Any, array_specs: Sequence[DTensorSpec] = ()) -> Decision:
    """The decision of ``x[index]`` (``index`` with :class:`ArrayArg` for distributed index arrays).

    Example:
        >>> from dtensor_np import DeviceMesh, DTensorSpec, TensorMeta, Shard
        >>> spec = DTensorSpec(DeviceMesh((2,)), (Shard(1),), TensorMeta((4, 6), "f8"))
        >>> d = getitem_decision(spec, (slice(None, None, -1), None, [0, 5]))   # dim 1 sharded: rows move
        >>> str(d.outputs[0]), d.outputs[0].shape
        ('S(2)', (4, 1, 2))
    """
    plan = plan_index(x_spec.shape, index)
    y_spec = basic_spec(x_spec, plan)
    out_spec = advanced_spec(y_spec, plan) if plan.advanced else y_spec
    basic = BasicPhase(plan, x_spec, y_spec)
    adv = AdvancedPhase(plan, y_spec, out_spec) if plan.advanced else None
    replicated = (Replicate(),) * x_spec.mesh.ndim
    inputs = (x_spec,) + tuple(DTensorSpec(s.mesh, replicated, s.tensor_meta) for s in array_specs)
    if not basic.communicates and (adv is None or not adv.communicates):
        if adv is None:
            return Decision(inputs, (out_spec,), basic.local)

        def local(rank: int, x: Any, *values: Any) -> Any:
            return adv.local(basic.local(rank, x), index_arrays(plan, values))

        return Decision(inputs, (out_spec,), local)

    def program(backend: Any, x_shards: Mapping[int, Any], *value_shards: Mapping[int, Any]) -> Shards:
        arrays = None
        if adv is not None:  # checked before anything moves
            first = next(iter(x_shards))
            arrays = index_arrays(plan, [v[first] for v in value_shards])
        ys = basic.run(backend, x_shards)
        if adv is None:
            return ys
        if not adv.communicates:
            return {r: adv.local(y, arrays) for r, y in ys.items()}  # type: ignore[arg-type]
        return adv.run(backend, ys, arrays)  # type: ignore[arg-type]

    return Decision(inputs, (out_spec,), None, program=program)


def _decide(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    return getitem_decision(specs[0], thaw_index(key, specs), specs[1:])


GETITEM = register(operator.getitem)(OpRule("getitem", _bind, _decide))
"""The rule of ``x[index]``."""
