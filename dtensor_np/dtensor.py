"""``DTensor``: a NumPy or CuPy array distributed over a mesh, immutable.

A DTensor is its spec (mesh, placements, global shape and dtype) plus the
local shards this process holds: every rank's shard in simulated mode, this
rank's shard under MPI.  Operations return new DTensors, except where NumPy
returns a view: then a view of the same base (:mod:`dtensor_np.views`).

Aliasing policy: no buffer of a DTensor is ever written in place, so arrays
may be shared instead of copied.  Every NumPy array this module hands out
that is a DTensor's own buffer (``to_local()``, ``local_shards()``, the shards
of the ``LocalTensor`` that ``to_local()`` returns when simulated, and
``full_tensor()`` of an array that needs no communication) is a *read-only
view* of it: no copy is made, and writing to it raises ``ValueError``
(``np.array(a)`` or ``a.copy()`` gives a writable copy).  Results of
operations are new arrays, except where only rows are selected: a
redistribute that only keeps leading rows (``R -> S(0)``) returns read-only
views of the source's rows (which keep its whole buffer alive).  CuPy arrays
have no read-only flag: they are handed out as they are, under the same rule.
``DTensor.from_local`` takes the caller's arrays as they are: write to them
afterwards and the DTensor changes, so pass a copy to keep writing.

Example:
    >>> import numpy as np
    >>> import dtensor_np as dt
    >>> mesh = dt.init_device_mesh((2,), backend="simulated")
    >>> x = dt.distribute_tensor(np.arange(5.0), mesh, [dt.Shard(0)])
    >>> {r: a.tolist() for r, a in x.local_shards().items()}
    {0: [0.0, 1.0, 2.0], 1: [3.0, 4.0]}
    >>> y = x.redistribute([dt.Replicate()])
    >>> y.placements, y.full_tensor().tolist()
    ((Replicate(),), [0.0, 1.0, 2.0, 3.0, 4.0])
"""

from __future__ import annotations

import contextlib
import operator
import sys
import zlib
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from collectives import array_module
from collectives.dtypes import dtype_code, dtype_name
from collectives.keys import FLOAT_TYPES, PLAIN_TYPES
from collectives.spmd import note_local_error

from .arrays import array_library, check_array
from .conversion import before_implicit_gather
from .devices import Sharding
from .dispatch import dispatch, dispatch_ufunc, run_rule
from .errors import ShardingError
from .fast_path import FAST_PATH, call_key, register_fast_type
from .from_local import build_from_local
from .indexing import GETITEM, UPDATE, IndexUpdater, elements, flat_positions, getitem, iterate, update
from .local_tensor import LocalTensor
from .mesh import DeviceMesh
from .placements import Partial, Placement, Replicate, check_shard_order, placements_str
from .planner import plan_flag
from .propagation.elementwise import ASTYPE
from .propagation.registry import composite_of
from .sharded import register_sharded_type
from .redistribute import full_replicator, redistribute_shards, redistribution
from .runtime import backend_for
from .spec import DTensorSpec, ShardOrder, TensorMeta
from .strides import contiguous_in, proxy

__all__ = ["DTensor", "distribute_tensor", "Flags", "FlatIter", "REFUSED_ATTRIBUTES"]

_NO_VALUE = np._NoValue  # NumPy's "argument not given" (``initial=<no value>``)
_OWN_REFERENCES = 3  # sys.getrefcount(self) in a method when only the caller's name holds the array


class DTensor(NDArrayOperatorsMixin):
    """A distributed array: a handle on an immutable value, a spec plus the local shards this process holds.

    Build one with :func:`distribute_tensor` or :meth:`DTensor.from_local`.
    Operations return new DTensors, or views where NumPy returns views
    (:mod:`dtensor_np.views`).  ``x[idx] = v``, ``x += y`` and ``out=x``
    rebind the handle ``x`` to a new value (through its base for a view, whose
    other views see the write, as in NumPy): no buffer is ever written in
    place, so every array that is not a view of ``x``'s base, and every array
    from ``to_local()``, keeps its values.

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> mesh = dt.DeviceMesh((2, 2))
        >>> x = dt.distribute_tensor(np.ones((4, 4)), mesh, [dt.Shard(0), dt.Shard(1)])
        >>> x.shape, str(x.spec), x.local_shards()[3].shape
        ((4, 4), 'S(0)S(1)', (2, 2))
    """

    __slots__ = ("_shards", "_spec", "_namespace")

    def __init__(self, shards: Mapping[int, Any], spec: DTensorSpec, *, namespace: Any = None) -> None:
        # A private dict: nothing mutates it, and local_shards()/to_local() hand out copies of it.
        object.__setattr__(self, "_shards", dict(shards))
        object.__setattr__(self, "_spec", spec)
        object.__setattr__(self, "_namespace", namespace)

    def __setattr__(self, name: str, value: Any) -> None:
        """``x.real = v``, ``x.imag = v`` and ``x.flat = v`` write the elements (as NumPy's); nothing else is set."""
        if name == "real" or name == "flat":
            getattr(self, name)[...] = value
            return
        if name == "imag":
            if self.dtype.kind != "c":
                raise TypeError("array does not have imaginary part to set")
            self.imag[...] = value
            return
        raise AttributeError(f"cannot set {name!r} of a DTensor: its value changes only by writes to its elements "
                             "(x[...] = v) and operations return new DTensors (x = x.reshape(...), x.astype(...))")

    def _rebind(self, value: "DTensor") -> "DTensor":
        """Point this handle at ``value``'s spec and shards (``x[i] = v``, ``x += y``, ``out=x``); returns self.

        Both are read before either is set: ``value`` may be a view of this array (``x.resize``'s reshape).
        """
        shards, spec = value._shards, value._spec
        object.__setattr__(self, "_shards", shards)
        object.__setattr__(self, "_spec", spec)
        return self

    __hash__ = None  # type: ignore[assignment]  # like ndarray: == is elementwise

    # -- properties ----------------------------------------------------------
    @property
    def spec(self) -> DTensorSpec:
        """The :class:`DTensorSpec`: mesh, placements, global shape and dtype."""
        return self._spec

    @property
    def mesh(self) -> DeviceMesh:
        """The :class:`DeviceMesh` the array lives on."""
        return self._spec.mesh

    @property
    def placements(self) -> tuple[Placement, ...]:
        """How the array lies on each mesh dim (``Shard``, ``Replicate``, ``Partial``)."""
        return self._spec.placements

    @property
    def shape(self) -> tuple[int, ...]:
        """The global shape (from the spec: no communication)."""
        return self._spec.shape

    @property
    def dtype(self) -> np.dtype:
        """The element type (NumPy's)."""
        return self._spec.dtype

    @property
    def ndim(self) -> int:
        """The number of dims."""
        return self._spec.ndim

    @property
    def size(self) -> int:
        """The number of elements, over every rank."""
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __len__(self) -> int:
        """``len(x)``: the length of the first dim (a TypeError for a 0-d array, as NumPy's)."""
        if not self.shape:
            raise TypeError("len() of a 0-d DTensor")
        return self.shape[0]

    # -- indexing (see dtensor_np.indexing): copies, and updates that rebind --------------
    def __getitem__(self, index: Any) -> "DTensor":
        """``x[index]`` for every NumPy index, sharded dims included: a view for a basic index (as NumPy; see
        :mod:`dtensor_np.views`), a new array for an advanced one."""
        try:
            key = call_key(GETITEM, (self, index))
            entry = _fast_get(key) if key is not None else None
            result = entry((self, index)) if entry is not None else getitem(self, index, key)
        except Exception as error:  # an index valid on some ranks only: the others learn it at the next collective
            note_local_error(error)
            raise
        return _HOOKS.index_view(self, index, result)

    def __setitem__(self, index: Any, value: Any) -> None:
        """``x[index] = value`` rebinds this handle to ``x.at[index].set(value)``; no other array changes."""
        args = (self, index, value, "set")
        try:
            key = call_key(UPDATE, args)
            entry = _fast_get(key) if key is not None else None
            new = entry(args) if entry is not None else update(self, index, value, "set", key)
        except Exception as error:  # as in __getitem__
            note_local_error(error)
            raise
        _set_shards(self, new._shards)
        _set_spec(self, new._spec)

    def __iter__(self) -> Any:
        """The rows along the first dim, each one ``x[i]`` (a view when ``x`` has 2 dims or more, as in NumPy); the
        elements of a 1-d array as 0-d arrays, read a block at a time (:func:`dtensor_np.indexing.elements`: one
        gather per MiB, none when replicated), so ``sum(x)``, ``max(x)``, ``sorted(x)`` cost one pass.

        Example:
            >>> import dtensor_np as dt
            >>> x = dt.distribute_tensor(np.array([3.0, 1.0, 2.0]), dt.DeviceMesh((2,)), [dt.Shard(0)])
            >>> [float(v) for v in sorted(x)], float(sum(x)), float(max(x))
            ([1.0, 2.0, 3.0], 6.0, 3.0)
        """
        if self.ndim == 1:
            return elements(self)
        if not self.shape:
            iterate(self)  # NumPy's TypeError for a 0-d array
        return (self[i] for i in range(self.shape[0]))

    @property
    def base(self) -> Optional["DTensor"]:
        """The array whose data a view shows (NumPy's ``base``); None for an array that owns its data."""
        return None

    @property
    def at(self) -> IndexUpdater:
        """Functional updates: ``x.at[index].set(v)`` (also ``add``, ``multiply``, ``min``, ``max``, ``get``)."""
        return IndexUpdater(self)

    # -- Python scalars: one small collective that every rank makes --------------------
    def _scalar(self, convert: Any) -> Any:
        if self.size > 1:  # refused before any communication, as NumPy refuses it
            convert(np.empty(self.shape, self.dtype))
        return convert(self.full_tensor())

    def __bool__(self) -> bool:
        """The value of a one-element DTensor on every rank (NumPy's errors otherwise)."""
        return self._scalar(bool)

    def __int__(self) -> int:
        """``int(x)`` of a one-element array, on every rank."""
        return self._scalar(int)

    def __float__(self) -> float:
        """``float(x)`` of a one-element array, on every rank."""
        return self._scalar(float)

    def __complex__(self) -> complex:
        """``complex(x)`` of a one-element array, on every rank."""
        return self._scalar(complex)

    def __index__(self) -> int:
        """``operator.index(x)`` of a 0-d integer array, on every rank (NumPy's TypeError otherwise)."""
        return self._scalar(operator.index)

    # -- the Array API: device, sharding, namespace ---------------------------------------
    @property
    def device(self) -> DeviceMesh:
        """The mesh: equal for every array on it, whatever the placements (see :mod:`dtensor_np.devices`)."""
        return self._spec.mesh

    @property
    def sharding(self) -> Sharding:
        """``Sharding(mesh, placements)``."""
        return Sharding(self._spec.mesh, self._spec.placements)

    def to_device(self, device: Any, /, *, stream: Any = None) -> "DTensor":
        """``x.device`` (the mesh): this array; a :class:`Sharding` on the same mesh: redistributed to it."""
        if stream is not None:
            raise ValueError(f"to_device: dtensor_np arrays take no stream, got {stream!r}")
        if device is self.mesh:
            return self
        if isinstance(device, Sharding):
            if device.mesh is not self.mesh:
                raise ShardingError(f"to_device: the Sharding is on {device.mesh!r}, this array on {self.mesh!r}")
            return self.redistribute(device.placements)
        raise TypeError(f"to_device: expected this array's mesh or a dt.Sharding on it, got {device!r}")

    @property
    def namespace(self) -> Any:
        """The Array API namespace that made this array, or None (see ``__array_namespace__``)."""
        return self._namespace

    def __array_namespace__(self, *, api_version: Optional[str] = None) -> Any:
        """The Array API namespace that made this array (``dt.array_api.namespace(mesh)`` for any other)."""
        if api_version not in (None, "2024.12", "2023.12", "2022.12", "2021.12"):
            raise ValueError(f"dtensor_np implements the Array API 2024.12, got api_version={api_version!r}")
        if self._namespace is not None:
            return self._namespace
        (make,) = _NAMESPACE_FACTORY
        return make(self.mesh)

    def __dlpack_device__(self) -> tuple[Any, int]:
        """The DLPack device of this process's shards (``(kDLCPU, 0)`` for NumPy, the GPU for CuPy)."""
        return next(iter(self._shards.values())).__dlpack_device__()

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Optional[bool] = None) -> Any:
        """DLPack export of the whole array: the Array API's explicit cross-device copy (``np.from_dlpack(x)``,
        ``np.from_dlpack(x, device="cpu")``).

        A mesh of one rank exports its shard, a copy unless ``copy=False``
        (then its buffer marked read-only, NumPy shards, ``max_version >= (1, 0)``).
        On more ranks the array is gathered on every rank (a collective every
        rank makes, never a warning: it was asked for) and the whole array is
        exported, to host memory for ``dl_device=(1, 0)`` (kDLCPU); ``copy=False``
        raises ``BufferError`` (a gathered array is always a copy).
        """
        if self.mesh.size() != 1:
            if copy is False:
                raise BufferError("a DTensor over several ranks is exported as a gathered copy; got copy=False")
            whole = self.full_tensor()
            if dl_device is not None and tuple(dl_device)[0] == 1:  # kDLCPU: host memory
                whole = _host(whole, None)
            else:
                whole = whole.copy()
            return whole.__dlpack__(stream=stream, max_version=max_version)
        shard = next(iter(self._shards.values()))
        if dl_device is not None and tuple(dl_device)[0] == 1 and array_library(shard) != "numpy":
            if copy is False:
                raise BufferError("a CuPy shard reaches host memory only by a copy; got copy=False")
            return _host(shard, None).__dlpack__(stream=stream, max_version=max_version)
        if copy is False:
            if array_library(shard) != "numpy":
                raise BufferError("DLPack export with copy=False needs a read-only buffer; CuPy arrays have none")
            shard = shard.view()
            shard.flags.writeable = False
        return shard.__dlpack__(stream=stream, max_version=max_version, dl_device=dl_device,
                                copy=copy is not False)

    @property
    def mT(self) -> "DTensor":
        """The transpose of the last two dims (a stack of matrices)."""
        if self.ndim < 2:
            raise ValueError(f"x.mT needs at least 2 dims, got a {self.ndim}-d array")
        return np.swapaxes(self, -1, -2)

    # -- local data ------------------------------------------------------------
    @property
    def shards(self) -> Mapping[int, Any]:
        """``{rank: array}`` for the ranks this process holds: the DTensor's own mapping and buffers, for library code
        that reads them without the cost of views; never write to them.

        ``local_shards()`` returns a copy of the mapping with read-only views (see the aliasing policy).
        """
        return self._shards

    def local_shards(self) -> dict[int, Any]:
        """``{rank: array}`` for the ranks this process holds (all of them when simulated): read-only views."""
        return {r: readonly(a) for r, a in self._shards.items()}

    def to_local(self) -> Any:
        """This rank's array under MPI (a read-only view); a :class:`LocalTensor` of them when simulated."""
        if self.mesh.backend == "mpi":
            return readonly(next(iter(self._shards.values())))
        return LocalTensor({r: readonly(a) for r, a in self._shards.items()})

    def full_tensor(self) -> Any:
        """The whole array, gathered (and reduced) on every rank.

        Example:
            >>> import numpy as np, dtensor_np as dt
            >>> x = dt.distribute_tensor(np.arange(3), dt.DeviceMesh((2,)), [dt.Partial()])
            >>> x.full_tensor().tolist()
            [0, 1, 2]
        """
        run = full_replicator(self._spec)
        if run is None:  # the shard is the whole array
            return readonly(next(iter(self._shards.values())))
        return next(iter(run(self._shards).values()))

    # -- placement changes -----------------------------------------------------
    def redistribute(
        self, placements: Sequence[Placement], *, shard_order: Optional[ShardOrder] = None, exact_plan: bool = False
    ) -> "DTensor":
        """The same array on new placements (a new DTensor; this one is unchanged).

        The collectives are those of :func:`dtensor_np.plan_redistribute`'s plan
        (``dt.plan_view`` shows the default one), planned within about 1 ms.  On
        meshes of 5 or more dims of size > 1 that plan may be an approximate
        one; ``exact_plan=True`` runs the plan proved cheapest
        (``plan_redistribute(..., exact=True)``), planned in milliseconds the
        first time (then cached): for a redistribute that runs many times.
        Every rank must pass the same ``exact_plan``.

        Example:
            >>> import numpy as np, dtensor_np as dt
            >>> mesh = dt.DeviceMesh((2, 2))
            >>> x = dt.distribute_tensor(np.arange(16.0).reshape(4, 4), mesh, [dt.Shard(0), dt.Replicate()])
            >>> str(x.redistribute([dt.Replicate(), dt.Shard(1)]).spec)
            'RS(1)'
        """
        if placements.__class__ is not tuple:
            if not isinstance(placements, (list, tuple)):
                raise TypeError(f"placements must be a list or tuple of placements, got {placements!r}")
            placements = tuple(placements)
        if exact_plan.__class__ is not bool:  # the cache would take 1 for True: checked first
            exact_plan = plan_flag(exact_plan, "redistribute: exact_plan")
        if shard_order is not None:  # the cache would take 0.0 for 0: checked first, then keyed as ints
            shard_order = check_shard_order(shard_order)
        try:
            target, run = redistribution(self._spec, placements, shard_order, exact_plan)
        except TypeError:  # unhashable arguments: the uncached call validates them (and says what is wrong)
            target, run = redistribution.__wrapped__(self._spec, placements, shard_order, exact_plan)
        # a new handle even where nothing moves: ``y[i] = v`` rebinds y's handle, so y must not be x
        out = _new_dtensor(DTensor)
        _set_shards(out, self._shards if run is None else run(self._shards))
        _set_spec(out, target)
        _set_namespace(out, self._namespace)
        return out

    # -- construction ----------------------------------------------------------
    @classmethod
    def from_local(
        cls,
        local: Any,
        mesh: DeviceMesh,
        placements: Sequence[Placement],
        shape: Optional[Sequence[int]] = None,
        *,
        run_check: bool = True,
    ) -> "DTensor":
        """A DTensor from the shards the ranks already hold.

        ``local`` is this rank's array under MPI, and ``{rank: array}`` or a
        :class:`LocalTensor` in simulated mode.  ``shape`` is the global
        shape; without it, it is worked out from every rank's shard.  With
        ``run_check`` (the default), every rank's shape, dtype and array
        library are compared (one small collective under MPI) and every rank
        raises the same ``ShardingError`` if one shard is wrong.

        Example:
            >>> import numpy as np, dtensor_np as dt
            >>> x = dt.DTensor.from_local({0: np.zeros(3), 1: np.ones(2)}, dt.DeviceMesh((2,)), [dt.Shard(0)])
            >>> x.shape, x.full_tensor().tolist()
            ((5,), [0.0, 0.0, 0.0, 1.0, 1.0])
        """
        shards, spec = build_from_local(local, mesh, placements, shape, run_check)
        return cls(shards, spec)

    # -- NumPy protocols (a repeated call is one FAST_PATH lookup: see dtensor_np.dispatch) ------
    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        """NumPy's ufuncs on DTensors: through their sharding rules (``out=`` rebinds its DTensors)."""
        try:
            out = kwargs.pop("out", None) if kwargs else None
            key = call_key(ufunc if method == "__call__" else (ufunc, method), inputs, kwargs) if out is None else None
            if key is not None:
                entry = _fast_get(key)
                if entry is not None:
                    return entry(inputs)
            if (ufunc is np.equal or ufunc is np.not_equal) and method == "__call__" and len(inputs) == 2 \
                    and out is None and not kwargs and _object_operand(inputs[1] if inputs[0] is self else inputs[0]):
                return _unequal(self, ufunc is np.not_equal)  # NumPy compares the object as unequal everywhere
            composite = composite_of(ufunc) if method == "__call__" else None
            if composite is not None:  # a gufunc made of others (np.matvec)
                if out is not None:
                    kwargs["out"] = out
                return composite(*inputs, **kwargs)
            result = dispatch_ufunc(ufunc, method, inputs, kwargs, key)
            if key is None and method == "__call__":  # views or strided inputs: NumPy's order="K" for the result
                result = _HOOKS.layout(ufunc, inputs, result)
            casting = kwargs.get("casting") or ("unsafe" if method != "__call__" else None)  # reductions cast unsafely
            return result if out is None else _rebind_outputs(out, result, ufunc.__name__, casting)
        except Exception as error:  # on some ranks only (other arguments, one rank's values): see note_local_error
            note_local_error(error)
            raise

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        """NumPy's functions on DTensors: through their sharding rules, composites or views."""
        try:
            direct = _HOOKS.functions.get(func)
            if direct is not None:  # functions that are no rule: copyto, split... (dtensor_np.views)
                return direct(*args, **kwargs)
            out = kwargs.pop("out", None) if "out" in kwargs else None
            key = call_key(func, args, kwargs) if out is None else None
            entry = _fast_get(key) if key is not None else None
            if entry is not None:
                result = entry(args)
            else:
                composite = composite_of(func)  # a composition of functions with rules (np.hstack, np.median...)
                if composite is not None:
                    if out is not None:
                        kwargs["out"] = out
                    return composite(*args, **kwargs)
                result = dispatch(func, args, kwargs, key)
            view = _HOOKS.function_views.get(func)
            if view is not None:
                result = view(args, kwargs, result)
            elif key is None:
                result = _HOOKS.layout(func, args, result)
            casting = "unsafe" if func in _UNSAFE_OUT else None
            return result if out is None else _rebind_outputs(out, result, getattr(func, "__name__", "?"), casting)
        except Exception as error:  # as in __array_ufunc__
            note_local_error(error)
            raise

    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> np.ndarray:
        """``np.asarray(x)``: the whole array on every rank, as a new NumPy array (an implicit gather, which warns
        once per call site by default: see :mod:`dtensor_np.conversion`)."""
        if copy is False:
            raise ValueError("a DTensor cannot become a NumPy array without a copy: its data lives in its shards")
        if self._spec.mesh.size() > 1 and full_replicator(self._spec) is not None:  # a gather: decided from the spec
            before_implicit_gather("np.asarray", self.size * self.dtype.itemsize)
        return _host(self.full_tensor(), dtype)

    # -- array methods: NumPy's, with its signatures; each calls the NumPy function of its name ---------------
    # (one rule per concept).  An argument left at its default is not passed on: the call keeps the key of the
    # plain call, and a rule is never asked about an argument it does not take.
    @property
    def T(self) -> "DTensor":
        """The transpose (a view, as in NumPy)."""
        args = (self,)
        key = call_key(np.transpose, args)
        entry = _fast_get(key) if key is not None else None
        result = entry(args) if entry is not None else dispatch(np.transpose, args, {}, key)
        return _HOOKS.function_views[np.transpose](args, {}, result)

    def transpose(self, *axes: Any) -> "DTensor":
        """``np.transpose``: the dims permuted (a view); ``x.transpose(1, 0)`` and ``x.transpose((1, 0))`` alike."""
        if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list))):
            axes = axes[0]
        return np.transpose(self, axes or None)

    def reshape(self, *shape: Any, order: str = "C", copy: Optional[bool] = None) -> "DTensor":
        """``np.reshape``: a view where NumPy's is one; ``x.reshape(2, 3)`` and ``x.reshape((2, 3))`` alike."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        elif len(shape) == 1 and shape[0] is None:  # NumPy 2: x.reshape(None) keeps the shape
            shape = None  # type: ignore[assignment]
        if order == "C" and copy is None:
            return np.reshape(self, shape)
        return np.reshape(self, shape, order=order, copy=copy)

    def ravel(self, order: str = "C") -> "DTensor":
        """``np.ravel``: a view where NumPy's is one (a C-contiguous array), else a new array."""
        return np.ravel(self, order=order)

    def flatten(self, order: str = "C") -> "DTensor":
        """A new 1-d array of the values (never a view, as NumPy's ``flatten``)."""
        return np.copy(np.ravel(self, order=order), order="C")

    def copy(self, order: str = "C") -> "DTensor":
        """A new array with the same values (its buffers shared: no buffer is ever written), C-ordered by default.

        Example:
            >>> x = distribute_tensor(np.arange(3.0), DeviceMesh((2,)), [Replicate()])
            >>> y = x.copy(); y[0] = 9.0
            >>> x.full_tensor().tolist(), y.full_tensor().tolist()
            ([0.0, 1.0, 2.0], [9.0, 1.0, 2.0])
        """
        return np.copy(self, order=order)

    def __copy__(self) -> "DTensor":
        """``copy.copy(x)``: ``x.copy()``, as NumPy's."""
        return self.copy()

    def __deepcopy__(self, memo: Any = None) -> "DTensor":
        """``copy.deepcopy(x)``: ``x.copy()`` (a DTensor holds no Python objects to copy deeper)."""
        return self.copy()

    def fill(self, value: Any) -> None:
        """Every element set to ``value`` (this handle rebound; through its base for a view), as ``x[...] = value``."""
        self[...] = value

    def sort(self, axis: int = -1, kind: Any = None, order: Any = None, *, stable: Any = None) -> None:
        """Sorted in place along ``axis`` (this handle rebound; through its base for a view), as NumPy's ``sort``."""
        if order is not None:
            raise ValueError("Cannot specify order when the array has no fields.")
        axis = operator.index(axis)  # NumPy's TypeError for axis=None: an in-place sort keeps the shape
        sorted_ = np.sort(self, axis=axis, kind=kind) if stable is None else np.sort(self, axis=axis, kind=kind,
                                                                                  stable=stable)
        self._rebind(sorted_)

    def argsort(self, axis: Any = -1, kind: Any = None, order: Any = None, *, stable: Any = None) -> "DTensor":
        """``np.argsort``: the indices that sort along ``axis``."""
        return np.argsort(self, axis=axis, kind=kind, order=order, **_given(stable=stable))

    def partition(self, kth: Any, axis: int = -1, kind: str = "introselect", order: Any = None) -> None:
        """Partitioned in place around ``kth`` (``np.partition``; this handle rebound, through its base for a view)."""
        axis = operator.index(axis)  # NumPy's TypeError for axis=None: an in-place partition keeps the shape
        self._rebind(np.partition(self, kth, axis=axis, kind=kind, order=order))

    def argpartition(self, kth: Any, axis: Any = -1, kind: str = "introselect", order: Any = None) -> "DTensor":
        """``np.argpartition``: the indices that partition along ``axis`` around ``kth``."""
        return np.argpartition(self, kth, axis=axis, kind=kind, order=order)

    def searchsorted(self, v: Any, side: str = "left", sorter: Any = None) -> "DTensor":
        """``np.searchsorted``: where the values ``v`` would be inserted in this sorted 1-d array."""
        return np.searchsorted(self, v, side=side, **_given(sorter=sorter))

    def diagonal(self, offset: int = 0, axis1: int = 0, axis2: int = 1) -> "DTensor":
        """``np.diagonal``: a read-only view, as NumPy's."""
        return np.diagonal(self, offset, axis1, axis2)

    def trace(self, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: Any = None, out: Any = None) -> Any:
        """``np.trace``: the sums along the diagonals."""
        return np.trace(self, offset=offset, axis1=axis1, axis2=axis2, **_given(dtype=dtype, out=out))

    @property
    def real(self) -> "DTensor":
        """The real part (a view, as NumPy's); ``x.real = v`` writes it."""
        return np.real(self)

    @property
    def imag(self) -> "DTensor":
        """The imaginary part (a view of a complex array; read-only zeros for a real one, as NumPy's);
        ``x.imag = v`` writes it."""
        return np.imag(self)

    def conj(self) -> "DTensor":
        """``np.conjugate``: the complex conjugate, elementwise (a new array)."""
        return np.conjugate(self)

    def conjugate(self) -> "DTensor":
        """``np.conjugate``: the complex conjugate, elementwise (a new array)."""
        return np.conjugate(self)

    def swapaxes(self, axis1: int, axis2: int) -> "DTensor":
        """``np.swapaxes``: two dims exchanged (a view)."""
        return np.swapaxes(self, axis1, axis2)

    def squeeze(self, axis: Any = None) -> "DTensor":
        """``np.squeeze``: dims of length 1 removed (a view)."""
        return np.squeeze(self, axis)

    def repeat(self, repeats: Any, axis: Any = None) -> "DTensor":
        """``np.repeat``: each element (each slice along ``axis``) repeated."""
        return np.repeat(self, repeats, axis=axis)

    def take(self, indices: Any, axis: Any = None, out: Any = None, mode: str = "raise") -> Any:
        """``np.take``: the elements (the slices along ``axis``) at ``indices``; without ``axis``, those of the
        flat array (``np.take`` of ``np.ravel(x)``, as NumPy takes them)."""
        source = self if axis is not None or self.ndim == 1 else np.ravel(self)
        return np.take(source, indices, axis=axis, **_given(out=out, mode=None if mode == "raise" else mode))

    def put(self, indices: Any, values: Any, mode: str = "raise") -> None:
        """``np.put``: the elements at the flat ``indices`` set to ``values``, in place (this handle rebound)."""
        np.put(self, indices, values, mode=mode)

    def choose(self, choices: Any, out: Any = None, mode: str = "raise") -> Any:
        """``np.choose``: each element picks the choice it indexes."""
        return np.choose(self, choices, mode=mode, **_given(out=out))

    def compress(self, condition: Any, axis: Any = None, out: Any = None) -> Any:
        """``np.compress``: the slices along ``axis`` (the flat elements) where ``condition`` is true."""
        return np.compress(condition, self, axis=axis, **_given(out=out))

    def nonzero(self) -> tuple["DTensor", ...]:
        """``np.nonzero``: the indices of the non-zero elements, one array per dim."""
        return np.nonzero(self)

    def dot(self, other: Any, out: Any = None) -> Any:
        """``np.dot``: the dot product with ``other``."""
        return np.dot(self, other, **_given(out=out))

    def resize(self, *new_shape: Any, refcheck: bool = True) -> None:
        """NumPy's ``ndarray.resize``: this array, in place, of ``new_shape``: its first elements in memory order,
        zeros after them (``np.resize`` repeats them instead).

        As NumPy, it refuses a view (``x.base`` is not None), an array laid out in neither C nor Fortran order,
        and with ``refcheck`` an array referenced elsewhere (a view of it, a list holding it: NumPy's reference
        count check).  The values are those of ``np.ravel`` and ``np.concatenate`` (the zeros a replicated
        constant), then ``reshape``: rows move where the new blocks need them.

        Example:
            >>> import dtensor_np as dt
            >>> x = dt.distribute_tensor(np.arange(4.0), dt.DeviceMesh((2,)), [dt.Shard(0)])
            >>> x.resize((2, 3))
            >>> x.full_tensor().tolist()
            [[0.0, 1.0, 2.0], [3.0, 0.0, 0.0]]
        """
        references = sys.getrefcount(self)
        if len(new_shape) == 1 and (new_shape[0] is None or isinstance(new_shape[0], (tuple, list))):
            if new_shape[0] is None:  # x.resize(None), as x.resize(): NumPy leaves the array as it is
                return
            new_shape = tuple(new_shape[0])
        elif not new_shape:
            return
        shape = tuple(operator.index(n) for n in new_shape)
        if any(n < 0 for n in shape):
            raise ValueError("negative dimensions not allowed")
        if self.base is not None:
            raise ValueError("cannot resize this array: it does not own its data")
        flags = self.flags
        if not flags.forc:
            raise ValueError("resize only works on single-segment arrays")
        if refcheck and references > _OWN_REFERENCES:  # a view of it would go on showing its old shape: refused
            raise ValueError("cannot resize an array that references or is referenced\nby another object in this "
                             "way.\nUse the np.resize function to get a new resized copy or\n set refcheck=False to "
                             "disable this check")
        fortran = flags.fnc  # the elements in Fortran order: those of the transpose in C order
        size = 1
        for n in shape:
            size *= n
        flat = np.ravel(np.transpose(self) if fortran else self)
        if size <= self.size:
            flat = flat[:size]
        else:
            flat = np.concatenate([flat, np.zeros(size - self.size, self.dtype)])
        value = np.transpose(np.reshape(flat, shape[::-1])) if fortran else np.reshape(flat, shape)
        self._rebind(value)
        if fortran:  # a Fortran-ordered owner stays one, of its new shape
            f_order = tuple(range(len(shape) - 1, -1, -1))
            object.__setattr__(self, "_twin", contiguous_in(f_order, shape, self.dtype.itemsize))

    def astype(self, dtype: Any, order: str = "K", casting: str = "unsafe", subok: bool = True,
               copy: bool = True) -> "DTensor":
        """The values cast to ``dtype`` (NumPy's ``astype``: ``casting`` checked first; with ``copy=False`` this array
        itself where no cast and no change of order is needed)."""
        if casting != "unsafe" and not np.can_cast(self.dtype, dtype, casting=casting):
            raise TypeError(f"Cannot cast array data from {self.dtype!r} to {np.dtype(dtype)!r} according to the rule "
                            f"{casting!r}")
        if not copy and np.dtype(dtype) == self.dtype:
            flags = self.flags
            if order == "K" or (order == "A" and flags.forc) or (order == "C" and flags.c_contiguous) or (
                    order == "F" and flags.f_contiguous):
                return self
        value = run_rule(ASTYPE, (self, dtype), {})
        if order == "K":
            return _HOOKS.layout(np.copy, (self,), value)
        return np.copy(value, order=order)

    def byteswap(self, inplace: bool = False) -> "DTensor":
        """NumPy's ``byteswap``: every element's bytes reversed (each rank's block, no communication once a pending
        ``Partial`` is reduced); ``inplace=True`` rebinds this array (through its base for a view) and returns it.

        Example:
            >>> import dtensor_np as dt
            >>> x = dt.distribute_tensor(np.array([1, 256], np.int16), dt.DeviceMesh((2,)), [dt.Shard(0)])
            >>> x.byteswap().full_tensor().tolist()
            [256, 1]
        """
        swapped = map_shards(self, swap_bytes, self.dtype)
        if inplace:
            return self._rebind(swapped)
        return swapped

    def view(self, *args: Any, **kwargs: Any) -> "DTensor":
        """NumPy's ``view``: ``x.view()`` a view of the same values (``x[...]``); ``x.view(dtype)`` the bytes read as
        ``dtype`` (each rank's block, no communication), a view that writes through to ``x``; a dtype of another
        itemsize changes the length of the last dim, which must not be sharded.  ``x.view(type)``: a TypeError
        (a DTensor is no other array type).  See :mod:`dtensor_np.functions.ndarray_methods`."""
        return _HOOKS.methods["view"](self, *args, **kwargs)

    # reductions: NumPy's signatures; where=/initial= go to the rule, which says what it supports
    def sum(self, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False,
            initial: Any = _NO_VALUE, where: Any = True) -> Any:
        """``np.sum``."""
        if out is None and initial is _NO_VALUE and where is True:
            return np.sum(self, axis=axis, dtype=dtype, keepdims=keepdims)
        return np.sum(self, axis=axis, dtype=dtype, keepdims=keepdims, **_given(out=out, initial=initial, where=where))

    def prod(self, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False,
             initial: Any = _NO_VALUE, where: Any = True) -> Any:
        """``np.prod``."""
        if out is None and initial is _NO_VALUE and where is True:
            return np.prod(self, axis=axis, dtype=dtype, keepdims=keepdims)
        return np.prod(self, axis=axis, dtype=dtype, keepdims=keepdims,
                       **_given(out=out, initial=initial, where=where))

    def mean(self, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False, *,
             where: Any = True) -> Any:
        """``np.mean``."""
        if out is None and where is True:
            return np.mean(self, axis=axis, dtype=dtype, keepdims=keepdims)
        return np.mean(self, axis=axis, dtype=dtype, keepdims=keepdims, **_given(out=out, where=where))

    def max(self, axis: Any = None, out: Any = None, keepdims: bool = False, initial: Any = _NO_VALUE,
            where: Any = True) -> Any:
        """``np.max``."""
        if out is None and initial is _NO_VALUE and where is True:
            return np.max(self, axis=axis, keepdims=keepdims)
        return np.max(self, axis=axis, keepdims=keepdims, **_given(out=out, initial=initial, where=where))

    def min(self, axis: Any = None, out: Any = None, keepdims: bool = False, initial: Any = _NO_VALUE,
            where: Any = True) -> Any:
        """``np.min``."""
        if out is None and initial is _NO_VALUE and where is True:
            return np.min(self, axis=axis, keepdims=keepdims)
        return np.min(self, axis=axis, keepdims=keepdims, **_given(out=out, initial=initial, where=where))

    def any(self, axis: Any = None, out: Any = None, keepdims: bool = False, *, where: Any = True) -> Any:
        """``np.any``."""
        if out is None and where is True:
            return np.any(self, axis=axis, keepdims=keepdims)
        return np.any(self, axis=axis, keepdims=keepdims, **_given(out=out, where=where))

    def all(self, axis: Any = None, out: Any = None, keepdims: bool = False, *, where: Any = True) -> Any:
        """``np.all``."""
        if out is None and where is True:
            return np.all(self, axis=axis, keepdims=keepdims)
        return np.all(self, axis=axis, keepdims=keepdims, **_given(out=out, where=where))

    def std(self, axis: Any = None, dtype: Any = None, out: Any = None, ddof: Any = 0, keepdims: bool = False, *,
            where: Any = True, mean: Any = _NO_VALUE) -> Any:
        """``np.std`` (NumPy's method takes no ``correction``: ``np.std`` does)."""
        return np.std(self, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims,
                      **_given(out=out, where=where, mean=mean))

    def var(self, axis: Any = None, dtype: Any = None, out: Any = None, ddof: Any = 0, keepdims: bool = False, *,
            where: Any = True, mean: Any = _NO_VALUE) -> Any:
        """``np.var`` (NumPy's method takes no ``correction``: ``np.var`` does)."""
        return np.var(self, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims,
                      **_given(out=out, where=where, mean=mean))

    def argmax(self, axis: Any = None, out: Any = None, *, keepdims: bool = False) -> Any:
        """``np.argmax``: the index of the first maximum (flat, or along ``axis``)."""
        return np.argmax(self, axis=axis, keepdims=keepdims, **_given(out=out))

    def argmin(self, axis: Any = None, out: Any = None, *, keepdims: bool = False) -> Any:
        """``np.argmin``: the index of the first minimum (flat, or along ``axis``)."""
        return np.argmin(self, axis=axis, keepdims=keepdims, **_given(out=out))

    def cumsum(self, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
        """``np.cumsum``: running sums (of the flat array without ``axis``)."""
        return np.cumsum(self, axis=axis, dtype=dtype, **_given(out=out))

    def cumprod(self, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
        """``np.cumprod``: running products (of the flat array without ``axis``)."""
        return np.cumprod(self, axis=axis, dtype=dtype, **_given(out=out))

    def clip(self, min: Any = None, max: Any = None, out: Any = None, **kwargs: Any) -> Any:
        """``np.clip``: the values limited to ``[min, max]``."""
        return np.clip(self, min, max, **_given(out=out), **kwargs)

    def round(self, decimals: int = 0, out: Any = None) -> Any:
        """``np.round``: rounded to ``decimals`` (half to even, as NumPy)."""
        return np.round(self, decimals, **_given(out=out))

    # -- Python values: each a small collective every rank makes, unless the array is replicated ----------------
    def item(self, *args: Any) -> Any:
        """The element at ``args`` as a Python scalar on every rank, as NumPy's ``item``: no argument, the only
        element; an int, a flat index; one int per dim (or their tuple), a position.  NumPy's errors come first;
        then only that element moves (one broadcast from its owner; nothing when replicated).

        Example:
            >>> import dtensor_np as dt
            >>> x = dt.distribute_tensor(np.arange(6.0).reshape(2, 3), dt.DeviceMesh((2,)), [dt.Shard(0)])
            >>> x.item(4), x.item(1, 2), x[0, 1].item()
            (4.0, 5.0, 1.0)
        """
        np.broadcast_to(np.zeros((), self.dtype), self.shape).item(*args)  # NumPy's errors, and nothing moves
        if not self.shape:
            return _host(self.full_tensor(), None).item()
        if len(args) == 1 and not isinstance(args[0], tuple):
            flat = operator.index(args[0])
            index = tuple(int(i) for i in np.unravel_index(flat + self.size if flat < 0 else flat, self.shape))
        else:
            index = tuple(operator.index(i) for i in (args[0] if len(args) == 1 else args)) or (0,) * self.ndim
        return _host(raw_getitem(self, index).full_tensor(), None).item()

    def tolist(self) -> Any:
        """The whole array as nested Python lists (a Python scalar for a 0-d array) on every rank: gathered
        (``full_tensor``), as NumPy's ``tolist`` gives it.

        Example:
            >>> import dtensor_np as dt
            >>> dt.distribute_tensor(np.arange(4).reshape(2, 2), dt.DeviceMesh((2,)), [dt.Shard(1)]).tolist()
            [[0, 1], [2, 3]]
        """
        return _host(self.full_tensor(), None).tolist()

    def tobytes(self, order: str = "C") -> bytes:
        """The whole array's bytes, gathered on every rank (``full_tensor``): in C order by default, as NumPy's
        ``tobytes`` (``"F"``: Fortran order; ``"A"``: Fortran order for a Fortran-contiguous array)."""
        if order not in ("C", "F", "A", "K", None):
            raise ValueError(f"order must be one of 'C', 'F', 'A', or 'K' (got {order!r})")
        if order in ("A", "K"):
            order = "F" if self.flags.fnc else "C"
        return _host(self.full_tensor(), None).tobytes(order=order or "C")

    @property
    def itemsize(self) -> int:
        """The bytes of one element (from the dtype)."""
        return self._spec.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """The bytes of the whole array, over every rank (``size * itemsize``, as NumPy's; no communication)."""
        return self.size * self._spec.dtype.itemsize

    @property
    def flags(self) -> "Flags":
        """NumPy's flags of this array's NumPy twin (contiguity from its strides, :mod:`dtensor_np.strides`;
        ``writeable`` False for a read-only view; ``owndata`` for an array that is no view), read-only.

        Example:
            >>> import dtensor_np as dt
            >>> x = dt.distribute_tensor(np.zeros((2, 3)), dt.DeviceMesh((2,)), [dt.Shard(0)])
            >>> x.flags.c_contiguous, x.T.flags.f_contiguous, x.T.flags.owndata, x.diagonal().flags.writeable
            (True, True, False, False)
        """
        return Flags(self)

    @property
    def flat(self) -> "FlatIter":
        """NumPy's ``flat``: ``x.flat[i]`` reads and ``x.flat[i] = v`` writes by flat (C-order) index, and
        ``for v in x.flat`` iterates over the elements (see :class:`FlatIter`)."""
        return FlatIter(self)

    # -- Python builtins, as on ndarrays ---------------------------------------------------------------------
    def __contains__(self, value: Any) -> bool:
        """``value in x``: NumPy's ``(x == value).any()`` (a reduction, then one small collective)."""
        return bool((self == value).any())

    def __round__(self, ndigits: Optional[int] = None) -> Any:
        """``round(x)`` of a 0-d array as of a NumPy scalar: a Python int without ``ndigits``, else ``np.round``
        (a 0-d array).  NumPy's arrays of 1 dim or more have no ``__round__``: a TypeError, as theirs."""
        if self.ndim:
            raise TypeError(f"type DTensor of {self.ndim} dim{'s' if self.ndim > 1 else ''} doesn't define "
                            "__round__ method (neither does numpy.ndarray): use np.round(x, decimals)")
        if self.dtype.kind not in "iuf":
            raise TypeError(f"type numpy.{self.dtype.name} doesn't define __round__ method")
        if ndigits is None:
            return round(self.item())
        return np.round(self, ndigits)

    def __format__(self, format_spec: str) -> str:
        """``format(x, spec)``, f-strings: a 0-d array formats as its NumPy scalar; a larger one only with an empty
        spec (its ``str``), as NumPy's."""
        if not self.shape:
            return format(_host(self.full_tensor(), None)[()], format_spec)
        if format_spec:
            raise TypeError("unsupported format string passed to DTensor.__format__")
        return str(self)

    def __repr__(self) -> str:
        """NumPy's repr of the values (``DTensor(`` for ``array(``), then the placements and the mesh.

        A large array (``size`` above ``np.get_printoptions()["threshold"]``) prints NumPy's summary and only its
        corners (``edgeitems`` along each long dim) are gathered.  A collective every rank makes, unless the array
        is replicated.

        Example:
            >>> import dtensor_np as dt
            >>> dt.distribute_tensor(np.arange(4.0).reshape(2, 2), dt.DeviceMesh((2,)), [dt.Shard(0)])
            DTensor([[0., 1.],
                     [2., 3.]], placements=S(0), mesh=DeviceMesh((2,)))
        """
        return array_text(self, True)

    def __str__(self) -> str:
        """NumPy's str of the values (summarised as :meth:`__repr__`), then the placements and the mesh."""
        return array_text(self, False)


register_sharded_type(DTensor)
_fast_get = FAST_PATH.get
_SCALAR_OPERANDS = PLAIN_TYPES | FLOAT_TYPES | {complex, np.complex64, np.complex128}


def _fast_operator(name: str, ufunc: Any, reflected: bool) -> Any:
    """``DTensor.__add__`` and co: a repeated call with a DTensor or a Python/NumPy scalar is one lookup.

    A first such call goes straight to the ufunc's dispatch with the key it
    built (one key, one probe); any other operand (an array, an object that
    defers with ``__array_ufunc__ = None``) goes through
    ``NDArrayOperatorsMixin``'s operator, which calls the ufunc (so
    ``__array_ufunc__``), as NumPy's operators do.
    """
    slow = getattr(NDArrayOperatorsMixin, name)

    def operator_(self: "DTensor", other: Any) -> Any:
        if other.__class__ is not DTensor and other.__class__ not in _SCALAR_OPERANDS:
            return slow(self, other)  # NumPy's rules: an operand may defer (__array_ufunc__ = None) or be an array
        args = (other, self) if reflected else (self, other)
        try:
            key = call_key(ufunc, args)
            entry = _fast_get(key)
            if entry is not None:
                return entry(args)
            return dispatch_ufunc(ufunc, "__call__", args, {}, key)
        except Exception as error:  # as in __array_ufunc__
            note_local_error(error)
            raise

    operator_.__name__ = operator_.__qualname__ = name
    operator_.__doc__ = slow.__doc__
    return operator_


for _name, _ufunc in (("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("truediv", np.true_divide),
                      ("matmul", np.matmul), ("pow", np.power), ("floordiv", np.floor_divide), ("mod", np.remainder)):
    setattr(DTensor, f"__{_name}__", _fast_operator(f"__{_name}__", _ufunc, False))
    setattr(DTensor, f"__r{_name}__", _fast_operator(f"__r{_name}__", _ufunc, True))



def _equality_operator(name: str, ufunc: np.ufunc, unequal: bool) -> Any:
    """``DTensor.__eq__``/``__ne__``: NumPy's operators, which compare with a value no ufunc loop takes (a string,
    None, a dict, any object) as unequal everywhere (``x == "a"`` is all False), with no communication."""
    fast = _fast_operator(name, ufunc, False)

    def operator_(self: "DTensor", other: Any) -> Any:
        if isinstance(other, (str, bytes)) or _object_operand(other):
            return _unequal(self, unequal)
        return fast(self, other)

    operator_.__name__ = operator_.__qualname__ = name
    operator_.__doc__ = fast.__doc__
    return operator_


def _object_operand(other: Any) -> bool:
    """An operand NumPy takes as a 0-d object array (None, a dict, a set, any object that is no number or array):
    ``np.equal``/``np.not_equal`` compare it as unequal everywhere; a string or bytes has no loop there."""
    return other is None or (
        not isinstance(other, (str, bytes, DTensor, np.ndarray, list, tuple, int, float, complex, np.generic))
        and not hasattr(other, "__array_ufunc__") and not hasattr(other, "__array__"))


def _unequal(x: "DTensor", unequal: bool) -> "DTensor":
    """All True (``unequal``) or all False, bool, on ``x``'s placements: no communication."""
    return np.ones_like(x, dtype=bool) if unequal else np.zeros_like(x, dtype=bool)


DTensor.__eq__ = _equality_operator("__eq__", np.equal, False)  # type: ignore[method-assign,assignment]
DTensor.__ne__ = _equality_operator("__ne__", np.not_equal, True)  # type: ignore[method-assign,assignment]

_NAMESPACE_FACTORY: list[Any] = []  # dtensor_np.array_api.namespace, registered when that package is imported


def _host(array: Any, dtype: Any) -> np.ndarray:
    """A new writable NumPy array of ``array`` (copied from the device for CuPy), cast to ``dtype`` if given."""
    if array_library(array) == "cupy":
        array = array.get()
    return np.array(array, dtype=dtype, copy=True)


def readonly(array: Any) -> Any:
    """A read-only view of a NumPy array (itself when already read-only); a CuPy array as it is.

    Example:
        >>> a = np.zeros(2)
        >>> v = readonly(a)
        >>> v.flags.writeable, np.shares_memory(a, v), a.flags.writeable
        (False, True, True)
    """
    if array.__class__ is not np.ndarray or not array.flags.writeable:
        return array
    view = array.view()
    view.flags.writeable = False
    return view


def register_namespace_factory(make: Any) -> None:
    """Give ``DTensor.__array_namespace__`` the function ``mesh -> namespace`` for arrays made outside a namespace."""
    _NAMESPACE_FACTORY[:] = [make]


_UNSAFE_OUT = frozenset({np.sum, np.mean, np.max, np.min, np.amax, np.amin, np.prod, np.var, np.nansum, np.nanmax,
                         np.nanmin, np.nanprod, np.any, np.all, np.median, np.cumsum, np.cumprod, np.nancumsum,
                         np.nancumprod, np.trace, np.argmax, np.argmin})
"""NumPy functions whose result NumPy casts into ``out=`` whatever the dtypes (its reductions: ``casting='unsafe'``,
``np.sum(x, axis=0, out=int_array)`` truncates); every other ``out=`` follows ``same_kind``."""


def _rebind_outputs(out: Any, result: Any, name: str, casting: Optional[str]) -> Any:
    """``out=`` of a NumPy call on DTensors: every output handle is rebound to its result (NumPy's casting rule).

    The result keeps the output's placements (redistributed to them) and dtype
    (cast when ``casting`` allows it, ``same_kind`` by default).
    """
    outs = out if isinstance(out, tuple) else (out,)
    results = result if isinstance(result, tuple) else (result,)
    if len(outs) != len(results):
        raise ValueError(f"{name}: expected {len(results)} output(s) in out=, got {len(outs)}")
    rule = casting or "same_kind"
    for target, value in zip(outs, results):
        if not isinstance(target, DTensor):
            raise TypeError(
                f"{name}: out= must be DTensors (the result is distributed), got {type(target).__name__}; "
                "assign x.full_tensor() to a NumPy array instead"
            )
        if value.shape != target.shape:
            raise ValueError(
                f"non-broadcastable output operand with shape {target.shape} doesn't match the broadcast shape "
                f"{value.shape}"
            )
        if value.mesh is not target.mesh:
            raise ShardingError(f"{name}: out= lives on {target.mesh!r}, the result on {value.mesh!r}")
        if value.dtype != target.dtype:
            if not np.can_cast(value.dtype, target.dtype, casting=rule):
                raise TypeError(
                    f"Cannot cast ufunc '{name}' output from {value.dtype!r} to {target.dtype!r} with casting rule "
                    f"{rule!r}"
                )
            value = run_rule(ASTYPE, (value, target.dtype), {})
        if value.placements != target.placements:
            value = value.redistribute(target.placements)
        target._rebind(value)
    return outs[0] if len(outs) == 1 else outs

# -- the methods' helpers ---------------------------------------------------------------------------------------
def _given(**kwargs: Any) -> dict[str, Any]:
    """The keyword arguments of a method call that are not at their defaults (None, NumPy's ``<no value>``,
    ``where=True``): what the method passes on to its NumPy function."""
    return {name: value for name, value in kwargs.items()
            if value is not None and value is not _NO_VALUE and not (name == "where" and value is True)}


def map_shards(x: DTensor, fn: Callable[[Any], Any], dtype: Any, shape: Optional[Sequence[int]] = None) -> DTensor:
    """A new DTensor of ``fn`` applied to each held shard of ``x``, with ``x``'s placements, of ``dtype`` and
    ``shape`` (default ``x``'s): NumPy's byte-level methods (``byteswap``, ``view(dtype)``), each rank on its own
    block.  A pending ``Partial`` is reduced first (the bytes of a partial sum mean nothing); nothing else moves.

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.arange(3, dtype=np.int16), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> map_shards(x, lambda a: a.view(np.uint16), np.uint16).full_tensor().tolist()
        [0, 1, 2]
    """
    if any(isinstance(p, Partial) for p in x.placements):
        x = x.redistribute(tuple(Replicate() if isinstance(p, Partial) else p for p in x.placements))
    spec = x._spec
    meta = TensorMeta(tuple(spec.shape if shape is None else shape), np.dtype(dtype))
    out = DTensorSpec(spec.mesh, spec.placements, meta, spec.shard_order)
    return x._result_class({r: fn(a) for r, a in x._shards.items()}, out, namespace=x._namespace)


def swap_bytes(a: Any) -> Any:
    """NumPy's ``a.byteswap()`` of a NumPy or CuPy array (CuPy has none): the bytes of every element reversed, of
    each part of a complex one, in a new array.

    Example:
        >>> swap_bytes(np.array([1, 256], np.int16)).tolist()
        [256, 1]
    """
    if hasattr(a, "byteswap"):
        return a.byteswap()
    xp = array_module(a)
    part = a.dtype.itemsize // (2 if a.dtype.kind == "c" else 1)
    flat = xp.ascontiguousarray(a).reshape(-1)
    swapped = flat.view(xp.uint8).reshape(-1, part)[:, ::-1]
    return xp.ascontiguousarray(swapped).reshape(-1).view(a.dtype).reshape(a.shape)


def printed_values(x: DTensor) -> tuple[np.ndarray, bool]:
    """The values NumPy prints of ``x`` as a host array, and whether NumPy summarises them.

    An array of at most ``threshold`` elements is gathered whole (so is one printed with ``edgeitems=0``, whose
    widths NumPy works out from every value).  A larger one: only its corners
    (``edgeitems`` at each end of each dim longer than twice that; one ``x[np.ix_(...)]``, so only they move),
    with a stand-in element where NumPy prints ``...``: it is never printed, nor read for the widths (NumPy
    works them out from the corners alone), so the text is NumPy's for the whole array.
    """
    options = np.get_printoptions()
    if x.size == 0:
        return np.empty(x.shape, x.dtype), False
    e = options["edgeitems"]
    if not x.shape or x.size <= options["threshold"] or e == 0:  # edgeitems=0: NumPy reads every value for widths
        return _host(x.full_tensor(), None), x.size > options["threshold"]
    long = [n > 2 * e for n in x.shape]
    picks = [np.concatenate([np.arange(e), np.arange(n - e, n)]) if cut else np.arange(n)
             for n, cut in zip(x.shape, long)]
    shown = _host(raw_getitem(x, np.ix_(*picks)).full_tensor(), None)
    for d, cut in enumerate(long):
        if cut:
            lead = (slice(None),) * d
            middle = np.zeros(shown.shape[:d] + (1,) + shown.shape[d + 1:], shown.dtype)
            shown = np.concatenate([shown[lead + (slice(0, e),)], middle, shown[lead + (slice(e, None),)]], axis=d)
    return shown, True


def _dtype_text(dtype: np.dtype, empty: bool) -> str:
    """NumPy's ``dtype=...`` in the repr of an array of ``dtype`` (always there when ``empty``), or ``""`` where
    NumPy leaves it out (``float64``, ``int64``, ``bool``, ``complex128``)."""
    text = np.array_repr(np.zeros(0 if empty else 1, dtype))
    at = text.rfind("dtype=")
    return text[at:-1] if at >= 0 else ""


def array_text(x: DTensor, as_repr: bool, *, placed: bool = True, max_line_width: Optional[int] = None,
               precision: Optional[int] = None, suppress_small: Optional[bool] = None) -> str:
    """``repr(x)`` (``as_repr``) or ``str(x)``: NumPy's text of the values (``DTensor(`` for ``array(``; a large
    array summarised, only its corners gathered: :func:`printed_values`), then, where ``placed``, the placements and the
    mesh.  Without them (``placed=False``) and with NumPy's other arguments, it is ``np.array_repr`` and
    ``np.array_str`` of a DTensor.

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.arange(3, dtype=np.int8), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> array_text(x, True)
        'DTensor([0, 1, 2], dtype=int8, placements=S(0), mesh=DeviceMesh((2,)))'
        >>> array_text(x, False)
        '[0 1 2] (placements=S(0), mesh=DeviceMesh((2,)))'
        >>> array_text(x, True, placed=False)
        'DTensor([0, 1, 2], dtype=int8)'
    """
    shown, summarised = printed_values(x)
    options = np.get_printoptions()
    where = [f"placements={placements_str(x.placements)}", f"mesh={x.mesh!r}"] if placed else []
    prefix = "DTensor("
    with np.printoptions(threshold=0) if summarised else contextlib.nullcontext():
        if not as_repr:
            text = np.array_str(shown, max_line_width, precision, suppress_small)
            return f"{text} ({', '.join(where)})" if where else text
        values = np.array2string(shown, max_line_width, precision, suppress_small, separator=", ", prefix=prefix,
                                 suffix=")")
    extras = []
    if (x.size == 0 and x.shape != (0,)) or (summarised and options["legacy"] is False):
        extras.append(f"shape={x.shape}")
    dtype = _dtype_text(x.dtype, x.size == 0)
    if dtype:
        extras.append(dtype)
    if not extras and not where:
        return prefix + values + ")"
    text = prefix + values + ","
    tail = ", ".join(extras + where) + ")"
    last_line = len(text) - (text.rfind("\n") + 1)
    width = options["linewidth"] if max_line_width is None else max_line_width
    spacer = "\n" + " " * len(prefix) if last_line + len(tail) + 1 > width else " "
    return text + spacer + tail


class Flags:
    """``x.flags``: NumPy's flags of a DTensor, read-only.

    ``c_contiguous``/``f_contiguous`` are those of its NumPy twin (the strides NumPy would give it:
    :mod:`dtensor_np.strides`, a view's worked out along its chain), ``owndata`` is ``x.base is None``,
    ``writeable`` is False for a read-only view (``diagonal``, ``broadcast_to``), ``aligned`` is True and
    ``writebackifcopy`` False; the combined flags (``behaved``, ``carray``, ``forc``...), the mapping keys
    (``flags["C"]``, ``flags["WRITEABLE"]``...) and ``num`` are NumPy's.

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.zeros((2, 3)), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> f = x.T.flags
        >>> f.c_contiguous, f["F"], f.owndata, f.writeable, f.num == np.zeros((2, 3)).T.flags.num
        (False, True, False, True, True)
    """

    __slots__ = ("_values",)
    _KEYS = {"C": "C_CONTIGUOUS", "CONTIGUOUS": "C_CONTIGUOUS", "F": "F_CONTIGUOUS", "FORTRAN": "F_CONTIGUOUS",
             "O": "OWNDATA", "W": "WRITEABLE", "A": "ALIGNED", "X": "WRITEBACKIFCOPY", "B": "BEHAVED",
             "CA": "CARRAY", "FA": "FARRAY"}
    _BITS = {"C_CONTIGUOUS": 0x1, "F_CONTIGUOUS": 0x2, "OWNDATA": 0x4, "WRITEABLE": 0x400, "ALIGNED": 0x100,
             "WRITEBACKIFCOPY": 0x2000}  # in the order of NumPy's repr

    def __init__(self, x: DTensor) -> None:
        twin = proxy(x.shape, getattr(x, "_twin", None), x.dtype).flags
        c, f, w = bool(twin.c_contiguous), bool(twin.f_contiguous), not getattr(x, "readonly", False)
        values = {"C_CONTIGUOUS": c, "F_CONTIGUOUS": f, "OWNDATA": x.base is None, "WRITEABLE": w, "ALIGNED": True,
                  "WRITEBACKIFCOPY": False, "BEHAVED": w, "CARRAY": w and c, "FARRAY": not c,  # NumPy's test: any of
                  # aligned, writeable, F-contiguous, and not C-contiguous (so True for a non-contiguous array)
                  "FNC": f and not c, "FORC": f or c}
        object.__setattr__(self, "_values", values)

    def __getitem__(self, key: str) -> bool:
        name = self._KEYS.get(key, key) if isinstance(key, str) else key
        if name not in self._values:
            raise KeyError("Unknown flag")
        return self._values[name]

    def __setitem__(self, key: str, value: Any) -> None:
        raise ValueError(REFUSED_ATTRIBUTES["setflags"])

    def __setattr__(self, name: str, value: Any) -> None:
        raise ValueError(REFUSED_ATTRIBUTES["setflags"])

    c_contiguous = contiguous = property(lambda self: self._values["C_CONTIGUOUS"])
    f_contiguous = fortran = property(lambda self: self._values["F_CONTIGUOUS"])
    owndata = property(lambda self: self._values["OWNDATA"])
    writeable = property(lambda self: self._values["WRITEABLE"])
    aligned = property(lambda self: self._values["ALIGNED"])
    writebackifcopy = property(lambda self: self._values["WRITEBACKIFCOPY"])
    behaved = property(lambda self: self._values["BEHAVED"])
    carray = property(lambda self: self._values["CARRAY"])
    farray = property(lambda self: self._values["FARRAY"])
    fnc = property(lambda self: self._values["FNC"])
    forc = property(lambda self: self._values["FORC"])

    @property
    def num(self) -> int:
        """NumPy's bit field of the flags."""
        return sum(bit for name, bit in self._BITS.items() if self._values[name])

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Flags) and self._values == other._values

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "".join(f"  {name} : {self._values[name]}\n" for name in self._BITS)


class FlatIter:
    """``x.flat``: NumPy's flat iterator on a DTensor, by position in C order.

    * ``x.flat[i]`` (an int): that element as a 0-d array, as ``x.item(i)`` finds it (one broadcast from its
      owner); a slice, an int or boolean array (a DTensor one is gathered): ``x[np.unravel_index(positions,
      x.shape)]``, a new array of the index's shape (only those elements move); ``x.flat[...]``: ``np.ravel(x)``
      as a new array.  NumPy's errors.
    * ``x.flat[index] = v``: ``x[np.unravel_index(positions, x.shape)] = v`` (through the base of a view), with
      NumPy's rules: ``v``'s values in C order, repeated over the positions when there are fewer, the last of
      duplicate positions kept; one element takes one value.
    * ``for v in x.flat``: the elements as 0-d arrays (:func:`dtensor_np.indexing.elements`); ``len(x.flat)``,
      ``x.flat.base``, ``x.flat.copy()`` (``x.flatten()``).

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.arange(6.0).reshape(2, 3), dt.DeviceMesh((2,)), [dt.Shard(1)])
        >>> x.flat[[1, 4]].full_tensor().tolist(), float(x.flat[-1])
        ([1.0, 4.0], 5.0)
        >>> x.flat[::2] = [10.0, 20.0]
        >>> x.full_tensor().tolist()
        [[10.0, 1.0, 20.0], [3.0, 10.0, 5.0]]
    """

    __slots__ = ("base",)

    def __init__(self, base: DTensor) -> None:
        self.base = base

    def __len__(self) -> int:
        return self.base.size

    def __iter__(self) -> Any:
        return elements(self.base, flatten=True)

    def copy(self) -> DTensor:
        """A new 1-d array of the elements (``x.flatten()``)."""
        return self.base.flatten()

    def _target(self) -> DTensor:
        """The array the positions index: ``x``, or for a 0-d ``x`` its 1-element view."""
        x = self.base
        return x if x.shape else x.reshape(1)

    def __getitem__(self, index: Any) -> Any:
        x = self._target()
        positions = flat_positions(x.size, index)
        if positions is None:
            return compute(np.ravel, (x,))
        return raw_getitem(x, _unravel(positions, x.shape))

    def __setitem__(self, index: Any, value: Any) -> None:
        x = self._target()
        positions = flat_positions(x.size, index)
        values = value.reshape(-1) if isinstance(value, DTensor) else np.asarray(value).reshape(-1)
        if isinstance(positions, int):
            if values.size != 1:
                raise ValueError("Error setting single item of array.")
            x[_unravel(positions, x.shape)] = values[0]
            return
        count = x.size if positions is None else positions.size
        if values.size == 0 or count == 0:
            return
        if values.size == 1:
            values = values[0]
        elif values.size != count:  # NumPy repeats the values over the positions
            values = values[np.arange(count) % values.size]
        if positions is None:
            x[...] = values if values.ndim == 0 else values.reshape(x.shape)
        else:
            x[_unravel(positions.reshape(-1), x.shape)] = values

    def __repr__(self) -> str:
        return f"<DTensor.flat of shape {self.base.shape}>"


def _unravel(positions: Any, shape: tuple[int, ...]) -> tuple[Any, ...]:
    """The index of ``shape`` of flat ``positions`` (an int: ints, an array: arrays of its shape)."""
    index = np.unravel_index(positions, shape)
    return tuple(int(i) for i in index) if isinstance(positions, int) else index


_NO_BUFFER = ("a DTensor has no single buffer (its blocks live on many ranks): use x.to_local() for this rank's "
              "block, or x.full_tensor() for the whole array gathered on every rank")
REFUSED_ATTRIBUTES = {
    "ctypes": f"x.ctypes: {_NO_BUFFER}",
    "data": f"x.data: {_NO_BUFFER}",
    "strides": ("x.strides: a DTensor has no memory layout of its own (its blocks live on many ranks): use "
                "x.to_local().strides for this rank's block, x.flags for NumPy's contiguity flags"),
    "tofile": f"x.tofile: {_NO_BUFFER}, then its tofile (on one rank)",
    "dump": ("x.dump: a DTensor is not pickled as one array: pickle x.full_tensor() (gathered) or each rank's "
             "x.to_local()"),
    "dumps": ("x.dumps: a DTensor is not pickled as one array: pickle x.full_tensor() (gathered) or each rank's "
              "x.to_local()"),
    "getfield": ("x.getfield: a DTensor has no structured dtype and no buffer to read a field of: use "
                 "x.view(dtype) to read the bytes of each element as another dtype"),
    "setfield": ("x.setfield: a DTensor has no structured dtype and no buffer to write a field of: write elements "
                 "with x[...] = v"),
    "setflags": ("x.setflags: a DTensor's flags follow from what it is (x.flags reads them); a read-only view is "
                 "one of NumPy's (np.broadcast_to(x, x.shape))"),
}
"""The attributes of ``numpy.ndarray`` a DTensor has not, and what to use instead (each an ``AttributeError``
naming it).

Example:
    >>> sorted(REFUSED_ATTRIBUTES)[:3]
    ['ctypes', 'data', 'dump']
"""


def _refused(name: str, reason: str) -> property:
    def refuse(self: DTensor) -> Any:
        raise AttributeError(reason)

    refuse.__name__ = name
    refuse.__doc__ = f"Refused (an AttributeError): {reason}."
    return property(refuse)


for _name, _reason in REFUSED_ATTRIBUTES.items():
    setattr(DTensor, _name, _refused(_name, _reason))


# DTensor.redistribute builds its result from a shards dict that nothing else holds (no copy).
_new_dtensor = DTensor.__new__
_set_shards = DTensor._shards.__set__  # type: ignore[attr-defined]
_set_spec = DTensor._spec.__set__  # type: ignore[attr-defined]
_set_namespace = DTensor._namespace.__set__  # type: ignore[attr-defined]


def _from_parts(shards: dict, spec: DTensorSpec, namespace: Any) -> DTensor:
    """A DTensor of a shards dict that nothing else holds (no copy, no check): the fast path's results."""
    out = _new_dtensor(DTensor)
    _set_shards(out, shards)
    _set_spec(out, spec)
    _set_namespace(out, namespace)
    return out


register_fast_type(DTensor, _from_parts)
DTensor._result_class = DTensor  # type: ignore[attr-defined]  # what an op on any kind of DTensor returns


def compute(func: Any, args: tuple, kwargs: Optional[Mapping[str, Any]] = None) -> Any:
    """``func(*args, **kwargs)`` on DTensors through the fast path or the dispatcher: the op's own result, never
    a view of its input (the view ops of :mod:`dtensor_np.views` work their values out with it).

    Example:
        >>> x = distribute_tensor(np.arange(4.0), DeviceMesh((2,)), [Replicate()])
        >>> y = compute(np.flip, (x,))
        >>> y.base is None, y.full_tensor().tolist()
        (True, [3.0, 2.0, 1.0, 0.0])
    """
    kwargs = dict(kwargs) if kwargs else {}
    key = call_key(func, args, kwargs)
    entry = _fast_get(key) if key is not None else None
    return entry(args) if entry is not None else dispatch(func, args, kwargs, key)


def raw_getitem(x: DTensor, index: Any) -> DTensor:
    """``x[index]``'s value as a new array, never a view (what a view by ``index`` works its value out with)."""
    key = call_key(GETITEM, (x, index))
    entry = _fast_get(key) if key is not None else None
    return entry((x, index)) if entry is not None else getitem(x, index, key)


class _Hooks:
    """What :mod:`dtensor_np.views` gives DTensor's methods (it imports this module: the hooks are registered), and
    the methods made of views (``view``), from :mod:`dtensor_np.functions.ndarray_methods`."""

    def __init__(self) -> None:
        self.function_views: dict[Any, Callable[..., Any]] = {np.transpose: lambda args, kwargs, result: result}
        self.functions: dict[Any, Callable[..., Any]] = {}
        self.index_view: Callable[[Any, Any, Any], Any] = lambda x, index, result: result
        self.layout: Callable[[Any, Any, Any], Any] = lambda func, inputs, result: result
        self.methods: dict[str, Callable[..., Any]] = {}


_HOOKS = _Hooks()


def register_views(index_view: Callable[[Any, Any, Any], Any], function_views: Mapping[Any, Callable[..., Any]],
                   functions: Mapping[Any, Callable[..., Any]], layout: Callable[[Any, Any, Any], Any]) -> None:
    """Give DTensor the views of :mod:`dtensor_np.views`: ``index_view(x, index, result)`` for ``x[index]``,
    ``function_views[f](args, kwargs, result)`` for the NumPy functions that return views, ``functions[f]`` for
    the NumPy functions run directly (``np.copyto``, ``np.split``...), ``layout(f, inputs, result)`` for the
    order of a new array made from views."""
    _HOOKS.index_view = index_view
    _HOOKS.function_views.update(function_views)
    _HOOKS.functions.update(functions)
    _HOOKS.layout = layout


def register_methods(methods: Mapping[str, Callable[..., Any]]) -> None:
    """Give DTensor the methods made of views, by name (``view``: :mod:`dtensor_np.functions.ndarray_methods`)."""
    _HOOKS.methods.update(methods)


def _as_tuple(placements: Sequence[Placement]) -> tuple[Placement, ...]:
    if not isinstance(placements, (list, tuple)):
        raise TypeError(f"placements must be a list or tuple of placements, got {placements!r}")
    return tuple(placements)


def distribute_tensor(
    array: Any,
    mesh: DeviceMesh,
    placements: Sequence[Placement],
    *,
    src_data_rank: Optional[int] = 0,
) -> DTensor:
    """Split a full array over ``mesh`` by ``placements``.

    Under MPI every rank passes an array of the same shape and dtype (checked
    with one small collective: a mismatch raises on every rank); rank
    ``src_data_rank``'s data is the one distributed, and every rank receives
    only its own block (one ``Alltoallw`` from that rank; a fully replicated
    array is broadcast).  With ``src_data_rank=None`` every rank takes its
    shard from its own copy (after the same check).  ``Partial`` placements
    start from the replicated value (``sum`` divides floats by the group size;
    integers stay on the first rank).

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> x = dt.distribute_tensor(np.arange(6).reshape(2, 3), dt.DeviceMesh((2,)), [dt.Shard(1)])
        >>> x.local_shards()[1].tolist()
        [[2], [5]]
    """
    if not isinstance(mesh, DeviceMesh):
        raise TypeError(f"distribute_tensor needs a DeviceMesh, got {type(mesh).__name__}")
    if src_data_rank is not None:
        if not isinstance(src_data_rank, int) or isinstance(src_data_rank, bool):
            raise TypeError(
                f"src_data_rank must be an int rank in [0, {mesh.world_size}) or None, got {src_data_rank!r}"
            )
        if not 0 <= src_data_rank < mesh.world_size:
            raise ShardingError(f"src_data_rank must be a rank in [0, {mesh.world_size}), got {src_data_rank}")
    backend = backend_for(mesh)
    error = None
    spec = None
    try:
        array = check_array(array)
        spec = DTensorSpec(mesh, _as_tuple(placements), TensorMeta(array.shape, array.dtype))
    except (TypeError, ValueError) as e:
        error = e
    if mesh.backend == "mpi":
        agree_on_array(backend, "distribute_tensor", spec, error)
    elif error is not None:
        raise error
    assert spec is not None
    replicated = spec.with_placements(tuple(Replicate() if isinstance(p, Partial) else p for p in spec.placements),
                                      spec.shard_order)
    if mesh.backend == "mpi" and src_data_rank is not None:
        world = (tuple(range(mesh.world_size)),)
        mine = {backend.ranks[0]: array}
        if replicated.is_replicated():
            shards = backend.broadcast(mine, world, root=src_data_rank, check=False)
        else:  # every rank receives its block only
            blocks = {}
            for r in mesh.all_ranks:
                shape, offset = replicated.local_block(r)
                blocks[r] = (offset, shape)
            shards = backend.call("scatter_blocks", mine, world, check=False, root=src_data_rank, blocks=blocks)
    else:
        # `...` keeps a 0-d block an array (array[()] would be a NumPy scalar)
        shards = {rank: array[replicated.local_index(rank) + (...,)].copy(order="C") for rank in backend.ranks}
    if replicated == spec:
        return DTensor(shards, spec)
    return DTensor(redistribute_shards(shards, replicated, spec), spec)


def agree_on_array(backend: Any, what: str, spec: Optional[DTensorSpec], error: Optional[Exception]) -> None:
    """Under MPI: every rank raises unless every rank's array and placements were accepted with one shape and dtype.

    One small collective (``gather_descriptors``): each rank's status, dtype
    and shape; a rank whose own input was refused raises its own error, the
    others say which rank it was.
    """
    me = backend.ranks[0]
    status = 0 if error is None else (1 if isinstance(error, TypeError) else 2)
    row: tuple[int, ...] = (status,)
    if spec is not None and error is None:
        shape = spec.shape
        row += (dtype_code(spec.dtype), len(shape), zlib.crc32(repr(shape).encode())) + tuple(shape[:_SHOWN_DIMS])
    table = backend.gather_descriptors({me: row})
    failed = {r: desc[0] for r, desc in table.items() if desc[0] != 0}
    if error is not None and len(failed) == len(table):
        raise error  # the same input everywhere: every rank raises its own (identical) error
    if failed:
        r0 = min(failed)
        kind = TypeError if failed[r0] == 1 else ShardingError
        detail = f": {error}" if error is not None else "; see the error raised there"
        raise kind(f"{what}: rank {r0 if error is None else me}'s array or placements were refused{detail}") from error
    metas = {r: desc[1:4] for r, desc in table.items()}
    if len(set(metas.values())) > 1:
        def text(desc: tuple[int, ...]) -> str:
            shape = tuple(desc[4:]) + (("...",) if desc[2] > _SHOWN_DIMS else ())
            return f"{dtype_name(desc[1])} {shape}"

        first = table[min(table)]
        odd = sorted(r for r, m in metas.items() if m != first[1:4])
        raise ShardingError(
            f"{what}: every rank must pass an array of the same shape and dtype: expected {text(first)} "
            f"(rank {min(table)}), got " + ", ".join(f"{text(table[r])} on rank {r}" for r in odd)
        )


_SHOWN_DIMS = 12  # shape dims a descriptor carries for the message (the check compares a hash of the whole shape)
