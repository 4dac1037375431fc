"""``ArrayNamespace``: the Array API functions over one mesh, and where new arrays are placed.

The namespace is built from tables, one module per group of the standard
(:mod:`.creation`, :mod:`.elementwise`, :mod:`.statistics`,
:mod:`.manipulation`, :mod:`.searching_sorting`, :mod:`.set_functions`,
:mod:`.indexing_functions`, :mod:`.utility`, :mod:`.linalg`, :mod:`.fft`,
:mod:`.dtypes`, :mod:`.info`; SciPy's elementwise special functions as
``xp.special``: :mod:`.special`).  A table maps a standard name to a
function of arrays (often NumPy's own function of that name: the call
dispatches through ``__array_function__``/``__array_ufunc__`` and the op's
sharding rule decides the communication); the namespace wraps each one so that its results
are arrays of this namespace (:meth:`ArrayNamespace.adopt`).  Creation
functions take the namespace first and are bound to it.

Example:
    >>> import dtensor_np as dt
    >>> xp = namespace(dt.DeviceMesh((2,)), "replicate")
    >>> xp.zeros((2, 3)).placements
    (Replicate(),)
    >>> xp.zeros((4, 2), device=dt.Sharding(xp.mesh, [dt.Shard(1)])).placements
    (Shard(dim=1),)
    >>> y = xp.add(xp.ones(3), 1)
    >>> y.__array_namespace__() is xp, xp.float32, xp.linalg.vector_norm.__name__
    (True, dtype('float32'), 'vector_norm')
"""

from __future__ import annotations

import functools
import math
from types import MethodType
from typing import Any, Callable, Mapping, Sequence, Union

import numpy as np

from collectives import array_module, memo

from ..devices import Sharding, mesh_of_device
from ..dtensor import DTensor, distribute_tensor, register_namespace_factory
from ..errors import ShardingError
from ..mesh import DeviceMesh
from ..placements import Placement, Replicate, Shard
from . import creation, dtypes, elementwise, fft, indexing_functions, linalg, manipulation, searching_sorting
from . import set_functions, statistics, utility
from .info import ArrayNamespaceInfo
from .special import SpecialFunctions

__all__ = ["ArrayNamespace", "Extension", "CONSTANTS", "POLICIES", "namespace"]

Policy = Union[str, Callable[[tuple[int, ...]], Sequence[Placement]]]
POLICIES = ("shard_first", "shard_last", "replicate")

CONSTANTS: dict[str, Any] = {"e": math.e, "inf": math.inf, "nan": math.nan, "newaxis": None, "pi": math.pi}

_TABLES = (
    creation.FUNCTIONS,
    dtypes.FUNCTIONS,
    elementwise.FUNCTIONS,
    indexing_functions.FUNCTIONS,
    linalg.FUNCTIONS,
    manipulation.FUNCTIONS,
    searching_sorting.FUNCTIONS,
    set_functions.FUNCTIONS,
    statistics.FUNCTIONS,
    utility.FUNCTIONS,
)


class Extension:
    """An extension's sub-namespace (``xp.linalg``, ``xp.fft``): its functions as attributes."""

    def __init__(self, name: str, functions: Mapping[str, Callable[..., Any]]) -> None:
        self.__name__ = name
        for key, f in functions.items():
            setattr(self, key, f)

    def __repr__(self) -> str:
        return f"<{self.__name__}>"


class ArrayNamespace:
    """The Array API namespace of one mesh and default placement policy (see :mod:`dtensor_np.array_api`).

    Example:
        >>> import dtensor_np as dt
        >>> xp = dt.array_api.namespace(dt.DeviceMesh((2,)))
        >>> isinstance(xp, ArrayNamespace), xp.ones((4,)).placements
        (True, (Shard(dim=0),))
    """

    __array_api_version__ = "2024.12"

    def __init__(self, mesh: DeviceMesh, default: Policy) -> None:
        if not isinstance(mesh, DeviceMesh):
            raise TypeError(f"namespace needs a DeviceMesh, got {type(mesh).__name__}")
        if not (default in POLICIES or callable(default)):
            raise ShardingError(f"default must be one of {POLICIES} or a function shape -> placements, got {default!r}")
        self.mesh = mesh
        self.default = default
        self.__name__ = "dtensor_np.array_api"
        self._info = ArrayNamespaceInfo(mesh)
        for values in (dtypes.DTYPES, CONSTANTS):
            for name, value in values.items():
                setattr(self, name, value)
        for table in _TABLES:
            for name, f in table.items():
                setattr(self, name, self._adopting(name, f))
        for name, f in creation.NAMESPACE_FUNCTIONS.items():
            setattr(self, name, MethodType(f, self))
        self.linalg = Extension(f"{self.__name__}.linalg",
                                {name: self._adopting(name, f) for name, f in linalg.LINALG.items()})
        self.fft = Extension(f"{self.__name__}.fft", {
            **{name: self._adopting(name, f) for name, f in fft.FUNCTIONS.items()},
            **{name: MethodType(f, self) for name, f in fft.NAMESPACE_FUNCTIONS.items()},
        })
        self.special = SpecialFunctions(f"{self.__name__}.special", self)

    def __repr__(self) -> str:
        policy = self.default if isinstance(self.default, str) else getattr(self.default, "__name__", "a function")
        return f"<dtensor_np.array_api namespace on {self.mesh!r}, default {policy}>"

    def __array_namespace_info__(self) -> ArrayNamespaceInfo:
        """The inspection object: capabilities, the device (the mesh), the dtypes (see :mod:`.info`)."""
        return self._info

    # -- placing new arrays -----------------------------------------------------------------
    def placements_for(self, shape: tuple[int, ...], device: Any = None) -> tuple[Placement, ...]:
        """Where an array of ``shape`` made with ``device`` goes: the Sharding's placements, else the policy's."""
        if isinstance(device, Sharding):
            if device.mesh is not self.mesh:
                raise ShardingError(f"device {device} is on another mesh than this namespace's {self.mesh!r}")
            return device.placements
        if device is not None and mesh_of_device(device) is not self.mesh:
            raise ShardingError(f"device {device!r} is another mesh than this namespace's {self.mesh!r}")
        ndim = self.mesh.ndim
        policy = self.default
        if callable(policy):
            return Sharding(self.mesh, tuple(policy(tuple(shape)))).placements
        if policy == "replicate" or not shape:
            return (Replicate(),) * ndim
        return (Shard(0 if policy == "shard_first" else len(shape) - 1),) * ndim

    def place(self, array: Any, device: Any = None) -> DTensor:
        """A full array, the same on every rank, as a DTensor of this namespace: each rank keeps its block (no communication).

        A CuPy array stays on the device; anything else becomes a NumPy array.
        """
        array = array_module(array).asarray(array)
        x = distribute_tensor(array, self.mesh, self.placements_for(array.shape, device), src_data_rank=None)
        return DTensor(x.shards, x.spec, namespace=self)

    # -- results ------------------------------------------------------------------------------
    def adopt(self, value: Any) -> Any:
        """A function's result as arrays of this namespace.

        DTensors get this namespace (a new handle on the same shards), NumPy
        arrays (from calls without a DTensor) are placed like ``asarray``'s,
        tuples (named ones too) and lists are adopted item by item; anything
        else is returned as it is.
        """
        if isinstance(value, DTensor):
            return value if value.namespace is self else DTensor(value.shards, value.spec, namespace=self)
        if isinstance(value, (np.ndarray, np.generic)):
            return self.place(value)
        if isinstance(value, tuple):
            items = [self.adopt(v) for v in value]
            return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
        if isinstance(value, list):
            return [self.adopt(v) for v in value]
        return value

    def _adopting(self, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        """``func`` under the standard's ``name``, its results adopted (its signature and docs kept)."""

        @functools.wraps(func)
        def call(*args: Any, **kwargs: Any) -> Any:
            return self.adopt(func(*args, **kwargs))

        call.__name__ = call.__qualname__ = name
        return call


def namespace(mesh: DeviceMesh, default: Policy = "shard_first") -> ArrayNamespace:
    """The Array API namespace of ``mesh`` with the ``default`` placement policy (one object per pair).

    Example:
        >>> import dtensor_np as dt
        >>> xp = namespace(dt.DeviceMesh((2,)), default="replicate")
        >>> xp.zeros((3,)).placements
        (Replicate(),)
    """
    return _namespace(mesh, default)


@memo(maxsize=256, name="dtensor_np.array_api_namespaces")
def _namespace(mesh: DeviceMesh, default: Policy) -> ArrayNamespace:
    return ArrayNamespace(mesh, default)


register_namespace_factory(namespace)
