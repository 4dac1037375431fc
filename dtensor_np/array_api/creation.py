"""Creation functions of the Array API namespace: new arrays placed on the namespace's mesh.

Every function takes ``device=`` as the Array API says: ``None`` or the mesh
(``x.device``) places the array by the namespace's default policy, a
:class:`~dtensor_np.Sharding` places it explicitly.  ``zeros``, ``ones``,
``empty``, ``full``, ``eye`` and the ``*_like`` functions allocate on every
rank its own block only (NumPy's function on the block's shape; no
communication); ``arange``, ``linspace`` and ``asarray`` build the full array
with NumPy on every rank (the same data everywhere) and each rank keeps its
block.  ``*_like(x)`` keeps ``x``'s placements unless ``device`` says
otherwise (a pending sum becomes replicated: the new values are whole).

``asarray(obj, copy=...)`` follows the standard with values that are never
written in place: ``copy=True`` gives a new handle (on the same shards, which
nothing can change), ``copy=None`` or ``False`` give a DTensor of this
namespace itself (``x[i] = v`` afterwards shows through both names, as a view
would), and a DTensor of another namespace as a new handle of this one.  Anything that must be converted (a cast, a move to other
placements, host data put on the mesh) is a copy, which ``copy=False``
refuses with ``ValueError``.  ``from_dlpack`` takes DTensors too (as
``asarray``), since a distributed array cannot be exported through DLPack.

Each function takes the namespace first; :class:`~dtensor_np.array_api.ArrayNamespace`
binds it (``xp.zeros(shape)``).

Example:
    >>> import dtensor_np as dt
    >>> xp = dt.array_api.namespace(dt.DeviceMesh((2,)))
    >>> x = xp.eye(3, 4, k=1, device=dt.Sharding(xp.mesh, [dt.Shard(1)]))
    >>> x.placements, x.local_shards()[1].tolist()
    ((Shard(dim=1),), [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    >>> xp.asarray(x) is x, xp.asarray(x, copy=True) is x
    (True, False)
    >>> xp.full_like(x, 7, dtype=xp.int8).placements, xp.arange(5).local_shards()[0].tolist()
    ((Shard(dim=1),), [0, 1, 2])
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Optional

import numpy as np

from collectives import array_module

from ..devices import Sharding
from ..dtensor import DTensor
from ..errors import ShardingError
from ..int_tuple import as_ints, is_integer
from ..placements import Partial, Replicate
from ..runtime import backend_for
from ..spec import DTensorSpec, TensorMeta

__all__ = ["NAMESPACE_FUNCTIONS", "FUNCTIONS", "block_array", "normalize_shape"]

Block = Callable[[tuple[int, ...], tuple[int, ...]], Any]  # (shape, offset) -> that block of the array


def normalize_shape(shape: Any) -> tuple[int, ...]:
    """An Array API shape (an int or a sequence of ints) as a tuple; ``TypeError``/``ValueError`` otherwise."""
    dims = as_ints((shape,) if is_integer(shape) else shape, "shape", "an int or a sequence of ints")
    if any(d < 0 for d in dims):
        raise ValueError(f"negative dimensions are not allowed, got shape {dims}")
    return dims


def block_array(xp: Any, shape: tuple[int, ...], dtype: Any, placements: tuple, block: Block) -> DTensor:
    """A DTensor of ``xp`` whose every rank makes its own block with ``block(shape, offset)`` (no communication).

    Placements with a pending reduction start from the whole array, as
    ``distribute_tensor`` places it.
    """
    spec = DTensorSpec(xp.mesh, placements, TensorMeta(shape, dtype))
    if any(isinstance(p, Partial) for p in placements):
        return xp.place(block(shape, (0,) * len(shape)), Sharding(xp.mesh, placements))
    shards = {r: block(*spec.local_block(r)) for r in backend_for(xp.mesh).ranks}
    return DTensor(shards, spec, namespace=xp)


def _filled(xp: Any, shape: Any, dtype: Any, device: Any, make: Callable[..., Any]) -> DTensor:
    """An array made blockwise by ``make(block_shape, block_offset, dtype)``; float64 without ``dtype``."""
    shape = normalize_shape(shape)
    dtype = np.dtype(np.float64 if dtype is None else dtype)
    return block_array(xp, shape, dtype, xp.placements_for(shape, device), lambda s, o: make(s, o, dtype))


def zeros(xp: Any, shape: Any, *, dtype: Any = None, device: Any = None) -> DTensor:
    """An array of zeros (``numpy.zeros`` of each rank's block)."""
    return _filled(xp, shape, dtype, device, lambda s, o, d: np.zeros(s, d))


def ones(xp: Any, shape: Any, *, dtype: Any = None, device: Any = None) -> DTensor:
    """An array of ones (``numpy.ones`` of each rank's block)."""
    return _filled(xp, shape, dtype, device, lambda s, o, d: np.ones(s, d))


def empty(xp: Any, shape: Any, *, dtype: Any = None, device: Any = None) -> DTensor:
    """An uninitialised array (``numpy.empty`` of each rank's block)."""
    return _filled(xp, shape, dtype, device, lambda s, o, d: np.empty(s, d))


def full(xp: Any, shape: Any, fill_value: Any, *, dtype: Any = None, device: Any = None) -> DTensor:
    """An array of ``fill_value``; without ``dtype``, NumPy's dtype of the Python scalar (bool, int64, float64...)."""
    dtype = np.asarray(fill_value).dtype if dtype is None else dtype
    return _filled(xp, shape, dtype, device, lambda s, o, d: np.full(s, fill_value, d))


def eye(xp: Any, n_rows: int, n_cols: Optional[int] = None, /, *, k: int = 0, dtype: Any = None,
        device: Any = None) -> DTensor:
    """Ones on the ``k``-th diagonal: each rank's block is ``numpy.eye`` of its shape, the diagonal moved by its offset."""
    k = operator.index(k)
    shape = (n_rows, n_rows if n_cols is None else n_cols)
    return _filled(xp, shape, dtype, device, lambda s, o, d: np.eye(s[0], s[1], k=k + o[0] - o[1], dtype=d))


def _like(xp: Any, x: DTensor, dtype: Any, device: Any, make: Callable[..., Any]) -> DTensor:
    """An array of ``x``'s shape, on ``x``'s placements (pending sums replicated) unless ``device`` is given,
    each block ``make(library, block_shape, dtype)`` in ``x``'s array library (CuPy shards make CuPy blocks)."""
    if not isinstance(x, DTensor):
        raise TypeError(f"expected a DTensor, got {type(x).__name__}")
    if device is None:
        if x.mesh is not xp.mesh:
            raise ShardingError(f"the array is on {x.mesh!r}, this namespace on {xp.mesh!r}")
        device = Sharding(xp.mesh, [Replicate() if isinstance(p, Partial) else p for p in x.placements])
    library = array_module(next(iter(x.shards.values())))
    return _filled(xp, x.shape, x.dtype if dtype is None else dtype, device, lambda s, o, d: make(library, s, d))


def zeros_like(xp: Any, x: DTensor, /, *, dtype: Any = None, device: Any = None) -> DTensor:
    """Zeros of ``x``'s shape (and dtype, placements)."""
    return _like(xp, x, dtype, device, lambda lib, s, d: lib.zeros(s, d))


def ones_like(xp: Any, x: DTensor, /, *, dtype: Any = None, device: Any = None) -> DTensor:
    """Ones of ``x``'s shape (and dtype, placements)."""
    return _like(xp, x, dtype, device, lambda lib, s, d: lib.ones(s, d))


def empty_like(xp: Any, x: DTensor, /, *, dtype: Any = None, device: Any = None) -> DTensor:
    """An uninitialised array of ``x``'s shape (and dtype, placements)."""
    return _like(xp, x, dtype, device, lambda lib, s, d: lib.empty(s, d))


def full_like(xp: Any, x: DTensor, /, fill_value: Any, *, dtype: Any = None, device: Any = None) -> DTensor:
    """``fill_value`` in an array of ``x``'s shape (and dtype, placements)."""
    return _like(xp, x, dtype, device, lambda lib, s, d: lib.full(s, fill_value, d))


def arange(xp: Any, start: Any, /, stop: Any = None, step: Any = 1, *, dtype: Any = None,
           device: Any = None) -> DTensor:
    """``numpy.arange`` (the same on every rank), each rank keeping its block."""
    return xp.place(np.arange(start, stop, step, dtype=dtype), device)


def linspace(xp: Any, start: Any, stop: Any, /, num: int, *, dtype: Any = None, device: Any = None,
             endpoint: bool = True) -> DTensor:
    """``numpy.linspace`` (the same on every rank), each rank keeping its block."""
    return xp.place(np.linspace(start, stop, num, endpoint=endpoint, dtype=dtype), device)


def asarray(xp: Any, obj: Any, /, *, dtype: Any = None, device: Any = None, copy: Optional[bool] = None) -> DTensor:
    """``obj`` as an array of this namespace (see the module docstring for ``copy``).

    A DTensor is cast to ``dtype`` and moved to ``device``'s placements when
    they differ; a nested sequence holding DTensors is stacked (with
    ``numpy.stack``: nothing is gathered), as arrays are; anything else is
    NumPy's ``asarray`` (the same data on every rank, NumPy's dtype
    inference), of which each rank keeps its block.
    """
    if copy not in (None, True, False):
        raise TypeError(f"asarray: copy must be True, False or None, got {copy!r}")
    if isinstance(obj, DTensor):
        return _asarray_dtensor(xp, obj, dtype, device, copy)
    if copy is False:
        raise ValueError(
            f"asarray(copy=False): a {type(obj).__name__} must be copied to become a distributed array "
            "(each rank keeps a copy of its block); pass copy=None or True"
        )
    if _holds_dtensors(obj):
        return _asarray_dtensor(xp, _stacked(xp, obj), dtype, device, None)
    return xp.place(array_module(obj).asarray(obj, dtype=dtype), device)  # a CuPy array stays on the device


def _asarray_dtensor(xp: Any, x: DTensor, dtype: Any, device: Any, copy: Optional[bool]) -> DTensor:
    if x.mesh is not xp.mesh:
        raise ShardingError(f"asarray: the array is on {x.mesh!r}, this namespace on {xp.mesh!r}")
    cast = dtype is not None and np.dtype(dtype) != x.dtype
    move = isinstance(device, Sharding) and device.placements != x.placements
    if device is not None:
        xp.placements_for(x.shape, device)  # a device of another mesh raises
    if copy is False and (cast or move):
        raise ValueError(
            f"asarray(copy=False): making {'a ' + str(np.dtype(dtype)) if cast else 'another placement'} of the "
            "array needs a copy; pass copy=None or True"
        )
    out = x.astype(dtype) if cast else x
    out = out.to_device(device) if move else out
    if out is x and (copy or x.namespace is not xp):
        return DTensor(x.shards, x.spec, namespace=xp)
    return out if out.namespace is xp else DTensor(out.shards, out.spec, namespace=xp)


def _holds_dtensors(obj: Any) -> bool:
    return isinstance(obj, (list, tuple)) and any(isinstance(o, DTensor) or _holds_dtensors(o) for o in obj)


def _stacked(xp: Any, obj: Any) -> DTensor:
    """A nested sequence holding DTensors, stacked level by level (``numpy.stack``: nothing is gathered)."""
    if isinstance(obj, DTensor):
        return obj
    if isinstance(obj, (list, tuple)) and obj:
        return np.stack([_stacked(xp, o) for o in obj])
    return xp.place(np.asarray(obj))


def from_dlpack(xp: Any, x: Any, /, *, device: Any = None, copy: Optional[bool] = None) -> DTensor:
    """An array of this namespace from a DLPack exporter (``numpy.from_dlpack``; the same data on every rank).

    A DTensor is taken as by ``asarray`` onto a device of this namespace; with
    ``device="cpu"`` (another library's device: host memory) it is the
    standard's explicit cross-device copy, the whole array on every rank as a
    NumPy array (``np.from_dlpack(x, device="cpu")``), as scikit-learn's
    ``move_to`` asks for it.
    """
    if isinstance(x, DTensor):
        if isinstance(device, str) and device == "cpu":
            return np.from_dlpack(x, device="cpu", copy=copy)
        return asarray(xp, x, device=device, copy=copy)
    if copy is False:
        raise BufferError("from_dlpack(copy=False): host data must be copied to become a distributed array")
    return xp.place(np.from_dlpack(x), device)


def meshgrid(*arrays: DTensor, indexing: str = "xy") -> list[DTensor]:
    """``numpy.meshgrid`` as a list, as the standard says."""
    return list(np.meshgrid(*arrays, indexing=indexing))


NAMESPACE_FUNCTIONS: dict[str, Callable[..., Any]] = {
    f.__name__: f
    for f in (arange, asarray, empty, empty_like, eye, from_dlpack, full, full_like, linspace, ones, ones_like,
              zeros, zeros_like)
}
"""Creation functions that take the namespace first (bound to it as methods)."""

FUNCTIONS: dict[str, Callable[..., Any]] = {"meshgrid": meshgrid, "tril": np.tril, "triu": np.triu}
