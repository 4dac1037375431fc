"""A NumPy index on a shape, worked out once: what each dim keeps, where the advanced dims go, NumPy's errors (pure).

:func:`plan_index` reads an index the way NumPy does (ints, slices with any
step, ``...``, ``None``, integer and boolean arrays, and their combinations)
and returns an :class:`IndexPlan`: one :class:`Entry` per index item after the
ellipsis is expanded (boolean arrays become their ``nonzero()`` integer arrays,
a boolean scalar a new size-1 dim indexed by ``[0]`` or ``[]``), the broadcast
shape ``b_shape`` of the advanced (array) entries and where NumPy puts it, and
the result's shape.  It raises what NumPy raises, in NumPy's order: the item
types (``IndexError: only integers, slices...``, one ellipsis), too many
indices, boolean shapes, then ints and slice steps in order, the broadcast of
the index arrays, and the bounds of their values.

Indexing runs in two phases: the *basic* phase applies the slices, ints and
new axes and keeps every advanced dim whole (its result is ``y``); the
*advanced* phase picks the rows of ``y`` the index arrays name.  The specs of
both results follow from the input spec (:func:`basic_spec`,
:func:`advanced_spec`).  Index arrays whose values are not known here (a
distributed argument of the rule) are :class:`ArrayArg`.

Example:
    >>> plan = plan_index((4, 5, 6), (slice(1, None, 2), None, [0, 2, 2]))
    >>> plan.y_shape, plan.out_shape, plan.b_shape
    ((2, 1, 5, 6), (2, 1, 3, 6), (3,))
    >>> plan_index((4, 5), (1, 0, 0))
    Traceback (most recent call last):
    ...
    IndexError: too many indices for array: array is 2-dimensional, but 3 were indexed
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..placements import Placement, Replicate, Shard
from ..spec import DTensorSpec, TensorMeta

__all__ = [
    "ArrayArg",
    "MaskArg",
    "read_index",
    "Entry",
    "IndexPlan",
    "plan_index",
    "index_items",
    "list_index",
    "kept_range",
    "local_slice",
    "basic_spec",
    "advanced_spec",
    "check_bounds",
    "INVALID_INDEX",
    "DATA_DEPENDENT",
    "BlockPart",
    "block_part",
    "concrete_index",
]

DATA_DEPENDENT = ("indexing with a boolean mask that is a traced or graph array has a data-dependent shape, which a "
                  "graph cannot have (as in jax.jit): index with a concrete NumPy mask, with integer indices, or use "
                  "np.where(mask, x, fill) to keep the shape")
INVALID_INDEX = ("only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) and integer or boolean "
                 "arrays are valid indices")


@dataclass(frozen=True, slots=True)
class ArrayArg:
    """An index array whose values arrive when the index runs: argument ``position`` of the op, of ``shape`` and ``dtype``."""

    position: int
    shape: tuple[int, ...]
    dtype: np.dtype


@dataclass(frozen=True, slots=True)
class Entry:
    """One item of an expanded index.

    ``kind`` is ``"slice"`` (``dim`` keeps ``length`` elements from ``start`` by
    ``step``), ``"int"`` (``dim`` is removed, keeping element ``value``),
    ``"new"`` (a new size-1 dim) or ``"adv"`` (``dim`` is indexed by the
    integer array ``source``: an ndarray or an :class:`ArrayArg`; ``dim`` is
    None for the new size-1 dim of a boolean scalar).  ``item`` is the position
    of the index item it came from (adjacency of the advanced items is decided on it).
    """

    kind: str
    dim: Optional[int]
    item: int
    start: int = 0
    step: int = 1
    length: int = 1
    value: int = 0
    source: Any = None


@dataclass(frozen=True, eq=False)
class IndexPlan:
    """An index worked out for one shape (see the module docstring).

    ``y_shape``: after the basic phase (one dim per slice, new axis and
    advanced entry); ``adv_dims``: the ``y`` dims the advanced entries index;
    ``b_shape``: the broadcast shape of their arrays; ``b_pos``: where it goes in
    the result (after ``b_pos`` of the other ``y`` dims); ``out_shape``: the result's shape.
    """

    shape: tuple[int, ...]
    entries: tuple[Entry, ...]
    advanced: bool
    adjacent: bool
    y_shape: tuple[int, ...]
    adv_dims: tuple[int, ...]
    b_shape: tuple[int, ...]
    b_pos: int
    out_shape: tuple[int, ...]

    @property
    def rest_dims(self) -> tuple[int, ...]:
        """The ``y`` dims that are not advanced, in order."""
        return tuple(d for d in range(len(self.y_shape)) if d not in self.adv_dims)

    def y_dim_of(self, dim: int) -> Optional[int]:
        """The ``y`` dim that input dim ``dim`` becomes (None when an int removes it)."""
        y = 0
        for e in self.entries:
            if e.kind == "int":
                if e.dim == dim:
                    return None
                continue
            if e.dim == dim:
                return y
            y += 1
        raise AssertionError(f"dim {dim} has no entry")  # pragma: no cover - every dim has one

    def out_dim_of(self, y_dim: int) -> int:
        """The result dim of a non-advanced ``y`` dim."""
        rest = self.rest_dims.index(y_dim)
        return rest + (len(self.b_shape) if rest >= self.b_pos else 0)

    def entry_of(self, dim: int) -> Entry:
        """The entry that indexes input dim ``dim``."""
        for e in self.entries:
            if e.dim == dim:
                return e
        raise AssertionError(f"dim {dim} has no entry")  # pragma: no cover


def list_index(value: Any) -> np.ndarray:
    """A list (or nested tuple) in an index as NumPy reads it: an int or bool array; ``[]`` is an empty int array.

    Example:
        >>> list_index([0, True]).tolist(), list_index([]).dtype == np.intp
        ([0, 1], True)
    """
    a = np.asarray(value)  # NumPy's own ValueError for ragged lists
    if a.size == 0 and a.dtype.kind == "f":
        return a.astype(np.intp)
    if a.dtype.kind not in "iub":
        raise IndexError(INVALID_INDEX)
    return a


def index_items(index: Any) -> tuple[Any, ...]:
    """The items of an index: a tuple is several, anything else (a list too) is one."""
    return index if type(index) is tuple else (index,)


def concrete_index(index: Any, is_abstract: Callable[[Any], bool]) -> Any:
    """``index`` for a traced graph: concrete boolean masks become their ``nonzero()`` arrays (a static shape).

    An abstract boolean array (``is_abstract`` says which items are) has a
    data-dependent shape: a ``TypeError``, as ``jax.jit`` raises.

    Example:
        >>> concrete_index(np.array([True, False, True]), lambda item: False).tolist()
        [0, 2]
        >>> [a.tolist() for a in concrete_index((np.eye(2, dtype=bool), None), lambda item: False)[:2]]
        [[0, 1], [0, 1]]
    """
    items: list[Any] = []
    for item in index_items(index):
        if is_abstract(item):
            if np.dtype(item.dtype).kind == "b":
                raise TypeError(DATA_DEPENDENT)
            items.append(item)
            continue
        if isinstance(item, (list, tuple)):
            array = list_index(item)
            if array.dtype.kind == "b":
                item = array
        if isinstance(item, np.ndarray) and item.dtype.kind == "b" and item.ndim > 0:
            items += list(np.nonzero(item))
        else:
            items.append(item)
    return tuple(items) if type(index) is tuple or len(items) != 1 else items[0]


def _is_array_arg(x: Any) -> bool:
    return isinstance(x, ArrayArg)


def _classify(item: Any) -> tuple[str, Any]:
    """(kind, value) of one index item; NumPy's IndexError for a type it refuses."""
    if item is None:
        return "new", None
    if item is Ellipsis:
        return "ellipsis", None
    if isinstance(item, slice):
        parts = []
        for part in (item.start, item.stop, item.step):
            if part is None:
                parts.append(None)
                continue
            try:
                parts.append(operator.index(part))
            except TypeError:
                raise TypeError("slice indices must be integers or None or have an __index__ method") from None
        return "slice", slice(*parts)
    if isinstance(item, (bool, np.bool_)):
        return "bool0", bool(item)
    if _is_array_arg(item):
        if item.dtype.kind == "b":
            raise TypeError(DATA_DEPENDENT)
        if item.dtype.kind not in "iu":
            raise IndexError("arrays used as indices must be of integer (or boolean) type")
        return "array", item
    if isinstance(item, (list, tuple)):
        item = list_index(item)
    if isinstance(item, np.ndarray):
        if item.dtype.kind == "b":
            return ("bool0", bool(item)) if item.ndim == 0 else ("mask", item)
        if item.dtype.kind not in "iu":
            raise IndexError("arrays used as indices must be of integer (or boolean) type")
        return ("int", int(item)) if item.ndim == 0 else ("array", item)
    if hasattr(item, "__index__"):
        try:
            return "int", operator.index(item)
        except TypeError:
            pass
    raise IndexError(INVALID_INDEX)


def _bounds_error(value: int, dim: int, size: int) -> IndexError:
    return IndexError(f"index {value} is out of bounds for axis {dim} with size {size}")


def check_bounds(values: np.ndarray, dim: int, size: int) -> None:
    """NumPy's IndexError for the first value (in C order) outside ``[-size, size)``."""
    bad = (values < -size) | (values >= size)
    if bad.any():
        raise _bounds_error(int(values.reshape(-1)[np.argmax(bad.reshape(-1))]), dim, size)


@dataclass(frozen=True, slots=True)
class MaskArg:
    """A boolean mask known by its shape only (a distributed mask, before its values are gathered)."""

    shape: tuple[int, ...]

    @property
    def ndim(self) -> int:
        return len(self.shape)


def read_index(shape: Sequence[int], index: Any) -> list[tuple[str, Any, int]]:
    """``(kind, value, dim)`` of every index item, checked as NumPy checks them up to (not including) broadcasting.

    Kinds: ``"new"``, ``"ellipsis"``, ``"slice"`` (a slice of ints), ``"int"``,
    ``"bool0"``, ``"mask"`` (an ndarray or :class:`MaskArg`) and ``"array"`` (an
    integer ndarray or :class:`ArrayArg`); ``dim`` is the first input dim the
    item indexes.  Raises, in NumPy's order: the item types and a second
    ellipsis, too many indices, boolean shapes, then int bounds and zero slice
    steps item by item.
    """
    shape = tuple(shape)
    ndim = len(shape)
    kinds = []
    seen_ellipsis = False
    for item in index_items(index):
        kind, value = ("mask", item) if isinstance(item, MaskArg) else _classify(item)
        if kind == "ellipsis":
            if seen_ellipsis:
                raise IndexError("an index can only have a single ellipsis ('...')")
            seen_ellipsis = True
        kinds.append((kind, value))
    consumed = sum(1 if k in ("int", "slice", "array") else value.ndim if k == "mask" else 0 for k, value in kinds)
    if consumed > ndim:
        raise IndexError(f"too many indices for array: array is {ndim}-dimensional, but {consumed} were indexed")
    read = []
    dim = 0
    for kind, value in kinds:
        read.append((kind, value, dim))
        if kind == "ellipsis":
            dim += ndim - consumed
        elif kind == "mask":
            for i, (have, want) in enumerate(zip(value.shape, shape[dim:])):
                if have != want and have:  # NumPy lets a mask dim of size 0 stand for any size
                    raise IndexError(f"boolean index did not match indexed array along axis {dim + i}; size of "
                                     f"axis is {want} but size of corresponding boolean axis is {have}")
            dim += value.ndim
        elif kind in ("int", "slice", "array"):
            dim += 1
    for kind, value, dim in read:
        if kind == "int" and not -shape[dim] <= value < shape[dim]:
            raise _bounds_error(value, dim, shape[dim])
        if kind == "slice" and value.step == 0:
            raise ValueError("slice step cannot be zero")
    return read


def plan_index(shape: Sequence[int], index: Any) -> IndexPlan:
    """The :class:`IndexPlan` of ``array[index]`` for an array of ``shape`` (NumPy's errors when it is invalid).

    Index arrays may be ndarrays (their values are checked here) or
    :class:`ArrayArg` (integer arrays whose values come later).
    """
    shape = tuple(shape)
    ndim = len(shape)
    read = read_index(shape, index)
    advanced = any(k in ("array", "mask", "bool0") for k, _, _ in read)
    ellipsis_dims = ndim - sum(1 if k in ("int", "slice", "array") else v.ndim if k == "mask" else 0
                               for k, v, _ in read)
    entries: list[Entry] = []
    for item, (kind, value, dim) in enumerate(read):
        if kind == "new":
            entries.append(Entry("new", None, item))
        elif kind == "ellipsis":
            entries += [Entry("slice", d, item, 0, 1, shape[d]) for d in range(dim, dim + ellipsis_dims)]
        elif kind == "slice":
            start, stop, step = value.indices(shape[dim])
            entries.append(Entry("slice", dim, item, start, step, len(range(start, stop, step))))
        elif kind == "int":
            value %= shape[dim]
            entries.append(Entry("adv", dim, item, source=np.array(value, np.intp)) if advanced
                           else Entry("int", dim, item, value=value))
        elif kind == "bool0":
            entries.append(Entry("adv", None, item, source=np.zeros(int(value), np.intp)))
        elif kind == "mask":
            if isinstance(value, MaskArg):
                raise TypeError(DATA_DEPENDENT)
            entries += [Entry("adv", dim + i, item, source=nz) for i, nz in enumerate(np.nonzero(value))]
        else:
            entries.append(Entry("adv", dim, item, source=value))
    covered = {e.dim for e in entries if e.dim is not None}
    entries += [Entry("slice", d, len(read), 0, 1, shape[d]) for d in range(ndim) if d not in covered]
    adv = [e for e in entries if e.kind == "adv"]
    arrays = [e for e in adv if e.dim is None or _is_array_arg(e.source) or e.source.ndim > 0]
    try:
        b_shape = np.broadcast_shapes(*(e.source.shape for e in adv)) if adv else ()
    except ValueError:
        shapes = " ".join(_shape_text(e.source.shape) for e in arrays)
        raise IndexError(f"shape mismatch: indexing arrays could not be broadcast together with shapes {shapes} ")
    if adv and int(np.prod(b_shape)) > 0:
        for e in adv:
            if e.dim is not None and isinstance(e.source, np.ndarray) and e.source.ndim > 0:
                check_bounds(e.source, e.dim, shape[e.dim])
    y_entries = [e for e in entries if e.kind != "int"]
    y_shape = tuple(1 if e.kind == "new" or (e.kind == "adv" and e.dim is None)
                    else e.length if e.kind == "slice" else shape[e.dim]
                    for e in y_entries)
    adv_dims = tuple(i for i, e in enumerate(y_entries) if e.kind == "adv")
    items = sorted({e.item for e in adv})
    adjacent = bool(items) and items == list(range(items[0], items[0] + len(items)))
    b_pos = sum(1 for d in range(adv_dims[0]) if d not in adv_dims) if adjacent else 0
    rest = [y_shape[d] for d in range(len(y_shape)) if d not in adv_dims]
    out_shape = tuple(rest[:b_pos]) + tuple(b_shape) + tuple(rest[b_pos:])
    return IndexPlan(shape, tuple(entries), advanced, adjacent, y_shape, adv_dims, tuple(b_shape), b_pos, out_shape)


def _shape_text(shape: tuple[int, ...]) -> str:
    return "(" + ",".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"


# -- slices of blocks ------------------------------------------------------------------
def kept_range(start: int, step: int, length: int, offset: int, size: int) -> tuple[int, int]:
    """``(lo, hi)``: the positions ``k`` of a slice (``start + k * step``, ``0 <= k < length``) inside ``[offset, offset + size)``.

    They are consecutive; an empty range has ``lo == hi``.

    Example:
        >>> kept_range(1, 2, 4, 2, 4), kept_range(7, -2, 4, 2, 4)   # 1,3,5,7 and 7,5,3,1 inside [2, 6)
        ((1, 3), (1, 3))
    """
    if step > 0:
        lo = -((start - offset) // step)  # ceil((offset - start) / step)
        hi = -((start - offset - size) // step)
    else:
        s = -step
        lo = (start - offset - size) // s + 1
        hi = (start - offset) // s + 1
    lo, hi = min(max(lo, 0), length), min(max(hi, 0), length)
    return (lo, hi) if lo < hi else (lo, lo)


def local_slice(start: int, step: int, lo: int, hi: int, offset: int) -> slice:
    """The slice of a block starting at ``offset`` that gives positions ``lo..hi-1`` of a slice, in order.

    Example:
        >>> np.arange(2, 6)[local_slice(7, -2, 1, 3, 2)].tolist()   # positions 1, 2 of 7,5,3,1
        [5, 3]
    """
    if lo >= hi:
        return slice(0, 0)
    first = start + lo * step - offset
    stop = first + (hi - lo) * step
    return slice(first, stop if stop >= 0 else None, step)


# -- specs ---------------------------------------------------------------------------------
def basic_spec(spec: DTensorSpec, plan: IndexPlan) -> DTensorSpec:
    """The spec of ``y`` (the basic phase's result) from the input's: a sliced dim keeps its mesh dims, an int's are replicated.

    Example:
        >>> from dtensor_np import DeviceMesh
        >>> spec = DTensorSpec(DeviceMesh((2, 2)), (Shard(0), Shard(1)), TensorMeta((4, 6), "f8"))
        >>> str(basic_spec(spec, plan_index((4, 6), (None, slice(1, 3), 2))))
        'S(1)R'
    """
    placements: list[Placement] = []
    for p in spec.placements:
        if isinstance(p, Shard):
            y = plan.y_dim_of(p.dim)
            placements.append(Replicate() if y is None else Shard(y))
        else:
            placements.append(p)
    order = tuple((plan.y_dim_of(d), ms) for d, ms in spec.shard_order if plan.y_dim_of(d) is not None)  # type: ignore[union-attr]
    return DTensorSpec(spec.mesh, tuple(placements), TensorMeta(plan.y_shape, spec.dtype), tuple(sorted(order)))


def advanced_spec(y_spec: DTensorSpec, plan: IndexPlan) -> DTensorSpec:
    """The result's spec from ``y``'s: other dims keep their mesh dims; the mesh dims of the advanced dims shard the first dim of ``b_shape``.

    With no ``b_shape`` dims (0-d index arrays) those mesh dims become ``Replicate``.
    """
    placements: list[Placement] = []
    moved: list[int] = []
    for m, p in enumerate(y_spec.placements):
        if isinstance(p, Shard) and p.dim in plan.adv_dims:
            moved.append(m)
            placements.append(Shard(plan.b_pos) if plan.b_shape else Replicate())
        elif isinstance(p, Shard):
            placements.append(Shard(plan.out_dim_of(p.dim)))
        else:
            placements.append(p)
    order = [(plan.out_dim_of(d), ms) for d, ms in y_spec.shard_order if d not in plan.adv_dims]  # type: ignore[union-attr]
    if moved and plan.b_shape:
        order.append((plan.b_pos, tuple(moved)))
    return DTensorSpec(y_spec.mesh, tuple(placements), TensorMeta(plan.out_shape, y_spec.dtype), tuple(sorted(order)))


@dataclass(frozen=True, slots=True)
class BlockPart:
    """What one rank's block of the input gives of ``y`` (the basic phase's result).

    ``index`` picks it from the block (``None`` for new axes, the whole dim
    for advanced entries); ``ranges`` are the positions of ``y`` it holds, one
    ``(lo, hi)`` per ``y`` dim; ``owns`` is False when an int index lies outside
    the block (the block then gives nothing: ``index`` is a stand-in of the right shape).
    """

    index: tuple[Any, ...]
    ranges: tuple[tuple[int, int], ...]
    owns: bool

    @property
    def empty(self) -> bool:
        """True when the block gives no element of ``y``."""
        return not self.owns or any(lo >= hi for lo, hi in self.ranges)


def block_part(plan: IndexPlan, spec: DTensorSpec, rank: int) -> BlockPart:
    """The :class:`BlockPart` of ``rank``'s block of an array with ``spec`` under ``plan``.

    Example:
        >>> from dtensor_np import DeviceMesh
        >>> spec = DTensorSpec(DeviceMesh((2,)), (Shard(0),), TensorMeta((5, 3), "f8"))
        >>> block_part(plan_index((5, 3), (slice(None, None, -2), 1)), spec, 1)
        BlockPart(index=(slice(1, None, -2), 1), ranges=((0, 1),), owns=True)
    """
    shape, offset = spec.local_block(rank)
    index: list[Any] = []
    ranges: list[tuple[int, int]] = []
    owns = True
    for e in plan.entries:
        if e.kind == "new":
            index.append(None)
            ranges.append((0, 1))
        elif e.kind == "adv":
            if e.dim is None:
                index.append(None)
                ranges.append((0, 1))
            else:
                index.append(slice(None))
                ranges.append((offset[e.dim], offset[e.dim] + shape[e.dim]))
        elif e.kind == "int":
            inside = offset[e.dim] <= e.value < offset[e.dim] + shape[e.dim]
            owns = owns and inside
            index.append(e.value - offset[e.dim] if inside else 0)
        else:
            lo, hi = kept_range(e.start, e.step, e.length, offset[e.dim], shape[e.dim])
            index.append(local_slice(e.start, e.step, lo, hi, offset[e.dim]))
            ranges.append((lo, hi))
    return BlockPart(tuple(index), tuple(ranges), owns)
