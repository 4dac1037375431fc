"""NumPy's view semantics over immutable buffers: a view follows its base, and a write through it rebinds the base.

Where NumPy returns a view (basic indexing, ``.T``, ``transpose``,
``swapaxes``, ``moveaxis``, ``mT``, ``reshape``/``ravel`` when NumPy does not
copy, ``squeeze``, ``expand_dims``, ``flip``, ``real``/``imag``, the rows of
``for row in x``, the pieces of ``split``; read-only: ``diagonal``,
``broadcast_to``), dtensor_np returns a :class:`DTensorView`: a handle on its
*base* (the owning array, ``x.base``, as in NumPy) and the chain of
:class:`Step` that takes the base to the view.  No buffer is written in place:

* **Reading** a view gives the chain applied to the base's current value.  A
  view remembers the value it was worked out from; when the base has been
  written since (a new value: every write makes one), the view works itself
  out again the next time it is read (the chain's ops, with their
  communication), so a view taken before a write sees the write, as in NumPy.
* **Writing** through a view (``v[i] = ...``, ``v += ...``, ``out=v``,
  ``np.copyto(v, ...)``, ``v.fill(...)``, ``v.sort()``) rebinds the base to
  its updated value: where the write's index composes with the chain (basic
  indexes of basic indexes; a scalar through transposes and ``reshape``) it
  is one update of just the written elements on the ranks that own them
  (``base.at[composed].set(value)``); otherwise the view's new value is
  written back along the chain (``parent.at[index].set(view)`` for an index,
  the inverse permutation for a transpose, a reshape back).  Every other live
  view of the base sees the write when it is next read.
* Writing to a read-only view raises NumPy's ``ValueError``.

Owners whose NumPy twin is not C-contiguous (made in ``order="K"`` from a
transposed view: ``np.exp(a.T)``, ``np.copy(a.T)``) are :class:`StridedDTensor`,
so that ``reshape``/``ravel`` view or copy exactly as NumPy does
(:mod:`dtensor_np.strides`).  Plain ``DTensor`` is C-contiguous; only it takes
the dispatch fast path, views and strided arrays the rule path.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> a = dt.distribute_tensor(np.zeros((4, 3)), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> v = a[1:3]
    >>> v[0, 1] = 7.0                 # one update of a, at (1, 1)
    >>> a[2] = 5.0                    # v sees it when read
    >>> v.base is a, a.full_tensor()[1].tolist(), v.full_tensor().tolist()
    (True, [0.0, 7.0, 0.0], [[0.0, 7.0, 0.0], [5.0, 5.0, 5.0]])
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Optional, Sequence

import numpy as np

from collectives import BoundedCache, static_key

from .dtensor import DTensor, compute, raw_getitem, register_views
from .indexing import update
from .propagation.index_plan import index_items, plan_index
from .sharded import is_sharded
from .strides import Strides, advanced_strides, contiguous_in, k_order, normal, proxy, reshape_view_strides, strides_of

__all__ = [
    "DTensorView",
    "StridedDTensor",
    "Step",
    "IndexStep",
    "TransposeStep",
    "ReshapeStep",
    "PartStep",
    "ReadOnlyStep",
    "twin_strides",
    "memory_twins",
    "basic_view_index",
    "compose_basic",
    "READ_ONLY",
]

READ_ONLY = "assignment destination is read-only"
"""NumPy's words for a write to a read-only array."""


# -- steps ----------------------------------------------------------------------------------------------
class Step:
    """One view op of a chain: ``apply`` it to a value, work out the twin's strides, write a value back through it."""

    __slots__ = ()
    readonly = False

    def apply(self, value: DTensor) -> DTensor:
        """The view's value from its parent's (a new owner: the op through the dispatcher, never a view)."""
        raise NotImplementedError

    def twin(self, parent: np.ndarray) -> np.ndarray:
        """The op on the parent's stride proxy (:func:`dtensor_np.strides.proxy`): NumPy's strides for the view."""
        raise NotImplementedError

    def write_back(self, parent: DTensor, child: DTensor) -> DTensor:
        """The parent's value with this view's elements replaced by ``child``'s (the whole view written)."""
        raise NotImplementedError

    def map_write(self, parent_shape: tuple[int, ...], index: Any, scalar: bool) -> Optional[Any]:
        """The index on the parent that a write at ``index`` of the view writes (``scalar``: its value is a scalar,
        so a permutation of the dims needs no transpose of it), or None where there is none."""
        return None


class IndexStep(Step):
    """A basic index (ints, slices, ``None``, ``...``): ``x[index]``."""

    __slots__ = ("index",)

    def __init__(self, index: Any) -> None:
        self.index = index

    def apply(self, value: DTensor) -> DTensor:
        return raw_getitem(value, self.index)

    def twin(self, parent: np.ndarray) -> np.ndarray:
        return parent[self.index]

    def write_back(self, parent: DTensor, child: DTensor) -> DTensor:
        return update(parent, self.index, child, "set")

    def map_write(self, parent_shape: tuple[int, ...], index: Any, scalar: bool) -> Optional[Any]:
        key = (parent_shape, static_key(self.index), static_key(index))
        if key[1] is None or key[2] is None:
            return compose_basic(parent_shape, self.index, index)
        found = _COMPOSED.get(key, _MISSING)
        if found is _MISSING:
            found = compose_basic(parent_shape, self.index, index)
            _COMPOSED.put(key, found)
        return found

    def __repr__(self) -> str:
        return f"IndexStep({self.index!r})"


_COMPOSED = BoundedCache(4096, name="dtensor_np.composed_view_indexes")
_MISSING = object()


class TransposeStep(Step):
    """A permutation of the dims: ``np.transpose(x, axes)`` (also ``.T``, ``swapaxes``, ``moveaxis``, ``mT``)."""

    __slots__ = ("axes",)

    def __init__(self, axes: Sequence[int]) -> None:
        self.axes = tuple(axes)

    def apply(self, value: DTensor) -> DTensor:
        return compute(np.transpose, (value, self.axes))

    def twin(self, parent: np.ndarray) -> np.ndarray:
        return np.transpose(parent, self.axes)

    def write_back(self, parent: DTensor, child: DTensor) -> DTensor:
        return compute(np.transpose, (child, tuple(np.argsort(self.axes))))

    def map_write(self, parent_shape: tuple[int, ...], index: Any, scalar: bool) -> Optional[Any]:
        if not scalar:
            return None
        items = _per_dim(tuple(parent_shape[a] for a in self.axes), index)
        if items is None:
            return None
        out: list[Any] = [None] * len(self.axes)
        for p, a in enumerate(self.axes):
            out[a] = items[p]
        return tuple(out)

    def __repr__(self) -> str:
        return f"TransposeStep({self.axes})"


class ReshapeStep(Step):
    """``x.reshape(shape, order=order)`` where NumPy views it (also ``ravel``, ``squeeze``, ``expand_dims``)."""

    __slots__ = ("shape", "order")

    def __init__(self, shape: Sequence[int], order: str = "C") -> None:
        self.shape = tuple(shape)
        self.order = order

    def apply(self, value: DTensor) -> DTensor:
        if self.order == "C":
            return compute(np.reshape, (value, self.shape))
        return compute(np.transpose, (compute(np.reshape, (compute(np.transpose, (value,)), self.shape[::-1])),))

    def twin(self, parent: np.ndarray) -> np.ndarray:
        return np.reshape(parent, self.shape, order=self.order, copy=False)

    def write_back(self, parent: DTensor, child: DTensor) -> DTensor:
        return ReshapeStep(parent.shape, self.order).apply(child)

    def map_write(self, parent_shape: tuple[int, ...], index: Any, scalar: bool) -> Optional[Any]:
        items = index_items(index)
        if len(items) != len(self.shape) or not all(_is_int(i) for i in items):
            return None
        try:
            flat = np.ravel_multi_index(tuple(operator.index(i) % max(n, 1) if -n <= operator.index(i) < n
                                              else operator.index(i) for i, n in zip(items, self.shape)),
                                        self.shape, order=self.order)
        except ValueError:
            return None  # out of bounds: the general path raises NumPy's IndexError
        return tuple(int(i) for i in np.unravel_index(flat, parent_shape, order=self.order))

    def __repr__(self) -> str:
        return f"ReshapeStep({self.shape}, order={self.order!r})"


class PartStep(Step):
    """``x.real`` or ``x.imag`` of a complex array (``part`` is ``"real"`` or ``"imag"``)."""

    __slots__ = ("part",)

    def __init__(self, part: str) -> None:
        self.part = part

    def apply(self, value: DTensor) -> DTensor:
        return compute(np.real if self.part == "real" else np.imag, (value,))

    def twin(self, parent: np.ndarray) -> np.ndarray:
        return getattr(parent, self.part)

    def write_back(self, parent: DTensor, child: DTensor) -> DTensor:
        """The parent with this part replaced: ``child + 1j * imag`` or ``real + 1j * child``, in its dtype."""
        other = compute(np.imag if self.part == "real" else np.real, (parent,))
        real, imag = (child, other) if self.part == "real" else (other, child)
        return compute(np.add, (real, compute(np.multiply, (imag, 1j))), {"dtype": parent.dtype})

    def __repr__(self) -> str:
        return f"PartStep({self.part!r})"


class ReadOnlyStep(Step):
    """A read-only view (``diagonal``, ``broadcast_to``): ``fn(x, *args, **kwargs)``; writing raises NumPy's error.

    ``value`` computes it on DTensors where ``fn`` itself has no rule (``np.diagonal`` is ``np.linalg.diagonal``
    of the two axes moved last).
    """

    __slots__ = ("fn", "args", "kwargs", "value")
    readonly = True

    def __init__(self, fn: Callable[..., Any], args: tuple = (), kwargs: Optional[dict] = None,
                 value: Optional[Callable[..., Any]] = None) -> None:
        self.fn = fn
        self.args = args
        self.kwargs = kwargs or {}
        self.value = value

    def apply(self, value: DTensor) -> DTensor:
        if self.value is not None:
            return self.value(value, *self.args, **self.kwargs)
        return compute(self.fn, (value, *self.args), self.kwargs)

    def twin(self, parent: np.ndarray) -> np.ndarray:
        if self.fn is np.einsum:  # (a diagonal by einsum: its strides are of no use, it is read-only)
            return parent
        return self.fn(parent, *self.args, **self.kwargs)

    def write_back(self, parent: DTensor, child: DTensor) -> DTensor:
        raise ValueError(READ_ONLY)


# -- index helpers ---------------------------------------------------------------------------------------
def _is_int(item: Any) -> bool:
    return not isinstance(item, (bool, np.bool_)) and hasattr(item, "__index__") and not is_sharded(item)


_BASIC = (int, slice, type(None), type(Ellipsis))


def basic_view_index(index: Any, ndim: int) -> bool:
    """Whether NumPy returns a view for ``x[index]`` on an array of ``ndim`` dims: a basic index (ints, slices,
    ``None``, ``...``) that is not an int for every dim (that is a scalar, a copy).

    Example:
        >>> basic_view_index((0, slice(None)), 2), basic_view_index((0, 1), 2), basic_view_index([0, 1], 2)
        (True, False, False)
    """
    c = index.__class__
    if c is int or c is np.intp or c is np.int64:
        return ndim > 1
    if c is slice or index is Ellipsis or index is None:
        return True
    if c is not tuple:
        return False
    ints = 0
    for item in index:
        ic = item.__class__
        if ic is int or (ic is not bool and ic is not np.bool_ and isinstance(item, np.integer)):
            ints += 1
        elif ic not in _BASIC:
            return False
    return ints < ndim or Ellipsis in index or any(item is None for item in index)


def _slice(start: int, step: int, length: int) -> slice:
    """The slice that takes ``length`` elements from ``start`` by ``step``."""
    if length == 0:
        return slice(start, start, step)
    stop = start + step * length
    return slice(start, stop if stop >= 0 else None, step)


def compose_basic(shape: tuple[int, ...], first: Any, second: Any) -> Optional[tuple[Any, ...]]:
    """The basic index on an array of ``shape`` that ``x[first][second]`` selects, or None where there is none.

    Example:
        >>> compose_basic((10, 4), (slice(2, 9, 2),), (slice(None, None, -1), 1))
        (slice(8, 0, -2), 1)
        >>> compose_basic((10, 4), (None, 3), (0, slice(1, 3)))
        (3, slice(1, 3, 1))
    """
    try:
        p1 = plan_index(shape, first)
        p2 = plan_index(p1.out_shape, second)
    except (IndexError, TypeError, ValueError):
        return None  # the general path raises what NumPy raises
    if p1.advanced or p2.advanced:
        return None
    later = iter(p2.entries)
    out: list[Any] = []
    v = 0
    for e in p1.entries:
        if e.kind == "int":
            out.append(e.value)
            continue
        for f in later:  # p2's new axes before the entry of view dim v, then that entry
            if f.kind == "new":
                out.append(None)
                continue
            break
        else:  # pragma: no cover - every view dim has an entry
            return None
        if f.dim != v:  # pragma: no cover - entries come in dim order
            return None
        v += 1
        if e.kind == "slice":
            if f.kind == "int":
                out.append(e.start + f.value * e.step)
            else:
                out.append(_slice(e.start + f.start * e.step, e.step * f.step, f.length))
        elif f.kind == "slice":  # a new axis of p1, sliced
            if f.length != 1:
                return None
            out.append(None)
        # a new axis of p1 indexed by an int: gone
    out += [None for f in later if f.kind == "new"]
    return tuple(out)


def _per_dim(shape: tuple[int, ...], index: Any) -> Optional[list[Any]]:
    """A basic index without new axes as one int or slice per dim of ``shape``, or None."""
    try:
        plan = plan_index(shape, index)
    except (IndexError, TypeError, ValueError):
        return None
    if plan.advanced or any(e.kind == "new" for e in plan.entries):
        return None
    return [e.value if e.kind == "int" else _slice(e.start, e.step, e.length) for e in plan.entries]


# -- views -----------------------------------------------------------------------------------------------
def twin_strides(x: Any) -> Strides:
    """The strides of ``x``'s NumPy twin (None: C-contiguous); see :mod:`dtensor_np.strides`."""
    return getattr(x, "_twin", None)


def memory_twins(a: Any, b: Any) -> Optional[tuple[np.ndarray, np.ndarray]]:
    """NumPy twins of two views of one owner, laid out over one buffer (each view's chain applied to the owner's
    twin), so that ``np.shares_memory`` and ``np.may_share_memory`` of the twins answer for the DTensors; None
    when they have different owners or one is not a DTensor (then they share no memory).  Reads no data.

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> a = dt.distribute_tensor(np.zeros((4, 3)), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> top, bottom = memory_twins(a[:2], a[2:])
        >>> np.shares_memory(top, bottom), np.shares_memory(*memory_twins(a[:2], a[1:3, ::2]))
        (False, True)
    """
    if not (isinstance(a, DTensor) and isinstance(b, DTensor)):
        return None
    owner = a._base if isinstance(a, DTensorView) else a
    if owner is not (b._base if isinstance(b, DTensorView) else b):
        return None
    root = proxy(owner.shape, twin_strides(owner), owner.dtype)
    twins = []
    for x in (a, b):
        twin = root
        for step in getattr(x, "_chain", ()):
            twin = step.twin(twin)
        twins.append(twin)
    return twins[0], twins[1]


_set_shards = DTensor._shards.__set__  # type: ignore[attr-defined]
_set_spec = DTensor._spec.__set__  # type: ignore[attr-defined]
_get_shards = DTensor._shards.__get__  # type: ignore[attr-defined]
_get_spec = DTensor._spec.__get__  # type: ignore[attr-defined]
_set_namespace = DTensor._namespace.__set__  # type: ignore[attr-defined]
_set = object.__setattr__  # a view's own slots (DTensor refuses attribute assignment)


class StridedDTensor(DTensor):
    """An owner whose NumPy twin is not C-contiguous (NumPy's ``order="K"`` after a transpose): its strides decide
    whether a ``reshape`` of it is a view.  It behaves as a DTensor in every other way.

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> a = dt.distribute_tensor(np.ones((2, 3)), dt.DeviceMesh((1,)), [dt.Replicate()])
        >>> b = np.exp(a.T)
        >>> type(b).__name__, twin_strides(b), np.exp(np.ones((2, 3)).T).strides
        ('StridedDTensor', (8, 24), (8, 24))
    """

    __slots__ = ("_twin",)

    @classmethod
    def of(cls, value: DTensor, twin: Strides) -> DTensor:
        """``value`` with a twin of ``twin`` strides (``value`` itself when they are C-contiguous)."""
        if twin is None:
            return value
        out = object.__new__(cls)
        _set_shards(out, value._shards)
        _set_spec(out, value._spec)
        _set_namespace(out, value._namespace)
        _set(out, "_twin", twin)
        return out


class DTensorView(DTensor):
    """A view of ``base`` by ``chain``: read, it is the chain applied to the base's current value; written, the base
    is rebound (see the module docstring).

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> a = dt.distribute_tensor(np.arange(6.0).reshape(2, 3), dt.DeviceMesh((2,)), [dt.Shard(1)])
        >>> t = a.T
        >>> t *= 2
        >>> type(t).__name__, a.full_tensor().tolist()
        ('DTensorView', [[0.0, 2.0, 4.0], [6.0, 8.0, 10.0]])
    """

    __slots__ = ("_base", "_chain", "_seen", "_twin_cache")

    @classmethod
    def over(cls, base: DTensor, chain: tuple[Step, ...], value: DTensor) -> "DTensorView":
        """The view of ``base`` by ``chain`` whose current value is ``value`` (worked out from the base now)."""
        view = _new(cls)
        _set_shards(view, _get_shards(value) if value.__class__ is DTensor else value._shards)
        _set_spec(view, _get_spec(value) if value.__class__ is DTensor else value._spec)
        _set_namespace(view, value._namespace)
        _SET_BASE(view, base)
        _SET_CHAIN(view, chain)
        _SET_SEEN(view, _get_shards(base))
        _SET_TWIN(view, False)
        return view

    # the value, worked out again when the base was written since
    def _fresh(self) -> None:
        base = self._base
        if _get_shards(base) is self._seen:
            return
        value: DTensor = base
        for step in self._chain:
            value = step.apply(value)
        _set_shards(self, value._shards)
        _set_spec(self, value._spec)
        _set(self, "_seen", _get_shards(base))

    @property  # type: ignore[override]
    def _shards(self) -> Any:
        self._fresh()
        return _get_shards(self)

    @property  # type: ignore[override]
    def _spec(self) -> Any:
        self._fresh()
        return _get_spec(self)

    @property
    def base(self) -> DTensor:
        """The array that owns the data (NumPy's ``base``)."""
        return self._base

    @property
    def _twin(self) -> Strides:
        """NumPy's strides for this view: the chain applied to the base twin's stride proxy."""
        if self._twin_cache is False:
            base = self._base
            twin = proxy(base.shape, twin_strides(base), base.dtype)
            for step in self._chain:
                twin = step.twin(twin)
            _set(self, "_twin_cache", strides_of(twin))
        return self._twin_cache

    @property
    def readonly(self) -> bool:
        return any(step.readonly for step in self._chain)

    # writes
    def _rebind(self, value: DTensor) -> "DTensorView":
        """The whole view written with ``value`` (``v += 1``, ``out=v``, ``np.copyto(v, ...)``): the base rebound."""
        if self.readonly:
            raise ValueError(READ_ONLY)
        self._write_back(value)
        return self

    def __setitem__(self, index: Any, value: Any) -> None:
        if self.readonly:
            raise ValueError(READ_ONLY)
        scalar = isinstance(value, (bool, int, float, complex, np.generic)) or (
            isinstance(value, np.ndarray) and value.ndim == 0)
        composed = index
        for step, parent_shape in zip(reversed(self._chain), reversed(self._parent_shapes())):
            composed = step.map_write(parent_shape, composed, scalar)
            if composed is None:
                break
        base = self._base
        if composed is not None:
            base[composed] = value  # one update of the written elements (the base's own fast path)
            return
        self._write_back(update(_owner(self), index, value, "set"))

    def _parent_shapes(self) -> list[tuple[int, ...]]:
        """The shape of each step's input along the chain, from the base's (the steps on a stride proxy)."""
        if len(self._chain) == 1:
            return [self._base.shape]
        shapes = []
        twin = proxy(self._base.shape, None, self._base.dtype)
        for step in self._chain:
            shapes.append(tuple(twin.shape))
            twin = step.twin(twin)
        return shapes

    def _write_back(self, value: DTensor) -> None:
        """The base rebound with this view's elements replaced by ``value``'s (broadcast and cast as NumPy does)."""
        if is_sharded(value) and value.shape == self.shape and value.dtype == self.dtype:
            new = _owner(value)
        else:
            new = update(_owner(self), Ellipsis, value, "set")
        parents: list[DTensor] = [_owner(self._base)]
        for step in self._chain[:-1]:
            parents.append(step.apply(parents[-1]))
        for step, parent in zip(reversed(self._chain), reversed(parents)):
            new = step.write_back(parent, new)
        self._base._rebind(new)


_new = object.__new__
_SET_BASE = DTensorView._base.__set__  # type: ignore[attr-defined]  # the view's own slots, set fast
_SET_CHAIN = DTensorView._chain.__set__  # type: ignore[attr-defined]
_SET_SEEN = DTensorView._seen.__set__  # type: ignore[attr-defined]
_SET_TWIN = DTensorView._twin_cache.__set__  # type: ignore[attr-defined]


def _owner(x: DTensor) -> DTensor:
    """``x``'s current value as a plain DTensor (a view or strided array's shards and spec, no copy)."""
    if x.__class__ is DTensor:
        return x
    out = object.__new__(DTensor)
    _set_shards(out, x._shards)
    _set_spec(out, x._spec)
    _set_namespace(out, x._namespace)
    return out


# -- making views (called by DTensor's methods and NumPy protocols) --------------------------------------
def view_of(x: DTensor, step: Step, value: DTensor) -> DTensorView:
    """``value`` (the result of ``step`` on ``x``) as a view of ``x``'s base."""
    if x.__class__ is DTensorView:
        return DTensorView.over(x._base, x._chain + (step,), value)
    return DTensorView.over(x, (step,), value)


def _reshape_step(x: DTensor, shape: tuple[int, ...], order: str) -> Optional[ReshapeStep]:
    """A view step for ``x.reshape(shape, order=order)`` where NumPy views it, else None."""
    twin = twin_strides(x)
    if not (twin is None and order == "C") and reshape_view_strides(x.shape, twin, x.dtype, shape, order) is None:
        return None  # (a C-contiguous array reshapes in C order without a copy, always)
    return ReshapeStep(shape, order)


def _strided_result(result: DTensor, inputs: Sequence[Any]) -> DTensor:
    """A K-order result (a ufunc, a copy, ``astype``...) of inputs whose twins are not all C-contiguous."""
    arrays = [a for a in inputs if isinstance(a, DTensor)]
    if all(twin_strides(a) is None for a in arrays):
        return result
    twin = k_order(result.shape, [(a.shape, twin_strides(a)) for a in arrays], result.dtype.itemsize)
    return StridedDTensor.of(_owner(result), normal(result.shape, twin, result.dtype.itemsize))


# -- the NumPy functions that return views, and those run directly -------------------------------------
def _index_view(x: DTensor, index: Any, result: DTensor) -> DTensor:
    """``x[index]``: a view for a basic index; for an advanced one a new array laid out as NumPy lays it out."""
    if basic_view_index(index, x.ndim):
        return view_of(x, IndexStep(index), result)
    if not isinstance(result, DTensor) or result.ndim < 2:
        return result
    twin = advanced_strides(x.shape, twin_strides(x), x.dtype.itemsize, index, result.shape)
    return StridedDTensor.of(_owner(result), twin)


def _permutation(fn: Callable[..., Any], x: DTensor, args: tuple, kwargs: dict) -> tuple[int, ...]:
    """The permutation of the dims that ``fn(x, *args, **kwargs)`` makes (NumPy's, on a proxy of distinct sizes;
    kept per function, number of dims and arguments)."""
    ndim = x.ndim
    if not args and not kwargs and fn is np.transpose:
        return tuple(range(ndim - 1, -1, -1))
    key = (fn, ndim, static_key(args), static_key(kwargs))
    found = _PERMUTATIONS.get(key) if None not in key else None
    if found is None:
        probe = np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), shape=tuple(range(2, ndim + 2)),
                                                strides=(0,) * ndim)
        found = tuple(n - 2 for n in fn(probe, *args, **kwargs).shape)
        if None not in key:
            _PERMUTATIONS.put(key, found)
    return found


_PERMUTATIONS = BoundedCache(1024, name="dtensor_np.view_permutations")


def _permuting(fn: Callable[..., Any]) -> Callable[[tuple, dict, DTensor], DTensor]:
    def make(args: tuple, kwargs: dict, result: DTensor) -> DTensor:
        x = args[0]
        if fn is np.transpose and len(args) == 1 and not kwargs:  # x.T, np.transpose(x): one step per ndim
            ndim = len(result.shape)
            step = _REVERSED.get(ndim)
            if step is None:
                step = _REVERSED[ndim] = TransposeStep(tuple(range(ndim - 1, -1, -1)))
            return view_of(x, step, result)
        return view_of(x, TransposeStep(_permutation(fn, x, tuple(args[1:]), dict(kwargs))), result)
    return make


_REVERSED: dict[int, TransposeStep] = {}  # the steps of .T (steps are immutable values)


def _reshape_view(args: tuple, kwargs: dict, result: DTensor) -> DTensor:
    x = args[0]
    order = kwargs.get("order", args[2] if len(args) > 2 else "C")
    copy = kwargs.get("copy")
    if copy:
        return result
    order = _memory_order(x, order)
    step = _reshape_step(x, result.shape, order)
    if step is None:
        if copy is False:
            raise ValueError("Unable to avoid creating a copy while reshaping.")
        return _strided_result(result, ()) if order == "C" else _f_result(result)
    return view_of(x, step, result)


def _ravel_view(args: tuple, kwargs: dict, result: DTensor) -> DTensor:
    """``np.ravel``: a view only of a twin contiguous in the order asked (``"K"``: in memory order), as NumPy's."""
    x = args[0]
    order = _memory_order(x, kwargs.get("order", args[1] if len(args) > 1 else "C"))
    twin = proxy(x.shape, twin_strides(x), x.dtype)
    contiguous = twin.flags.c_contiguous if order == "C" else twin.flags.f_contiguous
    return view_of(x, ReshapeStep(result.shape, order), result) if contiguous else result


def _memory_order(x: DTensor, order: Any) -> str:
    """``order`` as ``"C"`` or ``"F"`` (``"A"`` and ``"K"``: ``"F"`` for a Fortran-contiguous twin)."""
    if order in ("A", "K"):
        twin = proxy(x.shape, twin_strides(x), x.dtype)
        return "F" if twin.flags.f_contiguous and not twin.flags.c_contiguous else "C"
    return "F" if order == "F" else "C"


def _f_result(result: DTensor) -> DTensor:
    """``result`` made in Fortran order (``reshape(..., order="F")`` that copies, ``np.copy(x, order="F")``)."""
    order = tuple(reversed(range(result.ndim)))
    return StridedDTensor.of(_owner(result), contiguous_in(order, result.shape, result.dtype.itemsize))


def _reshaping(args: tuple, kwargs: dict, result: DTensor) -> DTensor:
    """``squeeze``, ``expand_dims``: always views (dims of length 1 only)."""
    return view_of(args[0], ReshapeStep(result.shape), result)


def _flip_view(args: tuple, kwargs: dict, result: DTensor) -> DTensor:
    x = args[0]
    axis = kwargs.get("axis", args[1] if len(args) > 1 else None)
    axes = range(x.ndim) if axis is None else {a % x.ndim for a in (axis if isinstance(axis, tuple) else (axis,))}
    index = tuple(slice(None, None, -1) if d in axes else slice(None) for d in range(x.ndim))
    return view_of(x, IndexStep(index), result) if basic_view_index(index, x.ndim) else result  # 0-d: a scalar


def _real_view(args: tuple, kwargs: dict, result: DTensor) -> DTensor:
    x = args[0]
    return view_of(x, PartStep("real") if x.dtype.kind == "c" else IndexStep(Ellipsis), result)


def _imag_view(args: tuple, kwargs: dict, result: DTensor) -> DTensor:
    x = args[0]
    return view_of(x, PartStep("imag") if x.dtype.kind == "c" else ReadOnlyStep(np.imag), result)


def _read_only(fn: Callable[..., Any], value: Optional[Callable[..., Any]] = None
               ) -> Callable[[tuple, dict, DTensor], DTensor]:
    def make(args: tuple, kwargs: dict, result: DTensor) -> DTensor:
        return view_of(args[0], ReadOnlyStep(fn, tuple(args[1:]), dict(kwargs), value), result)
    return make


def diagonal_value(a: DTensor, offset: int = 0, axis1: int = 0, axis2: int = 1) -> DTensor:
    """``np.diagonal(a, offset, axis1, axis2)``'s value: ``np.linalg.diagonal`` of the two axes moved last (its rule:
    each rank cuts the diagonal entries of its block, one ``rechunk`` where they must move)."""
    moved = compute(np.moveaxis, (a, (axis1, axis2), (-2, -1)))
    return compute(np.linalg.diagonal, (moved,), {"offset": offset})


def diagonal(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Any:
    """``np.diagonal`` of a DTensor: a read-only view, as NumPy's.

    Example:
        >>> import dtensor_np as dt
        >>> a = dt.distribute_tensor(np.arange(9.0).reshape(3, 3), dt.DeviceMesh((2,)), [dt.Shard(1)])
        >>> np.diagonal(a).full_tensor().tolist(), np.diagonal(a, 1).readonly
        ([0.0, 4.0, 8.0], True)
    """
    if a.ndim < 2:
        raise ValueError("diag requires an array of at least two dimensions")
    return view_of(a, ReadOnlyStep(np.diagonal, (offset, axis1, axis2), None, diagonal_value),
                   diagonal_value(a, offset, axis1, axis2))


def _einsum_view(args: tuple, kwargs: dict, result: DTensor) -> DTensor:
    """``np.einsum`` of one operand that only permutes its dims (``"ij->ji"``) is a view in NumPy: so here too."""
    if len(args) != 2 or not isinstance(args[0], str) or "->" not in args[0]:
        return result
    source, target = (part.strip() for part in args[0].replace(" ", "").split("->"))
    if "." in source or set(source) != set(target) or len(set(target)) != len(target):
        return result  # a sum over a letter or an ellipsis: a new array, as in NumPy
    if len(set(source)) != len(source):  # a diagonal: NumPy's is a writable view, here read-only (never silent)
        return view_of(args[1], ReadOnlyStep(np.einsum, (), None, lambda x: compute(np.einsum, (args[0], x))),
                       result)
    return view_of(args[1], TransposeStep(tuple(source.index(c) for c in target)), result)


def _broadcast_views(args: tuple, kwargs: dict, result: Any) -> Any:
    """``np.broadcast_arrays``: views of their inputs, read-only here (NumPy's are writable only with a warning,
    which its next versions remove)."""
    if not isinstance(result, (tuple, list)):
        return result
    made = [view_of(a, ReadOnlyStep(np.broadcast_to, (r.shape,)), r) if isinstance(a, DTensor) else r
            for a, r in zip(args, result)]
    return type(result)(made) if isinstance(result, tuple) else made


_K_ORDER = {np.copy, np.clip, np.where, np.round, np.around, np.sort, np.cumsum, np.cumprod, np.full_like,
            np.zeros_like, np.ones_like, np.empty_like, np.negative, np.conj, np.conjugate}
"""NumPy functions (besides the ufuncs) whose result takes the order of their input (``order="K"``)."""


def _layout(func: Any, inputs: Sequence[Any], result: Any) -> Any:
    """A new array made from views or strided arrays: NumPy's ``order="K"`` where ``func`` keeps it, else C."""
    if not isinstance(result, DTensor) or not (isinstance(func, np.ufunc) or func in _K_ORDER):
        return result
    return _strided_result(result, [a for a in inputs if isinstance(a, DTensor) and a.shape == result.shape])


def copyto(dst: Any, src: Any, casting: str = "same_kind", where: Any = True) -> None:
    """``np.copyto(dst, src)`` for a DTensor ``dst``: ``dst`` rebound (through its base, for a view), NumPy's casting.

    Example:
        >>> import dtensor_np as dt
        >>> a = dt.distribute_tensor(np.zeros(4), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> np.copyto(a[1:3], 5)
        >>> a.full_tensor().tolist()
        [0.0, 5.0, 5.0, 0.0]
    """
    if not isinstance(dst, DTensor):
        raise TypeError(f"copyto: expected a DTensor to copy into, got {type(dst).__name__}")
    src_dtype = src.dtype if hasattr(src, "dtype") else np.asarray(src).dtype
    weak = isinstance(src, (bool, int, float, complex))
    if not weak and not np.can_cast(src_dtype, dst.dtype, casting=casting):
        raise TypeError(f"Cannot cast array data from {src_dtype!r} to {dst.dtype!r} according to the rule "
                        f"{casting!r}")
    value = src if where is True else compute(np.where, (where, src, dst))
    dst[...] = value


def _pieces(ary: Any, indices_or_sections: Any, axis: int, strict: bool, name: str) -> list[Any]:
    if not isinstance(ary, DTensor):
        raise TypeError(f"{name}: expected a DTensor, got {type(ary).__name__}")
    axis = operator.index(axis)
    if not -ary.ndim <= axis < ary.ndim:
        raise np.exceptions.AxisError(axis, ary.ndim)
    axis %= ary.ndim
    n = ary.shape[axis]
    try:
        sections = operator.index(indices_or_sections)
    except TypeError:
        bounds = [0] + [operator.index(i) for i in indices_or_sections] + [n]
    else:
        if sections <= 0:
            raise ValueError("number sections must be larger than 0.")
        if strict and n % sections:
            raise ValueError("array split does not result in an equal division")
        size, extra = divmod(n, sections)
        sizes = [size + 1] * extra + [size] * (sections - extra)
        bounds = [0] + list(np.cumsum(sizes))
    lead = (slice(None),) * axis
    return [ary[lead + (slice(int(a), int(b)),)] for a, b in zip(bounds[:-1], bounds[1:])]


def split(ary: Any, indices_or_sections: Any, axis: int = 0) -> list[Any]:
    """``np.split``: the pieces are views of ``ary`` (basic indexes), as in NumPy."""
    return _pieces(ary, indices_or_sections, axis, True, "split")


def array_split(ary: Any, indices_or_sections: Any, axis: int = 0) -> list[Any]:
    """``np.array_split``: views, the first pieces one longer where the length does not divide."""
    return _pieces(ary, indices_or_sections, axis, False, "array_split")


def _copy(a: Any, order: str = "K", subok: bool = False) -> Any:
    """``np.copy``: a new array with the value of ``a`` (its buffers shared: they are never written), in ``order``."""
    value = _owner(a) if a.__class__ is not DTensor else a
    new = DTensor(value._shards, value._spec, namespace=value._namespace)
    if order == "K" or order == "A":
        return _strided_result(new, [a])
    return _f_result(new) if order == "F" else new


def hsplit(ary: Any, indices_or_sections: Any) -> list[Any]:
    """``np.hsplit``: views along dim 1 (dim 0 of a 1-d array)."""
    if ary.ndim == 0:
        raise ValueError("hsplit only works on arrays of 1 or more dimensions")
    return _pieces(ary, indices_or_sections, 1 if ary.ndim > 1 else 0, True, "hsplit")


def vsplit(ary: Any, indices_or_sections: Any) -> list[Any]:
    """``np.vsplit``: views along dim 0."""
    if ary.ndim < 2:
        raise ValueError("vsplit only works on arrays of 2 or more dimensions")
    return _pieces(ary, indices_or_sections, 0, True, "vsplit")


def dsplit(ary: Any, indices_or_sections: Any) -> list[Any]:
    """``np.dsplit``: views along dim 2."""
    if ary.ndim < 3:
        raise ValueError("dsplit only works on arrays of 3 or more dimensions")
    return _pieces(ary, indices_or_sections, 2, True, "dsplit")


_FUNCTION_VIEWS: dict[Any, Callable[[tuple, dict, DTensor], DTensor]] = {
    np.transpose: _permuting(np.transpose),
    np.swapaxes: _permuting(np.swapaxes),
    np.moveaxis: _permuting(np.moveaxis),
    np.matrix_transpose: _permuting(np.matrix_transpose),
    np.linalg.matrix_transpose: _permuting(np.linalg.matrix_transpose),
    np.reshape: _reshape_view,
    np.ravel: _ravel_view,
    np.squeeze: _reshaping,
    np.expand_dims: _reshaping,
    np.flip: _flip_view,
    np.real: _real_view,
    np.imag: _imag_view,
    np.linalg.diagonal: _read_only(np.linalg.diagonal),
    np.broadcast_to: _read_only(np.broadcast_to),
    np.einsum: _einsum_view,
    np.broadcast_arrays: _broadcast_views,
}

_FUNCTIONS: dict[Any, Callable[..., Any]] = {
    np.diagonal: diagonal,
    np.copyto: copyto,
    np.split: split,
    np.array_split: array_split,
    np.hsplit: hsplit,
    np.vsplit: vsplit,
    np.dsplit: dsplit,
    np.copy: _copy,
}

register_views(_index_view, _FUNCTION_VIEWS, _FUNCTIONS, _layout)
