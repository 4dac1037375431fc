"""``xp.__array_namespace_info__()``: what the namespace supports, its device (the mesh) and its dtypes.

The dtypes and default dtypes are NumPy's (``float64``, ``complex128``,
``int64``, index ``int64``); the one device is the namespace's mesh.
Boolean indexing and data-dependent shapes (``unique_*``, ``nonzero``) are
supported: the ranks agree on the sizes of such results before any data moves.

Example:
    >>> import dtensor_np as dt
    >>> mesh = dt.DeviceMesh((2,))
    >>> info = dt.array_api.namespace(mesh).__array_namespace_info__()
    >>> info.devices() == [mesh], info.default_dtypes()["integral"], sorted(info.dtypes(kind="bool"))
    (True, dtype('int64'), ['bool'])
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..devices import mesh_of_device
from ..errors import ShardingError
from ..mesh import DeviceMesh

__all__ = ["ArrayNamespaceInfo"]

_NUMPY = np.__array_namespace_info__()


class ArrayNamespaceInfo:
    """The inspection object of one namespace (see the module docstring)."""

    __slots__ = ("mesh",)

    def __init__(self, mesh: DeviceMesh) -> None:
        self.mesh = mesh

    def _check(self, device: Any) -> None:
        if device is not None and mesh_of_device(device) is not self.mesh:
            raise ShardingError(f"device {device!r} is not this namespace's mesh {self.mesh!r}")

    def capabilities(self) -> dict[str, Any]:
        """``boolean indexing`` and ``data-dependent shapes`` (both True), NumPy's ``max dimensions``."""
        return {"boolean indexing": True, "data-dependent shapes": True,
                "max dimensions": _NUMPY.capabilities()["max dimensions"]}

    def default_device(self) -> DeviceMesh:
        """The mesh (arrays made without ``device=`` are placed on it by the default policy)."""
        return self.mesh

    def devices(self) -> list[DeviceMesh]:
        """``[mesh]``: the one device of the namespace."""
        return [self.mesh]

    def default_dtypes(self, *, device: Any = None) -> dict[str, np.dtype]:
        """NumPy's default dtypes, by kind."""
        self._check(device)
        return _NUMPY.default_dtypes()

    def dtypes(self, *, device: Any = None, kind: Optional[Any] = None) -> dict[str, np.dtype]:
        """The dtypes of a ``kind`` (a kind name or a tuple of them; all of them for None), by name."""
        self._check(device)
        return _NUMPY.dtypes(kind=kind)
