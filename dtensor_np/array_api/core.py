"""``ArrayNamespace``: the Array API functions over one mesh, and where new arrays are placed.

Example:
    >>> import dtensor_np as dt
    >>> xp = namespace(dt.DeviceMesh((2,)), "replicate")
    >>> xp.zeros((2, 3)).placements
    (Replicate(),)
    >>> xp.zeros((4, 2), device=dt.Sharding(xp.mesh, [dt.Shard(1)])).placements
    (Shard(dim=1),)
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np

from ..devices import Sharding, mesh_of_device
from ..dtensor import DTensor, distribute_tensor, register_namespace_factory
from ..errors import ShardingError
from ..mesh import DeviceMesh
from ..placements import Placement, Replicate, Shard

__all__ = ["ArrayNamespace", "POLICIES", "namespace"]

Policy = Union[str, Callable[[tuple[int, ...]], Sequence[Placement]]]
POLICIES = ("shard_first", "shard_last", "replicate")


class ArrayNamespace:
    """The Array API namespace of one mesh and default placement policy (see :mod:`dtensor_np.array_api`)."""

    __array_api_version__ = "2024.12"

    def __init__(self, mesh: DeviceMesh, default: Policy) -> None:
        if not isinstance(mesh, DeviceMesh):
            raise TypeError(f"namespace needs a DeviceMesh, got {type(mesh).__name__}")
        if not (default in POLICIES or callable(default)):
            raise ShardingError(f"default must be one of {POLICIES} or a function shape -> placements, got {default!r}")
        self.mesh = mesh
        self.default = default
        self.__name__ = "dtensor_np.array_api"

    def __repr__(self) -> str:
        policy = self.default if isinstance(self.default, str) else getattr(self.default, "__name__", "a function")
        return f"<dtensor_np.array_api namespace on {self.mesh!r}, default {policy}>"

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
            return tuple(policy(tuple(shape)))
        if policy == "replicate" or not shape:
            return (Replicate(),) * ndim
        return (Shard(0 if policy == "shard_first" else len(shape) - 1),) * ndim

    def place(self, array: Any, device: Any = None) -> DTensor:
        """A full array, the same on every rank, as a DTensor of this namespace: each rank keeps its block (no communication)."""
        array = np.asarray(array)
        x = distribute_tensor(array, self.mesh, self.placements_for(array.shape, device), src_data_rank=None)
        return DTensor(x.shards, x.spec, namespace=self)

    # -- creation ------------------------------------------------------------------------------
    def asarray(self, obj: Any, /, *, dtype: Any = None, device: Any = None, copy: Optional[bool] = None) -> DTensor:
        """``obj`` as an array of this namespace: a DTensor (redistributed to ``device``'s placements if given) as it is,
        anything else as the same full array on every rank, of which each rank keeps its block."""
        if isinstance(obj, DTensor):
            out = obj if dtype is None or obj.dtype == np.dtype(dtype) else obj.astype(dtype)
            if isinstance(device, Sharding) and out.placements != device.placements:
                out = out.to_device(device)
            return DTensor(out.shards, out.spec, namespace=self)
        return self.place(np.asarray(obj, dtype=dtype), device)

    def zeros(self, shape: Any, *, dtype: Any = None, device: Any = None) -> DTensor:
        """An array of zeros (each rank allocates its block only)."""
        return self._filled(shape, 0, dtype, device)

    def ones(self, shape: Any, *, dtype: Any = None, device: Any = None) -> DTensor:
        """An array of ones (each rank allocates its block only)."""
        return self._filled(shape, 1, dtype, device)

    def _filled(self, shape: Any, value: Any, dtype: Any, device: Any) -> DTensor:
        shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        dtype = np.dtype(float if dtype is None else dtype)
        placements = self.placements_for(shape, device)
        from ..spec import DTensorSpec, TensorMeta

        spec = DTensorSpec(self.mesh, placements, TensorMeta(shape, dtype))
        shards = {r: np.full(spec.local_shape_of_rank(r), value, dtype) for r in _ranks(self.mesh)}
        return DTensor(shards, spec, namespace=self)


def _ranks(mesh: DeviceMesh) -> tuple[int, ...]:
    from ..runtime import backend_for

    return backend_for(mesh).ranks


def namespace(mesh: DeviceMesh, default: Policy = "shard_first") -> ArrayNamespace:
    """The Array API namespace of ``mesh`` with the ``default`` placement policy (one object per pair)."""
    return _namespace(mesh, default)


@lru_cache(maxsize=256)
def _namespace(mesh: DeviceMesh, default: Policy) -> ArrayNamespace:
    return ArrayNamespace(mesh, default)


register_namespace_factory(namespace)
