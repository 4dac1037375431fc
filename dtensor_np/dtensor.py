"""``DTensor``: a NumPy or CuPy array distributed over a mesh, immutable.

A DTensor is its spec (mesh, placements, global shape and dtype) plus the
local shards this process holds: every rank's shard in simulated mode, this
rank's shard under MPI.  Operations return new DTensors.

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

from typing import Any, Mapping, Optional, Sequence

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from .errors import ShardingError
from .local_tensor import LocalTensor
from .mesh import DeviceMesh
from .placements import Partial, Placement, Replicate, placements_str
from .propagation.registry import register_sharded_type
from .redistribute import _RECENT, lookup_full_tensor, lookup_redistribute, redistribute_shards
from .runtime import backend_for
from .spec import DTensorSpec, ShardOrder, TensorMeta, _local_block

__all__ = ["DTensor", "distribute_tensor", "array_library", "check_array"]


def array_library(x: Any) -> str:
    """``"numpy"`` or ``"cupy"``: the library an array belongs to."""
    module = type(x).__module__.split(".")[0]
    return "cupy" if module == "cupy" else "numpy"


def check_array(x: Any, what: str = "array") -> Any:
    """``x`` as a NumPy or CuPy array of a dtype collectives can move; TypeError otherwise."""
    if isinstance(x, np.ndarray) and type(x) is not np.ndarray:  # a mask or matrix semantics would be lost
        masked = isinstance(x, np.ma.MaskedArray)
        kind = "numpy.ma.MaskedArray" if masked else "numpy.matrix" if isinstance(x, np.matrix) else f"{type(x).__module__}.{type(x).__name__}"
        fix = "x.filled(fill_value) (the mask cannot be distributed)" if masked else "np.asarray(x)"
        raise TypeError(f"expected a plain numpy.ndarray or cupy.ndarray for the {what}, got {kind}; pass {fix}")
    if array_library(x) != "cupy" and not isinstance(x, np.ndarray):
        if isinstance(x, (DTensor, LocalTensor)):
            raise TypeError(f"expected a NumPy or CuPy array for the {what}, got a {type(x).__name__}")
        x = np.asarray(x)
    if x.dtype.kind in "OUSVMm":
        raise TypeError(
            f"dtensor_np distributes numeric and bool arrays; the {what} has dtype {x.dtype} "
            f"(object, string, void and datetime dtypes cannot be reduced or moved by MPI)"
        )
    return x


class DTensor(NDArrayOperatorsMixin):
    """A distributed array: a spec plus the local shards held by this process.

    Build one with :func:`distribute_tensor` or :meth:`DTensor.from_local`.

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> mesh = dt.DeviceMesh((2, 2))
        >>> x = dt.distribute_tensor(np.ones((4, 4)), mesh, [dt.Shard(0), dt.Shard(1)])
        >>> x.shape, str(x.spec), x.local_shards()[3].shape
        ((4, 4), 'S(0)S(1)', (2, 2))
    """

    __slots__ = ("_shards", "_spec")

    def __init__(self, shards: Mapping[int, Any], spec: DTensorSpec) -> None:
        # A private dict: nothing mutates it, and local_shards()/to_local() hand out copies of it.
        object.__setattr__(self, "_shards", dict(shards))
        object.__setattr__(self, "_spec", spec)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("DTensor is immutable: operations return new DTensors")

    __hash__ = None  # type: ignore[assignment]  # like ndarray: == is elementwise

    # -- properties ----------------------------------------------------------
    @property
    def spec(self) -> DTensorSpec:
        return self._spec

    @property
    def mesh(self) -> DeviceMesh:
        return self._spec.mesh

    @property
    def placements(self) -> tuple[Placement, ...]:
        return self._spec.placements

    @property
    def shape(self) -> tuple[int, ...]:
        return self._spec.shape

    @property
    def dtype(self) -> np.dtype:
        return self._spec.dtype

    @property
    def ndim(self) -> int:
        return self._spec.ndim

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d DTensor")
        return self.shape[0]

    def __bool__(self) -> bool:
        if self.size != 1:
            raise ValueError(
                f"the truth value of a DTensor with more than one element is ambiguous (shape {self.shape}); "
                "use np.any(x) or np.all(x), then .full_tensor()"
            )
        raise TypeError("bool() of a DTensor would gather it silently; call bool(x.full_tensor())")

    # -- local data ------------------------------------------------------------
    def local_shards(self) -> dict[int, Any]:
        """``{rank: array}`` for the ranks this process holds (all of them when simulated)."""
        return dict(self._shards)

    def to_local(self) -> Any:
        """This rank's array under MPI; a :class:`LocalTensor` of every rank's shard when simulated."""
        if self.mesh.backend == "mpi":
            return next(iter(self._shards.values()))
        return LocalTensor(self._shards)

    def full_tensor(self) -> Any:
        """The whole array, gathered (and reduced) on every rank.

        Example:
            >>> import numpy as np, dtensor_np as dt
            >>> x = dt.distribute_tensor(np.arange(3), dt.DeviceMesh((2,)), [dt.Partial()])
            >>> x.full_tensor().tolist()
            [0, 1, 2]
        """
        run, rank, local = lookup_full_tensor(self._spec)
        if run is None:
            return next(iter(self._shards.values()))
        if rank is not None:
            return local(self._shards[rank])
        return next(iter(run(self._shards).values()))

    # -- placement changes -----------------------------------------------------
    def redistribute(self, placements: Sequence[Placement], *, shard_order: Optional[ShardOrder] = None) -> "DTensor":
        """The same array on new placements (a new DTensor; this one is unchanged).

        Example:
            >>> import numpy as np, dtensor_np as dt
            >>> mesh = dt.DeviceMesh((2, 2))
            >>> x = dt.distribute_tensor(np.arange(16.0).reshape(4, 4), mesh, [dt.Shard(0), dt.Replicate()])
            >>> str(x.redistribute([dt.Replicate(), dt.Shard(1)]).spec)
            'RS(1)'
        """
        # The cached path inline: the entries this spec object used lately, by identity and tuple
        # equality (no hashing); lookup_redistribute checks the input, plans, and fills the caches.
        spec = self._spec
        recent = _recent_get(id(spec))
        cls = placements.__class__
        if recent is not None and recent[0] is spec and (cls is list or cls is tuple):
            key = tuple(placements) if cls is list else placements
            for known, order, found in recent[1]:
                if known == key and order == shard_order:
                    target, run, rank, local = found
                    break
            else:
                target, run, rank, local = lookup_redistribute(spec, placements, shard_order)
        else:
            target, run, rank, local = lookup_redistribute(spec, placements, shard_order)
        if run is None:
            return self
        out = _new_dtensor(DTensor)
        if rank is None:
            _set_shards(out, run(self._shards))
        else:  # MPI: this rank's array straight through the prepared steps
            _set_shards(out, {rank: local(self._shards[rank])})
        _set_spec(out, target)
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
        from .from_local import build_from_local

        return build_from_local(local, mesh, placements, shape, run_check)

    # -- NumPy protocols -------------------------------------------------------
    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        from .dispatch import dispatch_ufunc

        return dispatch_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        from .dispatch import dispatch

        return dispatch(func, args, kwargs)

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            "a DTensor does not turn into one array implicitly (that would gather it silently); "
            "call x.full_tensor() for the whole array or x.to_local() for the local shard"
        )

    # -- array methods (each is the NumPy function of the same name) -----------
    @property
    def T(self) -> "DTensor":
        return np.transpose(self)

    def transpose(self, *axes: Any) -> "DTensor":
        if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list))):
            axes = axes[0]
        return np.transpose(self, axes or None)

    def reshape(self, *shape: Any) -> "DTensor":
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return np.reshape(self, shape)

    def ravel(self) -> "DTensor":
        return np.ravel(self)

    def swapaxes(self, axis1: int, axis2: int) -> "DTensor":
        return np.swapaxes(self, axis1, axis2)

    def squeeze(self, axis: Any = None) -> "DTensor":
        return np.squeeze(self, axis)

    def astype(self, dtype: Any) -> "DTensor":
        from .dispatch import _run
        from .propagation.elementwise import ASTYPE

        return _run(ASTYPE, (self, dtype), {})

    def sum(self, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> "DTensor":
        return np.sum(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def mean(self, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> "DTensor":
        return np.mean(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def max(self, axis: Any = None, keepdims: bool = False) -> "DTensor":
        return np.max(self, axis=axis, keepdims=keepdims)

    def min(self, axis: Any = None, keepdims: bool = False) -> "DTensor":
        return np.min(self, axis=axis, keepdims=keepdims)

    def prod(self, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> "DTensor":
        return np.prod(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def any(self, axis: Any = None, keepdims: bool = False) -> "DTensor":
        return np.any(self, axis=axis, keepdims=keepdims)

    def all(self, axis: Any = None, keepdims: bool = False) -> "DTensor":
        return np.all(self, axis=axis, keepdims=keepdims)

    def clip(self, a_min: Any = None, a_max: Any = None) -> "DTensor":
        return np.clip(self, a_min, a_max)

    def __repr__(self) -> str:
        return (
            f"DTensor(shape={self.shape}, dtype={self.dtype}, placements={placements_str(self.placements)}, "
            f"mesh={self.mesh!r})"
        )


register_sharded_type(DTensor)

# DTensor.redistribute builds its result from a shards dict that nothing else holds (no copy).
_recent_get = _RECENT.get
_new_dtensor = DTensor.__new__
_set_shards = DTensor._shards.__set__  # type: ignore[attr-defined]
_set_spec = DTensor._spec.__set__  # type: ignore[attr-defined]


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

    Under MPI, rank ``src_data_rank``'s array is the one distributed (the
    others' are only checked for shape and dtype); with ``src_data_rank=None``
    every rank takes its shard from its own copy, with no communication.
    ``Partial`` placements start from the replicated value (``sum`` divides
    floats by the group size; integers stay on the first rank).

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
    try:
        array = check_array(array)
        spec = DTensorSpec(mesh, _as_tuple(placements), TensorMeta(array.shape, array.dtype))
    except (TypeError, ValueError) as e:
        error = e
    if mesh.backend == "mpi" and src_data_rank is not None:
        me = backend.ranks[0]
        status = 0 if error is None else (1 if isinstance(error, TypeError) else 2)
        table = backend.gather_descriptors({me: (status,)})
        failed = {r: row[0] for r, row in table.items() if row[0] != 0}
        if error is not None and len(failed) == len(table):
            raise error  # the same input everywhere: every rank raises its own (identical) error
        if failed:
            r0 = min(failed)
            kind = TypeError if failed[r0] == 1 else ShardingError
            detail = f": {error}" if error is not None else "; see the error raised there"
            raise kind(f"distribute_tensor: rank {min(failed) if error is None else me}'s array or placements were refused{detail}") from error
    elif error is not None:
        raise error
    if mesh.backend == "mpi" and src_data_rank is not None:
        world = (tuple(range(mesh.world_size)),)
        array = backend.broadcast({r: array for r in backend.ranks}, world, root=src_data_rank)[backend.ranks[0]]
    replicated = DTensorSpec(
        mesh,
        tuple(Replicate() if isinstance(p, Partial) else p for p in spec.placements),
        spec.tensor_meta,
    )
    shards = {}
    for rank in backend.ranks:
        local_shape, offset = _local_block(spec.shape, mesh.shape, spec.shard_order, mesh.coordinate_of(rank))
        index = tuple(slice(o, o + n) for o, n in zip(offset, local_shape))
        shards[rank] = array[index].copy(order="C")
    if replicated == spec:
        return DTensor(shards, spec)
    return DTensor(redistribute_shards(shards, replicated, spec, backend), spec)
