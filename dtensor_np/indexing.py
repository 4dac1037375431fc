"""``x[index]``, ``x.at[index].set(v)`` and ``x[index] = v`` on DTensors: NumPy's indexing, sharded dims included.

Reading (``x[index]``) goes through the ``operator.getitem`` rule (see
:mod:`dtensor_np.propagation.indexing` for the collectives each kind of index
issues), updates through the ``operator.setitem`` rule
(:mod:`dtensor_np.propagation.updates`), like every other operation.  Results
are new arrays on every rank, never views of ``x``'s shards.  Before the rules
this module handles what only exists eagerly:

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

import operator
from typing import Any, Iterator, Optional

import numpy as np

from collectives import array_module
from collectives.spmd import note_local_call

from .arrays import check_array
from .dispatch import run_rule
from .fast_path import FAST_PATH, call_key, key_fingerprint
from .errors import ShardingError
from .placements import Replicate, Shard
from .propagation.index_plan import ArrayArg, MaskArg, index_items, list_index, plan_index, read_index
from .propagation.indexing import GETITEM
from .propagation.row_moves import move_ranges
from .propagation.updates import UPDATE, UPDATES, fit_value_shape, lined_mask_spec
from .runtime import backend_for
from .sharded import is_sharded
from .spec import DTensorSpec, TensorMeta

__all__ = ["getitem", "iterate", "elements", "flat_positions", "IndexUpdater", "IndexUpdate", "update", "UPDATES",
           "GETITEM", "UPDATE"]


# -- the index as this process sees it ----------------------------------------------------------------
def _own_items(x: Any, index: Any) -> list[Any]:
    """The index items, every DTensor checked to live on ``x``'s mesh and 0-d ones replaced by their values."""
    items = list(index_items(index))
    for i, item in enumerate(items):
        if type(item) is range:  # a sequence of ints, as NumPy reads it: an integer array (a copy, never a view)
            items[i] = np.arange(item.start, item.stop, item.step, dtype=np.intp)
        elif is_sharded(item):
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
    return x._result_class({r: value for r in backend_for(mesh).ranks}, spec)


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


# -- reading ----------------------------------------------------------------------------------------
def getitem(x: Any, index: Any, fast_key: Optional[tuple] = None) -> Any:
    """``x[index]`` (see the module docstring); ``fast_key``: keep the call on the dispatch fast path under it.

    A key is kept only for an index with no DTensor in it: a 0-d DTensor is replaced by its value here, which the
    key (its spec) does not name.
    """
    if fast_key is not None and any(is_sharded(item) for item in index_items(index)):
        fast_key = _unkeyed(fast_key)
    items = _own_items(x, index)
    read_index(x.shape, _stand_ins(items))  # NumPy's errors, before anything moves
    masks = _masks(items)
    a = _mask_dim(x, items, masks)
    if a is not None and not any(isinstance(p, Shard) and a < p.dim < a + items[masks[0]].ndim
                                 for p in x.placements):
        return _mask_getitem(x, items[masks[0]], a)
    items = _gather_masks(x, items)
    plan_index(x.shape, _stand_ins(items))  # the rest of NumPy's errors (index values included)
    return run_rule(GETITEM, (x, _arrays_replicated(x, items)), {}, fast_key)


def _unkeyed(fast_key: Optional[tuple]) -> None:
    """No fast-path key for a call that keeps no entry: its key still goes into the next SPMD agreement, as
    :func:`~dtensor_np.dispatch.run_rule` would fold it (``collectives.spmd.note_local_call``)."""
    if fast_key is not None:
        note_local_call(key_fingerprint(fast_key))
    return None


def _arrays_replicated(x: Any, items: list[Any]) -> tuple[Any, ...]:
    """The index with its NumPy arrays and lists as replicated DTensors (no communication), a NumPy boolean mask
    as its ``nonzero()`` arrays."""
    ready: list[Any] = []
    for item in items:
        if isinstance(item, (list, tuple)):
            item = list_index(item)
        if isinstance(item, np.ndarray) and item.ndim > 0:
            arrays = np.nonzero(item) if item.dtype.kind == "b" else (item,)
            ready += [_replicated(x, a) for a in arrays]
        else:
            ready.append(item)
    return tuple(ready)


def _mask_getitem(x: Any, mask: Any, a: int) -> Any:
    """``x[..., mask, ...]`` with the mask lined up with ``x``'s blocks (see the module docstring)."""
    k = mask.ndim
    spec = x.spec  # a Partial passes through: selection is linear
    lined = lined_mask_spec(spec, mask.spec, a)
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
    return x._result_class(picked, out_spec, namespace=x.namespace)


def iterate(x: Any) -> Iterator[Any]:
    """``for row in x``: ``x[0]``, ``x[1]``, ... (each one getitem); a TypeError for a 0-d array, as NumPy."""
    if not x.shape:
        raise TypeError("iteration over a 0-d array")
    return (getitem(x, i) for i in range(x.shape[0]))


ITER_BLOCK_BYTES = 1 << 20
"""The bytes of values :func:`elements` reads at a time."""


def elements(x: Any, flatten: bool = False) -> Iterator[Any]:
    """The elements of a 1-d DTensor (of ``np.ravel(x)`` with ``flatten``), in order, as replicated 0-d DTensors.

    They are read a block of :data:`ITER_BLOCK_BYTES` at a time: the block's rows gathered on every rank (no
    communication for a replicated array), then its elements handed out without any.  A write to ``x`` (through
    any view of its base) while iterating is seen from the next element on, as in NumPy: the block is read again.

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.arange(5.0), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> with dt.comm_counter() as c:
        ...     values = [float(v) for v in elements(x)]
        >>> values, c.total
        ([0.0, 1.0, 2.0, 3.0, 4.0], 1)
    """
    n = x.size if flatten else x.shape[0]
    per_block = max(1, ITER_BLOCK_BYTES // max(x.dtype.itemsize, 1))
    mesh = x.mesh
    ranks = backend_for(mesh).ranks
    spec = DTensorSpec(mesh, (Replicate(),) * mesh.ndim, TensorMeta((), x.dtype))
    block: Any = None
    start = seen = None
    i = 0
    while i < n:
        current = x._shards  # a view works out its value again here after a write to its base
        if block is None or current is not seen or i >= start + block.shape[0]:
            line = np.ravel(x) if flatten else x
            stop = min(n, i + per_block)
            block = (line if i == 0 and stop == n else getitem(line, slice(i, stop))).full_tensor()
            start, seen = i, current
        value = block[i - start:i - start + 1].reshape(())
        yield x._result_class({r: value for r in ranks}, spec, namespace=x.namespace)
        i += 1


def flat_positions(size: int, index: Any) -> Any:
    """The positions ``x.flat[index]`` selects in the C order of an array of ``size`` elements, with NumPy's errors:
    None for every one in order (``...``, ``:``, ``()``), an int for one element, else an int array of the shape of
    the result.  A DTensor index is gathered first (its bytes only).

    Example:
        >>> flat_positions(6, -1), flat_positions(6, slice(None)), flat_positions(6, [[1, -1]]).tolist()
        (5, None, [[1, 5]])
    """
    if is_sharded(index):
        index = index.full_tensor()
        index = index.get() if hasattr(index, "get") and not isinstance(index, np.ndarray) else index
    np.broadcast_to(np.zeros((), np.int8), (size,)).flat[index]  # NumPy's errors (a zero-stride stand-in)
    if type(index) is tuple:
        if not index:
            return None
        (index,) = index
    if index is Ellipsis:
        return None
    if isinstance(index, slice):
        start, stop, step = index.indices(size)
        if (start, step) == (0, 1) and stop == size:
            return None
        return np.arange(start, stop, step, dtype=np.intp)
    if isinstance(index, (bool, np.bool_)):  # NumPy: True selects element 0, False nothing
        return 0 if index else np.zeros(0, np.intp)
    if isinstance(index, (float, np.floating)):  # accepted by NumPy 2.4, with a DeprecationWarning (given above)
        index = int(index)
    if not isinstance(index, (list, np.ndarray)) and hasattr(index, "__index__"):
        i = operator.index(index)
        return i + size if i < 0 else i
    array = np.asarray(index)
    if array.dtype.kind == "b":
        return np.flatnonzero(array)
    array = array.astype(np.intp)
    return np.where(array < 0, array + size, array)


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
        """``x[index]`` (a new array)."""
        return getitem(self._x, self._index)

    def _update(self, value: Any, op: str) -> Any:
        """The update, a repeated call served by the dispatch fast path (as ``x[index] = value``)."""
        args = (self._x, self._index, value, op)
        key = call_key(UPDATE, args)
        entry = FAST_PATH.get(key) if key is not None else None
        return entry(args) if entry is not None else update(self._x, self._index, value, op, key)

    def set(self, value: Any) -> Any:
        """``x`` with ``x[index] = value`` (the last of duplicate indices wins)."""
        return self._update(value, "set")

    def add(self, value: Any) -> Any:
        """``x`` with ``value`` added at ``index`` (``np.add.at``: duplicates accumulate)."""
        return self._update(value, "add")

    def multiply(self, value: Any) -> Any:
        """``x`` with ``index`` multiplied by ``value`` (``np.multiply.at``)."""
        return self._update(value, "multiply")

    def min(self, value: Any) -> Any:
        """``x`` with ``index`` replaced by its minimum with ``value`` (``np.minimum.at``)."""
        return self._update(value, "min")

    def max(self, value: Any) -> Any:
        """``x`` with ``index`` replaced by its maximum with ``value`` (``np.maximum.at``)."""
        return self._update(value, "max")


def _check_value(x: Any, value: Any, op: str) -> Any:
    """The value as the update rule takes it (a Python or NumPy scalar, a NumPy array or a DTensor), after NumPy's own
    casting checks, on every rank before anything moves."""
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

    What exists only eagerly is settled here, NumPy's errors first; then the
    update rule runs (:mod:`dtensor_np.propagation.updates`): NumPy index
    arrays and array values join the call as replicated arguments (no
    communication), DTensor index arrays are gathered, a DTensor mask lined up
    with ``x`` stays distributed when the value has no dim along its count,
    any other mask is gathered.  With ``fast_key`` (the caller's
    :func:`~dtensor_np.fast_path.call_key` of ``(UPDATE, (x, index, value, op))``)
    the call keeps its fast-path entry.
    """
    if op not in UPDATES:
        raise ValueError(f"expected an update among {sorted(UPDATES)}, got {op!r}")
    if fast_key is not None and any(is_sharded(item) for item in index_items(index)):
        fast_key = _unkeyed(fast_key)  # a DTensor in the index is replaced by its value or gathered: the key does not name it
    items = _own_items(x, index)
    kinds = [kind for kind, _, _ in read_index(x.shape, _stand_ins(items))]  # index errors first, as NumPy's
    given = value
    if (op == "set" and isinstance(value, (list, tuple, str)) and kinds.count("int") == x.ndim
            and set(kinds) <= {"int", "ellipsis"}):  # one element set to a sequence: NumPy's own error or cast
        element = np.zeros(1, x.dtype)
        element[0] = value  # a TypeError for ints, a ValueError for floats, the truth value for bools
        value = element[0]
    value = _check_value(x, value, op)
    if value is not given:  # a 0-d DTensor's value, an array made of a list: the key does not name what runs
        fast_key = _unkeyed(fast_key)
    masks = _masks(items)
    a = _mask_dim(x, items, masks)
    if a is None or not _count_free(value, x.shape, a, items[masks[0]].ndim):
        items = _gather_masks(x, items)
        items = [item.full_tensor() if is_sharded(item) else item for item in items]
        try:
            plan = plan_index(x.shape, tuple(items))  # the rest of NumPy's errors (index values included)
        except IndexError:  # an index value out of bounds: NumPy first checks the value against the result's shape
            if not is_sharded(value) and _ndim(value):
                shaped = plan_index(x.shape, _without_values(items))
                fit_value_shape(value.shape, shaped.out_shape, shaped.advanced)
            raise
        if not is_sharded(value) and _ndim(value):
            fit_value_shape(value.shape, plan.out_shape, plan.advanced)
        items = list(_arrays_replicated(x, items))
    if isinstance(value, np.ndarray):
        value = _replicated(x, value)
    return run_rule(UPDATE, (x, tuple(items), value, op), {}, fast_key)


def _without_values(items: list[Any]) -> tuple[Any, ...]:
    """The index items with integer index arrays (lists too) as :class:`ArrayArg`: the shape of the result without
    the arrays' values."""
    out = []
    for i, item in enumerate(items):
        if isinstance(item, (list, np.ndarray)):
            array = np.asarray(item)
            if array.dtype.kind in "iu":
                item = ArrayArg(i, array.shape, array.dtype)
        out.append(item)
    return tuple(out)


def _ndim(value: Any) -> int:
    """The ndim of a value as :func:`_check_value` leaves it (a scalar, an array or a DTensor)."""
    return len(getattr(value, "shape", ()))


def _count_free(value: Any, shape: tuple[int, ...], a: int, k: int) -> bool:
    """True when ``value`` broadcasts into ``x[mask]`` whatever the mask's count (it has no count dim of size > 1)."""
    if _ndim(value) == 0:
        return True
    try:
        fit_value_shape(tuple(value.shape), shape[:a] + (1,) + shape[a + k:], True)
    except ValueError:
        return False
    return True
